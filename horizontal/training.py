"""The roles of horizontal training: a server and clients, written once for every federation.

The protocol (tags under ``fed/``):

1. **setup** -- each client (having held out ``validation_fraction`` of its rows when the fit
   stops early) sends the server its :class:`Profile`: its training and held-out row counts,
   column names, and, unless the estimator is told the scaling and classes, its column sums
   and sums of squares and its distinct labels -- under DP noisy statistics instead
   (:mod:`horizontal.scaling`: a noisy histogram, then noisy moments). The server checks that
   every client has the same columns, pools the statistics and answers with the
   :class:`Scaling` every client standardises with (the classes, and what the estimator
   left to the data: the step size, the L2 penalty from the pooled row count);
2. **rounds** -- the server samples clients (``client_fraction``; a fixed count drawn from
   ``random_state``, or Poisson sampling from the OS under client-level DP), sends each a
   :class:`Task` with the global weights (and Scaffold's control variate, and DP's clipping
   norm), and gathers their :class:`Update` (``local - global``, the row count, Scaffold's
   control change; with early stopping the sent model's loss summed over the held-out rows;
   under :class:`~horizontal.strategies.FedLBFGS` minus the gradient of the objective at
   the sent weights and the objective summed over the rows), waiting for at least
   ``min_clients`` of them: clients that fail or drop out are left out and the weights
   renormalise over those that replied; fewer abort the fit naming the round. With early
   stopping (:mod:`horizontal.stopping`) the server stops when the pooled held-out loss has
   not improved for ``n_iter_no_change`` rounds, FedLBFGS when it has converged;
3. **stop** -- the server sends every client the final weights (with early stopping, the
   model of the lowest held-out loss: after the last round, if no round has evaluated it,
   an ``evaluate`` task asks for its held-out loss first).

What a party learns: a client, the global models it is sent (and, during setup, the pooled
means, deviations and classes); the server, each sampled client's row counts, column sums
(unless told the scaling; noisy under DP) and its model update each round, with early
stopping its held-out loss sum, under FedLBFGS its exact gradient and objective -- not its
records, but an update is a function of them (gradient inversion can reconstruct records
from one small batch's update; see :mod:`horizontal.privacy` for the defences that bound
what it reveals).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from horizontal.aggregate import l2_norms, weighted_mean
from horizontal.local import full_gradient, held_out_loss, holdout, local_train, seed_for
from horizontal.model import build_module, flatten, load_vector
from horizontal.stopping import EarlyStopping
from horizontal.strategies import Strategy
from vfl.federation.base import Federation, FederationTimeoutError
from vfl.federation.messages import Message, Namespace
from vfl.progress import EpochProgress

__all__ = [
    "FED",
    "ClientRole",
    "FitResult",
    "FitSpec",
    "Profile",
    "RoundRecord",
    "Scaling",
    "ServerRole",
    "Task",
    "Update",
]

logger = logging.getLogger("vflink.horizontal")

_TRAINING = threading.BoundedSemaphore(int(os.environ.get("VFLINK_TRAIN_SLOTS", "1")))
"""Clients of one process that train at once. In simulation, a hundred clients' threads
training together contend for the GIL and torch's intra-op threads (torch already spreads
one client's step over the cores); in deployment a process holds one client."""

DIVERGED = 1e6
"""A global weight beyond this magnitude stops the fit as diverged."""

FED = Namespace("fed")
"""The tags of horizontal training (``fed/profile``, ``fed/task``, ``fed/update/<round>``)."""

Vector = np.ndarray[Any, Any]


# -- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile(Message):
    """A client to the server at setup: its rows and columns (and, when the server computes
    the scaling, its column sums and sums of squares, and its labels' distinct values)."""

    KIND = "client profile"
    samples: int  # the rows it trains on
    columns: list[str]
    sums: np.ndarray | None = None
    squares: np.ndarray | None = None
    labels: list[str] | None = None
    holdout: int = 0  # the rows it holds out for early stopping (sums cover these too)
    histogram: np.ndarray | None = None  # DP scaling: noisy magnitude counts (bounds unknown)


