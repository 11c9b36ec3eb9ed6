"""Robust aggregation kernels: pure functions of the clients' update vectors, no network, no
model.

Each kernel takes the round's updates as flat float64 vectors (a sequence of them, or the
matrix with one client per row, as in :mod:`horizontal.aggregate`) and replaces the plain
mean, so that ``f`` Byzantine clients -- sending anything at all -- move the aggregate by a
bounded amount. The kernels weigh every client the same: weighting by the sample counts
``n_k`` that clients report would let one attacker claim a huge ``n_k``.

==========================  ==========================================================
kernel                      tolerates (breakdown point)
==========================  ==========================================================
:func:`coordinate_median`   ``f < n / 2``: breakdown point 1/2 (per coordinate, each
                            output coordinate lies within the honest clients' range)
:func:`trimmed_mean`        ``f <= floor(beta n)`` per coordinate: breakdown point
                            ``beta`` (Yin et al. 2018)
:func:`krum`                ``n >= 2f + 3``, i.e. ``f < (n - 2) / 2`` (Blanchard et al.
                            2017); it returns one client's update, so it throws away the
                            variance reduction of averaging
:func:`multi_krum`          as Krum; the mean of the ``m <= n - f`` best-scored updates
:func:`norm_bound`          never breaks down but never excludes anyone: whatever ``f``
                            clients send, they move the mean of ``n`` bounded updates by
                            at most ``2 f max_norm / n``
:func:`cosine_filter`       ``f < n / 2`` (its reference direction is the coordinate-wise
                            median); catches direction, not magnitude (see its docstring)
==========================  ==========================================================

The breakdown point is the smallest fraction of Byzantine clients that can move the
aggregate arbitrarily far. Below it the aggregate stays within a distance of the honest
updates that depends on their spread: the guarantees are weaker when honest updates are
themselves far apart (non-IID clients), and none of these kernels tells a Byzantine client
from an honest client whose data are unusual.

**Robust aggregation needs the individual updates, so it cannot run inside secure
aggregation**: a server that only learns the sum cannot take a median, trim, score or filter.
The one defence here that can run with secure aggregation is :func:`norm_bound`, applied by
each client to its own update before masking -- and only on a best-effort basis, since the
clients prove nothing (a malicious client simply skips the bound; enforcing it would need a
zero-knowledge range proof on the masked update).

References: Blanchard, El Mhamdi, Guerraoui, Stainer 2017 (Krum, Multi-Krum); Yin, Chen,
Ramchandran, Bartlett 2018 (coordinate-wise median, trimmed mean); Bagdasaryan et al. 2020
(model replacement); Sun et al. 2019 (norm bounding against backdoors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "RobustAggregation",
    "coordinate_median",
    "cosine_filter",
    "krum",
    "krum_scores",
    "multi_krum",
    "norm_bound",
    "trimmed_mean",
]

Vector = np.ndarray[Any, Any]


def coordinate_median(vectors: Sequence[Vector] | Vector) -> Vector:
    """The coordinate-wise median of the updates (for an even count, the mean of the two
    middle values of each coordinate).

    Raises
    ------
    ValueError
        No vectors, vectors of different lengths, or a non-finite value.
    """
    out: Vector = np.median(_stack(vectors), axis=0)
    return out


def trimmed_mean(vectors: Sequence[Vector] | Vector, beta: float) -> Vector:
    """The coordinate-wise ``beta``-trimmed mean: in each coordinate the ``t = floor(beta n)``
    largest and ``t`` smallest of the ``n`` values are dropped and the rest averaged.

    ``beta = 0`` is the plain mean; ``beta`` must stay below 1/2, since dropping ``beta n``
    values from each end at ``beta >= 1/2`` would leave no value. With ``t = 0`` (``beta n <
    1``) nothing is dropped and nothing is tolerated.

    Raises
    ------
    ValueError
        ``beta`` outside ``[0, 1/2)``, no vectors, vectors of different lengths, or a
        non-finite value.
    """
    if not 0 <= beta < 0.5:
        raise ValueError(
            f"beta must be in [0, 0.5), got {beta!r}: it is the fraction dropped from each "
            "end of every coordinate, so beta >= 0.5 would drop every value"
        )
    stacked = _stack(vectors)
    n = len(stacked)
    t = int(np.floor(beta * n + 1e-9))  # 1e-9: 0.29 * 100 is 28.999999999999996
    kept = np.sort(stacked, axis=0)[t : n - t]
    out: Vector = kept.mean(axis=0)
    return out


def krum_scores(vectors: Sequence[Vector] | Vector, f: int) -> Vector:
    """Each update's Krum score: the sum of its squared L2 distances to its ``n - f - 2``
    nearest other updates (Blanchard et al. 2017).

    Raises
    ------
    ValueError
        ``f`` not a non-negative integer, ``n < 2f + 3``, no vectors, vectors of different
        lengths, or a non-finite value.
    """
    stacked = _stack(vectors)
    n = len(stacked)
    _check_krum(n, f)
    squared = np.empty((n, n))
    for i in range(n):  # row by row: exact for far-apart updates (a Gram matrix is not)
        squared[i] = np.square(stacked - stacked[i]).sum(axis=1)
    np.fill_diagonal(squared, np.inf)  # a vector is not its own neighbour
    nearest = np.sort(squared, axis=1)[:, : n - f - 2]
    out: Vector = nearest.sum(axis=1)
    return out


def krum(vectors: Sequence[Vector] | Vector, f: int) -> Vector:
    """The update with the lowest Krum score (:func:`krum_scores`; the first on a tie), for at
    most ``f`` Byzantine clients among ``n >= 2f + 3``.

    Raises
    ------
    ValueError
        As :func:`krum_scores`.
    """
    stacked = _stack(vectors)
    out: Vector = stacked[int(np.argmin(krum_scores(stacked, f)))].copy()
    return out


def multi_krum(vectors: Sequence[Vector] | Vector, f: int, m: int) -> Vector:
    """The mean of the ``m`` updates with the lowest Krum scores (scored once, ties broken by
    position), for at most ``f`` Byzantine clients among ``n >= 2f + 3``.

    ``m = 1`` is :func:`krum`; ``m = n - f`` averages as many updates as there are honest
    clients. ``m > n - f`` is refused: it would always average in a Byzantine update, however
    badly it scored.

    Raises
    ------
    ValueError
        ``m`` not an integer from 1 to ``n - f``, or as :func:`krum_scores`.
    """
    stacked = _stack(vectors)
    scores = krum_scores(stacked, f)
    n = len(stacked)
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 1 <= m <= n - f:
        raise ValueError(
            f"Multi-Krum averages m updates, m an integer from 1 to n - f = {n - f} "
            f"(n={n}, f={f}), got m={m!r}"
        )
    best = np.argsort(scores, kind="stable")[: int(m)]
    out: Vector = stacked[best].mean(axis=0)
    return out


def norm_bound(vectors: Sequence[Vector] | Vector, max_norm: float) -> Vector:
    """The updates, each scaled down to an L2 norm of at most ``max_norm`` (those within it
    unchanged), as the rows of a new matrix; row ``k`` is
    ``horizontal.aggregate.clip_to_norm(vectors[k], max_norm)[0]``.

    Averaging the bounded updates limits any one client's pull on the mean to ``max_norm /
    n``, which blunts scaled-up model replacement but does not exclude anyone. It is the one
    defence that also runs under secure aggregation, each client bounding its own update
    (see the module docstring).

    Raises
    ------
    ValueError
        ``max_norm`` not positive and finite, no vectors, vectors of different lengths, or a
        non-finite value.
    """
    if not 0 < max_norm < np.inf:
        raise ValueError(f"max_norm must be positive and finite, got {max_norm!r}")
    stacked = _stack(vectors)
    norms = np.linalg.norm(stacked, axis=1)
    with np.errstate(divide="ignore"):
        scale = np.minimum(1.0, max_norm / norms)  # a zero norm gives inf, so 1
    out: Vector = stacked * scale[:, None]
    return out


def cosine_filter(vectors: Sequence[Vector] | Vector, threshold: float) -> tuple[Vector, Vector]:
    """The positions of the updates whose cosine similarity to the coordinate-wise median is
    at least ``threshold``, and the plain mean of those updates.

    A zero update, or a zero median, has no direction: its similarity is taken as 0.

    What it catches: updates that point away from the consensus -- sign-flipped updates, and
    model replacement (Bagdasaryan et al. 2020) whose backdoor update points elsewhere than
    the honest clients' updates. What it misses: anything in the honest direction, however
    large (cosine ignores magnitude: combine it with :func:`norm_bound`); attacks trained to
    stay within the honest clients' angular spread ("constrain-and-scale"); a Byzantine
    majority, which owns the median and so the reference. With non-IID clients the honest
    updates themselves disagree, and a threshold that keeps them all lets more through.

    Raises
    ------
    ValueError
        ``threshold`` outside ``[-1, 1]``, no update passing it, no vectors, vectors of
        different lengths, or a non-finite value.
    """
    if not -1 <= threshold <= 1:
        raise ValueError(f"threshold is a cosine similarity, from -1 to 1; got {threshold!r}")
    stacked = _stack(vectors)
    reference = np.median(stacked, axis=0)
    norms = np.linalg.norm(stacked, axis=1) * np.linalg.norm(reference)
    dots = stacked @ reference
    similarity = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    kept = np.flatnonzero(similarity >= threshold)
    if not len(kept):
        raise ValueError(
            f"no update has a cosine similarity of at least {threshold} to the coordinate-wise "
            f"median (the largest is {similarity.max():.3g}); lower the threshold"
        )
    mean: Vector = stacked[kept].mean(axis=0)
    return kept, mean


def _check_krum(n: int, f: int) -> None:
    if isinstance(f, bool) or not isinstance(f, (int, np.integer)) or f < 0:
        raise ValueError(f"f is the number of Byzantine clients, an integer >= 0; got {f!r}")
    if n < 2 * f + 3:
        fix = f"at least {2 * f + 3} clients for f={f}"
        if n >= 3:
            fix += f", or assume at most f={(n - 3) // 2} Byzantine clients among n={n}"
        raise ValueError(f"Krum needs n >= 2f + 3, got n={n} and f={f}: aggregate {fix}")


def _stack(vectors: Sequence[Vector] | Vector) -> Vector:
    """The vectors as rows of one float64 matrix, as in :mod:`horizontal.aggregate`, refusing
    an empty round and non-finite values (a NaN would pass silently through a median)."""
    if not len(vectors):
        raise ValueError("no updates to aggregate")
    if isinstance(vectors, np.ndarray) and vectors.ndim == 2 and vectors.dtype == np.float64:
        stacked = vectors
    else:
        sizes = {np.shape(v) for v in vectors}
        if len(sizes) != 1 or len(next(iter(sizes))) != 1:
            raise ValueError(
                f"updates must be flat vectors of one length, got shapes {sorted(sizes)}"
            )
        stacked = np.vstack([np.asarray(v, dtype=np.float64) for v in vectors])
    if not np.isfinite(stacked).all():
        rows = np.flatnonzero(~np.isfinite(stacked).all(axis=1)).tolist()
        raise ValueError(f"updates must be finite; NaN or infinity in update(s) {rows}")
    return stacked


@dataclass(frozen=True)
class RobustAggregation:
    """A robust replacement for the server's weighted mean of the round's updates, for
    ``robust_aggregation=`` on :class:`horizontal.FederatedClassifier` (and the regressor).

    Parameters
    ----------
    rule : {"median", "trimmed_mean", "krum", "multi_krum", "norm_bound", "cosine"}
        The kernel (see the module docstring for what each tolerates).
    f : int
        Byzantine clients assumed (Krum, Multi-Krum).
    beta : float
        Fraction trimmed at each end (trimmed mean).
    m : int, optional
        Updates averaged by Multi-Krum (default ``n - f``).
    max_norm : float
        The bound of ``"norm_bound"``; the bounded updates are then averaged with the
        clients' row counts from setup as weights.
    threshold : float
        Cosine similarity an update needs to the coordinate-wise median (``"cosine"``).

    Every rule but ``"norm_bound"`` weighs the clients equally (a client's claimed row count
    would otherwise be a lever); none runs inside secure aggregation.
    """

    rule: str = "median"
    f: int = 1
    beta: float = 0.1
    m: int | None = None
    max_norm: float = 1.0
    threshold: float = 0.0

    RULES = ("median", "trimmed_mean", "krum", "multi_krum", "norm_bound", "cosine")

    def check(self, clients: int | None = None) -> None:
        """The options, and Krum's ``n >= 2f + 3`` for ``clients`` updates a round."""
        if self.rule not in self.RULES:
            raise ValueError(f"rule must be one of {list(self.RULES)}, got {self.rule!r}")
        if self.rule in ("krum", "multi_krum") and clients is not None:
            _check_krum(clients, self.f)
        if self.rule == "norm_bound" and not self.max_norm > 0:
            raise ValueError(f"max_norm must be positive, got {self.max_norm!r}")

    def aggregate(self, deltas: Vector, samples: Sequence[float]) -> Vector:
        """The round's aggregate update from the replies' ``deltas`` (rows)."""
        from horizontal.aggregate import weighted_mean

        if self.rule == "median":
            return coordinate_median(deltas)
        if self.rule == "trimmed_mean":
            return trimmed_mean(deltas, self.beta)
        if self.rule == "krum":
            return krum(deltas, self.f)
        if self.rule == "multi_krum":
            return multi_krum(deltas, self.f, self.m or len(deltas) - self.f)
        if self.rule == "norm_bound":
            return weighted_mean(norm_bound(deltas, self.max_norm), samples)
        return cosine_filter(deltas, self.threshold)[1]
