"""Comparing encodings and deciding who is who: Dice similarity, one-to-one matching, quality.

* :func:`dice_pairs` computes the exact Dice coefficient ``2|A & B| / (|A| + |B|)`` of every
  pair that can reach a floor, in memory-bounded chunks: filters are unpacked to 0/1 matrices and
  the intersections of a chunk of A with a slice of B come from one matrix product (BLAS, both
  cores). B is sorted by popcount and each chunk of A compares only with the slice that the
  length filter admits (``Dice >= t`` needs ``2 min(|A|,|B|) / (|A|+|B|) >= t``).
* :func:`match` links one-to-one, greedily by score (as anonlink does), above a threshold that
  it chooses from the score distribution alone when none is given (:func:`auto_threshold`;
  the value is reported in ``DataFrame.attrs["threshold"]`` and logged).
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

__all__ = ["auto_threshold", "dice_pairs", "evaluate", "match"]

logger = logging.getLogger(__name__)

_CHUNK = 2048
PROGRESS_MIN_PAIRS = 500_000_000
"""Comparisons from which :func:`dice_pairs` shows a progress bar (VFLINK_PROGRESS=0 hides it)."""


def _check_compatible(a: Encodings, b: Encodings) -> None:
    if a.fingerprint != b.fingerprint:
        raise ValueError(
            "the two encodings were made with different schemas or secrets (their fingerprints "
            "differ); encode both sides with the same Schema and shared secret"
        )
    if a.bits != b.bits:
        raise ValueError(f"filters of {a.bits} and {b.bits} bits cannot be compared")


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
    _check_compatible(a, b)
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
            lo = np.searchsorted(
                sorted_pop_b, math.ceil(floor * pa.min() / (2 - floor)), side="left"
            )
            hi = np.searchsorted(
                sorted_pop_b, math.floor(pa.max() * (2 - floor) / floor), side="right"
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


def match(
    a: Encodings, b: Encodings, *, threshold: float | None = None, floor: float = 0.5
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

    Returns
    -------
    pandas.DataFrame
        Columns ``a``, ``b`` (row labels of the two inputs) and ``score``, best first; the
        threshold used is in ``result.attrs["threshold"]``.
    """
    if threshold is not None and not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    ia, ib, scores, best = dice_pairs(a, b, floor=min(floor, threshold or floor))
    if threshold is None:
        threshold = max(auto_threshold(best[:, 0], best[:, 1]), floor)
        logger.info("chose the match threshold %.3f from the score distribution", threshold)
    keep = scores >= threshold
    ia, ib, scores = ia[keep], ib[keep], scores[keep]
    order = np.lexsort((ib, ia, -scores))  # best first, ties broken by position
    used_a, used_b = np.zeros(len(a), dtype=bool), np.zeros(len(b), dtype=bool)
    chosen = []
    for k in order.tolist():
        i, j = ia[k], ib[k]
        if not used_a[i] and not used_b[j]:
            used_a[i] = used_b[j] = True
            chosen.append(k)
    result: pd.DataFrame = pd.DataFrame(
        {"a": a.index[ia[chosen]], "b": b.index[ib[chosen]], "score": scores[chosen]},
        columns=["a", "b", "score"],
    )
    result.attrs["threshold"] = float(threshold)
    return result


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
) -> pd.DataFrame:
    """Encode both frames and :func:`match` them in one call (a simulation of both data holders
    and the linkage unit in one process)."""
    from linkage.encoding import encode

    return match(
        encode(frame_a, schema, secret=secret),
        encode(frame_b, schema, secret=secret),
        threshold=threshold,
    )
