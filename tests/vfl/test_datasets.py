"""The synthetic lab + imaging cohort."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vfl.datasets import (
    HOSPITAL_FEATURES,
    IDENTITY_COLUMNS,
    IMAGING_FEATURES,
    LAB_FEATURES,
    LABEL,
    make_hospital_cohort,
    make_lab_imaging_cohort,
)
from vfl.datasets.identities import NICKNAMES


def differing_pairs(lab: pd.DataFrame, imaging: pd.DataFrame, pairs: pd.DataFrame) -> np.ndarray:
    cols = IDENTITY_COLUMNS[1:]
    a = lab.loc[pairs["lab"], cols].reset_index(drop=True).astype(object).fillna("<NA>")
    b = imaging.loc[pairs["imaging"], cols].reset_index(drop=True).astype(object).fillna("<NA>")
    return (a != b).any(axis=1).to_numpy()


@pytest.mark.parametrize(
    ("n", "overlap", "typo_rate"), [(1000, 0.5, 0.1), (3001, 0.8, 0.35), (200, 1.0, 0.0)]
)
def test_overlap_and_typo_rate_are_as_asked(n: int, overlap: float, typo_rate: float) -> None:
    lab, imaging, pairs = make_lab_imaging_cohort(
        n, overlap=overlap, typo_rate=typo_rate, random_state=1
    )
    n_common = round(overlap * n)
    assert len(pairs) == n_common
    assert len(lab) + len(imaging) - n_common == n  # n distinct patients in the union
    assert abs(len(lab) - len(imaging)) <= 1
    # the true pairs are the same patient, and only they share a patient id
    assert (
        lab.loc[pairs["lab"], "patient_id"].to_numpy()
        == imaging.loc[pairs["imaging"], "patient_id"].to_numpy()
    ).all()
    assert len(set(lab["patient_id"]) & set(imaging["patient_id"])) == n_common
    assert differing_pairs(lab, imaging, pairs).sum() == round(typo_rate * n_common)


def test_tables_have_the_documented_columns_and_types() -> None:
    lab, imaging, pairs = make_lab_imaging_cohort(500, random_state=0)
    assert list(lab.columns) == IDENTITY_COLUMNS + LAB_FEATURES
    assert list(imaging.columns) == IDENTITY_COLUMNS + IMAGING_FEATURES + [LABEL]
    assert len(LAB_FEATURES) == 10 and len(IMAGING_FEATURES) == 15
    assert lab.index.is_unique and imaging.index.is_unique
    assert lab.index.name == imaging.index.name == "record_id"
    assert list(pairs.columns) == ["lab", "imaging"]
    assert pairs["lab"].is_monotonic_increasing
    for frame, features in ((lab, LAB_FEATURES), (imaging, IMAGING_FEATURES)):
        values = frame[features].to_numpy()
        assert values.dtype == np.float64 and np.isfinite(values).all()
    assert set(imaging[LABEL].unique()) == {0, 1}
    assert 0.25 < imaging[LABEL].mean() < 0.45
    dob = pd.concat([lab["date_of_birth"], imaging["date_of_birth"]]).dropna()
    assert pd.to_datetime(dob, format="%Y%m%d", errors="coerce").notna().all()  # valid dates only
    assert set(pd.concat([lab["sex"], imaging["sex"]]).dropna()) == {"F", "M"}


def test_perturbations_are_realistic_and_varied() -> None:
    lab, imaging, pairs = make_lab_imaging_cohort(4000, overlap=0.8, typo_rate=0.5, random_state=3)
    a = lab.loc[pairs["lab"]].reset_index(drop=True)
    b = imaging.loc[pairs["imaging"]].reset_index(drop=True)
    swapped = (a["given_name"] == b["surname"]) & (a["surname"] == b["given_name"])
    missing = a[IDENTITY_COLUMNS].isna().any(axis=1) | b[IDENTITY_COLUMNS].isna().any(axis=1)
    moved = a["postcode"].notna() & b["postcode"].notna() & (a["postcode"] != b["postcode"])
    dob = (
        a["date_of_birth"].notna()
        & b["date_of_birth"].notna()
        & (a["date_of_birth"] != b["date_of_birth"])
    )
    nick = pd.Series(
        [
            y in NICKNAMES.get(x, ()) or x in NICKNAMES.get(y, ())
            for x, y in zip(a["given_name"], b["given_name"], strict=True)
        ]
    )
    for kind, mask in {
        "swapped": swapped,
        "missing": missing,
        "moved": moved,
        "dob": dob,
        "nick": nick,
    }.items():
        assert mask.sum() > 20, kind
    assert a["patient_id"].equals(b["patient_id"])


def test_same_seed_same_cohort_and_different_seed_differs() -> None:
    one = make_lab_imaging_cohort(300, random_state=7)
    two = make_lab_imaging_cohort(300, random_state=7)
    three = make_lab_imaging_cohort(300, random_state=8)
    for x, y in zip(one, two, strict=True):
        pd.testing.assert_frame_equal(x, y)
    assert not one.lab.equals(three.lab)


def test_neither_side_alone_reaches_the_joint_auc() -> None:
    lab, imaging, pairs = make_lab_imaging_cohort(5000, overlap=0.8, random_state=11)
    x_lab = lab.loc[pairs["lab"], LAB_FEATURES].to_numpy()
    x_img = imaging.loc[pairs["imaging"], IMAGING_FEATURES].to_numpy()
    y = imaging.loc[pairs["imaging"], LABEL].to_numpy()
    idx_train, idx_test = train_test_split(
        np.arange(len(y)), test_size=0.3, random_state=0, stratify=y
    )

    def auc(x: np.ndarray) -> float:
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        model.fit(x[idx_train], y[idx_train])
        return float(roc_auc_score(y[idx_test], model.predict_proba(x[idx_test])[:, 1]))

    joint, lab_only, img_only = auc(np.hstack([x_lab, x_img])), auc(x_lab), auc(x_img)
    assert joint > 0.8
    assert joint - lab_only > 0.05
    assert joint - img_only > 0.05


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_patients": 1}, "n_patients must be an integer >= 2"),
        ({"n_patients": 10.5}, "n_patients must be an integer"),
        ({"overlap": 1.5}, "overlap must be between 0 and 1"),
        ({"typo_rate": -0.1}, "typo_rate must be between 0 and 1"),
    ],
)
def test_bad_arguments(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_lab_imaging_cohort(**kwargs)  # type: ignore[arg-type]


def test_the_same_seed_gives_the_same_cohort_in_every_process() -> None:
    """Regression: the perturbations once iterated a set of strings, whose order follows the
    process's hash seed, so one random_state gave different cohorts in different runs."""
    import os
    import subprocess
    import sys

    code = (
        "import hashlib, pandas as pd\n"
        "from vfl.datasets import make_lab_imaging_cohort\n"
        "tables = make_lab_imaging_cohort(800, random_state=5)\n"
        "print(hashlib.sha256(b''.join(pd.util.hash_pandas_object(t).values.tobytes() "
        "for t in tables)).hexdigest())\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1


# -- make_hospital_cohort: several hospitals, same columns, different patients ----------------


def pooled_auc(cohort: dict[str, pd.DataFrame]) -> float:
    pooled = pd.concat(cohort.values())
    x, y = pooled[HOSPITAL_FEATURES].to_numpy(), pooled[LABEL].to_numpy()
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.3, random_state=0, stratify=y
    )
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    model.fit(x_train, y_train)
    return float(roc_auc_score(y_test, model.predict_proba(x_test)[:, 1]))


