"""Synthetic identities: names drawn with a skewed (Zipf-like) frequency so that common
names repeat as in real registers, and the errors two registers make about the same person
(typos, swapped names, nicknames, missing values, moves, mistyped dates of birth).

:func:`make_multiparty_identities` draws several parties' identity tables from them.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["IDENTITY_COLUMNS", "NICKNAMES", "identity_schema", "make_multiparty_identities"]

IDENTITY_COLUMNS = ["patient_id", "given_name", "surname", "date_of_birth", "sex", "postcode"]
"""Identity columns of both tables. ``patient_id`` is the exact ID (drop it to force fuzzy linkage);
``date_of_birth`` is a ``YYYYMMDD`` string; ``sex`` is ``"F"``/``"M"``; missing values are NA."""

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
NICKNAMES = {
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
    people = draw_people(int(n_patients), rng)
    held = rng.random((len(people), len(parties))) < presence
    frames: dict[str, pd.DataFrame] = {}
    ids: dict[str, pd.Series] = {}
    for k, party in enumerate(parties):
        rows = np.flatnonzero(held[:, k])
        copy = people.iloc[rows].reset_index(drop=True)
        corrupt_identities(copy, copy.copy(), len(copy), typo_rate, rng)
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


def draw_people(n: int, rng: np.random.Generator) -> pd.DataFrame:
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


# -- identity perturbations ------------------------------------------------------------------


def corrupt_identities(
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
    if kind == "nickname" and isinstance(given, str) and given in NICKNAMES:
        table.at[row, "given_name"] = rng.choice(NICKNAMES[given])
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
