"""The roles of horizontal training: a server and clients, written once for every federation.

The protocol (tags under ``fed/``):

1. **setup** -- each client sends the server its :class:`Profile`: row count, column names,
   and, unless the estimator is told the scaling and classes (as differential privacy
   requires), its column sums and sums of squares and its distinct labels. The server checks
   that every client has the same columns, pools the statistics and answers with the
   :class:`Scaling` every client standardises with (and the classes);
2. **rounds** -- the server samples clients (``client_fraction``; a fixed count drawn from
   ``random_state``, or Poisson sampling from the OS under client-level DP), sends each a
   :class:`Task` with the global weights (and Scaffold's control variate, and DP's clipping
   norm), and gathers their :class:`Update` (``local - global``, the row count, Scaffold's
   control change), waiting for at least ``min_clients`` of them: clients that fail or drop
   out are left out and the weights renormalise over those that replied; fewer abort the
   fit naming the round;
3. **stop** -- the server sends every client the final weights.

What a party learns: a client, the global models it is sent (and, during setup, the pooled
means, deviations and classes); the server, each sampled client's row count, column sums
(unless told the scaling) and its model update each round -- not its records, but an update
is a function of them (gradient inversion can reconstruct records from one small batch's
update; see :mod:`horizontal.privacy` for the defences that bound what it reveals).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from horizontal.aggregate import l2_norms, weighted_mean
from horizontal.model import build_module, flatten, load_vector
from horizontal.strategies import Strategy
from vfl.federation.base import Federation, FederationTimeoutError
from vfl.federation.messages import Message, Namespace

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
    samples: int
    columns: list[str]
    sums: np.ndarray | None = None
    squares: np.ndarray | None = None
    labels: list[str] | None = None


@dataclass(frozen=True)
class Scaling(Message):
    """The server to every client: how to standardise the columns (and the target), and the
    classes in their order."""

    KIND = "scaling"
    mean: np.ndarray
    scale: np.ndarray
    classes: list[str]
    target_mean: float = 0.0
    target_scale: float = 1.0


@dataclass(frozen=True)
class Task(Message):
    """The server to a sampled client: train from ``weights`` in round ``round`` (or stop)."""

    KIND = "task"
    round: int
    weights: np.ndarray
    stop: bool = False
    control: np.ndarray | None = None
    clip: float | None = None
    peers: int | None = None  # under secure aggregation: the clients sampled this round


@dataclass(frozen=True)
class Update(Message):
    """A client's answer: ``local - global`` after its local training, its row count, and
    Scaffold's control-variate change, or DP's clipped-or-not bit (adaptive clipping)."""

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
    learning_rate: float
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


@dataclass
class FitResult:
    """What a role returns: the final global weights and the scaling (every party), and the
    rounds' records (the server)."""

    weights: Vector
    history: list[RoundRecord] = field(default_factory=list)
    scaling: Scaling | None = None
    n_features: int = 0


# -- the client ----------------------------------------------------------------------------------


