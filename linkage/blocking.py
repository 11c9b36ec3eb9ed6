"""Candidate pairs without comparing all pairs: Hamming LSH over the encodings, or keyed
blocking keys.

* :class:`LshBlocking` -- bit-sampling LSH for the Hamming distance (Indyk and Motwani 1998) on
  the Bloom filters: each of ``bands`` bands samples ``band_bits`` bit positions, and two
  records whose bits agree on every position of some band become candidates. A pair whose
  filters agree on a share ``s`` of their bits is found with probability
  ``1 - (1 - s**band_bits)**bands``. The parameters are stated in terms of the goal,
  ``target_recall`` at Dice ``min_score``; :meth:`LshBlocking.plan` turns that into
  ``band_bits`` and ``bands``, choosing the band width that minimises the expected time under a
  model fitted to the encodings themselves. The bands run on this machine's threads or on the
  linkage unit's own executor (a Dask cluster), with the same candidates either way, and
  :meth:`LshBlocking.forecast` plans a link too large to try (10M x 10M) from per-band rates
  measured on that executor.
* :class:`KeyBlocking` -- records that share the keyed hash of any of the schema's blocking keys
  (e.g. Soundex of the surname with the year of birth) become candidates. Fast and
  predictable, but a typo in a key's parts loses the pair, and the linkage unit learns which
  records share a key.

:func:`block` returns :class:`Candidates`, which reports the reduction ratio (the share of all
pairs never compared) and, given the truth, the pair completeness (the share of true pairs
among the candidates).
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

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
    "BucketBlocking",
    "Candidates",
    "KeyBlocking",
    "LshBlocking",
    "band_keys",
    "band_positions",
    "block",
    "join_keys",
]

logger = logging.getLogger(__name__)

MAX_CANDIDATES = 300_000_000
"""Candidate pairs (before removing repeats) beyond which blocking stops with advice."""


@dataclass(frozen=True, eq=False)
class Candidates:
    """Candidate pairs, as positions into the two encodings (unique, sorted by ``ia``, ``ib``)."""

    ia: np.ndarray[Any, Any]
    ib: np.ndarray[Any, Any]
    n_a: int
    n_b: int
    method: str

    def __len__(self) -> int:
        return len(self.ia)

    @property
    def reduction_ratio(self) -> float:
        """The share of all ``n_a * n_b`` pairs that blocking spared from comparison."""
        return 1.0 - len(self) / max(self.n_a * self.n_b, 1)

    def pair_completeness(self, a: Encodings, b: Encodings, true_pairs: pd.DataFrame) -> float:
        """The share of ``true_pairs`` (row labels of ``a`` and ``b`` in its first two columns)
        that are candidates."""
        pos_a = a.index.get_indexer(pd.Index(true_pairs.iloc[:, 0]))
        pos_b = b.index.get_indexer(pd.Index(true_pairs.iloc[:, 1]))
        known = (pos_a >= 0) & (pos_b >= 0)
        if not known.any():
            raise ValueError("none of the true pairs' labels are in the two encodings")
        wanted = pos_a[known].astype(np.int64) * self.n_b + pos_b[known]
        have = self.ia.astype(np.int64) * self.n_b + self.ib
        return float(np.isin(wanted, have).sum() / len(true_pairs))


@dataclass(frozen=True)
class LshBlocking:
    """Hamming LSH by byte sampling (see the module docstring).

    Each band samples whole bytes of the filters (8 bit positions each; positions are keyed
    hashes, so the bits of a byte are as good as 8 random positions), ``band_bits`` bits in
    all; two records sharing all of a band's bits become candidates.

    Parameters
    ----------
    target_recall : float
        Wanted probability that a pair with Dice exactly ``min_score`` becomes a candidate, for
        records with the median number of set bits. Pairs that score higher are found more
        often (the plan reports the recall at 0.85, 0.9 and 0.95 too); on the synthetic cohort,
        whose typo'd pairs mostly score 0.85-0.95, the defaults keep over 99 % of all true pairs
        (``benchmarks/linkage.py`` prints the pair completeness).
    min_score : float
        The Dice score that ``target_recall`` is stated at; keep it at or below the match
        threshold you expect.
    band_bits, bands : int, optional
        Set both to override the plan.
    random_state : int, optional
        Which bytes the bands sample (not a secret: any choice works); fresh from the OS when
        None.
    keep_best : int, optional
        Keep only each record's ``keep_best`` best candidates (exact Dice; a pair stays when it
        is among the best of either of its records), pruning whenever as many new pairs as
        kept ones (at least :data:`PRUNE_PAIRS`) have piled up: memory then stays near a few
        times ``keep_best * (n_a + n_b)`` pairs however many bands there are,
        so that large inputs can afford the many bands a high pair completeness needs. The
        greedy solver only looks at each record's 5 best candidates anyway.
    """

    target_recall: float = 0.9
    min_score: float = 0.8
    band_bits: int | None = None
    bands: int | None = None
    random_state: int | None = None
    keep_best: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.target_recall < 1:
            raise ValueError(f"target_recall must be in (0, 1), got {self.target_recall}")
        if not 0 < self.min_score < 1:
            raise ValueError(f"min_score must be in (0, 1), got {self.min_score}")
        if (self.band_bits is None) != (self.bands is None):
            raise ValueError("set both band_bits and bands, or neither")
        if self.band_bits is not None and not 1 <= self.band_bits <= 56:
            raise ValueError(f"band_bits must be 1..56, got {self.band_bits}")
        if self.bands is not None and not 1 <= self.bands <= 10_000:
            raise ValueError(f"bands must be 1..10000, got {self.bands}")
        if self.keep_best is not None and not 1 <= self.keep_best <= 1000:
            raise ValueError(f"keep_best must be 1..1000, got {self.keep_best}")

    def plan(
        self,
        a: Encodings,
        b: Encodings,
        rows: tuple[int, int] | None = None,
        *,
        rates: tuple[float, float] = (22e-9, 70e-9),
        max_band_pairs: float | None = None,
    ) -> dict[str, Any]:
        """``band_bits`` and ``bands`` for these encodings, with what the model expects:
        ``recall`` at ``min_score`` (and ``recall_at`` higher scores) and ``chance_pairs``,
        the chance collisions counted once per band they occur in. With ``rows=(n_a, n_b)``,
        for inputs of that size drawn like these (``a`` and ``b`` a sample of them).

        The band width minimises the expected time: ``rates`` seconds per record and band for
        the keys and per chance collision (by default 22 and 70 ns, measured here;
        :meth:`forecast` measures them on the executor), with the chance collisions of a band
        of ``r`` bits estimated as ``E[agreement ** r]`` over 20,000 random pairs, so that
        similar non-matches (same sex, same birth year) are counted; among the widths whose
        bands collide at most ``max_band_pairs`` times (a task's memory), if any."""
        length = a.bits
        typical = float(np.median(np.concatenate([a.popcounts(), b.popcounts()])))

        def agreement(score: float) -> float:
            return max(1.0 - 2.0 * typical * (1.0 - score) / length, 1e-6)

        rng = np.random.default_rng(self.random_state)
        pick_a = rng.integers(0, len(a), 20_000)
        pick_b = rng.integers(0, len(b), 20_000)
        differ = np.bitwise_count(a.words[pick_a] ^ b.words[pick_b]).sum(axis=1)
        agree_random = 1.0 - differ / length
        n_a, n_b = rows if rows is not None else (len(a), len(b))
        pairs = n_a * n_b
        target = agreement(self.min_score)

        def bands_for(r: int) -> int:
            hit = target**r
            return max(1, math.ceil(math.log(1 - self.target_recall) / math.log1p(-hit)))

        def chance(r: int, n_bands: int) -> float:
            return n_bands * pairs * float(np.mean(agree_random**r))

        if self.band_bits is not None and self.bands is not None:
            r, n_bands = self.band_bits, self.bands
        else:
            widths = range(8, min(57, length // 2))
            fits = [r for r in widths if max_band_pairs is None or chance(r, 1) <= max_band_pairs]
            r = min(
                fits or [widths[-1]],
                key=lambda r: (
                    bands_for(r) * (n_a + n_b) * rates[0] + chance(r, bands_for(r)) * rates[1]
                ),
            )
            n_bands = bands_for(r)

        def recall(score: float) -> float:
            return float(1.0 - (1.0 - agreement(score) ** r) ** n_bands)

        return {
            "band_bits": r,
            "bands": n_bands,
            "recall": recall(self.min_score),
            "recall_at": {score: recall(score) for score in (0.85, 0.9, 0.95)},
            "chance_pairs": chance(r, n_bands),
            "chance_per_band": chance(r, 1),
        }

    def candidates(self, a: Encodings, b: Encodings, workers: Workers = None) -> Candidates:
        """Candidate pairs of ``a`` and ``b``.

        ``workers`` is where the bands are joined (and, with ``keep_best``, scored): a count
        of this machine's threads (None: every core; NumPy's sorts, gathers and popcounts
        release the interpreter lock, so bands run side by side on shared arrays), or the
        linkage unit's own executor (a ``dask.distributed.Client``: the filters are scattered
        to its workers once, and each task joins a group of bands). The candidates are the
        same wherever they run: without ``keep_best`` the union of every band's collisions,
        with it each record's ``keep_best`` best of them (ties broken by position), which no
        order of pruning changes (:func:`_prune`)."""
        plan = self.plan(a, b)
        r, n_bands = int(plan["band_bits"]), int(plan["bands"])
        logger.info(
            "LSH blocking: %d bands of %d bits (recall %.4f at Dice %.2f; ~%.0f chance pairs)",
            n_bands,
            r,
            plan["recall"],
            self.min_score,
            plan["chance_pairs"],
        )
        rng = np.random.default_rng(self.random_state)
        positions = band_positions(n_bands, r, a.bits // 8, rng)
        ia, ib = _lsh_join(a, b, positions, r, self.keep_best, workers)
        return Candidates(ia, ib, len(a), len(b), f"lsh({n_bands}x{r})")

    def forecast(
        self,
        a: Encodings,
        b: Encodings,
        rows: tuple[int, int],
        *,
        workers: Workers = None,
        sample_bands: int = 4,
        worker_memory: float = 8 * 2**30,
    ) -> dict[str, Any]:
        """Plan a link of ``rows = (n_a, n_b)`` records from rates measured on a sample of
        them (``a`` and ``b``, e.g. 1M of a 10M x 10M link), on ``workers`` (the executor the
        link will run on, or this machine's threads).

        A band's cost is a part per record (its keys: both sides' bytes read and hashed)
        and a part per collision (joined and, with ``keep_best``, scored). Both are measured:
        ``sample_bands`` bands of :meth:`plan`'s width run as real tasks on ``workers``, on
        the sample and on half of each side (a quarter of the pairs, half the records), and a
        least-squares fit of their in-task seconds against records and collisions gives the
        two rates. The measured collisions, scaled by ``n_a * n_b``, calibrate the plan's
        model of chance collisions. Unless ``band_bits`` and ``bands`` are set, the plan is
        then made again at the full size with the measured rates, among the widths whose
        band fits a task in ``worker_memory`` (both sides' filters and 40 bytes a collision).

        Returns
        -------
        dict
            :meth:`plan`'s keys at the full size, and ``seconds_per_record``,
            ``seconds_per_collision`` (the fitted rates), ``collisions_per_band`` (at the full
            size), ``band_seconds`` (one band's task there), ``slots`` (tasks at once),
            ``seconds`` (every band, spread over the slots), ``worker_bytes`` (what a task
            holds: the filters and one band's pairs), ``caller_bytes`` (the candidates the
            caller merges: ``keep_best`` per record, or every collision) and ``measured``
            (the sample's ``(records, collisions, seconds)`` per task).

        Not counted: shipping the filters to the workers, and the caller's merges of the
        tasks' results (with ``keep_best``, a sort of the kept pairs now and then).
        """
        if not 1 <= sample_bands <= 64:
            raise ValueError(f"sample_bands must be 1..64, got {sample_bands}")
        n_a, n_b = rows
        if not len(a) or not len(b):
            raise ValueError(
                "the forecast's samples are empty: give it some of each side's records"
            )
        if n_a < len(a) or n_b < len(b):
            raise ValueError(
                f"rows={rows} must be at least the sample's size ({len(a)} x {len(b)}): a "
                "forecast scales a sample up"
            )
        first = self.plan(a, b, rows=rows)
        r = int(first["band_bits"])
        rng = np.random.default_rng(self.random_state)  # the link's own first bands
        positions = band_positions(sample_bands, r, a.bits // 8, rng)
        executor, slots = _band_runner(workers)
        measured = []
        for cut_a, cut_b in ((len(a), len(b)), (max(len(a) // 2, 1), max(len(b) // 2, 1))):
            part_a = Encodings(a.index[:cut_a], a.words[:cut_a], a.fingerprint)
            part_b = Encodings(b.index[:cut_b], b.words[:cut_b], b.fingerprint)
            bands = _Bands.of(part_a, part_b, r, self.keep_best)
            tasks = [(positions[k : k + 1],) for k in range(sample_bands)]
            for seconds, collisions in _run_groups(executor, _timed_band, tasks, bands):
                measured.append((cut_a + cut_b, collisions, seconds))
        x = np.array([[m[0], m[1]] for m in measured], dtype=float)
        y = np.array([m[2] for m in measured])
        (per_record, per_collision), *_ = np.linalg.lstsq(x, y, rcond=None)
        per_record, per_collision = max(float(per_record), 0.0), max(float(per_collision), 0.0)
        sample_collisions = float(np.mean([m[1] for m in measured[:sample_bands]]))
        scaled = sample_collisions * (n_a * n_b) / (len(a) * len(b))
        calibration = scaled / max(float(first["chance_per_band"]), 1e-9)
        filters = (n_a + n_b) * a.bits / 8
        plan = self.plan(
            a,
            b,
            rows=rows,
            rates=(per_record, per_collision * calibration),
            max_band_pairs=max(worker_memory - filters, 0.0) / 40.0 / max(calibration, 1e-9),
        )
        collisions = float(plan["chance_per_band"]) * calibration
        band_seconds = per_record * (n_a + n_b) + per_collision * collisions
        n_bands = int(plan["bands"])
        if self.keep_best is None:
            caller = 16.0 * collisions * n_bands  # every collision, two int64 positions
        else:
            caller = 3 * 24.0 * self.keep_best * (n_a + n_b)  # kept pairs, copied by a prune
        return {
            **plan,
            "seconds_per_record": per_record,
            "seconds_per_collision": per_collision,
            "collisions_per_band": collisions,
            "band_seconds": band_seconds,
            "slots": slots,
            "seconds": -(-n_bands // slots) * band_seconds,
            "worker_bytes": filters + 40.0 * collisions,
            "caller_bytes": caller,
            "measured": measured,
        }


def _timed_band(positions: np.ndarray[Any, Any], bands: _Bands) -> tuple[float, int]:
    """A task of :meth:`LshBlocking.forecast`: one band as :func:`_lsh_join` runs it (joined,
    or joined and scored against bars of 0), timed on the worker: ``(seconds, collisions)``."""
    started = time.perf_counter()
    if bands.keep is None:
        found = len(_joined_bands(positions, bands))
    else:
        no_bar = (np.zeros(len(bands.words_a), np.uint16), np.zeros(len(bands.words_b), np.uint16))
        found = len(_scored_bands(positions, *no_bar, bands)[0])
    return time.perf_counter() - started, found


@dataclass(frozen=True)
class BucketBlocking:
    """Few-bit LSH bands whose buckets are compared all-pairs on the spot: for large inputs.

    Each of ``bands`` bands samples ``band_bits`` bits (whole bytes, as :class:`LshBlocking`);
    records that share a band's bits form a bucket, and each bucket's A and B records are
    compared with one matrix product (int8 with torch, see :mod:`linkage.kernels`; small
    buckets pair by pair from the packed words). Only pairs scoring ``>= keep`` become
    candidates, so memory holds the likely matches, not every collision; filters identical on
    both sides (most true pairs, in every band) are joined once on a hash of the filter.

    Few bits per band make a true pair collide often (a pair agreeing on a share ``s`` of its
    bits is found with probability ``1 - (1 - s**band_bits)**bands``) at the price of large
    buckets, which matrix products compare at hundreds of millions of pairs a second. On the
    synthetic cohort at 1M x 1M, 20 bands of 20 bits keep about 99.3 % of the true pairs.

    Parameters
    ----------
    band_bits, bands : int
        Bits per band (8..56) and bands.
    keep : float
        Smallest Dice score kept as a candidate; keep it at or below the match floor that
        :func:`~linkage.matching.match` applies (0.5 by default) to see the same pairs.
    random_state : int, optional
        Which bytes the bands sample (not a secret).
    backend : {"auto", "torch", "numpy"}
        Matrix products from torch (int8) or NumPy (float32 BLAS).
    """

    band_bits: int = 20
    bands: int = 20
    keep: float = 0.5
    random_state: int | None = None
    backend: str = "auto"

    def __post_init__(self) -> None:
        if not 8 <= self.band_bits <= 56:
            raise ValueError(f"band_bits must be 8..56, got {self.band_bits}")
        if not 1 <= self.bands <= 10_000:
            raise ValueError(f"bands must be 1..10000, got {self.bands}")
        if not 0 < self.keep <= 1:
            raise ValueError(f"keep must be in (0, 1], got {self.keep}")

    def candidates(self, a: Encodings, b: Encodings) -> Candidates:
        """Candidate pairs of ``a`` and ``b`` that score at least ``keep``."""
        from linkage.kernels import dice_cross, dice_of_pairs

        r, n_bands, n_b = self.band_bits, self.bands, len(b)
        rng = np.random.default_rng(self.random_state)
        positions = band_positions(n_bands, r, a.bits // 8, rng)
        pop_a, pop_b = a.popcounts(), b.popcounts()
        hash_a, hash_b = _filter_hash(a.words), _filter_hash(b.words)
        same_a, same_b = join_keys([hash_a], [hash_b], n_b)
        # equal hashes: identical filters (Dice 1, or 0 if empty), bar a 64-bit collision
        sure = dice_of_pairs(a.words, b.words, pop_a, pop_b, same_a, same_b) >= self.keep
        same_a, same_b = same_a[sure], same_b[sure]
        found = [same_a * n_b + same_b]
        compared = len(same_a)
        for band, (ka, kb) in enumerate(
            zip(band_keys(a.words, positions, r), band_keys(b.words, positions, r), strict=True)
        ):
            logger.debug("bucket LSH: band %d, %d pairs compared so far", band, compared)
            sa, na, sb, nb, order_a, order_b = _buckets(ka, kb)
            sizes = na * nb
            compared += int(sizes.sum())
            big = sizes >= BUCKET_DENSE_PAIRS
            pieces: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
            for start_a, size_a, start_b, size_b in zip(
                sa[big].tolist(), na[big].tolist(), sb[big].tolist(), nb[big].tolist(), strict=True
            ):
                rows_a = order_a[start_a : start_a + size_a]
                rows_b = order_b[start_b : start_b + size_b]
                r_pos, c_pos, _ = dice_cross(
                    a.words[rows_a],
                    b.words[rows_b],
                    pop_a[rows_a],
                    pop_b[rows_b],
                    floor=self.keep,
                    backend=self.backend,
                )
                pieces.append((rows_a[r_pos], rows_b[c_pos]))
            small = ~big
            pair_a, pair_b = _bucket_pairs(sa[small], na[small], sb[small], nb[small])
            pair_a, pair_b = order_a[pair_a], order_b[pair_b]
            differ = hash_a[pair_a] != hash_b[pair_b]
            pair_a, pair_b = pair_a[differ], pair_b[differ]
            scores = dice_of_pairs(a.words, b.words, pop_a, pop_b, pair_a, pair_b)
            pieces.append((pair_a[scores >= self.keep], pair_b[scores >= self.keep]))
            for got_a, got_b in pieces:
                differ = hash_a[got_a] != hash_b[got_b]
                found.append(got_a[differ].astype(np.int64) * n_b + got_b[differ])
        flat = np.sort(np.concatenate(found))
        flat = flat[np.concatenate([[True], flat[1:] != flat[:-1]])] if len(flat) else flat
        logger.info(
            "bucket LSH: %d bands of %d bits compared %d pairs, kept %d scoring >= %.2f",
            n_bands,
            r,
            compared,
            len(flat),
            self.keep,
        )
        return Candidates(
            flat // n_b, flat % n_b, len(a), n_b, f"lsh-buckets({n_bands}x{r}, >= {self.keep})"
        )


BUCKET_DENSE_PAIRS = 4096
"""Buckets with at least this many pairs are compared by a matrix product, smaller ones pair
by pair."""


def _buckets(
    ka: np.ndarray[Any, Any], kb: np.ndarray[Any, Any]
) -> tuple[
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
]:
    """The keys on both sides: start and size of each in A and B sorted by key (int64), and
    those sorts."""
    order_a, order_b = np.argsort(ka), np.argsort(kb)
    sorted_a, sorted_b = ka[order_a], kb[order_b]
    keys_a, start_a, count_a = np.unique(sorted_a, return_index=True, return_counts=True)
    keys_b, start_b, count_b = np.unique(sorted_b, return_index=True, return_counts=True)
    _, in_a, in_b = np.intersect1d(keys_a, keys_b, assume_unique=True, return_indices=True)
    return (
        start_a[in_a].astype(np.int64),
        count_a[in_a].astype(np.int64),
        start_b[in_b].astype(np.int64),
        count_b[in_b].astype(np.int64),
        order_a,
        order_b,
    )


def _bucket_pairs(
    sa: np.ndarray[Any, Any],
    na: np.ndarray[Any, Any],
    sb: np.ndarray[Any, Any],
    nb: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Every pair of each bucket: positions into the two key-sorted orders."""
    sizes = na * nb
    bucket = np.repeat(np.arange(len(sizes)), sizes)
    offset = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(
        np.cumsum(sizes) - sizes, sizes
    )
    width = nb[bucket]
    return sa[bucket] + offset // width, sb[bucket] + offset % width


@dataclass(frozen=True)
class KeyBlocking:
    """Records sharing any blocking key of the schema become candidates (see the module
    docstring). ``keys`` picks some of the schema's keys by position (all by default)."""

    keys: tuple[int, ...] | None = None

    def candidates(self, a: Encodings, b: Encodings) -> Candidates:
        """Candidate pairs of ``a`` and ``b``."""
        n_keys = a.block_keys.shape[1]
        if n_keys == 0:
            raise ValueError(
                "the encodings carry no blocking keys: give the Schema blocking_keys=[...] "
                "(e.g. [['surname:soundex', 'date_of_birth:year']]) and encode again"
            )
        chosen = list(range(n_keys)) if self.keys is None else list(self.keys)
        for k in chosen:
            if not 0 <= k < n_keys:
                raise ValueError(f"blocking key {k} does not exist (the schema has {n_keys})")
        ia, ib = join_keys(a.block_keys[:, chosen].T, b.block_keys[:, chosen].T, len(b))
        return Candidates(ia, ib, len(a), len(b), f"keys({len(chosen)})")


def block(
    a: Encodings, b: Encodings, method: Any = "lsh", *, workers: Workers = None
) -> Candidates:
    """Candidate pairs by ``method``: ``"lsh"`` (:class:`LshBlocking` defaults), ``"keys"``
    (:class:`KeyBlocking`), a configured instance of these or of :class:`BucketBlocking`
    (for large inputs), or :class:`Candidates` found before for the same encodings (reused:
    ``match(a, b, blocking=candidates)`` solves again without blocking again).

    ``workers`` is where LSH's bands run (:meth:`LshBlocking.candidates`: this machine's
    threads, every core by default, or the linkage unit's Dask client); the other methods
    run in this process."""
    a.check_compatible(b)
    if isinstance(method, Candidates):
        if (method.n_a, method.n_b) != (len(a), len(b)):
            raise ValueError(
                f"these candidates are for {method.n_a} x {method.n_b} records, not "
                f"{len(a)} x {len(b)}: block these encodings"
            )
        return method
    if method == "lsh":
        method = LshBlocking()
    elif method == "keys":
        method = KeyBlocking()
    if not isinstance(method, (LshBlocking, KeyBlocking, BucketBlocking)):
        raise ValueError(
            f"unknown blocking {method!r}: use 'lsh', 'keys', LshBlocking(...) or KeyBlocking(...)"
        )
    if isinstance(method, LshBlocking):
        return method.candidates(a, b, workers=workers)
    check_workers(workers)  # a bad argument is named even where it changes nothing
    return method.candidates(a, b)


TASKS_PER_SLOT = 4
"""Groups of bands per slot of an executor (or thread) that :class:`LshBlocking` runs on: a
group's pairs are pruned with the best scores known when it starts, so several waves let
later groups drop more."""

PRUNE_PAIRS = 4_000_000
"""Scored pairs that :class:`LshBlocking`'s ``keep_best`` lets pile up before cutting each
record's candidates to its best (or as many as are kept, if more)."""


@dataclass(frozen=True, eq=False)
class _Bands:
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
    def of(cls, a: Encodings, b: Encodings, r: int, keep: int | None) -> _Bands:
        hashes = _filter_hash(a.words), _filter_hash(b.words)
        return cls(a.words, b.words, a.popcounts(), b.popcounts(), *hashes, r, keep)


def _lsh_join(
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
    bands = _Bands.of(a, b, r, keep)
    same_a, same_b = join_keys([bands.hash_a], [bands.hash_b], n_b)
    executor, slots = _band_runner(workers)
    # this process and its threads take a band at a time and prune here; another executor
    # takes a few groups of bands per slot, each pruned on its worker before it comes back
    per_task = 1 if not is_executor(workers) else -(-len(positions) // (slots * TASKS_PER_SLOT))
    groups = [positions[i : i + per_task] for i in range(0, len(positions), per_task)]
    if keep is None:
        found = _run_groups(executor, _joined_bands, [(g,) for g in groups], bands)
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


def _band_runner(workers: Workers) -> tuple[Any, int]:
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


def _run_groups(
    executor: Any, step: Callable[..., Any], tasks: list[tuple[Any, ...]], bands: _Bands
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


def _joined_bands(positions: np.ndarray[Any, Any], bands: _Bands) -> np.ndarray[Any, Any]:
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
    bands: _Bands,
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


def _filter_hash(words: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
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
