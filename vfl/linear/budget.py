"""The arithmetic of the secret-shared protocol (:mod:`vfl.linear.shared`): its bit budget and
the integer maths on shares, pure (no party, no channel).

* The fixed point: weights at ``2**W_BITS`` with ``|w| < 2**W_INT_BITS``, targets at
  ``2**(FEATURE_BITS + W_BITS)`` (``T_BITS``), learning-rate factors at ``2**LR_BITS``.
* :class:`Sizes`: every bound and packing of a fit, derived by every party alike from the
  public plans -- the row packings of the setup's cross products, the packed columns of
  ``S_P`` and their masked products, the moduli the shares are reduced by.
* Shares kept small (:func:`reduce_share`): a share of a value with a public bound is reduced
  modulo ``2**(bound + RHO)``, into ``[0, M)`` at the label party and ``[-M, 0)`` at the
  other; exact unless the label party's uniform share falls within the bound of the
  modulus' edge (probability below ``2**-RHO`` per value).
* One optimiser step on shares (:func:`fixed_point_step`), and the conversions between
  packed slots and matrices (:func:`by_rows`, :func:`pack_columns`, on
  :mod:`vfl.crypto.slots`).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.crypto import slots
from vfl.crypto.packing import PackingLayout, RowPacking
from vfl.linear.common import KAPPA
from vfl.linear.losses import SCORE_BOUND
from vfl.linear.model import FEATURE_BITS
from vfl.training.optimizers import Optimizer

__all__ = [
    "LR_BITS",
    "RHO",
    "T_BITS",
    "W_BITS",
    "W_INT_BITS",
    "Sizes",
    "by_rows",
    "dot",
    "exact",
    "fixed_point_step",
    "flat",
    "floats",
    "gram",
    "pack_columns",
    "reduce_share",
    "uniform",
]

W_BITS = 24
"""Weights are shared as integers at scale ``2**W_BITS``."""
W_INT_BITS = 16
"""Public bound on a weight's magnitude: ``|w| < 2**W_INT_BITS``."""
T_BITS = int(math.log2(SCORE_BOUND)) + FEATURE_BITS + W_BITS + 1
"""Bits of a target at scale ``2**(FEATURE_BITS + W_BITS)`` (``|t| <= SCORE_BOUND``)."""
RHO = 48
"""Bits by which a reduced share exceeds its value's bound (a failure, of probability below
``2**-RHO`` per value, is loud: it throws the weights far beyond their bound, which the end
of training refuses)."""
LR_BITS = 64
"""Fixed-point precision of the learning-rate factors."""


@dataclass(frozen=True)
class Sizes:
    """Every bound and layout of a fit, derived by all parties alike from the public plans."""

    d_a: int
    d_b: int
    outputs: int
    fb_a: int
    fb_b: int
    batch_size: int
    key_bits: int
    penalty: int = 0
    """``penalty_weight`` at the scale of ``N`` over that of the weights (``2**(2 *
    FEATURE_BITS)``), an integer both data parties derive from the public alpha and rows (0
    at the coordinator, which is not told the penalty and uses no layout that depends on
    it: the products' layout does not, and it opens the loss as one exact value)."""

    @property
    def joint(self) -> int:
        return self.d_a + self.d_b

    @property
    def row_bits(self) -> int:
        return (2 * self.batch_size).bit_length()

    @property
    def gram_bits(self) -> int:
        return 2 * max(self.fb_a, self.fb_b) + self.row_bits

    def row_packing(self, label: bool) -> RowPacking:
        """The packing of the label party's rows (multiplied by B's columns into ``G_AB``) or
        of B's (multiplied by the targets into ``X_B^T t``)."""
        if label:
            return slots.packing(self.gram_bits, self.d_a, self.key_bits, masked=True)
        bits = self.fb_b + T_BITS + self.row_bits
        return slots.packing(bits, self.d_b, self.key_bits, masked=True)

    @property
    def gram_layout(self) -> PackingLayout:
        return self.row_packing(True).masked_layout(self.d_b)

    @property
    def tau_layout(self) -> PackingLayout:
        return self.row_packing(False).masked_layout(self.outputs)

    def share_bits(self, span: int = 1) -> int:
        """Bits of the entries of ``S_P`` summed over ``span`` batches (own Grams and shares
        of the cross Gram matrix)."""
        return max(self.gram_layout.slot_bits, self.gram_bits) + 1 + span.bit_length()

    @property
    def weight_modulus(self) -> int:
        return 1 << (W_INT_BITS + W_BITS + RHO)

    def product_packing(self, span: int = 1) -> RowPacking:
        """The packed columns of ``S_P`` (summed over ``span`` batches), ``joint`` rows each,
        whose products ``S_P e`` carry shares of the weights (negated at B) under a mask."""
        value_bits = (
            self.share_bits(span) + self.weight_modulus.bit_length() + self.joint.bit_length() + 2
        )
        slot_bits = value_bits + KAPPA + 1
        per_ct = (self.key_bits - 2) // slot_bits
        if per_ct < 1:
            raise ValueError(f"a {self.key_bits}-bit key is too small for the shared protocol")
        return RowPacking(self.joint, slot_bits, per_ct)

    def product_layout(self, span: int = 1) -> PackingLayout:
        """The masked decryption of the packed ``S_P e`` for ``outputs`` columns ``e``."""
        return self.product_packing(span).masked_layout(self.outputs, kappa=KAPPA)

    def groups(self, span: int = 1) -> int:
        return self.product_packing(span).groups

    def n_modulus(self, span: int = 1) -> int:
        """Shares of ``N`` and ``N - tau`` (over ``span`` batches) are reduced modulo this."""
        rows = self.row_bits + span.bit_length()
        weights = 2 * max(self.fb_a, self.fb_b) + rows + W_INT_BITS + W_BITS
        # room for + penalty * w (<= penalty * 2**(W_INT_BITS + W_BITS)) beside G w
        weights = max(weights, self.penalty.bit_length() + W_INT_BITS + W_BITS) + 1
        targets = rows + max(self.fb_a, self.fb_b) + T_BITS
        return 1 << (max(weights + self.joint.bit_length(), targets) + 2 + RHO)

    def loss_bound(self, span: int) -> float:
        """Bound on the encrypted cross terms of the loss over ``span`` batches."""
        bits = (
            self.weight_modulus.bit_length()
            + self.n_modulus(span).bit_length()
            + (4 * self.joint * self.outputs).bit_length()
        )
        return 2.0**bits


