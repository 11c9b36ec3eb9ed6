"""Secure scoring against a label party that deviates: it holds every passive party's
encrypted partial scores and chooses what the key holder decrypts, so before #31 it could
have one passive's scores decrypted alone (with three or more data parties, a leak beyond
what the score itself tells). Now the passives' scores carry zero-sum masks: only the sum
of all of them decrypts to anything, and a request for a part of it is refused by the key
holder's slot check, naming the label party."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

import vfl.linear.base as base
from tests.vfl.linear.tables import small_model
from vfl.crypto import EncryptedVector, SecurityWarning
from vfl.crypto.masked import zero_sum_masks
from vfl.federation import LocalFederation
from vfl.federation.base import PartyFailedError
from vfl.linear import VerticalLogisticRegression
from vfl.linear.exchange import SCORE_BITS
from vfl.linear.scoring import ScoreRole

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")

VICTIM = "lab"


@pytest.fixture(scope="module")
def fitted() -> tuple[VerticalLogisticRegression, dict[str, pd.DataFrame]]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    x, y = x.iloc[:128], y.iloc[:128]
    cols = list(x.columns)
    parts = {"imaging": x[cols[:10]], "lab": x[cols[10:20]], "genomics": x[cols[20:]]}
    est = small_model(VerticalLogisticRegression, max_iter=1, batch_size=64, tol=None)
    return est.fit(parts, y, label_party="imaging"), parts


class SoloDecryption(ScoreRole):
    """A label party that has the victim's encrypted partial scores decrypted alone, instead
    of the sum of every party's."""

    recovered: np.ndarray[Any, Any] | None = None

    def _combine(self, key: Any, layout: Any, parts: dict[str, EncryptedVector]) -> Any:
        return parts[VICTIM]

    def __call__(self, fed: Any) -> Any:
        out = super().__call__(fed)
        if self.is_label:
            type(self).recovered = out
        return out


def partial_scores(
    est: VerticalLogisticRegression, frame: pd.DataFrame, party: str = VICTIM
) -> np.ndarray[Any, Any]:
    part = est.parts_[party]
    out: np.ndarray[Any, Any] = part.design(frame) @ part.weights(with_intercept=False)
    return out


@pytest.mark.parametrize("protocol", ["shared", "shared_coordinator"])
def test_a_label_party_cannot_have_one_partys_scores_decrypted_alone(
    fitted, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    est, parts = fitted
    est.set_params(protocol=protocol)
    honest = est.decision_function(parts)  # the sum of all three decrypts, as before

    def build(spec, part, x):  # type: ignore[no-untyped-def]
        cls = SoloDecryption if part.party == est.label_party_ else ScoreRole
        return cls(spec, part, x)

    monkeypatch.setattr(base, "ScoreRole", build)
    SoloDecryption.recovered = None
    with pytest.raises(PartyFailedError, match="imaging"):
        est.decision_function(parts)
    assert SoloDecryption.recovered is None  # nothing came back to the label party
    assert honest.shape == (128,)


def test_the_honest_three_party_score_is_the_plaintext_one(fitted) -> None:  # type: ignore[no-untyped-def]
    est, parts = fitted
    for protocol in ("shared", "shared_coordinator"):
        est.set_params(protocol=protocol)
        plain = partial_scores(est, parts["genomics"], "genomics")
        design = est.parts_["imaging"].design(parts["imaging"])
        plain += np.column_stack([design, np.ones(len(design))]) @ est.parts_["imaging"].weights(
            with_intercept=True
        )
        plain += partial_scores(est, parts[VICTIM])
        got = est.decision_function(parts)
        np.testing.assert_allclose(got, np.ravel(plain), atol=len(parts) * 2.0**-SCORE_BITS)


def test_zero_sum_masks_cancel_and_each_is_uniform() -> None:
    """Each party's masks are uniform modulo ``n`` (their top bits take both values about
    equally often); the masks of all parties sum to zero, of any proper subset do not."""
    modulus = (1 << 1023) + 1155  # any odd modulus will do for the sums
    names = ["a", "b", "c"]

    def role(name: str):  # type: ignore[no-untyped-def]
        return lambda fed: zero_sum_masks(fed, names, 400, modulus)

    out = LocalFederation(timeout=30).run({n: role(n) for n in names})
    total = [sum(col) % modulus for col in zip(*(out[n] for n in names), strict=True)]
    assert total == [0] * 400
    pair = [(a + b) % modulus for a, b in zip(out["a"], out["b"], strict=True)]
    assert all(v != 0 for v in pair)
    for name in names:
        top = np.array([v >= modulus // 2 for v in out[name]])
        assert 0.4 < top.mean() < 0.6  # 400 fair coins: sd 0.025
    alone = LocalFederation(timeout=5).run(
        {"a": lambda fed: zero_sum_masks(fed, ["a"], 3, modulus)}
    )
    assert alone["a"] == [0, 0, 0]  # one party: nothing to cancel with
