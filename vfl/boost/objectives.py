"""The losses boosting descends: each gives the starting score and every row's gradient and
hessian of the loss in the raw score (``(rows, outputs)``).

* :class:`Logistic` (binary): ``p = sigmoid(f)``, ``g = p - y``, ``h = p (1 - p)``; starts
  at the log-odds of the labels' mean.
* :class:`Softmax` (``K`` classes, one output per class in one multi-output tree): ``g_k =
  p_k - [y = k]``, ``h_k = p_k (1 - p_k)`` (the diagonal of the true hessian; XGBoost doubles
  it); starts at the log of the class frequencies.
* :class:`Squared` (regression on standardised targets): ``g = f - y``, ``h = 1``; starts at
  0 (the mean, once standardised).

Logistic and softmax gradients and hessians lie in ``[-1, 1]``; the regression's gradients
(standardised targets) and noised ones (:class:`~vfl.privacy.GaussianGradientDP`) are
clipped at ``+-CLIP``, so that fixed-point sums of up to ``2**23`` rows stay exact (see
:data:`vfl.boost.tree.FG`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CLIP", "Logistic", "Objective", "Softmax", "Squared"]

CLIP = 64.0
"""The bound on a regression row's gradient (standardised targets: 64 standard deviations)."""

EPS = 1e-6


class Objective:
    outputs: int = 1

    def start(self, y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        raise NotImplementedError

    def gradients(
        self, raw: np.ndarray[Any, Any], y: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        raise NotImplementedError

    def loss(self, raw: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> float:
        raise NotImplementedError


@dataclass
class Logistic(Objective):
    """Binary labels ``y`` in {0, 1}."""

    outputs: int = 1

    def start(self, y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        mean = float(np.clip(np.mean(y), EPS, 1 - EPS))
        return np.array([np.log(mean / (1 - mean))])

    def gradients(
        self, raw: np.ndarray[Any, Any], y: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        p = 1.0 / (1.0 + np.exp(-raw[:, 0]))
        return (p - y)[:, None], np.maximum(p * (1 - p), EPS)[:, None]

    def loss(self, raw: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> float:
        f = raw[:, 0]
        return float(np.mean(np.logaddexp(0.0, f) - y * f))


@dataclass
class Softmax(Objective):
    """Class codes ``y`` in ``0..outputs-1``."""

    outputs: int = 3

    def start(self, y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        counts = np.bincount(y.astype(np.int64), minlength=self.outputs).astype(np.float64)
        freq = np.clip(counts / counts.sum(), EPS, 1.0)
        out: np.ndarray[Any, Any] = np.log(freq) - np.log(freq).mean()
        return out

    def _proba(self, raw: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        z = raw - raw.max(axis=1, keepdims=True)
        e = np.exp(z)
        out: np.ndarray[Any, Any] = e / e.sum(axis=1, keepdims=True)
        return out

    def gradients(
        self, raw: np.ndarray[Any, Any], y: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        p = self._proba(raw)
        onehot = np.eye(self.outputs)[y.astype(np.int64)]
        return p - onehot, np.maximum(p * (1 - p), EPS)

    def loss(self, raw: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> float:
        p = self._proba(raw)
        return float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), y.astype(np.int64)], EPS))))


@dataclass
class Squared(Objective):
    """Standardised real targets."""

    outputs: int = 1

    def start(self, y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.zeros(1)

    def gradients(
        self, raw: np.ndarray[Any, Any], y: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        g = np.clip(raw[:, 0] - y, -CLIP, CLIP)
        return g[:, None], np.ones((len(y), 1))

    def loss(self, raw: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> float:
        return float(np.mean((raw[:, 0] - y) ** 2) / 2)
