"""The messages of the vertical linear protocol (tags under ``vlr/``; scoring under
``vlr-score/``)."""

from __future__ import annotations

from dataclasses import dataclass

from vfl.federation.messages import Message, Namespace
from vfl.federation.wire import CiphertextBlock

__all__ = [
    "SCORE",
    "VLR",
    "CrossScores",
    "Encrypted",
    "EpochControl",
    "Outputs",
    "RowsHeader",
    "RowsPart",
    "SetupCounts",
]

VLR = Namespace("vlr")
SCORE = Namespace("vlr-score")


@dataclass(frozen=True)
class SetupCounts(Message):
    """To the coordinator at setup: the outputs K, the row packing a data party uses and the
    packings its peers announced to it (so that the coordinator can check every party's
    gradient requests against what the others saw), and from the label party the number of
    rows (for the batch count)."""

    KIND = "setup counts"
    outputs: int
    packing: dict[str, int]
    peer_packings: dict[str, dict[str, int]]
    rows: int | None = None


@dataclass(frozen=True)
class RowsHeader(Message):
    """Before the encrypted feature rows: their packing and how many parts follow."""

    KIND = "encrypted rows header"
    packing: dict[str, int]
    parts: int


@dataclass(frozen=True)
class RowsPart(Message):
    """One part of the encrypted rows: one block per column group."""

    KIND = "encrypted rows"
    blocks: list[CiphertextBlock]


@dataclass(frozen=True)
class Encrypted(Message):
    """One encrypted vector: a gradient share, scores, a loss piece or a cross-term sum."""

    KIND = "encrypted vector"
    data: CiphertextBlock


@dataclass(frozen=True)
class CrossScores(Message):
    """The label party forwards earlier passives' encrypted scores (cross terms of the loss)."""

    KIND = "cross-term scores"
    scores: list[CiphertextBlock]


@dataclass(frozen=True)
class EpochControl(Message):
    """The label party, before each epoch: go on or stop; whether to keep the model of the
    epoch just finished (the best so far, :class:`~vfl.training.LossCurve`); or whether that
    epoch diverged, so every party goes back to its kept model and shrinks its step by
    :data:`~vfl.training.convergence.RESTART_FACTOR` (``restart``)."""

    KIND = "epoch control"
    stop: bool
    keep: bool = False
    restart: bool = False


@dataclass(frozen=True)
class Outputs(Message):
    """The label party, at setup: how many outputs are trained (1, or K one-vs-rest), and
    whether label DP is on, with the L2 norm every party's rows are clipped to (None: the
    square root of the party's column count)."""

    KIND = "output count"
    count: int
    label_dp: bool = False
    row_clip: float | None = None
