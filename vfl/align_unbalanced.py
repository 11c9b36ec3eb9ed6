"""Unbalanced PSI over a federation: a small party aligns its rows with a very large one's.

A clinic of 10,000 patients and a registry of 10 million train a vertical model on the
patients both hold. Balanced ECDH PSI (``vfl.align_party(method="psi")``) makes the clinic
re-blind all 10 million of the registry's points; here the clinic's work and the points it
sends grow with its own set only, and the registry's with its set once (the OPRF of
:mod:`linkage.unbalanced`, 2HashDH over P-256). Two roles, written once against the
:class:`~vfl.federation.Federation` (tags ``align/upsi-...``, typed messages only):

* the **server** (the large party) draws a fresh OPRF key for the job (or uses the
  :class:`~linkage.UnbalancedPsiServer` it is given, with its long-term key), and
  1. sends its public key ``[k]G``, the offline set's size and width, and how many more
     evaluations the client may ask for (:class:`OprfKey`);
  2. prepares the offline set (``F_k(y)`` of each of its IDs, sorted) and sends it in chunks
     (:class:`OfflineChunk`; 12 bytes per ID);
  3. answers the client's blinded points (:meth:`linkage.UnbalancedPsiServer.evaluate`),
     after checking the client's caps for the whole job -- ``max_evaluations`` points,
     ``max_queries`` queries, ``max_items`` points per query, counted under the client's
     party name (its certificate's, in a deployment) and, with a ``ledger`` file, across jobs
     -- and that every point is 32 bytes and the x-coordinate of a P-256 point; a client past
     a cap, or with a malformed point, is refused with an error naming it;
  4. receives the positions, in its offline set, of the IDs the client matched.
* the **client** (the small party) blinds its IDs with a fresh scalar, mixes in
  ``probes`` points whose answers it can check against the server's public key, sends them
  (:class:`~vfl.alignment.PsiPoints`), checks and unblinds the answers, looks them up in the
  offline set and tells the server the positions it matched (:class:`~vfl.alignment.RowPositions`,
  ascending: nothing of its own order).

Both then hold the common IDs and sort them by ``SHA-256(order_key || id)``, exactly as
two-party ECDH PSI does (:func:`vfl.alignment.common_order`): each party ends with its own
frame reordered to the common patients, indexed ``0 .. n_common - 1`` (``common_row``), its
original row labels in ``frame.attrs["source_rows"]``.

**What each side learns** (honest-but-curious parties; the one-more Gap-Diffie-Hellman and
decisional Diffie-Hellman assumptions, random oracles):

* the client: which of its rows are common, in the common order (the intersection and the
  pairing), the size of the server's set (the offline set's length), the server's public key
  and its own remaining allowance. It can test any ID it puts in its query -- which is why
  the server caps the points per client -- and nothing about the server's other IDs: the
  offline set's values are pseudorandom without ``k``, and useless after the job when the
  key is fresh per job (the default);
* the server: the number of points the client sent (its set size plus its probes, whose
  number is public) and, because the client tells it the matches, which of its own rows are
  common -- the intersection. Vertical training needs that: both parties must hold the
  common rows in one order. This is what two-party ECDH PSI reveals too (each learns the
  intersection and the other's set size); what unbalanced PSI saves is work and bytes, not
  disclosure. Nothing about the client's IDs outside the intersection: every point it sees
  is ``[a]H(x)`` for a fresh secret ``a``, in a secret random order. A client that only needs
  to learn membership, and must not tell the server, uses :mod:`linkage.unbalanced` directly.

**A deviating party** gains at most a failed or wrong alignment: a client past its caps, with
malformed points, or positions out of range, repeated or more than the points it sent, is
refused by name; one that reports matches it did not find spoils its own alignment (the
server cannot check them). A server that sends an unsorted set, chunks of the wrong size or an
invalid public key is refused by name; one that answers the whole query with another key than
its public key's is caught by the probes with certainty, one that deviates on a fraction
``f`` of the points with probability about ``1 - (1 - f)^probes``.

.. warning::
   The OPRF is not *verifiable*: the probes are a statistical check, not a proof for each
   point (a batched DLEQ proof would need elliptic-curve point addition, which
   ``cryptography`` does not expose; see :mod:`linkage.unbalanced`), and nobody can check
   that the offline set was made with the committed key. A server that evaluates one point
   with another key escapes the probes with probability ``n / (n + probes)``; what it could
   learn that way -- whether one particular (secret, random) position of the query matched
   -- it learns anyway here, where the client tells it the intersection.

**Costs** (measured by ``python benchmarks/linkage.py --psi-only``): the server ``N`` OPRF
evaluations offline and ``n + probes`` online; the client ``n + probes`` blindings and
unblindings and ``n`` binary searches; bytes: ``12 N`` from the server (the offline set) and
``32 (n + probes)`` each way, plus the matched positions (8 bytes each).

:func:`align_unbalanced` runs both roles in one process (simulation);
:func:`align_unbalanced_party` runs one party's role on its own federation (deployment).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import linkage
from linkage.unbalanced import DIGEST_BYTES, OprfCheckError, key_id_of
from vfl.alignment import (
    ALIGN,
    PsiPoints,
    RowPositions,
    aligned_frame,
    check_positions,
    common_order,
)
from vfl.federation.base import Federation
from vfl.federation.local import LocalFederation
from vfl.federation.messages import Message

__all__ = [
    "DEFAULT_PROBES",
    "SET_CHUNK",
    "OfflineChunk",
    "OprfKey",
    "align_unbalanced",
    "align_unbalanced_party",
    "query_unbalanced_psi",
    "serve_unbalanced_psi",
]

logger = logging.getLogger(__name__)

DEFAULT_PROBES = 32
"""Probe points a client mixes into its query by default (module docstring)."""

SET_CHUNK = 2**22
"""Offline-set values per message (48 MiB at 12 bytes: well under the wire's size limit)."""


@dataclass(frozen=True)
class OprfKey(Message):
    """The server's commitment and the shape of what follows: its public key ``[k]G``
    (a 33-byte compressed P-256 point, whose hash is the offline set's ``key_id``), the
    offline set's size and bytes per value, values per :class:`OfflineChunk`, and how many
    more OPRF evaluations the client may ask for (None: no cap)."""

    KIND = "unbalanced PSI key"
    public_key: bytes
    digest_bytes: int
    size: int
    chunk: int
    allowance: int | None = None


@dataclass(frozen=True)
class OfflineChunk(Message):
    """Consecutive values of the server's offline set (sorted), concatenated."""

    KIND = "offline set chunk"
    digests: bytes


def align_unbalanced(
    frames: dict[str, pd.DataFrame],
    *,
    server: str,
    id_column: str,
    order_key: bytes | str | None = None,
    max_evaluations: int | None = None,
    probes: int = DEFAULT_PROBES,
    digest_bytes: int = DIGEST_BYTES,
    workers: Any = None,
) -> dict[str, pd.DataFrame]:
    """Align two parties' ``frames`` by unbalanced PSI, both roles simulated in this process.

    ``max_evaluations`` defaults to the client's rows plus its probes (exactly what it
    needs); see :func:`align_unbalanced_party` for the other parameters.

    Returns
    -------
    dict of str to DataFrame
        Each party's rows of the common IDs, in the common order.
    """
    if not isinstance(frames, dict) or len(frames) != 2:
        raise ValueError("unbalanced PSI aligns exactly two parties: pass a dict of two frames")
    _check_server(server, list(frames))
    for name, frame in frames.items():  # checked at the door, before either role starts
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"party {name!r}: expected a DataFrame, got {type(frame).__name__}")
        if id_column not in frame.columns:
            raise ValueError(
                f"party {name!r}: unbalanced PSI needs its id_column ({id_column!r} is not one "
                f"of its columns {list(frame.columns)})"
            )
    client = next(p for p in frames if p != server)
    if max_evaluations is None:
        max_evaluations = max(len(frames[client]) + probes, 1)
    parties = list(frames)
    roles = {
        name: (
            lambda fed, name=name: align_unbalanced_party(
                fed,
                frames[name],
                server=server,
                parties=parties,
                id_column=id_column,
                order_key=order_key,
                max_evaluations=max_evaluations,
                probes=probes,
                digest_bytes=digest_bytes,
                workers=workers,
            )
        )
        for name in parties
    }
    return LocalFederation().run(roles)


