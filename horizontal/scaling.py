"""Standardisation under differential privacy: the pooled column means and deviations from
noisy statistics, or from public bounds alone.

Without DP every client sends its exact column sums and sums of squares at setup
(:mod:`horizontal.training`). Under DP (an estimator with ``privacy=``) ``standardize=True``
(or a :class:`DPScaling`) releases them through the Gaussian mechanism instead, each client
adding its own noise before anything leaves it, and records the spend in the privacy ledger:

1. **bounds**, unless given: each client sends, per column, a noisy histogram of its values
   by signed power of two (bins ``[2^e, 2^(e+1))`` and their negatives for ``e`` from -20
   to 20, and one bin around 0). One record adds one to one bin of each column: L2
   sensitivity ``sqrt(d)``. The server sums the histograms and finds, per column, the run
   of powers of two around the fullest one whose counts stand above the noise, and which
   signs hold values (:func:`bounds_from_histogram`): the column's clipping bounds;
2. **moments**: each client maps every value into ``[-1, 1]`` with the bounds (``u = (x -
   centre) / half-width``, clipped) and sends the noisy sums of ``u`` and ``u^2`` per column
   (L2 sensitivity ``sqrt(2 d)``). The server pools them into means and deviations.

The two releases use one noise multiplier (from ``epsilon`` at the privacy object's delta,
calibrated to both by dp-accounting) and are recorded per client: ``holder`` the client,
``data`` "its records (column statistics for standardisation)". The guarantee is per record,
adding or removing one (DP-SGD's neighbouring relation). Under :class:`~horizontal.privacy.
ClientDP` (client-level, recorded for "every client") a client's records are covered by both
spends, and :func:`horizontal.privacy.largest_epsilon` composes them; the client-level
guarantee itself covers the model, not these statistics (a client's whole table moves them
by far more than one record).

The row counts are used exactly: the protocol sends them already (each update carries its
client's count, which DP does not cover here; see :mod:`horizontal.privacy`).

With ``bounds`` given (public ranges, e.g. from a data dictionary), step 1 is skipped; with
``epsilon=None`` as well, nothing is released: the columns are scaled from the bounds alone
(their centre to 0, their half-width to 1), at no privacy cost.

.. warning::
   Values beyond the bounds are clipped in the statistics (not in training): a column whose
   tail holds few rows is scaled by its bulk. Noisy statistics give approximate means and
   deviations: at epsilon 1 over ten clients of 300 rows, the scales of columns around 0
   came within a factor 0.5 to 2.3 of the true ones (tests/horizontal/test_scaling.py) --
   what the model needs is columns on comparable scales, not exact ones. A column whose
   spread is far below its offset (a year, 2010 +- 6) is measured in a range its offset
   sets, where the noise floors its variance: its scale errs high and its values end up
   near 0 after scaling; give such columns ``bounds`` (or centre them) first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from horizontal.training import FED
from vfl.federation.base import Federation
from vfl.federation.messages import Message

__all__ = [
    "EXPONENTS",
    "THRESHOLD",
    "Bounds",
    "DPScaling",
    "Moments",
    "bin_edges",
    "bounds_from_histogram",
    "moments",
    "scaling_from_moments",
    "signed_histogram",
]

Vector = np.ndarray[Any, Any]

EXPONENTS = (-20, 20)
"""The powers of two the histogram's bins span (magnitudes below ``2^-20`` share the bin
around 0; those of ``2^20`` and more the outermost bins)."""
THRESHOLD = 4.0
"""A sign of a column holds values when its pooled noisy count over the column's run of
magnitudes exceeds this many deviations of that sum's noise (by chance once in 30,000)."""
FLOOR = 1e-4
"""The smallest variance of ``u`` kept (noise can make the estimate negative): a column's
scale is at least a hundredth of its half-width."""


# -- pure kernels -----------------------------------------------------------------------------


def bin_edges() -> tuple[Vector, Vector]:
    """The histogram's bins as ``(lower, upper)`` edges, from the most negative to the most
    positive: ``-[2^(e+1), 2^e)``, ..., the bin around 0, ..., ``[2^e, 2^(e+1))``."""
    low, high = EXPONENTS
    powers = 2.0 ** np.arange(low, high + 1)  # 2^low .. 2^high
    positive_low, positive_high = powers, np.append(powers[1:], 2.0 * powers[-1])
    lower = np.concatenate([-positive_high[::-1], [-powers[0]], positive_low])
    upper = np.concatenate([-positive_low[::-1], [powers[0]], positive_high])
    return lower, upper


