"""Each party's own preprocessing: equal to scikit-learn's imputer, scaler and one-hot encoder,
plain-data state, clear errors, and inside the vertical estimators fitted per party, saved
with its part and never sent."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import vfl
from vfl.app.plan import feature_columns as _features
from vfl.audit.transcript import numbers_in
from vfl.crypto import SecurityWarning
from vfl.linear import VerticalLinearRegression, VerticalLogisticRegression
from vfl.linear.model import PartyModel
from vfl.preprocessing import PartyPreprocessor

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")

FAST: dict[str, Any] = {
    "key_bits": 512,
    "insecure": True,
    "random_state": 0,
    "max_iter": 3,
    "batch_size": 40,
    "tol": None,
}


def small(**params: Any) -> VerticalLogisticRegression:
    return VerticalLogisticRegression(**{**FAST, **params})


def mixed_frame() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A training frame with NaNs (numeric and text) and a frame with a category unseen at
    fit (and gaps where training had none)."""
    train = pd.DataFrame(
        {
            "age": [30.0, np.nan, 50.0, 41.0, np.nan, 22.0, 67.0],
            "sex": ["F", "M", None, "F", "M", "F", "M"],
            "bmi": [20.0, 21.0, np.nan, 30.0, 25.0, 19.5, 27.25],
            "site": ["north", "south", "east", "north", "south", "south", "east"],
            "count": [1, 4, 2, 2, 9, 0, 3],
        },
        index=[10, 11, 12, 13, 14, 15, 16],
    )
    new = pd.DataFrame(
        {
            "age": [np.nan, 33.0, 90.0],
            "sex": ["X", None, "M"],
            "bmi": [22.0, np.nan, 18.0],
            "site": ["north", "west", None],
            "count": [5, 0, 1],
        },
        index=["a", "b", "c"],
    )
    return train, new


def reference(train: pd.DataFrame) -> ColumnTransformer:
    numeric, text = ["age", "bmi", "count"], ["sex", "site"]
    return ColumnTransformer(
        [
            ("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numeric),
            ("cat", OneHotEncoder(handle_unknown="ignore", sparse_output=False), text),
        ]
    ).fit(train)


def reference_frame(ct: ColumnTransformer, frame: pd.DataFrame) -> pd.DataFrame:
    """scikit-learn's output with vflink's names: ``sex=F``, ``sex=<missing>``, ``age``."""
    names = []
    for name in ct.get_feature_names_out():
        block, column = name.split("__", 1)
        if block == "cat":
            column, value = column.split("_", 1)
            column = f"{column}={'<missing>' if value == 'nan' else value}"
        names.append(column)
    return pd.DataFrame(ct.transform(frame), index=frame.index, columns=names)


# -- the transformer alone --------------------------------------------------------------------


def test_equals_scikit_learns_imputer_scaler_and_one_hot_encoder() -> None:
    train, new = mixed_frame()
    prep = PartyPreprocessor().fit(train)
    ct = reference(train)
    for frame in (train, new):
        out = prep.transform(frame)
        expected = reference_frame(ct, frame)
        assert sorted(out.columns) == sorted(expected.columns)
        assert out.index.equals(frame.index)
        assert all(dtype == np.float64 for dtype in out.dtypes)
        pd.testing.assert_frame_equal(out, expected[out.columns], check_exact=False, atol=1e-12)
    out = prep.transform(new)
    # the unseen "X" and "west" are all-zero; the missing category is a column of its own
    assert out.loc["a", ["sex=F", "sex=M", "sex=<missing>"]].tolist() == [0.0, 0.0, 0.0]
    assert out.loc["b", ["site=east", "site=north", "site=south"]].sum() == 0.0
    assert out.loc["b", "sex=<missing>"] == 1.0
    # the columns keep the input order, each text column expanded in place
    assert list(prep.get_feature_names_out()) == [
        "age",
        "sex=F",
        "sex=M",
        "sex=<missing>",
        "bmi",
        "site=east",
        "site=north",
        "site=south",
        "count",
    ]
    assert list(prep.feature_names_in_) == list(train.columns)
    assert prep.n_features_in_ == 5


def test_mean_imputation_no_scaling_and_constant_columns() -> None:
    train, _ = mixed_frame()
    train = train.assign(flat=7.0)
    prep = PartyPreprocessor(impute="mean", scale=False).fit(train)
    out = prep.transform(train)
    assert out.loc[11, "age"] == pytest.approx(train["age"].mean())
    pd.testing.assert_series_equal(out["bmi"], train["bmi"].fillna(train["bmi"].mean()))
    scaled = PartyPreprocessor().fit(train).transform(train)
    assert (scaled["flat"] == 0.0).all()  # a constant column keeps scale 1: centred only
    assert PartyPreprocessor().fit(train).to_dict()["columns"][-1]["scale"] == 1.0


def test_an_empty_cell_can_mean_zero_as_in_sparse_files() -> None:
    """LIBSVM-style files (FATE's ``*_scale`` tables) leave a 0 out: ``impute="zero"`` reads
    it back as 0, at fit and at transform, equal to scikit-learn's constant imputer, and
    survives a save; a model without preprocessing names the option when it meets NaN."""
    train, test = mixed_frame()
    numeric = train[["age", "bmi"]]
    prep = PartyPreprocessor(impute="zero", scale=False).fit(numeric)
    expected = SimpleImputer(strategy="constant", fill_value=0.0).fit(numeric)
    np.testing.assert_array_equal(
        prep.transform(test[["age", "bmi"]]), expected.transform(test[["age", "bmi"]])
    )
    assert train["bmi"].isna().any()
    assert (prep.transform(numeric)["bmi"][train["bmi"].isna()] == 0.0).all()
    again = PartyPreprocessor.from_dict(json.loads(json.dumps(prep.to_dict())))
    pd.testing.assert_frame_equal(again.transform(numeric), prep.transform(numeric))
    model = VerticalLogisticRegression(key_bits=1024, insecure=True)
    parts = {"a": numeric, "b": train[["age"]].rename(columns={"age": "x"})}
    with pytest.raises(ValueError, match=r"PartyPreprocessor\(impute='zero'\)"):
        model.fit(parts, pd.Series(np.arange(len(train)) % 2, index=train.index), label_party="a")


def test_state_round_trips_through_json() -> None:
    train, new = mixed_frame()
    prep = PartyPreprocessor(party="lab", max_categories=10).fit(train)
    state = json.loads(json.dumps(prep.to_dict(), allow_nan=False))

    def plain(value: Any) -> bool:
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, (str, float, int))

    assert plain(prep.to_dict())
    rebuilt = PartyPreprocessor.from_dict(state)
    assert rebuilt.get_params() == prep.get_params()
    for frame in (train, new):
        pd.testing.assert_frame_equal(rebuilt.transform(frame), prep.transform(frame))


