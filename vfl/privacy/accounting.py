"""Privacy accounting: dp-accounting events for vflink's mechanisms and the epsilon they spend.

Every epsilon and delta here is computed by Google's ``dp-accounting`` package; this module
only builds its ``DpEvent`` objects and picks an accountant by name (STYLE item 7):

* ``"rdp"`` -- Rényi-DP accounting (Mironov 2017; Mironov, Talwar and Zhang 2019 for Poisson
  subsampling); fast, a slight over-estimate.
* ``"pld"`` -- privacy-loss-distribution accounting (Koskela et al. 2020; Doroshenko et al.
  2022); tighter, slower for long schedules.

Events are built for one record of one data set, under the add-or-remove-one-record
relation DP-SGD's Poisson subsampling is analysed in:

* :func:`gaussian_event` -- ``steps`` Gaussian releases with ``noise_multiplier = sigma /
  sensitivity``, each on a Poisson sample at rate ``sampling_rate``;
* :func:`laplace_event` -- ``steps`` Laplace releases of ``epsilon`` each, optionally
  Poisson-subsampled (the PLD accountant only);
* :func:`randomized_response_event` -- ``steps`` bits, each flipped with probability
  ``1 / (1 + exp(epsilon))`` (BLIP on Bloom filters); also the event of any other pure
  ``epsilon``-DP release, such as the exponential mechanism.

Randomized response: dp-accounting's ``RandomizedResponseDpEvent`` is supported only under the
replace-one relations, which its RDP accountant refuses for Poisson subsampling, so the two
cannot meet in one accountant as they are. :func:`epsilon` and :func:`delta` therefore rewrite
each binary ``RandomizedResponseDpEvent`` into an event of the same privacy (the bit's value
protected) before composing: for ``"pld"`` the discrete Laplace event of parameter ``epsilon``
and sensitivity 1, whose privacy-loss distribution is exactly the two-point one of binary
randomized response, the worst case of every ``epsilon``-DP mechanism (Kairouz, Oh and
Viswanath 2015); for ``"rdp"`` the ``(xi=epsilon, rho=0)``-zCDP event, since pure
``epsilon``-DP bounds the Rényi divergence of every order by ``epsilon`` (Mironov 2017,
Prop. 3). The RDP bound thus adds pure epsilons up (basic composition); ask for ``"pld"`` to
compose many of them tightly. (The rewrite also sidesteps dp-accounting 0.6.0's PLD
accountant, which composes a self-composed ``RandomizedResponseDpEvent`` only once.)
"""

from __future__ import annotations

import functools
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from vfl.privacy.checks import check_positive_finite, check_positive_int, check_probability


