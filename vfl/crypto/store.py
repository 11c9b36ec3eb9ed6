"""Ciphertexts kept for a long time, packed: fixed-width bytes in one numpy array.

A Paillier ciphertext under a 2048-bit key is 512 bytes. Held as a list of ``gmpy2.mpz`` it
costs about 560 (the object and the list's pointer), and the signed products of
:meth:`vfl.linear.exchange.PeerRows.combine` used to keep every row's inverse beside it: 1.1
KB per row and column group, for the whole fit. :class:`CiphertextStore` keeps exactly the
wire's 512 bytes per ciphertext in a ``(count, width)`` uint8 array and turns only the rows a
batch needs back into integers (:meth:`CiphertextStore.take`, about a microsecond each);
:func:`signed_multiexp` needs no inverse per row (one inversion per product), so nothing is
kept beside the store. A party holding another's encrypted rows needs ``rows x groups x
key_bits / 4`` bytes: 10,000,000 rows in one column group with 2048-bit keys take 5.1 GB.

Products over many rows split into chunks on ``workers`` (:func:`signed_multiexp_chunks`):
each chunk's bases travel packed (512 bytes each) with their exponents, and the chunk
products are multiplied together: the same ciphertext as in one piece.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from vfl.crypto import parallel
from vfl.crypto.kernels import multiexp

if TYPE_CHECKING:
    from vfl.crypto.keys import PaillierPublicKey

__all__ = [
    "PARALLEL_MIN_TERMS",
    "CiphertextStore",
    "signed_multiexp",
    "signed_multiexp_chunks",
    "unpack",
]

PARALLEL_MIN_TERMS = 4096
"""Products over fewer bases run in one piece in the calling process (a few tens of
milliseconds with 2048-bit keys: less than shipping them to a worker is worth)."""


class CiphertextStore:
    """``count`` ciphertexts of one key as big-endian bytes of the key's ciphertext width,
    filled in order (:meth:`extend`), read by position (:meth:`take`)."""

    def __init__(self, key: PaillierPublicKey, count: int) -> None:
        self.key = key
        self.width = int(key.ciphertext_bytes)
        self.data = np.empty((int(count), self.width), dtype=np.uint8)
        self.filled = 0

    @classmethod
    def of(cls, key: PaillierPublicKey, ciphertexts: Sequence[Any]) -> CiphertextStore:
        """A full store of ``ciphertexts`` (integers below ``n**2``)."""
        store = cls(key, len(ciphertexts))
        store.extend(ciphertexts)
        return store

    def __len__(self) -> int:
        return self.filled

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def extend(self, ciphertexts: Sequence[Any], raw: bytes | None = None) -> None:
        """Append ``ciphertexts``; ``raw``, when given, is the same values already as
        ``len(ciphertexts) * width`` big-endian bytes (a received block's data: no
        re-encoding)."""
        count = len(ciphertexts)
        if self.filled + count > len(self.data):
            raise ValueError(f"{self.filled + count} ciphertexts for a store of {len(self.data)}")
        w = self.width
        if raw is None or len(raw) != count * w:
            raw = b"".join(int(c).to_bytes(w, "big") for c in ciphertexts)
        block = np.frombuffer(raw, dtype=np.uint8).reshape(count, w)
        self.data[self.filled : self.filled + count] = block
        self.filled += count

    def take(self, rows: np.ndarray[Any, Any]) -> list[Any]:
        """The ciphertexts at positions ``rows``, as ``gmpy2.mpz``."""
        return unpack(self.data[np.asarray(rows, dtype=np.int64)])

    def packed(self, rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The ciphertexts at positions ``rows``, still packed (``(len(rows), width)``)."""
        out: np.ndarray[Any, Any] = self.data[np.asarray(rows, dtype=np.int64)]
        return out


def unpack(packed: np.ndarray[Any, Any]) -> list[Any]:
    """``(count, width)`` big-endian bytes as ``gmpy2.mpz`` integers."""
    w = packed.shape[1]
    raw = np.ascontiguousarray(packed).tobytes()
    return [mpz(int.from_bytes(raw[i : i + w], "big")) for i in range(0, len(raw), w)]


def signed_multiexp(bases: Sequence[Any], exponents: np.ndarray[Any, Any], modulus: Any) -> Any:
    """``prod_i bases[i] ** exponents[i] mod modulus`` for signed int64 exponents: one
    multi-exponentiation over the positive terms, one over the negative, and one inversion
    (instead of an inverse per negative base).

    Raises
    ------
    ZeroDivisionError
        The negative terms' product is not invertible (a base shares a factor with the
        modulus: not a ciphertext of this key).
    """
    exps = np.asarray(exponents, dtype=np.int64)
    negative = exps < 0
    positive = np.flatnonzero(~negative)
    result = multiexp([bases[i] for i in positive.tolist()], exps[positive], modulus)
    if negative.any():
        picked = np.flatnonzero(negative)
        below = multiexp([bases[i] for i in picked.tolist()], -exps[picked], modulus)
        inverse = gmpy2.invert(below, modulus)
        if inverse == 0:
            raise ZeroDivisionError("a base has no inverse modulo the modulus")
        result = result * inverse % modulus
    return mpz(result)


def signed_multiexp_packed(
    packed: np.ndarray[Any, Any], exponents: np.ndarray[Any, Any], modulus: Any
) -> Any:
    """:func:`signed_multiexp` of packed bases (in a worker: the bases travel as bytes)."""
    return signed_multiexp(unpack(packed), exponents, mpz(modulus))


def signed_multiexp_chunks(
    store: CiphertextStore,
    rows: np.ndarray[Any, Any],
    columns: np.ndarray[Any, Any],
    modulus: Any,
    workers: parallel.Workers = 1,
) -> list[Any]:
    """``[prod_i store[rows[i]] ** columns[i, k] for each column k]`` (``columns`` int64 of
    shape ``(len(rows), K)``): in one piece below :data:`PARALLEL_MIN_TERMS` rows or with one
    worker, otherwise in chunks of rows on ``workers`` (this machine's processes or an
    executor), the chunk products multiplied together."""
    rows = np.asarray(rows, dtype=np.int64)
    slots = parallel.check_workers(workers)
    pieces = 1 if len(rows) < PARALLEL_MIN_TERMS else min(slots, len(rows) // 1024)
    if pieces <= 1 and not parallel.is_executor(workers):
        bases = store.take(rows)
        return [signed_multiexp(bases, columns[:, k], modulus) for k in range(columns.shape[1])]
    bounds = np.linspace(0, len(rows), max(1, pieces) + 1).astype(int)
    tasks = [
        (store.packed(rows[a:b]), columns[a:b, k], int(modulus))
        for k in range(columns.shape[1])
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
    ]
    products = parallel.map_processes(signed_multiexp_packed, tasks, workers)
    per = len(bounds) - 1
    out = []
    for k in range(columns.shape[1]):
        total = mpz(1)
        for part in products[k * per : (k + 1) * per]:
            total = total * part % modulus
        out.append(total)
    return out