def align_unbalanced_party(
    federation: Federation,
    frame: pd.DataFrame,
    *,
    server: str,
    parties: list[str],
    id_column: str,
    order_key: bytes | str | None = None,
    oprf: linkage.UnbalancedPsiServer | None = None,
    max_evaluations: int | None = None,
    max_queries: int | None = None,
    ledger: str | Path | None = None,
    probes: int = DEFAULT_PROBES,
    digest_bytes: int = DIGEST_BYTES,
    workers: Any = None,
) -> pd.DataFrame:
    """This party's role in unbalanced PSI alignment (deployment): the server's if its name is
    ``server``, else the client's.

    Parameters
    ----------
    federation : Federation
        This party's channel to the other.
    frame : DataFrame
        This party's table.
    server : str
        The party that holds the large set and the OPRF key; the other data party is the
        client.
    parties : list of str
        The two data parties, the same list at each.
    id_column : str
        The exact ID column (normalised as :func:`linkage.normalize_ids` does).
    order_key : bytes or str, optional
        What the common order is sorted by (the same at both; default empty), as for ECDH PSI.
    oprf : linkage.UnbalancedPsiServer, optional
        Server only: the OPRF server to use, with its own key, caps and ledger (a long-running
        registry). Default: a fresh key for this job, with the caps below.
    max_evaluations : int
        Server only, required unless ``oprf`` is given: the points (IDs and probes) the client
        may have evaluated in all -- each lets it test one ID against the server's set.
    max_queries : int, optional
        Server only: the queries the client may make (one per alignment); with ``ledger``,
        the alignments it may run.
    ledger : path, optional
        Server only: a JSON file that carries the client's counts across jobs
        (:class:`linkage.UnbalancedPsiServer`); without it the caps hold for this job.
    probes : int
        Client only: probe points mixed into the query to check the server's key (default
        :data:`DEFAULT_PROBES`; 0 turns the check off). They count against its caps.
    digest_bytes : int
        Server only: bytes per offline value (default 12: see :mod:`linkage.unbalanced`).
    workers : int or executor, optional
        Where this party's OPRF work runs: its own worker processes (default: all cores) or
        its own executor (a Dask client of its cluster).

    Returns
    -------
    DataFrame
        This party's rows of the common IDs, in the common order.

    Raises
    ------
    linkage.QueryLimitError
        At the server: the client asked for more than its caps (the client is named).
    linkage.unbalanced.OprfCheckError
        At the client: the server's answers fail the probe check.
    ValueError
        A bad argument, a malformed message (naming its sender), or no common rows.
    """
    me = federation.name
    if not isinstance(parties, list) or len(parties) != 2 or me not in parties:
        raise ValueError(
            f"party {me!r}: unbalanced PSI aligns exactly two data parties, this one among "
            f"them; got parties={parties!r}"
        )
    _check_server(server, parties)
    if not isinstance(frame, pd.DataFrame) or id_column not in frame.columns:
        raise ValueError(f"party {me!r}: unbalanced PSI needs its frame and its id_column")
    other = next(p for p in parties if p != me)
    ids = linkage.normalize_ids(frame[id_column], what=f"party {me!r}'s {id_column}")
    if me == server:
        if oprf is None:
            if max_evaluations is None:
                raise ValueError(
                    f"party {me!r} is the unbalanced PSI server: cap what the client may test "
                    "with max_evaluations= (its set size plus its probes), or pass an "
                    "UnbalancedPsiServer with its own caps as oprf="
                )
            oprf = linkage.UnbalancedPsiServer(
                digest_bytes=digest_bytes,
                max_evaluations=max_evaluations,
                max_queries=max_queries,
                ledger=ledger,
                workers=workers,
            )
        elif (max_evaluations, max_queries, ledger) != (None, None, None):
            raise ValueError(
                f"party {me!r}: pass the caps and the ledger to the UnbalancedPsiServer given "
                "as oprf=, not beside it"
            )
        rows = serve_unbalanced_psi(federation, ids, client=other, oprf=oprf)
    else:
        rows = query_unbalanced_psi(federation, ids, server=other, probes=probes, workers=workers)
    return aligned_frame(frame, common_order(ids, rows, order_key), me)