def good_state() -> dict[str, Any]:
    return PartyPreprocessor().fit(mixed_frame()[0]).to_dict()


def broken(change: Any) -> Any:
    state = good_state()
    change(state)
    return state


@pytest.mark.parametrize(
    "state",
    [
        None,
        [],
        {},
        {"format": "vflink.PartyPreprocessor/9"},
        broken(lambda s: s.pop("columns")),
        broken(lambda s: s.pop("params")),
        broken(lambda s: s["params"].update(impute="mode")),
        broken(lambda s: s["params"].update(unknown=1)),
        broken(lambda s: s.update(columns="age")),
        broken(lambda s: s["columns"].append("age")),
        broken(lambda s: s["columns"][0].pop("name")),
        broken(lambda s: s["columns"][0].update(kind="date")),
        broken(lambda s: s["columns"][0].update(mean="35")),
        broken(lambda s: s["columns"][0].update(scale=0.0)),
        broken(lambda s: s["columns"][0].update(fill=float("nan"))),
        broken(lambda s: s["columns"][0].pop("mean")),
        broken(lambda s: s["columns"][1].update(categories="F")),
        broken(lambda s: s["columns"][1].update(categories=["F", "F"])),
        broken(lambda s: s["columns"][1].pop("missing")),
        broken(lambda s: s["columns"].append(dict(s["columns"][0]))),
    ],
)
def test_a_malformed_state_is_a_value_error(state: Any) -> None:
    with pytest.raises(ValueError, match="PartyPreprocessor"):
        PartyPreprocessor.from_dict(state)


def test_a_text_column_with_too_many_values_is_refused() -> None:
    train, _ = mixed_frame()
    names = train.assign(name=[f"patient {i}" for i in range(len(train))])
    with pytest.raises(
        ValueError,
        match=r"party 'lab'.*column 'name' has 7 distinct values, more than max_categories=5.*"
        r"drop it.*raise max_categories",
    ):
        PartyPreprocessor(max_categories=5, party="lab").fit(names)
    assert "name=patient 6" in PartyPreprocessor(max_categories=7).fit(names).transform(names)


