"""The plaintext twin of the encrypted protocols, for tests and audits: the same batches,
rounding, optimiser and loss, computed centrally in float64 (for the secret-shared protocol:
its fixed mini-batches and features rounded to its fixed point)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from vfl.linear.base import VerticalLinearModel
from vfl.linear.common import loss_curve, party_step, penalty_weight
from vfl.linear.losses import penalty
from vfl.linear.model import FEATURE_BITS, PartyModel
from vfl.linear.protocol import project, weight_radius
from vfl.training.convergence import RESTART_FACTOR
from vfl.training.optimizers import make_optimizer
from vfl.training.schedule import Schedule
from vfl.validation import check_parts

__all__ = ["plaintext_reference", "plaintext_scores"]


def plaintext_reference(
    estimator: VerticalLinearModel,
    parts: dict[str, pd.DataFrame],
    y: Any,
    *,
    label_party: str,
) -> tuple[dict[str, np.ndarray[Any, Any]], list[float]]:
    """Each party's weights after the same training in plaintext (the label party's intercept
    last; ``(columns,)`` for one output, ``(columns, K)`` for K) and the loss curve.

    Needs ``estimator.random_state`` (the seed of the batches)."""
    if estimator.random_state is None:
        raise ValueError("plaintext_reference needs an estimator with random_state set")
    frames = check_parts(parts, label_party)
    spec = estimator.fit_spec(label_party, list(frames), max(len(f) for f in frames.values()))
    targets, _ = estimator.label_targets(y, frames[label_party].index, label_party)
    outputs = targets.shape[1]
    xs, ws, rates, radius = {}, {}, {}, {}
    for name, frame in frames.items():
        x = fresh_part(estimator, name, frame, label_party).design(frame)
        if spec.shared:
            x = np.round(x * 2.0**FEATURE_BITS) / 2.0**FEATURE_BITS
        if name == label_party:
            x = np.column_stack([x, np.ones(len(x))])
        xs[name], ws[name] = x, np.zeros((x.shape[1], outputs))
        rates[name] = party_step(spec, x)
        radius[name] = weight_radius(x, len(frames))  # the revealing protocols' bound
    opts = {p: make_optimizer(spec.optimizer, learning_rate=r) for p, r in rates.items()}
    n = len(targets)
    schedule = Schedule(n, spec.batch_size, int(estimator.random_state))
    epochs = schedule.epochs()
    if spec.shared:
        fixed, orders = schedule.fixed()
        epochs = ([fixed[b] for b in order] for order in orders)
    curve = loss_curve(spec, targets)
    model = kept = dict(ws)
    for epoch, batches in zip(range(spec.max_iter), epochs, strict=False):
        if curve.restart:  # as every party does on the label party's word
            ws = dict(kept)
            rates = {p: r * RESTART_FACTOR for p, r in rates.items()}
            opts = {p: make_optimizer(spec.optimizer, learning_rate=r) for p, r in rates.items()}
        total = 0.0
        sums = {p: np.zeros_like(w) for p, w in ws.items()}
        for rows in batches:
            z = sum(xs[p][rows] @ ws[p] for p in xs) - targets[rows]
            total += float(np.sum(z * z))
            for p in xs:
                grad = xs[p][rows].T @ z / (spec.loss.c * len(rows))
                grad = grad + penalty(ws[p], spec.alpha, p == label_party)
                ws[p] = opts[p].step(ws[p], grad, epoch)
                if not spec.shared:  # each party's bound on its weights (never binds sanely)
                    ws[p] = project(ws[p], radius[p])
                sums[p] += ws[p]
        model = {p: s / len(batches) for p, s in sums.items()}  # the epoch's mean iterate
        if spec.shared:  # the secret-shared protocols' loss: of that model, over all rows
            z = sum(xs[p] @ model[p] for p in xs) - targets
            total = float(np.sum(z * z))
        for p, w in model.items():  # the penalty, at that model (no intercept)
            kept_rows = w[:-1] if p == label_party else w
            total += penalty_weight(spec, n) * float(np.sum(kept_rows * kept_rows))
        stop = curve.add(spec.loss.mean_loss(total, n, outputs))
        if curve.keep:  # the best epoch's model (the last one without early stopping)
            kept = model
        if stop:
            break
    out = {p: (w[:, 0] if outputs == 1 else w) for p, w in kept.items()}
    return out, curve.values


def plaintext_scores(
    estimator: VerticalLinearModel,
    parts: dict[str, pd.DataFrame],
    y: Any,
    test_parts: dict[str, pd.DataFrame],
    *,
    label_party: str,
) -> np.ndarray[Any, Any]:
    """Scores ``(rows, outputs)`` of ``test_parts`` under the model the twin trains on
    ``parts`` -- what an encrypted fit and secure scoring give, to fixed-point rounding (the
    tests compare the two), in a fraction of the time: for quality checks over many tables
    and seeds. Regression scores are in standardised-target units (``label_targets``).
    Each party's part reads its test rows as in a fit (its own clipping fences and
    standardisation, fitted on its training rows)."""
    weights, _ = plaintext_reference(estimator, parts, y, label_party=label_party)
    frames = check_parts(parts, label_party)
    total: np.ndarray[Any, Any] | None = None
    for name, frame in frames.items():
        x = fresh_part(estimator, name, frame, label_party).design(test_parts[name])
        if name == label_party:
            x = np.column_stack([x, np.ones(len(x))])
        w = weights[name]
        scores = x @ (w[:, None] if w.ndim == 1 else w)
        total = scores if total is None else total + scores
    if total is None:
        raise ValueError("no parties to score")
    return total


def fresh_part(
    estimator: VerticalLinearModel, name: str, frame: pd.DataFrame, label_party: str
) -> PartyModel:
    """The part a fit starts ``name`` with: its fences and standardisation fitted on
    ``frame``, as the estimator's roles fit them (zero weights)."""
    return PartyModel.fresh(
        name,
        frame,
        standardize=estimator.standardize,
        active=name == label_party,
        outputs=1,
        clip=estimator.clip_outliers,
    )
