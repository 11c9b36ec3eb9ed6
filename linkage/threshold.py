"""Choosing the match threshold from the scores alone, and the greedy one-to-one solver.

**Greedy links are nested.** The greedy solver takes the best-scoring pair, then the best
among the pairs whose records are both still free, and so on; a pair below a threshold ``t``
is only ever considered after every pair above it. So the links made at threshold ``t`` are
exactly the links made at the floor whose score is ``>= t``: one solve at the floor gives the
links of every threshold, and choosing a threshold is choosing how far down that one list of
link scores to go.

**What the list holds.** Each link is either a true pair or a *false link*: two records whose
partners are absent linked to each other because nothing better was left, or a record whose
partner is present but scored below a stranger (a *swap*: typos).
F1 at ``t`` is ``2 TP(t) / (L(t) + M)``: ``L(t)`` links above ``t`` (known), ``TP(t)`` of them
true, ``M`` true pairs in all. :func:`auto_threshold` estimates the false links above every
``t`` by **decoys**: it draws, several times, as many records of each side as it believes
have no partner there (``n_a - M`` and ``n_b - M``), removes the links made at the floor that
clearly beat both their records' other candidates (by 0.05: the near-certain true pairs, so
that the draws hold strangers), and solves greedily among them. Decoy links are false
links made the way real ones are -- by the greedy solver among records without partners, over
the same candidate pairs -- so their scores follow the false links' distribution, including
its dependence on how many records lack partners. Swaps are added from two distributions the
scores show: the best stranger's score (the runner-up of near-certain links) and the partners'
scores (the estimated true links): a partner scoring ``m`` is lost where the best stranger
beats it. ``M`` is the fixed point of
``M = L(t_m) - FP(t_m; n - M)`` at the score ``t_m`` above which fewer than 30 % of the decoy
records find a link: high enough that decoys there are reliable, low enough that few true
pairs score below it. The threshold maximises the estimated F1; the estimated precision,
recall and true-pair count come with it (:class:`ThresholdEstimate`).

Measured (``benchmarks/linkage.py``) against the best threshold chosen with the truth: within
0.002 of its F1 on FEBRL 1-4 and on most cohort settings (typo rates 0.1-0.5, plain, salted and
with BLIP noise; mean gap about 0.001, the largest about 0.006), and within 0.001 at 1M x 1M
with LSH blocking. Where its F1 curve is sharp, an error of a few false links in the estimate
moves the argmax by a couple of hundredths.

**Limits.** The decoys need the near-certain true pairs to be true: where few records have
partners (an overlap of a few percent), the best-scoring stranger pairs (relatives: same
surname, address and birth year) clearly beat everything else too, are taken for true pairs,
and the estimate overstates the true pairs and the precision. A :class:`ThresholdWarning`
flags an estimated precision below :data:`UNRELIABLE_PRECISION`; with a low overlap, choose
the threshold on a labelled sample. The estimate also assumes true pairs rarely score as
low as most false links do (below ``t_m``); where they do (extreme corruption) it
underestimates ``M``, and the estimated recall counts only true pairs that link above the
floor. Draws use a fixed seed and a hash of each encoding, so the same encodings give the
same threshold whatever order they come in (the draws are a statistical estimate, not a
secret).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "TOP_K",
    "ThresholdEstimate",
    "ThresholdWarning",
    "auto_threshold",
    "greedy",
    "ranks_within",
    "top_k_pairs",
]


class ThresholdWarning(UserWarning):
    """The automatic threshold's own estimate says it is unreliable (low precision)."""


TOP_K = 5
"""Candidate pairs kept per record for the greedy solver: a pair is solved when it is among the
``TOP_K`` best of its ``a`` record or of its ``b`` record (as anonlink's top-k candidates)."""

_DRAWS = 12
_DECOY_RECORDS = 20_000
_CLEAR_MARGIN = 0.05
UNRELIABLE_PRECISION = 0.9
"""Below this estimated precision at the chosen threshold, :func:`auto_threshold` warns."""
_RELIABLE_SHARE = 0.3
_GRID = 401