def test_a_column_missing_at_transform_is_named() -> None:
    train, new = mixed_frame()
    prep = PartyPreprocessor(party="lab").fit(train)
    with pytest.raises(ValueError, match=r"party 'lab'.*missing \['bmi'\], unexpected \[\]"):
        prep.transform(new.drop(columns="bmi"))
    with pytest.raises(ValueError, match=r"missing \[\], unexpected \['extra'\]"):
        prep.transform(new.assign(extra=1.0))
    with pytest.raises(ValueError, match=r"column 'age' was numeric at fit"):
        prep.transform(new.assign(age="old"))


def test_an_all_missing_column_is_refused() -> None:
    train, _ = mixed_frame()
    with pytest.raises(ValueError, match=r"column 'empty' has no values at all: drop it"):
        PartyPreprocessor().fit(train.assign(empty=np.nan))
    with pytest.raises(ValueError, match=r"column 'blank' has no values at all"):
        PartyPreprocessor().fit(train.assign(blank=None))


def test_impute_none_refuses_missing_values_naming_column_and_row() -> None:
    train, new = mixed_frame()
    with pytest.raises(
        ValueError, match=r"column 'age' has missing values \(e\.g\. row 11\).*impute='median'"
    ):
        PartyPreprocessor(impute=None).fit(train)
    prep = PartyPreprocessor(impute=None).fit(train.fillna({"age": 40.0, "bmi": 25.0}))
    with pytest.raises(ValueError, match=r"column 'age' has missing values \(e\.g\. row 'a'\)"):
        prep.transform(new)


def test_other_errors_name_the_column() -> None:
    train, _ = mixed_frame()
    with pytest.raises(ValueError, match=r"column 'sex' is not numeric.*categorical='onehot'"):
        PartyPreprocessor(categorical=None).fit(train)
    with pytest.raises(ValueError, match=r"column 'bmi' has inf \(e\.g\. row 12\)"):
        PartyPreprocessor().fit(train.assign(bmi=train["bmi"].fillna(np.inf)))
    with pytest.raises(ValueError, match=r"column 'when' is of type datetime64"):
        PartyPreprocessor().fit(train.assign(when=pd.Timestamp("2024-01-01")))
    with pytest.raises(ValueError, match=r"output columns \['sex=F'\] would repeat"):
        PartyPreprocessor().fit(train.assign(**{"sex=F": 1.0}))
    with pytest.raises(ValueError, match="impute must be one of"):
        PartyPreprocessor(impute="mode").fit(train)
    with pytest.raises(ValueError, match="max_categories must be a positive integer"):
        PartyPreprocessor(max_categories=0).fit(train)
    with pytest.raises(Exception, match="not fitted yet"):
        PartyPreprocessor().transform(train)


def test_clone_and_get_params() -> None:
    prep = PartyPreprocessor(impute="mean", max_categories=7, scale=False, party="lab")
    params = prep.get_params()
    assert params == {
        "impute": "mean",
        "categorical": "onehot",
        "max_categories": 7,
        "scale": False,
        "party": "lab",
    }
    copy = clone(prep)
    assert copy is not prep and copy.get_params() == params
    assert copy.set_params(party="imaging").party == "imaging"
    assert not hasattr(clone(PartyPreprocessor().fit(mixed_frame()[0])), "columns_")
    est = VerticalLogisticRegression(preprocess=prep)
    assert est.get_params()["preprocess__impute"] == "mean"
    assert clone(est).get_params()["preprocess"].get_params() == params
    assert VerticalLinearRegression(preprocess=True).get_params()["preprocess"] is True
    assert vfl.PartyPreprocessor is PartyPreprocessor


# -- inside the vertical estimators -----------------------------------------------------------


