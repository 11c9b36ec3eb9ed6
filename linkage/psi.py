"""Private set intersection on exact identifiers: ECDH over X25519, or a keyed-hash join.

Two data holders that share an exact patient ID (national health number, hospital number, ...)
learn which of their rows are the same patient, and in a common order, without showing each
other the IDs outside the intersection.

**ECDH PSI** (Meadows 1986; Huberman, Franklin and Hogg 1999), written as pure steps that a
protocol over a federation drives, each party running them on its own data:

1. each party normalises its IDs (:func:`normalize_ids`), maps each to a point of Curve25519
   (a domain-separated BLAKE2b hash with a counter, read as an X25519 u-coordinate and retried
   until it lies on the curve rather than its twist) and *blinds* it with its secret scalar:
   ``[a]H(x)``
   (:meth:`EcdhPsiParty.blind`); the blinded points go to the other party in a random order;
2. each party *re-blinds* what it received with its own scalar, ``[b][a]H(x) = [a][b]H(x)``
   (:meth:`EcdhPsiParty.reblind`), and sends it back in the same order;
3. each party now holds the doubly blinded points of its own IDs and of the other's, and
   :func:`intersect` finds the common ones; both order the common cohort by the doubly blinded
   point, so they agree on the order without any further message.

Each party learns the size of the other's set and which of its own rows are in the
intersection, with the pairing; nothing about IDs outside it (decisional Diffie-Hellman
assumption; honest-but-curious parties). Secret scalars come from the OS and never repeat
across runs; each party sends its points in a secret random order, so that positions reveal
nothing about how its table is sorted. Cost: ``n_own + n_other`` X25519 operations per party
(about 20,000 per second on one core here, through ``cryptography``'s OpenSSL binding, the
same rate as ``openssl speed``); batches of :data:`linkage.workers.PARALLEL_MIN_POINTS` or
more are spread over worker processes of the same party (``workers``, default all cores), which
receive the party's scalar through a pipe and nothing else, or over the party's own executor
(a Dask client, :mod:`linkage.workers`).

**Keyed-hash join** (:func:`hmac_tokens`): for parties who already share a secret key, each
sends ``HMAC-SHA256(key, id)`` and the tokens are intersected. It is fast (a million IDs a
second) but weaker:

.. warning::
   With a shared key each party can test guesses offline: a party that suspects the other
   holds ID ``x`` computes ``HMAC(key, x)`` and looks for it among the received tokens. Use it
   only where every ID the other side might guess is one it may learn, or let a third party
   that holds no IDs do the intersection.

:func:`psi_intersection` runs both sides in one process, for simulations and tests.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Sequence
from typing import Any

import gmpy2
import numpy as np
import pandas as pd
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from linkage.executors import Workers, check_workers
from linkage.workers import map_chunks

__all__ = [
    "EcdhPsiParty",
    "hmac_tokens",
    "intersect",
    "labels_and_values",
    "normalize_ids",
    "psi_intersection",
]

_DOMAIN = b"vflink/psi/x25519/v1"
_POINT_BYTES = 32


def normalize_ids(ids: Iterable[Any], *, what: str = "ids") -> list[str]:
    """Canonical form of exact IDs: Unicode NFKC, upper case, no spaces, dashes, dots or slashes.

    ``" p-0012.34 "`` and ``"P001234"`` normalise alike. Integers are written in decimal, and
    integral floats as the integer (``1234.0`` like ``1234``: a float ID column from pandas
    must not miss its integer twin); fractional floats are refused.

    Raises
    ------
    ValueError
        A missing or empty ID (its position), or two rows whose IDs normalise alike (duplicates
        make the pairing ambiguous: deduplicate first, e.g. ``df.drop_duplicates("patient_id")``).
    """
    raw = pd.Series(list(ids), dtype=object)
    missing = raw.isna().to_numpy()
    if missing.any():
        position = int(np.flatnonzero(missing)[0])
        raise ValueError(f"{what}: the ID at position {position} is missing; drop or fill it")
    floats = raw.map(lambda v: isinstance(v, float))
    if floats.any():
        bad = raw[floats].map(lambda v: not float(v).is_integer())
        if bad.any():
            position = int(np.flatnonzero(floats.to_numpy())[np.flatnonzero(bad.to_numpy())[0]])
            raise ValueError(
                f"{what}: the ID at position {position} ({raw[position]!r}) is a fraction; IDs "
                "must be integers or text"
            )
        # 1234.0 and 1234 alike
        raw = pd.Series([int(v) if isinstance(v, float) else v for v in raw], dtype=object)
    norm = (
        raw.astype(str).str.normalize("NFKC").str.upper().str.replace(r"[\s\-./]", "", regex=True)
    )
    empty = (norm == "").to_numpy()
    if empty.any():
        position = int(np.flatnonzero(empty)[0])
        raise ValueError(f"{what}: the ID at position {position} ({raw[position]!r}) is empty")
    repeated = norm.duplicated(keep=False).to_numpy()
    if repeated.any():
        first, second = np.flatnonzero(norm == norm[int(np.flatnonzero(repeated)[0])])[:2]
        raise ValueError(
            f"{what}: the IDs at positions {first} and {second} are the same "
            f"({norm[first]!r}); PSI needs unique IDs, deduplicate first"
        )
    out: list[str] = norm.tolist()
    return out


_P = 2**255 - 19
_A = 486662


def _hash_to_point(identifier: str) -> bytes:
    """A u-coordinate of a point on Curve25519 itself (not its twist) from the ID.

    Domain-separated BLAKE2b with a counter, retried until ``u^3 + A u^2 + u`` is a non-zero
    square mod p (two tries on average). Taking any hashed u would put about half the IDs on
    the twist, and blinding keeps that property, so every point sent would show one bit of
    ``H(id)`` to a dictionary attacker."""
    data = identifier.encode("utf-8")
    for counter in range(256):
        digest = hashlib.blake2b(
            data + counter.to_bytes(1, "big"), digest_size=_POINT_BYTES, person=b"vflink-psi-h2c"
        ).digest()
        u = int.from_bytes(digest, "little") & ((1 << 255) - 1)
        if u >= _P:
            continue
        if gmpy2.legendre(u * (u * (u + _A) + 1), _P) == 1:
            return u.to_bytes(_POINT_BYTES, "little")
    raise AssertionError("no curve point after 256 tries")  # probability 2**-256


class EcdhPsiParty:
    """One party's side of ECDH PSI: a secret X25519 scalar and the blinding steps.

    The scalar is drawn from the OS when the object is made and exists only in this process
    (and its worker processes); it is never serialised or sent.

    Parameters
    ----------
    workers : int or executor, optional
        Processes for large batches (default: all cores); 1 keeps everything in this process;
        or the party's own executor (:mod:`linkage.workers`: a ``dask.distributed.Client``, a
        :class:`concurrent.futures.Executor`).
    """

    def __init__(self, *, workers: Workers = None) -> None:
        self._secret = X25519PrivateKey.generate()
        self._order: list[int] = []
        check_workers(workers)  # a bad argument fails here, not at the first batch
        self.workers: Workers = workers

    def blind(self, ids: Sequence[str]) -> list[bytes]:
        """``[secret] H(id)`` for each (already normalised) ID, as 32-byte points, in a secret
        random order (:meth:`own_rows` maps positions in that order back to rows)."""
        order = list(range(len(ids)))
        secrets.SystemRandom().shuffle(order)
        self._order = order
        shuffled = [ids[k] for k in order]
        return self._run(_blind_chunk, shuffled)

    def own_rows(self, positions: Iterable[int]) -> list[int]:
        """The rows (positions in the IDs given to :meth:`blind`) of positions in the sent order."""
        return [self._order[p] for p in positions]

    def reblind(self, points: Sequence[bytes]) -> list[bytes]:
        """``[secret] P`` for each received 32-byte point.

        Raises
        ------
        ValueError
            A value is not 32 bytes, or is a low-order point (a malformed or malicious message).
        """
        for position, point in enumerate(points):
            if not isinstance(point, bytes) or len(point) != _POINT_BYTES:
                raise ValueError(f"PSI point at position {position} is not {_POINT_BYTES} bytes")
        return self._run(_exchange_chunk, list(points))

    def _run(self, step: Any, items: list[Any]) -> list[bytes]:
        raw = self._secret.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        parts = map_chunks(step, raw, items, self.workers)
        return [point for part in parts for point in part]


def _blind_chunk(raw: bytes, ids: list[str], offset: int) -> list[bytes]:
    return _exchange_chunk(raw, [_hash_to_point(i) for i in ids], offset)


def _exchange_chunk(raw: bytes, points: list[bytes], offset: int) -> list[bytes]:
    secret = X25519PrivateKey.from_private_bytes(raw)
    out = []
    for position, point in enumerate(points):
        try:
            out.append(secret.exchange(X25519PublicKey.from_public_bytes(point)))
        except ValueError:
            raise ValueError(
                f"PSI point at position {offset + position} is a low-order point; refused"
            ) from None
    return out


def intersect(own_double: Sequence[bytes], other_double: Sequence[bytes]) -> list[tuple[int, int]]:
    """Positions ``(i, j)`` with ``own_double[i] == other_double[j]``, in the common order.

    The common order sorts by the doubly blinded point, which both parties hold, so both sides
    list the intersection alike without exchanging positions.
    """
    index = {point: j for j, point in enumerate(other_double)}
    pairs = [(i, index[p]) for i, p in enumerate(own_double) if p in index]
    pairs.sort(key=lambda pair: own_double[pair[0]])
    return pairs


def hmac_tokens(ids: Sequence[str], key: bytes) -> list[bytes]:
    """``HMAC-SHA256(key, id)`` for each normalised ID (see the module's warning)."""
    if not isinstance(key, bytes) or len(key) < 16:
        raise ValueError("the HMAC key must be at least 16 random bytes shared by the parties")
    return [hmac.digest(key, _DOMAIN + i.encode("utf-8"), "sha256") for i in ids]


def psi_intersection(
    ids_a: Any,
    ids_b: Any,
    *,
    method: str = "ecdh",
    key: bytes | None = None,
    workers: Workers = None,
) -> pd.DataFrame:
    """Run both sides of a PSI in this process (for simulations and tests).

    Parameters
    ----------
    ids_a, ids_b : pandas.Series, pandas.Index or sequence
        Each party's exact IDs. A Series' index labels identify the rows; otherwise positions do.
    method : {"ecdh", "hmac"}
        The protocol (see the module docstring).
    key : bytes, optional
        The shared secret for ``"hmac"`` (a fresh random key if omitted, which is what a
        simulation wants).
    workers : int, optional
        Processes per party for ECDH (default: all cores); the two parties take turns.

    Returns
    -------
    pandas.DataFrame
        Columns ``a`` and ``b``: the row labels of the common IDs, one row per common ID, in the
        protocol's common order.
    """
    labels_a, values_a = labels_and_values(ids_a)
    labels_b, values_b = labels_and_values(ids_b)
    norm_a = normalize_ids(values_a, what="party a's ids")
    norm_b = normalize_ids(values_b, what="party b's ids")
    if method == "ecdh":
        party_a, party_b = EcdhPsiParty(workers=workers), EcdhPsiParty(workers=workers)
        blinded_a, blinded_b = party_a.blind(norm_a), party_b.blind(norm_b)
        double_a = party_b.reblind(blinded_a)  # b re-blinds a's points and returns them
        double_b = party_a.reblind(blinded_b)
        sent_pairs = intersect(double_a, double_b)
        rows_a = party_a.own_rows(i for i, _ in sent_pairs)
        rows_b = party_b.own_rows(j for _, j in sent_pairs)
        pairs = list(zip(rows_a, rows_b, strict=True))
    elif method == "hmac":
        shared = secrets.token_bytes(32) if key is None else key
        pairs = intersect(hmac_tokens(norm_a, shared), hmac_tokens(norm_b, shared))
    else:
        raise ValueError(f"unknown PSI method {method!r}; choose 'ecdh' or 'hmac'")
    result: pd.DataFrame = pd.DataFrame(
        {"a": [labels_a[i] for i, _ in pairs], "b": [labels_b[j] for _, j in pairs]},
        columns=["a", "b"],
    )
    return result


def labels_and_values(ids: Any) -> tuple[list[Any], list[Any]]:
    """An ID column as the labels a PSI result names rows by and the values it compares: a
    Series's index and values, or the positions and items of any other iterable."""
    if isinstance(ids, pd.Series):
        return list(ids.index), list(ids.to_numpy(dtype=object))
    values = list(ids)
    return list(range(len(values))), values
