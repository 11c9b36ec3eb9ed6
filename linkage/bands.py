"""The bands of LSH blocking (:class:`~linkage.blocking.LshBlocking`) as tasks: which bits a
band samples, each record's key in a band, the join of equal keys, the pruning to each
record's best candidates, and where the bands run.

A band's candidates are the pairs whose keys agree (:func:`band_keys`, joined without sorting
the pairs); pairs of identical filters meet in every band and are joined once, on the
whole-filter hash (:func:`filter_hash`). :func:`lsh_join` runs the bands one per task on this
machine's threads, or in groups on the linkage unit's own executor (a Dask client: the
filters, popcounts and hashes scattered once as one :class:`Bands`). With ``keep_best`` each
task scores its pairs and drops those below both records' best-so-far bars, and the caller
prunes the pile to each record's best (``_prune``'s docstring gives why the result is the
same wherever and in whatever order the bands run). :func:`timed_band` is
:meth:`~linkage.blocking.LshBlocking.forecast`'s task.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from linkage.encoding import Encodings
from linkage.executors import (
    Workers,
    check_workers,
    failure_of,
    gather,
    is_executor,
    run_on_executor,
    scatter,
    submit,
    thread_pool,
)

__all__ = [
    "MAX_CANDIDATES",
    "PRUNE_PAIRS",
    "TASKS_PER_SLOT",
    "Bands",
    "band_keys",
    "band_positions",
    "band_runner",
    "filter_hash",
    "join_keys",
    "lsh_join",
    "run_groups",
    "timed_band",
]

MAX_CANDIDATES = 300_000_000
"""Candidate pairs (before removing repeats) beyond which blocking stops with advice."""


TASKS_PER_SLOT = 4
"""Groups of bands per slot of an executor (or thread) that :class:`LshBlocking` runs on: a
group's pairs are pruned with the best scores known when it starts, so several waves let
later groups drop more."""

PRUNE_PAIRS = 4_000_000
"""Scored pairs that :class:`LshBlocking`'s ``keep_best`` lets pile up before cutting each
record's candidates to its best (or as many as are kept, if more)."""


@dataclass(frozen=True, eq=False)
class Bands:
    """What every task of :class:`LshBlocking` reads: both sides' filters, popcounts and
    whole-filter hashes, the band width and ``keep_best`` (scattered once to a cluster)."""

    words_a: np.ndarray[Any, Any]
    words_b: np.ndarray[Any, Any]
    pop_a: np.ndarray[Any, Any]
    pop_b: np.ndarray[Any, Any]
    hash_a: np.ndarray[Any, Any]
    hash_b: np.ndarray[Any, Any]
    r: int
    keep: int | None

    @classmethod
    def of(cls, a: Encodings, b: Encodings, r: int, keep: int | None) -> Bands:
        hashes = filter_hash(a.words), filter_hash(b.words)
        return cls(a.words, b.words, a.popcounts(), b.popcounts(), *hashes, r, keep)