def signed_histogram(values: Vector) -> Vector:
    """Per column, the count of values in each bin of :func:`bin_edges` (shape ``(columns,
    bins)``); each row adds one to one bin of each column."""
    low, high = EXPONENTS
    width = high - low + 1  # bins on each side
    x = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(x)
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    offset = np.clip(exponent - low, 0, width - 1).astype(np.int64)
    index = np.where(x > 0, width + 1 + offset, width - 1 - offset)
    index = np.where(magnitude < 2.0**low, width, index)
    counts = np.zeros((x.shape[1], 2 * width + 1))
    for j in range(x.shape[1]):
        counts[j] = np.bincount(index[:, j], minlength=2 * width + 1)
    return counts


def bounds_from_histogram(counts: Vector, noise: float) -> tuple[Vector, Vector]:
    """Per column, clipping bounds from the pooled noisy counts of :func:`signed_histogram`
    (``noise``: the deviation of one pooled count's noise).

    First the magnitudes: the two signs' counts of each power of two are added (noise
    ``sqrt(2) noise``), and from the fullest magnitude the run of magnitudes whose count
    exceeds twice its noise gives the range ``[2^a, 2^b)`` the column's bulk spans (tails
    thinner than that are cut off). Then the signs: a sign holds values when its count over
    the run exceeds ``THRESHOLD`` times that sum's noise. Both signs: ``[-2^b, 2^b]``; one:
    ``[2^a, 2^b]`` or its negative -- a column far from 0 keeps its offset out of the range
    its spread is measured in. The bin around 0 counts for neither sign: a column with a
    run and no sign (all of it near 0) gets ``[-2^b, 2^b]``.
    """
    lower_edges, upper_edges = bin_edges()
    middle = len(lower_edges) // 2  # the bin around 0; magnitude k is bins middle -/+ (k + 1)
    lower, upper = np.empty(len(counts)), np.empty(len(counts))
    for j, row in enumerate(np.asarray(counts, dtype=np.float64)):
        negative, positive = row[middle - 1 :: -1], row[middle + 1 :]  # by magnitude, upwards
        magnitude = negative + positive
        floor = 2 * noise * np.sqrt(2)
        first = last = int(np.argmax(magnitude))
        while last + 1 < len(magnitude) and magnitude[last + 1] > floor:
            last += 1
        while first > 0 and magnitude[first - 1] > floor:
            first -= 1
        run = slice(first, last + 1)
        enough = THRESHOLD * noise * np.sqrt(last - first + 1)
        has_negative, has_positive = negative[run].sum() > enough, positive[run].sum() > enough
        top = upper_edges[middle + 1 + last]  # 2^b
        if has_positive and not has_negative:
            lower[j], upper[j] = lower_edges[middle + 1 + first], top
        elif has_negative and not has_positive:
            lower[j], upper[j] = -top, -lower_edges[middle + 1 + first]
        else:
            lower[j], upper[j] = -top, top
    return lower, upper


def moments(values: Vector, lower: Vector, upper: Vector) -> tuple[Vector, Vector]:
    """Per column, the sums of ``u`` and ``u^2``, ``u = (x - centre) / half-width`` clipped
    to ``[-1, 1]``: each row moves each sum by at most 1."""
    centre, half = (upper + lower) / 2, (upper - lower) / 2
    u = np.clip((np.asarray(values, dtype=np.float64) - centre) / half, -1.0, 1.0)
    return u.sum(axis=0), (u**2).sum(axis=0)


def scaling_from_moments(
    sums: Vector,
    squares: Vector,
    rows: int,
    lower: Vector,
    upper: Vector,
    noise: float = 0.0,
) -> tuple[Vector, Vector]:
    """The means and deviations of the columns from the pooled (noisy) sums of :func:`moments`
    over ``rows`` rows. ``noise``, the deviation of the pooled sums' noise, floors the
    variance of ``u`` at ``noise / rows``, the noise of its estimate: a spread the noise can
    hide is not trusted below it (a column's scale errs high, never towards 0)."""
    centre, half = (upper + lower) / 2, (upper - lower) / 2
    mean_u = np.clip(sums / rows, -1.0, 1.0)
    var_u = np.maximum(squares / rows - mean_u**2, max(FLOOR, noise / rows))
    return centre + half * mean_u, half * np.sqrt(var_u)