def serve_unbalanced_psi(
    federation: Federation, ids: list[str], *, client: str, oprf: linkage.UnbalancedPsiServer
) -> list[int]:
    """The server's role: commit to the key, send the offline set, answer the query within the
    client's caps, learn the matches. Returns the positions in ``ids`` (normalised IDs) of the
    common ones, unordered."""
    began = time.perf_counter()
    queries, spent = oprf.answered(client)
    allowance = None
    if oprf.max_evaluations is not None:
        allowance = max(oprf.max_evaluations - spent, 0)
    if oprf.max_queries is not None and queries >= oprf.max_queries:
        allowance = 0
    if oprf.max_items is not None:
        allowance = oprf.max_items if allowance is None else min(allowance, oprf.max_items)
    key = OprfKey(oprf.public_key, oprf.digest_bytes, len(ids), SET_CHUNK, allowance)
    ALIGN.send(federation, client, "upsi-key", key)
    offline = oprf.prepare(ids, normalize=False)
    for index, start in enumerate(range(0, len(offline), SET_CHUNK)):
        chunk = offline.digests[start : start + SET_CHUNK].tobytes()
        ALIGN.send(federation, client, "upsi-set", OfflineChunk(chunk), index)
    points = ALIGN.recv(federation, client, "upsi-query", PsiPoints).split(client)
    answers = oprf.evaluate(points, client=client)  # the caps, and every point checked
    ALIGN.send(federation, client, "upsi-answer", PsiPoints(b"".join(answers)))
    matched = ALIGN.recv(federation, client, "upsi-rows", RowPositions).rows
    check_positions(matched, len(offline), client)
    if len(matched) > len(points):
        RowPositions.refuse(client, "rows", f"name {len(matched)} matches for {len(points)} points")
    rows = oprf.own_rows(matched.tolist()).tolist()
    logger.info(
        "unbalanced PSI server: %d IDs, %d points answered to %r, %d common, %.1f s",
        len(ids),
        len(points),
        client,
        len(rows),
        time.perf_counter() - began,
    )
    return [int(r) for r in rows]


