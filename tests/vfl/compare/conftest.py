"""One quick comparison context for the row tests (the population and linkage made once)."""

from __future__ import annotations

import pytest

from vfl.comparison import QUICK, Context
from vfl.datasets import make_population


@pytest.fixture(scope="package")
def ctx() -> Context:
    return Context(make_population(QUICK.n_patients, random_state=0), QUICK, 0)
