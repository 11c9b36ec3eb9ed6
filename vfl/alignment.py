"""Aligning the parties' rows to their common patients, over a federation.

Two ways, each written once as the code every role runs:

* ``method="psi"`` -- ECDH private set intersection on an exact ID column (:mod:`linkage.psi`).
  Two data parties run it directly: each learns which of its own rows are common and their
  common order, nothing about the other's other IDs. Three or more run a ring with a helper
  (the coordinator, which holds no ID and no key), described below;
* ``method="bloom"`` -- the data parties encode their identity columns into Bloom filters with
  a secret they share (:func:`linkage.encode`) and send the encodings, without row labels, to a
  linkage unit (the coordinator), which never has the secret; it links two parties one-to-one
  (:func:`linkage.match`) and three or more into clusters of at most one record per party
  (:func:`linkage.match_many`: every pair of parties is matched and the links joined best
  first, so a patient one party spelled badly still joins through the others), keeps the
  patients held by every party, and returns to each party only the positions of its own rows
  in the common order and how many of them were linked by a tie (see ``max_ambiguous``) -- no
  scores, nothing of the other parties.

A third way, for a small party against a very large one, is unbalanced PSI
(:mod:`vfl.align_unbalanced`: an OPRF whose online cost grows with the small set only).

Each party ends with its own frame reordered to the common patients, indexed
``0 .. n_common - 1`` (``common_row``), its original row labels in
``frame.attrs["source_rows"]`` (with Bloom linkage, also its own count of identity values
that did not parse, ``frame.attrs["invalid_values"]``: see ``linkage.Field.on_invalid``).

**The common order is reproducible.** With PSI it sorts the common IDs by
``SHA-256(order_key || id)``. The same inputs and key give the same order and index, so a
seeded split picks the same rows, and other keys give unrelated orders. Both data parties
hold every common ID, so even the default empty key tells them nothing. The order also says
nothing of either party's table order. With Bloom linkage, the linkage unit sorts the common
patients by ``HMAC(order_key, the anchor's encoding)`` when it is given an ``order_key``,
which the data parties must not know: a party holding it could tell which of its records
the anchor spelled exactly as it did. Without one, the order is random, fresh each run, as
it must be with BLIP hardening, whose encodings change every run.

**PSI among three or more parties** reveals only the common intersection to the data
parties. Each party's points travel a ring: the owner blinds its (shuffled) IDs,
``[k_i] H(x)``, and each other party in turn multiplies by its own scalar; the last one sends
the fully blinded ``[k_1 ... k_K] H(x)`` to the helper, not back to the owner. The helper
intersects the K sets of fully blinded points and tells each owner which of its sent
positions are in all of them; each owner then sorts its common rows by ``SHA-256(order_key ||
id)`` as two parties do, so that every party lists the common patients alike.

What each learns (honest-but-curious parties, decisional Diffie-Hellman, no collusion):

* a data party: every other party's set size (the number of points that pass through it)
  and which of its own rows are in the K-way intersection -- nothing about pairwise or other
  partial intersections: the points it handles carry other parties' IDs under scalars it does
  not all hold, never its own IDs under the same scalars, so it has nothing to compare them
  with (``tests/vfl/test_align.py`` attacks this: a party re-blinds everything it received
  and finds none of its own points);
* the helper: only fully blinded points, under scalars it does not hold, so no ID; but it
  does see how many points are common to each subset of parties (the sizes of the pairwise
  and other partial intersections, not which records);
* a data party colluding with the helper learns which of its own rows lie in each other
  party's set (the helper knows whose points are whose). Two parties can use the direct
  protocol, which needs no helper.

:func:`align` runs every role in one process (simulation); :func:`align_party` runs one
party's role on its own federation (deployment).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import linkage
from vfl.federation.base import Federation
from vfl.federation.local import LocalFederation
from vfl.federation.messages import Message, Namespace

__all__ = [
    "ALIGN",
    "EncodingsMessage",
    "PsiPoints",
    "RowPositions",
    "align",
    "align_party",
    "aligned_frame",
    "check_positions",
    "common_order",
]

ALIGN = Namespace("align")
"""The tags of alignment (``align/psi-blinded``, ``align/encodings``, ...)."""


@dataclass(frozen=True)
class PsiPoints(Message):
    """Blinded (or doubly blinded) PSI points, 32 bytes each, concatenated."""

    KIND = "PSI points"
    points: bytes

    def split(self, sender: str) -> list[bytes]:
        if len(self.points) % 32:
            self.refuse(sender, "points", f"holds {len(self.points)} bytes, not 32 per point")
        return [self.points[i : i + 32] for i in range(0, len(self.points), 32)]


@dataclass(frozen=True)
class EncodingsMessage(Message):
    """A data party's Bloom-filter encodings (packed words, no row labels) and the keyed
    fingerprint of the schema and secret that made them."""

    KIND = "encodings"
    words: np.ndarray
    fingerprint: bytes


@dataclass(frozen=True)
class RowPositions(Message):
    """The linkage unit's answer: positions of the party's own rows, in the common order."""

    KIND = "row positions"
    rows: np.ndarray
    ambiguous: int = 0
    """How many common patients were linked by a tie (Bloom linkage; 0 for PSI)."""


def align(
    frames: dict[str, pd.DataFrame],
    *,
    method: str = "psi",
    id_column: str | None = None,
    schema: Any = None,
    secret: bytes | str | None = None,
    threshold: float | None = None,
    linkage_unit: str = "coordinator",
    ledger: Any = None,
    order_key: bytes | str | None = None,
    max_ambiguous: float = 0.01,
) -> dict[str, pd.DataFrame]:
    """Align ``frames`` (party name -> its table) to their common rows; every role simulated
    in this process. See :func:`align_party` for the parameters."""
    if not isinstance(frames, dict) or len(frames) < 2:
        raise ValueError("align needs a dict of at least two parties' frames")
    if method not in ("psi", "bloom"):
        raise ValueError(
            f"method must be 'psi' or 'bloom', got {method!r} (unbalanced PSI, a small set "
            "against a large one, has its own roles: vfl.align_unbalanced)"
        )
    _check_fraction(max_ambiguous)
    for name, frame in frames.items():  # checked at the door, before any party starts
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"party {name!r}: expected a DataFrame, got {type(frame).__name__}")
        if method == "psi" and (id_column is None or id_column not in frame.columns):
            raise ValueError(
                f"party {name!r}: PSI alignment needs its frame and its id_column "
                f"({id_column!r} is not one of its columns)"
            )
    parties = list(frames)
    helped = method == "bloom" or len(parties) > 2  # a linkage unit links, or helps the PSI
    if helped and linkage_unit in frames:
        raise ValueError(
            f"{linkage_unit!r} is both a data party and the linkage unit; pass linkage_unit="
            "'...' with another name (the linkage unit must not hold identities)"
        )
    roles: dict[str, Any] = {
        name: (
            lambda fed, name=name: align_party(
                fed,
                frames[name],
                method=method,
                id_column=id_column,
                schema=schema,
                secret=secret,
                parties=parties,
                threshold=threshold,
                linkage_unit=linkage_unit,
                ledger=ledger,
                order_key=order_key if method == "psi" else None,
            )
        )
        for name in parties
    }
    if helped:
        roles[linkage_unit] = lambda fed: align_party(
            fed,
            None,
            method=method,
            parties=parties,
            threshold=threshold,
            linkage_unit=linkage_unit,
            order_key=order_key if method == "bloom" else None,
            max_ambiguous=max_ambiguous,
        )
    results = LocalFederation().run(roles)
    return {name: results[name] for name in parties}


def align_party(
    federation: Federation,
    frame: pd.DataFrame | None,
    *,
    method: str = "psi",
    id_column: str | None = None,
    schema: Any = None,
    secret: bytes | str | None = None,
    parties: list[str],
    threshold: float | None = None,
    linkage_unit: str = "coordinator",
    ledger: Any = None,
    order_key: bytes | str | None = None,
    max_ambiguous: float = 0.01,
    workers: Any = None,
) -> Any:
    """This party's role in aligning (deployment).

    Parameters
    ----------
    federation : Federation
        This party's channel to the others.
    frame : DataFrame or None
        This party's table (None for the linkage unit).
    method : {"psi", "bloom"}
        See the module docstring.
    id_column : str
        The exact ID column (``"psi"``).
    schema, secret
        The :class:`linkage.Schema` and the data parties' shared secret (``"bloom"``).
    parties : list of str
        The data parties, the same list at every party.
    threshold : float, optional
        Match threshold (``"bloom"``); chosen from the scores when None.
    linkage_unit : str
        The party that links encodings (``"bloom"``), or helps a PSI among three or more
        data parties (it holds no ID and no key; see the module docstring).
    ledger : vfl.privacy.PrivacyLedger, optional
        Where a data party records the differential privacy its encodings spend when the
        schema hardens them with BLIP (``blip_epsilon`` per bit, composed over the schema's
        encoded bits: the most in which two versions of one person's record can differ).
    order_key : bytes or str, optional
        What the common order is sorted by (see the module docstring): with PSI, both data
        parties' (the same at each; default empty); with Bloom linkage, the linkage unit's
        alone (default: a random order).
    max_ambiguous : float
        The linkage unit refuses to go on when more than this fraction of the common
        patients were linked by a tie (a record with two candidates of exactly the same
        score, so that which one was linked is arbitrary: usually one identity entered twice
        in a table). The count reaches every data party as ``frame.attrs["ambiguous_links"]``
        (always 0 with PSI, whose IDs are unique).
    workers : int or executor, optional
        Where this party's PSI blinding runs (:class:`linkage.EcdhPsiParty`): its own worker
        processes (default: all cores) or its own executor (a Dask client of its cluster).

    Returns
    -------
    DataFrame or None
        This party's rows of the common patients, in the common order (None for the linkage
        unit).
    """
    me = federation.name
    if method not in ("psi", "bloom"):
        raise ValueError(
            f"method must be 'psi' or 'bloom', got {method!r} (unbalanced PSI, a small set "
            "against a large one, has its own roles: vfl.align_unbalanced)"
        )
    _check_fraction(max_ambiguous)
    if method == "psi":
        if frame is None:
            if me != linkage_unit or len(parties) < 3:
                raise ValueError(f"party {me!r} has no frame but is not the PSI helper")
            _help_psi(federation, parties)
            return None
        if id_column is None or id_column not in frame.columns:
            raise ValueError(f"party {me!r}: PSI alignment needs its frame and its id_column")
        ids = linkage.normalize_ids(frame[id_column], what=f"party {me!r}'s {id_column}")
        party = linkage.EcdhPsiParty(workers=workers)
        if len(parties) == 2:
            rows = _psi_direct(federation, party, ids, next(p for p in parties if p != me))
        else:
            rows = _psi_ring(federation, party, ids, parties, linkage_unit)
        return aligned_frame(frame, common_order(ids, rows, order_key), me)
    if frame is None:  # the linkage unit
        if me != linkage_unit:
            raise ValueError(f"party {me!r} has no frame but is not the linkage unit")
        _link_encodings(federation, parties, threshold, order_key, max_ambiguous)
        return None
    if schema is None or secret is None:
        raise ValueError(f"party {me!r}: Bloom-filter alignment needs the schema and the secret")
    encodings = linkage.encode(frame, schema, secret=secret)
    if ledger is not None and schema.blip_epsilon is not None:
        from vfl.privacy import record_blip

        record_blip(
            ledger,
            holder=me,
            epsilon_per_bit=schema.blip_epsilon,
            bits_per_record=schema.encoded_bits,
            data=f"Bloom-filter encodings of {', '.join(schema.columns)}",
        )
    # sent in a secret random order, so that positions say nothing about how the table is sorted
    shuffle = list(range(len(frame)))
    secrets.SystemRandom().shuffle(shuffle)
    message = EncodingsMessage(encodings.words[shuffle], encodings.fingerprint)
    ALIGN.send(federation, linkage_unit, "encodings", message)
    answer = ALIGN.recv(federation, linkage_unit, "rows", RowPositions)
    check_positions(answer.rows, len(frame), linkage_unit)
    out = aligned_frame(frame, [shuffle[r] for r in answer.rows.tolist()], me)
    out.attrs["ambiguous_links"] = answer.ambiguous
    # this party's own count of dates and numbers that did not parse (never sent)
    out.attrs["invalid_values"] = dict(encodings.invalid)
    return out


def _psi_direct(
    federation: Federation, party: linkage.EcdhPsiParty, ids: list[str], other: str
) -> list[int]:
    """Two-party ECDH PSI: this party's rows whose IDs the other party holds too."""
    ALIGN.send(federation, other, "psi-blinded", PsiPoints(b"".join(party.blind(ids))))
    theirs = ALIGN.recv(federation, other, "psi-blinded", PsiPoints).split(other)
    their_double = party.reblind(theirs)
    ALIGN.send(federation, other, "psi-double", PsiPoints(b"".join(their_double)))
    own_double = ALIGN.recv(federation, other, "psi-double", PsiPoints).split(other)
    if len(own_double) != len(ids):
        raise ValueError(f"party {other!r} returned {len(own_double)} points for {len(ids)}")
    common = set(own_double) & set(their_double)
    position = {point: k for k, point in enumerate(own_double)}
    return party.own_rows(position[p] for p in common)