class _QuietOrders(logging.Filter):
    """dp-accounting's RDP accountant drops fractional orders it cannot compute at large
    sampling rates (``q = 0.5``, say), with one warning per order per composition: the
    epsilon is still valid (taken over the other orders), so these say nothing to a user."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


logging.getLogger("absl").addFilter(_QuietOrders())

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "DpEvent",
    "PldAccountant",
    "RdpAccountant",
    "compose",
    "delta",
    "epsilon",
    "gaussian_event",
    "get_accountant",
    "laplace_event",
    "noise_multiplier_for",
    "randomized_response_event",
    "resolve_noise_multiplier",
]

DpEvent = Any
"""A ``dp_accounting.DpEvent`` (dp-accounting ships no type hints)."""


def _repeat(event: DpEvent, sampling_rate: float, steps: int) -> DpEvent:
    import dp_accounting

    if sampling_rate < 1.0:
        event = dp_accounting.PoissonSampledDpEvent(sampling_rate, event)
    return dp_accounting.SelfComposedDpEvent(event, steps)


def gaussian_event(
    *, noise_multiplier: float, sampling_rate: float = 1.0, steps: int = 1
) -> DpEvent:
    """``steps`` Gaussian releases, each on a Poisson sample of the records.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the L2 sensitivity (DP-SGD: ``sigma / max_norm``).
    sampling_rate : float
        Each record's probability, in ``(0, 1]``, of joining each step's sample; 1 for the
        whole data set.
    steps : int
        The number of releases.

    Returns
    -------
    DpEvent
        ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(...)), steps)``, without
        the sampling layer when ``sampling_rate == 1``.

    Raises
    ------
    ValueError
        If a parameter is out of range.
    """
    noise_multiplier = check_positive_finite("noise_multiplier", noise_multiplier)
    sampling_rate = check_probability("sampling_rate", sampling_rate, allow_one=True)
    steps = check_positive_int("steps", steps)
    import dp_accounting

    return _repeat(dp_accounting.GaussianDpEvent(noise_multiplier), sampling_rate, steps)


def laplace_event(*, epsilon: float, sampling_rate: float = 1.0, steps: int = 1) -> DpEvent:
    """``steps`` Laplace releases of ``epsilon`` each (noise multiplier ``1 / epsilon``).

    Parameters
    ----------
    epsilon : float
        The budget of one release (scale = sensitivity / epsilon).
    sampling_rate : float
        Poisson sampling rate in ``(0, 1]``; below 1 only the ``"pld"`` accountant can compose
        the event.
    steps : int
        The number of releases.

    Returns
    -------
    DpEvent

    Raises
    ------
    ValueError
        If a parameter is out of range.
    """
    epsilon = check_positive_finite("epsilon", epsilon)
    sampling_rate = check_probability("sampling_rate", sampling_rate, allow_one=True)
    steps = check_positive_int("steps", steps)
    import dp_accounting

    return _repeat(dp_accounting.LaplaceDpEvent(1.0 / epsilon), sampling_rate, steps)


def randomized_response_event(*, epsilon: float, steps: int = 1) -> DpEvent:
    """``steps`` bits, each flipped with probability ``1 / (1 + exp(epsilon))``.

    Binary randomized response (Warner 1965), in dp-accounting's terms a
    ``RandomizedResponseDpEvent`` over 2 buckets with noise parameter ``2 / (1 + e^epsilon)``:
    pure ``epsilon``-DP for the bit's value. :func:`epsilon` composes it as described in the
    module docstring. Use it for any pure ``epsilon``-DP release (the worst case of them all).

    Parameters
    ----------
    epsilon : float
        The budget of one bit.
    steps : int
        The number of bits (or releases) composed.

    Returns
    -------
    DpEvent

    Raises
    ------
    ValueError
        If a parameter is out of range.
    """
    epsilon = check_positive_finite("epsilon", epsilon)
    steps = check_positive_int("steps", steps)
    import dp_accounting

    event = dp_accounting.RandomizedResponseDpEvent(2.0 / (1.0 + math.exp(epsilon)), 2)
    return _repeat(event, 1.0, steps)


def compose(events: Sequence[DpEvent]) -> DpEvent:
    """The events applied one after another to the same records (``ComposedDpEvent``)."""
    import dp_accounting

    return dp_accounting.ComposedDpEvent(list(events))


class Accountant(ABC):
    """A dp-accounting accountant under a name: builds a fresh one and rewrites pure events."""

    name: ClassVar[str]

    @abstractmethod
    def new(self) -> Any:
        """A fresh ``dp_accounting.PrivacyAccountant`` with nothing composed."""

    @abstractmethod
    def pure_epsilon_event(self, epsilon: float) -> DpEvent:
        """The event this accountant composes for one pure ``epsilon``-DP release."""

    def prepare(self, event: DpEvent) -> DpEvent:
        """``event`` with every binary randomized response replaced by its pure event."""
        import dp_accounting as dpa

        if isinstance(event, dpa.RandomizedResponseDpEvent) and event.num_buckets == 2:
            p = event.noise_parameter
            if not 0 < p <= 1:
                raise ValueError(f"randomized response noise_parameter must be in (0, 1], got {p}")
            pure_epsilon = math.log(2.0 / p - 1.0)
            return self.pure_epsilon_event(pure_epsilon) if pure_epsilon > 0 else dpa.NoOpDpEvent()
        if isinstance(event, dpa.SelfComposedDpEvent):
            return dpa.SelfComposedDpEvent(self.prepare(event.event), event.count)
        if isinstance(event, dpa.ComposedDpEvent):
            return dpa.ComposedDpEvent([self.prepare(e) for e in event.events])
        if isinstance(event, dpa.PoissonSampledDpEvent):
            return dpa.PoissonSampledDpEvent(event.sampling_probability, self.prepare(event.event))
        return event

    def composed(self, event: DpEvent) -> Any:
        """A fresh accountant with ``event`` composed.

        Raises
        ------
        ValueError
            If dp-accounting cannot compose a part of ``event`` with this accountant.
        """
        import dp_accounting

        accountant = self.new()
        try:
            accountant.compose(self.prepare(event))
        except dp_accounting.UnsupportedEventError as error:
            hint = "; the 'pld' accountant composes more events" if self.name != "pld" else ""
            raise ValueError(
                f"the {self.name!r} accountant cannot compose: {error}{hint}"
            ) from None
        return accountant


class RdpAccountant(Accountant):
    """Rényi-DP accounting at dp-accounting's default orders."""

    name = "rdp"

    def new(self) -> Any:
        from dp_accounting.rdp import RdpAccountant as _Rdp

        return _Rdp()

    def pure_epsilon_event(self, epsilon: float) -> DpEvent:
        import dp_accounting

        return dp_accounting.ZCDpEvent(rho=0.0, xi=epsilon)