def two_parties(n: int = 120, seed: int = 0) -> tuple[dict[str, pd.DataFrame], pd.Series]:
    """Two parties' raw frames (NaNs, a text column each) and binary labels at imaging."""
    rng = np.random.default_rng(seed)
    lab = pd.DataFrame(
        {
            "crp": rng.normal(47.0, 9.0, n),
            "smoking": rng.choice(["smoker_yes", "smoker_no"], n),
        }
    )
    imaging = pd.DataFrame(
        {
            "volume": rng.normal(30.0, 5.0, n),
            "scanner": rng.choice(["scanner_ge", "scanner_siemens", "scanner_philips"], n),
        }
    )
    lab.loc[rng.choice(n, 12, replace=False), "crp"] = np.nan
    imaging.loc[rng.choice(n, 9, replace=False), "scanner"] = None
    score = (lab["crp"].fillna(47.0) - 47.0) / 9.0 + (imaging["volume"] - 30.0) / 5.0
    score += (lab["smoking"] == "smoker_yes") - 0.5 + rng.normal(0.0, 0.5, n)
    return {"lab": lab, "imaging": imaging}, (score > 0).astype(int)


def by_hand(parts: dict[str, pd.DataFrame]) -> dict[str, PartyPreprocessor]:
    return {p: PartyPreprocessor(party=p).fit(frame) for p, frame in parts.items()}


@pytest.mark.parametrize("protocol", ["shared", "coordinator"])
def test_preprocess_equals_fitting_on_frames_preprocessed_by_hand(protocol: str) -> None:
    parts, y = two_parties()
    est = small(preprocess=True, protocol=protocol).fit(parts, y, label_party="imaging")
    preps = by_hand(parts)
    hand = {p: preps[p].transform(frame) for p, frame in parts.items()}
    ref = small(protocol=protocol).fit(hand, y, label_party="imaging")
    assert list(est.feature_names_in_) == list(ref.feature_names_in_)
    assert "lab:smoking=smoker_yes" in est.feature_names_in_
    assert "imaging:scanner=<missing>" in est.feature_names_in_
    assert np.allclose(est.coef_, ref.coef_, atol=1e-5)
    assert np.allclose(est.intercept_, ref.intercept_, atol=1e-5)
    assert np.abs(est.coef_).sum() > 0
    # new raw rows, with gaps and an unseen scanner, scored through each party's own state
    new, _ = two_parties(n=30, seed=1)
    new["lab"].loc[[0, 1], "crp"] = np.nan
    new["imaging"].loc[[2], "scanner"] = "scanner_unseen"
    proba = est.predict_proba(new)
    expected = ref.predict_proba({p: preps[p].transform(frame) for p, frame in new.items()})
    assert proba.shape == (30, 2)
    assert np.allclose(proba, expected, atol=1e-5)


def test_saved_parts_keep_the_preprocessing(tmp_path: Path) -> None:
    parts, y = two_parties()
    est = small(preprocess=True).fit(parts, y, label_party="imaging")
    new, _ = two_parties(n=25, seed=2)
    new["lab"].loc[[0, 3], "crp"] = np.nan
    before = est.predict_proba(new)
    folder = est.save(tmp_path)
    loaded = small().load(folder)  # a fresh estimator, no preprocess=
    np.testing.assert_allclose(loaded.predict_proba(new), before, rtol=0, atol=1e-12)
    assert list(loaded.feature_names_in_) == list(est.feature_names_in_)
    assert loaded.parts_["lab"].input_columns == ["crp", "smoking"]
    with pytest.raises(ValueError, match=r"party 'lab'.*missing \['smoking'\]"):
        loaded.predict_proba({"lab": new["lab"][["crp"]], "imaging": new["imaging"]})
    part = loaded.parts_["lab"]
    bad = PartyModel(**{**part.__dict__, "extra": {**part.extra, "preprocess": {"format": 1}}})
    with pytest.raises(ValueError, match="preprocessing is malformed"):
        PartyModel.from_bytes(bad.to_bytes())


def test_the_preprocessing_stays_with_its_party_and_is_never_sent() -> None:
    parts, y = two_parties()
    est = small(preprocess=True, protocol="coordinator")
    est.fit(parts, y, label_party="imaging", keep_payloads=True)
    preps = by_hand(parts)
    own = {
        "lab": ["crp", "smoking", "smoker_yes", "smoker_no"],
        "imaging": ["volume", "scanner", "scanner_ge", "scanner_siemens", "scanner_philips"],
    }
    for party, other in (("lab", "imaging"), ("imaging", "lab")):
        state = est.parts_[party].extra["preprocess"]
        assert state == preps[party].to_dict()
        assert [c["name"] for c in state["columns"]] == list(parts[party].columns)
        elsewhere = json.dumps(est.parts_[other].extra)
        assert not [word for word in own[party] if word in elsewhere]
    records = est.transcript_.records
    assert records
    words = [w.encode() for ws in own.values() for w in ws]
    statistics = [
        value
        for prep in preps.values()
        for column in prep.to_dict()["columns"]
        for key, value in column.items()
        if key in ("fill", "mean", "scale") and value not in (None, 0.0, 1.0)
    ]
    assert len(statistics) == 6  # two numeric columns: fill, mean and scale each
    packed = [struct.pack(fmt, v) for v in statistics for fmt in ("<d", ">d")]
    for record in records:
        assert record.data is not None
        assert not [w for w in words if w in record.data], record.tag
        assert not [b for b in packed if b in record.data], record.tag
        assert not [repr(v).encode() for v in statistics if repr(v).encode() in record.data]
        for array in numbers_in(record.payload()):
            assert not np.isclose(array[:, None], statistics, rtol=0, atol=1e-9).any()