def query_unbalanced_psi(
    federation: Federation,
    ids: list[str],
    *,
    server: str,
    probes: int = DEFAULT_PROBES,
    workers: Any = None,
) -> list[int]:
    """The client's role: check the server's key and allowance, query, check the probes, look
    the answers up in the offline set and tell the server the matches. Returns the positions
    in ``ids`` (normalised IDs) of the common ones, unordered."""
    began = time.perf_counter()
    key = ALIGN.recv(federation, server, "upsi-key", OprfKey)
    try:
        key_id = key_id_of(key.public_key)
    except ValueError as exc:
        OprfKey.refuse(server, "public_key", f"is not a P-256 public key ({exc})")
    if not 8 <= key.digest_bytes <= 32:
        OprfKey.refuse(server, "digest_bytes", f"is {key.digest_bytes}, not 8 to 32")
    if key.size < 0 or key.chunk < 1:
        OprfKey.refuse(server, "size", f"is {key.size} in chunks of {key.chunk}")
    needed = len(ids) + probes
    if key.allowance is not None and needed > key.allowance:
        raise ValueError(
            f"party {server!r} (the unbalanced PSI server) allows this party "
            f"{key.allowance:,} more OPRF evaluations, but its {len(ids):,} IDs and {probes} "
            "probes need "
            f"{needed:,}; ask the server's operator to raise max_evaluations, or align fewer IDs"
        )
    client = linkage.UnbalancedPsiClient(workers=workers)
    ALIGN.send(
        federation,
        server,
        "upsi-query",
        PsiPoints(b"".join(client.blind(ids, normalize=False, probes=probes))),
    )
    digests = bytearray()
    for index, start in enumerate(range(0, key.size, key.chunk)):
        chunk = ALIGN.recv(federation, server, "upsi-set", OfflineChunk, index).digests
        expected = min(key.chunk, key.size - start) * key.digest_bytes
        if len(chunk) != expected:
            OfflineChunk.refuse(server, "digests", f"hold {len(chunk)} bytes, not {expected}")
        digests += chunk
    try:
        offline = linkage.OfflineSet(
            digests=np.frombuffer(bytes(digests), dtype=f"S{key.digest_bytes}"), key_id=key_id
        )
    except ValueError as exc:
        OfflineChunk.refuse(server, "digests", f"do not make an offline set ({exc})")
    answers = ALIGN.recv(federation, server, "upsi-answer", PsiPoints).split(server)
    try:
        client.unblind(answers, public_key=key.public_key)
    except OprfCheckError as exc:
        raise OprfCheckError(f"party {server!r} (the unbalanced PSI server): {exc}") from None
    except ValueError as exc:
        raise ValueError(f"party {server!r} (the unbalanced PSI server): {exc}") from None
    rows, positions = client.matches(offline)
    ALIGN.send(federation, server, "upsi-rows", RowPositions(np.sort(positions).astype(np.int64)))
    logger.info(
        "unbalanced PSI client: %d IDs and %d probes against %d, %d common, %.1f s",
        len(ids),
        probes,
        len(offline),
        len(rows),
        time.perf_counter() - began,
    )
    return [int(r) for r in rows]


def _check_server(server: Any, parties: list[str]) -> None:
    if server not in parties:
        raise ValueError(
            f"server={server!r} must name one of the two data parties {parties} (the one that "
            "holds the large set)"
        )
