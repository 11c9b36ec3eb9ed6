"""The server of horizontal training (:class:`ServerRole`): it pools the scaling, samples
clients, checks and aggregates their updates (:func:`aggregate_updates`, shared with
:mod:`horizontal.flower`), steps the strategy and stops (the protocol:
:mod:`horizontal.training`)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from horizontal.aggregate import l2_norms, weighted_mean
from horizontal.messages import FED, Profile, Scaling, Task, Update, Vector
from horizontal.model import build_module, flatten
from horizontal.plan import (
    FitResult,
    FitSpec,
    RoundRecord,
    default_alpha,
    default_step,
    settled,
    told,
)
from horizontal.stopping import EarlyStopping
from vfl.federation.base import Federation, FederationTimeoutError
from vfl.progress import EpochProgress

__all__ = [
    "DIVERGED",
    "ServerRole",
    "aggregate_updates",
    "check_diverged",
    "expand_update",
    "scaffold_control_step",
]

logger = logging.getLogger("vflink.horizontal")

DIVERGED = 1e6
"""A global weight beyond this magnitude stops the fit as diverged."""


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
            FED.broadcast(fed, "task", task, to=sampled)  # encoded once, the same bytes each
            if spec.secure_aggregation is not None:
                weights, record = self._secure_round(fed, sampled, weights, state, round_)
                record.seconds = time.perf_counter() - began
                result.history.append(record)
                if spec.on_round is not None:
                    spec.on_round(record, weights, scaling)
                continue
            replies = self._gather(fed, sampled, round_)
            updates = {
                c: expand_update(Update.from_payload(p, c), spec.compression, weights.size, c)
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
            if strategy.local.scaffold:
                control_step = scaffold_control_step(updates, weights, total_rows)
            weights = strategy.server_step(
                weights, mean_delta, state, control_step=control_step, objective=objective
            )
            check_diverged(weights, round_)
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
        FED.broadcast(fed, "task", task, to=clients)
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
        check_diverged(weights, round_)
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
    deltas = np.empty((len(updates), weights.size))  # one float64 matrix, a row per reply
    for row, update in zip(deltas, updates.values(), strict=True):
        row[:] = update.delta  # converted as it is copied: no float32 matrix first
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


def scaffold_control_step(
    updates: Mapping[str, Update], weights: Vector, total_rows: int
) -> Vector | None:
    """Scaffold's change of the server control variate: the clients' control changes weighted
    by their rows over all clients' rows (None when nobody replied); each change checked.
    Shared by vflink's own server and :mod:`horizontal.flower`."""
    if not updates:
        return None
    step = np.zeros_like(weights)
    for client, u in updates.items():
        if u.control is None or u.control.shape != weights.shape:
            Update.refuse(client, "control", f"is not {weights.size} values")
        step += (u.samples / total_rows) * u.control.astype(np.float64)
    return step


def check_diverged(weights: Vector, round_: int) -> None:
    """Stop the fit when a global weight left ``DIVERGED`` (or is not finite)."""
    if not np.all(np.abs(weights) < DIVERGED):
        raise FloatingPointError(
            f"round {round_ + 1}: the global model diverged (a weight beyond {DIVERGED:g} or "
            "not finite); lower learning_rate (or the strategy's server_lr, or local_epochs)"
        )


def expand_update(update: Update, chosen: Any, size: int, client: str) -> Update:
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
