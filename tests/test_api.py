"""One estimator surface (DESIGN.md, "One estimator surface"; :mod:`vfl.estimator`): every
public estimator of every family, found from the packages' exports, speaks alike -- the same
parameter names and defaults, ``get_params``/``clone``, ``save(path)``/``load(path)`` giving
the same predictions, ``history_`` and ``privacy_ledger_`` after ``fit`` -- and the renamed
keywords still work for a while, each with a FutureWarning."""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, clone

import horizontal
import transfer
import vfl
from vfl.privacy import PrivacyLedger
from vfl.privacy.options import GaussianLabelDP, RandomizedResponse

EXPECTED = {
    "VerticalLogisticRegression",
    "VerticalLinearRegression",
    "VerticalPoissonRegression",
    "SplitNNClassifier",
    "SplitNNRegressor",
    "FederatedTransferClassifier",
    "EncoderTransferClassifier",
    "FederatedClassifier",
    "FederatedRegressor",
    "FederatedLasso",
    "SecureBoostClassifier",
    "SecureBoostRegressor",
}
"""Every public estimator; a new one must join the checks below (and this set)."""

BOOSTING = {"SecureBoostClassifier", "SecureBoostRegressor"}
"""The number of trees is ``n_estimators``, as XGBoost and LightGBM users know it (issue #32),
not ``max_iter``; every other shared name is the same."""

LOCAL = {"EncoderTransferClassifier"}
"""Runs at one party alone: no federation, so no ``timeout`` (nor ``protocol``)."""

NETWORKS = {
    "SplitNNClassifier",
    "SplitNNRegressor",
    "FederatedTransferClassifier",
    "EncoderTransferClassifier",
    "FederatedClassifier",
    "FederatedRegressor",
}
"""The estimators with (optional) hidden layers: ``hidden_layer_sizes``."""

NO_RANDOMNESS = {"FederatedLasso"}
"""Proximal gradient draws nothing (DP noise comes from the OS, never seeded): no
``random_state`` to give (documented in its docstring)."""

NO_PRIVACY = {"VerticalPoissonRegression", "EncoderTransferClassifier"}
"""No DP mechanism runs in these fits (their ``privacy_ledger_`` stays empty)."""

RENAMED = {"rounds", "hidden", "label_epsilon", "label_delta", "row_clip", "secure"}
RENAMED |= {"secure_aggregation", "protected_layer", "embedding_noise"}
"""The old spellings, which no estimator's ``get_params`` may list any more."""


def _public_estimators() -> dict[str, type[Any]]:
    found: dict[str, type[Any]] = {}
    for package in (vfl, horizontal, transfer):
        for name in package.__all__:
            value = getattr(package, name)
            estimator = inspect.isclass(value) and issubclass(value, BaseEstimator)
            if estimator and hasattr(value, "fit") and name != "PartyPreprocessor":
                found[name] = value
    return found


ESTIMATORS = _public_estimators()


def _params(cls: type[Any]) -> dict[str, inspect.Parameter]:
    return {
        n: p
        for n, p in inspect.signature(cls.__init__).parameters.items()
        if n != "self" and p.kind != p.VAR_KEYWORD
    }


def test_every_public_estimator_is_checked() -> None:
    assert set(ESTIMATORS) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_same_concept_has_the_same_name_and_default(name: str) -> None:
    cls = ESTIMATORS[name]
    params = _params(cls)
    assert ("n_estimators" if name in BOOSTING else "max_iter") in params
    assert "verbose" in params
    assert params["verbose"].default == 0
    if name not in NO_RANDOMNESS:
        assert params["random_state"].default is None  # fresh randomness unless seeded
    if name not in LOCAL:
        assert params["timeout"].default is None  # vfl.estimator.wait_limit
        assert "protocol" in params  # the one switch for the secure variant
    if name in NETWORKS:
        assert "hidden_layer_sizes" in params
    if name not in NO_PRIVACY:
        assert params["privacy"].default is None  # the one way to ask for DP
    assert not RENAMED & set(params), f"{name} still lists {RENAMED & set(params)}"
    for method in ("fit", "save", "load"):
        assert callable(getattr(cls, method, None)), f"{name} has no {method}"
    estimator = cls()
    assert set(estimator.get_params()) == set(params)
    again = clone(estimator)
    assert again.get_params() == estimator.get_params()


def test_label_epsilon_no_longer_means_two_mechanisms() -> None:
    linear = ESTIMATORS["VerticalLogisticRegression"](privacy=GaussianLabelDP(1.0))
    split = ESTIMATORS["SplitNNClassifier"](privacy=RandomizedResponse(1.0))
    assert type(linear.privacy).__name__ != type(split.privacy).__name__
    with pytest.raises(ValueError, match="GaussianLabelDP"):
        ESTIMATORS["VerticalLogisticRegression"](
            protocol="coordinator", tol=None, privacy=RandomizedResponse(1.0)
        )._check_params()


