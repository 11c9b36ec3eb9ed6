"""What every party of a horizontal fit agrees on (:class:`FitSpec`), the defaults it leaves
to the data (the step size, the L2 penalty), and what a fit returns (:class:`FitResult`,
with a :class:`RoundRecord` per round)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from horizontal.messages import Scaling, Vector
from horizontal.strategies import Strategy

__all__ = [
    "FitResult",
    "FitSpec",
    "RoundRecord",
    "default_alpha",
    "default_step",
    "is_linear",
    "settled",
    "told",
]


@dataclass(frozen=True)
class FitSpec:
    """What every party of a fit agrees on (the estimator's hyperparameters, checked)."""

    server: str
    clients: tuple[str, ...]
    task: str  # "classification" or "regression"
    module: Any
    hidden: tuple[int, ...]
    rounds: int
    local_epochs: int
    batch_size: int
    learning_rate: float | None  # None: chosen from the data at setup (Scaling)
    client_fraction: float
    min_clients: int | None
    strategy: Strategy
    privacy: Any  # horizontal.privacy.ClientDP / LocalDP / RecordDP, or None
    standardize: bool
    classes: tuple[str, ...] | None
    random_state: int | None
    ledger: Any = None
    on_round: Any = None
    """Simulation only: ``on_round(record, weights, scaling)`` after each round (an observer
    of the server's state, e.g. to evaluate the global model on held-out rows)."""
    secure_aggregation: Any = None  # horizontal.secagg.SecAggConfig, or None
    robust: Any = None  # horizontal.robust.RobustAggregation, or None
    compression: Any = None  # bits (int) or a top-k fraction (float), or None
    adversaries: Any = None
    """Simulation only, for audits: ``{client: tamper(delta, round) -> delta}``, what a
    malicious client sends instead of its honest update."""
    alpha: float | None = None  # None: chosen from the pooled row count at setup (Scaling)
    early_stopping: bool = False
    validation_fraction: float = 0.1
    n_iter_no_change: int = 10
    tol: float = 1e-4
    dp_scaling: Any = None  # horizontal.scaling.DPScaling: standardise from noisy statistics
    verbose: int = 0


@dataclass
class RoundRecord:
    """What the server saw in one round."""

    round: int
    sampled: int
    replied: int
    seconds: float
    drift: float
    """Mean L2 distance of the replying clients' models from the global model they started
    from (client drift; under DP, of the clipped updates)."""
    max_drift: float
    clip: float | None = None
    epsilon: float | None = None
    loss: float | None = None
    """The pooled training objective at the round's model (FedLBFGS, which asks for it)."""
    validation_loss: float | None = None
    """The pooled mean loss on the clients' held-out rows of the model the round started
    from (with early stopping)."""


@dataclass
class FitResult:
    """What a role returns: the final global weights and the scaling (every party), and the
    rounds' records (the server)."""

    weights: Vector
    history: list[RoundRecord] = field(default_factory=list)
    scaling: Scaling | None = None
    n_features: int = 0
    best_round: int | None = None  # early stopping: after how many rounds the kept model was


def settled(spec: FitSpec, scaling: Scaling) -> FitSpec:
    """The plan with what the server chose from the data at setup (the step size, the L2
    penalty) where the estimator left them to it; each checked."""
    rate, alpha = spec.learning_rate, spec.alpha
    if rate is None:
        rate = scaling.learning_rate
        if rate is None or not (math.isfinite(rate) and rate > 0):
            Scaling.refuse(spec.server, "learning_rate", f"is not a positive step: {rate!r}")
    if alpha is None:
        alpha = scaling.alpha
        if not (math.isfinite(alpha) and alpha >= 0):
            Scaling.refuse(spec.server, "alpha", f"is not a penalty >= 0: {alpha!r}")
    return replace(spec, learning_rate=float(rate), alpha=float(alpha))


def told(spec: FitSpec) -> bool:
    """Whether the clients send no statistics at setup: no standardisation, and the classes
    given (or, under DP, a regression: its target is then not standardised either, since DP
    would not cover its sums)."""
    return not spec.standardize and (spec.classes is not None or spec.privacy is not None)


def is_linear(spec: FitSpec) -> bool:
    """Whether the fit's module is a linear model (``"linear"``, or no hidden layer)."""
    return spec.module == "linear" or (spec.module is None and not spec.hidden)


def default_step(spec: FitSpec, n_features: int) -> float:
    """The local SGD step chosen from the data: ``1 / L`` with ``L`` the largest curvature a
    row can give the loss of a linear model on standardised columns (whose squared norm is
    ``n_features`` on average, plus 1 for the intercept): ``L = (d + 1) / 2`` for the
    softmax cross-entropy (its curvature in the logits is at most 1/2), ``2 (d + 1)`` for
    the squared error -- the step scikit-learn's SAG solver takes (Schmidt et al. 2017),
    which keeps SGD stable without tuning to a table; a network's SGD takes the same step.
    Local Adam takes 1e-3 (its steps do not scale with the gradients; scikit-learn's MLP
    default). FedLBFGS ignores it (its line search picks each step)."""
    if spec.strategy.local.optimizer == "adam":
        return 1e-3
    curvature = 0.5 if spec.task == "classification" else 2.0
    return 1.0 / (curvature * (n_features + 1))


def default_alpha(spec: FitSpec, rows: int, n_classes: int) -> float:
    """The L2 penalty chosen from the pooled training rows: for a linear classifier,
    scikit-learn's ``LogisticRegression(C=1)`` -- ``1 / (C n)`` on the mean loss, doubled for
    two classes, whose two logits each carry half of the binary model's weights (so the
    penalty on those weights is C=1's); none for a regression (``LinearRegression``) or a
    network (regularised by early stopping, as scikit-learn's ``MLPClassifier``, whose
    default ``alpha`` is about ``1e-4 / n`` on this scale)."""
    if not is_linear(spec) or spec.task != "classification" or not rows:
        return 0.0
    return (2.0 if n_classes == 2 else 1.0) / rows