@dataclass(frozen=True)
class Scaling(Message):
    """The server to every client at setup: how to standardise the columns (and the target),
    the classes in their order, and what the estimator left to the data (the step size from
    the column count, the L2 penalty from the pooled row count)."""

    KIND = "scaling"
    mean: np.ndarray
    scale: np.ndarray
    classes: list[str]
    target_mean: float = 0.0
    target_scale: float = 1.0
    learning_rate: float | None = None  # the step size, when chosen from the data
    alpha: float = 0.0  # the L2 penalty, when chosen from the pooled row count


@dataclass(frozen=True)
class Task(Message):
    """The server to a sampled client: train from ``weights`` in round ``round`` (or stop, or
    only evaluate them on the held-out rows)."""

    KIND = "task"
    round: int
    weights: np.ndarray
    stop: bool = False
    evaluate: bool = False  # only the validation loss of ``weights`` (early stopping's last)
    control: np.ndarray | None = None
    clip: float | None = None
    peers: int | None = None  # under secure aggregation: the clients sampled this round


@dataclass(frozen=True)
class Update(Message):
    """A client's answer: ``local - global`` after its local training, its row count, and
    Scaffold's control-variate change, or DP's clipped-or-not bit (adaptive clipping); with
    early stopping the sent model's loss summed over its held-out rows, and for
    :class:`~horizontal.strategies.FedLBFGS` its training objective (summed over its rows,
    ``n_k`` times the penalty included; ``delta`` is then minus the objective's gradient)."""

    KIND = "model update"
    round: int
    delta: np.ndarray
    samples: int
    control: np.ndarray | None = None
    unclipped: bool | None = None
    codes: bytes | None = None  # compressed: b-bit codes packed (delta is then empty)
    low: float = 0.0
    scale: float = 0.0
    indices: np.ndarray | None = None  # compressed: top-k positions (delta holds the values)
    loss: float | None = None  # the training objective at the sent weights, summed over rows
    validation_loss: float | None = None  # the loss at the sent weights over held-out rows
    validation_rows: int = 0


# -- the agreed plan ---------------------------------------------------------------------------


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


# -- the client ----------------------------------------------------------------------------------


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


