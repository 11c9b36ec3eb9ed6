"""The vertical setting (:func:`make_lab_imaging_cohort`): a lab network and an imaging
centre that hold different columns about partly the same patients."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from vfl.datasets.clinical import LABEL, draw_imaging_features, draw_lab_features, draw_signals
from vfl.datasets.identities import IDENTITY_COLUMNS, corrupt_identities, draw_people

__all__ = ["LabImagingCohort", "make_lab_imaging_cohort"]


class LabImagingCohort(NamedTuple):
    """What :func:`make_lab_imaging_cohort` returns (unpacks as ``lab, imaging, true_pairs``).

    Attributes
    ----------
    lab : pandas.DataFrame
        The lab network's table: :data:`IDENTITY_COLUMNS` + :data:`LAB_FEATURES`, indexed by
        its own record ids ``"L000001"``..., rows in random order.
    imaging : pandas.DataFrame
        The imaging centre's table: :data:`IDENTITY_COLUMNS` + :data:`IMAGING_FEATURES` +
        :data:`LABEL`, indexed by ``"I000001"``..., rows in random order.
    true_pairs : pandas.DataFrame
        Columns ``lab`` and ``imaging``: the record ids of each patient in both tables, sorted
        by ``lab``. Ground truth for evaluating linkage; no party would have it.
    """

    lab: pd.DataFrame
    imaging: pd.DataFrame
    true_pairs: pd.DataFrame


def make_lab_imaging_cohort(
    n_patients: int = 2000,
    *,
    overlap: float = 0.6,
    typo_rate: float = 0.2,
    random_state: int | np.random.Generator | None = None,
) -> LabImagingCohort:
    """Simulate a lab network and an imaging centre holding partly the same patients.

    Parameters
    ----------
    n_patients : int
        Distinct patients in the union of both tables.
    overlap : float
        Fraction of those patients present in both tables (``round(overlap * n_patients)`` true
        pairs). The others are split evenly between lab-only and imaging-only patients (the lab
        gets the odd one).
    typo_rate : float
        Fraction of the common patients whose identity differs between the two tables. Each
        such patient gets one (70 %) or two (30 %) distinct perturbations, each in one of the
        two tables chosen at random: a keyboard typo in a name (substitution by a neighbouring
        key, insertion, deletion or transposition), given name and surname swapped, a nickname
        (Bill for William), a missing value (given name, date of birth, sex or postcode), a
        moved postcode, or a date-of-birth error (day and month swapped, or one digit wrong).
        The exact ``patient_id`` is never perturbed.
    random_state : int, numpy.random.Generator or None
        Seed of the simulation (not of any cryptography).

    Returns
    -------
    LabImagingCohort
        ``(lab, imaging, true_pairs)``; see :class:`LabImagingCohort`.

    Notes
    -----
    The outcome follows a logistic model whose log-odds add a lab signal (inflammation and
    tissue damage, seen through CRP, white cells, haemoglobin, albumin, LDH, platelets), an
    imaging signal (lesion burden and texture, seen through most imaging features) and a little
    age. Each signal reaches its party only through noisy features, so neither party alone
    reaches the AUC of both together. Some features are nuisance (creatinine, ALT, scanner noise).
    Prevalence is about 35 %. Feature values are complete (no missing values).
    """
    if not isinstance(n_patients, (int, np.integer)) or n_patients < 2:
        raise ValueError(f"n_patients must be an integer >= 2, got {n_patients!r}")
    for name, value in (("overlap", overlap), ("typo_rate", typo_rate)):
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {value!r}")
    rng = np.random.default_rng(random_state)
    n = int(n_patients)
    n_common = round(overlap * n)
    n_lab_only = (n - n_common + 1) // 2

    people = draw_people(n, rng)
    signals = draw_signals(people, rng)
    lab_features = draw_lab_features(people, signals, rng)
    imaging_features, label = draw_imaging_features(people, signals, rng)
    return vertical_tables(
        people, lab_features, imaging_features, label, n_common, n_lab_only, typo_rate, rng
    )


def vertical_tables(
    people: pd.DataFrame,
    lab_features: pd.DataFrame,
    imaging_features: pd.DataFrame,
    label: np.ndarray[Any, Any],
    n_common: int,
    n_lab_only: int,
    typo_rate: float,
    rng: np.random.Generator,
) -> LabImagingCohort:
    """The lab and imaging tables of ``people`` (rows 0..n_common-1 in both, then lab-only,
    then imaging-only), identities perturbed, rows shuffled and relabelled."""
    n = len(people)
    # patients 0..n_common-1 are in both tables, then lab-only, then imaging-only
    lab_rows = np.arange(0, n_common + n_lab_only)
    imaging_rows = np.concatenate([np.arange(n_common), np.arange(n_common + n_lab_only, n)])
    lab_ident = people.iloc[lab_rows].reset_index(drop=True)
    imaging_ident = people.iloc[imaging_rows].reset_index(drop=True)
    corrupt_identities(lab_ident, imaging_ident, n_common, typo_rate, rng)

    lab = pd.concat(
        [lab_ident[IDENTITY_COLUMNS], lab_features.iloc[lab_rows].reset_index(drop=True)], axis=1
    )
    imaging = pd.concat(
        [
            imaging_ident[IDENTITY_COLUMNS],
            imaging_features.iloc[imaging_rows].reset_index(drop=True),
            pd.Series(label[imaging_rows], name=LABEL),
        ],
        axis=1,
    )
    lab_order = rng.permutation(len(lab))
    imaging_order = rng.permutation(len(imaging))
    lab_ids = np.array([f"L{i + 1:06d}" for i in range(len(lab))])
    imaging_ids = np.array([f"I{i + 1:06d}" for i in range(len(imaging))])
    lab = lab.iloc[lab_order].set_axis(pd.Index(lab_ids, name="record_id"))
    imaging = imaging.iloc[imaging_order].set_axis(pd.Index(imaging_ids, name="record_id"))

    # patient p (< n_common) sits at position where lab_order == p (and the same in imaging)
    lab_pos = np.argsort(lab_order)[:n_common]
    imaging_pos = np.argsort(imaging_order)[:n_common]
    true_pairs = pd.DataFrame({"lab": lab_ids[lab_pos], "imaging": imaging_ids[imaging_pos]})
    true_pairs = true_pairs.sort_values("lab", ignore_index=True)
    return LabImagingCohort(lab, imaging, true_pairs)
