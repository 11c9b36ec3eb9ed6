"""The plaintext twin of :class:`~vfl.linear.VerticalPoissonRegression`, for tests and
benchmarks: the same parts, batches, optimiser steps (:class:`PartyWeights`), mean iterates,
objective of each epoch's model over all rows, stopping and restarts, computed centrally in
float64 -- what the encrypted protocol equals up to its fixed point (``2**-40`` on
``exp(u_B)`` and on ``e exp(u_A)``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from vfl.linear.poisson import Exposure, VerticalPoissonRegression
from vfl.linear.poisson_math import half_deviance, penalty_value
from vfl.linear.poisson_protocol import PartyWeights
from vfl.training.control import EpochControl
from vfl.training.convergence import LossCurve
from vfl.training.schedule import Schedule
from vfl.validation import check_parts

__all__ = ["poisson_reference"]


def poisson_reference(
    estimator: VerticalPoissonRegression,
    parts: dict[str, pd.DataFrame],
    y: Any,
    *,
    label_party: str,
    exposure: Exposure = None,
) -> tuple[dict[str, np.ndarray[Any, Any]], list[float]]:
    """Each party's weights after the same training in plaintext (the label party's
    intercept last) and the loss curve (the objective of each epoch's model). Needs
    ``estimator.random_state`` (the seed of the batches)."""
    if estimator.random_state is None:
        raise ValueError("poisson_reference needs an estimator with random_state set")
    frames = check_parts(parts, label_party)
    spec = estimator.fit_spec(label_party, list(frames))
    prepared = estimator.fit_parts(spec, dict(frames), y, exposure)
    xs, tracks = {}, {}
    targets = rates = np.zeros(0)
    n = len(next(iter(frames.values())))
    schedule = Schedule(n, spec.batch_size, int(estimator.random_state))
    for name, (part, x, t, e) in prepared.items():
        is_label = name == label_party
        if is_label:
            x = np.column_stack([x, np.ones(len(x))])
            targets, rates = t, e
        xs[name] = x
        w = part.weights(with_intercept=is_label)[:, 0]
        tracks[name] = PartyWeights(
            spec, w, intercept=is_label, batches=schedule.batches_per_epoch()
        )
    curve = LossCurve.restarting(
        spec.tol,
        spec.patience,
        half_deviance(targets, rates * np.exp(_score(xs, tracks))) / n,
    )
    epochs = schedule.epochs()
    for epoch in range(spec.max_iter):
        control = EpochControl(stop=False, keep=curve.keep, restart=curve.restart)
        for track in tracks.values():
            track.follow(control)
            track.start_epoch()
        for rows in next(epochs):
            mu = rates[rows] * np.exp(_score(xs, tracks, rows))
            r = mu - targets[rows]
            for name, track in tracks.items():
                track.step(xs[name][rows].T @ r, len(rows), epoch)
        for track in tracks.values():
            track.end_epoch()
        model = sum(xs[p] @ t.model for p, t in tracks.items())  # the epoch's mean iterate
        penalties = sum(
            penalty_value(t.model, spec.alpha, p, intercept=p == label_party)
            for p, t in tracks.items()
        )
        if curve.add(half_deviance(targets, rates * np.exp(model)) / n + penalties):
            break
    final = EpochControl(stop=True, keep=curve.keep)
    for track in tracks.values():
        track.follow(final)
    return {name: track.kept for name, track in tracks.items()}, list(curve.values)


def _score(
    xs: dict[str, np.ndarray[Any, Any]],
    tracks: dict[str, PartyWeights],
    rows: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    out: np.ndarray[Any, Any] = sum(
        (xs[p] if rows is None else xs[p][rows]) @ tracks[p].w for p in xs
    )
    return out