def top_k_pairs(
    ia: np.ndarray[Any, Any], ib: np.ndarray[Any, Any], scores: np.ndarray[Any, Any], k: int
) -> np.ndarray[Any, Any]:
    """Mask of the pairs among the ``k`` best (by score) of their ``a`` record or of their ``b``
    record; scores closer than 2^-32 count as a tie, which the pairs' order breaks (the
    earlier pair ranks first), so the same pairs in the same order always give the same
    mask, whichever other pairs (below both records' ``k``-th best) are among them."""
    keep = np.zeros(len(scores), dtype=bool)
    if not len(scores):
        return keep
    for side in (ia, ib):
        order, rank = ranks_within(side, scores)
        keep[order[rank < k]] = True
    return keep


def ranks_within(
    records: np.ndarray[Any, Any], scores: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """An order of the pairs by record, best score first within each (one stable integer sort
    on the record and the score in 32 bits: ties keep the pairs' order), and each pair's
    place among its record's pairs in that order (0 for the best)."""
    worse = np.floor((1.0 - np.clip(scores, 0.0, 1.0)) * (2**32 - 1)).astype(np.int64)
    order = np.argsort((np.asarray(records, dtype=np.int64) << 32) | worse, kind="stable")
    ordered = records[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    sizes = np.diff(np.append(starts, len(ordered)))
    return order, np.arange(len(ordered)) - np.repeat(starts, sizes)


def greedy(
    ia: np.ndarray[Any, Any], ib: np.ndarray[Any, Any], scores: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Positions of the pairs linked greedily: best score first (ties by ``a``, then ``b``
    position), each record linked at most once.

    Vectorised: a pair that comes first, in that order, among the remaining pairs of both its
    records is taken by the sequential solver too (nothing better can take either record
    first), so each round takes all such pairs at once and drops the pairs of their records;
    the last few thousand pairs are solved one by one.
    """
    order = np.lexsort((ib, ia, -scores))
    a, b = ia[order], ib[order]
    n_a = int(a.max()) + 1 if len(a) else 0
    n_b = int(b.max()) + 1 if len(b) else 0
    chosen: list[np.ndarray[Any, Any]] = []
    alive = np.arange(len(order))
    while len(alive) > 4096:
        pos = np.arange(len(alive))
        first_a = np.full(n_a, -1, dtype=np.int64)
        first_b = np.full(n_b, -1, dtype=np.int64)
        first_a[a[alive][::-1]] = pos[::-1]  # the last write wins: the first occurrence
        first_b[b[alive][::-1]] = pos[::-1]
        take = (first_a[a[alive]] == pos) & (first_b[b[alive]] == pos)
        taken = alive[take]
        chosen.append(taken)
        used_a = np.zeros(n_a, dtype=bool)
        used_b = np.zeros(n_b, dtype=bool)
        used_a[a[taken]] = True
        used_b[b[taken]] = True
        chain = len(taken) < len(alive) // 100  # rounds would go quadratic: finish below
        alive = alive[~(used_a[a[alive]] | used_b[b[alive]])]
        if chain:
            break
    used_a_set: set[int] = set()
    used_b_set: set[int] = set()
    rest = []
    for k, i, j in zip(alive.tolist(), a[alive].tolist(), b[alive].tolist(), strict=True):
        if i not in used_a_set and j not in used_b_set:
            used_a_set.add(i)
            used_b_set.add(j)
            rest.append(k)
    chosen.append(np.asarray(rest, dtype=np.int64))
    picked = np.concatenate(chosen)
    out: np.ndarray[Any, Any] = order[np.sort(picked)]
    return out


def _draw_order(words: np.ndarray[Any, Any] | None, n: int, draw: int) -> np.ndarray[Any, Any]:
    """An order of the records for one decoy draw: a fixed-seed shuffle of the records'
    content hashes (reproducible, and the same whatever order the records come in), or of
    their positions without the words. A statistical estimate: nothing here is secret."""
    rng = np.random.default_rng([draw, n])
    if words is None:
        return rng.permutation(n)
    weights = rng.integers(1, 2**63, size=words.shape[1], dtype=np.uint64) | np.uint64(1)
    with np.errstate(over="ignore"):
        mixed = (np.asarray(words, dtype=np.uint64) * weights).sum(axis=1, dtype=np.uint64)
        mixed ^= mixed >> np.uint64(29)
        mixed *= np.uint64(0xBF58476D1CE4E5B9)
        mixed ^= mixed >> np.uint64(32)
    order: np.ndarray[Any, Any] = np.argsort(mixed, kind="stable")
    return order


@dataclass(frozen=True)
class ThresholdEstimate:
    """The chosen threshold and what the scores alone say about it.

    Attributes
    ----------
    threshold : float
        The score that maximises the estimated F1.
    precision, recall, f1 : float
        Their estimates at ``threshold`` (recall against the estimated true pairs).
    matches : float
        Estimated number of true pairs among the records (``M``).
    grid : numpy.ndarray
        Thresholds considered (from the floor to 1).
    links, false_links : numpy.ndarray
        Links at or above each grid value, and the estimated false ones among them.
    link_scores, decoy_scores : numpy.ndarray
        Scores of the links made at the floor, and of one draw of decoy links (the
        false-link component), for :func:`linkage.plot_scores`.
    """

    threshold: float
    precision: float
    recall: float
    f1: float
    matches: float
    grid: np.ndarray[Any, Any] = field(repr=False)
    links: np.ndarray[Any, Any] = field(repr=False)
    false_links: np.ndarray[Any, Any] = field(repr=False)
    link_scores: np.ndarray[Any, Any] = field(repr=False)
    decoy_scores: np.ndarray[Any, Any] = field(repr=False)

    def summary(self) -> dict[str, float]:
        """The scalar estimates, for ``DataFrame.attrs``."""
        return {
            "threshold": self.threshold,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "matches": self.matches,
        }


def auto_threshold(
    ia: np.ndarray[Any, Any],
    ib: np.ndarray[Any, Any],
    scores: np.ndarray[Any, Any],
    n_a: int,
    n_b: int,
    *,
    floor: float = 0.5,
    k: int | None = TOP_K,
    words_a: np.ndarray[Any, Any] | None = None,
    words_b: np.ndarray[Any, Any] | None = None,
) -> ThresholdEstimate:
    """Choose the threshold that maximises F1 as estimated from the scores alone.

    Parameters
    ----------
    ia, ib, scores : numpy.ndarray
        Candidate pairs (positions into the two sides) and their scores: every pair at or above
        ``floor`` that the comparison kept.
    n_a, n_b : int
        Records on each side.
    floor : float
        Lowest threshold considered.
    k : int or None
        Candidates per record for the greedy solver (:data:`TOP_K`); None when the pairs are
        already each record's best (as :func:`linkage.match` passes them).
    words_a, words_b : numpy.ndarray, optional
        The encodings' packed words: decoy records are then drawn by a hash of their content,
        so that the threshold does not depend on the order in which records arrive (without
        them, by position).

    Raises
    ------
    ValueError
        Fewer than 10 links at the floor: too few to estimate anything; pass ``threshold=``.
    """
    ia, ib, scores = np.asarray(ia), np.asarray(ib), np.asarray(scores, dtype=float)
    keep = scores >= floor
    ia, ib, scores = ia[keep], ib[keep], scores[keep]
    if k is not None:
        keep = top_k_pairs(ia, ib, scores, k)  # as match() solves: each record's k best
        ia, ib, scores = ia[keep], ib[keep], scores[keep]
    per_record = TOP_K if k is None else k
    linked = np.zeros(len(scores), dtype=bool)
    linked[greedy(ia, ib, scores)] = True
    link_scores = np.sort(scores[linked])
    if len(link_scores) < 10:
        raise ValueError(
            f"only {len(link_scores)} records link above the floor {floor}: too few to choose "
            "a threshold from the scores; pass threshold="
        )
    grid = np.linspace(floor, 1.0, _GRID)
    links = len(link_scores) - np.searchsorted(link_scores, grid, side="left")
    # the draws must hold no true pair: a link made at the floor that clearly beats both its
    # records' other candidates (by _CLEAR_MARGIN) is taken as true and left out of them; the
    # others stay in, since where few records have partners they are the false links
    runner_a, runner_b = np.zeros(n_a), np.zeros(n_b)
    np.maximum.at(runner_a, ia[~linked], scores[~linked])
    np.maximum.at(runner_b, ib[~linked], scores[~linked])
    clear = linked & (scores - np.maximum(runner_a[ia], runner_b[ib]) >= _CLEAR_MARGIN)
    s_a, s_b, s_scores = ia[~clear], ib[~clear], scores[~clear]
    # as many draws as it takes for about _DECOY_RECORDS decoy records in all (noise falls as
    # records grow), from 2 to _DRAWS
    free_guess = max(min(n_a, n_b) - int(links[0]), 1)
    n_draws = int(np.clip(np.ceil(_DECOY_RECORDS / free_guess), 2, _DRAWS))
    ranks = []  # each stranger pair's records' places in each draw's order
    for d in range(n_draws):
        rank_a = np.empty(n_a, dtype=np.int64)
        rank_b = np.empty(n_b, dtype=np.int64)
        rank_a[_draw_order(words_a, n_a, d)] = np.arange(n_a)
        rank_b[_draw_order(words_b, n_b, d)] = np.arange(n_b)
        ranks.append((rank_a[s_a], rank_b[s_b]))

    def decoys(matches: float) -> tuple[np.ndarray[Any, Any], int, np.ndarray[Any, Any]]:
        free_a = round(max(n_a - matches, 0))
        free_b = round(max(n_b - matches, 0))
        false = np.zeros(len(grid))
        sample = np.zeros(0)
        for rank_a, rank_b in ranks:
            pairs = np.flatnonzero((rank_a < free_a) & (rank_b < free_b))
            pairs = pairs[top_k_pairs(s_a[pairs], s_b[pairs], s_scores[pairs], per_record)]
            made = s_scores[pairs[greedy(s_a[pairs], s_b[pairs], s_scores[pairs])]]
            made = np.sort(made)
            false += len(made) - np.searchsorted(made, grid, side="left")
            sample = made
        return false / len(ranks), max(min(free_a, free_b), 1), sample

    # each link's runner-up: the best other candidate of its a record (a stranger's score,
    # for a true link)
    runners, linked_scores = runner_a[ia[linked]], scores[linked]

    def swaps(false: np.ndarray[Any, Any], matches: float) -> np.ndarray[Any, Any]:
        """False links of records *with* a partner, which a stranger outscored: for every
        ``t``, the expected number whose best stranger scores ``>= t`` and above the partner
        -- the best stranger's distribution read off the runner-ups of near-certain links,
        the partners' scores off the estimated true links."""
        share = false / np.maximum(links, 1)
        sure = grid[int(np.argmax(share <= 0.01))]
        best_stranger = np.sort(runners[linked_scores >= sure])
        if len(best_stranger) < 30:
            return np.zeros(len(grid))
        below = np.searchsorted(best_stranger, grid, side="left") / len(best_stranger)
        density = np.diff(np.append(below, 1.0))
        partner_lower = np.clip(1 - (links - false) / max(matches, 1.0), 0, 1)
        expected = density * partner_lower * matches
        out: np.ndarray[Any, Any] = np.cumsum(expected[::-1])[::-1]
        return out

    def false_links(matches: float) -> tuple[np.ndarray[Any, Any], int, np.ndarray[Any, Any]]:
        false, free, sample = decoys(matches)
        return false + swaps(false, matches), free, sample

    matches = 0.9 * float(links[0])
    for _ in range(20):
        false, free, _ = false_links(matches)
        level = int(np.argmax(false <= _RELIABLE_SHARE * free))
        updated = float(np.clip(links[level] - false[level], 0, min(n_a, n_b)))
        done = abs(updated - matches) < max(0.5, 1e-4 * matches)
        matches = updated
        if done:
            break
    false, _, sample = false_links(matches)
    true = np.clip(links - false, 0, None)
    matches = max(matches, float(true.max()))  # never fewer true pairs than true links
    f1 = 2 * true / np.maximum(links + matches, 1e-9)
    best = int(np.argmax(f1))
    precision = float(true[best] / max(links[best], 1))
    if f1[best] <= 0 or precision < UNRELIABLE_PRECISION:
        warnings.warn(
            f"the automatic threshold {grid[best]:.3f} has an estimated precision of "
            f"{precision:.2f} (about {matches:.0f} true pairs among {n_a} x {n_b} records): "
            "few records seem to have partners, and the estimate is unreliable there (it takes "
            "pairs that clearly beat every other candidate for true ones); pass threshold= "
            "chosen on a labelled sample, or check the overlap",
            ThresholdWarning,
            stacklevel=3,
        )
    return ThresholdEstimate(
        threshold=float(grid[best]),
        precision=precision,
        recall=float(min(true[best] / max(matches, 1e-9), 1.0)),
        f1=float(f1[best]),
        matches=matches,
        grid=grid,
        links=links,
        false_links=false,
        link_scores=link_scores,
        decoy_scores=sample,
    )
