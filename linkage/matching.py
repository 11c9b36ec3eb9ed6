"""Comparing encodings and deciding who is who: Dice similarity, one-to-one matching, quality.

* :func:`dice_pairs` computes the exact Dice coefficient ``2|A & B| / (|A| + |B|)`` of every
  pair that can reach a floor, in memory-bounded chunks: filters are unpacked to 0/1 matrices and
  the intersections of a chunk of A with a slice of B come from one matrix product (BLAS, both
  cores). B is sorted by popcount and each chunk of A compares only with the slice that the
  length filter admits (``Dice >= t`` needs ``2 min(|A|,|B|) / (|A|+|B|) >= t``).
* :func:`match` links one-to-one, greedily by score (as anonlink does) or by an optimal
  assignment, above a threshold that it chooses from the score distribution alone when none
  is given (:func:`auto_threshold`; the value is reported in ``DataFrame.attrs["threshold"]``
  and logged); large inputs are blocked first (:mod:`linkage.blocking`).
* :func:`plot_scores` draws the score histogram with the threshold.
* :func:`evaluate` scores linked pairs against known true pairs.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from linkage.encoding import Encodings

__all__ = [
    "AUTO_BLOCKING_PAIRS",
    "auto_threshold",
    "dice_pairs",
    "dice_scores",
    "evaluate",
    "link",
    "match",
    "plot_scores",
]

logger = logging.getLogger(__name__)

_CHUNK = 2048
PROGRESS_MIN_PAIRS = 500_000_000
"""Comparisons from which :func:`dice_pairs` shows a progress bar (VFLINK_PROGRESS=0 hides it)."""


def dice_pairs(
    a: Encodings, b: Encodings, *, floor: float = 0.0, chunk: int = _CHUNK
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Dice scores of all pairs with ``score >= floor``, and each A record's best score.

    Returns
    -------
    (ia, ib, scores, best)
        Positions in ``a`` and ``b`` and the scores of the kept pairs, and for every record of
        ``a`` its best and second-best score against ``b`` (``best[:, 0]``, ``best[:, 1]``; 0
        where the length filter left no candidate).
    """
    a.check_compatible(b)
    pop_a, pop_b = a.popcounts(), b.popcounts()
    order_b = np.argsort(pop_b, kind="stable")
    sorted_pop_b = pop_b[order_b]
    bits_b = b.bit_matrix()[order_b].astype(np.float32)
    bits_a = a.bit_matrix().astype(np.float32)
    order_a = np.argsort(pop_a, kind="stable")
    out_a, out_b, out_s = [], [], []
    best = np.zeros((len(a), 2))  # best and second-best score of each A record
    starts = range(0, len(a), chunk)
    show = len(a) * len(b) >= PROGRESS_MIN_PAIRS and os.environ.get("VFLINK_PROGRESS", "1") != "0"
    for start in tqdm(starts, desc="comparing encodings", leave=False, disable=not show):
        rows = order_a[start : start + chunk]
        pa = pop_a[rows]
        if floor > 0:
            # the bounds with a little slack: float rounding must not drop a pair at the floor
            lo = np.searchsorted(
                sorted_pop_b, math.ceil(floor * pa.min() / (2 - floor) - 1e-9), side="left"
            )
            hi = np.searchsorted(
                sorted_pop_b, math.floor(pa.max() * (2 - floor) / floor + 1e-9), side="right"
            )
        else:
            lo, hi = 0, len(b)
        if hi <= lo:
            continue
        # float32 is exact for the counts (<= filter length); scores are screened in float32 and
        # the kept ones recomputed exactly in float64
        inter = bits_a[rows] @ bits_b[lo:hi].T
        denom = pa[:, None].astype(np.float32) + sorted_pop_b[None, lo:hi].astype(np.float32)
        approx = np.divide(2.0 * inter, denom, out=inter)  # in place: inter is not needed again
        if approx.shape[1] >= 2:
            best[rows] = np.partition(approx, -2, axis=1)[:, -2:][:, ::-1]
        else:
            best[rows, 0] = approx[:, 0]
        r, c = np.nonzero(
            approx >= np.float32(floor) - np.float32(1e-6) if floor > 0 else approx > 0
        )
        i_a, i_b = rows[r], order_b[lo + c]
        exact = 2.0 * _intersections(a.words, b.words, i_a, i_b) / (pop_a[i_a] + pop_b[i_b])
        keep = exact >= floor
        out_a.append(i_a[keep])
        out_b.append(i_b[keep])
        out_s.append(exact[keep])
    if not out_a:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0), best
    return np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s), best


