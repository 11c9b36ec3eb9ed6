"""Stopping on a loss curve."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["LossCurve"]


@dataclass
class LossCurve:
    """Training loss per epoch and the stopping rule, as scikit-learn's ``SGDRegressor``:
    an epoch counts as no improvement when its loss is above the best so far minus ``tol``;
    training stops after ``patience`` such epochs in a row (``tol=None``: never).

    With ``patience=1`` that is: stop at the first epoch that does not lower the loss by
    ``tol`` -- which one noisy epoch can trigger; a patience of 5 rides over it.

    With early stopping (``tol`` set) the fit keeps the model of the epoch of lowest loss,
    :attr:`best_epoch`, not the last one: :attr:`keep` says, after each :meth:`add`, whether
    the epoch just added is the new best (the label party tells the others so, one bit per
    epoch, and each keeps its own part of that epoch's model). With ``tol=None`` (a fixed
    number of epochs, as label DP needs) the last epoch's model is kept and nothing is said.
    """

    tol: float | None
    patience: int = 1
    values: list[float] = field(default_factory=list)
    best: float = math.inf
    best_epoch: int = 0
    """The epoch (1-based) whose model the fit keeps; 0 before the first."""
    keep: bool = False
    """Whether the fit keeps the model of the epoch just added."""
    _stale: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.patience, int) or self.patience < 1:
            raise ValueError(f"n_iter_no_change must be a positive integer, got {self.patience!r}")

    def add(self, loss: float) -> bool:
        """Record an epoch's loss; True when training should stop."""
        loss = float(loss)
        self.values.append(loss)
        if self.tol is not None and len(self.values) > 1 and loss > self.best - self.tol:
            self._stale += 1
        else:
            self._stale = 0
        self.keep = self.tol is None or loss < self.best
        if self.keep:
            self.best_epoch = len(self.values)
        self.best = min(self.best, loss)
        return self.tol is not None and self._stale >= self.patience