def lsh_join(
    a: Encodings,
    b: Encodings,
    positions: np.ndarray[Any, Any],
    r: int,
    keep: int | None,
    workers: Workers,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """:class:`LshBlocking`'s candidates: the bands at ``positions`` in groups, on
    ``workers``, merged here.

    Filters identical on both sides collide in every band (at 1M x 1M, most true pairs): they
    are joined once, here, on a hash of the whole filter, and left out of every band."""
    from linkage.kernels import dice_of_pairs

    n_a, n_b = len(a), len(b)
    bands = Bands.of(a, b, r, keep)
    same_a, same_b = join_keys([bands.hash_a], [bands.hash_b], n_b)
    executor, slots = band_runner(workers)
    # this process and its threads take a band at a time and prune here; another executor
    # takes a few groups of bands per slot, each pruned on its worker before it comes back
    per_task = 1 if not is_executor(workers) else -(-len(positions) // (slots * TASKS_PER_SLOT))
    groups = [positions[i : i + per_task] for i in range(0, len(positions), per_task)]
    if keep is None:
        found = run_groups(executor, _joined_bands, [(g,) for g in groups], bands)
        if sum(len(f) for f in found) > MAX_CANDIDATES:
            raise ValueError(
                f"blocking would produce over {MAX_CANDIDATES:,} candidate pairs; ask for fewer "
                "(LshBlocking with a higher min_score, or keep_best)"
            )
        flat = _sorted_unique(np.concatenate([same_a.astype(np.int64) * n_b + same_b, *found]))
        return flat // n_b, flat % n_b
    scores = dice_of_pairs(a.words, b.words, bands.pop_a, bands.pop_b, same_a, same_b)
    kept, bar_a, bar_b = _prune([(same_a, same_b, scores)], keep, n_a, n_b)
    failure = "" if executor is None else failure_of(executor, _scored_bands)
    common = () if executor is None else scatter(executor, (bands,))
    in_flight: collections.deque[Any] = collections.deque()
    pending: list[tuple[np.ndarray[Any, Any], ...]] = []
    waiting = 0

    def start(group: np.ndarray[Any, Any]) -> None:
        # the best scores so far, rounded down (a lower bar keeps more: never a wrong drop)
        task = (group, _quantised(bar_a), _quantised(bar_b))
        if executor is None:
            in_flight.append(_done(_scored_bands(*task, bands)))
        else:
            in_flight.append(submit(executor, _scored_bands, task, common))

    queued = collections.deque(groups)
    while queued and len(in_flight) < slots:
        start(queued.popleft())
    while in_flight:
        pending.append(gather([in_flight.popleft()], failure)[0])
        waiting += len(pending[-1][0])
        if queued:
            start(queued.popleft())  # before pruning here, so that the workers stay busy
        if waiting >= max(len(kept[0]), PRUNE_PAIRS):
            kept, bar_a, bar_b = _prune([kept, *pending], keep, n_a, n_b)
            pending.clear()
            waiting = 0
    kept, _, _ = _prune([kept, *pending], keep, n_a, n_b)
    return kept[0], kept[1]


def band_runner(workers: Workers) -> tuple[Any, int]:
    """Where LSH tasks run for a ``workers`` argument, and how many at once: the executor
    given, this machine's thread pool for a count above one, or None (this thread)."""
    slots = check_workers(workers)
    if is_executor(workers):
        return workers, slots
    return (thread_pool(slots) if slots > 1 else None), slots


def _done(value: Any) -> Future[Any]:
    """A future that already holds ``value`` (a task run in this process)."""
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def run_groups(
    executor: Any, step: Callable[..., Any], tasks: list[tuple[Any, ...]], bands: Bands
) -> list[Any]:
    """``[step(*task, bands) for task in tasks]`` in this process (no executor), on this
    machine's threads or on an executor."""
    if executor is None:
        return [step(*task, bands) for task in tasks]
    return run_on_executor(executor, step, tasks, (bands,))


def _quantised(bar: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Best scores in 16 bits, rounded down by a step more than the float product could
    round up (a quarter of the bytes to ship to a worker)."""
    return np.maximum(np.floor(bar * 65535.0) - 1.0, 0.0).astype(np.uint16)


def _joined_bands(positions: np.ndarray[Any, Any], bands: Bands) -> np.ndarray[Any, Any]:
    """A task of :class:`LshBlocking` without ``keep_best``: the pairs colliding in any of
    the bands at ``positions``, identical filters left out, as sorted unique
    ``row_a * n_b + row_b``."""
    n_b = len(bands.words_b)
    ia, ib = join_keys(
        band_keys(bands.words_a, positions, bands.r),
        band_keys(bands.words_b, positions, bands.r),
        n_b,
        skip_equal=(bands.hash_a, bands.hash_b),
    )
    flat: np.ndarray[Any, Any] = ia * n_b + ib
    return flat


def _scored_bands(
    positions: np.ndarray[Any, Any],
    bar_a: np.ndarray[Any, Any],
    bar_b: np.ndarray[Any, Any],
    bands: Bands,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A task of :class:`LshBlocking` with ``keep_best``: the pairs colliding in any of the
    bands at ``positions`` (identical filters left out), scored, and kept when they reach the
    best-so-far ``bar`` (16-bit, :func:`_quantised`) of one of their records:
    ``(ia, ib, scores)``. A single band's pairs come back as they are (unique: each row has
    one key), several bands' cut to each record's ``keep`` best among them (:func:`_prune`,
    every :data:`PRUNE_PAIRS` pairs, raising the bars as it goes).

    A pair below both its records' bars cannot be among the best of either once all bands
    are in, so dropping it early changes nothing."""
    from linkage.kernels import dice_of_pairs

    if bands.keep is None:
        raise ValueError("scored bands are for keep_best: join them with _joined_bands")
    words_a, words_b, hash_a, hash_b = bands.words_a, bands.words_b, bands.hash_a, bands.hash_b
    n_a, n_b, r, keep = len(words_a), len(words_b), bands.r, bands.keep
    bars = (bar_a / 65535.0, bar_b / 65535.0)
    kept = _no_pairs()
    pending: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
    waiting = 0
    for ka, kb in zip(
        band_keys(words_a, positions, r), band_keys(words_b, positions, r), strict=True
    ):
        new_a, new_b = _band_join(ka, kb)
        differ = hash_a[new_a] != hash_b[new_b]
        new_a, new_b = new_a[differ], new_b[differ]
        new_s = dice_of_pairs(words_a, words_b, bands.pop_a, bands.pop_b, new_a, new_b)
        good = (new_s >= bars[0][new_a]) | (new_s >= bars[1][new_b])
        pending.append((new_a[good], new_b[good], new_s[good]))
        waiting += len(pending[-1][0])
        if len(positions) > 1 and waiting >= max(len(kept[0]), PRUNE_PAIRS):
            kept, *raised = _prune([kept, *pending], keep, n_a, n_b)
            bars = (np.maximum(bars[0], raised[0]), np.maximum(bars[1], raised[1]))
            pending.clear()
            waiting = 0
    if len(positions) == 1:
        return pending[0]
    return _prune([kept, *pending], keep, n_a, n_b)[0]


def _no_pairs() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    empty = np.zeros(0, dtype=np.int64)
    return empty, empty, np.zeros(0)


def _prune(
    parts: list[tuple[np.ndarray[Any, Any], ...]], keep: int, n_a: int, n_b: int
) -> tuple[
    tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]],
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
]:
    """The scored pairs of ``parts`` (repeats dropped, sorted by position) cut to those among
    the ``keep`` best of their ``a`` or their ``b`` record, and each record's ``keep``-th best
    score among them (0 with fewer).

    Scores rank with ties broken by position (:func:`~linkage.threshold.top_k_pairs`), a
    total order; distinct Dice scores (ratios of integers below 2,049) differ by more than
    its 32-bit resolution. A pair outside a record's ``keep`` best among some pairs is outside
    them among more, so pruning parts in any grouping and order gives the same pairs."""
    from linkage.threshold import ranks_within

    all_a = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
    all_b = np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False)
    all_s = np.concatenate([p[2] for p in parts])
    # parts come sorted or nearly (each band's pairs by row of A): a stable sort merges runs
    flat = all_a * n_b + all_b
    order = np.argsort(flat, kind="stable")
    flat = flat[order]
    first = order[np.concatenate([[True], flat[1:] != flat[:-1]])]
    all_a, all_b, all_s = all_a[first], all_b[first], all_s[first]
    chosen = np.zeros(len(all_s), dtype=bool)
    bars = []
    for side, n in ((all_a, n_a), (all_b, n_b)):
        ranked, rank = ranks_within(side, all_s)  # the order top_k_pairs ranks by
        chosen[ranked[rank < keep]] = True
        at_k = ranked[rank == keep - 1]  # records with at least keep pairs have one
        bar = np.zeros(n)
        bar[side[at_k]] = all_s[at_k]
        bars.append(bar)
    return (all_a[chosen], all_b[chosen], all_s[chosen]), bars[0], bars[1]


