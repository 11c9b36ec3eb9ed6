"""Tests for vfl.privacy.mechanisms: noise statistics, calibration, clipping, bad parameters.

The statistical tests draw from OS randomness and cannot be seeded. Each compares a sample
statistic with its formula at 5.5 standard errors of that statistic: by the central limit
theorem (n = 200,000 makes it exact to well under a percent in the tail) a check fails by
chance with probability 2 * Phi(-5.5) = 3.8e-8. The chi-square test fails by chance with
probability 1e-6, its threshold, so the whole file fails by chance below 1.3e-6.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import special, stats

from vfl.privacy import (
    clip_l2,
    exponential,
    gaussian,
    gaussian_noise,
    gaussian_sigma,
    laplace,
    laplace_scale,
    randomized_response,
)

N = 200_000
Z = 5.5  # standard errors; two-sided tail 3.8e-8


def test_laplace_noise_has_scale_sensitivity_over_epsilon() -> None:
    scale = laplace_scale(sensitivity=2.0, epsilon=0.5)
    assert scale == 4.0
    released = laplace(np.full(N, 3.0), sensitivity=2.0, epsilon=0.5)
    noise = released - 3.0
    # |noise| ~ Exponential(mean b, sd b): the mean absolute deviation has standard error b/sqrt(n).
    assert abs(np.abs(noise).mean() - scale) <= Z * scale / math.sqrt(N)
    # The noise has sd sqrt(2) b, so its mean has standard error sqrt(2) b / sqrt(n).
    assert abs(noise.mean()) <= Z * math.sqrt(2.0) * scale / math.sqrt(N)
    assert released.shape == (N,)
    assert released.dtype == np.float64


@pytest.mark.parametrize("calibration", ["classic", "analytic"])
def test_gaussian_noise_has_the_calibrated_sigma(calibration: str) -> None:
    sigma = gaussian_sigma(sensitivity=1.5, epsilon=0.8, delta=1e-6, calibration=calibration)
    values = np.full((N // 100, 100), -2.0)
    noise = gaussian(values, sensitivity=1.5, epsilon=0.8, delta=1e-6, calibration=calibration)
    noise = (noise - values).ravel()
    # For normal data the sample sd has standard error sigma / sqrt(2 (n - 1)).
    assert abs(noise.std(ddof=1) - sigma) <= Z * sigma / math.sqrt(2.0 * (N - 1))
    assert abs(noise.mean()) <= Z * sigma / math.sqrt(N)


def test_gaussian_noise_with_a_known_sigma() -> None:
    noise = gaussian_noise((400, 500), sigma=0.3)
    assert noise.shape == (400, 500)
    assert abs(noise.std(ddof=1) - 0.3) <= Z * 0.3 / math.sqrt(2.0 * (N - 1))
    assert abs(noise.mean()) <= Z * 0.3 / math.sqrt(N)
    assert gaussian_noise(7, sigma=1.0).shape == (7,)


def test_two_releases_differ() -> None:
    # No hidden fixed seed: two calls give different noise.
    assert not np.array_equal(
        laplace(np.zeros(8), sensitivity=1, epsilon=1),
        laplace(np.zeros(8), sensitivity=1, epsilon=1),
    )


def test_exponential_selects_with_softmax_probabilities() -> None:
    # Scores offset by 1000 would overflow a naive exp(epsilon * score); Gumbel-max must not.
    scores = 1000.0 + np.array([0.0, 1.0, 2.0, 3.5])
    epsilon, sensitivity, draws = 1.0, 1.0, 20_000
    counts = np.bincount(
        [exponential(scores, sensitivity=sensitivity, epsilon=epsilon) for _ in range(draws)],
        minlength=scores.size,
    )
    probabilities = special.softmax(epsilon * scores / (2.0 * sensitivity))
    assert (draws * probabilities).min() > 5  # the chi-square approximation holds
    assert stats.chisquare(counts, draws * probabilities).pvalue > 1e-6


def test_exponential_takes_a_clear_winner() -> None:
    assert exponential([0.0, 1e6, 0.0], sensitivity=1.0, epsilon=1.0) == 1
    assert exponential([5.0], sensitivity=1.0, epsilon=1.0) == 0


def _balle_wang_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    a = sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    b = -sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    return float(stats.norm.cdf(a) - math.exp(epsilon) * stats.norm.cdf(b))


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_analytic_sigma_is_below_classic_and_exact(epsilon: float, delta: float) -> None:
    analytic = gaussian_sigma(sensitivity=2.0, epsilon=epsilon, delta=delta)
    classic = gaussian_sigma(sensitivity=2.0, epsilon=epsilon, delta=delta, calibration="classic")
    assert analytic < classic
    assert classic == pytest.approx(2.0 * math.sqrt(2 * math.log(1.25 / delta)) / epsilon)
    assert abs(_balle_wang_delta(analytic, 2.0, epsilon) - delta) <= 1e-9
    assert _balle_wang_delta(analytic, 2.0, epsilon) <= delta * (1 + 1e-9)
    assert _balle_wang_delta(analytic * (1 - 1e-6), 2.0, epsilon) > delta  # the smallest


@pytest.mark.parametrize("epsilon", [1.0, 3.0, 20.0])
def test_analytic_sigma_holds_for_large_epsilon(epsilon: float) -> None:
    sigma = gaussian_sigma(sensitivity=1.0, epsilon=epsilon, delta=1e-5)
    assert abs(_balle_wang_delta(sigma, 1.0, epsilon) - 1e-5) <= 1e-9
    assert sigma == pytest.approx(dp_accounting.get_sigma_gaussian(epsilon, 1e-5), rel=1e-9)


def test_classic_calibration_refuses_epsilon_of_one_or_more() -> None:
    with pytest.raises(ValueError, match=r"epsilon < 1, got epsilon=1\.0.*'analytic'"):
        gaussian_sigma(sensitivity=1, epsilon=1.0, delta=1e-5, calibration="classic")
    with pytest.raises(ValueError, match="epsilon < 1"):
        gaussian(np.zeros(3), sensitivity=1, epsilon=4, delta=1e-5, calibration="classic")


@given(
    vectors=hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=2, max_side=12),
        elements=st.floats(-1e6, 1e6),
    ),
    max_norm=st.floats(1e-3, 1e3),
)
def test_clipping_bounds_norms_and_keeps_short_rows(vectors: np.ndarray, max_norm: float) -> None:
    original = vectors.copy()
    clipped, fraction = clip_l2(vectors, max_norm=max_norm, return_fraction=True)
    assert np.array_equal(vectors, original)  # the input is not modified
    norms = np.linalg.norm(vectors, axis=1)
    new_norms = np.linalg.norm(clipped, axis=1)
    assert (new_norms <= max_norm).all()
    short = norms <= max_norm
    assert np.array_equal(clipped[short], vectors[short])
    long = ~short
    assert np.allclose(new_norms[long], max_norm, rtol=1e-12, atol=0)
    # Clipped rows keep their direction.
    assert np.allclose(clipped[long] * norms[long, None], vectors[long] * new_norms[long, None])
    assert fraction == pytest.approx(long.mean() if long.size else 0.0)


def test_clipping_a_single_vector() -> None:
    assert np.allclose(clip_l2(np.array([3.0, 4.0]), max_norm=1.0), [0.6, 0.8])
    assert np.array_equal(clip_l2([0.3, 0.4], max_norm=1.0), [0.3, 0.4])
    clipped, fraction = clip_l2(np.zeros((0, 3)), max_norm=1.0, return_fraction=True)
    assert clipped.shape == (0, 3)
    assert fraction == 0.0


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "1"])
def test_bad_epsilon_and_sensitivity_are_named(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^epsilon must be a positive finite number, got"):
        laplace(np.zeros(2), sensitivity=1, epsilon=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^sensitivity must be a positive finite number"):
        laplace_scale(sensitivity=bad, epsilon=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^epsilon must be"):
        exponential([1.0], sensitivity=1, epsilon=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^sigma must be"):
        gaussian_noise(3, sigma=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^max_norm must be"):
        clip_l2(np.ones((2, 2)), max_norm=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, 1, 1.5, -1e-5, math.nan])
def test_bad_delta_is_named(bad: float) -> None:
    with pytest.raises(ValueError, match=rf"^delta must be a number in \(0, 1\), got {bad!r}"):
        gaussian_sigma(sensitivity=1, epsilon=0.5, delta=bad)


def test_unknown_calibration_lists_the_valid_ones() -> None:
    with pytest.raises(
        ValueError, match=r"unknown calibration 'optimal'.*\['analytic', 'classic'\]"
    ):
        gaussian(np.zeros(2), sensitivity=1, epsilon=0.5, delta=1e-5, calibration="optimal")


def test_non_finite_values_and_bad_shapes_are_refused() -> None:
    with pytest.raises(
        ValueError, match=r"values has 1 non-finite entries \(the first at index \(1,\)\)"
    ):
        laplace([0.0, math.nan, 1.0], sensitivity=1, epsilon=1)
    with pytest.raises(ValueError, match=r"vectors has 1 non-finite entries.*\(1, 0\)"):
        clip_l2([[1.0, 2.0], [math.inf, 0.0]], max_norm=1.0)
    with pytest.raises(
        ValueError, match=r"vectors must be a 1-D vector or a 2-D array.*\(2, 2, 2\)"
    ):
        clip_l2(np.ones((2, 2, 2)), max_norm=1.0)
    with pytest.raises(ValueError, match=r"scores must be a non-empty 1-D array, got shape \(0,\)"):
        exponential([], sensitivity=1, epsilon=1)
    with pytest.raises(
        ValueError, match=r"scores must be a non-empty 1-D array, got shape \(2, 2\)"
    ):
        exponential(np.ones((2, 2)), sensitivity=1, epsilon=1)
    with pytest.raises(ValueError, match=r"shape must be non-negative integers, got \(2, -1\)"):
        gaussian_noise((2, -1), sigma=1.0)


def test_randomized_response_keeps_a_code_with_e_eps_over_e_eps_plus_k_minus_1() -> None:
    classes, epsilon = 4, 1.0
    released = randomized_response(np.zeros(N, dtype=np.int64), classes=classes, epsilon=epsilon)
    assert released.shape == (N,) and released.dtype == np.int64
    keep = math.exp(epsilon) / (math.exp(epsilon) + classes - 1)
    counts = np.bincount(released, minlength=classes) / N
    # each class's share is a binomial proportion: standard error sqrt(p (1 - p) / n)
    expected = [keep, *[(1 - keep) / (classes - 1)] * (classes - 1)]
    for share, p in zip(counts, expected, strict=True):
        assert abs(share - p) <= Z * math.sqrt(p * (1 - p) / N)
    # binary: a bit flips with probability 1 / (1 + e^eps)
    bits = randomized_response(np.ones(N, dtype=np.int64), classes=2, epsilon=2.0)
    flip = 1 / (1 + math.exp(2.0))
    assert abs((bits == 0).mean() - flip) <= Z * math.sqrt(flip * (1 - flip) / N)


@pytest.mark.parametrize(
    ("codes", "options", "match"),
    [
        ([0, 1], {"classes": 1, "epsilon": 1.0}, "classes must be an integer >= 2"),
        ([0, 1], {"classes": 2, "epsilon": 0.0}, "epsilon must be a positive finite number"),
        ([0, 3, 1], {"classes": 3, "epsilon": 1.0}, r"integers in 0..2; 1 are not .* index \(1,\)"),
        ([0.5], {"classes": 2, "epsilon": 1.0}, "integers in 0..1"),
        (["a"], {"classes": 2, "epsilon": 1.0}, "integer class codes"),
    ],
)
def test_randomized_response_names_bad_parameters(
    codes: list[object], options: dict[str, float], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        randomized_response(codes, **options)  # type: ignore[arg-type]
