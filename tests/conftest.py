"""Shared pytest configuration.

Tests marked ``slow`` or ``network`` run by default (CI runs everything); pass ``--skip-slow``
to leave them out locally.
"""

from __future__ import annotations

import os

import pytest

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test`` runs a worker per core), each worker and the party
    processes it starts keep to one thread per numerical library: two workers each spinning
    two OpenMP threads on two cores run slower than one thread each. Set before the test
    modules import numpy or torch; an explicit setting in the environment wins."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for variable in THREAD_VARIABLES:
            os.environ.setdefault(variable, "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--skip-slow",
        action="store_true",
        default=False,
        help="skip tests marked slow or network (they run in CI)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--skip-slow"):
        return
    skip = pytest.mark.skip(reason="--skip-slow given")
    for item in items:
        if "slow" in item.keywords or "network" in item.keywords:
            item.add_marker(skip)
