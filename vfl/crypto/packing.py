"""Packing many integers into one Paillier plaintext: the layouts and the slot arithmetic.

Pure integer arithmetic, no ciphertexts (this module is the leaf of :mod:`vfl.crypto`):
:class:`PackingLayout` and :class:`PackingMasks` describe masked slots for the trip to a key
holder (:mod:`vfl.crypto.masked` does the homomorphic part); :class:`RowPacking`,
:func:`pack_rows` and :func:`unpack_signed` pack a party's fixed-point feature rows into signed
slots for vertical linear models.

Masked packing, step by step:

A party that must have an encrypted vector decrypted by the key holder (a gradient, in vertical
logistic regression) without showing it does three things:

1. adds to each value ``v`` a public offset ``2**(b-1)`` (so it is non-negative, ``b`` being
   :attr:`PackingLayout.value_bits`, enough for ``|v| <= bound``) and a secret random mask
   ``r < 2**(b + kappa)`` drawn from the OS;
2. packs ``k`` such values into one plaintext, each in a slot of ``b + kappa + 1`` bits, by
   Horner's rule on ciphertexts (``acc = acc**(2**slot) * c``): ``k = (n_bits - 2) // slot``,
   20 slots for a 2048-bit key with ``b = 60`` and ``kappa = 40``;
3. sends the packed ciphertexts; the key holder decrypts ``ceil(count / k)`` ciphertexts
   instead of ``count`` (:meth:`vfl.crypto.PaillierPrivateKey.decrypt_packed`) and returns the
   slots, each ``v + offset + r``; the party subtracts its masks (:meth:`PackingMasks.unmask`).

The key holder sees each value hidden by a mask ``kappa`` bits longer than the value: the
statistical distance between ``v + offset + r`` and ``r`` alone is below ``2**-kappa``
(``kappa >= 40`` enforced). Slots cannot carry into each other as long as ``|v| <= bound``;
a value beyond the bound is detected after unmasking (it falls outside ``[-2**(b-1),
2**(b-1))``) and raises, though such an overflow may also corrupt its neighbour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.crypto import fixedpoint

__all__ = [
    "MIN_KAPPA",
    "PackingLayout",
    "PackingMasks",
    "RowPacking",
    "pack_rows",
    "unpack_signed",
    "unpack_slots",
]

MIN_KAPPA = 40
"""Smallest statistical masking parameter (bits) accepted."""


@dataclass(frozen=True)
class PackingLayout:
    """The public shape of a packed vector (sent along with the packed ciphertexts).

    Attributes
    ----------
    count : int
        Values packed.
    value_bits : int
        Bits ``b`` of an offset value ``v + 2**(b-1)``.
    kappa : int
        Statistical masking bits.
    slots : int
        Values per ciphertext.
    """

    count: int
    value_bits: int
    kappa: int
    slots: int

    @property
    def slot_bits(self) -> int:
        """Bits of one slot: ``value_bits + kappa + 1``."""
        return self.value_bits + self.kappa + 1

    @property
    def n_ciphertexts(self) -> int:
        """Packed ciphertexts, i.e. decryptions the key holder performs."""
        return math.ceil(self.count / self.slots)

    def to_dict(self) -> dict[str, int]:
        """For the wire."""
        return {
            "count": self.count,
            "value_bits": self.value_bits,
            "kappa": self.kappa,
            "slots": self.slots,
        }

    @classmethod
    def from_dict(cls, data: Any, *, n_bits: int) -> PackingLayout:
        """From the wire, checked against a key of ``n_bits`` bits."""
        try:
            layout = cls(**{k: int(data[k]) for k in ("count", "value_bits", "kappa", "slots")})
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed packing layout {data!r}: {exc}") from None
        if (
            layout.count < 0
            or layout.value_bits < 1
            or layout.kappa < MIN_KAPPA
            or layout.slots < 1
        ):
            raise ValueError(f"invalid packing layout {layout}")
        if layout.slots * layout.slot_bits > n_bits - 2:
            raise ValueError(f"packing layout {layout} does not fit a {n_bits}-bit key")
        return layout


@dataclass(frozen=True)
class PackingMasks:
    """What the packing party keeps secret: its masks, to remove them from the returned slots."""

    layout: PackingLayout
    exponent: int
    masks: tuple[int, ...]  # offset + r per value

    def unmask_integers(self, slots: list[int]) -> list[int]:
        """The original signed fixed-point integers (scaled by ``2**exponent``), exactly."""
        if len(slots) != self.layout.count:
            raise ValueError(f"expected {self.layout.count} slots, got {len(slots)}")
        half = 1 << (self.layout.value_bits - 1)
        values = [int(s) - m for s, m in zip(slots, self.masks, strict=True)]
        if any(not -half <= v < half for v in values):
            raise fixedpoint.FixedPointOverflowError(
                "a packed value exceeded the bound given to pack_masked; pack with a larger bound"
            )
        return values

    def unmask(self, slots: list[int]) -> np.ndarray[Any, Any]:
        """The original values (float64) from the key holder's slots.

        Raises
        ------
        OverflowError
            A value was beyond the bound given to :func:`pack_masked`.
        ValueError
            The number of slots is not the number of packed values.
        """
        return fixedpoint.ints_to_floats(self.unmask_integers(slots), self.exponent)


def unpack_slots(plaintexts: list[int], layout: PackingLayout) -> list[int]:
    """Split decrypted packed plaintexts into the ``layout.count`` masked slot values."""
    if len(plaintexts) != layout.n_ciphertexts:
        raise ValueError(
            f"expected {layout.n_ciphertexts} packed plaintexts, got {len(plaintexts)}"
        )
    mask = (1 << layout.slot_bits) - 1
    out: list[int] = []
    for i, m in enumerate(plaintexts):
        k = min(layout.slots, layout.count - i * layout.slots)
        m = int(m)
        out += [(m >> (layout.slot_bits * j)) & mask for j in range(k)]
    return out


@dataclass(frozen=True)
class RowPacking:
    """How a party packs its feature rows: ``per_ct`` columns per plaintext, each in a signed
    slot of ``slot_bits`` bits (public; sent with the encrypted rows).

    A slot must hold a sum over a batch of ``x * z`` plus, when the sum is decrypted by
    another party, a mask of ``kappa`` extra bits (see :meth:`masked_layout`).
    """

    columns: int
    slot_bits: int
    per_ct: int

    @property
    def groups(self) -> int:
        """Plaintexts (ciphertexts) per row."""
        return -(-self.columns // self.per_ct)

    def group(self, g: int) -> range:
        """The columns in group ``g``."""
        return range(g * self.per_ct, min(self.columns, (g + 1) * self.per_ct))

    @classmethod
    def plan(cls, value_bits: int, columns: int, key_bits: int, *, kappa: int | None) -> RowPacking:
        """Slots for signed sums ``|v| < 2**value_bits``, with room for a ``kappa``-bit mask
        when the sums are decrypted by someone else (``kappa=None``: by their owner)."""
        slot_bits = value_bits + 2 + (kappa + 1 if kappa is not None else 0)
        per_ct = (key_bits - 2) // slot_bits
        if per_ct < 1:
            raise ValueError(f"a {key_bits}-bit key cannot hold a {slot_bits}-bit slot")
        return cls(columns, slot_bits, per_ct)

    def value_bits(self, kappa: int | None) -> int:
        """Bits of a slot's value (``|v| < 2**value_bits``)."""
        return self.slot_bits - 2 - (kappa + 1 if kappa is not None else 0)

    def masked_layout(self, rows: int = 1, *, kappa: int = MIN_KAPPA) -> PackingLayout:
        """The layout a key holder decrypts ``rows`` masked rows of this packing with: every
        slot of their ``rows * groups`` ciphertexts (row-major, padding slots included, so
        that row ``i``'s column ``j`` is slot ``i * groups * per_ct + j``), slots as wide as
        ours, each value ``kappa`` bits below its slot's mask."""
        return PackingLayout(
            count=rows * self.groups * self.per_ct,
            value_bits=self.slot_bits - kappa - 1,
            kappa=kappa,
            slots=self.per_ct,
        )

    def to_dict(self) -> dict[str, int]:
        return {"columns": self.columns, "slot_bits": self.slot_bits, "per_ct": self.per_ct}

    @classmethod
    def from_dict(cls, data: Any, *, key_bits: int, min_slot_bits: int = 1) -> RowPacking:
        """Check a received packing (ValueError when malformed or impossible for the key)."""
        try:
            packing = cls(int(data["columns"]), int(data["slot_bits"]), int(data["per_ct"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"malformed row packing {data!r}") from None
        if (
            packing.columns < 1
            or packing.slot_bits < min_slot_bits
            or packing.per_ct < 1
            or packing.per_ct * packing.slot_bits > key_bits - 2
        ):
            raise ValueError(f"impossible row packing {data!r} for a {key_bits}-bit key")
        return packing


def pack_rows(x_int: np.ndarray[Any, Any], packing: RowPacking, modulus: int) -> list[list[int]]:
    """Per group of columns, one plaintext per row: ``sum_j x[i, j] * 2**(slot_bits * j)``
    (signed slots, taken modulo ``modulus``)."""
    out = []
    for g in range(packing.groups):
        cols = packing.group(g)
        shifts = [packing.slot_bits * j for j in range(len(cols))]
        plain = []
        for row in x_int[:, cols.start : cols.stop].tolist():
            acc = 0
            for value, shift in zip(row, shifts, strict=True):
                acc += value << shift
            plain.append(acc % modulus)
        out.append(plain)
    return out


def unpack_signed(value: int, packing: RowPacking, g: int, value_bits: int) -> list[int]:
    """The signed slots of group ``g``'s exact (signed) plaintext, each checked to lie within
    ``2**value_bits``.

    Raises
    ------
    OverflowError
        A slot beyond the bound (it may have borrowed from its neighbour) or bits left over.
    """
    bits = packing.slot_bits
    full, half, limit = 1 << bits, 1 << (bits - 1), 1 << value_bits
    out = []
    for _ in packing.group(g):
        slot = value & (full - 1)
        if slot >= half:
            slot -= full
        out.append(slot)
        value = (value - slot) >> bits
    if value or any(abs(s) >= limit for s in out):
        raise OverflowError("a packed sum overflowed its slots")
    return out
