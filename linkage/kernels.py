"""Exact Dice comparison kernels: all pairs above a floor, and each record's two best scores.

:func:`dice_all_pairs` compares every record of A with every record of B whose popcount the
length filter admits, in memory-bounded blocks (``chunk`` records of A against ``tile`` of B):

1. the intersections ``|A_i & B_j|`` of a block come from one matrix product of the 0/1
   filters, exactly: ``int8 x int8 -> int32`` (VNNI; ``torch._int_mm``, both cores) when
   torch is installed, else float32 BLAS (exact for counts below 2**24);
2. B is sorted by popcount, so ``group`` consecutive columns have nearly the same popcount;
   one pass takes the largest intersection of each row in each group, which bounds the
   Dice of the whole group from above (divided by the group's smallest popcount) and from
   below (its largest);
3. only the groups whose upper bound reaches the floor, or the row's second-best lower bound
   (a score that two other groups certainly reach), can hold a kept pair or one of the row's
   two best scores: only those are divided out, exactly, in float64 (``2 * inter / (|A| +
   |B|)``, the same operations as a reference implementation). When too many groups qualify
   (low floors), the floor test runs over the whole block instead, in integers.

Without best scores (``best=False``) and from a floor of :data:`SCREEN_FLOOR` on NumPy, a
product of the most frequent 44% of the bits, with two columns that bound the rest, screens
each block first; the block's rows are screened on every core at once (``_Screen``).

No float screen can drop a pair: the bounds are exact rationals compared in float64 with a
margin, and every kept score is recomputed from the exact intersection. The Dice of two empty
filters is 0. ``VFLINK_NO_TORCH=1`` makes ``backend="auto"`` use NumPy even where torch is
installed.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

__all__ = [
    "available_backends",
    "dice_all_pairs",
    "dice_cross",
    "dice_of_pairs",
    "pack_bits",
    "pair_intersections",
    "unpack_bits",
]

CHUNK = 2048
"""Records of A per block."""
TILE = 16_384
"""Records of B per block at most (the block's int32 intersections: CHUNK * TILE * 4 bytes)."""
GROUP = 32
"""Columns of B per group for the bounds."""
DENSE_SHARE = 0.3
"""Share of groups that qualify beyond which the floor test runs over the whole block."""
SCREEN_FLOOR = 0.7
"""Smallest floor at which :func:`dice_all_pairs` without best scores screens pairs first."""
SCREEN_SHARE = 0.4375
"""Share of a filter's bits in the screen's product (the most frequent ones)."""
SCREEN_PASS = 0.1
"""Share of a block's pairs passing the screen beyond which the comparison stops screening."""

_TORCH_OK: bool | None = None


def _torch_int_mm() -> bool:
    """Whether torch is installed and has a CPU ``int8 x int8 -> int32`` product."""
    global _TORCH_OK
    if _TORCH_OK is None:
        if os.environ.get("VFLINK_NO_TORCH", "0") == "1":
            _TORCH_OK = False
            return False
        try:
            import torch

            x = torch.ones((1, 8), dtype=torch.int8)
            _TORCH_OK = int(torch._int_mm(x, x.T)[0, 0]) == 8
        except Exception:  # torch missing, or too old for _int_mm on CPU
            _TORCH_OK = False
    return _TORCH_OK


def available_backends() -> list[str]:
    """``"torch"`` (int8 products) where available, and ``"numpy"`` (float32 BLAS) always."""
    return (["torch"] if _torch_int_mm() else []) + ["numpy"]


def dice_all_pairs(
    words_a: np.ndarray[Any, Any],
    words_b: np.ndarray[Any, Any],
    *,
    floor: float = 0.0,
    chunk: int = CHUNK,
    tile: int = TILE,
    group: int = GROUP,
    backend: str = "auto",
    progress: Any = None,
    top_k: int | None = None,
    best: bool = True,
) -> tuple[
    np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any] | None
]:
    """Pairs with Dice ``>= floor`` (``> 0`` when the floor is 0) of two sets of packed filters.

    Parameters
    ----------
    words_a, words_b : numpy.ndarray
        ``(n, bits // 64)`` uint64 filters, as in :class:`~linkage.encoding.Encodings`.
    floor : float
        Smallest score kept; pairs that the length filter rules out are not compared.
    chunk, tile, group : int
        Block sizes (see the module docstring); they change the speed, never the result.
    backend : {"auto", "torch", "numpy"}
        Where the intersections come from.
    progress : callable, optional
        Wraps the iterable of A chunks (e.g. tqdm).
    top_k : int, optional
        Keep only the pairs that can be among the ``top_k`` best of their A record or of
        their B record: each block drops the pairs below both its row's and its column's
        ``top_k``-th best score in that block (a block holds a subset of a record's pairs, so
        its ``top_k``-th best is never above the record's own; ties are kept). What comes
        back is a superset of those pairs in which each of them keeps its rank, so
        :func:`~linkage.threshold.top_k_pairs` on it selects exactly the pairs it would
        select on all of them -- without sorting millions of pairs that no record ranks high
        (FEBRL4 at floor 0.5: 14 million pairs, about 50,000 kept).
    best : bool
        Whether to find every A record's two best scores (the fourth result). Without them,
        and from a floor of :data:`SCREEN_FLOOR` with the NumPy backend, a cheaper product
        screens the pairs first (``_Screen``): what is kept is the same.

    Returns
    -------
    (ia, ib, scores, best)
        Positions and exact scores of the kept pairs (int64, int64, float64), and ``(n_a, 2)``
        the best and second-best score of every A record among the B records that its block
        compared (all those the length filter admits; 0 where none), or None with
        ``best=False``.
    """
    if not 0 <= floor <= 1:
        raise ValueError(f"floor must be in [0, 1], got {floor}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be a positive count of pairs, got {top_k}")
    if backend == "auto":
        backend = "torch" if _torch_int_mm() else "numpy"
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'numpy', got {backend!r}")
    if backend == "torch" and not _torch_int_mm():
        raise ValueError("backend='torch' needs torch with a CPU int8 matrix product (torch>=2.2)")
    n_a, n_b = len(words_a), len(words_b)
    tops = np.zeros((n_a, 2))
    empty = np.zeros(0, dtype=np.int64)
    if n_a == 0 or n_b == 0:
        return empty, empty, np.zeros(0), tops if best else None
    pop_a = np.bitwise_count(words_a).sum(axis=1).astype(np.int64)
    pop_b = np.bitwise_count(words_b).sum(axis=1).astype(np.int64)
    order_b = np.argsort(pop_b, kind="stable")
    order_a = np.argsort(pop_a, kind="stable")
    if group < 1 or chunk < 1:
        raise ValueError("chunk and group must be positive")
    tile = max(group, tile // group * group)
    # B sorted by popcount, with `group` empty filters after it so that a block can always
    # be widened to a whole number of groups without copying
    sorted_pop_b = np.concatenate([pop_b[order_b], np.zeros(group, dtype=np.int64)])
    screen = None
    if not best and backend == "numpy" and floor >= SCREEN_FLOOR and words_b.shape[1] >= 2:
        screen = _Screen(words_a, words_b[order_b], pop_a, pop_b[order_b], floor)
    engine: _Engine | None = None
    out_a: list[np.ndarray[Any, Any]] = []
    out_b: list[np.ndarray[Any, Any]] = []
    out_s: list[np.ndarray[Any, Any]] = []
    starts: Any = range(0, n_a, chunk)
    if progress is not None:
        starts = progress(starts)
    try:
        for start in starts:
            rows = order_a[start : start + chunk]
            pa = pop_a[rows]
            if floor > 0:
                # Dice >= t needs t |A| / (2 - t) <= |B| <= |A| (2 - t) / t; slack for rounding
                admitted = sorted_pop_b[:n_b]
                low_pop = math.ceil(floor * pa.min() / (2 - floor) - 1e-9)
                high_pop = math.floor(pa.max() * (2 - floor) / floor + 1e-9)
                lo = int(np.searchsorted(admitted, low_pop, side="left"))
                hi = int(np.searchsorted(admitted, high_pop, side="right"))
            else:
                lo, hi = 0, n_b
            if hi <= lo:
                continue
            left = None
            screened = screen.rows(rows) if screen is not None else None
            top = np.zeros((len(rows), 2))
            for t_lo in range(lo, hi, tile):
                t_hi = min(t_lo + tile, hi)
                found = None
                if screen is not None and screened is not None:
                    found = screen.block(screened, rows, t_lo, t_hi)
                    if found is None:  # the screen let too much through: stop trying it
                        screen.close()
                        screen = None
                if found is None:  # unscreened: one product of the whole filters
                    if engine is None:
                        engine = _Engine(words_b[order_b], backend, group)
                    if left is None:
                        left = engine.rows(words_a[rows])
                    r, c, s, two = _block(engine, left, pa, sorted_pop_b, t_lo, t_hi, floor, group)
                    top = _merge_top_two(top, two)
                else:
                    r, c, s = found
                if top_k is not None:
                    r, c, s = _block_top_k(r, c, s, (len(rows), t_hi - t_lo), top_k)
                out_a.append(rows[r])
                out_b.append(order_b[t_lo + c])
                out_s.append(s)
            tops[rows] = top
    finally:
        if screen is not None:
            screen.close()
    if not out_a:
        return empty, empty, np.zeros(0), tops if best else None
    ia, ib, scores = np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s)
    return ia, ib, scores, tops if best else None


