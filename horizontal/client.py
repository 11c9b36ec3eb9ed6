"""A client of horizontal training (:class:`ClientRole`): its setup profile, its local
rounds, its replies (the protocol: :mod:`horizontal.training`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from horizontal.local import full_gradient, held_out_loss, holdout, local_train, seed_for
from horizontal.messages import FED, Profile, Scaling, Task, Update, Vector
from horizontal.model import build_module, flatten, load_vector
from horizontal.plan import FitResult, FitSpec, settled, told
from vfl.extras import optional
from vfl.federation.base import Federation

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

__all__ = ["ClientRole", "client_data", "feature_matrix"]

_TRAIN_SLOTS = int(os.environ.get("VFLINK_TRAIN_SLOTS", "1"))
"""Clients of one process that train at once. In simulation, a hundred clients' threads
training together contend for the GIL and torch's intra-op threads (torch already spreads
one client's step over the cores); in deployment a process holds one client."""

_trainers: dict[int, ThreadPoolExecutor] = {}
_trainers_lock = threading.Lock()


def _trainer() -> ThreadPoolExecutor:
    """This process's training threads (:data:`_TRAIN_SLOTS`), on which every client of a
    simulation trains in turn. One thread making every torch call of the simulation, rather
    than a hundred client threads taking turns, was measured faster: 100 clients of a
    103k-parameter MLP took 0.41 s a round against 0.45 s (the plain loop: 0.26 s); torch's
    per-thread state (the autograd engine's, the allocator's) and the core's caches stay
    warm, which is the likely cause, not isolated."""
    with _trainers_lock:
        pool = _trainers.get(os.getpid())  # a forked child starts its own
        if pool is None:
            pool = ThreadPoolExecutor(_TRAIN_SLOTS, thread_name_prefix="vflink-training")
            _trainers.clear()
            _trainers[os.getpid()] = pool
        return pool


class ClientRole:
    """One client: its own rows ``x`` (a float array, columns in ``columns``) and labels."""

    def __init__(self, spec: FitSpec, x: Vector, y: Vector, columns: list[str]) -> None:
        self.spec, self.x, self.y, self.columns = spec, x, y, columns
        self.held_x, self.held_y = x[:0], y[:0]  # early stopping's held-out rows (at setup)
        self.topk: Any = None  # top-k compression's error feedback, kept across rounds
        self.channel: Any = None  # secure aggregation's c key, kept across rounds (ChannelKey)

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

            def train(task: Task = task, own_control: Vector | None = own_control) -> Any:
                held = None
                if spec.early_stopping or task.evaluate:  # _round loads the weights itself
                    load_vector(module, task.weights)
                    held = held_out_loss(module, held_x, held_y, loss_fn)
                if task.evaluate:
                    reply: Any = Update(task.round, np.zeros(0, np.float32), len(x))
                else:
                    own_control, reply = self._round(fed, module, x, y, loss_fn, task, own_control)
                if spec.early_stopping and isinstance(reply, Update):
                    reply = replace(reply, validation_loss=held, validation_rows=len(held_x))
                return own_control, reply

            # the training: simulated clients take turns on the training thread (_trainer),
            # or where they are when every party takes turns on one thread
            if fed.takes_turns:
                own_control, reply = train()
            else:
                own_control, reply = _trainer().submit(train).result()
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
        start = np.asarray(task.weights, dtype=np.float64)  # what the module now holds
        seed = seed_for(spec.random_state, task.round, fed.name)
        scaffold = spec.strategy.local.scaffold
        own, control = start[:0], start[:0]  # without Scaffold: no control variate at all
        if scaffold:
            own = own_control if own_control is not None else np.zeros_like(start)
            control = task.control if task.control is not None else np.zeros_like(start)
        objective = None
        if spec.strategy.local.gradient:  # FedLBFGS: the gradient, nothing trained
            gradient, objective = full_gradient(module, x, y, loss_fn, float(spec.alpha or 0))
            delta, steps = -gradient, 1
        else:
            steps = local_train(module, x, y, loss_fn, spec, start, control, own, seed, fed.name)
            delta = flatten(module) - start
        if spec.adversaries and fed.name in spec.adversaries:  # an audit's malicious client
            delta = np.asarray(spec.adversaries[fed.name](delta, task.round), dtype=np.float64)
        update_control = None
        if scaffold:  # option II of Karimireddy et al. 2020
            new_control = own - control - delta / (steps * float(spec.learning_rate or 1))
            update_control = (new_control - own).astype(np.float32)
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
        from horizontal.secagg import ChannelKey, client_round

        if self.channel is None:
            self.channel = ChannelKey()
        config = spec.secure_aggregation
        client_round(
            fed,
            spec.server,
            reply,
            config,
            task.round,
            clients=int(task.peers or 1),
            channel=self.channel,
        )

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