class ClientRole:
    """One client: its own rows ``x`` (a float array, columns in ``columns``) and labels."""

    def __init__(self, spec: FitSpec, x: Vector, y: Vector, columns: list[str]) -> None:
        self.spec, self.x, self.y, self.columns = spec, x, y, columns
        self.held_x, self.held_y = x[:0], y[:0]  # early stopping's held-out rows (at setup)
        self.topk: Any = None  # top-k compression's error feedback, kept across rounds

    def __call__(self, fed: Federation) -> FitResult:
        server = self.spec.server
        scaling = self._setup(fed)
        spec = self.spec = settled(self.spec, scaling)
        x, y = self._tensors(self.x, self.y, scaling)
        held_x, held_y = self._tensors(self.held_x, self.held_y, scaling)
        outputs = len(scaling.classes) if spec.task == "classification" else 1
        module = build_module(spec.module, x.shape[1], outputs, spec.hidden, spec.random_state)
        if spec.strategy.local.gradient:  # gradients for a line search: in double precision
            module, x, held_x = module.double(), x.double(), held_x.double()
            if spec.task == "regression":
                y, held_y = y.double(), held_y.double()
        loss_fn: Any = nn.CrossEntropyLoss() if spec.task == "classification" else nn.MSELoss()
        own_control: Vector | None = None  # Scaffold's c_k
        while True:
            task = FED.recv(fed, server, "task", Task)
            if task.stop:
                load_vector(module, task.weights)
                return FitResult(flatten(module), scaling=scaling, n_features=x.shape[1])
            with _TRAINING:  # the training: simulated clients take turns (see _TRAINING)
                load_vector(module, task.weights)
                held = held_out_loss(module, held_x, held_y, loss_fn)
                if task.evaluate:
                    reply: Any = Update(task.round, np.zeros(0, np.float32), len(x))
                else:
                    own_control, reply = self._round(fed, module, x, y, loss_fn, task, own_control)
                if spec.early_stopping and isinstance(reply, Update):
                    reply = replace(reply, validation_loss=held, validation_rows=len(held_x))
            self._reply(fed, task, reply)  # outside: secure aggregation needs every client

    def _round(
        self,
        fed: Federation,
        module: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Any,
        task: Task,
        own_control: Vector | None,
    ) -> tuple[Vector | None, Any]:
        """Train from the task's weights: Scaffold's new ``c_k`` and the reply (an
        :class:`Update`, or under secure aggregation the vector to sum)."""
        spec = self.spec
        load_vector(module, task.weights)
        start = flatten(module)  # what the module now holds
        seed = seed_for(spec.random_state, task.round, fed.name)
        own_control = own_control if own_control is not None else np.zeros_like(start)
        control = task.control if task.control is not None else np.zeros_like(start)
        objective = None
        if spec.strategy.local.gradient:  # FedLBFGS: the gradient, nothing trained
            gradient, objective = full_gradient(module, x, y, loss_fn, float(spec.alpha or 0))
            delta, steps = -gradient, 1
        else:
            steps = local_train(
                module, x, y, loss_fn, spec, start, control, own_control, seed, fed.name
            )
            delta = flatten(module) - start
        if spec.adversaries and fed.name in spec.adversaries:  # an audit's malicious client
            delta = np.asarray(spec.adversaries[fed.name](delta, task.round), dtype=np.float64)
        update_control = None
        if spec.strategy.local.scaffold:  # option II of Karimireddy et al. 2020
            new_control = own_control - control - delta / (steps * float(spec.learning_rate or 1))
            update_control = (new_control - own_control).astype(np.float32)
            own_control = new_control
        unclipped = None
        if spec.privacy is not None and spec.privacy.client_level:
            delta, unclipped = spec.privacy.client_release(delta, task.clip, spec, fed.name)
        if spec.secure_aggregation is not None:  # the server learns only the sum
            if spec.privacy is not None and spec.privacy.client_level:  # DP's unweighted sum
                if hasattr(spec.privacy, "noise_share"):  # ClientDP: distributed noise
                    delta = delta + spec.privacy.noise_share(delta.size, task.clip, spec)
                return own_control, np.concatenate([delta, [1.0]])
            parts = [len(x) * delta]
            if update_control is not None:
                parts.append(len(x) * update_control.astype(np.float64))
            return own_control, np.concatenate([*parts, [float(len(x))]])
        update = Update(
            round=task.round,
            delta=delta.astype(np.float32),
            samples=len(x),
            control=update_control,
            unclipped=unclipped,
            loss=objective,
        )
        if spec.compression is not None:
            update = self._compress(update, delta)
        return own_control, update

    def _compress(self, update: Update, delta: Vector) -> Update:
        """The update as ``bits``-bit stochastic codes, or its top-k entries with error
        feedback (:mod:`horizontal.compression`)."""
        from dataclasses import replace

        from horizontal import compression

        chosen = self.spec.compression
        if isinstance(chosen, int):
            codes, low, scale = compression.quantize(delta, chosen)
            packed = compression.pack_codes(codes, chosen)
            return replace(
                update, delta=np.zeros(0, np.float32), codes=packed, low=low, scale=scale
            )
        if self.topk is None:
            self.topk = compression.TopK(fraction=float(chosen))
        indices, values = self.topk.compress(delta)
        return replace(update, delta=values.astype(np.float32), indices=indices)

    def _reply(self, fed: Federation, task: Task, reply: Any) -> None:
        spec = self.spec
        if isinstance(reply, Update):
            FED.send(fed, spec.server, "update", reply, task.round)
            return
        from horizontal.secagg import client_round

        config = spec.secure_aggregation
        client_round(fed, spec.server, reply, config, task.round, clients=int(task.peers or 1))

    def _setup(self, fed: Federation) -> Scaling:
        spec = self.spec
        if spec.early_stopping:  # hold out rows, from the seed and this client's name
            seed = seed_for(spec.random_state, -1, fed.name)
            train, held = holdout(
                self.y, spec.validation_fraction, seed, stratify=spec.task == "classification"
            )
            self.x, self.held_x = self.x[train], self.x[held]
            self.y, self.held_y = self.y[train], self.y[held]
        x = np.vstack([self.x, self.held_x])  # the statistics cover every row it holds
        y = np.concatenate([self.y, self.held_y])
        counts = Profile(samples=len(self.x), columns=list(self.columns), holdout=len(self.held_x))
        if spec.dp_scaling is not None:  # noisy statistics instead (horizontal.scaling)
            spec.dp_scaling.client_setup(fed, spec, x, y, counts)
        elif told(spec):
            FED.send(fed, spec.server, "profile", counts)
        else:
            labels_seen = (
                sorted({str(v) for v in y.tolist()}) if spec.task == "classification" else None
            )
            extra = (
                np.array([y.sum(), (y.astype(float) ** 2).sum()])
                if spec.task == "regression"
                else np.zeros(2)
            )
            profile = replace(
                counts,
                sums=np.concatenate([x.sum(axis=0), extra[:1]]),
                squares=np.concatenate([(x**2).sum(axis=0), extra[1:]]),
                labels=labels_seen,
            )
            FED.send(fed, spec.server, "profile", profile)
        scaling = FED.recv(fed, spec.server, "scaling", Scaling)
        d = x.shape[1]
        if scaling.mean.shape != (d,) or scaling.scale.shape != (d,):
            Scaling.refuse(spec.server, "mean", f"does not match the {d} columns")
        return scaling

    def _tensors(self, x: Vector, y: Vector, scaling: Scaling) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows standardised with the agreed scaling, and their targets."""
        values = torch.as_tensor((x - scaling.mean) / scaling.scale, dtype=torch.float32)
        if self.spec.task == "classification":
            index = {c: k for k, c in enumerate(scaling.classes)}
            unknown = sorted({str(v) for v in y.tolist()} - set(index))
            if unknown:
                raise ValueError(
                    f"client labels {unknown[:5]} are not among the classes {scaling.classes}"
                )
            targets = torch.as_tensor([index[str(v)] for v in y.tolist()], dtype=torch.long)
            return values, targets
        t = (y.astype(float) - scaling.target_mean) / scaling.target_scale
        return values, torch.as_tensor(t, dtype=torch.float32).reshape(-1, 1)


# -- the server ----------------------------------------------------------------------------------


class ServerRole:
    """The server: pools the scaling, samples clients, aggregates, steps the strategy, and
    with early stopping keeps the model of the lowest pooled held-out loss."""

    def __init__(self, spec: FitSpec) -> None:
        self.spec = spec
        self.holdouts: dict[str, int] = {}

    def __call__(self, fed: Federation) -> FitResult:
        with EpochProgress(fed.name, self.spec.rounds, self.spec.verbose, desc="round") as shown:
            return self._run(fed, shown)

    def _run(self, fed: Federation, shown: EpochProgress) -> FitResult:
        clients = list(self.spec.clients)
        scaling, columns, sizes = self._setup(fed, clients)
        spec = self.spec = settled(self.spec, scaling)
        total_rows = sum(sizes.values())
        self.total_rows = total_rows
        outputs = len(scaling.classes) if spec.task == "classification" else 1
        module = build_module(spec.module, len(columns), outputs, spec.hidden, spec.random_state)
        weights = flatten(module)
        result = FitResult(weights=weights, scaling=scaling, n_features=len(columns))
        strategy = spec.strategy
        state: dict[str, Any] = {"tol": spec.tol}
        stopper = (
            EarlyStopping(n_iter_no_change=spec.n_iter_no_change, tol=spec.tol)
            if spec.early_stopping
            else None
        )
        replied: set[str] | None = None  # FedLBFGS: whose objective the last round was
        sampler = np.random.default_rng(spec.random_state)
        privacy = spec.privacy
        clip = privacy.initial_clip if privacy is not None and privacy.client_level else None
        for round_ in range(spec.rounds):
            began = time.perf_counter()
            sampled = self._sample(sampler, clients)
            control = state.get("control") if strategy.local.scaffold else None
            if control is None and strategy.local.scaffold:
                control = np.zeros_like(weights)
            task = Task(
                round=round_,
                weights=weights.astype(np.float32),
                control=None if control is None else control.astype(np.float32),
                clip=clip,
                peers=len(sampled) if spec.secure_aggregation is not None else None,
            )
            for client in sampled:
                FED.send(fed, client, "task", task)
            if spec.secure_aggregation is not None:
                weights, record = self._secure_round(fed, sampled, weights, state, round_)
                record.seconds = time.perf_counter() - began
                result.history.append(record)
                if spec.on_round is not None:
                    spec.on_round(record, weights, scaling)
                continue
            replies = self._gather(fed, sampled, round_)
            updates = {
                c: _expand(Update.from_payload(p, c), spec.compression, weights.size, c)
                for c, p in replies.items()
            }
            validation = self._held_out(updates, round_) if stopper is not None else None
            if stopper is not None and validation is not None:
                stopper.observe(round_, task.weights.astype(np.float64), validation)
            mean_delta, clip, norms = aggregate_updates(
                spec, updates, weights, round_, sizes, clip, len(clients)
            )
            objective = None
            if strategy.local.gradient:
                objective = _objective(updates, round_)
                if replied is not None and set(updates) != replied:  # another objective now
                    state["restart"] = True
                replied = set(updates)
            control_step = None
            if strategy.local.scaffold and updates:
                control_step = np.zeros_like(weights)
                for client, u in updates.items():
                    if u.control is None or u.control.shape != weights.shape:
                        Update.refuse(client, "control", f"is not {weights.size} values")
                    control_step += (u.samples / total_rows) * u.control.astype(np.float64)
            weights = strategy.server_step(
                weights, mean_delta, state, control_step=control_step, objective=objective
            )
            _check_diverged(weights, round_)
            record = RoundRecord(
                round=round_ + 1,
                sampled=len(sampled),
                replied=len(updates),
                seconds=time.perf_counter() - began,
                drift=float(norms.mean()) if len(norms) else 0.0,
                max_drift=float(norms.max()) if len(norms) else 0.0,
                clip=task.clip,
                loss=objective,
                validation_loss=validation,
            )
            if privacy is not None:
                record.epsilon = privacy.record_round(spec, round_, len(clients))
                if record.epsilon is not None:  # asked for with report_rounds=True
                    logger.info(
                        "round %d: epsilon %.4f at delta %g so far",
                        round_ + 1,
                        record.epsilon,
                        privacy.delta,
                    )
            result.history.append(record)
            best = None if stopper is None or stopper.best_round is None else stopper.best_round
            shown.update(round_ + 1, loss=objective, val_loss=validation, best=best)
            if spec.on_round is not None:
                spec.on_round(record, strategy.result(weights, state), scaling)
            logger.info(
                "round %d: %d of %d sampled clients replied, drift %.4f",
                round_ + 1,
                len(updates),
                len(sampled),
                record.drift,
            )
            if strategy.converged(state) or (stopper is not None and stopper.done):
                logger.info("stopped after round %d: converged, or held-out loss", round_ + 1)
                break
        weights = strategy.result(weights, state)
        if stopper is not None:
            rounds_run = len(result.history)
            if not stopper.done and not strategy.local.gradient:  # the last model, unseen
                loss = self._evaluate(fed, clients, weights, rounds_run)
                if loss is not None:
                    stopper.observe(rounds_run, weights, loss)
            if stopper.best_weights is not None:
                weights, result.best_round = stopper.best_weights, stopper.best_round
        FED.broadcast(
            fed,
            "task",
            Task(round=len(result.history), weights=weights.astype(np.float32), stop=True),
            to=clients,
        )
        result.weights = weights
        return result

    def _held_out(self, updates: Mapping[str, Update], round_: int) -> float | None:
        """The pooled mean held-out loss of the round's model (None: no held-out rows
        replied), each client's sum and count checked against its setup."""
        total, rows = 0.0, 0
        for client, update in updates.items():
            expected = self.holdouts.get(client, 0)
            loss = update.validation_loss
            if update.validation_rows != expected:
                Update.refuse(client, "validation_rows", f"is not its {expected} held-out rows")
            if expected and (loss is None or not (math.isfinite(loss) and loss >= 0)):
                Update.refuse(client, "validation_loss", f"is not a loss sum >= 0: {loss!r}")
            total += float(loss or 0.0)
            rows += expected
        return total / rows if rows else None

    def _evaluate(
        self, fed: Federation, clients: list[str], weights: Vector, round_: int
    ) -> float | None:
        """Ask every client for the held-out loss of ``weights`` (the model after the last
        round, which no round has evaluated)."""
        task = Task(round=round_, weights=weights.astype(np.float32), evaluate=True)
        for client in clients:
            FED.send(fed, client, "task", task)
        replies = self._gather(fed, clients, round_)
        updates = {c: Update.from_payload(p, c) for c, p in replies.items()}
        for client, update in updates.items():
            if update.round != round_:
                Update.refuse(client, "round", f"is not the evaluation round {round_}")
        return self._held_out(updates, round_)

    def _secure_round(
        self,
        fed: Federation,
        sampled: list[str],
        weights: Vector,
        state: dict[str, Any],
        round_: int,
    ) -> tuple[Vector, RoundRecord]:
        """A round under secure aggregation: the server gets ``sum n_k delta_k`` (and Scaffold's
        ``sum n_k c_k``) and ``sum n_k`` of the surviving clients, never one client's update."""
        from horizontal.secagg import server_round

        spec = self.spec
        d = weights.size
        scaffold = spec.strategy.local.scaffold
        size = d * (2 if scaffold else 1) + 1
        total, survivors = server_round(fed, sampled, size, spec.secure_aggregation, round_)
        rows = float(total[-1])
        if not rows > 0:
            raise ValueError(f"round {round_ + 1}: the surviving clients hold no rows")
        mean_delta = total[:d] / rows
        privacy = spec.privacy
        if privacy is not None and privacy.client_level and hasattr(privacy, "noise_share"):
            mean_delta = total[:d] / (spec.client_fraction * len(spec.clients))  # / (q N)
        control_step = total[d : 2 * d] / self.total_rows if scaffold else None
        weights = spec.strategy.server_step(weights, mean_delta, state, control_step=control_step)
        _check_diverged(weights, round_)
        logger.info(
            "round %d: %d of %d sampled clients in the secure sum",
            round_ + 1,
            len(survivors),
            len(sampled),
        )
        nan = float("nan")  # no single update is seen: no drift to report
        record = RoundRecord(round_ + 1, len(sampled), len(survivors), 0.0, nan, nan)
        if spec.privacy is not None:
            record.epsilon = spec.privacy.record_round(spec, round_, len(spec.clients))
        return weights, record

    def _setup(
        self, fed: Federation, clients: list[str]
    ) -> tuple[Scaling, list[str], dict[str, int]]:
        spec = self.spec
        profiles = {
            c: Profile.from_payload(p, c)
            for c, p in fed.gather(clients, FED.tag("profile")).items()
        }
        first = clients[0]
        columns = profiles[first].columns
        for client in clients[1:]:
            theirs = profiles[client].columns
            if theirs != columns:
                missing = [c for c in columns if c not in theirs]
                extra = [c for c in theirs if c not in columns]
                order = " (the same names in another order)" if not missing and not extra else ""
                raise ValueError(
                    f"client {client!r} has other columns than {first!r}: missing {missing}, "
                    f"extra {extra}{order}; every client needs the same columns in the same order"
                )
        for client, profile in profiles.items():
            if profile.samples < 0 or profile.holdout < 0:
                Profile.refuse(client, "samples", "is negative")
            if profile.holdout and not spec.early_stopping:
                Profile.refuse(client, "holdout", "is not 0: the fit has no early stopping")
        self.holdouts = {c: p.holdout for c, p in profiles.items()}
        if spec.early_stopping and not sum(self.holdouts.values()):
            raise ValueError(
                "early stopping needs held-out rows, and no client holds two rows or more: "
                "pass early_stopping=False"
            )
        d = len(columns)
        if told(spec):
            scaling = Scaling(mean=np.zeros(d), scale=np.ones(d), classes=list(spec.classes or []))
        elif spec.dp_scaling is not None:
            mean, scale, target_mean, target_scale = spec.dp_scaling.server_scaling(
                fed, profiles, spec, d
            )
            scaling = Scaling(
                mean=mean,
                scale=scale,
                classes=_classes(spec, profiles),
                target_mean=target_mean,
                target_scale=target_scale,
            )
        else:
            total = sum(p.samples + p.holdout for p in profiles.values())
            sums = sum(_field(p, "sums", d + 1, c) for c, p in profiles.items())
            squares = sum(_field(p, "squares", d + 1, c) for c, p in profiles.items())
            mean = np.asarray(sums / total, dtype=np.float64)
            var = np.maximum(squares / total - mean**2, 0.0)
            scale = np.where(var > 0, np.sqrt(var), 1.0)
            if spec.task == "classification":
                target_mean, target_scale = 0.0, 1.0
            else:
                target_mean, target_scale = float(mean[-1]), float(scale[-1])
            if not spec.standardize:
                mean, scale = np.zeros(d + 1), np.ones(d + 1)
            scaling = Scaling(
                mean=mean[:d],
                scale=scale[:d],
                classes=_classes(spec, profiles),
                target_mean=target_mean,
                target_scale=target_scale,
            )
        sizes = {c: p.samples for c, p in profiles.items()}
        scaling = replace(
            scaling,
            learning_rate=default_step(spec, d) if spec.learning_rate is None else None,
            alpha=default_alpha(spec, sum(sizes.values()), len(scaling.classes))
            if spec.alpha is None
            else 0.0,
        )
        FED.broadcast(fed, "scaling", scaling, to=clients)
        return scaling, columns, sizes

    def _gather(self, fed: Federation, sampled: list[str], round_: int) -> dict[str, Any]:
        """The sampled clients' updates, at least ``min_clients`` of them."""
        if not sampled:
            return {}
        need = self._needed(len(sampled))
        try:
            return fed.gather(sampled, FED.tag("update", round_), min_count=need)
        except FederationTimeoutError as exc:
            raise FederationTimeoutError(
                f"round {round_ + 1}: fewer than min_clients={need} of the {len(sampled)} "
                f"sampled clients replied ({exc}); lower min_clients to tolerate more dropouts"
            ) from None

    def _sample(self, sampler: np.random.Generator, clients: list[str]) -> list[str]:
        spec = self.spec
        if spec.privacy is not None and spec.privacy.client_level:
            chosen: list[str] = spec.privacy.poisson_sample(clients, spec.client_fraction)
            return chosen
        count = max(1, math.ceil(spec.client_fraction * len(clients)))
        if count >= len(clients):
            return list(clients)
        picked = sampler.choice(len(clients), size=count, replace=False)
        return [clients[int(i)] for i in sorted(picked)]

    def _needed(self, sampled: int) -> int:
        if self.spec.min_clients is None:
            return max(1, math.ceil(sampled / 2)) if sampled else 0
        return min(self.spec.min_clients, sampled)