class _Engine:
    """The intersections of a block: ``int8`` products in torch, or float32 BLAS."""

    def __init__(self, words_b: np.ndarray[Any, Any], backend: str, pad: int) -> None:
        self.backend = backend
        bits = unpack_bits(np.concatenate([words_b, np.zeros((pad, words_b.shape[1]), np.uint64)]))
        if backend == "torch":
            import torch

            self.right: Any = torch.from_numpy(bits.view(np.int8))
        else:
            self.right = bits.astype(np.float32)

    def rows(self, words: np.ndarray[Any, Any]) -> Any:
        bits = unpack_bits(words)
        if self.backend == "torch":
            import torch

            return torch.from_numpy(bits.view(np.int8))
        return bits.astype(np.float32)

    def product(self, left: Any, lo: int, hi: int) -> np.ndarray[Any, Any]:
        """``(rows, hi - lo)`` intersections with sorted B's records ``lo:hi`` (int32, or
        float32 that is exact for them)."""
        if self.backend == "torch":
            import torch

            out: np.ndarray[Any, Any] = torch._int_mm(left, self.right[lo:hi].T).numpy()
            return out
        product: np.ndarray[Any, Any] = left @ self.right[lo:hi].T
        return product

    def at_least(
        self, inter: np.ndarray[Any, Any], need: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Positions where ``inter[i, j] >= need[j]``."""
        if self.backend == "torch":
            import torch

            mask = torch.ge(torch.from_numpy(inter), torch.from_numpy(need.astype(np.int32)))
            r, c = np.nonzero(mask.numpy())
        else:
            r, c = np.nonzero(inter >= need.astype(np.float32))
        return r, c

    def group_max(self, inter: np.ndarray[Any, Any], group: int) -> np.ndarray[Any, Any]:
        """Each row's largest intersection in each group of ``group`` columns."""
        shaped = inter.reshape(inter.shape[0], -1, group)
        if self.backend == "torch":
            import torch

            out: np.ndarray[Any, Any] = torch.from_numpy(shaped).amax(dim=2).numpy()
            return out
        result: np.ndarray[Any, Any] = shaped.max(axis=2)
        return result


Side = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]
"""Records of A prepared for the screen: the product's left side, the rest's packed bits and
popcounts."""


