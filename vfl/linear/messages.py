"""The messages of the vertical linear protocol (tags under ``vlr/``; scoring under
``vlr-score/``). Encrypted vectors travel as the toolkit's
:class:`~vfl.crypto.messages.Encrypted`, the epoch's word as
:class:`~vfl.training.control.EpochControl`."""

from __future__ import annotations

from dataclasses import dataclass

from vfl.federation.messages import Message, Namespace
from vfl.federation.wire import CiphertextBlock

__all__ = [
    "SCORE",
    "VLR",
    "Outputs",
    "RowsHeader",
    "RowsPart",
    "SetupCounts",
]

VLR = Namespace("vlr")
SCORE = Namespace("vlr-score")


@dataclass(frozen=True)
class SetupCounts(Message):
    """To the coordinator at setup, from every data party: the outputs K, the row packing it
    uses, the packings its peers announced to it, and its number of rows. The coordinator
    checks each against what the others saw and against the packing it derives from the
    public sizes (:func:`~vfl.linear.protocol.check_setup`), and counts the batches from
    the rows."""

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
class Outputs(Message):
    """The label party, at setup: how many outputs are trained (1, or K one-vs-rest), and
    whether label DP is on, with the L2 norm every party's rows are clipped to (None: the
    square root of the party's column count)."""

    KIND = "output count"
    count: int
    label_dp: bool = False
    row_clip: float | None = None
