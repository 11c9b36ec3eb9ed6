"""One population, every partition cut from it (vfl.datasets.make_population)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vfl.datasets import (
    HOSPITAL_FEATURES,
    IDENTITY_COLUMNS,
    IMAGING_FEATURES,
    LAB_FEATURES,
    LABEL,
    ClinicalPopulation,
    make_population,
)


@pytest.fixture(scope="module")
def population() -> ClinicalPopulation:
    return make_population(2000, random_state=5)


def test_train_and_test_patients_split_the_population(population: ClinicalPopulation) -> None:
    assert len(population.test) == 500
    assert len(population.train) == 1500
    assert not set(population.train) & set(population.test)
    assert set(population.train) | set(population.test) == set(range(2000))
    x, y = population.test_set()
    assert list(x.columns) == HOSPITAL_FEATURES
    assert set(y.unique()) == {0, 1}
    assert x.index.is_unique
    pooled_x, pooled_y = population.pooled()
    assert len(pooled_x) == len(pooled_y) == 1500
    assert not set(pooled_x.index) & set(x.index)


def held_out_ids(population: ClinicalPopulation) -> set[str]:
    return set(population.frame["patient_id"].iloc[population.test])


def test_no_cut_holds_a_test_patient(population: ClinicalPopulation) -> None:
    test_ids = held_out_ids(population)
    lab, imaging, _ = population.vertical()
    hospitals = population.horizontal(4, label_skew=1.0)
    pair = population.transfer()
    holders = [lab, imaging, pair.source, pair.target, *hospitals.values()]
    for table in holders:
        assert not set(table["patient_id"]) & test_ids


def test_vertical_cut_is_the_lab_imaging_cohort_of_the_training_patients(
    population: ClinicalPopulation,
) -> None:
    lab, imaging, truth = population.vertical(overlap=0.5, typo_rate=0.2)
    assert list(lab.columns) == IDENTITY_COLUMNS + LAB_FEATURES
    assert list(imaging.columns) == [*IDENTITY_COLUMNS, *IMAGING_FEATURES, LABEL]
    assert len(truth) == 750  # half of the 1500 training patients
    assert len(lab) + len(imaging) - len(truth) == 1500
    # the true pairs are the same patients, with the population's features and labels
    frame = population.frame.set_index("patient_id")
    ids = lab.loc[truth["lab"], "patient_id"].to_numpy()
    assert (ids == imaging.loc[truth["imaging"], "patient_id"].to_numpy()).all()
    np.testing.assert_array_equal(
        imaging.loc[truth["imaging"], LABEL].to_numpy(), frame.loc[ids, LABEL].to_numpy()
    )
    np.testing.assert_allclose(
        lab.loc[truth["lab"], LAB_FEATURES].to_numpy(), frame.loc[ids, LAB_FEATURES].to_numpy()
    )


def test_cuts_depend_on_their_arguments_not_on_the_call_order() -> None:
    first = make_population(600, random_state=1)
    lab_a, _, truth_a = first.vertical()
    second = make_population(600, random_state=1)
    second.horizontal(3)
    second.transfer()
    lab_b, _, truth_b = second.vertical()
    pd.testing.assert_frame_equal(lab_a, lab_b)
    pd.testing.assert_frame_equal(truth_a, truth_b)
    other = make_population(600, random_state=2)
    assert not other.frame["patient_id"].equals(first.frame["patient_id"])


def test_hospitals_hold_disjoint_training_patients(population: ClinicalPopulation) -> None:
    hospitals = population.horizontal(5, quantity_skew=1.0)
    ids = [set(h["patient_id"]) for h in hospitals.values()]
    assert sum(len(i) for i in ids) == len(set().union(*ids)) == 1500
    for frame in hospitals.values():
        assert list(frame.columns) == ["patient_id", *HOSPITAL_FEATURES, LABEL]
    sizes = sorted(len(h) for h in hospitals.values())
    assert sizes[-1] > 2 * sizes[0]  # quantity skew


def test_label_skew_spreads_the_prevalence_within_the_population(
    population: ClinicalPopulation,
) -> None:
    even = population.horizontal(5)
    skewed = population.horizontal(5, label_skew=0.5)
    spread = [np.std([h[LABEL].mean() for h in c.values()]) for c in (even, skewed)]
    assert spread[1] > 3 * spread[0]
    ids = [set(h["patient_id"]) for h in skewed.values()]
    assert sum(len(i) for i in ids) == len(set().union(*ids))  # still disjoint


def test_feature_shift_moves_features_but_not_labels(population: ClinicalPopulation) -> None:
    plain = population.horizontal(3)
    shifted = population.horizontal(3, feature_shift=1.0)
    for name in plain:
        assert (plain[name][LABEL] == shifted[name][LABEL]).all()
        assert not np.allclose(plain[name]["wbc_10e9_l"], shifted[name]["wbc_10e9_l"])


def test_transfer_cut(population: ClinicalPopulation) -> None:
    pair = population.transfer(800, 500, n_overlap=120, target_labels=40, feature_overlap=0.3)
    assert len(pair.source) == 800 and len(pair.target) == 500
    assert len(pair.overlap) == 120
    assert pair.shared_columns == LAB_FEATURES[:3]
    assert list(pair.target.columns) == ["patient_id", *LAB_FEATURES[:3], *IMAGING_FEATURES]
    assert len(pair.target_labels) == 40 and pair.target_labels.nunique() == 2
    assert set(pair.target_labels.index) <= set(pair.target.index)
    both = pair.source.loc[pair.overlap["source"], "patient_id"].to_numpy()
    assert (both == pair.target.loc[pair.overlap["target"], "patient_id"].to_numpy()).all()
    with pytest.raises(ValueError, match="more than the population's 1500 training patients"):
        population.transfer(1000, 1000, n_overlap=100)


def test_signal_correlation_ties_the_lab_to_the_imaging() -> None:
    def correlation(rho: float) -> float:
        frame = make_population(4000, signal_correlation=rho, random_state=3).frame
        return float(
            np.corrcoef(np.log(frame["crp_mg_l"]), np.log(frame["lesion_volume_cm3"]))[0, 1]
        )

    assert abs(correlation(0.0)) < 0.06
    assert correlation(0.6) > 0.2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_patients": 10}, "n_patients"),
        ({"test_size": 1.0}, "test_size"),
        ({"signal_correlation": 1.0}, "signal_correlation"),
        ({"random_state": 1.5}, "random_state"),
    ],
)
def test_bad_arguments(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_population(**kwargs)  # type: ignore[arg-type]