def _psi_ring(
    federation: Federation,
    party: linkage.EcdhPsiParty,
    ids: list[str],
    parties: list[str],
    helper: str,
) -> list[int]:
    """K-party ECDH PSI (module docstring): this party's rows in every party's set.

    Origin ``o``'s points visit ``o+1, ..., o+K-1`` (indices mod K); at hop ``h`` this party
    (index ``i``) handles the points of origin ``i-h``, and the last hop sends them to the
    helper."""
    me, k = federation.name, len(parties)
    i = parties.index(me)
    after, before = parties[(i + 1) % k], parties[(i - 1) % k]
    ALIGN.send(federation, after, "psi-ring", PsiPoints(b"".join(party.blind(ids))), i)
    for hop in range(1, k):
        origin = (i - hop) % k
        points = ALIGN.recv(federation, before, "psi-ring", PsiPoints, origin).split(before)
        onward = PsiPoints(b"".join(party.reblind(points)))
        if hop < k - 1:
            ALIGN.send(federation, after, "psi-ring", onward, origin)
        else:
            ALIGN.send(federation, helper, "psi-full", onward, origin)
    positions = ALIGN.recv(federation, helper, "rows", RowPositions).rows
    check_positions(positions, len(ids), helper)
    return party.own_rows(positions.tolist())


