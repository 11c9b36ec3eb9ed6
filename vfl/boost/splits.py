"""The best split of a node from its histograms: XGBoost's gain, with a learned missing side.

A node's histogram, per column and bin, holds the sums ``G`` and ``H`` of its rows' gradients
and hessians (one pair per output: several with multi-output trees). For a split "bin ``<=
b``" the left child gets the bins up to ``b`` and the right the rest; the rows whose value is
missing go to whichever side gains more (tried both ways). With ``score(G, H) = sum_k G_k**2 /
(H_k + lambda)`` over the outputs, the split's gain is XGBoost's::

    gain = (score(G_L, H_L) + score(G_R, H_R) - score(G, H)) / 2 - min_split_loss

A split is valid when each child's hessian sum (over the outputs) is positive and at least
``min_child_weight``; the best valid split with a positive gain wins, ties going to the first
column, then the lowest bin, then missing values to the right. The leaf weight is ``-G / (H +
lambda)`` (times the learning rate, applied by the booster).

Only the party that holds the labels runs this: on its own columns' histograms and on the
decrypted histograms of every other party's columns. Sums arrive as exact integers (the
gradients in fixed point), so the encrypted protocol and its plaintext twin compute the same
floats and pick the same splits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Candidate", "SplitRule", "best_split", "leaf_weight", "score"]


@dataclass(frozen=True)
class SplitRule:
    """XGBoost's regularisation: ``reg_lambda`` (L2 on the leaf weights), ``min_child_weight``
    (the least hessian sum of a child) and ``min_split_loss`` (XGBoost's ``gamma``)."""

    reg_lambda: float = 1.0
    min_child_weight: float = 1.0
    min_split_loss: float = 0.0


@dataclass(frozen=True)
class Candidate:
    """A node's best split in one party's columns: its ``gain``, the owner's ``feature``
    (column index) and ``bin`` (rows with codes ``<= bin`` go left), whether missing values go
    left, and the left child's sums (``left_g``, ``left_h``: one per output)."""

    gain: float
    feature: int
    bin: int
    missing_left: bool
    left_g: np.ndarray[Any, Any]
    left_h: np.ndarray[Any, Any]


def score(g: np.ndarray[Any, Any], h: np.ndarray[Any, Any], reg_lambda: float) -> Any:
    """``sum_k g_k**2 / (h_k + lambda)`` over the last axis."""
    return np.sum(g * g / (h + reg_lambda), axis=-1)


def leaf_weight(g: np.ndarray[Any, Any], h: np.ndarray[Any, Any], reg_lambda: float) -> Any:
    """``-g / (h + lambda)``, per output."""
    return -g / (h + reg_lambda)


def best_split(
    hist_g: np.ndarray[Any, Any],
    hist_h: np.ndarray[Any, Any],
    total_g: np.ndarray[Any, Any],
    total_h: np.ndarray[Any, Any],
    rule: SplitRule,
) -> Candidate | None:
    """The best valid split of a node in one party's columns, or None.

    Parameters
    ----------
    hist_g, hist_h : arrays ``(columns, bins + 1, outputs)``
        Sums per column and bin; the last bin holds the missing values.
    total_g, total_h : arrays ``(outputs,)``
        The node's sums (every row of the node, whatever its bins).
    """
    hist_g = np.asarray(hist_g, dtype=np.float64)
    hist_h = np.asarray(hist_h, dtype=np.float64)
    if hist_g.ndim != 3 or hist_g.shape != hist_h.shape or hist_g.shape[1] < 2:
        raise ValueError(f"histograms must be (columns, bins + 1, outputs), got {hist_g.shape}")
    total_g = np.asarray(total_g, dtype=np.float64)
    total_h = np.asarray(total_h, dtype=np.float64)
    # left sums of the present values for "bin <= b", b = 0 .. bins - 2 (the right child keeps
    # at least the last bin); the missing values' sums apart
    cum_g = np.cumsum(hist_g[:, :-2, :], axis=1)
    cum_h = np.cumsum(hist_h[:, :-2, :], axis=1)
    miss_g, miss_h = hist_g[:, -1:, :], hist_h[:, -1:, :]
    parent = score(total_g, total_h, rule.reg_lambda)
    best: Candidate | None = None
    gains = []
    lefts = []
    for missing_left in (False, True):
        left_g = cum_g + miss_g if missing_left else cum_g
        left_h = cum_h + miss_h if missing_left else cum_h
        right_g, right_h = total_g - left_g, total_h - left_h
        lh, rh = left_h.sum(axis=-1), right_h.sum(axis=-1)
        gain = (
            score(left_g, left_h, rule.reg_lambda)
            + score(right_g, right_h, rule.reg_lambda)
            - parent
        ) / 2.0 - rule.min_split_loss
        valid = (lh > 0) & (rh > 0) & (lh >= rule.min_child_weight) & (rh >= rule.min_child_weight)
        gains.append(np.where(valid, gain, -np.inf))
        lefts.append((left_g, left_h))
    stacked = np.stack(gains, axis=-1)  # (columns, bins - 1, 2): missing right, then left
    if stacked.size == 0:
        return None
    flat = int(np.argmax(stacked))
    feature, bin_, side = np.unravel_index(flat, stacked.shape)
    gain = float(stacked[feature, bin_, side])
    if not gain > 0.0:
        return best
    left_g, left_h = lefts[side]
    return Candidate(
        gain=gain,
        feature=int(feature),
        bin=int(bin_),
        missing_left=bool(side),
        left_g=left_g[feature, bin_].copy(),
        left_h=left_h[feature, bin_].copy(),
    )