class ClientRole:
    """One client: its own rows ``x`` (a float array, columns in ``columns``) and labels."""

    def __init__(self, spec: FitSpec, x: Vector, y: Vector, columns: list[str]) -> None:
        self.spec, self.x, self.y, self.columns = spec, x, y, columns
        self.topk: Any = None  # top-k compression's error feedback, kept across rounds

    def __call__(self, fed: Federation) -> FitResult:
        spec, server = self.spec, self.spec.server
        scaling = self._setup(fed)
        x = torch.as_tensor((self.x - scaling.mean) / scaling.scale, dtype=torch.float32)
        y = self._targets(scaling)
        outputs = len(scaling.classes) if spec.task == "classification" else 1
        module = build_module(spec.module, x.shape[1], outputs, spec.hidden, spec.random_state)
        loss_fn: Any = nn.CrossEntropyLoss() if spec.task == "classification" else nn.MSELoss()
        own_control: Vector | None = None  # Scaffold's c_k
        while True:
            task = FED.recv(fed, server, "task", Task)
            if task.stop:
                load_vector(module, task.weights)
                return FitResult(flatten(module), scaling=scaling, n_features=x.shape[1])
            with _TRAINING:  # the training: simulated clients take turns (see _TRAINING)
                own_control, reply = self._round(fed, module, x, y, loss_fn, task, own_control)
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
        start = task.weights.astype(np.float64)  # what the module now holds
        seed = _seed(spec.random_state, task.round, fed.name)
        own_control = own_control if own_control is not None else np.zeros_like(start)
        control = task.control if task.control is not None else np.zeros_like(start)
        steps = local_train(
            module, x, y, loss_fn, spec, start, control, own_control, seed, fed.name
        )
        delta = flatten(module) - start
        if spec.adversaries and fed.name in spec.adversaries:  # an audit's malicious client
            delta = np.asarray(spec.adversaries[fed.name](delta, task.round), dtype=np.float64)
        update_control = None
        if spec.strategy.local.scaffold:  # option II of Karimireddy et al. 2020
            new_control = own_control - control - delta / (steps * spec.learning_rate)
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
        told = not spec.standardize and spec.classes is not None
        x = self.x
        profile = Profile(samples=len(x), columns=list(self.columns))
        if not told:
            labels = (
                sorted({str(v) for v in self.y.tolist()}) if spec.task == "classification" else None
            )
            extra = (
                np.array([self.y.sum(), (self.y.astype(float) ** 2).sum()])
                if spec.task == "regression"
                else np.zeros(2)
            )
            profile = Profile(
                samples=len(x),
                columns=list(self.columns),
                sums=np.concatenate([x.sum(axis=0), extra[:1]]),
                squares=np.concatenate([(x**2).sum(axis=0), extra[1:]]),
                labels=labels,
            )
        FED.send(fed, spec.server, "profile", profile)
        scaling = FED.recv(fed, spec.server, "scaling", Scaling)
        d = x.shape[1]
        if scaling.mean.shape != (d,) or scaling.scale.shape != (d,):
            Scaling.refuse(spec.server, "mean", f"does not match the {d} columns")
        return scaling

    def _targets(self, scaling: Scaling) -> torch.Tensor:
        if self.spec.task == "classification":
            index = {c: k for k, c in enumerate(scaling.classes)}
            unknown = sorted({str(v) for v in self.y.tolist()} - set(index))
            if unknown:
                raise ValueError(
                    f"client labels {unknown[:5]} are not among the classes {scaling.classes}"
                )
            return torch.as_tensor([index[str(v)] for v in self.y.tolist()], dtype=torch.long)
        t = (self.y.astype(float) - scaling.target_mean) / scaling.target_scale
        return torch.as_tensor(t, dtype=torch.float32).reshape(-1, 1)


def local_train(
    module: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Any,
    spec: FitSpec,
    start: Vector,
    control: Vector,
    own_control: Vector,
    seed: int,
    client: str = "",
) -> int:
    """A client's local training in one round; returns the number of optimiser steps.

    Plain SGD at ``learning_rate`` (local momentum would persist across rounds unseen by the
    server): one full-batch step (FedSGD), or ``local_epochs`` of mini-batches in an order
    drawn from ``seed``; FedProx's proximal term and Scaffold's correction when the
    strategy asks; record-level DP-SGD when ``spec.privacy`` is a ``RecordDP``."""
    plan = spec.strategy.local
    if spec.privacy is not None and getattr(spec.privacy, "record_level", False):
        return int(spec.privacy.local_train(module, x, y, loss_fn, spec, client))
    params = list(module.parameters())
    anchor = torch.as_tensor(start, dtype=torch.float32) if plan.mu else None
    correction = (
        torch.as_tensor(control - own_control, dtype=torch.float32) if plan.scaffold else None
    )
    n = len(x)
    if plan.full_batch:
        batches: list[torch.Tensor] = [torch.arange(n)]
    else:
        generator = torch.Generator().manual_seed(seed)
        batches = [
            order[i : i + spec.batch_size]
            for order in (torch.randperm(n, generator=generator) for _ in range(spec.local_epochs))
            for i in range(0, n, spec.batch_size)
        ]
    for rows in batches:
        for p in params:
            p.grad = None
        loss = loss_fn(module(x[rows]), y[rows])
        if anchor is not None:
            flat = nn.utils.parameters_to_vector(params)
            loss = loss + plan.mu / 2 * torch.sum((flat - anchor) ** 2)
        loss.backward()
        with torch.no_grad():
            offset = 0
            for p in params:
                grad = p.grad if p.grad is not None else torch.zeros_like(p)
                if correction is not None:
                    grad = grad + correction[offset : offset + p.numel()].view_as(p)
                    offset += p.numel()
                p.sub_(spec.learning_rate * grad)
    return len(batches)