def client_data(
    clients: Mapping[str, Any], label: str | None
) -> dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], list[str]]]:
    """Each client's ``(X, y, column names)`` from ``{client: (X, y)}`` or ``{client:
    DataFrame}`` with the labels in column ``label``, checked (numeric columns without NaN,
    one present label per row); the errors name the client, the column and the row."""
    import pandas as pd

    if not isinstance(clients, Mapping) or not clients:
        raise ValueError("fit needs {client: (X, y)} or {client: DataFrame} with label=...")
    out = {}
    for name, value in clients.items():
        if not isinstance(name, str):
            raise ValueError(f"client names must be strings, got {name!r}")
        if isinstance(value, pd.DataFrame):
            if label is None or label not in value.columns:
                raise ValueError(
                    f"client {name!r}: a DataFrame needs label='<column>' naming its labels "
                    f"({label!r} is not one of its columns)"
                )
            x_frame, y = value.drop(columns=[label]), value[label]
        elif isinstance(value, tuple) and len(value) == 2:
            x_frame, y = value
        else:
            raise ValueError(
                f"client {name!r}: expected (X, y) or a DataFrame, got {type(value).__name__}"
            )
        x = feature_matrix(x_frame, f"client {name!r}")
        labels = np.asarray(y)
        if len(x) == 0:
            raise ValueError(f"client {name!r} holds no rows; leave it out")
        if labels.shape != (len(x),):
            raise ValueError(f"client {name!r}: {len(labels)} labels for {len(x)} rows")
        missing = np.flatnonzero(pd.isna(pd.Series(labels)).to_numpy())
        if len(missing):
            raise ValueError(f"client {name!r}: the label of row {int(missing[0])} is missing")
        columns = (
            [str(c) for c in x_frame.columns]
            if isinstance(x_frame, pd.DataFrame)
            else [f"x{j}" for j in range(x.shape[1])]
        )
        out[name] = (x, labels, columns)
    return out


def feature_matrix(x: Any, what: str) -> np.ndarray[Any, Any]:
    """``x`` (a DataFrame of numeric columns or a 2-d array) as float64, checked: the errors
    name ``what``, the column and the row."""
    import pandas as pd

    if isinstance(x, pd.DataFrame):
        bad = [
            c
            for c in x.columns
            if not pd.api.types.is_numeric_dtype(x[c]) or pd.api.types.is_bool_dtype(x[c])
        ]
        if bad:
            raise ValueError(f"{what}: columns {bad} are not numeric; encode them first")
        values = x.to_numpy(dtype=np.float64)
    else:
        values = np.asarray(x, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"{what} must be 2-d (rows x columns), got shape {values.shape}")
    bad_cells = ~np.isfinite(values)
    if bad_cells.any():
        row, col = np.argwhere(bad_cells)[0]
        name = x.columns[col] if isinstance(x, pd.DataFrame) else int(col)
        raise ValueError(
            f"{what}: column {name!r} has NaN or inf (row {int(row)}); impute or drop it"
        )
    return values
