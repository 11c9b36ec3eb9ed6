"""Schedules from an agreed seed, the optimiser registry, the stopping rule."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.federation import LocalFederation
from vfl.training import LossCurve, Schedule, agree_seed, make_optimizer


def test_every_party_derives_the_same_batches_from_the_agreed_seed() -> None:
    def party(fed):  # type: ignore[no-untyped-def]
        seed = agree_seed(fed, ["a", "b", "c"], "t/seed")
        epochs = Schedule(103, 20, seed).epochs()
        return seed, [np.concatenate(next(epochs)).tolist() for _ in range(3)]

    results = LocalFederation(timeout=10).run({p: party for p in "abc"})
    assert results["a"] == results["b"] == results["c"]
    seed, orders = results["a"]
    assert all(sorted(o) == list(range(103)) for o in orders) and orders[0] != orders[1]
    again = LocalFederation(timeout=10).run({p: party for p in "abc"})
    assert again["a"][0] != seed  # without random_state, fresh OS randomness every run


def test_a_given_random_state_is_used_and_must_match() -> None:
    def same(fed):  # type: ignore[no-untyped-def]
        return agree_seed(fed, ["a", "b"], "t/seed", 7)

    assert LocalFederation(timeout=10).run({"a": same, "b": same}) == {"a": 7, "b": 7}

    def other(fed):  # type: ignore[no-untyped-def]
        return agree_seed(fed, ["a", "b"], "t/seed", 8)

    from vfl.federation import PartyFailedError

    with pytest.raises(PartyFailedError, match="trains with another random_state"):
        LocalFederation(timeout=10).run({"a": same, "b": other})


def test_a_party_without_random_state_beside_one_with_fails_at_both() -> None:
    def party(random_state):  # type: ignore[no-untyped-def]
        def run(fed):  # type: ignore[no-untyped-def]
            try:
                return agree_seed(fed, ["a", "b"], "t/seed", random_state)
            except ValueError as error:
                return str(error)

        return run

    said = LocalFederation(timeout=10).run({"a": party(7), "b": party(None)})
    # each names the other at once (the one without does not wait on the other until timeout)
    assert said["a"].startswith(
        "party 'b' trains with another random_state than party 'a' (None against 7)"
    )
    assert said["b"].startswith(
        "party 'a' trains with another random_state than party 'b' (7 against None)"
    )


def test_optimizers_by_name() -> None:
    w = np.array([1.0, -2.0])
    g = np.array([0.5, -0.5])
    sgd = make_optimizer("sgd", learning_rate=0.1)
    np.testing.assert_allclose(sgd.step(w, g, epoch=1), w - 0.05 * g)
    adam = make_optimizer("adam", learning_rate=0.1)
    np.testing.assert_allclose(adam.step(w, g, epoch=0), w - 0.1 * np.sign(g), rtol=1e-6)
    assert adam.linear_step(0) is None  # cannot run on secret shares
    momentum = make_optimizer("momentum", learning_rate=0.1)
    first = momentum.step(w, g, epoch=0)  # velocity g
    np.testing.assert_allclose(first, w - 0.1 * g)
    second = momentum.step(first, g, epoch=3)  # velocity 0.9 g + g, step 0.1 / sqrt(4)
    np.testing.assert_allclose(second, first - 0.05 * 1.9 * g)
    assert momentum.linear_step(3) == (0.9, 0.05)
    with pytest.raises(
        ValueError, match=r"optimizer must be one of \['adam', 'momentum', 'sgd'\], got 'lbfgs'"
    ):
        make_optimizer("lbfgs", learning_rate=0.1)
    with pytest.raises(ValueError, match="learning_rate must be > 0"):
        make_optimizer("sgd", learning_rate=0)


def test_the_stopping_rule_counts_epochs_without_improvement_on_the_best() -> None:
    first = LossCurve(tol=0.01)
    assert [first.add(v) for v in (1.0, 0.9, 0.95)] == [False, False, True]
    patient = LossCurve(tol=0.01, patience=3)
    assert [patient.add(v) for v in (1.0, 0.9, 0.95, 0.85, 0.86, 0.855, 0.851)] == [
        False,
        False,
        False,
        False,
        False,
        False,
        True,
    ]
    never = LossCurve(tol=None)
    assert not any(never.add(v) for v in (1.0, 2.0, 3.0))
