"""Solving for labels from what a data party decrypts in gradient-revealing vertical training.

In the first batch of :class:`~vfl.linear.VerticalLogisticRegression`'s ``coordinator`` and
``two_party`` protocols every weight is zero, so what a passive party decrypts is
``G = X_B^T (0 - t(y))`` with ``t(y) = 2(2y - 1)``: since it knows its own rounded features
``X_B``, it knows the exact integers ``X_int^T y = (2 X_int^T 1 - 2**20 G) / 4`` over the batch's
rows. Binary ``y`` makes this a multi-dimensional subset-sum: one equation per column, as many
binary unknowns as the batch has rows. The row-count check (more rows than columns) stops
linear algebra, not integer solving. :class:`LabelSolveAudit` solves it as an integer
feasibility programme (SciPy's HiGHS), which breaks batches whose party holds many columns
(20 of breast cancer's, in well under a second), and, where that does not decide, by lattice
reduction (fplll's LLL and BKZ through ``fpylll``, the ``audit`` extra) on the
Coster-Joux-LaMacchia-Odlyzko-Schnorr-Stern embedding, whose shortest vector is ``2y - 1``;
that breaks batches of 64 rows of a party with 10 columns. It reports how many labels it
recovered, against the majority-class guess (an unsolved batch counts as that guess).

.. warning::
   A failed audit is not a proof of privacy: larger batches of few columns (128 rows of 10
   columns) resist these solvers within their budget, not a determined attacker's.

Later batches leak statistically. :class:`LabelDirectionAudit` scores every row of every
batch by the sign of ``x_i . G``. The row's own term ``|x_i|^2 (u_i - t_i)`` pulls that sign
to the label's, which gives an advantage over chance in every batch of the training, from
any starting point.

This is the known weakness of every protocol that reveals exact gradients (Hardy et al. 2017;
FATE's coordinated LR); protocols in which no party sees a gradient (secret-shared training)
or label DP on the revealed gradients are what stop it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from vfl.audit.base import Audit, AuditResult
from vfl.audit.registry import register_audit
from vfl.linear.model import FEATURE_BITS

__all__ = [
    "LabelDirectionAudit",
    "LabelSolveAudit",
    "first_batch_equations",
    "lattice_solve",
    "solve_binary",
]


def first_batch_equations(
    x: np.ndarray[Any, Any], decrypted: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(A, b)`` with ``A y = b`` for the batch's binary labels ``y``, from the passive
    party's rounded design rows ``x`` (``(rows, d)``) and what it decrypted in the first batch
    (``X^T (0 - t(y))``, ``(d,)``): integers, exact when the view is exact (no label DP;
    with noise, ``b`` is rounded and the system usually has no binary solution)."""
    x_int = np.round(x * 2.0**FEATURE_BITS).astype(np.int64)
    a = x_int.T.astype(object)
    # G = -X^T (4y - 2)  =>  X_int^T y = (2 X_int^T 1 - 2**20 G) / 4
    g_int = np.round(np.asarray(decrypted, dtype=float) * 2.0**FEATURE_BITS).astype(object)
    ones = a.sum(axis=1)
    # exact integers when the view is exact; rounded (and usually unsolvable) under noise
    b = [(2 * int(o) - int(g) + 2) // 4 for o, g in zip(ones, g_int, strict=True)]
    return a, np.array(b, dtype=object)


def solve_binary(
    a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], *, time_limit: float = 30.0
) -> tuple[np.ndarray[Any, Any] | None, str]:
    """A binary ``y`` with ``a @ y = b``, or None, and the verdict: integer feasibility
    (SciPy's HiGHS) first -- ``"solved"``, or ``"infeasible"`` (no binary solution: the
    equations are not exact, e.g. under label DP) -- and where it runs out of time, lattice
    reduction (:func:`lattice_solve`): ``"solved by lattice reduction"`` or ``"time limit"``
    (undecided)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    n = a.shape[1]
    matrix = np.asarray(a, dtype=float)
    target = np.asarray(b, dtype=float)
    result = milp(
        c=np.zeros(n),
        constraints=LinearConstraint(matrix, target, target),
        integrality=np.ones(n),
        bounds=Bounds(0, 1),
        options={"time_limit": time_limit},
    )
    if result.x is None:
        if result.status == 2:
            return None, "infeasible"
        found = lattice_solve(a, b, time_limit=time_limit)
        return (found, "solved by lattice reduction") if found is not None else (None, "time limit")
    y = np.round(result.x).astype(np.int64)
    return (y, "solved") if _satisfies(a, b, y) else (None, "inexact")


def _satisfies(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], y: Any) -> bool:
    exact = [sum(int(v) * int(w) for v, w in zip(row, y, strict=True)) for row in a]
    return exact == [int(v) for v in b]


def lattice_solve(
    a: np.ndarray[Any, Any],
    b: np.ndarray[Any, Any],
    *,
    block_sizes: tuple[int, ...] = (10, 20, 30),
    time_limit: float = 30.0,
) -> np.ndarray[Any, Any] | None:
    """A binary ``y`` with ``a @ y = b`` by lattice reduction, or None (also when ``fpylll``
    is not installed): the basis rows ``(2 e_i, N a_i)`` and ``(1, ..., 1, N b)``, with ``N``
    large enough that a short vector must zero the equations; ``2y - 1`` (or its negation)
    then shows as a row of +-1 after LLL and BKZ of growing block size (each BKZ tour
    sequence stops after ``time_limit`` seconds)."""
    try:
        from fpylll import BKZ, LLL, IntegerMatrix
    except ImportError:
        return None
    d, n = a.shape
    weight = 1 << (max(abs(int(v)) for v in a.ravel()).bit_length() + 8)
    basis = IntegerMatrix(n + 1, n + d)
    for i in range(n):
        basis[i, i] = 2
        basis[n, i] = 1
        for k in range(d):
            basis[i, n + k] = weight * int(a[k, i])
    for k in range(d):
        basis[n, n + k] = weight * int(b[k])
    LLL.reduction(basis)
    for size in (0, *block_sizes):
        if size:
            param = BKZ.Param(block_size=min(size, n + 1), max_time=time_limit, flags=BKZ.MAX_TIME)
            BKZ.reduction(basis, param)
        for r in range(basis.nrows):
            row = [int(basis[r, j]) for j in range(n + d)]
            if any(row[n:]) or any(abs(v) != 1 for v in row[:n]):
                continue
            for sign in (1, -1):
                y = np.array([(sign * v + 1) // 2 for v in row[:n]], dtype=np.int64)
                if _satisfies(a, b, y):
                    return y
    return None


@register_audit
class LabelSolveAudit(Audit):
    """Recover the label party's binary labels from a passive party's first-batch view.

    Run it on ``est.views_[passive]`` of a fit with ``keep_views=True`` and the passive's own
    rounded design matrix ``est.parts_[passive].design(frame)``; the true labels only score
    the attack (in the frame's row order; a Series is aligned to ``index``, the frame's index,
    when given). The view must come from a fit that started from zero weights.
    """

    name = "label-solve"
    family = "vertical"

    def run(
        self,
        view: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
        x: np.ndarray[Any, Any],
        labels: Any,
        *,
        index: Any = None,
        time_limit: float = 30.0,
    ) -> AuditResult:
        positive_all = binary_truth(view, x, labels, index)
        rows, decrypted = view[0]
        if decrypted.ndim == 2 and decrypted.shape[1] != 1:
            raise ValueError("the label-solve audit attacks binary models (one output)")
        positive = positive_all[rows]
        began = time.perf_counter()
        a, b = first_batch_equations(x[rows], decrypted.reshape(-1))
        found, status = solve_binary(a, b, time_limit=time_limit)
        seconds = time.perf_counter() - began
        majority = float(max(positive.mean(), 1 - positive.mean()))
        # unsolved: the attacker is left with guessing, which chance already measures
        guess = round(majority * len(rows))
        recovered = guess if found is None else int(np.sum(found == positive))
        return AuditResult(
            self.name,
            "labels of the first batch",
            trials=len(rows),
            successes=recovered,
            chance=majority,
            details={
                "solved": found is not None,
                "status": status,
                "seconds": seconds,
                "columns": x.shape[1],
            },
        )


def binary_truth(
    view: list[Any], x: np.ndarray[Any, Any], labels: Any, index: Any
) -> np.ndarray[Any, Any]:
    """The true labels as 0/1 (the larger class positive) in ``x``'s row order (a Series is
    aligned to ``index`` first), after checking that there is a view to attack."""
    if not view:
        raise ValueError("the view is empty: fit with keep_views=True")
    if index is not None and hasattr(labels, "loc"):
        labels = labels.loc[index]
    if len(labels) != len(x):
        raise ValueError(f"{len(labels)} labels for {len(x)} rows: pass them in row order")
    values = np.asarray(labels)
    positive: np.ndarray[Any, Any] = (values == np.unique(values)[-1]).astype(np.int64)
    return positive


@register_audit
class LabelDirectionAudit(Audit):
    """Guess the label party's binary labels in every batch of a passive party's view.

    The view holds ``G_t = X_B[rows]^T (u_A - t(y))`` in the revealing protocols (the
    passive's own scores excluded). For each row, ``x_i . G_t`` contains the row's own term
    ``|x_i|^2 (u_i - t_i)``, which leans to ``-t_i``; the other rows add noise. The guess is
    positive when ``x_i . G_t < 0``. It reports the share guessed right over all batches,
    against the majority-class guess. Run it as :class:`LabelSolveAudit`, with the view of a
    fit with ``keep_views=True``, the passive's design matrix and the true labels (scoring
    only).
    """

    name = "label-direction"
    family = "vertical"

    def run(
        self,
        view: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
        x: np.ndarray[Any, Any],
        labels: Any,
        *,
        index: Any = None,
    ) -> AuditResult:
        positive = binary_truth(view, x, labels, index)
        right = trials = 0
        for rows, seen in view:
            g = np.asarray(seen, dtype=float)
            if g.ndim == 2 and g.shape[1] != 1:
                raise ValueError("the label-direction audit attacks binary models (one output)")
            direction = g.reshape(-1)
            # centred across columns: a view that is a share with a sign convention (all
            # negative, say) would otherwise point every batch the same way and score a
            # correlation of the features with the labels that needs no message
            direction = direction - direction.mean()
            guess = (x[rows] @ direction < 0).astype(np.int64)
            right += int(np.sum(guess == positive[rows]))
            trials += len(rows)
        majority = float(max(positive.mean(), 1 - positive.mean()))
        return AuditResult(
            self.name,
            "labels of every batch",
            trials=trials,
            successes=right,
            chance=majority,
            details={"batches": len(view)},
        )