class PldAccountant(Accountant):
    """Privacy-loss-distribution accounting, discretised at 1e-4 (dp-accounting's default)."""

    name = "pld"

    def new(self) -> Any:
        from dp_accounting.pld import PLDAccountant

        return PLDAccountant()

    def pure_epsilon_event(self, epsilon: float) -> DpEvent:
        from dp_accounting.dp_event import DiscreteLaplaceDpEvent

        return DiscreteLaplaceDpEvent(noise_parameter=epsilon, sensitivity=1)


ACCOUNTANTS: dict[str, type[Accountant]] = {"rdp": RdpAccountant, "pld": PldAccountant}
"""Accountant classes by name."""


def get_accountant(accountant: str | Accountant) -> Accountant:
    """The accountant of that name (an :class:`Accountant` is returned as it is).

    Raises
    ------
    ValueError
        If the name is unknown; the message lists the valid ones.
    """
    if isinstance(accountant, Accountant):
        return accountant
    if accountant not in ACCOUNTANTS:
        raise ValueError(
            f"unknown accountant {accountant!r}; valid accountants: {sorted(ACCOUNTANTS)}"
        )
    return ACCOUNTANTS[accountant]()


def _as_event(events: DpEvent | Sequence[DpEvent]) -> DpEvent:
    return compose(events) if isinstance(events, (list, tuple)) else events


def epsilon(
    events: DpEvent | Sequence[DpEvent], *, delta: float, accountant: str | Accountant = "rdp"
) -> float:
    """The epsilon that ``events``, composed, spend at ``delta``.

    Parameters
    ----------
    events : DpEvent or sequence of DpEvent
        One event or several applied to the same records (composed in order).
    delta : float
        The target delta in ``(0, 1)``.
    accountant : {"rdp", "pld"} or Accountant
        Which accountant composes them.

    Returns
    -------
    float
        The epsilon (``inf`` if an event is not private).

    Raises
    ------
    ValueError
        If ``delta`` is out of range, the accountant is unknown, or it cannot compose an event.
    """
    delta = check_probability("delta", delta)
    event = _as_event(events)
    if not isinstance(accountant, str):
        return float(get_accountant(accountant).composed(event).get_epsilon(delta))
    # the same events are asked about again and again (a ledger's table, each holder, the
    # comparison's rows) and a PLD composition of a thousand steps takes seconds: remember the
    # answer, keyed by the event's repr (dp-accounting's events are attrs classes: every
    # parameter, floats exactly)
    key = (repr(event), delta, accountant)
    found = _EPSILONS.get(key)
    if found is None:
        found = float(get_accountant(accountant).composed(event).get_epsilon(delta))
        _EPSILONS[key] = found
        if len(_EPSILONS) > _REMEMBERED:
            _EPSILONS.pop(next(iter(_EPSILONS)))
    return found


