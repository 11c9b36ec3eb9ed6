"""A synthetic count table shaped like FATE's dvisits example (Cameron and Trivedi's Australian
health survey: 5,190 people, doctor visits in two weeks), drawn from a known Poisson model, split
by columns between an insurer (the label party: demographics, insurance, the visit counts) and a
clinic (health: illness, reduced-activity days, health score, chronic conditions).

The coefficients are those of the Poisson fit to the real dvisits table reported by Cameron and
Trivedi (1998, table 3.3); the columns follow its marginals roughly (counts 0-9, about 80%
zeros). Nothing here is real data.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

__all__ = ["CLINIC_COLUMNS", "COEFFICIENTS", "INSURER_COLUMNS", "CountTable", "make_count_table"]

INSURER_COLUMNS = ["sex", "age", "agesq", "income", "levyplus", "freepoor", "freerepa"]
CLINIC_COLUMNS = ["illness", "actdays", "hscore", "chcond1", "chcond2"]
COEFFICIENTS = {
    "intercept": -2.224,
    "sex": 0.157,
    "age": 1.056,
    "agesq": -0.849,
    "income": -0.205,
    "levyplus": 0.123,
    "freepoor": -0.440,
    "freerepa": 0.080,
    "illness": 0.187,
    "actdays": 0.127,
    "hscore": 0.030,
    "chcond1": 0.114,
    "chcond2": 0.141,
}
"""The true model (raw units): ``log E[visits] = intercept + sum coef * column``."""


class CountTable(NamedTuple):
    """``parts`` ({"insurer": ..., "clinic": ...}), the counts ``y`` (held by the insurer), the
    ``exposure`` (None unless asked for) and the true coefficients."""

    parts: dict[str, pd.DataFrame]
    y: pd.Series
    exposure: pd.Series | None
    coefficients: dict[str, float]


def make_count_table(
    rows: int = 5190, *, exposure: bool = False, random_state: int | None = 0
) -> CountTable:
    """Draw a dvisits-like table of ``rows`` people (see the module docstring).

    With ``exposure``, each person is followed for a time in ``[0.5, 2)`` (two-week periods,
    the insurer's column ``"periods"`` and the returned Series), and the counts are
    ``Poisson(periods * exp(score))``.
    """
    rng = np.random.default_rng(random_state)
    age = 0.19 + 0.53 * rng.beta(1.2, 2.0, rows)
    insurer = pd.DataFrame(
        {
            "sex": rng.binomial(1, 0.52, rows).astype(float),
            "age": np.round(age, 2),
            "agesq": np.round(age, 2) ** 2,
            "income": np.minimum(1.5, np.round(rng.gamma(2.5, 0.24, rows), 2)),
            "levyplus": rng.binomial(1, 0.44, rows).astype(float),
            "freepoor": rng.binomial(1, 0.04, rows).astype(float),
            "freerepa": rng.binomial(1, np.clip(0.05 + 0.6 * (age - 0.19), 0, 1)).astype(float),
        }
    )
    chronic = rng.choice(3, rows, p=[0.48, 0.40, 0.12])
    active = rng.random(rows) < 0.14
    clinic = pd.DataFrame(
        {
            "illness": np.minimum(5, rng.poisson(1.4, rows)).astype(float),
            "actdays": np.where(active, rng.integers(1, 15, rows), 0).astype(float),
            "hscore": np.where(
                rng.random(rows) < 0.42, np.minimum(12, rng.poisson(2.5, rows) + 1), 0
            ).astype(float),
            "chcond1": (chronic == 1).astype(float),
            "chcond2": (chronic == 2).astype(float),
        }
    )
    score = np.full(rows, COEFFICIENTS["intercept"])
    for frame in (insurer, clinic):
        for column in frame.columns:
            score += COEFFICIENTS[column] * frame[column].to_numpy()
    periods: Any = rng.uniform(0.5, 2.0, rows) if exposure else np.ones(rows)
    counts = np.minimum(9, rng.poisson(periods * np.exp(score))).astype(float)
    index = pd.RangeIndex(rows, name="person")
    insurer.index = clinic.index = index
    y = pd.Series(counts, index=index, name="doctorco")
    series = pd.Series(periods, index=index, name="periods") if exposure else None
    return CountTable({"insurer": insurer, "clinic": clinic}, y, series, dict(COEFFICIENTS))