def _help_psi(federation: Federation, parties: list[str]) -> None:
    """The helper of K-party PSI: intersect the fully blinded sets, tell each owner which of
    its positions are common (it never sees an ID or a scalar)."""
    k = len(parties)
    full = []
    for origin in range(k):
        sender = parties[(origin - 1) % k]  # the last hop of origin's ring
        full.append(ALIGN.recv(federation, sender, "psi-full", PsiPoints, origin).split(sender))
    common = set.intersection(*(set(points) for points in full))
    for origin, points in enumerate(full):
        positions = [p for p, point in enumerate(points) if point in common]
        ALIGN.send(
            federation, parties[origin], "rows", RowPositions(np.asarray(positions, dtype=np.int64))
        )


def _check_fraction(max_ambiguous: Any) -> None:
    if isinstance(max_ambiguous, bool) or not isinstance(max_ambiguous, (int, float)):
        raise ValueError(f"max_ambiguous must be a fraction in [0, 1], got {max_ambiguous!r}")
    if not 0 <= max_ambiguous <= 1:
        raise ValueError(f"max_ambiguous must be a fraction in [0, 1], got {max_ambiguous!r}")


def common_order(ids: list[str], rows: list[int], order_key: bytes | str | None) -> list[int]:
    """``rows`` (positions in ``ids``, this party's normalised IDs) in the common order of PSI:
    sorted by ``SHA-256(order_key || id)``. Every party that holds the common IDs computes the
    same order from them alone, run after run (module docstring)."""
    key = _key_bytes(order_key)
    return sorted(
        rows, key=lambda r: hashlib.sha256(b"vflink/order\x00" + key + ids[r].encode()).digest()
    )


