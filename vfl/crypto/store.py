"""Ciphertexts kept for a long time, packed: fixed-width bytes in one numpy array.

A Paillier ciphertext under a 2048-bit key is 512 bytes. Held as a list of ``gmpy2.mpz`` it
costs about 560 (the object and the list's pointer), and the signed products of
:meth:`vfl.crypto.slots.PeerRows.combine` used to keep every row's inverse beside it: 1.1
KB per row and column group, for the whole fit. :class:`CiphertextStore` keeps exactly the
wire's 512 bytes per ciphertext in a ``(count, width)`` uint8 array and turns only the rows a
batch needs back into integers (:meth:`CiphertextStore.take`, about a microsecond each);
:func:`signed_multiexp` needs no inverse per row (one inversion per product), so nothing is
kept beside the store. A party holding another's encrypted rows needs ``rows x groups x
key_bits / 4`` bytes: 10,000,000 rows in one column group with 2048-bit keys take 5.1 GB.

Products over many rows split into chunks on ``workers`` (:func:`signed_multiexp_chunks`):
each chunk's bases travel packed (512 bytes each) with their exponents, and the chunk
products are multiplied together: the same ciphertext as in one piece.

A party whose ``workers`` is its Dask cluster keeps the rows there instead
(:class:`ClusterCiphertextStore`, :func:`ciphertext_store` chooses): each received part is
scattered to a worker as it arrives, the parts are joined into about one partition per
worker thread, and a batch's product runs as one task per partition it touches (the rows'
positions and exponents travel, the ciphertexts stay): the party's own process then holds no
encrypted row at all, and the cluster's memory, not one machine's, bounds the rows.
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
    "ClusterCiphertextStore",
    "ciphertext_store",
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


class ClusterCiphertextStore:
    """``count`` ciphertexts of one key held on a Dask cluster (``client``): filled in order
    (:meth:`extend`, each call's block scattered to one worker), then :meth:`seal` joins the
    blocks into about one partition per worker thread, on the workers. Nothing but futures
    and row offsets stays in this process."""

    def __init__(self, key: PaillierPublicKey, count: int, client: Any) -> None:
        self.key = key
        self.width = int(key.ciphertext_bytes)
        self.count = int(count)
        self.client = client
        self.filled = 0
        self._blocks: list[tuple[int, Any]] = []  # (first row, future) as received
        self._parts: list[Any] = []  # futures of the joined partitions
        self._starts = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return self.filled

    @property
    def nbytes(self) -> int:
        """Bytes held in this process: none (the cluster holds ``count * width``)."""
        return 0

    def extend(self, ciphertexts: Sequence[Any], raw: bytes | None = None) -> None:
        """Append ``ciphertexts`` (see :meth:`CiphertextStore.extend`): packed here, scattered
        to a worker, dropped here."""
        local = CiphertextStore(self.key, len(ciphertexts))
        local.extend(ciphertexts, raw)
        if self.filled + len(local) > self.count:
            raise ValueError(f"{self.filled + len(local)} ciphertexts for a store of {self.count}")
        self._blocks.append((self.filled, self.client.scatter(local.data)))
        self.filled += len(local)

    def seal(self) -> None:
        """Join the received blocks into about one partition per worker thread (on the
        workers: the blocks do not come back here)."""
        if not self._blocks or self._parts:
            return
        slots = parallel.executor_slots(self.client)
        per = -(-len(self._blocks) // slots)
        starts, parts = [], []
        for i in range(0, len(self._blocks), per):
            group = self._blocks[i : i + per]
            starts.append(group[0][0])
            futures = [f for _, f in group]
            parts.append(self.client.submit(_join, *futures, pure=False))
        self._parts, self._starts = parts, np.asarray(starts, dtype=np.int64)
        self._blocks = []

    def signed_products(
        self, rows: np.ndarray[Any, Any], columns: np.ndarray[Any, Any], modulus: Any
    ) -> list[Any]:
        """:func:`signed_multiexp_chunks` where the rows are: one task per partition that
        ``rows`` touches, the partition products multiplied here."""
        self.seal()
        rows = np.asarray(rows, dtype=np.int64)
        owner = np.searchsorted(self._starts, rows, side="right") - 1
        futures = []
        for p in np.unique(owner).tolist():
            picked = np.flatnonzero(owner == p)
            local = rows[picked] - self._starts[p]
            futures.append(
                self.client.submit(
                    _partition_products,
                    self._parts[p],
                    local,
                    np.ascontiguousarray(columns[picked]),
                    int(modulus),
                    pure=False,
                )
            )
        from linkage.executors import gather  # only with a cluster: vfl.crypto stays light

        results = gather(futures, "a gradient product failed on the Dask cluster")
        out = []
        for k in range(columns.shape[1]):
            total = mpz(1)
            for result in results:
                total = total * mpz(result[k]) % modulus
            out.append(total)
        return out


def ciphertext_store(
    key: PaillierPublicKey, count: int, workers: parallel.Workers = None
) -> CiphertextStore | ClusterCiphertextStore:
    """Where ``count`` long-kept ciphertexts go: on the party's Dask cluster when ``workers``
    is its client, in this process otherwise."""
    if parallel.is_executor(workers):
        from linkage.executors import is_dask  # only with an executor: vfl.crypto stays light

        if is_dask(workers):
            return ClusterCiphertextStore(key, count, workers)
    return CiphertextStore(key, count)


def _join(*blocks: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """On a worker: consecutive blocks of packed ciphertexts as one partition."""
    return np.concatenate(blocks)


def _partition_products(
    partition: np.ndarray[Any, Any], rows: np.ndarray[Any, Any], columns: Any, modulus: int
) -> list[int]:
    """On a worker: for each column ``k``, the signed product over ``partition[rows]``."""
    bases = unpack(partition[rows])
    return [
        int(signed_multiexp(bases, columns[:, k], mpz(modulus))) for k in range(columns.shape[1])
    ]


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
    store: CiphertextStore | ClusterCiphertextStore,
    rows: np.ndarray[Any, Any],
    columns: np.ndarray[Any, Any],
    modulus: Any,
    workers: parallel.Workers = 1,
) -> list[Any]:
    """``[prod_i store[rows[i]] ** columns[i, k] for each column k]`` (``columns`` int64 of
    shape ``(len(rows), K)``): in one piece in this process below :data:`PARALLEL_MIN_TERMS`
    rows or with one worker, otherwise in chunks of rows on ``workers`` (this machine's
    processes or an executor), the chunk products multiplied together; on the cluster that
    holds a :class:`ClusterCiphertextStore`, by partition."""
    if isinstance(store, ClusterCiphertextStore):
        return store.signed_products(rows, columns, modulus)
    rows = np.asarray(rows, dtype=np.int64)
    slots = parallel.check_workers(workers)
    pieces = 1 if len(rows) < PARALLEL_MIN_TERMS else min(slots, len(rows) // 1024)
    if pieces <= 1:  # a small batch: here, whatever ``workers`` is
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
