"""The label party's accumulated view against a passive party with one column.

In the gradient-revealing protocols (``coordinator``, ``two_party``) the label party decrypts,
per batch ``t``, ``g_t = X_A[rows_t]^T u_B[rows_t]``: its own columns against the passive's
partial scores. With one passive column, ``u_B = x_B * w_t`` for that batch's weight ``w_t``,
so every batch gives ``d_A`` linear equations ``X_A[rows_t]^T x_B[rows_t] = g_t / w_t``.
Unknowns: the column ``x_B`` (one per row) and one scale per batch. Batches change every
epoch, so the equations accumulate. Once they outnumber the unknowns, the column is the null
vector of one homogeneous system, up to sign and scale, and so are the passive's scores.
:class:`ScoreSolveAudit` solves that system by SVD.

Under the secret-shared protocol the label party sees only its masked share of its gradient
numerator; the same system has no structure left, and the recovered column is noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl.audit.base import Audit, AuditResult
from vfl.audit.registry import register_audit

__all__ = ["ScoreSolveAudit"]


@register_audit
class ScoreSolveAudit(Audit):
    """Recover a one-column passive party's feature column (and so its partial scores, up to
    the scale the weight sets) from the label party's view over the whole training.

    Run it on ``est.views_[label_party]`` of a fit with ``keep_views=True``, the label party's
    design matrix ``est.parts_[label].design(frame)`` with the intercept column appended, and
    the passive's true column (in the same row order), which only scores the attack. A row
    counts as recovered when the best rescaling of the solution puts it within
    ``tolerance`` standard deviations of the truth. Chance is the share of rows that the
    best guess without the messages, the column's mean, puts within the same tolerance.
    """

    name = "score-solve"
    family = "vertical"

    def run(
        self,
        view: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
        x_label: np.ndarray[Any, Any],
        column: Any,
        *,
        tolerance: float = 0.01,
    ) -> AuditResult:
        if not view:
            raise ValueError("the view is empty: fit with keep_views=True")
        truth = np.asarray(column, dtype=float).reshape(-1)
        if len(truth) != len(x_label):
            raise ValueError(f"{len(truth)} values for {len(x_label)} rows: pass them in row order")
        batches = []
        for rows, seen in view:
            g = np.asarray(seen, dtype=float).reshape(x_label.shape[1], -1)[:, 0]
            norm = float(np.linalg.norm(g))
            if norm > 0:  # a batch at zero weights says nothing about the column
                batches.append((np.asarray(rows), g / norm))
        covered: np.ndarray[Any, Any] = (
            np.unique(np.concatenate([rows for rows, _ in batches]))
            if batches
            else np.zeros(0, dtype=np.int64)
        )
        position = {int(r): i for i, r in enumerate(covered)}
        n, t = len(covered), len(batches)
        equations = t * x_label.shape[1]
        status = "solved"
        recovered = np.zeros(n)
        if n == 0 or equations < n + t - 1:
            status = "underdetermined"
        else:
            system = np.zeros((equations, n + t))
            for k, (rows, g) in enumerate(batches):
                block = slice(k * x_label.shape[1], (k + 1) * x_label.shape[1])
                columns = [position[int(r)] for r in rows]
                system[block, columns] = x_label[rows].T
                system[block, n + k] = -g
            _, _, vt = np.linalg.svd(system, full_matrices=False)
            recovered = vt[-1, :n]
        true = truth[np.asarray(covered, dtype=int)] if n else np.zeros(0)
        spread = float(np.std(true)) or 1.0
        if status == "solved" and np.any(recovered):
            scale = float(recovered @ true) / float(recovered @ recovered)
            estimate = scale * recovered
            correlation = float(np.corrcoef(recovered, true)[0, 1])
        else:
            estimate = np.full(n, float(np.mean(true)) if n else 0.0)
            correlation = 0.0
        successes = int(np.sum(np.abs(estimate - true) <= tolerance * spread))
        chance = float(np.mean(np.abs(true - np.mean(true)) <= tolerance * spread)) if n else 0.0
        return AuditResult(
            self.name,
            "the passive party's column (and so its scores)",
            trials=n,
            successes=successes,
            chance=chance,
            details={
                "status": status,
                "correlation": correlation,
                "batches": t,
                "equations": equations,
            },
        )
