"""One population, every partition (:func:`make_population`, :class:`ClinicalPopulation`):
the vertical, horizontal and transfer cuts of the same patients, with held-out patients that
no party holds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from vfl.datasets.clinical import (
    HOSPITAL_FEATURES,
    IMAGING_FEATURES,
    LAB_FEATURES,
    LABEL,
    draw_imaging_features,
    draw_lab_features,
    draw_signals,
)
from vfl.datasets.hospitals import check_skews, hospital_sizes, name_hospitals, shift_features
from vfl.datasets.identities import IDENTITY_COLUMNS, draw_people
from vfl.datasets.transfer import TransferPair, transfer_tables
from vfl.datasets.vertical import LabImagingCohort, vertical_tables

__all__ = ["ClinicalPopulation", "make_population"]


class ClinicalPopulation:
    """One synthetic clinical population from which every partition is cut.

    Made by :func:`make_population`. ``frame`` holds every patient: the identity columns
    (:data:`IDENTITY_COLUMNS`), the lab features, the imaging features and the diagnosis.
    The patients are split once into *training* patients, from which the partitions are cut,
    and *test* patients, whom no party holds: every scheme is scored on the same test patients,
    with the columns its model uses.

    The cuts are deterministic functions of the population's seed and their own arguments
    (not of the order in which they are called):

    * :meth:`vertical` -- a lab network and an imaging centre (with the diagnosis) holding
      different columns about partly the same patients, identities with typos;
    * :meth:`horizontal` -- hospitals holding all columns about different patients, with
      label, quantity and feature skew;
    * :meth:`transfer` -- a general hospital with the lab columns and the diagnosis of many
      patients, and an imaging centre with few labels and few patients in common.
    """

    def __init__(
        self,
        frame: pd.DataFrame,
        train: np.ndarray[Any, Any],
        test: np.ndarray[Any, Any],
        seed: int,
    ) -> None:
        self.frame = frame
        self.train = train
        self.test = test
        self.seed = seed

    def __repr__(self) -> str:
        return (
            f"ClinicalPopulation({len(self.frame)} patients: {len(self.train)} to cut from, "
            f"{len(self.test)} held out; prevalence {self.frame[LABEL].mean():.2f}; "
            f"seed {self.seed})"
        )

    def _rng(self, *key: object) -> np.random.Generator:
        import numbers
        import zlib

        # numbers by value (5 and 5.0 give the same cut), None as itself
        words = [repr(float(k)) if isinstance(k, numbers.Real) else repr(k) for k in key]
        spawn = [zlib.crc32(" ".join(words).encode())]
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=spawn))

    def test_set(self, columns: list[str] | None = None) -> tuple[pd.DataFrame, pd.Series]:
        """The held-out patients' features (``columns``, default every feature) and diagnosis,
        indexed by ``patient_id``."""
        picked = self.frame.iloc[self.test].set_index("patient_id")
        x: pd.DataFrame = picked[columns if columns is not None else HOSPITAL_FEATURES]
        y: pd.Series = picked[LABEL]
        return x, y

    def pooled(self) -> tuple[pd.DataFrame, pd.Series]:
        """Every training patient's features and diagnosis in one table: what a central
        analysis would have (the upper bound of every scheme)."""
        picked = self.frame.iloc[self.train].set_index("patient_id")
        x: pd.DataFrame = picked[HOSPITAL_FEATURES]
        y: pd.Series = picked[LABEL]
        return x, y

    def vertical(self, *, overlap: float = 0.6, typo_rate: float = 0.2) -> LabImagingCohort:
        """The lab network's and the imaging centre's tables, as
        :func:`make_lab_imaging_cohort` returns them, over the training patients: a share
        ``overlap`` of them is in both tables, the rest split evenly between the two;
        ``typo_rate`` of the common patients have identities that differ between the tables."""
        for name, value in (("overlap", overlap), ("typo_rate", typo_rate)):
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value!r}")
        rng = self._rng("vertical", float(overlap), float(typo_rate))
        rows = rng.permutation(self.train)
        n = len(rows)
        n_common = round(overlap * n)
        people = self.frame.iloc[rows].reset_index(drop=True)
        return vertical_tables(
            people,
            people[LAB_FEATURES],
            people[IMAGING_FEATURES],
            people[LABEL].to_numpy(),
            n_common,
            (n - n_common + 1) // 2,
            typo_rate,
            rng,
        )

    def horizontal(
        self,
        n_hospitals: int = 5,
        *,
        label_skew: float | None = None,
        quantity_skew: float | None = None,
        feature_shift: float = 0.0,
    ) -> dict[str, pd.DataFrame]:
        """Hospitals holding every feature and the diagnosis of different training patients,
        as :func:`make_hospital_cohort` returns them (the same skew arguments), with two
        differences: the patients are the population's (with label skew, a hospital asking for
        more cases or controls than the population has left gets fewer patients), and each
        frame also has ``patient_id``."""
        if not isinstance(n_hospitals, (int, np.integer)) or not (
            1 <= n_hospitals <= len(self.train)
        ):
            raise ValueError(
                f"n_hospitals must be an integer between 1 and the {len(self.train)} training "
                f"patients, got {n_hospitals!r}"
            )
        check_skews(label_skew, quantity_skew, feature_shift)
        # the hospitals' patients do not depend on feature_shift: the same wards, shifted or not
        rng = self._rng("horizontal", int(n_hospitals), label_skew, quantity_skew)
        n_h = int(n_hospitals)
        sizes = hospital_sizes(n_h, len(self.train), quantity_skew, rng)
        label = self.frame[LABEL].to_numpy()[self.train]
        if label_skew is None:
            order = rng.permutation(len(self.train))
            parts = np.split(order, np.cumsum(sizes)[:-1])
        else:
            prevalence = float(np.clip(label.mean(), 0.01, 0.99))
            concentration = float(label_skew) * np.array([prevalence, 1.0 - prevalence])
            cases = rng.binomial(sizes, rng.dirichlet(concentration, size=n_h)[:, 0])
            controls = sizes - cases
            pools = [rng.permutation(np.flatnonzero(label == k)) for k in (1, 0)]
            wanted = []
            for pool, counts in zip(pools, (cases, controls), strict=True):
                if counts.sum() > len(pool):  # scale the demand down to what there is
                    counts = np.floor(counts * len(pool) / counts.sum()).astype(np.int64)
                wanted.append(np.split(pool[: counts.sum()], np.cumsum(counts)[:-1]))
            parts = [rng.permutation(np.concatenate(pair)) for pair in zip(*wanted, strict=True)]
        frames = [
            self.frame.iloc[self.train[p]][["patient_id", *HOSPITAL_FEATURES]].reset_index(
                drop=True
            )
            for p in parts
        ]
        if feature_shift > 0:
            shift_rng = self._rng(
                "shift", int(n_hospitals), label_skew, quantity_skew, feature_shift
            )
            shifted = shift_features(
                [f[HOSPITAL_FEATURES] for f in frames], feature_shift, shift_rng
            )
            for frame, moved in zip(frames, shifted, strict=True):
                frame[HOSPITAL_FEATURES] = moved
        return name_hospitals(frames, [label[p] for p in parts])

    def transfer(
        self,
        n_source: int | None = None,
        n_target: int | None = None,
        *,
        n_overlap: int = 100,
        target_labels: int = 50,
        feature_overlap: float = 0.3,
    ) -> TransferPair:
        """A general hospital (the source: the lab columns and the diagnosis of ``n_source``
        training patients) and an imaging centre (the target: the imaging columns and the
        first ``round(10 * feature_overlap)`` lab columns of ``n_target`` patients, of whom it
        knows ``target_labels`` outcomes), ``n_overlap`` patients in both; as
        :func:`make_transfer_pair` returns them. By default the source has two thirds of the
        training patients and the target the rest plus the overlap."""
        n_train = len(self.train)
        n_source = int(n_source) if n_source is not None else (2 * n_train) // 3
        n_target = int(n_target) if n_target is not None else n_train - n_source + n_overlap
        if n_source < 2 or n_target < 2:
            raise ValueError(f"n_source and n_target must be >= 2, got {n_source}, {n_target}")
        if not 0 <= n_overlap <= min(n_source, n_target):
            raise ValueError(
                f"n_overlap must be between 0 and {min(n_source, n_target)}, got {n_overlap!r}"
            )
        if n_source + n_target - n_overlap > n_train:
            raise ValueError(
                f"n_source + n_target - n_overlap = {n_source + n_target - n_overlap} patients, "
                f"more than the population's {n_train} training patients: make a larger "
                f"population or ask for fewer"
            )
        if not 0 <= target_labels <= n_target:
            raise ValueError(f"target_labels must be between 0 and {n_target}, got {target_labels}")
        if not 0.0 <= float(feature_overlap) <= 1.0:
            raise ValueError(f"feature_overlap must be between 0 and 1, got {feature_overlap!r}")
        rng = self._rng("transfer", n_source, n_target, n_overlap, target_labels, feature_overlap)
        rows = rng.permutation(self.train)[: n_source + n_target - n_overlap]
        source_rows = rows[:n_source]
        target_rows = rows[n_source - n_overlap :]
        shared = LAB_FEATURES[: round(len(LAB_FEATURES) * float(feature_overlap))]
        frame = self.frame

        def table(picked: np.ndarray[Any, Any], columns: list[str], prefix: str) -> Any:
            picked = picked[rng.permutation(len(picked))]
            part = frame.iloc[picked][["patient_id", *columns]]
            index = pd.Index([f"{prefix}{i + 1:06d}" for i in range(len(picked))], name="record_id")
            return part.set_axis(index), picked

        source, source_people = table(source_rows, LAB_FEATURES, "S")
        target, target_people = table(target_rows, [*shared, *IMAGING_FEATURES], "T")
        outcome = frame[LABEL].to_numpy()
        return transfer_tables(
            source, source_people, target, target_people, outcome, shared, target_labels, rng
        )


def make_population(
    n_patients: int = 4000,
    *,
    test_size: float = 0.25,
    signal_correlation: float = 0.5,
    random_state: int | None = 0,
) -> ClinicalPopulation:
    """One synthetic clinical population from which every partition scheme's data are cut.

    Every patient has an identity (as in :func:`make_lab_imaging_cohort`), the lab features,
    the imaging features and the diagnosis of that model, except that the lab signal
    (inflammation) and the imaging signal (lesion burden) are correlated by
    ``signal_correlation``: one disease seen by both, so that what a lab-based model learns
    carries over to imaging (the transfer case) while each party still adds what the other
    lacks (the vertical case).

    Parameters
    ----------
    n_patients : int
        Patients in the population (training and held out), at least 20.
    test_size : float
        Share held out (no party holds them; every scheme is scored on them), in (0, 1).
    signal_correlation : float
        Correlation of the lab and imaging signals, in [0, 1). 0 gives the independent signals
        of :func:`make_lab_imaging_cohort`.
    random_state : int or None
        Seed of the simulation and of every cut (None: a fresh one, reported by ``seed``).

    Returns
    -------
    ClinicalPopulation
    """
    if not isinstance(n_patients, (int, np.integer)) or n_patients < 20:
        raise ValueError(f"n_patients must be an integer >= 20, got {n_patients!r}")
    if not 0.0 < float(test_size) < 1.0:
        raise ValueError(f"test_size must be between 0 and 1 (exclusive), got {test_size!r}")
    if not 0.0 <= float(signal_correlation) < 1.0:
        raise ValueError(f"signal_correlation must be in [0, 1), got {signal_correlation!r}")
    if random_state is None:
        seed = int(np.random.SeedSequence().entropy % 2**63)  # type: ignore[operator]
    elif isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        seed = int(random_state)
    else:
        raise ValueError(f"random_state must be an integer or None, got {random_state!r}")
    rng = np.random.default_rng(seed)
    n = int(n_patients)
    people = draw_people(n, rng)
    signals = draw_signals(people, rng)
    rho = float(signal_correlation)
    signals["imaging"] = rho * signals["lab"] + np.sqrt(1.0 - rho**2) * signals["imaging"]
    lab = draw_lab_features(people, signals, rng)
    imaging, label = draw_imaging_features(people, signals, rng)
    frame = pd.concat([people[IDENTITY_COLUMNS], lab, imaging], axis=1)
    frame[LABEL] = label
    order = rng.permutation(n)
    n_test = max(1, round(float(test_size) * n))
    return ClinicalPopulation(frame, np.sort(order[n_test:]), np.sort(order[:n_test]), seed)
