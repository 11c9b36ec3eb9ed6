"""One quick comparison for the whole package: ``examples/partition_schemes.py --quick``
itself, run once. The row tests check its rows and its context (the population and linkage
made once), so every row is computed once, as the example computes it."""

from __future__ import annotations

import pytest

from tests.vfl.compare.examples import SEED, example
from vfl.app.compare import Comparison
from vfl.comparison import Context


@pytest.fixture(scope="package")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    """The CI run: ``examples/partition_schemes.py --quick --seed 0``, its files in ``out``."""
    out = tmp_path_factory.mktemp("compare")
    result: Comparison = example("partition_schemes").main(
        ["--quick", "--seed", str(SEED), "--out", str(out)]
    )
    result.out = out  # type: ignore[attr-defined]
    return result


@pytest.fixture(scope="package")
def ctx(quick: Comparison) -> Context:
    """The quick comparison's context (QUICK settings, seed 0)."""
    assert quick.context is not None
    return quick.context
