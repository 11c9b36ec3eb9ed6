"""The Dice kernels against a brute-force reference, on both backends and odd block sizes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from linkage.kernels import _block_top_k, available_backends, dice_all_pairs
from linkage.threshold import top_k_pairs

BACKENDS = available_backends()


def pack(bits: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    packed = np.packbits(bits, axis=1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8").astype(np.uint64)


def brute_force(wa: np.ndarray[Any, Any], wb: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Every pair's Dice, as Python floats do it (0 for two empty filters)."""
    scores = np.zeros((len(wa), len(wb)))
    for i, x in enumerate(wa):
        for j, y in enumerate(wb):
            inter = sum(bin(int(u) & int(v)).count("1") for u, v in zip(x, y, strict=True))
            total = sum(bin(int(u)).count("1") for u in x) + sum(bin(int(v)).count("1") for v in y)
            scores[i, j] = 2 * inter / total if total else 0.0
    return scores


def random_filters(
    rng: np.random.Generator, n_a: int, n_b: int, words: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    density = rng.uniform(0.05, 0.45)
    bits_a = rng.random((n_a, 64 * words)) < density
    bits_b = rng.random((n_b, 64 * words)) < rng.uniform(0.05, 0.45)
    near = min(n_a, n_b) // 3  # near-duplicates, so that high floors keep something
    bits_b[:near] = bits_a[:near] ^ (rng.random((near, 64 * words)) < 0.03)
    wa, wb = pack(bits_a), pack(bits_b)
    wa[0] = 0  # empty filters on both sides
    wb[-1] = 0
    if n_b > 2:
        wb[1] = wb[2]  # a tie
    return wa, wb


def check(
    wa: np.ndarray[Any, Any], wb: np.ndarray[Any, Any], full: np.ndarray[Any, Any], **kw: Any
) -> None:
    floor = kw.get("floor", 0.0)
    ia, ib, scores, best = dice_all_pairs(wa, wb, **kw)
    wanted = full >= floor if floor > 0 else full > 0
    assert set(zip(ia.tolist(), ib.tolist(), strict=True)) == set(
        zip(*np.nonzero(wanted), strict=True)
    )
    assert len(set(zip(ia.tolist(), ib.tolist(), strict=True))) == len(ia)
    np.testing.assert_array_equal(scores, full[ia, ib])  # bit for bit
    # without best scores (screened from SCREEN_FLOOR on NumPy): the same pairs and scores
    ja, jb, those, none = dice_all_pairs(wa, wb, best=False, **kw)
    assert none is None
    same = np.lexsort((ib, ia)), np.lexsort((jb, ja))
    np.testing.assert_array_equal(ia[same[0]], ja[same[1]])
    np.testing.assert_array_equal(ib[same[0]], jb[same[1]])
    np.testing.assert_array_equal(scores[same[0]], those[same[1]])
    ranked = -np.sort(-np.concatenate([full, np.zeros((len(wa), 1))], axis=1), axis=1)[:, :2]
    if floor == 0:
        np.testing.assert_array_equal(best, ranked)
    else:  # exact at least where the score reaches the floor
        for k in (0, 1):
            sure = ranked[:, k] >= floor
            np.testing.assert_array_equal(best[sure, k], ranked[sure, k])
            assert np.all(best[:, k] <= ranked[:, k])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_kernel_equals_brute_force(backend: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_a, n_b = int(rng.integers(1, 90)), int(rng.integers(1, 90))
    wa, wb = random_filters(rng, n_a, n_b, int(rng.choice([1, 2, 16])))
    full = brute_force(wa, wb)
    for floor in (0.0, 0.3, 0.5, 0.8, 1.0):
        for chunk, tile, group in ((2048, 16384, 32), (7, 13, 4), (5, 40, 1), (64, 64, 64)):
            check(wa, wb, full, floor=floor, backend=backend, chunk=chunk, tile=tile, group=group)


def dense_top_k(
    r: np.ndarray[Any, Any],
    c: np.ndarray[Any, Any],
    s: np.ndarray[Any, Any],
    shape: tuple[int, int],
    k: int,
) -> tuple[np.ndarray[Any, Any], ...]:
    """The block filter as it was: the block made dense (-1 where no pair), its rows' and
    columns' ``k``-th best by partitioning it."""
    m, n = shape
    if len(s) <= k:
        return r, c, s
    dense = np.full((m, n), -1.0, dtype=np.float32)
    mine = s.astype(np.float32)
    dense[r, c] = mine
    kth_row = np.partition(dense, n - k, axis=1)[:, n - k] if n >= k else np.full(m, -1.0)
    kth_col = np.partition(dense, m - k, axis=0)[m - k, :] if m >= k else np.full(n, -1.0)
    keep = (mine >= kth_row[r]) | (mine >= kth_col[c])
    return r[keep], c[keep], s[keep]


@pytest.mark.parametrize("seed", range(6))
def test_the_block_top_k_from_the_pairs_equals_the_dense_partition(seed: int) -> None:
    """Both ways (sorting the pairs below 10 % density, partitioning the negated dense block
    at ``k - 1`` above) keep exactly the pairs that partitioning the dense block at ``n - k``
    kept: sparse and crowded blocks, scores with many ties and float64 scores that round to
    the same float32, ``k`` above a side's length, and a block wider than a 16-bit key."""
    rng = np.random.default_rng(seed)
    for m, n, density, k in (
        (40, 70, 0.3, 3),
        (300, 200, 0.02, 5),
        (9, 400, 0.9, 12),
        (200, 4, 0.5, 6),
        (3, 70_000, 0.01, 2),
        (5, 900, 0.04, 8),
    ):
        flat = rng.choice(m * n, max(1, int(m * n * density)), replace=False)
        r, c = flat // n, flat % n
        s = rng.random(len(flat))
        if seed % 2:
            s = np.round(s * 8) / 8 + rng.choice([0.0, 1e-12], len(s))  # ties, near-ties
        for got, want in zip(
            _block_top_k(r, c, s, (m, n), k), dense_top_k(r, c, s, (m, n), k), strict=True
        ):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(3))
def test_top_k_keeps_exactly_what_top_k_pairs_selects_from_all_pairs(
    backend: str, seed: int
) -> None:
    """The kernel's per-block top-k filter: what it returns, ordered as :func:`dice_pairs`
    orders pairs, gives the same top-k mask as all pairs do (ties included: records of a
    few bits share many scores), on blocks that split rows and columns several ways."""
    rng = np.random.default_rng(seed)
    wa, wb = random_filters(rng, 150, 170, 1)
    wb[5:25] = wb[4]  # twenty identical B records: ties across a record's ranks
    dropped = 0
    for floor, k in ((0.0, 1), (0.3, 3), (0.5, 5)):
        for chunk, tile, group in ((2048, 16384, 32), (16, 24, 8), (7, 40, 4)):
            kw = {"floor": floor, "backend": backend, "chunk": chunk, "tile": tile}
            ia, ib, s, best = dice_all_pairs(wa, wb, group=group, **kw)
            ja, jb, t, best_k = dice_all_pairs(wa, wb, group=group, top_k=k, **kw)
            assert len(ja) <= len(ia)
            dropped += len(ia) - len(ja)
            np.testing.assert_array_equal(best, best_k)
            chosen = []
            for x, y, z in ((ia, ib, s), (ja, jb, t)):
                order = np.lexsort((y, x))
                x, y, z = x[order], y[order], z[order]
                mask = top_k_pairs(x, y, z, k)
                chosen.append(sorted(zip(x[mask].tolist(), y[mask].tolist(), strict=True)))
            assert chosen[0] == chosen[1] and len(chosen[0]) > 0
    assert dropped > 0
    with pytest.raises(ValueError, match="top_k"):
        dice_all_pairs(wa, wb, top_k=0)


@pytest.fixture(scope="module")
def cohort_words() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Encodings of a synthetic cohort (real Bloom filters: uneven bit frequencies, true
    matches among many near ones)."""
    from linkage import encode
    from vfl.datasets import identity_schema, make_lab_imaging_cohort

    lab, imaging, _ = make_lab_imaging_cohort(1500, overlap=0.6, typo_rate=0.2, random_state=0)
    secret = b"k" * 32
    schema = identity_schema()
    return encode(lab, schema, secret=secret).words, encode(imaging, schema, secret=secret).words


def test_the_screen_keeps_exactly_the_pairs_and_scores_of_the_full_product(
    cohort_words: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``best=False`` on NumPy from floor 0.7: the screen (a product of the most frequent
    bits, bounds, the rest from the packed words) keeps every pair the full product keeps,
    with the same scores bit for bit, and the same top-k selection; a block where the
    screen lets too much through falls back to the full product, with the same result."""
    import linkage.kernels as kernels

    wa, wb = cohort_words
    screened = {"kept": 0, "refused": 0}
    real_block = kernels._Screen.block

    def counting(self: Any, *args: Any) -> Any:
        found = real_block(self, *args)
        screened["kept" if found is not None else "refused"] += 1
        return found

    monkeypatch.setattr(kernels._Screen, "block", counting)
    for floor in (0.7, 0.8, 0.9):
        for chunk, tile in ((2048, 16384), (333, 500)):
            kw: dict[str, Any] = {"floor": floor, "backend": "numpy", "chunk": chunk, "tile": tile}
            ia, ib, s, _ = dice_all_pairs(wa, wb, **kw)
            ja, jb, t, _ = dice_all_pairs(wa, wb, best=False, **kw)
            o, p = np.lexsort((ib, ia)), np.lexsort((jb, ja))
            assert len(ia) > 0
            np.testing.assert_array_equal(np.stack([ia[o], ib[o]]), np.stack([ja[p], jb[p]]))
            np.testing.assert_array_equal(s[o], t[p])
            ka, kb, u, _ = dice_all_pairs(wa, wb, best=False, top_k=2, **kw)
            q = np.lexsort((kb, ka))
            mine = top_k_pairs(ka[q], kb[q], u[q], 2)
            theirs = top_k_pairs(ia[o], ib[o], s[o], 2)
            assert sorted(zip(ka[q][mine].tolist(), kb[q][mine].tolist(), strict=True)) == sorted(
                zip(ia[o][theirs].tolist(), ib[o][theirs].tolist(), strict=True)
            )
    assert screened["kept"] > 0
    # a share of 0 lets nothing be screened out at floor 0.7: the first block falls back
    monkeypatch.setattr(kernels, "SCREEN_PASS", 0.0)
    before = dict(screened)
    ia, ib, s, _ = dice_all_pairs(wa, wb, floor=0.7, backend="numpy")
    ja, jb, t, _ = dice_all_pairs(wa, wb, floor=0.7, backend="numpy", best=False)
    assert screened["refused"] == before["refused"] + 1 and screened["kept"] == before["kept"]
    o, p = np.lexsort((ib, ia)), np.lexsort((jb, ja))
    np.testing.assert_array_equal(s[o], t[p])


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_row_inputs_and_empty_filters(backend: str) -> None:
    rng = np.random.default_rng(9)
    wa, wb = random_filters(rng, 40, 30, 2)
    for x, y in ((wa[:1], wb), (wa, wb[:1]), (wa[1:2], wb[:1]), (wa[:1] * 0, wb[-1:])):
        full = brute_force(x, y)
        for floor in (0.0, 0.5, 1.0):
            check(x, y, full, floor=floor, backend=backend, chunk=3, group=4)
    empty = np.zeros((0, 2), dtype=np.uint64)
    ia, ib, scores, best = dice_all_pairs(empty, wb, backend=backend)
    assert len(ia) == len(ib) == len(scores) == 0 and best.shape == (0, 2)
    ia, _, _, best = dice_all_pairs(wa, empty, backend=backend)
    assert len(ia) == 0 and np.all(best == 0)


def test_backends_agree_and_bad_arguments_are_refused() -> None:
    rng = np.random.default_rng(3)
    wa, wb = random_filters(rng, 300, 500, 16)
    results = [dice_all_pairs(wa, wb, floor=0.5, backend=b) for b in BACKENDS]
    for other in results[1:]:
        for x, y in zip(results[0], other, strict=True):
            np.testing.assert_array_equal(np.sort(x, axis=0), np.sort(y, axis=0))
    with pytest.raises(ValueError, match="backend"):
        dice_all_pairs(wa, wb, backend="cuda")
    with pytest.raises(ValueError, match="floor"):
        dice_all_pairs(wa, wb, floor=1.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dice_cross_and_pair_scores_equal_brute_force(backend: str) -> None:
    from linkage.kernels import dice_cross, dice_of_pairs

    rng = np.random.default_rng(5)
    wa, wb = random_filters(rng, 50, 70, 2)
    full = brute_force(wa, wb)
    pop_a = np.bitwise_count(wa).sum(axis=1).astype(np.int64)
    pop_b = np.bitwise_count(wb).sum(axis=1).astype(np.int64)
    for floor in (0.3, 0.7, 1.0):
        r, c, s = dice_cross(wa, wb, pop_a, pop_b, floor=floor, backend=backend, chunk=7, tile=9)
        assert set(zip(r.tolist(), c.tolist(), strict=True)) == set(
            zip(*np.nonzero(full >= floor), strict=True)
        )
        np.testing.assert_array_equal(s, full[r, c])
    ia, ib = rng.integers(0, 50, 500), rng.integers(0, 70, 500)
    np.testing.assert_array_equal(dice_of_pairs(wa, wb, pop_a, pop_b, ia, ib), full[ia, ib])


def test_bucket_blocking_keeps_every_colliding_pair_above_keep() -> None:
    from linkage.blocking import BucketBlocking, band_keys, band_positions
    from linkage.encoding import Encodings

    rng = np.random.default_rng(6)
    wa, wb = random_filters(rng, 120, 150, 2)
    wb[5] = wa[5]  # identical filters on both sides
    a = Encodings(pd.Index(range(120)), wa, b"f")
    b = Encodings(pd.Index(range(150)), wb, b"f")
    full = brute_force(wa, wb)
    for backend in BACKENDS:
        method = BucketBlocking(band_bits=8, bands=6, keep=0.6, random_state=1, backend=backend)
        got = method.candidates(a, b)
        positions = band_positions(6, 8, 16, np.random.default_rng(1))
        collide = np.zeros_like(full, dtype=bool)
        for ka, kb in zip(band_keys(wa, positions, 8), band_keys(wb, positions, 8), strict=True):
            collide |= ka[:, None] == kb[None, :]
        collide |= (wa[:, None, :] == wb[None, :, :]).all(axis=2)
        expected = set(zip(*np.nonzero(collide & (full >= 0.6)), strict=True))
        assert set(zip(got.ia.tolist(), got.ib.tolist(), strict=True)) == expected
        assert len(got) == len(expected) and (5, 5) in expected
        assert np.all(np.diff(got.ia * 150 + got.ib) > 0)  # unique, sorted