def aggregate_updates(
    spec: FitSpec,
    updates: Mapping[str, Update],
    weights: Vector,
    round_: int,
    sizes: Mapping[str, int] | None,
    clip: float | None,
    n_clients: int,
) -> tuple[Vector, float | None, Vector]:
    """The server's step from one round's replies, before the strategy's own: every update
    checked (its round, its length, its setup rows when ``sizes`` are known), then the mean
    delta by client-level DP (clipped, noised, the clip adapted), the robust rule, or the
    row-weighted mean. Returns ``(mean_delta, clip, norms)`` (the clip for the next round, the
    updates' norms for the drift). Shared by vflink's own server and :mod:`horizontal.flower`.
    """
    for client, update in updates.items():
        if update.round != round_ or update.delta.shape != weights.shape:
            Update.refuse(client, "delta", f"is not round {round_}'s {weights.size} values")
        if sizes is not None and update.samples != sizes[client]:
            Update.refuse(client, "samples", f"is not its {sizes[client]} setup rows")
    deltas = (  # one float64 matrix, a row per reply: stacked once
        np.vstack([u.delta for u in updates.values()]).astype(np.float64)
        if updates
        else np.zeros((0, weights.size))
    )
    norms = l2_norms(deltas) if len(deltas) else np.zeros(0)
    privacy = spec.privacy
    samples = [u.samples for u in updates.values()]
    if privacy is not None and privacy.client_level:
        bits = [u.unclipped for u in updates.values()]
        mean_delta, clip = privacy.server_mean(deltas, bits, clip, n_clients, weights, spec)
    elif spec.robust is not None and len(deltas):
        mean_delta = spec.robust.aggregate(deltas, samples)
    else:
        mean_delta = weighted_mean(deltas, samples)
    return mean_delta, clip, norms


