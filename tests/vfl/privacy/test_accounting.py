"""Tests for vfl.privacy.accounting: its epsilons are dp-accounting's for the same events."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from vfl.privacy import accounting

DELTA = 1e-5


def test_gaussian_event_is_a_poisson_sampled_self_composition() -> None:
    event = accounting.gaussian_event(noise_multiplier=1.1, sampling_rate=0.01, steps=300)
    assert event == dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 300
    )
    whole = accounting.gaussian_event(noise_multiplier=2.0)
    assert whole == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), 1)


@pytest.mark.parametrize(("name", "make"), [("rdp", RdpAccountant), ("pld", PLDAccountant)])
def test_epsilon_and_delta_are_dp_accountings(name: str, make: type) -> None:
    events = [
        accounting.gaussian_event(noise_multiplier=1.1, sampling_rate=0.01, steps=300),
        accounting.laplace_event(epsilon=0.3, steps=2),
    ]
    direct = make()
    for event in events:
        direct.compose(event)
    assert accounting.epsilon(events, delta=DELTA, accountant=name) == pytest.approx(
        direct.get_epsilon(DELTA), rel=1e-12
    )
    assert accounting.delta(events, epsilon=2.0, accountant=name) == pytest.approx(
        direct.get_delta(2.0), rel=1e-12
    )


def test_randomized_response_is_the_pure_epsilon_pair() -> None:
    # dp-accounting's own binary randomized response, under the replace-one relation where it
    # applies, composed event by event (its PLD accountant composes a SelfComposedDpEvent of
    # randomized response only once).
    epsilon, bits = 1.0, 20
    flip = 2.0 / (1.0 + math.exp(epsilon))
    reference_events = dp_accounting.ComposedDpEvent(
        [dp_accounting.RandomizedResponseDpEvent(flip, 2)] * bits
    )
    replace_one = dp_accounting.NeighboringRelation.REPLACE_ONE
    ours = accounting.randomized_response_event(epsilon=epsilon, steps=bits)

    pld = PLDAccountant(replace_one).compose(reference_events).get_epsilon(DELTA)
    assert accounting.epsilon(ours, delta=DELTA, accountant="pld") == pytest.approx(pld, rel=1e-3)
    # RDP counts pure epsilons by basic composition: an upper bound on the exact RDP figure.
    rdp = RdpAccountant(neighboring_relation=replace_one).compose(reference_events)
    ours_rdp = accounting.epsilon(ours, delta=DELTA, accountant="rdp")
    assert rdp.get_epsilon(DELTA) <= ours_rdp <= bits * epsilon * (1 + 1e-3)
    # One bit alone spends exactly epsilon.
    one = accounting.randomized_response_event(epsilon=epsilon)
    assert accounting.epsilon(one, delta=1e-12, accountant="pld") == pytest.approx(1.0, abs=1e-3)


def test_randomized_response_composes_with_sampled_gaussian() -> None:
    events = [
        accounting.gaussian_event(noise_multiplier=1.0, sampling_rate=0.02, steps=100),
        accounting.randomized_response_event(epsilon=0.5, steps=3),
    ]
    for name in accounting.ACCOUNTANTS:
        alone = accounting.epsilon(events[0], delta=DELTA, accountant=name)
        assert accounting.epsilon(events, delta=DELTA, accountant=name) > alone


def test_accountant_registry() -> None:
    assert sorted(accounting.ACCOUNTANTS) == ["pld", "rdp"]
    rdp = accounting.get_accountant("rdp")
    assert isinstance(rdp, accounting.RdpAccountant)
    assert accounting.get_accountant(rdp) is rdp
    with pytest.raises(
        ValueError, match=r"unknown accountant 'moments'; valid accountants: \['pld', 'rdp'\]"
    ):
        accounting.get_accountant("moments")
    with pytest.raises(ValueError, match="unknown accountant 'prv'"):
        accounting.epsilon(accounting.laplace_event(epsilon=1), delta=DELTA, accountant="prv")


def test_unsupported_event_points_to_pld() -> None:
    sampled_laplace = accounting.laplace_event(epsilon=1.0, sampling_rate=0.1, steps=5)
    with pytest.raises(ValueError, match=r"the 'rdp' accountant cannot compose.*'pld'"):
        accounting.epsilon(sampled_laplace, delta=DELTA)
    assert accounting.epsilon(sampled_laplace, delta=DELTA, accountant="pld") < 5.0


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: accounting.gaussian_event(noise_multiplier=0), "noise_multiplier must be"),
        (lambda: accounting.gaussian_event(noise_multiplier=1, sampling_rate=0), "sampling_rate"),
        (lambda: accounting.gaussian_event(noise_multiplier=1, sampling_rate=1.5), "sampling_rate"),
        (lambda: accounting.gaussian_event(noise_multiplier=1, steps=0), "steps must be"),
        (lambda: accounting.gaussian_event(noise_multiplier=1, steps=2.5), "steps must be"),
        (lambda: accounting.laplace_event(epsilon=-1), "epsilon must be"),
        (lambda: accounting.randomized_response_event(epsilon=math.inf), "epsilon must be"),
        (lambda: accounting.epsilon([], delta=0), r"delta must be a number in \(0, 1\)"),
        (lambda: accounting.delta([], epsilon=-1.0), "epsilon must be a finite number >= 0"),
    ],
)
def test_bad_parameters_are_named(build: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build()  # type: ignore[operator]


def test_a_noise_multiplier_is_given_or_resolved_from_a_target_epsilon() -> None:
    given = accounting.resolve_noise_multiplier(
        noise_multiplier=1.3, epsilon=None, delta=1e-5, steps=10
    )
    assert given == 1.3
    resolved = accounting.resolve_noise_multiplier(
        noise_multiplier=None, epsilon=2.0, delta=1e-5, steps=50, sampling_rate=0.1
    )
    assert resolved == accounting.noise_multiplier_for(
        epsilon=2.0, delta=1e-5, steps=50, sampling_rate=0.1
    )
    spent = accounting.epsilon(
        accounting.gaussian_event(noise_multiplier=resolved, sampling_rate=0.1, steps=50),
        delta=1e-5,
    )
    assert spent <= 2.0 and spent == pytest.approx(2.0, rel=0.01)
    for both_or_neither in ((1.0, 2.0), (None, None)):
        with pytest.raises(ValueError, match="ClientDP: give exactly one of noise_multiplier="):
            accounting.resolve_noise_multiplier(
                noise_multiplier=both_or_neither[0],
                epsilon=both_or_neither[1],
                delta=1e-5,
                steps=1,
                what="ClientDP",
            )
    with pytest.raises(ValueError, match="noise_multiplier must be a positive finite number"):
        accounting.resolve_noise_multiplier(noise_multiplier=0.0, epsilon=None, delta=1e-5, steps=1)
