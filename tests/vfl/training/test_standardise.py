"""The shared standardiser: each column on its own mean and deviation, constant columns
unscaled, and its two arrays round-trip."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.preprocessing import StandardScaler

from vfl.training import Standardiser


def test_it_scales_as_scikit_learn_and_leaves_constant_columns_at_zero() -> None:
    rng = np.random.default_rng(0)
    values = np.column_stack([rng.normal(3.0, 2.0, 50), np.full(50, 7.0), rng.uniform(size=50)])
    scaled = Standardiser().fit_transform(values)
    np.testing.assert_allclose(scaled, StandardScaler().fit_transform(values))
    np.testing.assert_array_equal(scaled[:, 1], 0.0)
    scaling = Standardiser().fit(values)
    assert scaling.scale_[1] == 1.0 and scaling.mean_[1] == 7.0
    empty = Standardiser().fit(np.zeros((4, 0)))  # a party with no columns of its own
    assert empty.transform(np.zeros((2, 0))).shape == (2, 0)


def test_its_arrays_round_trip_under_their_saved_names() -> None:
    values = np.arange(12.0).reshape(4, 3) ** 2
    scaling = Standardiser().fit(values)
    arrays = scaling.to_arrays("own_")
    assert list(arrays) == ["own_mean", "own_scale"]
    again = Standardiser.from_arrays(arrays, "own_")
    np.testing.assert_array_equal(again.transform(values), scaling.transform(values))
    assert repr(again) == "Standardiser(3 columns)"


def test_bad_input_gets_clear_errors() -> None:
    with pytest.raises(NotFittedError, match="not fitted yet"):
        Standardiser().transform(np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"table of \(rows, columns\), got shape \(3,\)"):
        Standardiser().fit(np.zeros(3))
    with pytest.raises(ValueError, match="fitted on 2 columns, got values of shape"):
        Standardiser().fit(np.eye(2)).transform(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"lacks the arrays \['scale'\]"):
        Standardiser.from_arrays({"mean": np.zeros(2)})
    with pytest.raises(ValueError, match="one value per column expected"):
        Standardiser.from_arrays({"mean": np.zeros(2), "scale": np.ones(3)})
