"""Pure aggregation kernels: functions of arrays, no network, no model.

Every strategy (:mod:`horizontal.strategies`) combines the clients' updates with these, so
that each kernel is tested once against plain numpy arithmetic. Updates are flat float64
vectors (a model's parameters in :func:`horizontal.model.flatten` order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["clip_to_norm", "l2_norms", "weighted_mean"]

Vector = np.ndarray[Any, Any]


def weighted_mean(vectors: Sequence[Vector] | Vector, weights: Sequence[float]) -> Vector:
    """``sum_k w_k v_k / sum_k w_k`` -- FedAvg's aggregate with ``w_k = n_k``, renormalised
    over the vectors given (a round's clients that replied); ``vectors`` a sequence of flat
    vectors or the matrix of them as rows.

    Raises
    ------
    ValueError
        No vectors, vectors of different lengths, or weights that are negative or sum to 0.
    """
    if not len(vectors):
        raise ValueError("no updates to aggregate")
    if len(vectors) != len(weights):
        raise ValueError(f"{len(vectors)} updates but {len(weights)} weights")
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"weights must be non-negative with a positive sum, got {w.tolist()}")
    stacked = _stack(vectors)
    out: Vector = (w / w.sum()) @ stacked
    return out


def l2_norms(vectors: Sequence[Vector] | Vector) -> Vector:
    """Each vector's L2 norm (one pass, no squared copy of the matrix)."""
    stacked = _stack(vectors)
    out: Vector = np.sqrt(np.einsum("ij,ij->i", stacked, stacked))
    return out


def clip_to_norm(vector: Vector, max_norm: float) -> tuple[Vector, float]:
    """``vector`` scaled down to an L2 norm of at most ``max_norm``, and its norm before."""
    if not max_norm > 0:
        raise ValueError(f"the clipping norm must be positive, got {max_norm!r}")
    norm = float(np.linalg.norm(vector))
    scale = min(1.0, max_norm / norm) if norm > 0 else 1.0
    return vector * scale, norm


def _stack(vectors: Sequence[Vector] | Vector) -> Vector:
    """The vectors as rows of one float64 matrix (a 2-d float64 array is taken as it is)."""
    if isinstance(vectors, np.ndarray) and vectors.ndim == 2 and vectors.dtype == np.float64:
        return vectors
    sizes = {np.shape(v) for v in vectors}
    if len(sizes) != 1 or len(next(iter(sizes))) != 1:
        raise ValueError(f"updates must be flat vectors of one length, got shapes {sorted(sizes)}")
    return np.vstack([np.asarray(v, dtype=np.float64) for v in vectors])
