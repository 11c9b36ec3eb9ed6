"""Right by default on data nobody tuned to: the failures reported on a heavy-tailed credit
table (a constant step diverged, early stopping silently kept epoch 1-2), a forced
divergence, the penalty of scikit-learn's ``C``, and FATE's vertical tables with defaults."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.metrics import r2_score, roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from tests.vfl.linear.tables import hetero, small_model
from vfl.crypto import SecurityWarning
from vfl.linear import VerticalLinearRegression, VerticalLogisticRegression
from vfl.linear.logistic import probabilities
from vfl.linear.reference import plaintext_reference, plaintext_scores
from vfl.synthetic import make_heavy_tailed_credit
from vfl.training.convergence import LossCurve
from vfl.training.divergence import DivergenceWarning
from vfl.validation import LabelWarning, check_class_labels

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")


@pytest.fixture(scope="module")
def credit() -> tuple[dict[str, pd.DataFrame], pd.Series, dict[str, pd.DataFrame], pd.Series]:
    """15,000 rows of the heavy-tailed credit table (columns up to ~100 deviations out),
    cut as FATE cuts give_credit: x0-x4 at the label party, x5-x9 at the other."""
    x, y = make_heavy_tailed_credit(15_000, random_state=0)
    train, test = train_test_split(np.arange(len(y)), test_size=0.3, random_state=0, stratify=y)

    def cut(rows: np.ndarray) -> dict[str, pd.DataFrame]:
        return {"guest": x.iloc[rows, :5], "host": x.iloc[rows, 5:]}

    return cut(train), y.iloc[train], cut(test), y.iloc[test]


def sklearn_auc(parts, y, test_parts, y_test) -> float:  # type: ignore[no-untyped-def]
    """scikit-learn's default logistic regression on the joined, standardised table."""
    train, test = pd.concat(parts.values(), axis=1), pd.concat(test_parts.values(), axis=1)
    scaler = StandardScaler().fit(train)
    model = LogisticRegression().fit(scaler.transform(train), y)
    return float(roc_auc_score(y_test, model.decision_function(scaler.transform(test))))


def test_the_old_constant_step_diverges_on_heavy_tails_and_is_caught(credit) -> None:  # type: ignore[no-untyped-def]
    """The reported failure: a constant step of 0.3 on unclipped heavy-tailed columns makes
    the loss jump far above the untrained model's. It no longer passes silently: where the
    parties run their own steps (a gradient-revealing protocol) the fit warns, goes back to
    the best epoch with a smaller step, and records it; on shares the step is capped at the
    stability bound instead (test_an_absurd_step_on_shares_is_capped_at_the_stability_bound)."""
    parts, y, _, _ = credit
    old = dict(learning_rate=0.3, clip_outliers=False, alpha=1e-3, batch_size=256)
    est = small_model(
        VerticalLogisticRegression,
        **old,
        key_bits=512,  # no plaintext depends on the key size: the twin is the reference
        max_iter=4,
        random_state=2,
        protocol="two_party",
        optimizer="momentum",
    )
    with pytest.warns(DivergenceWarning, match="resumed from the best epoch"):
        est.fit(parts, y, label_party="guest")
    assert est.restarts_ == [2]
    assert est.loss_curve_[1] > 2 * np.log(2)  # epoch 2 at the old step: worse than nothing
    assert est.best_epoch_ != 2 and est.loss_curve_[est.best_epoch_ - 1] < np.log(2)
    _, twin = plaintext_reference(est, parts, y, label_party="guest")
    np.testing.assert_allclose(est.loss_curve_, twin, rtol=1e-4)  # the twin does the same