class _Screen:
    """A first, cheaper product for high floors (NumPy backend, no best scores).

    The filters' bits are split in two: the :data:`SCREEN_SHARE` of them most often set in B
    (the screen) and the rest. With ``i1`` the intersection over the screen's bits and
    ``ra``, ``rb`` the two filters' popcounts over the rest, ``|A & B| <= i1 + min(ra, rb)
    <= i1 + (ra + rb) / 2``. Dice ``>= floor`` needs ``2 |A & B| >= floor (|A| + |B|)``,
    hence ``2 i1 + (ra - floor |A|) + (rb - floor |B|) >= 0``: the two last terms ride in the
    product as two more columns (one per side), so the screen is one product of half the
    filters and one comparison. Putting the most frequent bits in the screen leaves the rest
    sparse, which tightens the bound. What passes is checked against the tighter ``min``
    bound, and the rest of its intersection comes from the rest's bits, packed; every kept
    score is the exact one, computed as the unscreened path computes it. On the synthetic
    cohort at floor 0.8, 1.4% of the pairs pass the product and 0.7% the ``min`` bound.
    """

    MARGIN = 0.25
    """Slack below zero that still passes: float32 products round (by far less than this)."""

    def __init__(
        self,
        words_a: np.ndarray[Any, Any],
        words_b: np.ndarray[Any, Any],
        pop_a: np.ndarray[Any, Any],
        pop_b: np.ndarray[Any, Any],
        floor: float,
    ) -> None:
        self.words_a, self.floor = words_a, floor
        self.pop_a, self.pop_b = pop_a, pop_b
        bits_b = unpack_bits(words_b)
        # each bit's frequency from a sample of B (it only orders the bits: any order is exact)
        sample = bits_b[:: max(1, len(bits_b) // 4096)]
        frequent = np.argsort(-sample.sum(axis=0, dtype=np.int64), kind="stable")
        k = max(1, round(bits_b.shape[1] * SCREEN_SHARE))
        self.screen, self.rest = frequent[:k], frequent[k:]
        self.rest_words_b = self._pack_rest(bits_b)
        self.rest_b = np.bitwise_count(self.rest_words_b).sum(axis=1).astype(np.int64)
        right = np.empty((len(words_b), k + 2), dtype=np.float32)
        right[:, :-2] = bits_b[:, self.screen]
        right[:, -2] = 1.0
        right[:, -1] = self.rest_b - floor * pop_b
        self.right, self.right_term = right, right[:, -1].astype(np.float64)
        self._buffers = threading.local()
        # one part of each block per core, each on its own thread with a one-thread BLAS
        # product (threadpoolctl, which scikit-learn brings and uses the same way)
        self.cores = os.cpu_count() or 1
        self._pool = ThreadPoolExecutor(self.cores) if self.cores > 1 else None
        self._controller: Any = None
        if self._pool is not None:
            from threadpoolctl import ThreadpoolController

            self._controller = ThreadpoolController()

    def _pack_rest(self, bits: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        rest = bits[:, self.rest]
        pad = -rest.shape[1] % 64
        return pack_bits(np.pad(rest, ((0, 0), (0, pad))) if pad else rest)

    def _buffer(self, m: int, n: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """This thread's product and comparison of an ``m x n`` part, reused from block to
        block (a fresh 80 MB array costs its page faults every time)."""
        held = getattr(self._buffers, "arrays", None)
        if held is None or held[0].size < m * n:
            held = (np.empty(m * n, dtype=np.float32), np.empty(m * n, dtype=bool))
            self._buffers.arrays = held
        product, passing = held
        return product[: m * n].reshape(m, n), passing[: m * n].reshape(m, n)

    def rows(self, rows: np.ndarray[Any, Any]) -> list[tuple[int, int, Side]]:
        """A's records ``rows`` cut into one part per core, each with the left side of its
        product and its rest (packed bits, popcounts), prepared on the threads."""
        cuts = np.linspace(0, len(rows), self.cores + 1).astype(np.int64)
        parts = [(int(x), int(y)) for x, y in itertools.pairwise(cuts.tolist()) if y > x]
        if self._pool is None or len(parts) < 2:
            return [(0, len(rows), self._side(rows))]
        sides = self._pool.map(lambda part: self._side(rows[part[0] : part[1]]), parts)
        return [(x, y, side) for (x, y), side in zip(parts, sides, strict=True)]

    def _side(self, rows: np.ndarray[Any, Any]) -> Side:
        bits = unpack_bits(self.words_a[rows])
        rest_words = self._pack_rest(bits)
        rest = np.bitwise_count(rest_words).sum(axis=1).astype(np.int64)
        left = np.empty((len(rows), len(self.screen) + 2), dtype=np.float32)
        np.multiply(bits[:, self.screen], 2, out=left[:, :-2])
        left[:, -2] = rest - self.floor * self.pop_a[rows] + self.MARGIN
        left[:, -1] = 1.0
        return left, rest_words, rest

    def block(
        self, parts: list[tuple[int, int, Side]], rows: np.ndarray[Any, Any], lo: int, hi: int
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
        """Kept pairs (row in the chunk, column from ``lo``, exact score) of one block, or
        None when more than :data:`SCREEN_PASS` of its pairs pass (the bound is too loose
        for these records at this floor: the caller compares them unscreened).

        Each part of the chunk's rows (:meth:`rows`) is screened on its own thread with a
        one-thread BLAS product: the screening between products is single-threaded NumPy,
        so one multi-threaded product at a time left a core idle. The BLAS limit
        (threadpoolctl) holds for the whole process while a block runs: another thread's
        NumPy product in that time gets one thread too."""
        if self._pool is None or len(parts) < 2:
            found = [self._part(side, rows[x:y], lo, hi) for x, y, side in parts]
        else:
            pool = self._pool
            with self._controller.limit(limits=1, user_api="blas"):
                found = list(pool.map(lambda p: self._part(p[2], rows[p[0] : p[1]], lo, hi), parts))
        if any(f is None for f in found):
            return None
        kept = [f for f in found if f is not None]
        return (
            np.concatenate([f[0] + x for f, (x, _, _) in zip(kept, parts, strict=True)]),
            np.concatenate([f[1] for f in kept]),
            np.concatenate([f[2] for f in kept]),
        )

    def _part(
        self, side: Side, rows: np.ndarray[Any, Any], lo: int, hi: int
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
        """:meth:`block` for one part of the chunk's rows (rows counted from the part's)."""
        left, rest_words_a, rest_a = side
        product, passing = self._buffer(len(left), hi - lo)
        np.matmul(left, self.right[lo:hi].T, out=product)
        np.greater_equal(product, 0, out=passing)
        if np.count_nonzero(passing) > SCREEN_PASS * product.size:
            return None
        flat = np.flatnonzero(passing)
        r, c = np.divmod(flat, hi - lo)
        # the product is 2 i1 plus the two extra columns; i1 is an integer, recovered exactly
        # (a residual this far from an integer would mean the float32 product was not exact
        # enough: then the block goes unscreened rather than trust it)
        twice = product.ravel()[flat] - left[:, -2].astype(np.float64)[r] - self.right_term[lo + c]
        i1 = np.rint(twice / 2)
        if len(i1) and np.abs(twice / 2 - i1).max() > 0.25:
            return None
        b = lo + c
        total = self.pop_a[rows[r]] + self.pop_b[b]
        bound = 2 * (i1.astype(np.int64) + np.minimum(rest_a[r], self.rest_b[b]))
        near = bound >= self.floor * total - 1e-6
        r, b, i1, total = r[near], b[near], i1[near], total[near]
        inter = i1.astype(np.int64) + pair_intersections(rest_words_a, self.rest_words_b, r, b)
        exact = 2.0 * inter.astype(np.float64) / np.maximum(total, 1)
        keep = exact >= self.floor
        return r[keep], b[keep] - lo, exact[keep]

    def close(self) -> None:
        """Stop the threads."""
        if self._pool is not None:
            self._pool.shutdown()


def unpack_bits(words: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Filters as ``uint64`` words (bit ``i`` of a filter in word ``i // 64``, least
    significant first) to an ``(n, bits)`` uint8 matrix of 0/1; :func:`pack_bits` inverts it."""
    as_bytes = np.ascontiguousarray(words).astype("<u8", copy=False).view(np.uint8)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")


def pack_bits(bits: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """An ``(n, bits)`` 0/1 matrix (``bits`` a multiple of 64) to ``uint64`` words, as
    :class:`~linkage.encoding.Encodings` holds them; :func:`unpack_bits` inverts it."""
    packed = np.packbits(bits, axis=1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8").astype(np.uint64, copy=False)


def _block(
    engine: _Engine,
    left: Any,
    pa: np.ndarray[Any, Any],
    sorted_pop_b: np.ndarray[Any, Any],
    lo: int,
    hi: int,
    floor: float,
    group: int,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Kept pairs (row in the chunk, column from ``lo``, exact score) and each row's top two
    scores, for one block."""
    n = hi - lo
    width = n + (-n % group)
    # the columns beyond `hi` (records the length filter rules out, or the empty filters
    # after B) only widen the block to whole groups: their pairs never reach the floor
    inter = engine.product(left, lo, lo + width)
    m = inter.shape[0]
    n_groups = width // group
    pb = sorted_pop_b[lo : lo + width]
    pb_groups = pb.reshape(n_groups, group)
    pb_min, pb_max = pb_groups.min(axis=1), pb_groups.max(axis=1)
    inter_max = engine.group_max(inter, group).astype(np.float64)
    pa_f = pa.astype(np.float64)[:, None]
    upper = 2.0 * inter_max / np.maximum(pa_f + pb_min[None, :], 1.0)
    lower = 2.0 * inter_max / np.maximum(pa_f + pb_max[None, :], 1.0)
    # two different groups each hold a score >= their lower bound
    second_lower = -np.partition(-lower, 1, axis=1)[:, 1] if n_groups >= 2 else np.zeros(m)
    slack = 1e-9
    # at floor 0 every pair with a positive score is kept
    needed = np.minimum(second_lower, floor) - slack if floor > 0 else np.full(m, -1.0)
    wanted = upper >= needed[:, None]
    dense = floor == 0 or wanted.mean() > DENSE_SHARE
    if dense:
        # top two only from the groups that can hold them; the floor test over everything
        wanted = upper >= second_lower[:, None] - slack
    g_r, g_g = np.nonzero(wanted)
    shaped = inter.reshape(m, n_groups, group)
    values = shaped[g_r, g_g].astype(np.float64)  # (selected groups, group)
    denom = np.maximum(pa[g_r][:, None] + pb_groups[g_g], 1).astype(np.float64)
    scores = 2.0 * values / denom
    two = _top_two_of_groups(g_r, scores, m)
    if dense:
        r, c = _dense_floor(engine, inter, pa, pb, floor)
        keep = c < n
        r, c = r[keep], c[keep]
        exact = 2.0 * inter[r, c].astype(np.float64) / np.maximum(pa[r] + pb[c], 1)
    else:
        k_sel, k_col = np.nonzero(scores >= floor)
        r = g_r[k_sel]
        c = g_g[k_sel].astype(np.int64) * group + k_col
        exact = scores[k_sel, k_col]
        keep = c < n
        r, c, exact = r[keep], c[keep], exact[keep]
    keep = exact >= floor if floor > 0 else exact > 0
    return r[keep], c[keep], exact[keep], two


def _block_top_k(
    r: np.ndarray[Any, Any],
    c: np.ndarray[Any, Any],
    s: np.ndarray[Any, Any],
    shape: tuple[int, int],
    k: int,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The block's pairs that reach their row's or their column's ``k``-th best score in the
    block. The ``k``-th best comes from float32 copies of the scores, so a pair is kept when
    its float32 score reaches it: float32 rounding is monotone, hence no pair that reaches the
    threshold in float64 is dropped (ties and near-ties kept).

    Two ways to the same thresholds, by the block's density (the crossover measured on
    2,048 x 4,800 blocks, k = 5):

    * below 10 % of the block's cells, from the pairs alone: one sort of the scores, best
      first, then per row and per column a stable sort by the index (a radix sort for blocks
      up to 65,536 wide) that keeps each group's scores best first, so that a group's
      ``k``-th best is its ``k``-th entry (10 ms at 1 %, 63 ms at 5 %);
    * from 10 %, dense: the negated scores (1 where no pair) partitioned at ``k - 1`` by rows
      and, in a transposed copy, by columns (0.12-0.21 s whatever the density). Partitioning
      at ``k - 1`` rather than ``n - k`` matters: introselect met the many equal cells of
      the pairs that are not there far into the row, and took 0.6 s a direction."""
    m, n = shape
    if len(s) <= k or m * n == 0:
        return r, c, s
    mine = s.astype(np.float32)
    if 10 * len(s) < m * n:
        order = np.argsort(-mine)
        best_first = mine[order]
        kth_row = _kth_of_groups(r[order], best_first, m, k)
        kth_col = _kth_of_groups(c[order], best_first, n, k)
    else:
        negated = np.full((m, n), 1.0, dtype=np.float32)
        negated[r, c] = -mine
        kth_row, kth_col = np.full(m, -1.0), np.full(n, -1.0)
        if m >= k:  # the columns first, from a copy: the rows are partitioned in place
            by_column = np.ascontiguousarray(negated.T)
            by_column.partition(k - 1, axis=1)
            kth_col = -by_column[:, k - 1]
        if n >= k:
            negated.partition(k - 1, axis=1)
            kth_row = -negated[:, k - 1]
    keep = (mine >= kth_row[r]) | (mine >= kth_col[c])
    return r[keep], c[keep], s[keep]


def _kth_of_groups(
    groups: np.ndarray[Any, Any], best_first: np.ndarray[Any, Any], size: int, k: int
) -> np.ndarray[Any, Any]:
    """The ``k``-th largest of each group's scores (-1 where a group has fewer than ``k``),
    given the scores sorted best first and each one's group (in ``range(size)``)."""
    key = groups.astype(np.uint16) if size <= 1 << 16 else groups
    within = np.argsort(key, kind="stable")  # each group's scores stay best first
    counts = np.bincount(key, minlength=size)
    kth = np.full(size, -1.0, dtype=np.float32)
    full = counts >= k
    kth[full] = best_first[within[(np.cumsum(counts) - counts)[full] + k - 1]]
    return kth


def _dense_floor(
    engine: _Engine,
    inter: np.ndarray[Any, Any],
    pa: np.ndarray[Any, Any],
    pb: np.ndarray[Any, Any],
    floor: float,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Positions that may reach the floor, a superset of the kept pairs, over the whole block:
    ``inter > 0`` at floor 0, else ``inter >= ceil(floor (min |A| + |B|) / 2)`` (the chunk's
    rows are sorted by popcount, so its smallest popcount is close to all of them)."""
    if floor == 0:
        need = np.ones(len(pb), dtype=np.int64)
    else:
        need = np.ceil(floor * (int(pa.min()) + pb) / 2 - 1e-6).astype(np.int64)
    return engine.at_least(inter, need)


def _top_two_of_groups(
    g_r: np.ndarray[Any, Any], scores: np.ndarray[Any, Any], m: int
) -> np.ndarray[Any, Any]:
    """Each row's two best scores among its selected groups' scores (0 where fewer)."""
    two = np.zeros((m, 2))
    if not len(g_r):
        return two
    if scores.shape[1] >= 2:
        part = -np.partition(-scores, 1, axis=1)[:, :2]  # each group's two best, best first
    else:
        part = np.concatenate([scores, np.zeros_like(scores)], axis=1)
    rows = np.repeat(g_r, 2)
    vals = part.ravel()
    order = np.lexsort((-vals, rows))
    rows, vals = rows[order], vals[order]
    first = np.concatenate([[True], rows[1:] != rows[:-1]])
    starts = np.flatnonzero(first)
    two[rows[starts], 0] = vals[starts]
    has_second = starts + 1 < len(rows)
    nxt = starts[has_second] + 1
    same = rows[nxt] == rows[starts[has_second]]
    two[rows[nxt[same]], 1] = vals[nxt[same]]
    return two


def _merge_top_two(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The two best of each row's four values (two from each side, best first)."""
    both = np.concatenate([x, y], axis=1)
    both.sort(axis=1)
    merged: np.ndarray[Any, Any] = both[:, :-3:-1].copy()
    return merged


def pair_intersections(
    words_a: np.ndarray[Any, Any],
    words_b: np.ndarray[Any, Any],
    ia: np.ndarray[Any, Any],
    ib: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """``|A_i & B_j|`` (int64) of the pairs ``(ia[k], ib[k])``, from the packed words."""
    out = np.empty(len(ia), dtype=np.int64)
    for start in range(0, len(ia), 65536):
        stop = start + 65536
        both = np.take(words_a, ia[start:stop], axis=0)
        both &= np.take(words_b, ib[start:stop], axis=0)
        out[start:stop] = np.add.reduce(np.bitwise_count(both), axis=1, dtype=np.uint64)
    return out


def dice_of_pairs(
    words_a: np.ndarray[Any, Any],
    words_b: np.ndarray[Any, Any],
    pop_a: np.ndarray[Any, Any],
    pop_b: np.ndarray[Any, Any],
    ia: np.ndarray[Any, Any],
    ib: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """Exact Dice (float64) of the pairs ``(ia[k], ib[k])``; 0 for two empty filters."""
    inter = pair_intersections(words_a, words_b, ia, ib)
    scores: np.ndarray[Any, Any] = 2.0 * inter / np.maximum(pop_a[ia] + pop_b[ib], 1)
    return scores


def dice_cross(
    words_a: np.ndarray[Any, Any],
    words_b: np.ndarray[Any, Any],
    pop_a: np.ndarray[Any, Any],
    pop_b: np.ndarray[Any, Any],
    *,
    floor: float,
    backend: str = "auto",
    chunk: int = CHUNK,
    tile: int = TILE,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """All pairs of two small sets of filters (e.g. the records of one LSH bucket) with Dice
    ``>= floor`` (``floor > 0``): positions and exact scores, from one matrix product per
    ``chunk x tile`` block (no length filter, no best scores: see :func:`dice_all_pairs`)."""
    if not 0 < floor <= 1:
        raise ValueError(f"floor must be in (0, 1], got {floor}")
    if backend == "auto":
        backend = "torch" if _torch_int_mm() else "numpy"
    out_r: list[np.ndarray[Any, Any]] = []
    out_c: list[np.ndarray[Any, Any]] = []
    out_s: list[np.ndarray[Any, Any]] = []
    for b_lo in range(0, len(words_b), tile):
        engine = _Engine(words_b[b_lo : b_lo + tile], backend, 0)
        pb = pop_b[b_lo : b_lo + tile]
        width = len(pb)
        for a_lo in range(0, len(words_a), chunk):
            pa = pop_a[a_lo : a_lo + chunk]
            inter = engine.product(engine.rows(words_a[a_lo : a_lo + chunk]), 0, width)
            need = np.ceil(floor * (int(pa.min()) + pb) / 2 - 1e-6).astype(np.int64)
            r, c = engine.at_least(inter, need)
            exact = 2.0 * inter[r, c].astype(np.float64) / np.maximum(pa[r] + pb[c], 1)
            keep = exact >= floor
            out_r.append(r[keep] + a_lo)
            out_c.append(c[keep] + b_lo)
            out_s.append(exact[keep])
    if not out_r:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    return (
        np.concatenate(out_r).astype(np.int64),
        np.concatenate(out_c).astype(np.int64),
        np.concatenate(out_s),
    )
