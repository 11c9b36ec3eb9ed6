"""Synthetic cohorts for examples, tests and benchmarks.

:func:`make_lab_imaging_cohort` simulates vflink's central scenario: a lab network and an imaging
centre that hold different columns about partly the same patients. Nothing here is real data;
names are drawn from short built-in lists with a skewed (Zipf-like) frequency so that common
names repeat as they do in real registers.

:func:`make_hospital_cohort` simulates the horizontal setting from the same patient model:
several hospitals with the same columns about different patients, with tunable label, quantity
and feature skew.

:func:`make_transfer_pair` simulates the transfer setting: a general hospital with many
labelled patients and a rare-disease centre with few, holding different columns and a few
patients in common, both seeing one shared disease process.

:func:`make_population` draws one population and cuts every one of these partitions from it
(:class:`ClinicalPopulation`), with held-out patients that no party holds, so that every scheme
of :mod:`vfl.app.compare` answers the same question about the same patients.

The generators live in modules by setting: :mod:`vfl.datasets.identities` (names and the
errors registers make), :mod:`vfl.datasets.clinical` (the disease model and its features),
:mod:`vfl.datasets.vertical`, :mod:`vfl.datasets.hospitals`, :mod:`vfl.datasets.transfer`,
:mod:`vfl.datasets.population` and :mod:`vfl.datasets.febrl`.
"""

from __future__ import annotations

from vfl.datasets.clinical import HOSPITAL_FEATURES, IMAGING_FEATURES, LAB_FEATURES, LABEL
from vfl.datasets.febrl import load_febrl
from vfl.datasets.hospitals import make_hospital_cohort
from vfl.datasets.identities import IDENTITY_COLUMNS, identity_schema, make_multiparty_identities
from vfl.datasets.population import ClinicalPopulation, make_population
from vfl.datasets.transfer import TransferPair, make_transfer_pair
from vfl.datasets.vertical import LabImagingCohort, make_lab_imaging_cohort

__all__ = [
    "HOSPITAL_FEATURES",
    "IDENTITY_COLUMNS",
    "IMAGING_FEATURES",
    "LABEL",
    "LAB_FEATURES",
    "ClinicalPopulation",
    "LabImagingCohort",
    "TransferPair",
    "identity_schema",
    "load_febrl",
    "make_hospital_cohort",
    "make_lab_imaging_cohort",
    "make_multiparty_identities",
    "make_population",
    "make_transfer_pair",
]
