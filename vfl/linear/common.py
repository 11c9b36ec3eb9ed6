"""What the vertical linear protocols share: the agreed spec, a role's result, the data party's
setup, the steps and the label party's stopping rule.

Both families of roles stand on this module and on nothing of each other: the revealing
protocols (``coordinator``, ``two_party``; :mod:`vfl.linear.protocol`) and the secret-shared
default (``shared``, ``shared_coordinator``; :mod:`vfl.linear.shared`, its bit budget in
:mod:`vfl.linear.budget`), and the plaintext twin (:mod:`vfl.linear.reference`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vfl.crypto.packing import MIN_KAPPA
from vfl.crypto.policy import KeyPolicy
from vfl.federation.base import Federation
from vfl.linear.losses import MAX_OUTPUTS, LinearLoss
from vfl.linear.messages import VLR, Outputs
from vfl.linear.model import PartyModel, clip_rows
from vfl.progress import EpochProgress
from vfl.training.convergence import LossCurve
from vfl.training.optimizers import ADAM_RATE, block_step, curvature_bound
from vfl.training.schedule import Schedule

__all__ = [
    "KAPPA",
    "PATIENCE_STEPS",
    "STABLE",
    "DataParty",
    "FitResult",
    "FitSpec",
    "finish",
    "loss_curve",
    "party_step",
    "penalty_weight",
    "shared_step",
    "show_epoch",
]

KAPPA = MIN_KAPPA
"""Bits of statistical hiding of every mask of the linear protocols."""


@dataclass(frozen=True)
class FitSpec:
    """Everything every role agrees on (the estimator's hyperparameters and the parties)."""

    loss: LinearLoss
    label_party: str
    data_parties: tuple[str, ...]
    coordinator: str | None
    max_iter: int
    batch_size: int
    tol: float | None
    patience: int
    learning_rate: float | None  # None: each party's default (:func:`party_step`)
    optimizer: str
    alpha: float
    policy: KeyPolicy
    workers: Any  # a count of this party's processes, or its own executor (a Dask client)
    random_state: int | None
    keep_views: bool = False
    shared: bool = False
    label_noise: float | None = None
    row_clip: float | None = None
    ledger: Any = None
    warm_start: bool = False
    verbose: int = 0

    @property
    def passives(self) -> list[str]:
        return [p for p in self.data_parties if p != self.label_party]


@dataclass
class FitResult:
    """What a role returns: its fitted part (None at the coordinator) and what it learnt."""

    part: PartyModel | None
    n_iter: int = 0
    loss_curve: list[float] = field(default_factory=list)
    epoch_seconds: list[float] = field(default_factory=list)
    setup_seconds: float = 0.0
    converged: bool = False
    best_epoch: int = 0
    restarts: list[int] = field(default_factory=list)
    """Epochs after which the loss diverged and training resumed with a smaller step."""
    divergence: str = ""
    """What the divergence rule did, in words (empty: nothing)."""
    gave_up: bool = False
    steps: list[float] = field(default_factory=list)
    """The step this party started with (its own; both, under the secret-shared protocol)."""
    notes: list[str] = field(default_factory=list)
    """What the user should hear of (warned at the label party after the fit)."""
    view: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] | None = None


PATIENCE_STEPS = 50
"""The fewest optimiser steps without improvement before early stopping (see
:func:`loss_curve`)."""


