"""The epoch-control message: the party that watches the loss tells the others, before each
epoch, what to do.

Every federated learner whose parties train in step (the vertical linear models, the split
network) sends the same :class:`EpochControl`: one message per epoch from the party that
learns the loss (the label party) to every other party, which follows it.
"""

from __future__ import annotations

from dataclasses import dataclass

from vfl.federation.messages import Message

__all__ = ["EpochControl"]


@dataclass(frozen=True)
class EpochControl(Message):
    """Before each epoch: go on or ``stop``; ``keep`` the model of the epoch just finished
    (the best so far, :class:`~vfl.training.LossCurve`); or ``restart``: that epoch diverged,
    so every party goes back to its kept model and shrinks its step by
    :data:`~vfl.training.convergence.RESTART_FACTOR` (the vertical linear models only)."""

    KIND = "epoch control"
    stop: bool
    keep: bool = False
    restart: bool = False
    kept: int = -1
    """The epoch to go back to (on ``restart``) or to end with (on ``stop``), where the
    followers keep every epoch's model and are told which one only then, instead of a
    ``keep`` bit per epoch (the secret-shared linear protocol): 0 is the starting model, ``e``
    the model after ``e`` epochs; -1 when not said."""