# -- messages ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds(Message):
    """The server to every client: the columns' clipping bounds (the target last, for a
    regression), found from the noisy histograms."""

    KIND = "clipping bounds"
    lower: np.ndarray
    upper: np.ndarray


@dataclass(frozen=True)
class Moments(Message):
    """A client to the server: its noisy sums of ``u`` and ``u^2`` per column."""

    KIND = "noisy column moments"
    sums: np.ndarray
    squares: np.ndarray


# -- the configuration and its two roles ----------------------------------------------------------


@dataclass(frozen=True)
class DPScaling:
    """How to standardise under DP (see the module docstring); ``standardize=True`` with
    ``privacy=`` is ``DPScaling()``.

    Parameters
    ----------
    epsilon : float or None
        What each client spends on its statistics (record-level, at the privacy object's
        delta), default 1; None with ``bounds``: nothing released, scaled from the bounds.
    noise_multiplier : float, optional
        The Gaussian noise over the sensitivity; when given, it overrides ``epsilon``.
    bounds : (lower, upper), optional
        Public bounds of the feature columns (scalars, or one per column); skips the
        histogram step.
    target_bounds : (lower, upper), optional
        A regression's target's public bounds (needed with ``bounds``).
    """

    epsilon: float | None = 1.0
    noise_multiplier: float | None = None
    bounds: Any = None
    target_bounds: Any = None

    def check(self, *, regression: bool = False) -> None:
        """Refuse parameters out of range (a ValueError naming them)."""
        for name in ("epsilon", "noise_multiplier"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, (int, float)) and math.isfinite(value) and value > 0
            ):
                raise ValueError(f"DPScaling: {name} must be > 0, got {value!r}")
        if regression and self.bounds is not None and self.target_bounds is None:
            raise ValueError("DPScaling: a regression with bounds= needs target_bounds=")
        if self.bounds is None and not self.releases:
            raise ValueError(
                "DPScaling: without a release (epsilon=None) the scaling comes from public "
                "bounds: pass bounds=(lower, upper)"
            )

    @property
    def releases(self) -> bool:
        """Whether the clients release noisy statistics (else: public bounds alone)."""
        return self.epsilon is not None or self.noise_multiplier is not None

    def multiplier(self, delta: float) -> float:
        """The noise multiplier of each release (both calibrated to ``epsilon`` together)."""
        if self.noise_multiplier is not None:
            return float(self.noise_multiplier)
        from vfl.privacy.accounting import noise_multiplier_for

        steps = 1 if self.bounds is not None else 2
        return float(
            noise_multiplier_for(
                epsilon=float(self.epsilon or 1.0), delta=delta, steps=steps, sampling_rate=1.0
            )
        )

    def given_bounds(self, d: int, regression: bool) -> tuple[Vector, Vector]:
        """The public bounds as arrays over the columns (and the target), checked."""
        parts = [(self.bounds, d, "bounds")]
        if regression:
            if self.target_bounds is None:
                raise ValueError("DPScaling: a regression with bounds= needs target_bounds=")
            parts.append((self.target_bounds, 1, "target_bounds"))
        lows, highs = [], []
        for given, size, name in parts:
            try:
                low, high = (
                    np.broadcast_to(np.asarray(b, dtype=np.float64), (size,)) for b in given
                )
            except (TypeError, ValueError):
                raise ValueError(
                    f"DPScaling: {name} must be (lower, upper), each a number or {size} numbers"
                ) from None
            if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
                raise ValueError(f"DPScaling: {name} must be finite with lower < upper")
            lows.append(low)
            highs.append(high)
        return np.concatenate(lows), np.concatenate(highs)

    # -- the client ---------------------------------------------------------------------------

    def client_setup(self, fed: Federation, spec: Any, x: Vector, y: Vector, profile: Any) -> None:
        """Send the server this client's profile with its noisy statistics (and, when the
        bounds are found from the data, its noisy moments once it has them); record the
        spend."""
        from vfl.privacy.mechanisms import gaussian_noise

        values = _columns(x, y, spec)
        d = values.shape[1]
        if not self.releases:
            FED.send(fed, spec.server, "profile", profile)
            return
        z = self.multiplier(spec.privacy.delta)
        if self.bounds is not None:
            lower, upper = self.given_bounds(x.shape[1], spec.task == "regression")
            sums, squares = moments(values, lower, upper)
            noise = gaussian_noise(2 * d, sigma=z * math.sqrt(2 * d))
            FED.send(
                fed,
                spec.server,
                "profile",
                _replace(profile, sums=sums + noise[:d], squares=squares + noise[d:]),
            )
        else:
            counts = signed_histogram(values)
            noisy = counts + gaussian_noise(counts.shape, sigma=z * math.sqrt(d))
            FED.send(fed, spec.server, "profile", _replace(profile, histogram=noisy.ravel()))
            bounds = FED.recv(fed, spec.server, "bounds", Bounds)
            if bounds.lower.shape != (d,) or bounds.upper.shape != (d,):
                Bounds.refuse(spec.server, "lower", f"is not {d} bounds")
            if not np.all(bounds.lower < bounds.upper):
                Bounds.refuse(spec.server, "upper", "is not above lower everywhere")
            sums, squares = moments(values, bounds.lower, bounds.upper)
            noise = gaussian_noise(2 * d, sigma=z * math.sqrt(2 * d))
            FED.send(fed, spec.server, "moments", Moments(sums + noise[:d], squares + noise[d:]))
        if spec.ledger is not None:
            spec.ledger.record(
                holder=fed.name,
                data="its records (column statistics for standardisation)",
                mechanism="gaussian",
                noise_multiplier=z,
                steps=1 if self.bounds is not None else 2,
            )

    # -- the server ---------------------------------------------------------------------------

    def server_scaling(
        self, fed: Federation, profiles: dict[str, Any], spec: Any, d: int
    ) -> tuple[Vector, Vector, float, float]:
        """The columns' means and deviations, and the target's, from the clients' noisy
        statistics (asking for their moments once the bounds are found), or from the
        bounds alone."""
        regression = spec.task == "regression"
        width = d + (1 if regression else 0)
        rows = sum(p.samples + p.holdout for p in profiles.values())
        if not self.releases:
            lower, upper = self.given_bounds(d, regression)
            mean, scale = (upper + lower) / 2, (upper - lower) / 2
        else:
            z = self.multiplier(spec.privacy.delta)
            if self.bounds is not None:
                lower, upper = self.given_bounds(d, regression)
                sums = sum(_array(p, "sums", width, c) for c, p in profiles.items())
                squares = sum(_array(p, "squares", width, c) for c, p in profiles.items())
            else:
                bins = len(bin_edges()[0])
                histograms = [
                    _array(p, "histogram", width * bins, c).reshape(width, bins)
                    for c, p in profiles.items()
                ]
                pooled_noise = z * math.sqrt(width) * math.sqrt(len(histograms))
                lower, upper = bounds_from_histogram(np.sum(histograms, axis=0), pooled_noise)
                FED.broadcast(fed, "bounds", Bounds(lower, upper), to=list(profiles))
                replies = {
                    c: Moments.from_payload(p, c)
                    for c, p in fed.gather(list(profiles), FED.tag("moments")).items()
                }
                for client, reply in replies.items():
                    for name in ("sums", "squares"):
                        value = getattr(reply, name)
                        if value.shape != (width,) or not np.all(np.isfinite(value)):
                            Moments.refuse(client, name, f"is not {width} finite numbers")
                sums = sum(r.sums.astype(np.float64) for r in replies.values())
                squares = sum(r.squares.astype(np.float64) for r in replies.values())
            noise = z * math.sqrt(2 * width) * math.sqrt(len(profiles))  # of the pooled sums
            mean, scale = scaling_from_moments(
                np.asarray(sums), np.asarray(squares), rows, lower, upper, noise
            )
        target_mean, target_scale = (float(mean[-1]), float(scale[-1])) if regression else (0, 1)
        return mean[:d], scale[:d], float(target_mean), float(target_scale)


def _columns(x: Vector, y: Vector, spec: Any) -> Vector:
    """The columns the statistics cover: the features, and a regression's target last."""
    if spec.task == "regression":
        return np.column_stack([x, np.asarray(y, dtype=np.float64)])
    return np.asarray(x, dtype=np.float64)


def _replace(profile: Any, **fields: Any) -> Any:
    from dataclasses import replace

    return replace(profile, **fields)


def _array(profile: Any, name: str, size: int, client: str) -> Vector:
    value = getattr(profile, name)
    if value is None or value.shape != (size,) or not np.all(np.isfinite(value)):
        type(profile).refuse(client, name, f"is not {size} finite numbers")
    out: Vector = value.astype(np.float64)
    return out