def check_positions(positions: np.ndarray[Any, Any], rows: int, sender: str) -> None:
    """Refuse (a :class:`~vfl.federation.messages.MessageError` naming ``sender``) positions
    that are not distinct integers in ``[0, rows)``."""
    if positions.ndim != 1 or (positions.size and positions.dtype.kind not in "iu"):
        RowPositions.refuse(sender, "rows", "are not integer positions")
    if len(positions) and (positions.min() < 0 or positions.max() >= rows):
        RowPositions.refuse(sender, "rows", "are out of range")
    if len(np.unique(positions)) != len(positions):
        RowPositions.refuse(sender, "rows", "repeat a position")


def aligned_frame(frame: pd.DataFrame, rows: list[int], party: str) -> pd.DataFrame:
    """``frame``'s ``rows`` in that order, indexed ``common_row``, with the original labels in
    ``attrs["source_rows"]``; a ValueError naming ``party`` when there are none."""
    if not rows:
        raise ValueError(f"party {party!r}: no common rows with the other parties")
    out: pd.DataFrame = frame.iloc[rows].copy()
    source = out.index
    out.index = pd.RangeIndex(len(out), name="common_row")
    out.attrs["source_rows"] = list(source)
    out.attrs["ambiguous_links"] = 0
    return out


def _key_bytes(key: bytes | str | None) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else (key or b"")


