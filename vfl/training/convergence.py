"""Stopping on a loss curve."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LossCurve"]


@dataclass
class LossCurve:
    """Training loss per epoch and the stopping rule.

    Training has converged when an epoch lowers the loss by less than ``tol`` (None: never);
    with ``patience`` > 1 it takes that many such epochs in a row, so that one noisy epoch
    (a rise, say) does not end training early.
    """

    tol: float | None
    patience: int = 1
    values: list[float] = field(default_factory=list)
    _flat: int = 0

    def add(self, loss: float) -> bool:
        """Record an epoch's loss; True when training should stop."""
        self.values.append(float(loss))
        if self.tol is None or len(self.values) < 2:
            return False
        if self.values[-2] - self.values[-1] < self.tol:
            self._flat += 1
        else:
            self._flat = 0
        return self._flat >= self.patience