def _seed(random_state: int | None, round_: int, client: str) -> int:
    """A client's batch-order seed for a round: from ``random_state`` (reproducible), else
    fresh."""
    if random_state is None:
        return int(np.random.default_rng().integers(2**62))
    digest = np.frombuffer(client.encode(), dtype=np.uint8).astype(np.int64)
    return int((random_state * 1_000_003 + round_ * 7919 + int(digest.sum()) * 31) % 2**62)


# -- the server ----------------------------------------------------------------------------------


class ServerRole:
    """The server: pools the scaling, samples clients, aggregates, steps the strategy."""

    def __init__(self, spec: FitSpec) -> None:
        self.spec = spec

    def __call__(self, fed: Federation) -> FitResult:
        spec = self.spec
        clients = list(spec.clients)
        scaling, columns, sizes = self._setup(fed, clients)
        total_rows = sum(sizes.values())
        self.total_rows = total_rows
        outputs = len(scaling.classes) if spec.task == "classification" else 1
        module = build_module(spec.module, len(columns), outputs, spec.hidden, spec.random_state)
        weights = flatten(module)
        result = FitResult(weights=weights, scaling=scaling, n_features=len(columns))
        state: dict[str, Any] = {}
        sampler = np.random.default_rng(spec.random_state)
        privacy = spec.privacy
        clip = privacy.initial_clip if privacy is not None and privacy.client_level else None
        for round_ in range(spec.rounds):
            began = time.perf_counter()
            sampled = self._sample(sampler, clients)
            control = state.get("control") if spec.strategy.local.scaffold else None
            if control is None and spec.strategy.local.scaffold:
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
            mean_delta, clip, norms = aggregate_updates(
                spec, updates, weights, round_, sizes, clip, len(clients)
            )
            control_step = None
            if spec.strategy.local.scaffold and updates:
                control_step = np.zeros_like(weights)
                for client, u in updates.items():
                    if u.control is None or u.control.shape != weights.shape:
                        Update.refuse(client, "control", f"is not {weights.size} values")
                    control_step += (u.samples / total_rows) * u.control.astype(np.float64)
            weights = spec.strategy.server_step(
                weights, mean_delta, state, control_step=control_step
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
            if spec.on_round is not None:
                spec.on_round(record, weights, scaling)
            logger.info(
                "round %d: %d of %d sampled clients replied, drift %.4f",
                round_ + 1,
                len(updates),
                len(sampled),
                record.drift,
            )
        FED.broadcast(
            fed,
            "task",
            Task(round=spec.rounds, weights=weights.astype(np.float32), stop=True),
            to=clients,
        )
        result.weights = weights
        return result

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
        d = len(columns)
        if not spec.standardize and spec.classes is not None:
            scaling = Scaling(mean=np.zeros(d), scale=np.ones(d), classes=list(spec.classes))
        else:
            total = sum(p.samples for p in profiles.values())
            sums = sum(_field(p, "sums", d + 1, c) for c, p in profiles.items())
            squares = sum(_field(p, "squares", d + 1, c) for c, p in profiles.items())
            mean = np.asarray(sums / total, dtype=np.float64)
            var = np.maximum(squares / total - mean**2, 0.0)
            scale = np.where(var > 0, np.sqrt(var), 1.0)
            if spec.task == "classification":
                classes = (
                    list(spec.classes)
                    if spec.classes is not None
                    else sorted(set().union(*(set(p.labels or []) for p in profiles.values())))
                )
                if len(classes) < 2:
                    raise ValueError(
                        f"the clients' labels hold one class only ({classes}); a classifier "
                        "needs two or more"
                    )
                target_mean, target_scale = 0.0, 1.0
            else:
                classes = []
                target_mean, target_scale = float(mean[-1]), float(scale[-1])
            if not spec.standardize:
                mean, scale = np.zeros(d + 1), np.ones(d + 1)
            scaling = Scaling(
                mean=mean[:d],
                scale=scale[:d],
                classes=classes,
                target_mean=target_mean,
                target_scale=target_scale,
            )
        FED.broadcast(fed, "scaling", scaling, to=clients)
        return scaling, columns, {c: p.samples for c, p in profiles.items()}

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