def band_positions(n_bands: int, r: int, n_bytes_total: int, rng: np.random.Generator) -> Any:
    """The bytes each LSH band samples (:class:`LshBlocking`, :class:`BucketBlocking`), for
    ``n_bands`` bands of ``r`` bits from filters of ``n_bytes_total`` bytes.

    ``(bands, ceil(r / 8))`` byte positions: each band samples whole bytes of the filter
    (8 pseudo-random bit positions each, since bits are placed by a keyed hash); bands of one
    round of a random permutation are disjoint, so that bands overlap only by chance."""
    width = (r + 7) // 8
    per_round = n_bytes_total // width
    rounds = -(-n_bands // per_round)
    shuffled = [rng.permutation(n_bytes_total)[: per_round * width] for _ in range(rounds)]
    return np.concatenate(shuffled).reshape(-1, width)[:n_bands]


def band_keys(
    words: np.ndarray[Any, Any], positions: np.ndarray[Any, Any], r: int
) -> Iterator[np.ndarray[Any, Any]]:
    """Per band, ``(n,)`` uint64: the sampled bytes (the last one cut to the band's remaining
    bits) packed into an integer, plus one (0 means no key); one band at a time, so that
    memory does not grow with the number of bands."""
    as_bytes = np.ascontiguousarray(words).view(np.uint8)  # (n, bytes)
    if positions.size > 2 * as_bytes.shape[1]:  # most bytes read more than twice: transpose
        by_byte = np.ascontiguousarray(as_bytes.T)
    else:  # a few bands (a task's): each byte column read in place, strided
        by_byte = as_bytes.T
    last_mask = np.uint64((1 << (r - 8 * (positions.shape[1] - 1))) - 1)
    for band in positions:
        keys = np.ones(len(words), dtype=np.uint64)
        for column, byte in enumerate(band.tolist()):
            part = by_byte[byte].astype(np.uint64)
            if column == len(band) - 1:
                part &= last_mask
            keys += part << np.uint64(8 * column)
        yield keys


def filter_hash(words: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A nonzero 64-bit hash of each whole filter (equal filters, equal hashes)."""
    out = np.zeros(len(words), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(words.shape[1]):
            out ^= words[:, k].astype(np.uint64)
            out *= np.uint64(0x9E3779B97F4A7C15)
            out ^= out >> np.uint64(29)
    hashed: np.ndarray[Any, Any] = out | np.uint64(1)
    return hashed


def join_keys(
    keys_a: Iterable[np.ndarray[Any, Any]],
    keys_b: Iterable[np.ndarray[Any, Any]],
    n_b: int,
    *,
    skip_equal: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Unique ``(row_a, row_b)`` with ``ka[row_a] == kb[row_b]`` for some rows ``ka``, ``kb``
    taken together from ``keys_a`` and ``keys_b`` (one row of keys per band or blocking key,
    arrays or generators; a key of 0 means none), sorted.

    With ``skip_equal=(ha, hb)``, the pairs with ``ha[row_a] == hb[row_b]`` are left out (the
    identical filters, which LSH joins once rather than once per band)."""
    found: list[np.ndarray[Any, Any]] = []
    total = 0
    for ka, kb in zip(keys_a, keys_b, strict=True):
        pair_a, pair_b = _band_join(ka, kb)
        total += len(pair_a)
        if total > MAX_CANDIDATES:
            raise ValueError(
                f"blocking would produce over {MAX_CANDIDATES:,} candidate pairs; ask for fewer "
                "(LshBlocking with a higher min_score, or more specific blocking keys)"
            )
        if skip_equal is not None:
            differ = skip_equal[0][pair_a] != skip_equal[1][pair_b]
            pair_a, pair_b = pair_a[differ], pair_b[differ]
        found.append(pair_a.astype(np.int64) * n_b + pair_b)
    flat = _sorted_unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
    return flat // n_b, flat % n_b


def _sorted_unique(flat: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``np.unique`` of integers by one sort (SIMD) and a comparison of neighbours: NumPy 2's
    own ``np.unique`` took 38 s for 30 million int64 here, this 2. Sorts ``flat`` in place
    (the callers' fresh concatenations: a copy of every collision spared)."""
    flat.sort()
    if len(flat):
        flat = flat[np.concatenate([[True], flat[1:] != flat[:-1]])]
    return flat


def _band_join(
    ka: np.ndarray[Any, Any], kb: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Every ``(row_a, row_b)`` with ``ka[row_a] == kb[row_b] != 0``, unsorted (unique, as
    each row has one key).

    A bitmap of hashed keys first finds the few keys present on both sides; only those are
    sorted and joined."""
    table_bits = max(16, min(26, int(np.ceil(np.log2(8 * (len(ka) + len(kb)))))))
    shift, mixer = np.uint64(64 - table_bits), np.uint64(0x9E3779B97F4A7C15)
    slot_a, slot_b = (ka * mixer) >> shift, (kb * mixer) >> shift
    in_b = np.zeros(1 << table_bits, dtype=bool)
    in_b[slot_b[kb != 0]] = True
    rows_a = np.flatnonzero(in_b[slot_a] & (ka != 0))
    if not len(rows_a):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    in_a = np.zeros(1 << table_bits, dtype=bool)
    in_a[slot_a[rows_a]] = True
    rows_b = np.flatnonzero(in_a[slot_b] & (kb != 0))
    sub_a, sub_b = ka[rows_a], kb[rows_b]
    order_b = np.argsort(sub_b)
    sorted_b = sub_b[order_b]
    lo = np.searchsorted(sorted_b, sub_a, side="left")
    reps = np.searchsorted(sorted_b, sub_a, side="right") - lo
    offsets = np.repeat(lo - np.cumsum(reps) + reps, reps)
    slots = offsets + np.arange(len(offsets))
    return np.repeat(rows_a, reps), rows_b[order_b[slots]]


def timed_band(positions: np.ndarray[Any, Any], bands: Bands) -> tuple[float, int]:
    """A task of :meth:`LshBlocking.forecast`: one band as :func:`lsh_join` runs it (joined,
    or joined and scored against bars of 0), timed on the worker: ``(seconds, collisions)``."""
    started = time.perf_counter()
    if bands.keep is None:
        found = len(_joined_bands(positions, bands))
    else:
        no_bar = (np.zeros(len(bands.words_a), np.uint16), np.zeros(len(bands.words_b), np.uint16))
        found = len(_scored_bands(positions, *no_bar, bands)[0])
    return time.perf_counter() - started, found
