"""Matrices of fixed-point integers in packed Paillier slots: the kit of the protocols that
multiply one party's encrypted rows by another's plaintext (the split network's protected
layer, federated transfer learning).

A matrix travels row by row, each row's values in the signed slots of one or more plaintexts
(:class:`~vfl.crypto.packing.RowPacking`: ``packing.groups`` ciphertexts per row, row-major).
A party holding rows ``[r_j]`` of such a packing and plaintext integer exponents ``e`` gets
``[sum_j e_j r_j]`` in the same slots with one multi-exponentiation per output row and group
(:func:`combine`); a slot's sum stays exact as long as it fits the slot. Values are exact
integers throughout (:func:`fixed` scales floats once, with a bound that names what
overflowed).

Whatever goes back to the key's owner after such a computation is re-randomised in the group
of the sender's base first (:func:`for_owner`; see :mod:`vfl.crypto.rerandomize`): the owner
encrypted the inputs, so it knows their randomness and could otherwise test guesses of the
exponents.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl.crypto.kernels import multiexp_rows
from vfl.crypto.keys import PaillierPublicKey
from vfl.crypto.packing import MIN_KAPPA, RowPacking, pack_rows, unpack_signed
from vfl.crypto.rerandomize import rerandomize
from vfl.crypto.vector import EncryptedVector
from vfl.federation.messages import Message
from vfl.federation.wire import CiphertextBlock

__all__ = [
    "add_plain",
    "block",
    "combine",
    "encrypt_rows",
    "expect",
    "fixed",
    "for_owner",
    "packing",
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
    value_bits: int, columns: int, key: PaillierPublicKey, *, masked: bool = False
) -> RowPacking:
    """Signed slots for values ``|v| < 2**value_bits``, with room for a statistical mask
    (``MIN_KAPPA`` bits) when someone else decrypts them."""
    return RowPacking.plan(value_bits, columns, key.n_length, kappa=MIN_KAPPA if masked else None)


def encrypt_rows(key: Any, rows: np.ndarray[Any, Any], layout: RowPacking) -> list[Any]:
    """Each row of integers packed (``layout.groups`` plaintexts, row-major) and encrypted by
    ``key`` (a public key, or a private key encrypting by CRT)."""
    public = key.public_key if hasattr(key, "public_key") else key
    groups = pack_rows(rows, layout, int(public.n))
    plain = [groups[g][i] for i in range(len(rows)) for g in range(layout.groups)]
    out: list[Any] = key.raw_encrypt(plain)
    return out


def add_plain(
    cts: list[Any], rows: np.ndarray[Any, Any], layout: RowPacking, key: PaillierPublicKey
) -> list[Any]:
    """``cts`` (rows of ``layout``) plus the plaintext integer ``rows`` packed alike."""
    n, nsq = key.n, key.nsquare
    groups = pack_rows(rows, layout, int(n))
    plain = [groups[g][i] for i in range(len(rows)) for g in range(layout.groups)]
    return [c * (1 + n * m) % nsq for c, m in zip(cts, plain, strict=True)]


def combine(bases: list[Any], groups: int, exponents: np.ndarray[Any, Any], nsq: Any) -> list[Any]:
    """For each row ``e`` of ``exponents``: ``prod_j bases[j, g] ** e[j]`` for every group
    ``g`` (row-major): ``bases`` holds ``len(e)`` rows of ``groups`` ciphertexts."""
    per_group = [multiexp_rows(bases[g::groups], list(exponents), nsq) for g in range(groups)]
    return [per_group[g][i] for i in range(len(exponents)) for g in range(groups)]


def unpack_rows(
    plaintexts: list[int], rows: int, layout: RowPacking, value_bits: int, n: int, what: str
) -> np.ndarray[Any, Any]:
    """The signed slot values of decrypted rows (an ``int`` object array ``rows x columns``);
    OverflowError naming ``what`` when a slot left its bound."""
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
        raise OverflowError(
            f"{what} overflowed its fixed-point slots: lower the learning rate or bound the "
            "values (e.g. a tanh on the module's output)"
        ) from None
    return out


def block(key: PaillierPublicKey, cts: list[Any]) -> CiphertextBlock:
    """Ciphertexts for the wire, as they are (already fresh or re-randomised)."""
    return EncryptedVector(key, cts, 0, fresh=True).to_wire()


def for_owner(key: PaillierPublicKey, cts: list[Any]) -> list[Any]:
    """Re-randomised for the key's owner, in the group of our base, where it encrypted."""
    return rerandomize(EncryptedVector(key, cts, 0), for_key_owner="base").ciphertexts


def expect(
    vector: EncryptedVector, count: int, cls: type[Message], peer: str, field: str
) -> list[Any]:
    """The ciphertexts of a received vector of ``count`` integers, or a refusal naming
    ``peer`` and the message's ``field``."""
    if vector.size != count or vector.exponent != 0:
        cls.refuse(peer, field, f"holds {vector.size} ciphertexts, {count} expected")
    return vector.ciphertexts
