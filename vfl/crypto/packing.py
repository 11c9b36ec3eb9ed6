"""Masked packing: many encrypted values per ciphertext for the trip to the key holder.

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
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from vfl.crypto import fixedpoint

if TYPE_CHECKING:
    from vfl.crypto.vector import EncryptedVector

__all__ = ["MIN_KAPPA", "PackingLayout", "PackingMasks", "pack_masked", "unpack_slots"]

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


def pack_masked(
    vector: EncryptedVector, *, bound: float, kappa: int = MIN_KAPPA
) -> tuple[EncryptedVector, PackingMasks]:
    """Mask and pack an encrypted 1-d vector whose values satisfy ``|v| <= bound``.

    Returns
    -------
    (EncryptedVector, PackingMasks)
        The packed ciphertexts (send them, with ``masks.layout.to_dict()``) and the masks to keep.
    """
    if kappa < MIN_KAPPA:
        raise ValueError(
            f"kappa must be at least {MIN_KAPPA} bits for statistical hiding, got {kappa}"
        )
    if not bound > 0 or not math.isfinite(bound):
        raise ValueError(f"bound must be a positive finite number, got {bound!r}")
    pk = vector.public_key
    value_bits = max(1, math.ceil(math.log2(bound) - vector.exponent) + 1) + 1
    slot_bits = value_bits + kappa + 1
    slots = (pk.n_length - 2) // slot_bits
    if slots < 1:
        raise ValueError(f"a value of {value_bits} bits with kappa={kappa} does not fit the key")
    layout = PackingLayout(count=vector.size, value_bits=value_bits, kappa=kappa, slots=slots)
    offset = 1 << (value_bits - 1)
    masks = tuple(offset + secrets.randbits(value_bits + kappa) for _ in range(vector.size))
    n, nsq = pk.n, pk.nsquare
    masked = [c * (1 + n * m) % nsq for c, m in zip(vector.ciphertexts, masks, strict=True)]
    shift = mpz(1) << slot_bits
    packed = []
    for start in range(0, len(masked), slots):
        group = masked[start : start + slots]
        acc = group[-1]
        for c in reversed(group[:-1]):  # slot 0 holds the group's first value
            acc = gmpy2.powmod(acc, shift, nsq) * c % nsq
        packed.append(acc)
    from vfl.crypto.vector import EncryptedVector

    out = EncryptedVector(pk, packed, 0)
    return out, PackingMasks(layout, vector.exponent, masks)


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
