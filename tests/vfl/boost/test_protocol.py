"""SecureBoost's protocol: encrypted histograms give the trees of the plaintext twin, and the
transcript holds no gradient, no threshold, no raw column."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.metrics import roc_auc_score

from vfl.audit.transcript import find_plaintext
from vfl.boost.bins import BinMapper
from vfl.boost.estimator import SecureBoostClassifier, SecureBoostRegressor
from vfl.boost.objectives import Logistic
from vfl.boost.splits import SplitRule
from vfl.boost.twin import boost_twin

SMALL = {"key_bits": 1024, "insecure": True}  # tests only: the default is 2048 bits


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small keys, protocol="plain"
        yield


@pytest.fixture(scope="module")
def breast() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    x, y = x.iloc[:300], y.iloc[:300]
    x = x.mask(np.random.default_rng(0).random(x.shape) < 0.05)  # some values missing
    return {"imaging": x.iloc[:, 12:], "lab": x.iloc[:, :12]}, y


def _structure(model: SecureBoostClassifier) -> list[Any]:
    out = []
    for tree in model.parts_[model.label_party_].trees:
        out.append((tree.owner, tree.split, tree.left, [np.round(v, 12) for v in tree.value]))
    tables = {
        p: (t.table.feature, t.table.bin, t.table.missing_left) for p, t in model.parts_.items()
    }
    own = model.parts_[model.label_party_].table
    return [out, tables, (own.feature, own.bin, own.missing_left)]


def test_encrypted_histograms_grow_the_plaintext_twins_trees(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    options: dict[str, Any] = dict(n_estimators=3, max_depth=3, max_bin=16)
    encrypted = SecureBoostClassifier(**options, **SMALL).fit(
        parts, y, label_party="imaging", keep_payloads=True
    )
    plain = SecureBoostClassifier(**options, protocol="plain").fit(parts, y, label_party="imaging")
    assert _structure(encrypted) == _structure(plain)
    np.testing.assert_allclose(encrypted.predict_proba(parts), plain.predict_proba(parts))
    # and the plaintext protocol is the in-process twin
    mappers = {p: BinMapper(16, party=p).fit(f) for p, f in parts.items()}
    codes = {p: mappers[p].transform(parts[p]) for p in ("imaging", "lab")}
    twin = boost_twin(
        codes,
        16,
        y.to_numpy().astype(float),
        Logistic(),
        n_estimators=3,
        max_depth=3,
        learning_rate=0.3,
        rule=SplitRule(),
    )
    np.testing.assert_allclose([r["loss"] for r in plain.history_], twin.losses, rtol=1e-12)
    assert sum(t.n_leaves for t in twin.trees) == sum(
        t.n_leaves for t in plain.parts_["imaging"].trees
    )
    # nothing the lab holds crosses in the clear: its columns, the gradients, its cuts
    lab_cuts = [c for c in encrypted.parts_["lab"].mapper.cuts_ if len(c)]
    secret = {"lab": [parts["lab"].to_numpy()] + [np.asarray(c) for c in lab_cuts]}
    assert find_plaintext(encrypted.transcript_, secret) == []
    p0 = np.full(len(y), y.mean())
    grads = {"imaging": [(p0 - y.to_numpy())[:, None]]}
    assert find_plaintext(encrypted.transcript_, grads) == []
    assert roc_auc_score(y, encrypted.predict_proba(parts)[:, 1]) > 0.97


def test_multiclass_and_regression_fit_in_one_pass_of_the_protocol() -> None:
    x, y = load_iris(return_X_y=True, as_frame=True)
    parts = {"a": x.iloc[:, :2], "b": x.iloc[:, 2:]}
    model = SecureBoostClassifier(n_estimators=5, max_depth=2, **SMALL).fit(
        parts, y, label_party="a"
    )
    assert model.predict_proba(parts).shape == (150, 3)
    assert model.score(parts, y) > 0.9
    target = x.iloc[:, 3] * 2.0 + x.iloc[:, 0]
    reg = SecureBoostRegressor(n_estimators=10, max_depth=3, **SMALL).fit(
        {"a": x.iloc[:, :2], "b": x.iloc[:, 2:3]}, target, label_party="a"
    )
    assert reg.score({"a": x.iloc[:, :2], "b": x.iloc[:, 2:3]}, target) > 0.9


@pytest.mark.parametrize("executor", [False, True])
def test_a_hosts_bin_products_on_two_workers_are_those_of_one(executor: bool) -> None:
    """Two worker processes, or an executor the party runs (a Dask client is one: the
    executor layer, :mod:`linkage.executors`; a thread pool here)."""
    from concurrent.futures import ThreadPoolExecutor

    from vfl.boost.protocol import BoostSpec, HostRole

    rng = np.random.default_rng(0)
    modulus = (1 << 127) - 1
    cts = [int(v) for v in rng.integers(1, 2**62, size=2500)]
    codes = rng.integers(0, 9, size=(2500, 3)).astype(np.uint8)
    rows = np.sort(rng.choice(2500, size=2200, replace=False))
    with ThreadPoolExecutor(2) as pool:
        workers: Any = pool if executor else 2
        spec = BoostSpec("a", ("a", "b"), 1, 1, 0.3, SplitRule(), 8, None, 2500, workers=workers)
        got = HostRole(spec, pd.DataFrame())._products(cts, codes, rows, 9, modulus)
    want = [[1] * 9 for _ in range(3)]
    for r in rows:
        for col in range(3):
            want[col][codes[r, col]] = want[col][codes[r, col]] * cts[r] % modulus
    assert [[int(v) for v in col] for col in got] == want


def test_early_stopping_keeps_the_trees_up_to_the_best_validation_loss(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    model = SecureBoostClassifier(
        n_estimators=60,
        max_depth=4,
        learning_rate=0.5,
        early_stopping=True,
        n_iter_no_change=3,
        random_state=0,
        protocol="plain",
    ).fit(parts, y, label_party="imaging")
    losses = [r["val_loss"] for r in model.history_]
    best = int(np.argmin(losses)) + 1
    assert len(model.history_) < 60 and len(model.history_) == best + 3  # stopped 3 after
    assert model.n_estimators_ == best == len(model.parts_["imaging"].trees)
    trees = model.parts_["imaging"].trees
    kept = [s for t in trees for o, s in zip(t.owner, t.split, strict=True) if o == 1]
    assert len(model.parts_["lab"].table.feature) == max(kept, default=-1) + 1  # no more
    assert all(r["seconds"] > 0 and r["loss"] > 0 for r in model.history_)
    again = SecureBoostClassifier(
        n_estimators=best,
        max_depth=4,
        learning_rate=0.5,
        early_stopping=True,
        n_iter_no_change=3,
        random_state=0,
        protocol="plain",
    ).fit(parts, y, label_party="imaging")
    np.testing.assert_allclose(again.predict_proba(parts), model.predict_proba(parts))
    with pytest.raises(ValueError, match="validation_fraction must be in"):
        SecureBoostClassifier(early_stopping=True, validation_fraction=1.5).fit(
            parts, y, label_party="imaging"
        )


def test_saved_parts_score_as_the_model_and_each_holds_only_its_party(breast, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from vfl.boost.part import BoostPart

    parts, y = breast
    model = SecureBoostClassifier(n_estimators=4, max_depth=3, **SMALL).fit(
        parts, y, label_party="imaging"
    )
    folder = model.save(tmp_path / "model")
    again = SecureBoostClassifier().load(folder)
    np.testing.assert_array_equal(again.predict_proba(parts), model.predict_proba(parts))
    assert list(again.classes_) == [0, 1] and again.n_estimators_ == 4
    lab = BoostPart.load(folder / "lab.npz")
    imaging = BoostPart.load(folder / "imaging.npz")
    assert lab.role == "passive" and lab.trees == [] and lab.start is None
    assert "classes" not in lab.extra and imaging.extra["classes"] == [0, 1]
    assert lab.input_columns == list(parts["lab"].columns)  # its own columns, no other's
    assert imaging.input_columns == list(parts["imaging"].columns)
    assert len(lab.table.feature) == sum(t.owner.count(1) for t in imaging.trees)
    with pytest.raises(ValueError, match="holds a classification model"):
        SecureBoostRegressor().load(folder)
    # the label party's classes are read from its own part, wherever it is listed
    hosts_first = {"lab": parts["lab"], "imaging": parts["imaging"]}
    again = SecureBoostClassifier().load(model.save(tmp_path / "other"), label_party="imaging")
    np.testing.assert_array_equal(again.predict_proba(hosts_first), model.predict_proba(parts))


def test_each_party_on_its_own_federation_trains_and_scores(breast) -> None:  # type: ignore[no-untyped-def]
    """fit_party/predict_party, each party a role of its own (the in-process federation
    standing in for the network): the same model as the simulated fit."""
    from vfl.federation import LocalFederation

    parts, y = breast
    options: dict[str, Any] = dict(n_estimators=3, max_depth=2, **SMALL)
    models = {p: SecureBoostClassifier(**options) for p in parts}

    def role(name: str) -> Any:
        def run(fed: Any) -> Any:
            model = models[name].fit_party(
                fed,
                parts[name],
                y if name == "imaging" else None,
                label_party="imaging",
                data_parties=list(parts),
            )
            return model.predict_party(fed, parts[name])

        return run

    out = LocalFederation(timeout=60).run({p: role(p) for p in parts})
    assert out["lab"] is None
    simulated = SecureBoostClassifier(**options).fit(parts, y, label_party="imaging")
    assert _structure(models["imaging"])[0] == _structure(simulated)[0]
    np.testing.assert_allclose(out["imaging"], simulated.predict_proba(parts))


def test_row_and_column_sampling_grow_each_tree_on_a_share(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    options: dict[str, Any] = dict(
        n_estimators=4, max_depth=3, subsample=0.5, colsample_bytree=0.5, random_state=3
    )
    model = SecureBoostClassifier(**options, **SMALL).fit(
        parts, y, label_party="imaging", keep_views=True
    )
    roots = [v for v in model.views_["lab"] if len(v) == 150]  # each tree's root: half the rows
    assert len(roots) == 4 and len({r.tobytes() for r in roots}) == 4
    used = set(model.parts_["lab"].table.feature) | set(model.parts_["imaging"].table.feature)
    assert used  # splits happened on the offered columns
    plain = SecureBoostClassifier(**options, protocol="plain").fit(parts, y, label_party="imaging")
    np.testing.assert_allclose(model.predict_proba(parts), plain.predict_proba(parts))
    assert roc_auc_score(y, model.predict_proba(parts)[:, 1]) > 0.95
    with pytest.raises(ValueError, match=r"subsample must be in \(0, 1\]"):
        SecureBoostClassifier(subsample=0.0).fit(parts, y, label_party="imaging")
