"""What a client computes on its own rows in a round: local SGD, one full-batch gradient, the
loss on its held-out rows, and which rows it holds out.

The objective every client minimises is its rows' mean loss plus the L2 penalty
``alpha / 2 * ||W||^2`` on the module's weight matrices (every parameter of two or more
dimensions: not the biases or intercepts, as scikit-learn penalises), so that with weights
``n_k`` the clients' objectives average to the pooled one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl.extras import optional
from vfl.training.torch_loop import torch_optimizer, train_step

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

__all__ = ["full_gradient", "held_out_loss", "holdout", "local_train", "penalty", "seed_for"]

Vector = np.ndarray[Any, Any]


def penalty(params: Sequence[torch.Tensor], alpha: float) -> torch.Tensor | float:
    """``alpha / 2`` times the squared L2 norm of the weight matrices among ``params``."""
    if not alpha:
        return 0.0
    return alpha / 2 * sum((p**2).sum() for p in params if p.ndim >= 2)


def local_train(
    module: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Any,
    spec: Any,
    start: Vector,
    control: Vector,
    own_control: Vector,
    seed: int,
    client: str = "",
) -> int:
    """A client's local training in one round; returns the number of optimiser steps.

    Plain SGD at ``spec.learning_rate`` on the penalised loss (``spec.alpha``): one
    full-batch step (FedSGD), or ``local_epochs`` of mini-batches in an order drawn from
    ``seed``; FedProx's proximal term and Scaffold's correction when the strategy asks;
    Adam instead of SGD when it asks (``FedAvg(local_optimizer="adam")``: a fresh Adam each
    round, so that no optimiser state outlives the round unseen by the server);
    record-level DP-SGD when ``spec.privacy`` is a ``RecordDP``."""
    plan = spec.strategy.local
    if spec.privacy is not None and getattr(spec.privacy, "record_level", False):
        return int(spec.privacy.local_train(module, x, y, loss_fn, spec, client))
    params = list(module.parameters())
    anchor = torch.as_tensor(start, dtype=torch.float32) if plan.mu else None
    correction = (
        torch.as_tensor(control - own_control, dtype=torch.float32) if plan.scaffold else None
    )
    alpha = float(spec.alpha or 0.0)
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
    if plan.optimizer == "adam":
        adam = torch_optimizer("adam", params, learning_rate=spec.learning_rate)
        for rows in batches:
            train_step(adam, loss_fn(module(x[rows]), y[rows]) + penalty(params, alpha))
        return len(batches)
    for rows in batches:
        for p in params:
            p.grad = None
        loss = loss_fn(module(x[rows]), y[rows])
        if alpha:
            loss = loss + penalty(params, alpha)
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


def full_gradient(
    module: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Any, alpha: float
) -> tuple[Vector, float]:
    """The gradient of the penalised mean loss over all of ``x`` (in :func:`flatten`'s
    layout) and that objective times the rows: what :class:`~horizontal.strategies.FedLBFGS`
    asks of a client. The module's parameters are left as they were."""
    params = list(module.parameters())
    for p in params:
        p.grad = None
    objective = loss_fn(module(x), y) + penalty(params, alpha)
    objective.backward()
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    gradient = torch.cat([g.reshape(-1) for g in grads]).detach().double().numpy().copy()
    for p in params:
        p.grad = None
    return gradient, float(objective.item()) * len(x)


def held_out_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Any) -> float:
    """The loss of ``module`` summed over the held-out rows (no penalty)."""
    if not len(x):
        return 0.0
    summed = type(loss_fn)(reduction="sum")
    with torch.no_grad():
        return float(summed(module(x), y).item())


def holdout(labels: Vector, fraction: float, seed: int, *, stratify: bool) -> tuple[Vector, Vector]:
    """The positions of the rows a client trains on and of those it holds out for early
    stopping: ``round(fraction * n)`` rows (none of a client with fewer than two rows; at
    least one otherwise, never all), drawn from ``seed``, within each class when ``stratify``
    (as scikit-learn's ``MLPClassifier`` splits)."""
    n = len(labels)
    rng = np.random.default_rng(seed)
    if n < 2:
        return np.arange(n), np.zeros(0, dtype=np.int64)
    count = min(n - 1, max(1, round(fraction * n)))
    if stratify:
        groups = [np.flatnonzero(labels == v) for v in np.unique(labels)]
        shares = np.array([len(g) for g in groups], dtype=float) * count / n
        taken = np.floor(shares).astype(int)
        for k in np.argsort(taken - shares)[: count - int(taken.sum())]:  # largest remainders
            taken[k] += 1
        held = np.concatenate([rng.permutation(g)[:t] for g, t in zip(groups, taken, strict=True)])
    else:
        held = rng.permutation(n)[:count]
    mask = np.zeros(n, dtype=bool)
    mask[held] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


def seed_for(random_state: int | None, round_: int, client: str) -> int:
    """A client's seed for a round's batch order (round -1: its held-out rows): from
    ``random_state`` (reproducible), else fresh."""
    if random_state is None:
        return int(np.random.default_rng().integers(2**62))
    digest = np.frombuffer(client.encode(), dtype=np.uint8).astype(np.int64)
    return int((random_state * 1_000_003 + round_ * 7919 + int(digest.sum()) * 31) % 2**62)