def _check_diverged(weights: Vector, round_: int) -> None:
    """Stop the fit when a global weight left ``DIVERGED`` (or is not finite)."""
    if not np.all(np.abs(weights) < DIVERGED):
        raise FloatingPointError(
            f"round {round_ + 1}: the global model diverged (a weight beyond {DIVERGED:g} or "
            "not finite); lower learning_rate (or the strategy's server_lr, or local_epochs)"
        )


def _expand(update: Update, chosen: Any, size: int, client: str) -> Update:
    """A compressed update made dense again (checked against the agreed compression)."""
    from dataclasses import replace

    from horizontal import compression

    if chosen is None:
        return update
    try:
        if isinstance(chosen, int):
            if update.codes is None:
                Update.refuse(client, "codes", f"are missing: updates travel as {chosen}-bit codes")
            codes = compression.unpack_codes(update.codes, chosen, size)
            dense = compression.dequantize(codes, update.low, update.scale)
        else:
            if update.indices is None:
                Update.refuse(client, "indices", "are missing: updates travel as top-k entries")
            dense = compression.TopK.decompress(update.indices, update.delta, size)
    except ValueError as exc:
        Update.refuse(client, "codes", f"do not decode: {exc}")
    return replace(update, delta=dense.astype(np.float32), codes=None, indices=None)


