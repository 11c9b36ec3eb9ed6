"""Limited-memory BFGS, one objective evaluation at a time: the pure kernel of
:class:`horizontal.strategies.FedLBFGS`.

A federated server evaluates the pooled objective and its gradient only by asking the clients
(one round per evaluation), so the optimiser is written as a step function: given the value
and gradient at the point it last proposed, :func:`lbfgs_step` updates its ``state`` and
returns the next point to evaluate. The method is Nocedal and Wright's (*Numerical
Optimization*, 2nd ed., algorithm 7.4: the two-loop recursion with the initial Hessian
``s'y / y'y``) with a backtracking line search on the sufficient-decrease (Armijo) condition
and safeguarded quadratic interpolation (their section 3.5); a curvature pair with
``s'y <= 0`` is skipped, so the inverse-Hessian estimate stays positive definite without the
Wolfe curvature condition (which would cost further evaluations per step).

Convergence, as scikit-learn's ``lbfgs`` solver judges it: the largest absolute entry of the
gradient at the current point is at most ``tol``; or the line search cannot decrease the
objective any more (``max_backtracks`` halvings from a steepest-descent restart).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["backtrack", "lbfgs_step", "two_loop"]

Vector = np.ndarray[Any, Any]


def two_loop(gradient: Vector, steps: list[Vector], changes: list[Vector]) -> Vector:
    """The quasi-Newton direction ``-H g`` from the curvature pairs ``(s_i, y_i)`` (oldest
    first), ``H_0 = s'y / y'y`` of the newest pair (the identity without pairs)."""
    q = np.array(gradient, dtype=np.float64)
    rhos = [1.0 / float(y @ s) for s, y in zip(steps, changes, strict=True)]
    alphas = []
    for s, y, rho in zip(reversed(steps), reversed(changes), reversed(rhos), strict=True):
        a = rho * float(s @ q)
        q -= a * y
        alphas.append(a)
    if steps:
        s, y = steps[-1], changes[-1]
        q *= float(s @ y) / float(y @ y)
    for s, y, rho, a in zip(steps, changes, rhos, reversed(alphas), strict=True):
        b = rho * float(y @ q)
        q += (a - b) * s
    out: Vector = -q
    return out


def backtrack(step: float, value: float, slope: float, trial: float) -> float:
    """The next, shorter step after ``step`` failed the sufficient decrease: the minimiser of
    the quadratic through ``phi(0) = value``, ``phi'(0) = slope < 0`` and ``phi(step) =
    trial``, kept within ``[step / 10, step / 2]`` (halving when ``trial`` is not finite)."""
    if not math.isfinite(trial):
        return step / 2
    curvature = trial - value - slope * step
    guess = -slope * step * step / (2 * curvature) if curvature > 0 else step / 2
    return float(min(max(guess, step / 10), step / 2))


def _restart(state: dict[str, Any], gradient: Vector) -> Vector:
    """Steepest descent from the current point, memory cleared; a first step of length at
    most 1 (scikit-learn's and SciPy's first L-BFGS step)."""
    state["steps"], state["changes"] = [], []
    state["steepest"] = True
    norm = float(np.linalg.norm(gradient))
    state["step"] = min(1.0, 1.0 / norm) if norm > 0 else 1.0
    out: Vector = -gradient
    return out


def lbfgs_step(
    state: dict[str, Any],
    point: Vector,
    value: float,
    gradient: Vector,
    *,
    memory: int = 10,
    c1: float = 1e-4,
    tol: float = 1e-4,
    max_backtracks: int = 20,
) -> Vector:
    """Take the objective's ``value`` and ``gradient`` at ``point`` (the point this function
    last returned, or the start) and return the next point to evaluate.

    ``state`` is the optimiser's own (an empty dict at the start; ``state["restart"] = True``
    makes it start afresh from ``point``, e.g. when the objective changed). Afterwards
    ``state["x"]`` is the best accepted point, ``state["value"]`` its objective and
    ``state["converged"]`` whether to stop (``tol``: on the largest gradient entry).
    """
    gradient = np.asarray(gradient, dtype=np.float64)
    value = float(value)
    restart = state.pop("restart", False)
    fresh = restart or "x" not in state
    if fresh and not math.isfinite(value):
        raise FloatingPointError("the objective is not finite at the starting point")
    if fresh:
        state.update(x=np.array(point, dtype=np.float64), value=value, gradient=gradient)
        state["direction"] = _restart(state, gradient)
        state["backtracks"], state["converged"] = 0, False
    else:
        x, f, g, p = state["x"], state["value"], state["gradient"], state["direction"]
        step = state["step"]
        slope = float(g @ p)
        if math.isfinite(value) and value <= f + c1 * step * slope:  # sufficient decrease
            s, y = np.asarray(point, dtype=np.float64) - x, gradient - g
            if float(s @ y) > 1e-10 * float(y @ y):  # positive curvature: keep the pair
                state["steps"].append(s)
                state["changes"].append(y)
                del state["steps"][:-memory], state["changes"][:-memory]
            state.update(x=np.array(point, dtype=np.float64), value=value, gradient=gradient)
            state["backtracks"], state["steepest"] = 0, False
            direction = two_loop(gradient, state["steps"], state["changes"])
            state["step"] = 1.0
            if not float(gradient @ direction) < 0:  # not a descent direction: start again
                direction = _restart(state, gradient)
            state["direction"] = direction
        else:
            state["backtracks"] += 1
            state["step"] = backtrack(step, f, slope, value)
            if state["backtracks"] > max_backtracks:
                if state["steepest"]:  # even steepest descent makes no progress: done
                    state["converged"] = True
                else:
                    state["direction"] = _restart(state, g)
                    state["backtracks"] = 0
    if float(np.max(np.abs(state["gradient"]), initial=0.0)) <= tol:
        state["converged"] = True
    out: Vector = state["x"] + state["step"] * state["direction"]
    return out
