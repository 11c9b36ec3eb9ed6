"""The plaintext twin of vertical boosting: every party's bin codes in one process, the same
trees the federated protocol grows (:func:`vfl.boost.tree.grow` on in-process sources).

Tests compare the protocol with it and it with an exact reference; it is not a way to train
across parties (it holds every party's codes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vfl.boost.objectives import Objective
from vfl.boost.splits import SplitRule
from vfl.boost.tree import LocalSource, Tree, grow, to_fixed

__all__ = ["TwinModel", "boost_twin"]


@dataclass
class TwinModel:
    """The trees, the starting score, every party's source (codes and split table) and the
    training loss per round."""

    trees: list[Tree]
    start: np.ndarray[Any, Any]
    sources: dict[str, LocalSource]
    losses: list[float] = field(default_factory=list)

    def raw(self, codes: dict[str, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        """Raw scores ``(rows, outputs)`` of rows given by every party's bin codes."""
        rows = len(next(iter(codes.values())))
        out = np.tile(self.start, (rows, 1))
        for tree in self.trees:
            calls = {
                party: (
                    lambda split, s=source, c=codes[party]: s.table.goes_left(split, c, s.missing)
                )
                for party, source in self.sources.items()
            }
            out += tree.predict(calls, rows)
        return out


def boost_twin(
    codes: dict[str, np.ndarray[Any, Any]],
    missing: int,
    y: np.ndarray[Any, Any],
    objective: Objective,
    *,
    n_estimators: int,
    max_depth: int,
    learning_rate: float,
    rule: SplitRule,
) -> TwinModel:
    """Boost ``n_estimators`` trees on every party's bin codes (the label party's first)."""
    sources = {party: LocalSource(c, missing, rule) for party, c in codes.items()}
    start = objective.start(y)
    raw = np.tile(start, (len(y), 1))
    model = TwinModel([], start, sources)
    for _ in range(n_estimators):
        g, h = objective.gradients(raw, y)
        tree = grow(
            sources,
            to_fixed(g),
            to_fixed(h),
            rule,
            max_depth=max_depth,
            learning_rate=learning_rate,
        )
        raw = raw + np.stack(tree.value)[tree.train_leaf]
        model.trees.append(tree)
        model.losses.append(objective.loss(raw, y))
    return model
