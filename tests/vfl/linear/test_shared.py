"""The secret-shared protocol (the default): the model of the plaintext protocol on its fixed
batches, and a view that attacks get nothing from."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine

from tests.vfl.linear.tables import SHARES_ATOL, assert_equals_twin, small_model
from vfl.audit import LabelDirectionAudit, LabelSolveAudit, ScoreSolveAudit
from vfl.crypto import EncryptedVector, SecurityWarning
from vfl.crypto.masked import DecryptionRequest
from vfl.crypto.policy import PublicKeyMessage
from vfl.federation import LocalFederation
from vfl.federation.base import PartyFailedError
from vfl.linear import VerticalLinearRegression, VerticalLogisticRegression
from vfl.linear.budget import Sizes, fixed_point_step
from vfl.linear.messages import VLR, Outputs
from vfl.linear.reference import plaintext_reference
from vfl.linear.shared import SS, Plan, SharedCoordinatorRole
from vfl.privacy.options import GaussianLabelDP
from vfl.training.divergence import DivergenceWarning
from vfl.training.optimizers import make_optimizer

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")


@pytest.fixture(scope="module")
def breast() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    return {"imaging": x[cols[:10]], "lab": x[cols[10:]]}, y


@pytest.mark.parametrize("protocol", ["shared", "shared_coordinator"])
def test_the_shared_model_is_the_plaintext_protocols(breast, protocol: str) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    est = small_model(
        VerticalLogisticRegression, protocol=protocol, max_iter=3, batch_size=64, tol=None
    )
    est.fit(parts, y, label_party="imaging")
    assert est.n_iter_ == 3 and len(est.loss_curve_) == 3
    assert est.best_epoch_ == 3  # without early stopping: the last epoch's model
    assert est.loss_curve_[-1] < est.loss_curve_[0]  # it learns
    assert_equals_twin(est, parts, y, "imaging")


@pytest.mark.parametrize(("protocol", "rate"), [("coordinator", 2.0), ("two_party", 2.0)])
def test_a_diverging_step_restarts_from_the_best_epoch_at_every_party(
    breast, protocol: str, rate: float
) -> None:  # type: ignore[no-untyped-def]
    """Too large a step makes the first epoch's loss rise above the untrained model's: every
    party goes back to the kept model with a quarter of the step (warned, recorded), then the
    fit keeps the model of the epoch of lowest loss, at every party (the plaintext twin does
    the same). On shares a given step is capped at the stability bound instead
    (tests/vfl/linear/test_defaults.py)."""
    parts, y = breast
    est = small_model(
        VerticalLogisticRegression,
        protocol=protocol,
        learning_rate=rate,
        max_iter=12,
        batch_size=64,
        tol=1e-3,
        n_iter_no_change=3,
    )
    with pytest.warns(DivergenceWarning, match="resumed from the best epoch"):
        est.fit(parts, y, label_party="imaging")
    assert est.restarts_ and est.restarts_[0] == 1
    assert est.loss_curve_[0] > 1.5 * np.log(2)  # worse than the untrained model
    assert est.loss_curve_[est.best_epoch_ - 1] == min(est.loss_curve_)
    assert [h["restart"] for h in est.history_].count(True) == len(est.restarts_)
    assert_equals_twin(est, parts, y, "imaging")


def test_multiclass_sgd_and_linear_regression_on_shares_are_the_plaintext_protocols() -> None:
    x, y = load_wine(return_X_y=True, as_frame=True)
    parts = {"garage": x.iloc[:, :6], "scanner": x.iloc[:, 6:]}
    est = small_model(VerticalLogisticRegression, max_iter=2, batch_size=48, tol=None)
    est.fit(parts, y.map({0: "a", 1: "b", 2: "c"}), label_party="scanner")
    assert est.parts_["garage"].coef.shape == (6, 3)
    assert_equals_twin(est, parts, y.map({0: "a", 1: "b", 2: "c"}), "scanner")
    x, t = load_diabetes(return_X_y=True, as_frame=True)
    parts = {"school": x.iloc[:, :4], "survey": x.iloc[:, 4:]}
    reg = small_model(
        VerticalLinearRegression, optimizer="sgd", max_iter=2, batch_size=64, tol=None
    )
    reg.fit(parts, t, label_party="school")
    assert_equals_twin(reg, parts, t, "school")


@pytest.mark.parametrize("protocol", ["shared", "shared_coordinator"])
def test_the_passive_partys_view_gives_the_label_solver_nothing(breast, protocol: str) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    # the same first batch that the gradient-revealing protocols give away entirely
    # (tests/vfl/test_label_leak.py)
    est = small_model(
        VerticalLogisticRegression, protocol=protocol, batch_size=64, max_iter=1, tol=None
    )
    est.fit(parts, y, label_party="imaging", keep_views=True)
    design = est.parts_["lab"].design(parts["lab"])
    result = LabelSolveAudit().run(est.views_["lab"], design, y, time_limit=5)
    assert result.trials == 64
    assert not result.details["solved"]
    assert not result.significant()  # no better than the majority-class guess


def test_every_later_batch_leaks_labels_statistically_unless_shared(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    rates = {}
    for protocol in ("coordinator", "shared"):
        est = small_model(
            VerticalLogisticRegression, protocol=protocol, batch_size=64, max_iter=3, tol=None
        )
        est.fit(parts, y, label_party="imaging", keep_views=True)
        design = est.parts_["lab"].design(parts["lab"])
        later = est.views_["lab"][9:]  # the second and third epochs: no exact solving
        rates[protocol] = LabelDirectionAudit().run(later, design, y)
    assert rates["coordinator"].significant()  # the audit can fail: revealed gradients leak
    assert rates["coordinator"].advantage > 0.1
    assert not rates["shared"].significant()
    assert rates["shared"].success_rate < rates["shared"].chance  # a random direction per batch


def test_the_label_partys_accumulated_view_gives_no_scores_of_a_one_column_passive(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    one = {"imaging": parts["imaging"], "lab": parts["lab"].iloc[:, :1]}
    results = {}
    for protocol in ("coordinator", "shared"):
        est = small_model(
            VerticalLogisticRegression, protocol=protocol, batch_size=64, max_iter=8, tol=None
        )
        est.fit(one, y, label_party="imaging", keep_views=True)
        design = est.parts_["imaging"].design(one["imaging"])
        design = np.column_stack([design, np.ones(len(design))])
        column = est.parts_["lab"].design(one["lab"])[:, 0]
        results[protocol] = ScoreSolveAudit().run(est.views_["imaging"], design, column)
    # the audit can fail: where gradients are revealed it recovers the column exactly
    assert results["coordinator"].details["correlation"] == pytest.approx(1.0, abs=1e-6)
    assert results["coordinator"].success_rate == 1.0
    shared = results["shared"]
    assert shared.details["status"] == "solved"  # as many equations, now of masked shares
    assert not shared.significant()
    # a random direction in 569 dimensions: |correlation| above 0.25 has probability < 1e-9
    assert abs(shared.details["correlation"]) < 0.25


def test_the_coordinator_refuses_a_request_of_another_size_naming_the_party() -> None:
    spec = small_model(
        VerticalLogisticRegression, protocol="shared_coordinator", batch_size=64, key_bits=1024
    ).fit_spec("imaging", ["imaging", "lab"])
    layout = Sizes((11, 11), 1, 64, 1024, 256).gram_layout(0, 1)  # what the coordinator derives

    def data_party(name: str, inflate: bool):  # type: ignore[no-untyped-def]
        def run(fed):  # type: ignore[no-untyped-def]
            key = spec.policy.accept(VLR.recv(fed, "coordinator", "key", PublicKeyMessage), "c")
            SS.send(fed, "coordinator", "plan", Plan(columns=11, rows=256, curvature=1.0))
            if name == "imaging":
                VLR.send(fed, "coordinator", "outputs", Outputs(count=1))
            if inflate:  # the first step's request, one ciphertext too many
                cts = key.raw_encrypt([0] * (layout.n_ciphertexts + 1))
                block = EncryptedVector(key, cts, 0).to_wire()
                request = DecryptionRequest(data=block, layout=layout.to_dict())
                SS.child("gram-b0").send(fed, "coordinator", "req", request)
            SS.recv(fed, "coordinator", "never", Plan)  # wait for the coordinator's refusal

        return run

    roles = {
        "imaging": data_party("imaging", False),
        "lab": data_party("lab", True),  # the first cross Gram is lab's to mask and send
        "coordinator": SharedCoordinatorRole(spec),
    }
    n = layout.n_ciphertexts
    refusal = rf"party 'lab' .* asks for {n + 1} decryptions; this step has {n}"
    with pytest.raises(PartyFailedError, match=refusal):
        LocalFederation(timeout=30).run(roles)


def test_what_the_shared_protocol_cannot_do_is_refused_with_the_reason(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    three = {**parts, "genomics": parts["lab"].iloc[:, :5]}
    with pytest.raises(ValueError, match=r"'two_party' needs exactly two.*protocol='shared'"):
        small_model(VerticalLogisticRegression, protocol="two_party").fit(
            three, y, label_party="imaging"
        )
    with pytest.raises(ValueError, match="Adam's square roots cannot be computed on secret"):
        small_model(VerticalLogisticRegression, optimizer="adam").fit(
            parts, y, label_party="imaging"
        )
    with pytest.raises(ValueError, match="reveals no gradient, so label DP"):
        small_model(VerticalLogisticRegression, privacy=GaussianLabelDP(1.0), tol=None).fit(
            parts, y, label_party="imaging"
        )


def test_a_warm_start_splits_the_fitted_weights_into_fresh_shares(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    est = small_model(VerticalLogisticRegression, max_iter=2, batch_size=128, tol=None)
    est.fit(parts, y, label_party="imaging")
    before = {n: p.weights(with_intercept=n == "imaging") for n, p in est.parts_.items()}
    est.set_params(warm_start=True, learning_rate=1e-9, max_iter=1)
    est.fit(parts, y, label_party="imaging")
    for name, part in est.parts_.items():  # a step of 1e-9 leaves them where they were
        after = part.weights(with_intercept=name == "imaging")
        np.testing.assert_allclose(after, before[name], atol=SHARES_ATOL)
        assert np.any(after != 0)


def test_the_fixed_point_step_factors() -> None:
    momentum = make_optimizer("momentum", learning_rate=0.4)
    to_n, to_alpha, beta, step = fixed_point_step(momentum, 3, c=4.0, rows=64, alpha=1e-3)
    one = 2.0**64
    assert to_n / one == pytest.approx(1 / 256, rel=1e-15)
    assert to_alpha / one == pytest.approx(1e-3, rel=1e-15)
    assert (beta / one, step / one) == pytest.approx((0.9, 0.2), rel=1e-15)
    with pytest.raises(ValueError, match="not linear in the gradient"):
        fixed_point_step(make_optimizer("adam", learning_rate=0.1), 0, 4.0, 64, 0.0)


def test_coef_is_every_held_partys_coefficients_in_party_order(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    est = small_model(VerticalLogisticRegression, max_iter=1, batch_size=128, tol=None)
    est.fit(parts, y, label_party="imaging")
    assert est.coef_.shape == (1, 30)
    np.testing.assert_array_equal(est.coef_[0, :10], est.parts_["imaging"].coef)
    np.testing.assert_array_equal(est.coef_[0, 10:], est.parts_["lab"].coef)
    assert est.feature_names_in_[0] == "imaging:mean radius"
    lab_only = small_model(VerticalLogisticRegression)
    lab_only.parts_ = {"lab": est.parts_["lab"]}  # what a deployed party holds
    lab_only.data_parties_ = ["imaging", "lab"]
    assert lab_only.coef_.shape == (1, 20)  # its own, never another party's
    x, t = load_diabetes(return_X_y=True, as_frame=True)
    reg = small_model(VerticalLinearRegression, max_iter=1, batch_size=64, tol=None)
    reg.fit({"school": x.iloc[:, :4], "survey": x.iloc[:, 4:]}, t, label_party="school")
    assert reg.coef_.shape == (10,)  # as scikit-learn's LinearRegression


def test_scikit_learn_model_selection_splits_vertical_frames(breast) -> None:  # type: ignore[no-untyped-def]
    from sklearn.model_selection import GridSearchCV, cross_val_score, train_test_split

    from vfl import VerticalFrames

    parts, y = breast
    parts, y = {name: frame.iloc[:300] for name, frame in parts.items()}, y.iloc[:300]
    frames = VerticalFrames(parts, label_party="imaging")
    assert len(frames) == 300 and frames.shape == (300, 30)
    x_train, x_test, y_train, y_test = train_test_split(frames, y, test_size=0.3, random_state=0)
    assert isinstance(x_train, VerticalFrames) and len(x_test) == len(y_test) == 90
    assert x_train.parts["lab"].index.equals(y_train.index)  # every party, the same rows
    est = small_model(VerticalLogisticRegression, max_iter=2, batch_size=128, tol=None)
    scores = cross_val_score(est, frames, y, cv=2)
    assert scores.shape == (2,) and (scores > 0.7).all()  # two epochs; the majority is 0.63
    search = GridSearchCV(est, {"alpha": [1e-3, 1e-1]}, cv=2).fit(x_train, y_train)
    assert search.best_params_["alpha"] in (1e-3, 1e-1)
    assert search.score(x_test, y_test) > 0.8
    with pytest.raises(TypeError, match="pass label_party="):
        est.fit(parts, y)  # a plain dict needs the label party named


def _cohort() -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """The synthetic lab + imaging cohort's common patients (by the true pairing)."""
    from vfl.datasets import IMAGING_FEATURES, LAB_FEATURES, make_lab_imaging_cohort

    lab, imaging, truth = make_lab_imaging_cohort(3000, random_state=0)
    guest = imaging.loc[truth["imaging"], IMAGING_FEATURES].set_index(pd.RangeIndex(len(truth)))
    host = lab.loc[truth["lab"], LAB_FEATURES].set_index(guest.index)
    y = pd.Series(imaging.loc[truth["imaging"], "diagnosis"].to_numpy(), index=guest.index)
    return guest, host, y


