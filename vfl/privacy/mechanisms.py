"""Differential-privacy mechanisms as pure, vectorised numpy functions.

* :func:`laplace` -- add Laplace noise of scale ``sensitivity / epsilon`` (L1 sensitivity);
  pure ``epsilon``-DP.
* :func:`gaussian` -- add Gaussian noise calibrated to ``(epsilon, delta)`` (L2 sensitivity),
  by the classic bound or the analytic calibration of Balle and Wang (2018);
  :func:`gaussian_sigma` returns the standard deviation alone and :func:`gaussian_noise` draws
  noise of a known standard deviation (DP-SGD's ``noise_multiplier * max_norm``).
* :func:`exponential` -- pick an index with probability proportional to
  ``exp(epsilon * score / (2 * sensitivity))`` (McSherry and Talwar 2007); pure ``epsilon``-DP.
* :func:`randomized_response` -- keep each class code with probability
  ``e^eps / (e^eps + K - 1)``, else replace it by another class drawn uniformly (Warner 1965;
  the label-DP mechanism of Ghazi et al. 2021); pure ``epsilon``-DP per code.
* :func:`clip_l2` -- bound each row's L2 norm, which sets the sensitivity the Gaussian
  mechanism is calibrated to.

Noise comes from a fresh generator seeded with 128 bits from the OS (:mod:`secrets`) on each
call; no function takes a seed or a generator, so a release cannot be replayed (STYLE item 6).
Tests check the noise by its statistics. The mechanisms do not record what they spend: the
caller writes each release to a :class:`~vfl.privacy.PrivacyLedger`.

.. warning::
   The noise is drawn in double-precision floating point. Mironov (2012, "On significance of
   the least significant bits for differential privacy") shows that the set of floats a
   textbook Laplace sampler can output leaks the unnoised value; the same holds for Gaussian
   samplers. These functions do not defend against that attack (no snapping, no discrete
   sampler): release rounded values or use them where the adversary sees aggregates only.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from vfl.privacy.checks import check_positive_finite, check_probability

__all__ = [
    "CALIBRATIONS",
    "clip_l2",
    "exponential",
    "gaussian",
    "gaussian_noise",
    "gaussian_sigma",
    "laplace",
    "laplace_scale",
    "randomized_response",
]

FloatArray = NDArray[np.float64]


def _os_rng() -> np.random.Generator:
    """A generator freshly seeded from 128 bits of OS randomness."""
    return np.random.Generator(np.random.PCG64(secrets.randbits(128)))


def _finite_array(values: ArrayLike, name: str) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(array)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name} has {int(bad.sum())} non-finite entries (the first at index {first}); "
            "noise cannot hide NaN or inf: impute or drop them before the release"
        )
    return array


def laplace_scale(*, sensitivity: float, epsilon: float) -> float:
    """Scale ``b = sensitivity / epsilon`` of the Laplace mechanism.

    Parameters
    ----------
    sensitivity : float
        The L1 sensitivity: the most the released values can change, summed over coordinates,
        when one person's data changes.
    epsilon : float
        The privacy budget of the release (pure epsilon-DP).

    Returns
    -------
    float
        The scale ``b``; the noise's standard deviation is ``sqrt(2) * b``.

    Raises
    ------
    ValueError
        If ``sensitivity`` or ``epsilon`` is not a positive finite number.
    """
    sensitivity = check_positive_finite("sensitivity", sensitivity)
    epsilon = check_positive_finite("epsilon", epsilon)
    return sensitivity / epsilon


def laplace(values: ArrayLike, *, sensitivity: float, epsilon: float) -> FloatArray:
    """Release ``values`` plus independent Laplace noise of scale ``sensitivity / epsilon``.

    The Laplace mechanism (Dwork, McSherry, Nissim and Smith 2006) is ``epsilon``-DP for a
    query of L1 sensitivity ``sensitivity``.

    Parameters
    ----------
    values : array_like
        The exact answer, of any shape; every entry must be finite.
    sensitivity : float
        The query's L1 sensitivity.
    epsilon : float
        The privacy budget of this release.

    Returns
    -------
    numpy.ndarray
        ``values`` (as float64, same shape) plus the noise.

    Raises
    ------
    ValueError
        If a parameter is not a positive finite number, or ``values`` holds NaN or inf.
    """
    scale = laplace_scale(sensitivity=sensitivity, epsilon=epsilon)
    array = _finite_array(values, "values")
    return array + _os_rng().laplace(0.0, scale, size=array.shape)


def _classic_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    if epsilon >= 1:
        raise ValueError(
            f"the classic Gaussian calibration holds only for epsilon < 1, got epsilon={epsilon};"
            " use calibration='analytic', which holds for every epsilon"
        )
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def _analytic_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """Exact delta of the Gaussian mechanism at ``epsilon`` (Balle and Wang 2018, Thm. 8)."""
    from scipy.special import log_ndtr, ndtr

    upper = sensitivity / (2.0 * sigma) - epsilon * sigma / sensitivity
    lower = -sensitivity / (2.0 * sigma) - epsilon * sigma / sensitivity
    # exp(epsilon) * Phi(lower) in log space: exp(epsilon) alone overflows for large epsilon.
    return float(ndtr(upper) - math.exp(epsilon + float(log_ndtr(lower))))


def _analytic_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    # delta(sigma) falls strictly from 1 towards 0 as sigma grows: bracket, then bisect.
    high = sensitivity
    while _analytic_delta(high, sensitivity, epsilon) > delta:
        high *= 2.0
    low = high / 2.0
    while _analytic_delta(low, sensitivity, epsilon) <= delta:
        low, high = low / 2.0, low
    while high - low > 1e-15 * high:
        middle = 0.5 * (low + high)
        if _analytic_delta(middle, sensitivity, epsilon) > delta:
            low = middle
        else:
            high = middle
    return high


CALIBRATIONS: dict[str, Callable[[float, float, float], float]] = {
    "classic": _classic_sigma,
    "analytic": _analytic_sigma,
}
"""Gaussian calibrations by name: ``(sensitivity, epsilon, delta) -> sigma``."""


def gaussian_sigma(
    *,
    sensitivity: float,
    epsilon: float,
    delta: float,
    calibration: str = "analytic",
) -> float:
    """Standard deviation of Gaussian noise that makes a release ``(epsilon, delta)``-DP.

    Parameters
    ----------
    sensitivity : float
        The query's L2 sensitivity (for clipped gradients, the clipping norm).
    epsilon : float
        The privacy budget of this release.
    delta : float
        The probability, in ``(0, 1)``, with which the epsilon bound may fail; well below
        ``1 / n`` for ``n`` people.
    calibration : {"analytic", "classic"}
        ``"classic"``: ``sensitivity * sqrt(2 ln(1.25 / delta)) / epsilon`` (Dwork and Roth
        2014, Thm. A.1), proven for ``epsilon < 1`` only. ``"analytic"``: the smallest sigma
        with ``Phi(D/(2s) - eps*s/D) - exp(eps) * Phi(-D/(2s) - eps*s/D) <= delta`` (Balle and
        Wang 2018, "Improving the Gaussian mechanism for differential privacy", Thm. 8), found
        by bisection to a relative 1e-15; exact for every epsilon and never above the classic
        sigma.

    Returns
    -------
    float
        The noise standard deviation ``sigma``.

    Raises
    ------
    ValueError
        If a parameter is out of range, ``calibration`` is unknown (the valid names are
        listed), or ``calibration="classic"`` with ``epsilon >= 1``.
    """
    sensitivity = check_positive_finite("sensitivity", sensitivity)
    epsilon = check_positive_finite("epsilon", epsilon)
    delta = check_probability("delta", delta)
    if calibration not in CALIBRATIONS:
        raise ValueError(
            f"unknown calibration {calibration!r}; valid calibrations: {sorted(CALIBRATIONS)}"
        )
    return CALIBRATIONS[calibration](sensitivity, epsilon, delta)


def gaussian_noise(shape: int | tuple[int, ...], *, sigma: float) -> FloatArray:
    """Independent ``N(0, sigma**2)`` noise of the given shape, for a caller that knows sigma.

    Parameters
    ----------
    shape : int or tuple of int
        The shape of the noise array.
    sigma : float
        The standard deviation, e.g. ``noise_multiplier * max_norm`` in DP-SGD.

    Returns
    -------
    numpy.ndarray
        float64 noise.

    Raises
    ------
    ValueError
        If ``sigma`` is not a positive finite number or ``shape`` has a negative size.
    """
    sigma = check_positive_finite("sigma", sigma)
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in dims):
        raise ValueError(f"shape must be non-negative integers, got {shape!r}")
    return _os_rng().normal(0.0, sigma, size=dims)


def gaussian(
    values: ArrayLike,
    *,
    sensitivity: float,
    epsilon: float,
    delta: float,
    calibration: str = "analytic",
) -> FloatArray:
    """Release ``values`` plus Gaussian noise that makes the release ``(epsilon, delta)``-DP.

    Parameters
    ----------
    values : array_like
        The exact answer, of any shape; every entry must be finite.
    sensitivity, epsilon, delta, calibration
        As in :func:`gaussian_sigma`.

    Returns
    -------
    numpy.ndarray
        ``values`` (as float64, same shape) plus the noise.

    Raises
    ------
    ValueError
        As :func:`gaussian_sigma`, or if ``values`` holds NaN or inf.
    """
    sigma = gaussian_sigma(
        sensitivity=sensitivity, epsilon=epsilon, delta=delta, calibration=calibration
    )
    array = _finite_array(values, "values")
    return array + _os_rng().normal(0.0, sigma, size=array.shape)


def exponential(scores: ArrayLike, *, sensitivity: float, epsilon: float) -> int:
    """Pick an index ``i`` with probability proportional to ``exp(eps * s_i / (2 * sens))``.

    The exponential mechanism (McSherry and Talwar 2007) is ``epsilon``-DP when each score
    changes by at most ``sensitivity`` with one person's data. Sampled by the Gumbel-max trick
    (the argmax of the scaled scores plus independent standard Gumbel noise), which draws from
    exactly these probabilities without exponentiating, so large scores cannot overflow.

    Parameters
    ----------
    scores : array_like
        One finite score per candidate, 1-D, at least one.
    sensitivity : float
        The most any score changes with one person's data.
    epsilon : float
        The privacy budget of this selection.

    Returns
    -------
    int
        The chosen index.

    Raises
    ------
    ValueError
        If ``scores`` is not a non-empty 1-D array of finite numbers, or a parameter is not a
        positive finite number.
    """
    sensitivity = check_positive_finite("sensitivity", sensitivity)
    epsilon = check_positive_finite("epsilon", epsilon)
    array = _finite_array(scores, "scores")
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {array.shape}")
    logits = (epsilon / (2.0 * sensitivity)) * array
    return int(np.argmax(logits + _os_rng().gumbel(size=array.shape)))


def randomized_response(codes: ArrayLike, *, classes: int, epsilon: float) -> NDArray[np.int64]:
    """K-ary randomised response: each code kept with probability ``e^eps / (e^eps + K - 1)``,
    otherwise replaced by one of the other ``K - 1`` classes, uniformly.

    Any two codes are output with probabilities within a factor ``e^eps`` of each other, so
    each released code is ``epsilon``-DP for the code it hides (Warner 1965); applied to
    labels, everything computed from the released labels is ``epsilon``-label-DP (Ghazi et
    al. 2021, "Deep Learning with Label Differential Privacy"). The caller records the spend
    (:func:`vfl.privacy.record_randomized_response`).

    Parameters
    ----------
    codes : array_like of int
        Class codes in ``0 .. classes - 1``, one per record.
    classes : int
        ``K``, the number of classes (at least 2).
    epsilon : float
        The privacy budget per code.

    Returns
    -------
    numpy.ndarray
        int64 codes of the same shape.

    Raises
    ------
    ValueError
        If ``classes`` is not an integer >= 2, ``epsilon`` is not a positive finite number,
        or a code is not an integer in ``0 .. classes - 1``.
    """
    epsilon = check_positive_finite("epsilon", epsilon)
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2, got {classes!r}")
    array = np.asarray(codes)
    if array.dtype.kind not in "iuf" or not np.isfinite(array).all():
        raise ValueError(f"codes must be integer class codes, got {array.dtype} values")
    as_int = array.astype(np.int64)
    bad = (as_int != array) | (as_int < 0) | (as_int >= classes)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"codes must be integers in 0..{classes - 1}; {int(bad.sum())} are not (the first, "
            f"{array[first]!r}, at index {first})"
        )
    draw = _os_rng()
    keep = 1.0 / (1.0 + (classes - 1) * math.exp(-epsilon))  # e^eps / (e^eps + K - 1)
    flip = draw.random(as_int.shape) >= keep
    shift = draw.integers(1, classes, size=as_int.shape)
    out: NDArray[np.int64] = np.where(flip, (as_int + shift) % classes, as_int)
    return out


@overload
def clip_l2(
    vectors: ArrayLike, *, max_norm: float, return_fraction: Literal[False] = ...
) -> FloatArray: ...


@overload
def clip_l2(
    vectors: ArrayLike, *, max_norm: float, return_fraction: Literal[True]
) -> tuple[FloatArray, float]: ...


def clip_l2(
    vectors: ArrayLike, *, max_norm: float, return_fraction: bool = False
) -> FloatArray | tuple[FloatArray, float]:
    """Scale each row whose L2 norm exceeds ``max_norm`` down to norm ``max_norm``.

    Rows at or under the bound are returned unchanged, bit for bit; clipped rows keep their
    direction. After clipping, one row changes a sum of rows by at most ``max_norm`` in L2
    (add or remove one row), the sensitivity :func:`gaussian` is calibrated to.

    Parameters
    ----------
    vectors : array_like
        A 2-D array (one vector per row, e.g. per-example gradients) or a single 1-D vector;
        every entry must be finite.
    max_norm : float
        The clipping bound ``C``.
    return_fraction : bool
        Also return the fraction of rows that were clipped (a tuning signal: most rows clipped
        means ``C`` is too small).

    Returns
    -------
    numpy.ndarray or (numpy.ndarray, float)
        A new float64 array of the input's shape with every row's norm at most ``max_norm``;
        with ``return_fraction``, also the clipped fraction (0.0 for no rows).

    Raises
    ------
    ValueError
        If ``max_norm`` is not a positive finite number, ``vectors`` is not 1-D or 2-D, or it
        holds NaN or inf.
    """
    max_norm = check_positive_finite("max_norm", max_norm)
    array = _finite_array(vectors, "vectors")
    if array.ndim not in (1, 2):
        raise ValueError(
            f"vectors must be a 1-D vector or a 2-D array of row vectors, got shape {array.shape}"
        )
    rows = array.reshape(1, -1) if array.ndim == 1 else array
    norms = np.linalg.norm(rows, axis=1)
    over = norms > max_norm
    clipped = rows.copy()
    clipped[over] *= (max_norm / norms[over])[:, np.newaxis]
    # Rounding can leave a scaled row a few ulps over the bound; pull those just under it.
    new_norms = np.linalg.norm(clipped, axis=1)
    still_over = new_norms > max_norm
    if still_over.any():
        shrink = np.nextafter(max_norm / new_norms[still_over], 0.0) * (1.0 - 2.0**-50)
        clipped[still_over] *= shrink[:, np.newaxis]
    result: FloatArray = clipped.reshape(array.shape)
    if return_fraction:
        fraction = float(over.mean()) if over.size else 0.0
        return result, fraction
    return result