def _field(profile: Profile, name: str, size: int, client: str) -> Vector:
    value = getattr(profile, name)
    if value is None or value.shape != (size,):
        Profile.refuse(client, name, f"is not {size} numbers")
    out: Vector = value.astype(np.float64)
    return out


def told(spec: FitSpec) -> bool:
    """Whether the clients send no statistics at setup: no standardisation, and the classes
    given (or, under DP, a regression: its target is then not standardised either, since DP
    would not cover its sums)."""
    return not spec.standardize and (spec.classes is not None or spec.privacy is not None)


def _classes(spec: FitSpec, profiles: Mapping[str, Profile]) -> list[str]:
    """The classes (the agreed ones, else the union of the clients' labels); none for a
    regression."""
    if spec.task != "classification":
        return []
    classes = (
        list(spec.classes)
        if spec.classes is not None
        else sorted(set().union(*(set(p.labels or []) for p in profiles.values())))
    )
    if len(classes) < 2:
        raise ValueError(
            f"the clients' labels hold one class only ({classes}); a classifier needs two or more"
        )
    return classes


def _objective(updates: Mapping[str, Update], round_: int) -> float:
    """The pooled training objective of the round's model (FedLBFGS): the clients' sums over
    their rows, each checked, over their rows."""
    total = 0.0
    for client, update in updates.items():
        if update.loss is None or not math.isfinite(update.loss):
            Update.refuse(client, "loss", f"is not round {round_}'s objective: {update.loss!r}")
        total += update.loss
    rows = sum(u.samples for u in updates.values())
    if not rows:
        raise ValueError(f"round {round_ + 1}: the replying clients hold no rows")
    return total / rows


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
