"""The plaintext twin of the encrypted protocols, for tests and audits: the same batches,
rounding, optimiser and loss, computed centrally in float64 (for the secret-shared protocol:
its fixed mini-batches and features rounded to its fixed point)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from vfl.linear.base import VerticalLinearModel
from vfl.linear.losses import penalty
from vfl.linear.model import FEATURE_BITS, PartyModel
from vfl.training.convergence import LossCurve
from vfl.training.optimizers import make_optimizer
from vfl.training.schedule import Schedule
from vfl.validation import check_parts

__all__ = ["plaintext_reference"]


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
    spec = estimator.fit_spec(label_party, list(frames))
    targets, _ = estimator.label_targets(y, frames[label_party].index, label_party)
    outputs = targets.shape[1]
    xs, ws, opts = {}, {}, {}
    for name, frame in frames.items():
        part = PartyModel.fresh(
            name,
            frame,
            standardize=estimator.standardize,
            active=name == label_party,
            outputs=outputs,
        )
        x = part.design(frame)
        if spec.shared:
            x = np.round(x * 2.0**FEATURE_BITS) / 2.0**FEATURE_BITS
        if name == label_party:
            x = np.column_stack([x, np.ones(len(x))])
        xs[name], ws[name] = x, np.zeros((x.shape[1], outputs))
        opts[name] = make_optimizer(spec.optimizer, learning_rate=spec.learning_rate)
    n = len(targets)
    schedule = Schedule(n, spec.batch_size, int(estimator.random_state))
    epochs = schedule.epochs()
    if spec.shared:
        fixed, orders = schedule.fixed()
        epochs = ([fixed[b] for b in order] for order in orders)
    curve = LossCurve(spec.tol, spec.patience)
    model = kept = dict(ws)
    for epoch, batches in zip(range(spec.max_iter), epochs, strict=False):
        total = 0.0
        sums = {p: np.zeros_like(w) for p, w in ws.items()}
        for rows in batches:
            z = sum(xs[p][rows] @ ws[p] for p in xs) - targets[rows]
            total += float(np.sum(z * z))
            for p in xs:
                grad = xs[p][rows].T @ z / (spec.loss.c * len(rows))
                grad = grad + penalty(ws[p], spec.alpha, p == label_party)
                ws[p] = opts[p].step(ws[p], grad, epoch)
                sums[p] += ws[p]
        model = {p: s / len(batches) for p, s in sums.items()}  # the epoch's mean iterate
        if spec.shared:  # the secret-shared protocols' loss: of that model, over all rows
            z = sum(xs[p] @ model[p] for p in xs) - targets
            total = float(np.sum(z * z))
        stop = curve.add(spec.loss.mean_loss(total, n, outputs))
        if curve.keep:  # the best epoch's model (the last one without early stopping)
            kept = model
        if stop:
            break
    out = {p: (w[:, 0] if outputs == 1 else w) for p, w in kept.items()}
    return out, curve.values
