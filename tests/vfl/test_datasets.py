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
    _NICKNAMES,
    IDENTITY_COLUMNS,
    IMAGING_FEATURES,
    LAB_FEATURES,
    LABEL,
    make_lab_imaging_cohort,
)


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
            y in _NICKNAMES.get(x, ()) or x in _NICKNAMES.get(y, ())
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
