"""Robust aggregation kernels (horizontal.robust): each against its definition on small
cases, and bounded under Byzantine updates."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from scipy.stats import trim_mean

from horizontal.aggregate import clip_to_norm
from horizontal.robust import (
    coordinate_median,
    cosine_filter,
    krum,
    krum_scores,
    multi_krum,
    norm_bound,
    trimmed_mean,
)

# -- each kernel is its definition -----------------------------------------------------------


def test_coordinate_median_by_hand() -> None:
    assert coordinate_median([[1.0, 10.0], [2.0, 30.0], [9.0, 20.0]]).tolist() == [2.0, 20.0]
    assert coordinate_median(np.array([[1.0], [2.0], [3.0], [10.0]])).tolist() == [2.5]


def test_trimmed_mean_by_hand() -> None:
    rows = [[1.0, 5.0], [2.0, -100.0], [3.0, 6.0], [4.0, 7.0], [1000.0, 8.0]]
    # beta n = 1: each coordinate drops its own largest and smallest value
    assert trimmed_mean(rows, 0.2).tolist() == [3.0, 6.0]
    assert trimmed_mean(rows, 0.0).tolist() == pytest.approx(np.mean(rows, axis=0).tolist())
    # beta n < 1: nothing dropped
    assert trimmed_mean(rows, 0.19).tolist() == pytest.approx(np.mean(rows, axis=0).tolist())
    # 0.29 * 100 is 28.999999999999996 in floating point, still 29 dropped from each end
    squares = (np.arange(100.0) ** 2)[::-1, None]
    assert trimmed_mean(squares, 0.29).tolist() == [np.mean(np.arange(29.0, 71.0) ** 2)]


@pytest.mark.parametrize(("n", "beta"), [(10, 0.1), (10, 0.3), (7, 0.45), (100, 0.25), (5, 0.0)])
def test_trimmed_mean_is_scipys(n: int, beta: float) -> None:
    rows = np.random.default_rng(n).normal(size=(n, 6))
    np.testing.assert_allclose(trimmed_mean(rows, beta), trim_mean(rows, beta, axis=0))


def test_krum_scores_by_hand() -> None:
    # n = 5, f = 1: each point's squared distances to its n - f - 2 = 2 nearest others
    points = [[0.0], [1.0], [3.0], [7.0], [100.0]]
    scores = krum_scores(points, f=1)
    assert scores.tolist() == [1 + 9, 1 + 4, 4 + 9, 16 + 36, 93**2 + 97**2]
    assert krum(points, f=1).tolist() == [1.0]
    assert multi_krum(points, f=1, m=1).tolist() == [1.0]
    assert multi_krum(points, f=1, m=2).tolist() == [0.5]
    assert multi_krum(points, f=1, m=4).tolist() == pytest.approx([11 / 4])


@pytest.mark.parametrize(("n", "f"), [(5, 1), (7, 2), (9, 0), (10, 3)])
def test_krum_is_the_brute_force_definition(n: int, f: int) -> None:
    rows = np.random.default_rng(n + f).normal(size=(n, 4))
    expected = []
    for i in range(n):
        others = sorted(float(np.sum((rows[i] - rows[j]) ** 2)) for j in range(n) if j != i)
        expected.append(sum(others[: n - f - 2]))
    np.testing.assert_allclose(krum_scores(rows, f), expected)
    order = np.argsort(expected)
    np.testing.assert_array_equal(krum(rows, f), rows[order[0]])
    np.testing.assert_allclose(multi_krum(rows, f, n - f), rows[order[: n - f]].mean(axis=0))


@pytest.mark.parametrize(("n", "f"), [(4, 1), (6, 2), (2, 0), (8, 3)])
def test_krum_refuses_too_few_clients(n: int, f: int) -> None:
    rows = np.ones((n, 3))
    for kernel in (lambda: krum(rows, f), lambda: multi_krum(rows, f, 1)):
        with pytest.raises(ValueError, match=rf"n >= 2f \+ 3, got n={n} and f={f}"):
            kernel()


def test_krum_checks_f_and_m() -> None:
    rows = np.random.default_rng(0).normal(size=(7, 3))
    for f in (-1, 1.5, True):
        with pytest.raises(ValueError, match="number of Byzantine clients"):
            krum(rows, f)  # type: ignore[arg-type]
    for m in (0, 6, 2.0):
        with pytest.raises(ValueError, match=r"m an integer from 1 to n - f = 5 \(n=7, f=2\)"):
            multi_krum(rows, 2, m)  # type: ignore[arg-type]


def test_norm_bound_is_clip_to_norm_per_row() -> None:
    rows = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [-30.0, 40.0]])
    bounded = norm_bound(rows, 1.0)
    expected = [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0], [-0.6, 0.8]]
    np.testing.assert_allclose(bounded, expected, rtol=1e-15, atol=0)
    for row, out in zip(rows, bounded, strict=True):
        np.testing.assert_allclose(out, clip_to_norm(row, 1.0)[0])
    assert rows[0].tolist() == [3.0, 4.0]  # the input is left alone
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="max_norm must be positive and finite"):
            norm_bound(rows, bad)


def test_cosine_filter_by_hand() -> None:
    rows = [[1.0, 0.0], [1.0, 0.1], [0.9, 0.0], [1.0, -0.1], [-5.0, 0.0], [0.0, 0.0]]
    # median [0.95, 0]: the sign-flipped row has similarity -1, the zero row 0
    kept, mean = cosine_filter(rows, 0.5)
    assert kept.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(mean, np.mean(rows[:4], axis=0))
    kept, _ = cosine_filter(rows, 0.0)
    assert kept.tolist() == [0, 1, 2, 3, 5]
    kept, _ = cosine_filter(rows, -1.0)
    assert kept.tolist() == list(range(6))
    with pytest.raises(ValueError, match=r"no update has a cosine similarity of at least 0\.5"):
        cosine_filter([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], 0.5)  # median [0, 0]
    with pytest.raises(ValueError, match="from -1 to 1"):
        cosine_filter(rows, 1.5)


# -- bounded under Byzantine clients ---------------------------------------------------------

N_HONEST, F, D = 8, 3, 20


def honest_updates(seed: int = 0) -> np.ndarray:
    draw = np.random.default_rng(seed)
    center = draw.normal(size=D)
    return center + 0.1 * draw.normal(size=(N_HONEST, D))


def attack(kind: str, honest: np.ndarray, seed: int = 1) -> np.ndarray:
    draw = np.random.default_rng(seed)
    if kind == "huge":
        return np.full((F, D), 1e6)
    if kind == "huge_scattered":
        return 1e6 * draw.normal(size=(F, D))
    if kind == "sign_flip":
        return -100.0 * honest.mean(axis=0) + 0.01 * draw.normal(size=(F, D))
    raise AssertionError(kind)


ROBUST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "median": coordinate_median,
    "trimmed_mean": lambda rows: trimmed_mean(rows, 0.3),  # floor(0.3 * 11) = 3 = F
    "krum": lambda rows: krum(rows, F),
    "multi_krum": lambda rows: multi_krum(rows, F, N_HONEST),
}


@pytest.mark.parametrize("kind", ["huge", "huge_scattered", "sign_flip"])
@pytest.mark.parametrize("name", ROBUST)
def test_robust_aggregate_stays_within_the_honest_updates(name: str, kind: str) -> None:
    honest = honest_updates()
    byzantine = attack(kind, honest)
    for order in (np.r_[:11], np.random.default_rng(2).permutation(11)):  # position is no clue
        rows = np.vstack([honest, byzantine])[order]
        out = ROBUST[name](rows)
        # every coordinate within the honest clients' range, so within its width of their mean
        low, high = honest.min(axis=0), honest.max(axis=0)
        assert np.all((low - 1e-12 <= out) & (out <= high + 1e-12))
        width = float(np.linalg.norm(high - low))
        assert np.linalg.norm(out - honest.mean(axis=0)) <= width < 2.0
        # while the plain mean is dragged far away
        assert np.linalg.norm(rows.mean(axis=0) - honest.mean(axis=0)) > 10 * width


def test_cosine_filter_drops_sign_flips_but_misses_scaling() -> None:
    honest = honest_updates()
    kept, mean = cosine_filter(np.vstack([honest, attack("sign_flip", honest)]), 0.5)
    assert kept.tolist() == list(range(N_HONEST))
    np.testing.assert_allclose(mean, honest.mean(axis=0))
    # model replacement scaled along the honest direction passes (cosine ignores magnitude) ...
    scaled = np.vstack([honest, 1e3 * honest[:F]])
    kept, mean = cosine_filter(scaled, 0.5)
    assert kept.tolist() == list(range(N_HONEST + F))
    assert np.linalg.norm(mean) > 100 * np.linalg.norm(honest.mean(axis=0))
    # ... which norm bounding limits
    bound = float(np.linalg.norm(honest, axis=1).max())
    _, mean = cosine_filter(norm_bound(scaled, bound), 0.5)
    assert np.linalg.norm(mean - honest.mean(axis=0)) < 2 * F * bound / (N_HONEST + F)


@pytest.mark.parametrize("kind", ["huge", "huge_scattered", "sign_flip"])
def test_norm_bound_limits_what_f_clients_move_the_mean(kind: str) -> None:
    honest = honest_updates()
    n = N_HONEST + F
    clean = np.vstack([honest, honest_updates(seed=5)[:F]])  # the F clients behaving
    attacked = np.vstack([honest, attack(kind, honest)])
    bound = 1.0
    shift = norm_bound(attacked, bound).mean(axis=0) - norm_bound(clean, bound).mean(axis=0)
    assert 0 < np.linalg.norm(shift) <= 2 * F * bound / n + 1e-12
    assert np.linalg.norm(attacked.mean(axis=0) - clean.mean(axis=0)) > 100


# -- bad input -------------------------------------------------------------------------------

KERNELS: dict[str, Callable[[list[list[float]]], object]] = {
    "median": coordinate_median,
    "trimmed_mean": lambda rows: trimmed_mean(rows, 0.1),
    "krum": lambda rows: krum(rows, 0),
    "multi_krum": lambda rows: multi_krum(rows, 0, 2),
    "norm_bound": lambda rows: norm_bound(rows, 1.0),
    "cosine_filter": lambda rows: cosine_filter(rows, 0.0),
}


@pytest.mark.parametrize("name", KERNELS)
def test_bad_input_is_refused(name: str) -> None:
    kernel = KERNELS[name]
    good = [[1.0, 2.0], [1.5, 2.5], [0.5, 1.5], [1.0, 2.1]]
    kernel(good)  # the good case runs
    with pytest.raises(ValueError, match="no updates to aggregate"):
        kernel([])
    with pytest.raises(ValueError, match=r"flat vectors of one length, got shapes \[\(2,\), \(3,"):
        kernel([*good[:3], [1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match=r"must be finite; NaN or infinity in update\(s\) \[2\]"):
        kernel([*good[:2], [np.nan, 1.0], good[3]])
    with pytest.raises(ValueError, match=r"must be finite; NaN or infinity in update\(s\) \[0\]"):
        kernel(np.array([[np.inf, 1.0], *good[1:]]))  # type: ignore[arg-type]


def test_trimmed_mean_refuses_beta_that_would_drop_everything() -> None:
    rows = np.ones((4, 2))
    for beta in (0.5, 0.7, -0.1):
        with pytest.raises(ValueError, match=r"beta must be in \[0, 0.5\)"):
            trimmed_mean(rows, beta)
    assert trimmed_mean(rows, 0.49).tolist() == [1.0, 1.0]


def test_krum_validity_over_every_small_n_and_f() -> None:
    for n, f in itertools.product(range(1, 9), range(4)):
        rows = np.random.default_rng(n).normal(size=(n, 2))
        if n >= 2 * f + 3:
            assert krum_scores(rows, f).shape == (n,)
        else:
            with pytest.raises(ValueError, match=f"n={n} and f={f}"):
                krum_scores(rows, f)
