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

__all__ = [
    "LOSS_BOUND",
    "MAX_OUTPUTS",
    "SCORE_BOUND",
    "SQUARED",
    "TAYLOR_LOGISTIC",
    "LinearLoss",
    "check_scores",
    "penalty",
]

SCORE_BOUND = 2.0**16
"""Public bound on ``|u|`` and on targets, which sizes the masks and slots."""
LOSS_BOUND = 2.0**70
"""Public bound on an epoch's ``sum |z|^2``, the size of the loss's mask."""
MAX_OUTPUTS = 256
"""Most outputs (one-vs-rest classes) trained at once."""


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

    def mean_loss(self, sum_squares: float, rows: int, outputs: int = 1) -> float:
        """The mean over ``rows`` rows of the loss summed over ``outputs`` outputs, from
        ``sum |u - t|^2`` over those rows and outputs."""
        return (rows * outputs * self.offset + sum_squares) / self.divisor / rows

    def gradient(self, x: np.ndarray[Any, Any], z: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``x^T z / (c rows)`` in plaintext (what the protocol computes under encryption)."""
        out: np.ndarray[Any, Any] = x.T @ z / (self.c * len(z))
        return out


TAYLOR_LOGISTIC = LinearLoss("taylor", c=4.0, offset=8 * math.log(2) - 4, divisor=8.0)
SQUARED = LinearLoss("squared", c=1.0, offset=0.0, divisor=2.0)


def check_scores(u: np.ndarray[Any, Any], party: str) -> None:
    """Refuse partial scores beyond :data:`SCORE_BOUND` (training diverged)."""
    if u.size and float(np.max(np.abs(u))) > SCORE_BOUND:
        raise FloatingPointError(
            f"party {party!r}: partial scores beyond {SCORE_BOUND:g}; training diverged "
            "(lower learning_rate, raise alpha, or standardize the features)"
        )


def penalty(w: np.ndarray[Any, Any], alpha: float, has_intercept: bool) -> np.ndarray[Any, Any]:
    """The L2 penalty's gradient ``alpha * w``, zero on the intercept row."""
    g = alpha * w
    if has_intercept:
        g[-1] = 0.0
    out: np.ndarray[Any, Any] = g
    return out
