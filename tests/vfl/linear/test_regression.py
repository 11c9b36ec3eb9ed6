"""Vertical linear regression: encrypted equals plaintext, R^2 against scikit-learn, the
transcript carries no plaintext, bad input, deployment (on scikit-learn's bundled diabetes
data, so they always run), and R^2 on FATE's student table split by columns when the shared
data is there."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from tests.vfl.linear.tables import hetero, small_model
from vfl.audit import find_plaintext
from vfl.crypto import SecurityWarning
from vfl.federation.wire import CiphertextBlock
from vfl.linear import VerticalLinearRegression, plaintext_reference
from vfl.linear.model import FEATURE_BITS

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")


def small(**params: object) -> VerticalLinearRegression:
    return small_model(VerticalLinearRegression, **params)


@pytest.fixture(scope="module")
def diabetes() -> tuple[dict[str, pd.DataFrame], pd.Series, dict[str, pd.DataFrame], pd.Series]:
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    train, test = train_test_split(x.index, test_size=0.3, random_state=0)
    return (
        {"school": x.loc[train, cols[:5]], "survey": x.loc[train, cols[5:]]},
        y.loc[train],
        {"school": x.loc[test, cols[:5]], "survey": x.loc[test, cols[5:]]},
        y.loc[test],
    )


@pytest.fixture(scope="module")
def student() -> tuple[dict[str, pd.DataFrame], pd.Series, dict[str, pd.DataFrame], pd.Series]:
    guest, host, y = hetero("student")
    train, test = train_test_split(guest.index, test_size=0.3, random_state=0)
    return (
        {"school": guest.loc[train], "survey": host.loc[train]},
        y.loc[train],
        {"school": guest.loc[test], "survey": host.loc[test]},
        y.loc[test],
    )


@pytest.mark.parametrize("protocol", ["coordinator", "two_party"])
def test_encrypted_training_equals_the_plaintext_protocol(diabetes, protocol: str) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = diabetes
    est = small(protocol=protocol, max_iter=3, batch_size=64, tol=None)
    est.fit(parts, y, label_party="school")
    weights, curve = plaintext_reference(est, parts, y, label_party="school")
    np.testing.assert_allclose(est.parts_["survey"].coef, weights["survey"], atol=1e-6)
    np.testing.assert_allclose(est.parts_["school"].coef, weights["school"][:-1], atol=1e-6)
    assert est.intercept_[0] == pytest.approx(weights["school"][-1], abs=1e-6)
    np.testing.assert_allclose(est.loss_curve_, curve, rtol=1e-6)
    # the squared loss needs no approximation: the curve is half the mean squared error
    assert curve[0] < 0.5  # standardised targets start at 0.5 and go down


@pytest.mark.parametrize("data", ["diabetes", "student"])
def test_r2_matches_scikit_learn(data: str, request: pytest.FixtureRequest) -> None:
    parts, y, test_parts, y_test = request.getfixturevalue(data)
    # 512-bit keys: the key size changes no plaintext, and 300 epochs stay short
    est = small(batch_size=512, max_iter=300, tol=None, key_bits=512)
    est.fit(parts, y, label_party="school")
    r2 = r2_score(y_test, est.predict(test_parts))
    train, test = pd.concat(parts.values(), axis=1), pd.concat(test_parts.values(), axis=1)
    scaler = StandardScaler().fit(train)
    reference = LinearRegression().fit(scaler.transform(train), y)
    r2_sklearn = r2_score(y_test, reference.predict(scaler.transform(test)))
    assert abs(r2 - r2_sklearn) < 0.01
    assert est.score(test_parts, y_test) == pytest.approx(r2)  # RegressorMixin.score is R^2


def test_no_plaintext_feature_or_target_crosses_a_party_boundary(diabetes) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = diabetes
    est = small(max_iter=1, batch_size=64, tol=None)
    est.fit(parts, y, label_party="school", keep_payloads=True)
    targets = y.to_numpy(dtype=float)
    standardised = (targets - targets.mean()) / targets.std()
    secrets = {
        "school": [parts["school"].to_numpy(float), est.parts_["school"].design(parts["school"])],
        "survey": [parts["survey"].to_numpy(float), est.parts_["survey"].design(parts["survey"])],
    }
    secrets["school"] += [targets, standardised]
    leaks = find_plaintext(est.transcript_, secrets, scales=[1.0, 2.0**FEATURE_BITS])
    assert leaks == []
    # the audit itself finds plaintext when it is there
    from vfl.federation import LocalFederation

    leaky = LocalFederation(record_payloads=True)
    leaky.run(
        {
            "school": lambda fed: fed.send("survey", "oops", standardised),
            "survey": lambda fed: fed.recv("school", "oops"),
        }
    )
    assert find_plaintext(leaky.transcript, secrets)[0].tag == "oops"
    for record in est.transcript_.records:
        if record.tag in ("vlr/share", "vlr/loss-piece"):
            assert isinstance(record.payload()["data"], CiphertextBlock)
    tags = {r.tag for r in est.transcript_.records if r.receiver == "coordinator"}
    assert tags <= {"vlr/epoch", "vlr/setup", "vlr/grad/req", "vlr/loss/req"}
    # the target's mean and deviation stay at the label party: the survey's weights are in
    # standardised-target units, and only the label party's part holds the scaling
    assert est.parts_["survey"].target_scale == 1.0
    assert est.parts_["school"].target_scale == pytest.approx(targets.std())


def test_bad_targets_get_clear_errors(diabetes) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = diabetes
    with pytest.raises(ValueError, match="targets of party 'school' must be numbers"):
        small().fit(parts, y.astype(str), label_party="school")
    with pytest.raises(ValueError, match="targets of party 'school' have inf"):
        small().fit(parts, y.replace(y.iloc[0], np.inf), label_party="school")
    with pytest.raises(ValueError, match="targets of party 'school' are constant"):
        small().fit(parts, y * 0, label_party="school")
    with pytest.raises(ValueError, match="beyond 65536"):
        small(standardize_target=False).fit(parts, y * 1e5, label_party="school")
    with pytest.raises(ValueError, match="n_iter_no_change must be a positive integer"):
        small(n_iter_no_change=0).fit(parts, y, label_party="school")


def test_deployment_roles_train_and_score_like_the_simulation(diabetes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from vfl.federation import LocalFederation

    parts, y, test_parts, _ = diabetes
    params = {"max_iter": 2, "tol": None, "batch_size": 64, "protocol": "coordinator"}
    simulated = small(**params).fit(parts, y, label_party="school")
    estimators = {name: small(**params) for name in [*parts, "coordinator"]}

    def role(name: str):  # type: ignore[no-untyped-def]
        def run(fed):  # type: ignore[no-untyped-def]
            est = estimators[name]
            frame = parts.get(name)
            est.fit_party(
                fed,
                frame,
                y if name == "school" else None,
                label_party="school",
                data_parties=list(parts),
            )
            return est.predict_party(fed, test_parts.get(name))

        return run

    results = LocalFederation().run({name: role(name) for name in estimators})
    for name in parts:
        np.testing.assert_allclose(
            estimators[name].parts_[name].coef, simulated.parts_[name].coef, atol=1e-9
        )
    np.testing.assert_allclose(results["school"], simulated.predict(test_parts), atol=1e-6)
    assert results["survey"] is None and results["coordinator"] is None
    loaded = small(protocol="coordinator").load(simulated.save(tmp_path), label_party="school")
    np.testing.assert_allclose(loaded.predict(test_parts), simulated.predict(test_parts), atol=1e-6)


def test_a_warm_start_continues_in_the_first_fits_target_units(diabetes) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = diabetes
    est = small(max_iter=2, tol=None, batch_size=64, warm_start=True)
    est.fit(parts, y, label_party="school")
    scale = est.parts_["school"].target_scale
    est.fit(parts, y * 10, label_party="school")
    assert est.parts_["school"].target_scale == scale  # the weights stay in the first units