def test_the_defaults_converge_on_heavy_tails(credit) -> None:  # type: ignore[no-untyped-def]
    """With the defaults (only the label party named), the same table trains without a
    divergence: each party's clipped, standardised columns and its own step; the test AUC
    is at least scikit-learn's on the standardised table minus 0.01 (here it beats it: the
    clipping helps a linear model), encrypted and in the plaintext twin, for seeds 0-4."""
    parts, y, test_parts, y_test = credit
    baseline = sklearn_auc(parts, y, test_parts, y_test)
    est = small_model(VerticalLogisticRegression, key_bits=512)  # the twin is the reference
    with warnings.catch_warnings():
        warnings.simplefilter("error", DivergenceWarning)
        est.fit(parts, y, label_party="guest")
    assert est.restarts_ == []
    assert est.loss_curve_[0] < np.log(2)  # the first epoch already learns
    auc = roc_auc_score(y_test, est.decision_function(test_parts))
    assert auc > baseline - 0.01
    twin = plaintext_scores(est, parts, y, test_parts, label_party="guest")[:, 0]
    np.testing.assert_allclose(est.decision_function(test_parts), twin, atol=1e-4)
    for seed in range(1, 5):
        other = small_model(VerticalLogisticRegression, random_state=seed)
        scores = plaintext_scores(other, parts, y, test_parts, label_party="guest")
        assert roc_auc_score(y_test, scores[:, 0]) > baseline - 0.01


def test_an_absurd_step_warns_and_returns_the_best_epochs_model(breast_parts) -> None:  # type: ignore[no-untyped-def]
    """A learning rate of 10,000 under a gradient-revealing protocol: every epoch diverges,
    the fit restarts from the best model with a quarter of the step each time and gives up
    after six restarts, saying so; the model it returns is the best one it saw (never a
    diverged epoch's), at every party, and the twin does the same."""
    parts, y = breast_parts
    est = small_model(
        VerticalLogisticRegression,
        protocol="two_party",
        optimizer="momentum",
        learning_rate=1e4,
        max_iter=20,
        batch_size=64,
    )
    with pytest.warns(DivergenceWarning) as caught:
        est.fit(parts, y, label_party="imaging")
    message = next(str(w.message) for w in caught if w.category is DivergenceWarning)
    # every epoch is worse than the untrained model, even at 4**-6 of the step: six
    # restarts, then the fit stops and says so, keeping the untrained model (epoch 0)
    assert est.restarts_ == [1, 2, 3, 4, 5, 6] and est.n_iter_ == 7
    assert "stopped" in message and "clip_outliers" in message
    assert est.best_epoch_ == 0
    assert all(not np.any(p.coef) for p in est.parts_.values())
    assert all(loss > np.log(2) for loss in est.loss_curve_)
    _, twin = plaintext_reference(est, parts, y, label_party="imaging")
    np.testing.assert_allclose(est.loss_curve_, twin, rtol=1e-4)


def test_an_absurd_step_on_shares_is_capped_at_the_stability_bound(breast_parts) -> None:  # type: ignore[no-untyped-def]
    """Under the secret-shared protocol weights past their public bound would wrap around
    unseen, so a step beyond the stability bound is capped (and said so) instead: the fit
    learns, as its twin does."""
    parts, y = breast_parts
    est = small_model(VerticalLogisticRegression, learning_rate=1e4, max_iter=6, batch_size=64)
    with pytest.warns(UserWarning, match="beyond the secret-shared protocol's stability"):
        est.fit(parts, y, label_party="imaging")
    assert max(est.loss_curve_) < np.log(2)  # every epoch learns
    _, twin = plaintext_reference(est, parts, y, label_party="imaging")
    np.testing.assert_allclose(est.loss_curve_, twin, rtol=1e-4)


@pytest.fixture(scope="module")
def breast_parts() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    return {"imaging": x[cols[:10]], "lab": x[cols[10:]]}, y