_EPSILONS: dict[tuple[str, float, str], float] = {}
_REMEMBERED = 256


def delta(
    events: DpEvent | Sequence[DpEvent], *, epsilon: float, accountant: str | Accountant = "rdp"
) -> float:
    """The delta that ``events``, composed, spend at ``epsilon`` (see :func:`epsilon`).

    Raises
    ------
    ValueError
        If ``epsilon`` is negative or not finite, the accountant is unknown, or it cannot
        compose an event.
    """
    if (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, (int, float))
        or not (math.isfinite(epsilon) and epsilon >= 0)
    ):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    return float(get_accountant(accountant).composed(_as_event(events)).get_delta(epsilon))


def noise_multiplier_for(
    *,
    epsilon: float,
    delta: float,
    steps: int,
    sampling_rate: float = 1.0,
    accountant: str | Accountant = "rdp",
) -> float:
    """The smallest Gaussian noise multiplier (noise standard deviation over sensitivity)
    whose ``steps`` compositions (Poisson-subsampled at ``sampling_rate``) spend at most
    ``epsilon`` at ``delta``: dp-accounting's ``calibrate_dp_mechanism``.

    Raises
    ------
    ValueError
        If a parameter is out of range.
    """
    epsilon = check_positive_finite("epsilon", epsilon)
    delta = check_probability("delta", delta)
    steps = check_positive_int("steps", steps)
    sampling_rate = check_probability("sampling_rate", sampling_rate, allow_one=True)
    import dp_accounting
    from dp_accounting import mechanism_calibration

    chosen = get_accountant(accountant)

    def event(multiplier: float) -> DpEvent:
        return chosen.prepare(
            gaussian_event(noise_multiplier=multiplier, sampling_rate=sampling_rate, steps=steps)
        )

    bracket = mechanism_calibration.LowerEndpointAndGuess(1e-3, 1.0)
    return float(dp_accounting.calibrate_dp_mechanism(chosen.new, event, epsilon, delta, bracket))


@functools.lru_cache(maxsize=256)
def resolve_noise_multiplier(
    *,
    noise_multiplier: float | None,
    epsilon: float | None,
    delta: float,
    steps: int,
    sampling_rate: float = 1.0,
    what: str = "privacy",
) -> float:
    """The Gaussian noise multiplier of a privacy setting that gives exactly one of
    ``noise_multiplier`` and a target ``epsilon``: the former as it is, or the one that spends
    ``epsilon`` at ``delta`` over ``steps`` releases Poisson-sampled at ``sampling_rate``
    (:func:`noise_multiplier_for`, RDP accountant; calibrated once per schedule: the result
    is cached).

    Parameters
    ----------
    noise_multiplier : float or None
        Noise standard deviation over sensitivity, when given directly.
    epsilon : float or None
        The target epsilon over the whole schedule, otherwise.
    delta : float
        The target delta in ``(0, 1)``.
    steps : int
        How many releases the schedule makes.
    sampling_rate : float
        The Poisson sampling rate of each release (1: every record each time).
    what : str
        The setting's name, for the error message (``"ClientDP"``, say).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If both or neither of ``noise_multiplier`` and ``epsilon`` are given, or a parameter
        is out of range.
    """
    if (noise_multiplier is None) == (epsilon is None):
        raise ValueError(f"{what}: give exactly one of noise_multiplier= and epsilon=")
    if noise_multiplier is not None:
        return check_positive_finite("noise_multiplier", noise_multiplier)
    return noise_multiplier_for(
        epsilon=check_positive_finite("epsilon", epsilon),
        delta=delta,
        steps=steps,
        sampling_rate=sampling_rate,
    )
