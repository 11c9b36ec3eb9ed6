"""The losses vertical linear models train under encryption: pure maths, no protocol.

Both have a gradient in the score ``u`` that is linear in ``u``, so every party's gradient is
``X_t^T z / (c n)`` with ``z = u - t(y)`` -- the sum of the parties' partial scores minus a
target only the label party knows -- which additively homomorphic encryption can compute:

* :data:`TAYLOR_LOGISTIC` -- the second-order Taylor expansion of the logistic loss at 0,
  ``log 2 - y'u/2 + u^2/8`` with ``y' = 2y - 1`` (Hardy et al. 2017): ``t = 2y'``, ``c = 4``;
  ``8 * loss = (8 log 2 - 4) + (u - 2y')^2`` per row;
* :data:`SQUARED` -- ``(u - y)^2 / 2``, exact (no approximation): ``t = y``, ``c = 1``.

Either loss summed over a batch is ``(rows * offset + |z|^2) / divisor``, so the protocol needs
only ``|z|^2``, which splits into pieces each party can compute (see :mod:`vfl.linear.protocol`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SQUARED", "TAYLOR_LOGISTIC", "LinearLoss"]


@dataclass(frozen=True)
class LinearLoss:
    """A loss whose gradient in the score is ``(u - target) / c``.

    Attributes
    ----------
    name : str
    c : float
        The gradient's divisor.
    offset : float
        Per-row constant of ``divisor * loss - (u - target)^2``.
    divisor : float
        ``loss = (offset + (u - target)^2) / divisor`` per row.
    """

    name: str
    c: float
    offset: float
    divisor: float

    def targets(self, y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``t(y)``: ``2(2y - 1)`` for the Taylor logistic loss (``y`` in 0/1), ``y`` else."""
        out: np.ndarray[Any, Any] = 2.0 * (2.0 * y - 1.0) if self.name == "taylor" else y
        return out

    def mean_loss(self, sum_squares: float, rows: int) -> float:
        """The mean loss over ``rows`` rows from ``sum |u - t|^2`` over them (per output,
        summed over outputs when ``sum_squares`` covers several)."""
        return (rows * self.offset + sum_squares) / self.divisor / rows

    def gradient(self, x: np.ndarray[Any, Any], z: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``x^T z / (c rows)`` in plaintext (what the protocol computes under encryption)."""
        out: np.ndarray[Any, Any] = x.T @ z / (self.c * len(z))
        return out


TAYLOR_LOGISTIC = LinearLoss("taylor", c=4.0, offset=8 * math.log(2) - 4, divisor=8.0)
SQUARED = LinearLoss("squared", c=1.0, offset=0.0, divisor=2.0)