def test_the_divergence_rule_restarts_shrinks_and_gives_up() -> None:
    curve = LossCurve(tol=1e-3, patience=2, initial=0.69, rise=0.5, max_restarts=1, max_shrinks=1)
    assert not curve.add(0.5) and curve.keep and not curve.restart
    assert not curve.add(0.9) and curve.restart and not curve.keep  # 0.9 > 1.5 * 0.5
    assert curve.restarts == [2] and curve.best_epoch == 1
    assert not curve.add(0.45) and curve.keep
    assert not curve.add(0.4499)  # stale 1
    assert not curve.add(0.4498) and curve.restart and curve.shrinks == [5]  # stale 2: shrink
    assert curve.step_factor == pytest.approx(1 / 16)
    assert curve.add(float("nan"))  # a second divergence, beyond max_restarts: stop
    assert curve.gave_up and "stopped" in curve.describe()
    off = LossCurve(tol=None, initial=0.69)  # the rules are off by default (label DP, split)
    assert not off.add(5.0) and off.keep and not off.restart
    assert off.add(float("nan")) and off.gave_up  # only a non-finite loss stops it


def test_the_default_penalty_is_scikit_learns_c() -> None:
    """``alpha`` defaults to ``1 / (C * rows)``: the ridge regression fitted on full batches
    for 600 epochs is scikit-learn's ``Ridge(alpha=1 / C)``
    on the standardised columns and target, at C = 1 and at C = 0.01 (where the penalty
    moves the weights visibly); an explicit ``alpha`` overrides C."""
    from sklearn.datasets import make_regression

    values, target_values = make_regression(300, 8, noise=20.0, random_state=0)
    x = pd.DataFrame(values, columns=[f"c{i}" for i in range(8)])
    t = pd.Series(target_values)
    parts = {"school": x.iloc[:, :4], "survey": x.iloc[:, 4:]}
    z = StandardScaler().fit_transform(x)
    target = (t - t.mean()) / t.std(ddof=0)
    for c in (1.0, 0.01):
        est = VerticalLinearRegression(
            C=c, random_state=0, clip_outliers=False, batch_size=512, max_iter=600, tol=None
        )
        assert est.fit_spec("school", list(parts), len(t)).alpha == pytest.approx(1 / (c * len(t)))
        weights, _ = plaintext_reference(est, parts, t, label_party="school")
        ours = np.concatenate([weights["school"][:-1], weights["survey"]])
        ridge = Ridge(alpha=1 / c).fit(z, target)
        np.testing.assert_allclose(ours, ridge.coef_, atol=1e-5)
        if c < 1:  # not least squares: the penalty is the one that was asked for
            assert np.abs(ours - LinearRegression().fit(z, target).coef_).max() > 0.05
    explicit = VerticalLinearRegression(alpha=0.5, C=7.0)
    assert explicit.fit_spec("school", list(parts), 100).alpha == 0.5
    with pytest.raises(ValueError, match="C must be > 0"):
        VerticalLogisticRegression(C=0.0).fit_spec("school", list(parts), 100)


def fate_split(name: str):  # type: ignore[no-untyped-def]
    guest, host, y = hetero(name)
    regression = name == "student"
    train, test = train_test_split(
        np.arange(len(y)), test_size=0.3, random_state=0, stratify=None if regression else y
    )
    features = {"guest": guest, "host": host}
    parts = {p: f.iloc[train] for p, f in features.items()}
    test_parts = {p: f.iloc[test] for p, f in features.items()}
    return parts, y.iloc[train], test_parts, y.iloc[test]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["breast", "default_credit", "student", "vehicle_scale"])
