"""Matrices of fixed-point integers in packed Paillier slots: the one kit of every protocol
that multiplies one party's encrypted rows by another's plaintext (the vertical linear
models' gradient exchange and shared Gram matrices, the split network's protected layer,
federated transfer learning).

A matrix travels row by row, each row's values in the signed slots of one or more plaintexts
(:class:`~vfl.crypto.packing.RowPacking`: ``packing.groups`` ciphertexts per row, row-major;
:func:`packing` plans the slots, :func:`plaintexts` packs, :func:`encrypt_rows` encrypts).
A party holding rows ``[r_j]`` of such a packing and plaintext integer exponents ``e`` gets
``[sum_j e_j r_j]`` in the same slots with one multi-exponentiation per output row and group:
:func:`combine` on ciphertexts at hand, :meth:`PeerRows.combine` on a peer's rows kept for a
whole fit. A slot's sum stays exact as long as it fits the slot. Values are exact integers
throughout (:func:`fixed` scales floats once, with a bound that names what overflowed); the
results come back as rows with :func:`unpack_rows` (decrypted plaintexts) or
:func:`from_slots` (slot values, e.g. from a masked decryption, :mod:`vfl.crypto.masked`).

Whatever goes back to the key's owner after such a computation is re-randomised in the group
of the sender's base first (:func:`for_owner`; see :mod:`vfl.crypto.rerandomize`): the owner
encrypted the inputs, so it knows their randomness and could otherwise test guesses of the
exponents.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl.crypto import parallel
from vfl.crypto.kernels import multiexp_rows
from vfl.crypto.keys import PaillierPublicKey
from vfl.crypto.packing import MIN_KAPPA, RowPacking, pack_rows, unpack_signed
from vfl.crypto.parallel import Workers
from vfl.crypto.rerandomize import rerandomize
from vfl.crypto.store import CiphertextStore, ClusterCiphertextStore, signed_multiexp_chunks
from vfl.crypto.vector import EncryptedVector
from vfl.federation.messages import Message
from vfl.federation.wire import CiphertextBlock

__all__ = [
    "PeerRows",
    "add_plain",
    "block",
    "combine",
    "encrypt_rows",
    "expect",
    "fixed",
    "for_owner",
    "from_slots",
    "packing",
    "plaintexts",
    "unpack_rows",
]


def fixed(values: Any, bits: int, bound: int, what: str, fix: str) -> np.ndarray[Any, Any]:
    """``round(values * 2**bits)``, refusing non-finite values and any of magnitude
    ``2**bound`` or more (the error names ``what`` and the ``fix``): int64 when
    ``bits + bound <= 62``, else exact Python integers (an object array)."""
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} is not finite")
    worst = float(np.max(np.abs(arr))) if arr.size else 0.0
    if worst >= 2.0**bound:
        raise OverflowError(
            f"{what} reached {worst:.3g}, beyond the fixed-point bound 2**{bound}: {fix}"
        )
    scaled = np.rint(arr * 2.0**bits)  # exact: a power of two times a float
    if bits + bound <= 62:
        out: np.ndarray[Any, Any] = scaled.astype(np.int64)
        return out
    exact = np.empty(scaled.shape, dtype=object)
    exact.ravel()[:] = [int(v) for v in scaled.ravel().tolist()]
    return exact


def packing(
    value_bits: int, columns: int, key: PaillierPublicKey | int, *, masked: bool = False
) -> RowPacking:
    """Signed slots for values ``|v| < 2**value_bits`` under ``key`` (or a key of that many
    bits), with room for a statistical mask (``MIN_KAPPA`` bits) when someone else decrypts
    them."""
    key_bits = key if isinstance(key, int) else key.n_length
    return RowPacking.plan(value_bits, columns, key_bits, kappa=MIN_KAPPA if masked else None)


def plaintexts(rows: np.ndarray[Any, Any], layout: RowPacking, modulus: int) -> list[int]:
    """Each row of integers packed into ``layout.groups`` plaintexts (row-major: row ``i``'s
    group ``g`` at ``i * groups + g``), modulo ``modulus``."""
    groups = pack_rows(rows, layout, modulus)
    return [groups[g][i] for i in range(len(rows)) for g in range(layout.groups)]


def encrypt_rows(key: Any, rows: np.ndarray[Any, Any], layout: RowPacking) -> list[Any]:
    """Each row of integers packed (:func:`plaintexts`) and encrypted by ``key`` (a public
    key, or a private key encrypting by CRT)."""
    public = key.public_key if hasattr(key, "public_key") else key
    out: list[Any] = key.raw_encrypt(plaintexts(rows, layout, int(public.n)))
    return out


def add_plain(
    cts: list[Any], rows: np.ndarray[Any, Any], layout: RowPacking, key: PaillierPublicKey
) -> list[Any]:
    """``cts`` (rows of ``layout``) plus the plaintext integer ``rows`` packed alike."""
    n, nsq = key.n, key.nsquare
    plain = plaintexts(rows, layout, int(n))
    return [c * (1 + n * m) % nsq for c, m in zip(cts, plain, strict=True)]


PARALLEL_ROWS = 32
"""Rows below which :func:`combine` stays in the calling thread."""


def combine(
    bases: list[Any],
    groups: int,
    exponents: np.ndarray[Any, Any],
    nsq: Any,
    *,
    workers: Workers = 1,
) -> list[Any]:
    """For each row ``e`` of ``exponents``: ``prod_j bases[j, g] ** e[j]`` for every group
    ``g`` (row-major): ``bases`` holds ``len(e)`` rows of ``groups`` ciphertexts. With
    ``workers``, the rows are split among worker processes (or an executor's tasks)."""
    rows = list(exponents)
    count = parallel.check_workers(workers)
    if count > 1 and len(rows) >= PARALLEL_ROWS:
        chunks = parallel.split(rows, count)
        tasks = [(bases[g::groups], list(c), int(nsq)) for g in range(groups) for c in chunks]
        done = parallel.map_processes(parallel.multiexp_rows_worker, tasks, workers)
        per_group = [
            [v for part in done[g * len(chunks) : (g + 1) * len(chunks)] for v in part]
            for g in range(groups)
        ]
    else:
        per_group = [multiexp_rows(bases[g::groups], rows, nsq) for g in range(groups)]
    return [per_group[g][i] for i in range(len(rows)) for g in range(groups)]


def unpack_rows(
    plaintexts: list[int], rows: int, layout: RowPacking, value_bits: int, n: int, what: str
) -> np.ndarray[Any, Any]:
    """The signed slot values of decrypted rows (an ``int`` object array ``rows x columns``);
    OverflowError naming ``what`` when a slot left its bound or a padding slot is not 0."""
    out = np.empty((rows, layout.columns), dtype=object)
    try:
        for i in range(rows):
            row: list[int] = []
            for g in range(layout.groups):
                value = int(plaintexts[i * layout.groups + g])
                signed = value - n if value > n // 2 else value
                row += unpack_signed(signed, layout, g, value_bits)
            out[i, :] = row
    except OverflowError:
        raise OverflowError(_overflowed(what)) from None
    return out


def from_slots(
    values: list[int] | tuple[int, ...],
    rows: int,
    layout: RowPacking,
    *,
    value_bits: int | None = None,
    what: str = "a packed value",
) -> np.ndarray[Any, Any]:
    """Rows from their slot values, every slot of ``rows * groups`` ciphertexts in order
    (padding slots included: ``layout.masked_layout(rows)``), as an ``int`` object array
    ``rows x columns``. With ``value_bits``, each value must be below ``2**value_bits`` in
    magnitude and each padding slot 0 (OverflowError naming ``what``)."""
    width = layout.groups * layout.per_ct
    if len(values) != rows * width:
        raise ValueError(f"expected {rows * width} slots of {rows} rows, got {len(values)}")
    out = np.empty((rows, layout.columns), dtype=object)
    for i in range(rows):
        row = [int(v) for v in values[i * width : (i + 1) * width]]
        if value_bits is not None and (
            any(abs(v) >= 1 << value_bits for v in row) or any(row[layout.columns :])
        ):
            raise OverflowError(_overflowed(what))
        out[i, :] = row[: layout.columns]
    return out


def _overflowed(what: str) -> str:
    return (
        f"{what} overflowed its fixed-point slots: lower the learning rate or bound the "
        "values (e.g. a tanh on the module's output)"
    )


def block(key: PaillierPublicKey, cts: list[Any]) -> CiphertextBlock:
    """Ciphertexts for the wire, as they are (already fresh or re-randomised)."""
    return EncryptedVector(key, cts, 0, fresh=True).to_wire()


def for_owner(key: PaillierPublicKey, cts: list[Any], *, workers: Workers = 1) -> list[Any]:
    """Re-randomised for the key's owner, in the group of our base, where it encrypted (the
    base's powers drawn by ``workers``: :meth:`~vfl.crypto.PaillierPublicKey.full_obfuscators`)."""
    vector = EncryptedVector(key, cts, 0)
    return rerandomize(vector, for_key_owner="base", workers=workers).ciphertexts


def expect(
    vector: EncryptedVector, count: int, cls: type[Message], peer: str, field: str
) -> list[Any]:
    """The ciphertexts of a received vector of ``count`` integers, or a refusal naming
    ``peer`` and the message's ``field``."""
    if vector.size != count or vector.exponent != 0:
        cls.refuse(peer, field, f"holds {vector.size} ciphertexts, {count} expected")
    return vector.ciphertexts


class PeerRows:
    """Another party's packed, encrypted rows, kept for a whole fit: one
    :class:`~vfl.crypto.store.CiphertextStore` per column group (the wire's bytes, ``key_bits
    / 4`` bytes per row and group; no Python object per row), on the party's Dask cluster
    when its ``workers`` is one (:func:`~vfl.crypto.store.ciphertext_store`)."""

    def __init__(
        self,
        key: PaillierPublicKey,
        groups: list[CiphertextStore | ClusterCiphertextStore],
        packing: RowPacking,
    ):
        self.key, self.groups, self.packing = key, groups, packing

    @property
    def nbytes(self) -> int:
        return sum(g.nbytes for g in self.groups)

    def combine(
        self,
        rows: np.ndarray[Any, Any],
        z_int: np.ndarray[Any, Any],
        *,
        to_key_owner: bool,
        workers: Workers = 1,
    ) -> EncryptedVector:
        """``[[X[rows]^T z]]`` for every column of ``z_int`` (``(len(rows), K)`` integers), packed
        (one ciphertext per output and group, output-major), re-randomised: one signed
        Pippenger multi-exponentiation each (:func:`~vfl.crypto.store.signed_multiexp`), in
        chunks of rows on ``workers`` for a large batch.

        The owner of the rows knows their randomness and could otherwise test guesses of ``z``
        against the product; a product going to the key's owner gets uniform ``r**n``
        (:mod:`vfl.crypto.rerandomize`)."""
        nsq = self.key.nsquare
        columns = np.asarray(z_int, dtype=np.int64)
        by_group = [
            signed_multiexp_chunks(store, rows, columns, nsq, workers) for store in self.groups
        ]
        out = [by_group[g][k] for k in range(columns.shape[1]) for g in range(len(self.groups))]
        return rerandomize(EncryptedVector(self.key, out, 0), for_key_owner=to_key_owner)
