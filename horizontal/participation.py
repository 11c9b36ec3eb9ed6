"""How much client sampling adds to a round's noise: cross-silo (every hospital, every round)
against cross-device (a few of many).

When ``m`` of ``N`` clients are drawn without replacement each round, the mean of their
updates is an unbiased estimate of the mean of all ``N``, with expected squared error

    E ||mean(sample) - mean(all)||^2 = (S^2 / m) (N - m) / N,
    S^2 = (1 / (N - 1)) sum_k ||u_k - mean(all)||^2,

the finite-population correction ``(N - m) / N`` (as in survey sampling; with ``1 - m/N``
written out): zero when every client takes part (cross-silo), about ``S^2 / m`` when ``m`` is
a small fraction (cross-device). :func:`sampling_error` computes it from the updates,
:func:`simulated_sampling_error` measures it by drawing rounds, and the tests check that the
two agree. ``S^2`` grows with the clients' heterogeneity (non-IID data), which is why
cross-device training with skewed clients needs more rounds or control variates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["sampling_error", "simulated_sampling_error"]

Vector = np.ndarray[Any, Any]


def _matrix(updates: Any) -> Vector:
    out: Vector = np.asarray(updates, dtype=np.float64)
    if out.ndim != 2 or len(out) < 2:
        raise ValueError("updates must be a matrix with one client's update per row (2 or more)")
    return out


def sampling_error(updates: Any, m: int) -> float:
    """The expected squared error of the mean of ``m`` updates drawn without replacement,
    against the mean of all (formula of the module docstring)."""
    u = _matrix(updates)
    n = len(u)
    if not 1 <= m <= n:
        raise ValueError(f"m must be between 1 and the {n} clients, got {m}")
    spread = float(np.sum((u - u.mean(axis=0)) ** 2) / (n - 1))
    return spread / m * (n - m) / n


def simulated_sampling_error(
    updates: Any, m: int, draws: int = 2000, rng: np.random.Generator | None = None
) -> float:
    """The same, measured: the mean over ``draws`` rounds of the squared error of the sampled
    mean."""
    u = _matrix(updates)
    if not 1 <= m <= len(u):
        raise ValueError(f"m must be between 1 and the {len(u)} clients, got {m}")
    rng = rng if rng is not None else np.random.default_rng()
    full = u.mean(axis=0)
    total = 0.0
    for _ in range(draws):
        picked = rng.choice(len(u), size=m, replace=False)
        total += float(np.sum((u[picked].mean(axis=0) - full) ** 2))
    return total / draws