def reduce_share(values: np.ndarray[Any, Any], modulus: int, first: bool) -> np.ndarray[Any, Any]:
    """A share reduced modulo ``modulus``: into ``[0, M)`` at the label party (``first``),
    ``[-M, 0)`` at the other."""
    out = np.empty(values.shape, dtype=object)
    flat_in, flat_out = values.reshape(-1), out.reshape(-1)
    for i, v in enumerate(flat_in.tolist()):
        r = int(v) % modulus
        flat_out[i] = r if first else r - modulus
    return out


def uniform(shape: tuple[int, ...], modulus: int) -> np.ndarray[Any, Any]:
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    for i in range(flat.size):
        flat[i] = secrets.randbelow(modulus)
    return out


def exact(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray(a).astype(object)


def gram(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], bits: int) -> np.ndarray[Any, Any]:
    """``x^T y`` of int64 matrices whose entries are below ``2**bits`` in magnitude, exact
    (object integers when int64 could overflow)."""
    if bits < 63:
        return exact(x.T @ y)
    return exact(x).T @ exact(y)  # type: ignore[no-any-return]


def fixed_point_step(
    optimizer: Optimizer, epoch: int, c: float, rows: int, alpha: float
) -> tuple[int, int, int, int]:
    """The integer factors (at scale ``2**LR_BITS``) of one step of a linear optimiser on
    shares: ``1 / (c rows)`` for ``N`` and ``alpha`` for the weights (the gradient), ``beta``
    for the velocity and the step size."""
    linear = optimizer.linear_step(epoch)
    if linear is None:
        raise ValueError(f"{type(optimizer).__name__} is not linear in the gradient")
    beta, step = linear
    scale = 2.0**LR_BITS
    return (
        round(scale / (c * rows)),
        round(alpha * scale),
        round(beta * scale),
        round(step * scale),
    )


def by_rows(values: list[int] | tuple[int, ...], packing: RowPacking, outputs: int) -> Any:
    """Slots laid out output-major, then group, then slot (``packing.masked_layout(outputs)``),
    as a ``(packing.columns, outputs)`` array (padding slots dropped)."""
    return slots.from_slots(values, outputs, packing).T


def pack_columns(
    s: np.ndarray[Any, Any], packing: RowPacking, modulus: int, zero: np.ndarray[Any, Any]
) -> list[int | None]:
    """The plaintexts of ``s``'s columns packed as ``packing`` (column ``c``, group ``g`` at
    ``c * groups + g``); None for a group whose rows lie in the structurally zero block of
    ``S_P`` (public, as the block is)."""
    plain: list[int | None] = list(slots.plaintexts(s.T, packing, modulus))
    for c in range(s.shape[1]):
        for g in range(packing.groups):
            if all(zero[r, c] for r in packing.group(g)):
                plain[c * packing.groups + g] = None
    return plain


def dot(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> int:
    return int(sum(int(x) * int(y) for x, y in zip(a.reshape(-1), b.reshape(-1), strict=True)))


def floats(a: np.ndarray[Any, Any], bits: int) -> np.ndarray[Any, Any]:
    flat = [math.ldexp(int(x), -bits) for x in a.reshape(-1)]
    out: np.ndarray[Any, Any] = np.array(flat, dtype=float).reshape(a.shape)
    return out


def flat(a: np.ndarray[Any, Any]) -> list[int]:
    return [int(x) for x in np.asarray(a).reshape(-1)]