# -- deprecated spellings ----------------------------------------------------------------------

DEPRECATED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("FederatedClassifier", {"rounds": 7}, {"max_iter": 7}),
    ("FederatedRegressor", {"secure_aggregation": None}, {"protocol": "plain"}),
    ("FederatedTransferClassifier", {"hidden": (4,)}, {"hidden_layer_sizes": (4,)}),
    ("FederatedTransferClassifier", {"secure": False}, {"protocol": "plain"}),
    (
        "FederatedTransferClassifier",
        {"label_epsilon": 2.0},
        {"privacy": RandomizedResponse(2.0)},
    ),
    ("EncoderTransferClassifier", {"hidden": (3,)}, {"hidden_layer_sizes": (3,)}),
    ("SplitNNClassifier", {"label_epsilon": 1.0}, {"privacy": RandomizedResponse(1.0)}),
    ("SplitNNClassifier", {"protected_layer": None}, {"protocol": "plain"}),
    (
        "VerticalLogisticRegression",
        {"label_epsilon": 1.0, "label_delta": 1e-6, "row_clip": 2.0},
        {"privacy": GaussianLabelDP(1.0, delta=1e-6, row_clip=2.0)},
    ),
    ("FederatedLasso", {"secure_aggregation": None}, {"protocol": "plain"}),
]


@pytest.mark.parametrize(("name", "old", "new"), DEPRECATED)
def test_old_keywords_still_work_with_a_future_warning(
    name: str, old: dict[str, Any], new: dict[str, Any]
) -> None:
    with pytest.warns(FutureWarning) as caught:
        estimator = ESTIMATORS[name](**old)
    said = sorted(str(w.message) for w in caught)
    assert [m for m in said if m.startswith(f"{name}(")] == said and len(said) == len(old)
    for keyword in old:
        assert any(re.match(re.escape(f"{name}({keyword}=...) is deprecated"), m) for m in said)
    assert {w.filename for w in caught} == {__file__}  # the warning points at the caller
    params = estimator.get_params()
    assert {k: params[k] for k in new} == new
    assert not set(old) & set(params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the clone is spelled the new way
        assert clone(estimator).get_params() == params


# An old keyword beside the parameter replacing it is refused, never silently resolved: each
# of these once dropped the secure protocol, the privacy or the size given in the new spelling.
CONFLICTS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "SplitNNClassifier",
        {"protocol": "protected", "protected_layer": None},
        "protocol",
        "protected_layer",
    ),
    (
        "FederatedClassifier",
        {"protocol": "secagg", "secure_aggregation": None},
        "protocol",
        "secure_aggregation",
    ),
    (
        "FederatedLasso",
        {"protocol": "secagg", "secure_aggregation": None},
        "protocol",
        "secure_aggregation",
    ),
    ("FederatedTransferClassifier", {"protocol": "masked", "secure": False}, "protocol", "secure"),
    ("FederatedRegressor", {"max_iter": 5, "rounds": 7}, "max_iter", "rounds"),
    (
        "FederatedTransferClassifier",
        {"hidden_layer_sizes": (4,), "hidden": (8,)},
        "hidden_layer_sizes",
        "hidden",
    ),
    (
        "EncoderTransferClassifier",
        {"hidden_layer_sizes": (4,), "hidden": (8,)},
        "hidden_layer_sizes",
        "hidden",
    ),
    ("SplitNNRegressor", {"privacy": None, "embedding_noise": None}, "privacy", "embedding_noise"),
    (
        "VerticalLinearRegression",
        {"privacy": GaussianLabelDP(1.0), "label_delta": 1e-6},
        "privacy",
        "label_delta",
    ),
    (
        "VerticalLogisticRegression",
        {"privacy": None, "label_epsilon": 1.0},
        "privacy",
        "label_epsilon",
    ),
]


@pytest.mark.parametrize(("name", "given", "new", "old"), CONFLICTS)
def test_an_old_keyword_beside_its_replacement_is_a_type_error_naming_both(
    name: str, given: dict[str, Any], new: str, old: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before any deprecation is announced
        with pytest.raises(TypeError, match=re.escape(f"pass {new}= or the deprecated {old}=")):
            ESTIMATORS[name](**given)


def test_an_old_fit_keyword_beside_its_replacement_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=re.escape("pass coef_init= or the deprecated warm_start=")):
        ESTIMATORS["FederatedLasso"]().fit({}, coef_init=np.zeros(2), warm_start=np.ones(2))