@pytest.mark.parametrize("protocol", ["shared", "coordinator"])
@pytest.mark.parametrize("name", ["breast", "default_credit", "cohort"])
def test_the_defaults_reach_scikit_learn_on_fate_tables_for_every_seed(
    name: str, protocol: str
) -> None:
    """Through the plaintext twin, which equals the protocol to the fixed point (the tests
    above), so that five seeds of 30,000 rows take a second, not an hour. The epoch's mean
    iterate is what makes every seed pass: the last iterate strayed 0.018 below on
    default_credit (seed 4) under the shared protocol's momentum, 0.036 under Adam."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    from tests.vfl.linear.tables import hetero

    guest, host, y = _cohort() if name == "cohort" else hetero(name)
    train, test = train_test_split(guest.index, test_size=0.3, random_state=0, stratify=y)
    parts = {"guest": guest.loc[train], "host": host.loc[train]}
    joined = pd.concat([guest, host], axis=1)
    scaler = StandardScaler().fit(joined.loc[train])
    reference = LogisticRegression(max_iter=2000).fit(scaler.transform(joined.loc[train]), y[train])
    auc_sklearn = roc_auc_score(
        y[test], reference.predict_proba(scaler.transform(joined.loc[test]))[:, 1]
    )
    for seed in range(5):
        est = VerticalLogisticRegression(random_state=seed, protocol=protocol)
        weights, _ = plaintext_reference(est, parts, y[train], label_party="guest")
        scores = np.zeros(len(test))
        for party, frame in parts.items():
            mean, scale = frame.mean(), frame.std(ddof=0).replace(0, 1)
            z = ((({"guest": guest, "host": host}[party]).loc[test] - mean) / scale).to_numpy()
            w = weights[party]
            scores += z @ w[:-1] + w[-1] if party == "guest" else z @ w
        auc = roc_auc_score(y[test], scores)
        assert auc >= auc_sklearn - 0.01, (seed, auc, auc_sklearn)