class DataParty:
    """What every data party's role starts from, under either protocol: its data, its design
    (the label party's with the intercept column) and the output count it agrees with the
    label party (the label party's role when ``targets`` is given).

    Parameters
    ----------
    spec : FitSpec
    part : PartyModel
        This party's part to train (fresh, or the previous fit's for a warm start).
    x : array (rows, columns)
        Its design matrix, ``part.design(frame)``.
    targets : array (rows, outputs), optional
        ``t(y)`` -- at the label party only.
    """

    def __init__(
        self,
        spec: FitSpec,
        part: PartyModel,
        x: np.ndarray[Any, Any],
        targets: np.ndarray[Any, Any] | None = None,
    ) -> None:
        self.spec, self.part, self.targets = spec, part, targets
        self.is_label = targets is not None
        self.features = x
        self.x = self._design(x)

    def _design(self, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.column_stack([x, np.ones(len(x))]) if self.is_label else x

    def agree_outputs(self, fed: Federation) -> int:
        """The label party tells the passives how many outputs (K one-vs-rest models share
        the encrypted rows; K is the number of classes, which the passives thus learn) and
        whether label DP is on, in which case every party clips its rows to the norm it
        names (its noise is calibrated to that bound)."""
        label, spec = self.spec.label_party, self.spec
        if self.targets is not None:
            count = int(self.targets.shape[1])
            dp = spec.label_noise is not None
            message = Outputs(count=count, label_dp=dp, row_clip=spec.row_clip if dp else None)
            VLR.broadcast(fed, "outputs", message, to=spec.passives)
            if dp:
                self.clip(spec.row_clip)
            return count
        message = VLR.recv(fed, label, "outputs", Outputs)
        if message.label_dp:
            if message.row_clip is not None and not message.row_clip > 0:
                Outputs.refuse(label, "row_clip", f"is {message.row_clip}, not a positive norm")
            self.clip(message.row_clip)
        count = message.count
        if not 1 <= count <= MAX_OUTPUTS:
            Outputs.refuse(label, "count", f"is {count}, not between 1 and {MAX_OUTPUTS}")
        if self.part.outputs != count:
            if np.any(self.part.coef):
                raise ValueError(
                    f"party {fed.name!r}: warm start of a model with {self.part.outputs} "
                    f"outputs, but the label party trains {count}"
                )
            self.part = self.part.with_outputs(count)
        return count

    def clip(self, row_clip: float | None) -> None:
        """Scale this party's rows to the agreed L2 norm (the square root of its column count
        by default) and remember it, so that predictions see the same rows."""
        clip = row_clip if row_clip is not None else math.sqrt(self.features.shape[1])
        self.part.extra["row_clip"] = float(clip)
        self.features = clip_rows(self.features, float(clip))
        self.x = self._design(self.features)


def party_step(spec: FitSpec, x: np.ndarray[Any, Any]) -> float:
    """The step a data party starts with: ``learning_rate`` when given; otherwise Adam's
    :data:`~vfl.training.optimizers.ADAM_RATE`, or, for the optimisers linear in the gradient
    (momentum, SGD), :func:`~vfl.training.optimizers.block_step` of the curvature of its own
    design ``x`` (the label party's intercept column included) -- derived from the data, not
    a constant. Under the secret-shared protocol, :func:`shared_step`."""
    if spec.shared:
        return shared_step(spec, curvature_bound(x, spec.batch_size, spec.loss.c))
    if spec.learning_rate is not None:
        return float(spec.learning_rate)
    if spec.optimizer == "adam":
        return ADAM_RATE
    curvature = curvature_bound(x, spec.batch_size, spec.loss.c)
    return block_step(curvature, len(spec.data_parties), spec.alpha)


STABLE = 3.0
"""The most a given ``learning_rate`` may exceed the default step by under the secret-shared
protocol (below heavy-ball momentum's limit of 3.8, see
:func:`~vfl.training.optimizers.block_step`)."""


def shared_step(spec: FitSpec, curvature: float) -> float:
    """A block's starting step under the secret-shared protocol:
    :func:`~vfl.training.optimizers.block_step` of the curvature its owner announced, or
    ``learning_rate`` when given, at most :data:`STABLE` times that.

    Why the cap: a step beyond the stability limit grows the weights geometrically, and
    weights on shares past their public bound (``2**W_INT_BITS``) wrap around silently, so
    that the loss the label party learns is no longer the model's and cannot flag the
    divergence; the revealing protocols instead restart (:class:`~vfl.training.LossCurve`)."""
    default = block_step(curvature, len(spec.data_parties), spec.alpha)
    if spec.learning_rate is None:
        return default
    return min(float(spec.learning_rate), STABLE * default)


def penalty_weight(spec: FitSpec, rows: int) -> float:
    """``lambda`` with ``rows * divisor * (alpha |w|^2 / 2) = lambda |w|^2``: the penalty in
    the units of the summed squares the protocols add up (:meth:`LinearLoss.mean_loss`)."""
    return spec.loss.divisor * rows * spec.alpha / 2


def loss_curve(spec: FitSpec, targets: np.ndarray[Any, Any] | None) -> LossCurve:
    """The label party's stopping and divergence rule for a fit. It knows the loss of the
    untrained model (all weights zero, so scores zero) unless the fit is a warm start. The
    patience is ``n_iter_no_change`` epochs and at least :data:`PATIENCE_STEPS` steps: on a
    small table an epoch is a few steps, and momentum's loss swings over more than five of
    them (FATE's student table stopped at epoch 13 with R2 0.059 against scikit-learn's 0.085;
    at 50 steps within 0.005 for every seed). Under label DP the divergence rule is off (its
    decisions would depend on the exact labels)."""
    initial = None
    patience = spec.patience
    if targets is not None:
        if not spec.warm_start:
            rows, outputs = targets.shape
            initial = spec.loss.mean_loss(float(np.sum(targets**2)), rows, outputs)
        per_epoch = Schedule(len(targets), spec.batch_size, 0).batches_per_epoch()
        patience = max(patience, math.ceil(PATIENCE_STEPS / per_epoch))
    if spec.label_noise is not None:
        return LossCurve(spec.tol, patience)
    return LossCurve.restarting(spec.tol, patience, initial)


def show_epoch(
    shown: EpochProgress, epoch: int, loss: float, step: float, curve: LossCurve
) -> None:
    """The label party's epoch, live (:class:`~vfl.progress.EpochProgress`: a bar or a line
    with ``verbose``, an INFO line of the ``vflink.progress`` logger always): loss, step,
    best epoch, and what the divergence and stalling rules did."""
    shown.update(epoch + 1, loss=loss, step=step, best=curve.best_epoch)
    if curve.restart:
        what = "diverged" if curve.restarts and curve.restarts[-1] == epoch + 1 else "stalled"
        shown.note(f"epoch {epoch + 1} {what}: back to epoch {curve.best_epoch}, step / 4")


def finish(result: FitResult, curve: LossCurve) -> None:
    """Copy what the curve learnt into the label party's result."""
    result.best_epoch = curve.best_epoch
    result.restarts = list(curve.restarts)
    result.gave_up = curve.gave_up
    result.divergence = curve.describe() if curve.restarts or curve.gave_up else ""
    result.loss_curve, result.n_iter = curve.values, len(curve.values)
