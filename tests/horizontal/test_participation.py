"""The finite-population correction of the sampled mean's error, checked by simulation."""

from __future__ import annotations

import numpy as np
import pytest

from horizontal.participation import sampling_error, simulated_sampling_error


def test_the_formula_matches_simulation_from_cross_device_to_cross_silo() -> None:
    rng = np.random.default_rng(0)
    updates = rng.normal(size=(50, 8)) + rng.normal(size=(50, 1)) * 3  # heterogeneous clients
    for m in (1, 5, 25, 49):
        expected = sampling_error(updates, m)
        measured = simulated_sampling_error(updates, m, draws=4000, rng=rng)
        assert measured == pytest.approx(expected, rel=0.08), m
    assert sampling_error(updates, 50) == 0.0  # every client: no sampling error
    # without the correction (sampling with replacement), the error would be S^2 / m
    spread = np.sum((updates - updates.mean(axis=0)) ** 2) / 49
    assert sampling_error(updates, 25) == pytest.approx(spread / 25 * 0.5)
    with pytest.raises(ValueError, match="m must be between 1 and the 50 clients"):
        sampling_error(updates, 0)