def test_an_unknown_keyword_is_still_a_type_error() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'round'"):
        ESTIMATORS["FederatedClassifier"](round=3)


# -- fit, history_, privacy_ledger_, save and load -------------------------------------------


def _table(rows: int = 80, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame: pd.DataFrame = pd.DataFrame(rng.normal(size=(rows, 4)), columns=["a1", "a2", "b1", "b2"])
    return frame


def _vertical(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {"a": frame[["a1", "a2"]], "b": frame[["b1", "b2"]]}


def _labels(frame: pd.DataFrame) -> pd.Series:
    return (frame.sum(axis=1) > 0).astype(int)


def _clients(frame: pd.DataFrame, y: Any) -> dict[str, tuple[Any, Any]]:
    half = len(frame) // 2
    values, target = frame.to_numpy(), np.asarray(y)
    return {"h1": (values[:half], target[:half]), "h2": (values[half:], target[half:])}


SMALL_KEYS: dict[str, Any] = {"key_bits": 1024, "insecure": True}  # tests only


def _vertical_case(name: str, target: Callable[[pd.DataFrame], Any], **options: Any) -> Any:
    frame = _table()
    parts = _vertical(frame)

    def fit() -> Any:
        model = ESTIMATORS[name](max_iter=2, tol=None, random_state=0, **SMALL_KEYS, **options)
        return model.fit(parts, target(frame), label_party="a")

    return fit, lambda model: model.predict(parts)


def _transfer_case() -> Any:
    from vfl.datasets import make_transfer_pair

    pair = make_transfer_pair(120, 90, n_overlap=30, target_labels=20, random_state=1)
    source = pair.source.drop(columns="patient_id")
    target = pair.target.drop(columns="patient_id")

    def fit() -> Any:
        model = ESTIMATORS["FederatedTransferClassifier"](max_iter=2, random_state=0, **SMALL_KEYS)
        return model.fit(
            source,
            target,
            pair.source_labels,
            overlap=pair.overlap,
            target_labels=pair.target_labels,
        )

    return fit, lambda model: model.predict_proba(target)


def _encoder_case() -> Any:
    from transfer import EncoderArtifact
    from transfer.encoder import build_encoder
    from vfl import persistence

    frame = _table()
    encoder = build_encoder(2, 3, ())
    artifact = EncoderArtifact(
        columns=["a1", "a2"],
        mean=np.zeros(2),
        scale=np.ones(2),
        dim=3,
        hidden=[],
        state=persistence.state_dict_to_arrays(encoder.state_dict()),
    )

    def fit() -> Any:
        model = ESTIMATORS["EncoderTransferClassifier"](artifact, max_iter=5, random_state=0)
        return model.fit(frame, _labels(frame))

    return fit, lambda model: model.predict_proba(frame)


def _horizontal_case(name: str, target: Callable[[pd.DataFrame], Any], **options: Any) -> Any:
    frame = _table()
    clients = _clients(frame, target(frame))

    def fit() -> Any:
        return ESTIMATORS[name](max_iter=2, random_state=0, **options).fit(clients)

    return fit, lambda model: model.predict(frame.to_numpy())


def _lasso_case() -> Any:
    frame = _table()
    clients = _clients(frame, frame["a1"] * 2 - frame["b2"])

    def fit() -> Any:
        return ESTIMATORS["FederatedLasso"](alpha=0.05, max_iter=20).fit(clients)

    return fit, lambda model: model.predict(frame.to_numpy())


def _split_case(name: str, target: Callable[[pd.DataFrame], Any]) -> Any:
    frame = _table()
    parts = _vertical(frame)

    def fit() -> Any:
        model = ESTIMATORS[name](max_iter=2, tol=None, batch_size=32, random_state=0)
        return model.fit(parts, target(frame), label_party="a")

    return fit, lambda model: model.predict(parts)


def _boost_case(name: str, target: Callable[[pd.DataFrame], Any]) -> Any:
    frame = _table()
    parts = _vertical(frame)

    def fit() -> Any:
        model = ESTIMATORS[name](n_estimators=2, max_depth=2, random_state=0, **SMALL_KEYS)
        return model.fit(parts, target(frame), label_party="a")

    return fit, lambda model: model.predict(parts)


CASES: dict[str, Callable[[], Any]] = {
    "VerticalLogisticRegression": lambda: _vertical_case("VerticalLogisticRegression", _labels),
    "VerticalLinearRegression": lambda: _vertical_case(
        "VerticalLinearRegression", lambda f: f["a1"] + f["b1"]
    ),
    "VerticalPoissonRegression": lambda: _vertical_case(
        "VerticalPoissonRegression",
        lambda f: pd.Series(np.random.default_rng(0).poisson(np.exp(f["a1"] / 2))),
        protocol="coordinator",
        batch_size=40,
    ),
    "SplitNNClassifier": lambda: _split_case("SplitNNClassifier", _labels),
    "SplitNNRegressor": lambda: _split_case("SplitNNRegressor", lambda f: f["a1"] - f["b2"]),
    "FederatedTransferClassifier": _transfer_case,
    "EncoderTransferClassifier": _encoder_case,
    "FederatedClassifier": lambda: _horizontal_case(
        "FederatedClassifier", _labels, module="linear"
    ),
    "FederatedRegressor": lambda: _horizontal_case(
        "FederatedRegressor",
        lambda f: f["a1"] + f["b1"],
        hidden_layer_sizes=(4,),
        early_stopping=False,
    ),
    "FederatedLasso": _lasso_case,
    "SecureBoostClassifier": lambda: _boost_case("SecureBoostClassifier", _labels),
    "SecureBoostRegressor": lambda: _boost_case(
        "SecureBoostRegressor", lambda f: f["a1"] + f["b1"]
    ),
}


def test_every_estimator_has_a_fit_case() -> None:
    assert set(CASES) == EXPECTED


def _check_history(history: list[Any]) -> None:
    """The one record schema (:mod:`vfl.estimator`): a dict per epoch or round with its
    1-based ``epoch``, its ``loss`` (None where the party computes none) and its
    ``seconds``."""
    for number, record in enumerate(history, start=1):
        assert isinstance(record, dict), f"record {number} is a {type(record).__name__}"
        assert record["epoch"] == number
        assert record["loss"] is None or np.isfinite(record["loss"])
        assert isinstance(record["seconds"], float) and record["seconds"] >= 0


@pytest.mark.filterwarnings("ignore::vfl.crypto.SecurityWarning")  # 1024-bit keys
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_fitted_estimator_has_its_history_and_ledger_and_saves_and_loads(
    name: str, tmp_path: Path
) -> None:
    fit, predict = CASES[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small keys, few epochs
        model = fit()
    assert isinstance(model.history_, list) and model.history_  # a record per epoch or round
    assert len(model.history_) == model.n_iter_
    _check_history(model.history_)
    assert isinstance(model.privacy_ledger_, PrivacyLedger)
    assert len(model.privacy_ledger_) == 0  # no mechanism asked for, none spent
    before = predict(model)
    written = model.save(tmp_path / "model")
    assert isinstance(written, Path) and written.exists()
    loaded = clone(model).load(written)
    np.testing.assert_allclose(predict(loaded), before, rtol=0, atol=1e-9)
    assert isinstance(loaded.privacy_ledger_, PrivacyLedger)


def test_a_privacy_object_spends_in_the_fitted_ledger_which_the_saved_model_keeps(
    tmp_path: Path,
) -> None:
    frame = _table()
    parts = _vertical(frame)
    model = ESTIMATORS["SplitNNClassifier"](
        max_iter=1, random_state=0, privacy=RandomizedResponse(2.0)
    ).fit(parts, _labels(frame), label_party="a")
    (entry,) = model.privacy_ledger_.entries
    assert entry.holder == "a" and entry.mechanism == "randomized_response"
    loaded = clone(model).load(model.save(tmp_path / "split"))
    assert loaded.privacy_ledger_.epsilon(holder="a") == pytest.approx(
        model.privacy_ledger_.epsilon(holder="a")
    )


def test_saving_over_an_earlier_model_leaves_nothing_of_it_to_load(tmp_path: Path) -> None:
    import json
    import shutil

    frame = _table()
    parts = _vertical(frame)
    folder = tmp_path / "split"
    fit = ESTIMATORS["SplitNNClassifier"]
    private = fit(max_iter=1, random_state=0, privacy=RandomizedResponse(2.0))
    private.fit(parts, _labels(frame), label_party="a").save(folder)
    assert (folder / "privacy_ledger.json").exists()
    shutil.copy(folder / "b.npz", folder / "c.npz")  # a party of neither later fit
    plain = fit(max_iter=1, random_state=0).fit(parts, _labels(frame), label_party="a")
    assert plain.save(folder) == folder
    assert json.loads((folder / "model.json").read_text())["files"] == ["a.npz", "b.npz"]
    loaded = clone(plain).load(folder)
    assert len(loaded.privacy_ledger_) == 0  # not the DP fit's ledger
    assert set(loaded.parts_) == {"a", "b"}  # not c.npz, which the manifest does not list
    np.testing.assert_allclose(loaded.predict_proba(parts), plain.predict_proba(parts))