def test_hospitals_have_the_same_columns_and_different_patients() -> None:
    cohort = make_hospital_cohort(4, 1002, random_state=0)
    assert list(cohort) == ["hospital_1", "hospital_2", "hospital_3", "hospital_4"]
    assert sorted(len(f) for f in cohort.values()) == [250, 250, 251, 251]
    assert HOSPITAL_FEATURES == LAB_FEATURES + IMAGING_FEATURES
    for frame in cohort.values():
        assert list(frame.columns) == [*HOSPITAL_FEATURES, LABEL]
        assert frame.index.name == "record_id"
        values = frame[HOSPITAL_FEATURES].to_numpy()
        assert values.dtype == np.float64 and np.isfinite(values).all()
        assert set(frame[LABEL]) <= {0, 1} and frame[LABEL].dtype == np.int64
    pooled = pd.concat(cohort.values())
    assert pooled.index.is_unique and len(pooled) == 1002
    assert not pooled[HOSPITAL_FEATURES].duplicated().any()  # no patient at two hospitals
    assert 0.3 < pooled[LABEL].mean() < 0.4


def test_hospital_cohort_is_reproducible() -> None:
    kwargs = {"label_skew": 0.5, "quantity_skew": 1.0, "feature_shift": 0.5}
    one = make_hospital_cohort(3, 600, random_state=4, **kwargs)
    two = make_hospital_cohort(3, 600, random_state=4, **kwargs)
    three = make_hospital_cohort(3, 600, random_state=5, **kwargs)
    for name in one:
        pd.testing.assert_frame_equal(one[name], two[name])
    assert not one["hospital_1"].equals(three["hospital_1"])


def test_label_skew_spreads_the_prevalence() -> None:
    def prevalence_sd(label_skew: float | None) -> float:
        return float(
            np.mean(
                [
                    np.std(
                        [
                            f[LABEL].mean()
                            for f in make_hospital_cohort(
                                8, 4000, label_skew=label_skew, random_state=seed
                            ).values()
                        ]
                    )
                    for seed in range(4)
                ]
            )
        )

    same, strong, weak = prevalence_sd(None), prevalence_sd(0.5), prevalence_sd(1000.0)
    assert same < 0.03  # binomial noise of 500 patients around ~0.35
    assert strong > 0.25  # hospitals of nearly only cases or only controls
    assert weak < 0.04
    cohort = make_hospital_cohort(8, 4000, label_skew=0.5, random_state=0)
    assert [len(f) for f in cohort.values()] == [500] * 8  # sizes untouched


