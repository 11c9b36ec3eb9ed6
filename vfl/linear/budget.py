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
from vfl.linear.model import FEATURE_BITS, public_feature_bits
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
    """Every bound and layout of a fit, derived by all parties alike from public numbers: the
    design columns of each data party (``blocks``, the label party's first, its intercept
    included), the outputs, the batch size, the key size and the row count. Nothing here
    depends on a party's values: the feature bound is :func:`~vfl.linear.model.
    public_feature_bits` of the row count."""

    blocks: tuple[int, ...]
    outputs: int
    batch_size: int
    key_bits: int
    rows: int
    penalty: int = 0
    """``penalty_weight`` at the scale of ``N`` over that of the weights (``2**(2 *
    FEATURE_BITS)``), an integer the data parties derive from the public alpha and rows (0
    at the coordinator, which is not told the penalty and uses no layout that depends on
    it)."""

    @property
    def d_a(self) -> int:
        """The label party's columns (its intercept included)."""
        return self.blocks[0]

    @property
    def joint(self) -> int:
        return sum(self.blocks)

    def block(self, index: int) -> slice:
        """The rows (or columns) of party ``index``'s block in the joint design."""
        start = sum(self.blocks[:index])
        return slice(start, start + self.blocks[index])

    @property
    def feature_bits(self) -> int:
        return public_feature_bits(self.rows)

    @property
    def row_bits(self) -> int:
        return (2 * self.batch_size).bit_length()

    @property
    def gram_bits(self) -> int:
        return 2 * self.feature_bits + self.row_bits

    def row_packing(self, index: int) -> RowPacking:
        """The packing of party ``index``'s encrypted rows: the label party's (index 0) are
        multiplied by the others' columns (cross Gram blocks); another party's by the label
        party's targets (``X_p^T t``) and by later parties' columns, so its slots fit the
        wider of the two (the targets')."""
        if index == 0:
            return slots.packing(self.gram_bits, self.blocks[0], self.key_bits, masked=True)
        bits = max(self.feature_bits + T_BITS, 2 * self.feature_bits) + self.row_bits
        return slots.packing(bits, self.blocks[index], self.key_bits, masked=True)

    def gram_layout(self, p: int, q: int) -> PackingLayout:
        """The masked cross Gram block ``X_p^T X_q`` (``p < q``): ``q`` multiplies ``p``'s
        rows by its columns."""
        return self.row_packing(p).masked_layout(self.blocks[q])

    def tau_layout(self, p: int) -> PackingLayout:
        """The masked ``X_p^T t`` of a party ``p > 0``, computed by the label party."""
        return self.row_packing(p).masked_layout(self.outputs)

    def share_bits(self, span: int = 1) -> int:
        """Bits of the entries of ``S_P`` summed over ``span`` batches (own Grams and shares
        of the cross Gram matrix)."""
        widest = max(
            self.gram_layout(p, q).slot_bits
            for p in range(len(self.blocks))
            for q in range(p + 1, len(self.blocks))
        )
        return max(widest, self.gram_bits) + 1 + span.bit_length()

    @property
    def weight_modulus(self) -> int:
        return 1 << (W_INT_BITS + W_BITS + RHO)

    def product_packing(self, span: int = 1) -> RowPacking:
        """The packed columns of ``S_P`` (summed over ``span`` batches), ``joint`` rows each,
        whose products ``S_P e`` carry shares of the weights (negated at B) under a mask."""
        # a holder raises the sum of the other parties' shares: one bit more per doubling of
        # their number beyond one
        summed = (len(self.blocks) - 1).bit_length() - 1
        value_bits = (
            self.share_bits(span)
            + summed
            + self.weight_modulus.bit_length()
            + self.joint.bit_length()
            + 2
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
        weights = 2 * self.feature_bits + rows + W_INT_BITS + W_BITS
        # room for + penalty * w (<= penalty * 2**(W_INT_BITS + W_BITS)) beside G w
        weights = max(weights, self.penalty.bit_length() + W_INT_BITS + W_BITS) + 1
        targets = rows + self.feature_bits + T_BITS
        return 1 << (max(weights + self.joint.bit_length(), targets) + 2 + RHO)

    def squares_bound(self) -> int:
        """Public bound on ``|X w - t|^2`` plus the penalty over all rows, at the scale
        ``2**(2 * (FEATURE_BITS + W_BITS))``: every score below ``joint * 2**feature_bits *
        2**W_INT_BITS`` plus a target's bound, every weight below ``2**W_INT_BITS``. The
        label party refuses an epoch whose loss total decrypts outside ``[0, bound]``."""
        score = self.joint * (1 << (self.feature_bits + W_INT_BITS + W_BITS)) + (1 << T_BITS)
        weights = self.joint * self.outputs * (1 << (2 * (W_INT_BITS + W_BITS)))
        return self.rows * self.outputs * score**2 + self.penalty * weights


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
