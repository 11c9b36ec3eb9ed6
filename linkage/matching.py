"""Comparing encodings and deciding who is who: Dice similarity, one-to-one matching, quality.

* :func:`dice_pairs` computes the exact Dice coefficient ``2|A & B| / (|A| + |B|)`` of every
  pair that can reach a floor, in memory-bounded chunks: filters are unpacked to 0/1 matrices and
  the intersections of a chunk of A with a slice of B come from one matrix product (BLAS, both
  cores). B is sorted by popcount and each chunk of A compares only with the slice that the
  length filter admits (``Dice >= t`` needs ``2 min(|A|,|B|) / (|A|+|B|) >= t``).
* :func:`match` links one-to-one, greedily by score (as anonlink does) or by an optimal
  assignment, above a threshold that it chooses from the scores alone when none is given
  (:mod:`linkage.threshold`; the value and its estimated precision and recall are reported in
  ``DataFrame.attrs`` and logged); large inputs are blocked first (:mod:`linkage.blocking`).
* :func:`plot_scores` draws the score histogram with the threshold.
* :func:`evaluate` scores linked pairs against known true pairs.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, overload

import numpy as np
import pandas as pd

from linkage.encoding import Encodings
from linkage.executors import (
    Workers,
    check_workers,
    executor_slots,
    is_executor,
    run_on_executor,
)
from linkage.kernels import dice_all_pairs, dice_of_pairs
from linkage.progress import Stage
from linkage.threshold import TOP_K, auto_threshold, greedy, top_k_pairs

__all__ = [
    "AUTO_BLOCKING_PAIRS",
    "auto_threshold",
    "dice_pairs",
    "dice_scores",
    "evaluate",
    "link",
    "match",
    "optimal_assignment",
    "plot_scores",
    "top_two_scores",
]

logger = logging.getLogger(__name__)

_CHUNK = 2048
PROGRESS_MIN_PAIRS = 500_000_000
"""Comparisons from which :func:`dice_pairs` shows a progress bar (VFLINK_PROGRESS=0 hides it)."""


@overload
def dice_pairs(
    a: Encodings,
    b: Encodings,
    *,
    floor: float = ...,
    chunk: int = ...,
    backend: str = ...,
    workers: Workers = ...,
    top_k: int | None = ...,
    best: Literal[True] = ...,
) -> tuple[
    np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]
]: ...


@overload
def dice_pairs(
    a: Encodings,
    b: Encodings,
    *,
    floor: float = ...,
    chunk: int = ...,
    backend: str = ...,
    workers: Workers = ...,
    top_k: int | None = ...,
    best: bool,
) -> tuple[
    np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any] | None
]: ...


def dice_pairs(
    a: Encodings,
    b: Encodings,
    *,
    floor: float = 0.0,
    chunk: int = _CHUNK,
    backend: str = "auto",
    workers: Workers = None,
    top_k: int | None = None,
    best: bool = True,
) -> tuple[
    np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any] | None
]:
    """Dice scores of all pairs with ``score >= floor``, and each A record's best score.

        Exact (see :mod:`linkage.kernels`): intersections from int8 matrix products when torch is
        installed (``backend="torch"``), else float32 BLAS (``"numpy"``); bounds per group of B
        records of similar popcount skip the division for pairs that can neither reach the floor
        nor be a record's best or second-best.

        ``workers``: the comparison already runs on every core of this machine (torch's and
        BLAS's threads), so a count changes nothing; an executor -- the linkage unit's own Dask
        cluster (``dask.distributed.Client``) or any :class:`concurrent.futures.Executor` --
        compares chunks of A, taken in popcount order, on its workers: B's filters are scattered
        to every Dask worker once (other executors get them with each task), each task unpacks
        them (``bits`` bytes per B record) and returns its pairs. The result is identical to the
        in-process one.

        ``top_k``: only the pairs that can be among the ``top_k`` best of their A or their B
        record come back (a superset from which :func:`~linkage.threshold.top_k_pairs` selects
        exactly what it selects from all pairs; see :func:`~linkage.kernels.dice_all_pairs`):
    :func:`match`'s greedy solver needs no more, and sorting every pair above a low floor
        cost more than comparing them.

        ``best=False``: only the pairs, as anonlink's candidate generation returns them; from a
        floor of 0.7 the NumPy backend then screens the pairs with a product of the most
        frequent half of the bits first (:data:`~linkage.kernels.SCREEN_FLOOR`), which more than
        doubles its speed at 0.8 (``benchmarks/linkage.py``). The pairs are the same.

        Returns
        -------
        (ia, ib, scores, best)
            Positions in ``a`` and ``b`` and the scores of the kept pairs (``> 0`` when the floor
            is 0), ordered by ``ia`` then ``ib``, and for every record of ``a`` its best and
            second-best score against ``b`` (``best[:, 0]``, ``best[:, 1]``; 0 where the length
            filter left no candidate), or None with ``best=False``.
    """
    a.check_compatible(b)
    if is_executor(workers):
        ia, ib, scores, tops = _dice_pairs_on(
            workers, a.words, b.words, floor, chunk, backend, top_k, best
        )
    else:
        check_workers(workers)  # a bad argument is named even where it changes nothing
        show = len(a) * len(b) >= PROGRESS_MIN_PAIRS

        def progress(starts: Any) -> Any:  # counts the rows of A compared
            return _rows_compared(starts, len(a), chunk, show)

        ia, ib, scores, tops = dice_all_pairs(
            a.words,
            b.words,
            floor=floor,
            chunk=chunk,
            backend=backend,
            progress=progress,
            top_k=top_k,
            best=best,
        )
    order = np.argsort(ia.astype(np.int64) << 32 | ib, kind="stable")  # however the work was cut
    return ia[order], ib[order], scores[order], tops


def _rows_compared(starts: Any, rows: int, chunk: int, show: bool) -> Any:
    """``starts`` (of chunks of ``chunk`` rows of A), counting the rows compared in a labelled
    stage (:mod:`linkage.progress`) when ``show``."""
    with Stage("comparing encodings, rows", total=rows, show=show) as compared:
        for start in starts:
            yield start
            compared.advance(min(chunk, rows - start))


def _dice_pairs_on(
    executor: Any,
    words_a: np.ndarray[Any, Any],
    words_b: np.ndarray[Any, Any],
    floor: float,
    chunk: int,
    backend: str,
    top_k: int | None = None,
    best: bool = True,
) -> tuple[
    np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any] | None
]:
    """:func:`dice_all_pairs` on ``executor``: A cut in popcount order into a few tasks per
    worker, each a whole number of ``chunk`` records, so that every task compares exactly the
    blocks the in-process kernel would (each A record's pairs and best scores depend only on
    its own block). Each task also sorts its pairs by A's and B's positions, on its worker:
    the caller's final sort then merges a few sorted runs instead of sorting tens of millions
    of pairs alone (16 million at 20,000 x 20,000: 2.3 -> 0.5 s)."""
    if not 0 <= floor <= 1:
        raise ValueError(f"floor must be in [0, 1], got {floor}")
    if chunk < 1:
        raise ValueError(f"chunk must be positive, got {chunk}")
    n_a = len(words_a)
    order_a = np.argsort(np.bitwise_count(words_a).sum(axis=1), kind="stable")
    per_task = -(-n_a // (4 * executor_slots(executor)))
    per_task = max(chunk, -(-per_task // chunk) * chunk)
    cuts = [order_a[i : i + per_task] for i in range(0, n_a, per_task)]
    tasks = [(words_a[rows], rows, floor, chunk, backend, top_k, best) for rows in cuts]
    results = run_on_executor(executor, _dice_task, tasks, shared=(words_b,))
    tops = np.zeros((n_a, 2))
    out_a, out_b, out_s = [], [], []
    for rows, (ia, ib, scores, top) in zip(cuts, results, strict=True):
        out_a.append(ia)
        out_b.append(ib)
        out_s.append(scores)
        if top is not None:
            tops[rows] = top
    if not out_a:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0), tops if best else None
    ia, ib, scores = np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s)
    return ia, ib, scores, tops if best else None


def _dice_task(
    words_a: np.ndarray[Any, Any],
    rows: np.ndarray[Any, Any],
    floor: float,
    chunk: int,
    backend: str,
    top_k: int | None,
    best: bool,
    words_b: np.ndarray[Any, Any],
) -> tuple[
    np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any] | None
]:
    """One task of :func:`_dice_pairs_on` (on a worker): its A records (at positions
    ``rows`` of A) against all of B, the pairs in A's positions and sorted by them and B's."""
    ia, ib, scores, tops = dice_all_pairs(
        words_a, words_b, floor=floor, chunk=chunk, backend=backend, top_k=top_k, best=best
    )
    ia = rows[ia]
    order = np.argsort(ia.astype(np.int64) << 32 | ib, kind="stable")
    return ia[order], ib[order], scores[order], tops


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
    workers: Workers = None,
) -> pd.DataFrame:
    """Link the records of two encodings one-to-one.

    Parameters
    ----------
    a, b : Encodings
        Made with the same schema and secret.
    threshold : float, optional
        Smallest Dice score of a link; when None, the one that maximises F1 as estimated from
        the scores alone (:func:`linkage.threshold.auto_threshold`), at or above ``floor``.
    floor : float
        Pairs below this score are never compared in detail (length filter) nor linked.
    blocking : "auto", None, "lsh", "keys", LshBlocking or KeyBlocking
        How candidate pairs are found (:mod:`linkage.blocking`): None compares all pairs
        (exact, with the length filter); ``"auto"`` does so up to
        :data:`AUTO_BLOCKING_PAIRS` pairs and uses LSH beyond.
    method : {"greedy", "optimal"}
        ``"greedy"`` links the best-scoring pair first, then the best among the rest, as
        anonlink does, among each record's :data:`~linkage.threshold.TOP_K` best candidates;
        ``"optimal"`` maximises the total score of the links (an assignment
        problem, solved per connected group of candidate pairs with SciPy).
    workers : executor, optional
        Where an all-pairs comparison runs (:func:`dice_pairs`): the linkage unit's own
        Dask client or any :class:`concurrent.futures.Executor` spreads it over a cluster
        (with ``blocking=None``, comparing millions of records exhaustively, without
        blocking's loss of recall, becomes a cluster's work); the links are identical. With
        LSH blocking, where its bands run (:func:`~linkage.blocking.block`: this machine's
        threads by default, or the executor; the candidates are identical). Scoring the
        candidate pairs stays in this process: a gather and a popcount per pair (2.6 million
        pairs in 0.2 s on one core, 200,000 x 200,000 records with LSH), cheaper than
        shipping each pair's two filters to a worker.

    Returns
    -------
    pandas.DataFrame
        Columns ``a``, ``b`` (row labels of the two inputs) and ``score``, best first.
        ``result.attrs`` holds ``threshold`` (the one used), ``blocking`` (what found the
        candidates), ``compared`` (pairs scored), ``reduction_ratio`` (share of all pairs not
        compared), ``best_scores`` (each ``a`` record's best score, for
        :func:`plot_scores`), ``ambiguous`` (how many links were ties: their ``a`` or ``b``
        record had another candidate above the threshold with exactly the same score, so
        which one got linked was arbitrary -- typically two identical records on one side),
        ``ambiguous_links`` (their rows in the result) and ``invalid_values`` (per side,
        the rows per column whose date or number did not parse: ``Field.on_invalid``).
        With an automatic threshold, also ``estimated`` (the estimated ``precision``,
        ``recall``, ``f1`` and number of true pairs ``matches`` at the chosen threshold) and
        ``estimate`` (the :class:`~linkage.threshold.ThresholdEstimate`, which
        :func:`plot_scores` draws).
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
        # the greedy solver looks at each record's TOP_K best candidates only
        top_k = TOP_K if method == "greedy" else None
        ia, ib, scores, best = dice_pairs(a, b, floor=low, workers=workers, top_k=top_k)
        compared, how = len(a) * len(b), "all pairs"
    else:
        from linkage.blocking import block

        candidates = block(a, b, blocking, workers=workers)
        scores = dice_scores(a, b, candidates.ia, candidates.ib)
        best = top_two_scores(candidates.ia, scores, len(a))
        keep = scores >= low
        ia, ib, scores = candidates.ia[keep], candidates.ib[keep], scores[keep]
        compared, how = len(candidates), candidates.method
    if method == "greedy":
        # each record's best candidates, chosen at the floor: the links at any threshold are
        # then exactly the floor's links above it, which the automatic threshold relies on
        keep = top_k_pairs(ia, ib, scores, TOP_K)
        ia, ib, scores = ia[keep], ib[keep], scores[keep]
    estimate = None
    if threshold is None:
        estimate = auto_threshold(
            ia,
            ib,
            scores,
            len(a),
            len(b),
            floor=low,
            k=None if method == "greedy" else TOP_K,
            words_a=a.words,
            words_b=b.words,
        )
        threshold = estimate.threshold
        logger.info(
            "chose the match threshold %.3f from the scores (estimated precision %.4f, "
            "recall %.4f)",
            threshold,
            estimate.precision,
            estimate.recall,
        )
    keep = scores >= threshold
    ia, ib, scores = ia[keep], ib[keep], scores[keep]
    chosen = greedy(ia, ib, scores) if method == "greedy" else optimal_assignment(ia, ib, scores)
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
        invalid_values={"a": dict(a.invalid), "b": dict(b.invalid)},
        estimate=estimate,
        **({} if estimate is None else {"estimated": estimate.summary()}),
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
    scores: np.ndarray[Any, Any] = dice_of_pairs(
        a.words, b.words, a.popcounts(), b.popcounts(), ia, ib
    )
    return scores


def top_two_scores(
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


MAX_ASSIGNMENT_GROUP = 5_000
"""Largest connected group of candidate pairs (records on one side) that ``method="optimal"``
solves exactly; beyond it, raise the threshold."""


def optimal_assignment(
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

    ``scores`` is a :func:`match` result or any array of scores. For a result with an
    automatic threshold it draws the scores of the links made at the floor with the two
    components the threshold was chosen from: the estimated false links (decoys, scaled to
    their estimated number) and the rest, the estimated true links; otherwise each ``a``
    record's best score. Returns the matplotlib Axes.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("plot_scores needs matplotlib: pip install 'vflink[plot]'") from None
    estimate = None
    if isinstance(scores, pd.DataFrame):
        if threshold is None:
            threshold = scores.attrs.get("threshold")
        estimate = scores.attrs.get("estimate")
        if estimate is None and "best_scores" not in scores.attrs:
            raise ValueError("this frame has no best_scores in attrs: pass match()'s result")
        values = (
            estimate.link_scores
            if estimate is not None
            else np.asarray(scores.attrs["best_scores"], dtype=float)
        )
    else:
        values = np.asarray(scores, dtype=float).ravel()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    edges = np.linspace(0.0, 1.0, bins + 1)
    if estimate is not None:
        linked, _ = np.histogram(values, bins=edges)
        decoys, _ = np.histogram(estimate.decoy_scores, bins=edges)
        scale = estimate.false_links[0] / max(len(estimate.decoy_scores), 1)
        false = np.minimum(decoys * scale, linked)
        centres, width = (edges[:-1] + edges[1:]) / 2, edges[1] - edges[0]
        ax.bar(centres, false, width=width, color="#ee7733", label="estimated false links")
        ax.bar(
            centres,
            linked - false,
            width=width,
            bottom=false,
            color="#4477aa",
            label="estimated true links",
        )
        ax.set_xlabel("score of each link made at the floor")
    else:
        ax.hist(values[values > 0], bins=edges, color="#4477aa")
        ax.set_xlabel("best Dice score of each record")
    ax.set_yscale("log")
    ax.set_ylabel("records")
    if threshold is not None:
        ax.axvline(threshold, color="#cc3311", linestyle="--", label=f"threshold {threshold:.3f}")
    if threshold is not None or estimate is not None:
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
    workers: Workers = None,
) -> pd.DataFrame:
    """Encode both frames and :func:`match` them in one call (a simulation of both data holders
    and the linkage unit in one process); the arguments are those of :func:`encode` and
    :func:`match` (``workers`` goes to both: encoding in this process by default)."""
    from linkage.encoding import encode

    return match(
        encode(frame_a, schema, secret=secret, workers=1 if workers is None else workers),
        encode(frame_b, schema, secret=secret, workers=1 if workers is None else workers),
        threshold=threshold,
        blocking=blocking,
        method=method,
        workers=workers if is_executor(workers) else None,
    )