def test_fate_tables_with_the_defaults_are_within_001_of_scikit_learn(name: str) -> None:
    """The goal on real data: default arguments (only the label party named), model seeds
    0-4, test AUC (vehicle: one-vs-rest macro) or R2 (student) within 0.01 of scikit-learn's
    default on the joined, standardised table. The seeds run on the plaintext twin (the
    encrypted protocol equals it, tested in test_shared.py and above)."""
    parts, y, test_parts, y_test = fate_split(name)
    train = pd.concat(parts.values(), axis=1)
    test = pd.concat(test_parts.values(), axis=1)
    scaler = StandardScaler().fit(train)
    z_train, z_test = scaler.transform(train), scaler.transform(test)
    for seed in range(5):
        if name == "student":
            est = VerticalLinearRegression(random_state=seed)
            scores = plaintext_scores(est, parts, y, test_parts, label_party="guest")
            _, keep = est.label_targets(y, parts["guest"].index, "guest")
            ours = r2_score(y_test, keep["target_mean"] + keep["target_scale"] * scores[:, 0])
            baseline = r2_score(y_test, LinearRegression().fit(z_train, y).predict(z_test))
        else:
            est = VerticalLogisticRegression(random_state=seed)
            proba = probabilities(plaintext_scores(est, parts, y, test_parts, label_party="guest"))
            reference = LogisticRegression().fit(z_train, y).predict_proba(z_test)
            if proba.shape[1] == 2:
                ours = roc_auc_score(y_test, proba[:, 1])
                baseline = roc_auc_score(y_test, reference[:, 1])
            else:
                ours = roc_auc_score(y_test, proba, multi_class="ovr")
                baseline = roc_auc_score(y_test, reference, multi_class="ovr")
        assert ours > baseline - 0.01, (name, seed, ours, baseline)


@pytest.mark.slow
def test_a_fate_table_encrypted_with_the_defaults_equals_its_twin() -> None:
    """FATE's breast table, encrypted with the default protocol and defaults (512-bit keys
    to keep it short: the key's size changes no plaintext): the scores are the plaintext
    twin's, so the twin's figures above are the encrypted model's."""
    parts, y, test_parts, y_test = fate_split("breast")
    est = small_model(VerticalLogisticRegression, key_bits=512)
    est.fit(parts, y, label_party="guest")
    twin = plaintext_scores(est, parts, y, test_parts, label_party="guest")[:, 0]
    scores = est.decision_function(test_parts)
    # shares truncate each step by up to 2 units of 2**-24: over ~100 epochs the scores
    # drift from the twin's by about 1e-3 (of scores of size 2), the AUC by nothing
    np.testing.assert_allclose(scores, twin, atol=1e-2)
    assert abs(roc_auc_score(y_test, scores) - roc_auc_score(y_test, twin)) < 1e-3
    assert roc_auc_score(y_test, twin) > 0.98


def test_count_labels_and_tiny_classes_are_named() -> None:
    """A classifier given counts (doctor visits 0-9, most at 0) warns and names
    VerticalPoissonRegression; a class of fewer than five rows is named; digit-like labels
    (0-9, evenly spread) are not counts."""
    index = pd.RangeIndex(1000)
    rng = np.random.default_rng(0)
    visits = np.minimum(rng.poisson(0.4, 1000), 9)
    visits[:10] = np.arange(10)  # every count from 0 to 9 present
    with pytest.warns(LabelWarning, match="VerticalPoissonRegression"):
        check_class_labels(visits, index, "imaging", max_classes=256)
    with pytest.warns(LabelWarning, match=r"fewer than 5 rows: 'rare' \(2 rows\)"):
        check_class_labels(["common"] * 998 + ["rare"] * 2, index, "imaging", max_classes=256)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LabelWarning)
        check_class_labels(np.arange(1000) % 10, index, "imaging", max_classes=256)


def test_verbose_shows_the_label_partys_epochs_labelled(breast_parts, capsys) -> None:  # type: ignore[no-untyped-def]
    """``verbose=1``: one labelled line per epoch with loss, step and best epoch (not a
    terminal here, so lines); ``verbose=0`` shows none of them."""
    parts, y = breast_parts
    small_model(VerticalLogisticRegression, max_iter=2, tol=None, verbose=1).fit(
        parts, y, label_party="imaging"
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "epoch" in line and "loss" in line]
    assert len(lines) == 2, err
    assert lines[0].startswith("imaging: epoch 1/2 loss ") and " step " in lines[0]
    assert " best 1" in lines[0] and lines[1].startswith("imaging: epoch 2/2")
    small_model(VerticalLogisticRegression, max_iter=2, tol=None).fit(
        parts, y, label_party="imaging"
    )
    assert "epoch 1/2" not in capsys.readouterr().err
