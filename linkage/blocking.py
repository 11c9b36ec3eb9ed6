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

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from linkage.bands import (
    Bands,
    band_keys,
    band_positions,
    band_runner,
    filter_hash,
    join_keys,
    lsh_join,
    run_groups,
    timed_band,
)
from linkage.encoding import Encodings
from linkage.executors import Workers, check_workers

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
        kept ones (at least :data:`linkage.bands.PRUNE_PAIRS`) have piled up: memory then
        stays near a few times ``keep_best * (n_a + n_b)`` pairs however many bands there
        are, so that large inputs can afford the many bands a high pair completeness needs. The
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
        order of pruning changes (see :mod:`linkage.bands`)."""
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
        ia, ib = lsh_join(a, b, positions, r, self.keep_best, workers)
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
        executor, slots = band_runner(workers)
        measured = []
        for cut_a, cut_b in ((len(a), len(b)), (max(len(a) // 2, 1), max(len(b) // 2, 1))):
            part_a = Encodings(a.index[:cut_a], a.words[:cut_a], a.fingerprint)
            part_b = Encodings(b.index[:cut_b], b.words[:cut_b], b.fingerprint)
            bands = Bands.of(part_a, part_b, r, self.keep_best)
            tasks = [(positions[k : k + 1],) for k in range(sample_bands)]
            for seconds, collisions in run_groups(executor, timed_band, tasks, bands):
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
        hash_a, hash_b = filter_hash(a.words), filter_hash(b.words)
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
