"""The typed messages of horizontal training (tags under ``fed/``): a client's
:class:`Profile` at setup, the server's :class:`Scaling`, each round's :class:`Task` and
the client's :class:`Update` (the protocol: :mod:`horizontal.training`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.federation.messages import Message, Namespace

__all__ = ["FED", "Profile", "Scaling", "Task", "Update", "Vector"]

FED = Namespace("fed")
"""The tags of horizontal training (``fed/profile``, ``fed/task``, ``fed/update/<round>``)."""

Vector = np.ndarray[Any, Any]


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