def test_quantity_skew_spreads_the_sizes() -> None:
    def size_cv(quantity_skew: float | None) -> float:
        cvs = []
        for seed in range(4):
            cohort = make_hospital_cohort(8, 4000, quantity_skew=quantity_skew, random_state=seed)
            sizes = np.array([len(f) for f in cohort.values()])
            assert sizes.sum() == 4000 and sizes.min() >= 1
            cvs.append(sizes.std() / sizes.mean())
        return float(np.mean(cvs))

    assert size_cv(None) == 0.0
    assert size_cv(0.5) > 0.6
    assert size_cv(1000.0) < 0.1


def test_feature_shift_moves_each_hospitals_features_by_a_constant() -> None:
    base = make_hospital_cohort(6, 3000, random_state=2)
    moved = make_hospital_cohort(6, 3000, feature_shift=1.5, random_state=2)  # same patients
    pooled = pd.concat(base.values())
    means = pd.DataFrame({h: f[HOSPITAL_FEATURES].mean() for h, f in base.items()}).T
    assert ((means - pooled[HOSPITAL_FEATURES].mean()) / pooled[HOSPITAL_FEATURES].std()).abs()[
        HOSPITAL_FEATURES
    ].to_numpy().max() < 0.2  # without a shift: sampling noise only
    z = []  # each hospital's offset per feature, in the feature's standard deviations
    for h in base:
        pd.testing.assert_series_equal(moved[h][LABEL], base[h][LABEL])
        pd.testing.assert_series_equal(moved[h]["lesion_count"], base[h]["lesion_count"])
        for column in ("wbc_10e9_l", "albumin_g_l", "hba1c_pct", "mean_intensity_hu"):
            offset = moved[h][column] - base[h][column]  # additive: one constant per hospital
            assert offset.max() - offset.min() < 2e-3
            z.append(offset.mean() / pooled[column].std(ddof=0) / 1.5)
        for column in ("crp_mg_l", "lesion_volume_cm3"):  # multiplicative: a calibration factor
            factor = np.log(moved[h][column] / base[h][column])
            assert factor.median() == pytest.approx(factor.quantile(0.75), abs=0.01)
            z.append(factor.median() / np.log(pooled[column]).std(ddof=0) / 1.5)
    assert len(z) == 36
    assert 0.6 < np.std(z) < 1.4  # standard normal offsets
    assert abs(np.mean(z)) < 0.5
    wild = pd.concat(make_hospital_cohort(6, 3000, feature_shift=3.0, random_state=2).values())
    assert (wild[["crp_mg_l", "lesion_volume_cm3"]] > 0).all().all()  # log-scale shifts
    assert wild["necrosis_fraction"].between(0, 1).all()  # logit-scale shift


@pytest.mark.parametrize(
    "kwargs", [{}, {"label_skew": 0.5}, {"quantity_skew": 0.5}, {"feature_shift": 0.5}]
)
def test_pooled_logistic_regression_reaches_the_documented_auc(kwargs: dict[str, float]) -> None:
    auc = pooled_auc(make_hospital_cohort(5, 5000, random_state=3, **kwargs))
    assert 0.80 < auc < 0.86


def test_with_label_skew_one_model_ranks_patients_alike_at_every_hospital() -> None:
    """Label shift: the features of cases (and of controls) are distributed alike everywhere."""
    reference = pd.concat(make_hospital_cohort(1, 6000, random_state=8).values())
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    model.fit(reference[HOSPITAL_FEATURES], reference[LABEL])
    cohort = make_hospital_cohort(4, 8000, label_skew=2.0, random_state=9)
    aucs = [
        roc_auc_score(f[LABEL], model.predict_proba(f[HOSPITAL_FEATURES])[:, 1])
        for f in cohort.values()
        if 50 <= f[LABEL].sum() <= len(f) - 50
    ]
    assert len(aucs) >= 2
    assert max(aucs) - min(aucs) < 0.06
    assert min(aucs) > 0.78


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_hospitals": 0}, "n_hospitals must be an integer >= 1"),
        ({"n_hospitals": 2.5}, "n_hospitals must be an integer >= 1"),
        (
            {"n_hospitals": 5, "n_patients": 4},
            r"n_patients must be an integer >= n_hospitals \(5\)",
        ),
        ({"label_skew": 0.0}, "label_skew must be None .* or a Dirichlet concentration > 0"),
        ({"label_skew": float("nan")}, "label_skew must be None"),
        ({"quantity_skew": -1.0}, "quantity_skew must be None .* or a Dirichlet concentration"),
        ({"feature_shift": -0.5}, "feature_shift must be a number of standard deviations >= 0"),
        ({"feature_shift": float("inf")}, "feature_shift must be a number of standard deviations"),
        ({"feature_shift": "1"}, "feature_shift must be a number of standard deviations"),
        ({"quantity_skew": "2"}, "quantity_skew must be None"),
    ],
)
def test_hospital_cohort_bad_arguments(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_hospital_cohort(**kwargs)  # type: ignore[arg-type]