def test_multiclass_passive_keeps_its_preprocessing() -> None:
    parts, _ = two_parties()
    y = pd.Series(np.arange(len(parts["lab"])) % 3)
    est = small(preprocess=True).fit(parts, y, label_party="imaging")
    assert "preprocess" in est.parts_["lab"].extra
    assert est.predict_proba(parts).shape == (len(y), 3)


def test_a_dict_chooses_per_party_and_is_checked() -> None:
    parts, y = two_parties()
    numeric_imaging = {**parts, "imaging": parts["imaging"][["volume"]]}
    est = small(preprocess={"lab": PartyPreprocessor(impute="mean"), "imaging": None})
    est.fit(numeric_imaging, y, label_party="imaging")
    assert est.parts_["lab"].extra["preprocess"]["params"]["impute"] == "mean"
    assert est.parts_["lab"].extra["preprocess"]["params"]["party"] == "lab"
    assert "preprocess" not in est.parts_["imaging"].extra
    assert est.preprocess["lab"].party is None  # the given transformer is left unfitted
    assert not hasattr(est.preprocess["lab"], "columns_")
    with pytest.raises(ValueError, match=r"preprocess names parties \['labb'\]"):
        small(preprocess={"labb": True}).fit(parts, y, label_party="imaging")
    with pytest.raises(ValueError, match="preprocess must be None/False, True"):
        small(preprocess="median").fit(parts, y, label_party="imaging")
    with pytest.raises(ValueError, match=r"party 'lab'.*'smoking' is not numeric.*preprocess"):
        small().fit(parts, y, label_party="imaging")  # off: today's numeric-only behaviour


def test_errors_inside_a_fit_name_the_party() -> None:
    parts, y = two_parties()
    with_ids = {**parts, "lab": parts["lab"].assign(name=[f"p{i}" for i in range(len(y))])}
    with pytest.raises(ValueError, match=r"party 'lab'.*column 'name'.*max_categories=50"):
        small(preprocess=True).fit(with_ids, y, label_party="imaging")


def test_warm_start_keeps_the_first_preprocessing() -> None:
    parts, y = two_parties()
    est = small(preprocess=True, warm_start=True).fit(parts, y, label_party="imaging")
    first = est.parts_["lab"].extra["preprocess"]
    est.fit({p: f.iloc[:80] for p, f in parts.items()}, y.iloc[:80], label_party="imaging")
    assert est.parts_["lab"].extra["preprocess"] == first  # the weights are in its units
    with pytest.raises(
        ValueError, match=r"party 'lab'.*other columns than fitted \(\['crp', 'smoking'\]\)"
    ):
        est.fit({**parts, "lab": parts["lab"][["crp"]]}, y, label_party="imaging")
    est.set_params(preprocess=None)
    with pytest.raises(ValueError, match=r"warm start without preprocessing"):
        est.fit(parts, y, label_party="imaging")


def test_party_features_take_every_column_when_preprocessing() -> None:
    frame = pd.DataFrame({"id": [1, 2], "y": [0, 1], "age": [3.0, 4.0], "sex": ["F", "M"]})
    assert _features(frame, "lab", None, {"id", "y"}) == ["age"]
    assert _features(frame, "lab", None, {"id", "y"}, preprocess=True) == ["age", "sex"]
    assert _features(frame, "lab", ["sex"], {"id", "y"}, preprocess=True) == ["sex"]
    with pytest.raises(ValueError, match="party 'lab': its data file has no feature columns"):
        _features(frame[["id", "y"]], "lab", None, {"id", "y"}, preprocess=True)