def _intersections(
    words_a: np.ndarray[Any, Any],
    words_b: np.ndarray[Any, Any],
    ia: np.ndarray[Any, Any],
    ib: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """``|A_i & B_j|`` for the given pairs, exactly, from the packed words."""
    out = np.empty(len(ia), dtype=np.float64)
    for start in range(0, len(ia), 65536):
        stop = start + 65536
        both = words_a[ia[start:stop]] & words_b[ib[start:stop]]
        out[start:stop] = np.bitwise_count(both).sum(axis=1)
    return out


def auto_threshold(best: np.ndarray[Any, Any], second: np.ndarray[Any, Any]) -> float:
    """A match threshold from the scores alone (no ground truth): the one that maximises an
    estimate of F1.

    Each record's best score comes from its partner or, for a record without one, from the most
    similar stranger. The distribution of the best *stranger* score is read off the
    second-best scores of records whose best score is near-certainly their partner's
    (``>= 0.98``); the share of records without a partner is estimated where partners rarely
    score (below the median of that distribution); together they give, for every threshold,
    the expected false links, true links and missed partners, hence an F1 estimate to maximise.
    On the synthetic cohort this lands within 0.01 of the F1 of the best threshold at typo
    rates up to 0.4 (``benchmarks/linkage.py``); with heavier typos and large overlaps it
    errs towards higher thresholds (precision over recall). Falls back to Otsu's threshold on
    the best scores when too few records score near 1.
    """
    best = np.asarray(best, dtype=float)
    second = np.asarray(second, dtype=float)
    if (best > 0).sum() < 10:
        raise ValueError(
            f"only {(best > 0).sum()} records have a candidate: too few to choose a threshold; "
            "pass threshold="
        )
    sure = best >= 0.98
    if sure.sum() < 30:
        return _otsu(best[best > 0])
    strangers = second[sure]
    median = float(np.median(strangers))
    share_unpartnered = float(np.mean(best <= median) / max(np.mean(strangers <= median), 1e-9))
    share_unpartnered = min(max(share_unpartnered, 0.0), 1.0)
    n = len(best)
    grid = np.linspace(0.5, 1.0, 501)
    linked = (best[None, :] >= grid[:, None]).sum(axis=1)
    false_links = share_unpartnered * n * (strangers[None, :] >= grid[:, None]).mean(axis=1)
    true_links = np.clip(linked - false_links, 0, None)
    missed = np.clip((1 - share_unpartnered) * n - true_links, 0, None)
    f1 = 2 * true_links / np.maximum(2 * true_links + false_links + missed, 1e-9)
    return float(grid[int(np.argmax(f1))])


def _otsu(scores: np.ndarray[Any, Any]) -> float:
    hist, edges = np.histogram(scores, bins=200, range=(0.0, 1.0))
    centres = (edges[:-1] + edges[1:]) / 2
    weight = np.cumsum(hist)
    mean = np.cumsum(hist * centres)
    total, total_mean = weight[-1], mean[-1]
    between = np.zeros_like(centres)
    valid = (weight > 0) & (weight < total)
    w0, w1 = weight[valid], total - weight[valid]
    m0, m1 = mean[valid] / w0, (total_mean - mean[valid]) / w1
    between[valid] = w0 * w1 * (m0 - m1) ** 2
    return float(edges[int(np.argmax(between)) + 1])


AUTO_BLOCKING_PAIRS = 50_000_000
"""With ``blocking="auto"``, :func:`match` compares all pairs up to this many (a couple of
seconds here; and while ``b`` unpacked as float32 fits in 1 GiB) and uses
:class:`~linkage.blocking.LshBlocking` beyond."""


def match(
    a: Encodings,
    b: Encodings,
    *,
    threshold: float | None = None,
    floor: float = 0.5,
    blocking: Any = "auto",
    method: str = "greedy",
) -> pd.DataFrame:
    """Link the records of two encodings one-to-one.

    Parameters
    ----------
    a, b : Encodings
        Made with the same schema and secret.
    threshold : float, optional
        Smallest Dice score of a link; chosen from the score distribution when None
        (:func:`auto_threshold`).
    floor : float
        Pairs below this score are never compared in detail (length filter) nor linked.
    blocking : "auto", None, "lsh", "keys", LshBlocking or KeyBlocking
        How candidate pairs are found (:mod:`linkage.blocking`): None compares all pairs
        (exact, with the length filter); ``"auto"`` does so up to
        :data:`AUTO_BLOCKING_PAIRS` pairs and uses LSH beyond.
    method : {"greedy", "optimal"}
        ``"greedy"`` links the best-scoring pair first, then the best among the rest, as
        anonlink does; ``"optimal"`` maximises the total score of the links (an assignment
        problem, solved per connected group of candidate pairs with SciPy).

    Returns
    -------
    pandas.DataFrame
        Columns ``a``, ``b`` (row labels of the two inputs) and ``score``, best first.
        ``result.attrs`` holds ``threshold`` (the one used), ``blocking`` (what found the
        candidates), ``compared`` (pairs scored), ``reduction_ratio`` (share of all pairs not
        compared), ``best_scores`` (each ``a`` record's best score, for
        :func:`plot_scores`), ``ambiguous`` (how many links were ties: their ``a`` or ``b``
        record had another candidate above the threshold with exactly the same score, so
        which one got linked was arbitrary -- typically two identical records on one side)
        and ``ambiguous_links`` (their rows in the result).
    """
    if threshold is not None and not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if method not in ("greedy", "optimal"):
        raise ValueError(f"method must be 'greedy' or 'optimal', got {method!r}")
    a.check_compatible(b)
    low = min(floor, threshold or floor)
    if blocking == "auto":
        # all pairs unpack b into float32 (4 bytes a bit): keep that under 1 GiB too
        small = len(a) * len(b) <= AUTO_BLOCKING_PAIRS and len(b) * b.bits * 4 <= 2**30
        blocking = None if small else "lsh"
    if blocking is None:
        ia, ib, scores, best = dice_pairs(a, b, floor=low)
        compared, how = len(a) * len(b), "all pairs"
    else:
        from linkage.blocking import block

        candidates = block(a, b, blocking)
        scores = dice_scores(a, b, candidates.ia, candidates.ib)
        best = _top_two(candidates.ia, scores, len(a))
        keep = scores >= low
        ia, ib, scores = candidates.ia[keep], candidates.ib[keep], scores[keep]
        compared, how = len(candidates), candidates.method
    if threshold is None:
        threshold = max(auto_threshold(best[:, 0], best[:, 1]), floor)
        logger.info("chose the match threshold %.3f from the score distribution", threshold)
    keep = scores >= threshold
    ia, ib, scores = ia[keep], ib[keep], scores[keep]
    chosen = _greedy(ia, ib, scores) if method == "greedy" else _optimal(ia, ib, scores)
    chosen = chosen[np.lexsort((ib[chosen], ia[chosen], -scores[chosen]))]
    tied = _tied(ia, ib, scores)[chosen]
    result: pd.DataFrame = pd.DataFrame(
        {"a": a.index[ia[chosen]], "b": b.index[ib[chosen]], "score": scores[chosen]},
        columns=["a", "b", "score"],
    )
    result.attrs.update(
        threshold=float(threshold),
        blocking=how,
        compared=int(compared),
        reduction_ratio=1.0 - compared / (len(a) * len(b)),
        best_scores=best[:, 0].copy(),
        ambiguous=int(tied.sum()),
        ambiguous_links=np.flatnonzero(tied),
    )
    return result


def _tied(
    ia: np.ndarray[Any, Any], ib: np.ndarray[Any, Any], scores: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Which candidate pairs (above the threshold) share their exact score with another
    candidate of the same ``a`` or the same ``b`` record: linking one of them was a coin toss
    (two identical records on one side, typically)."""
    pairs = pd.DataFrame({"a": ia, "b": ib, "s": scores})
    tied: np.ndarray[Any, Any] = (
        pairs.duplicated(["a", "s"], keep=False) | pairs.duplicated(["b", "s"], keep=False)
    ).to_numpy()
    return tied


def dice_scores(
    a: Encodings, b: Encodings, ia: np.ndarray[Any, Any], ib: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Exact Dice scores of the pairs ``(a[ia[k]], b[ib[k]])`` (positions), e.g. candidates."""
    a.check_compatible(b)
    pop_a, pop_b = a.popcounts(), b.popcounts()
    denom = (pop_a[ia] + pop_b[ib]).astype(np.float64)
    scores: np.ndarray[Any, Any] = 2.0 * _intersections(a.words, b.words, ia, ib) / denom
    return scores


def _top_two(
    ia: np.ndarray[Any, Any], scores: np.ndarray[Any, Any], n_a: int
) -> np.ndarray[Any, Any]:
    """Each ``a`` record's best and second-best score among the pairs (0 where none)."""
    best = np.zeros((n_a, 2))
    if not len(ia):
        return best
    if np.any(ia[1:] < ia[:-1]):  # blocking returns pairs sorted by ia; others may not be
        order = np.argsort(ia, kind="stable")
        ia, scores = ia[order], scores[order]
    starts = np.flatnonzero(np.concatenate([[True], ia[1:] != ia[:-1]]))
    rows = ia[starts]
    top = np.maximum.reduceat(scores, starts)
    sizes = np.diff(np.append(starts, len(ia)))
    is_top = np.flatnonzero(scores == np.repeat(top, sizes))
    group = np.repeat(np.arange(len(starts)), sizes)[is_top]
    first = is_top[np.concatenate([[True], group[1:] != group[:-1]])]  # one top per group
    rest = scores.copy()
    rest[first] = -np.inf
    second = np.maximum.reduceat(rest, starts)
    best[rows, 0] = top
    best[rows, 1] = np.where(np.isfinite(second), second, 0.0)
    return best


def _greedy(
    ia: np.ndarray[Any, Any], ib: np.ndarray[Any, Any], scores: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Positions of the pairs linked greedily: best score first, ties broken by position."""
    order = np.lexsort((ib, ia, -scores))
    used_a: set[int] = set()
    used_b: set[int] = set()
    chosen = []
    for k, i, j in zip(order.tolist(), ia[order].tolist(), ib[order].tolist(), strict=True):
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            chosen.append(k)
    return np.asarray(chosen, dtype=np.int64)


MAX_ASSIGNMENT_GROUP = 5_000
"""Largest connected group of candidate pairs (records on one side) that ``method="optimal"``
solves exactly; beyond it, raise the threshold."""


def _optimal(
    ia: np.ndarray[Any, Any], ib: np.ndarray[Any, Any], scores: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Positions of the pairs of a maximum-total-score one-to-one assignment, solved per
    connected group of the candidate graph (groups of one pair are taken as they are)."""
    from scipy.optimize import linear_sum_assignment
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if not len(ia):
        return np.zeros(0, dtype=np.int64)
    rows, cols = np.unique(ia, return_inverse=True)[1], np.unique(ib, return_inverse=True)[1]
    n_rows, n_cols = int(rows.max()) + 1, int(cols.max()) + 1
    graph = coo_matrix((np.ones(len(ia)), (rows, n_rows + cols)), shape=(n_rows + n_cols,) * 2)
    _, label = connected_components(graph, directed=False)
    group = label[rows]
    order = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(np.concatenate([[-1], group[order], [-2]])))
    chosen: list[np.ndarray[Any, Any]] = []
    for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        pairs = order[start:stop]
        if len(pairs) == 1:
            chosen.append(pairs)
            continue
        r_ids, r = np.unique(rows[pairs], return_inverse=True)
        c_ids, c = np.unique(cols[pairs], return_inverse=True)
        if max(len(r_ids), len(c_ids)) > MAX_ASSIGNMENT_GROUP:
            raise ValueError(
                f"{len(r_ids)} x {len(c_ids)} records are connected by candidate pairs above "
                "the threshold: too many for method='optimal'; raise the threshold or use "
                "method='greedy'"
            )
        weights = np.zeros((len(r_ids), len(c_ids)))
        slot = np.full((len(r_ids), len(c_ids)), -1, dtype=np.int64)
        weights[r, c] = scores[pairs]
        slot[r, c] = pairs
        got_r, got_c = linear_sum_assignment(weights, maximize=True)
        picked = slot[got_r, got_c]
        chosen.append(picked[picked >= 0])
    return np.concatenate(chosen)


def plot_scores(
    scores: Any, threshold: float | None = None, *, ax: Any = None, bins: int = 100
) -> Any:
    """Histogram of match scores with the threshold marked (needs matplotlib: the ``plot``
    extra).

    ``scores`` is a :func:`match` result (its records' best scores and its threshold are
    used) or any array of scores. Returns the matplotlib Axes.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("plot_scores needs matplotlib: pip install 'vflink[plot]'") from None
    if isinstance(scores, pd.DataFrame):
        if threshold is None:
            threshold = scores.attrs.get("threshold")
        if "best_scores" not in scores.attrs:
            raise ValueError("this frame has no best_scores in attrs: pass match()'s result")
        values = np.asarray(scores.attrs["best_scores"], dtype=float)
    else:
        values = np.asarray(scores, dtype=float).ravel()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(values[values > 0], bins=bins, range=(0.0, 1.0), color="#4477aa")
    ax.set_yscale("log")
    ax.set_xlabel("best Dice score of each record")
    ax.set_ylabel("records")
    if threshold is not None:
        ax.axvline(threshold, color="#cc3311", linestyle="--", label=f"threshold {threshold:.3f}")
        ax.legend()
    return ax


def evaluate(pairs: pd.DataFrame, true_pairs: pd.DataFrame) -> dict[str, float]:
    """Precision, recall and F1 of linked ``pairs`` against ``true_pairs``.

    Both frames' first two columns are the row labels of the two sides (e.g. ``a``/``b`` and
    ``lab``/``imaging``).
    """
    found = set(zip(pairs.iloc[:, 0], pairs.iloc[:, 1], strict=True))
    truth = set(zip(true_pairs.iloc[:, 0], true_pairs.iloc[:, 1], strict=True))
    hits = len(found & truth)
    precision = hits / len(found) if found else 0.0
    recall = hits / len(truth) if truth else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "links": float(len(found))}


def link(
    frame_a: pd.DataFrame,
    frame_b: pd.DataFrame,
    schema: Any,
    *,
    secret: bytes | str,
    threshold: float | None = None,
    blocking: Any = "auto",
    method: str = "greedy",
) -> pd.DataFrame:
    """Encode both frames and :func:`match` them in one call (a simulation of both data holders
    and the linkage unit in one process); the arguments are those of :func:`encode` and
    :func:`match`."""
    from linkage.encoding import encode

    return match(
        encode(frame_a, schema, secret=secret),
        encode(frame_b, schema, secret=secret),
        threshold=threshold,
        blocking=blocking,
        method=method,
    )
