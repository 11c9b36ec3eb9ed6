"""The secret-shared protocol with three data parties: the label party and its partner hold
the shares, the third party's Gram share is multiplied by both; the model is the plaintext
twin's and every party's view gives the attacks nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

from tests.vfl.linear.tables import SHARES_ATOL, assert_equals_twin, small_model
from tests.vfl.linear.test_logistic import step_of
from vfl.audit import LabelSolveAudit, ScoreSolveAudit
from vfl.crypto import SecurityWarning
from vfl.federation.wire import CiphertextBlock
from vfl.linear import VerticalLinearRegression, VerticalLogisticRegression

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")


@pytest.fixture(scope="module")
def three() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    parts = {"imaging": x[cols[:10]], "lab": x[cols[10:20]], "genomics": x[cols[20:]]}
    return parts, y


def first(rows: int, parts: dict[str, pd.DataFrame], y: pd.Series) -> tuple[Any, pd.Series]:
    return {name: frame.iloc[:rows] for name, frame in parts.items()}, y.iloc[:rows]


@pytest.mark.parametrize("protocol", ["shared", "shared_coordinator"])
def test_three_parties_train_the_plaintext_twins_model(three, protocol: str) -> None:  # type: ignore[no-untyped-def]
    parts, y = first(320, *three)
    est = small_model(
        VerticalLogisticRegression, protocol=protocol, max_iter=2, batch_size=64, tol=None
    )
    est.fit(parts, y, label_party="imaging", keep_payloads=True)
    assert est.n_iter_ == 2 and est.loss_curve_[-1] < est.loss_curve_[0]
    assert_equals_twin(est, parts, y, "imaging")
    assert est.score(parts, y) > 0.9
    records = est.transcript_.records
    late = [r for r in records if "genomics" in (r.sender, r.receiver)]  # setup, control, end
    assert not any(step_of(r.tag).startswith("vlr/ss/prod") for r in late)
    for record in records:  # what a data party sends another is ciphertexts or shares
        if record.sender in parts and record.receiver in parts:
            step = step_of(record.tag)
            if step in ("vlr/ss/gram", "vlr/ss/tau", "vlr/ss/s", "vlr/ss/prod"):
                assert isinstance(record.payload()["data"], CiphertextBlock), record.tag
            if step.endswith("-fwd") or step in ("vlr/ss/init", "vlr/ss/final"):
                values = record.payload()["values"]
                assert all(abs(v) >= 2**40 for v in values), record.tag  # masked: 88+ bits


def test_three_party_regression_with_a_warm_start_and_the_label_party_last() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 6))
    t = pd.Series(x @ rng.normal(size=6) + 0.1 * rng.normal(size=300), name="t")
    frame = pd.DataFrame(x, columns=[f"c{i}" for i in range(6)])
    parts = {"a": frame[["c0", "c1"]], "b": frame[["c2", "c3"]], "label": frame[["c4", "c5"]]}
    reg = small_model(VerticalLinearRegression, max_iter=2, batch_size=64, tol=None)
    reg.fit(parts, t, label_party="label")
    assert_equals_twin(reg, parts, t, "label")
    before = {n: p.weights(with_intercept=n == "label") for n, p in reg.parts_.items()}
    reg.set_params(warm_start=True, learning_rate=1e-9, max_iter=1)
    reg.fit(parts, t, label_party="label")
    for name, part in reg.parts_.items():  # fresh shares of the fitted weights, at 3 parties
        np.testing.assert_allclose(
            part.weights(with_intercept=name == "label"), before[name], atol=SHARES_ATOL
        )


def test_no_third_party_view_gives_the_label_solver_anything(three) -> None:  # type: ignore[no-untyped-def]
    parts, y = first(320, *three)
    est = small_model(VerticalLogisticRegression, batch_size=64, max_iter=1, tol=None)
    est.fit(parts, y, label_party="imaging", keep_views=True)
    design = est.parts_["lab"].design(parts["lab"])  # the partner's shares of its gradient
    result = LabelSolveAudit().run(est.views_["lab"], design, y, time_limit=5)
    assert result.trials == 64
    assert not result.details["solved"]
    assert not result.significant()  # no better than the majority-class guess
    # the third party decrypts nothing after setup: its per-batch view is empty
    assert not est.views_.get("genomics")


def test_the_label_partys_view_gives_no_column_of_a_one_column_third_party(three) -> None:  # type: ignore[no-untyped-def]
    parts, y = three
    one = {**parts, "genomics": parts["genomics"].iloc[:, :1]}
    est = small_model(VerticalLogisticRegression, batch_size=64, max_iter=8, tol=None)
    est.fit(one, y, label_party="imaging", keep_views=True)
    design = est.parts_["imaging"].design(one["imaging"])
    design = np.column_stack([design, np.ones(len(design))])
    column = est.parts_["genomics"].design(one["genomics"])[:, 0]
    result = ScoreSolveAudit().run(est.views_["imaging"], design, column)
    assert result.details["status"] == "solved"  # as many equations, of masked shares
    assert not result.significant()
    # a random direction in 569 dimensions: |correlation| above 0.25 has probability < 1e-9
    assert abs(result.details["correlation"]) < 0.25
