"""Early stopping on the clients' held-out rows, at the server.

Each client holds out part of its rows (:func:`horizontal.local.holdout`) and, every round,
reports the loss of the global model it was sent summed over them, and their count; the
server pools the sums into the mean held-out loss of that model and stops when it has not
improved by ``tol`` for ``n_iter_no_change`` rounds, keeping the best model seen (the rule
of scikit-learn's ``MLPClassifier(early_stopping=True)``, on a loss instead of a score).

What the server learns beyond FedAvg's updates: each client's held-out loss sum and row
count per round (two numbers, a function of its rows as an update is). A client that lies
about them can only move the round training stops at and which model is kept.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["EarlyStopping"]

Vector = np.ndarray[Any, Any]


class EarlyStopping:
    """The server's record of held-out losses: the best model so far and when to stop."""

    def __init__(self, *, n_iter_no_change: int, tol: float) -> None:
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.best_loss = math.inf
        self.best_weights: Vector | None = None
        self.best_round: int | None = None
        self.waited = 0

    def observe(self, round_: int, weights: Vector, loss: float) -> None:
        """The held-out loss of ``weights``, the model after ``round_`` rounds."""
        if not loss < self.best_loss - self.tol:
            self.waited += 1
        else:
            self.waited = 0
        if loss < self.best_loss:
            self.best_loss = loss
            self.best_weights = np.array(weights, dtype=np.float64)
            self.best_round = round_

    @property
    def done(self) -> bool:
        """Whether the loss has not improved by ``tol`` for ``n_iter_no_change`` rounds."""
        return self.waited >= self.n_iter_no_change