def _link_encodings(
    federation: Federation,
    parties: list[str],
    threshold: float | None,
    order_key: bytes | str | None = None,
    max_ambiguous: float = 0.01,
) -> None:
    encodings = {}
    for party in parties:
        message = ALIGN.recv(federation, party, "encodings", EncodingsMessage)
        words = message.words
        if words.dtype != np.uint64 or words.ndim != 2:
            EncodingsMessage.refuse(party, "words", "are not a 2-d array of 64-bit words")
        encodings[party] = linkage.Encodings(pd.RangeIndex(len(words)), words, message.fingerprint)
    anchor, *others = parties
    # the common patients as a table of positions, one column per party
    if len(parties) == 2:
        try:
            links = linkage.match(encodings[anchor], encodings[others[0]], threshold=threshold)
        except ValueError as exc:
            raise ValueError(f"linking {anchor!r} with {others[0]!r}: {exc}") from None
        clusters = pd.DataFrame({anchor: links["a"], others[0]: links["b"]})
        ambiguous = len(links.attrs["ambiguous_links"])
    else:  # clusters of one record per party, patients held by every party
        try:
            clusters = linkage.match_many(encodings, threshold=threshold, min_size=len(parties))
        except ValueError as exc:
            raise ValueError(f"linkage unit {federation.name!r}: {exc}") from None
        ambiguous = int(clusters.attrs["ambiguous"])
    clusters = clusters[parties].astype(np.int64)
    common = list(range(len(clusters)))
    if common and ambiguous > max_ambiguous * len(common):
        raise ValueError(
            f"linkage unit {federation.name!r}: {ambiguous} of the {len(common)} common "
            f"patients ({ambiguous / len(common):.1%}) were linked by a tie between records "
            f"of exactly the same score, above max_ambiguous={max_ambiguous}; deduplicate "
            "each party's table (one identity entered twice), add identity columns to the "
            "schema, or raise max_ambiguous"
        )
    if order_key is None:  # a fresh random order: it reveals no party's order
        secrets.SystemRandom().shuffle(common)
    else:  # reproducible, and as uninformative to parties that do not hold the key
        key = _key_bytes(order_key)
        words = encodings[anchor].words
        rows_anchor = clusters[anchor].to_numpy()
        common.sort(
            key=lambda c: hmac.new(key, words[rows_anchor[c]].tobytes(), hashlib.sha256).digest()
        )
    for party in parties:
        positions = clusters[party].to_numpy()[np.asarray(common, dtype=np.int64)]
        ALIGN.send(federation, party, "rows", RowPositions(positions, ambiguous))
