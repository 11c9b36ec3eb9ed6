"""Test tables and estimators for the linear tests: FATE's vertically split example tables
(``../shared/data/fate``), joined on ``id``, and small fast estimators."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import pytest

FATE = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "fate"


def hetero(name: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """``(guest features, host features, y)`` of ``<name>_hetero_{guest,host}.csv``, rows in
    the guest's order; skips the test (naming the folder) when the data is absent."""
    guest_file, host_file = FATE / f"{name}_hetero_guest.csv", FATE / f"{name}_hetero_host.csv"
    if not guest_file.exists() or not host_file.exists():
        pytest.skip(f"FATE example data not found in {FATE} (the shared data folder)")
    guest = pd.read_csv(guest_file).set_index("id")
    host = pd.read_csv(host_file).set_index("id").add_prefix("host_")
    y = guest.pop("y")
    return guest, host.loc[guest.index], y


T = TypeVar("T")


def small_model(cls: type[T], **params: Any) -> T:
    """A fast, reproducible estimator for tests: 512-bit keys (insecure, tests only; no
    plaintext depends on the key size, and the tests that hold a packing layout in their
    expected messages pass 1024) and a fixed batch order."""
    base: dict[str, Any] = {"key_bits": 512, "insecure": True, "random_state": 0}
    base.update(params)
    return cls(**base)


SHARES_ATOL = 1e-5
"""Truncating random shares costs at most a few units of ``2**-24`` per step and weight."""


def assert_equals_twin(est: Any, parts: dict[str, pd.DataFrame], y: Any, label: str) -> None:
    """Every party's weights and the loss curve of an encrypted fit equal the plaintext
    twin's (:func:`vfl.linear.plaintext_reference`), to the shares' truncation."""
    import numpy as np

    from vfl.linear.reference import plaintext_reference

    weights, curve = plaintext_reference(est, parts, y, label_party=label)
    for name, part in est.parts_.items():
        w = part.weights(with_intercept=name == label)
        np.testing.assert_allclose(w, weights[name].reshape(w.shape), atol=SHARES_ATOL)
    np.testing.assert_allclose(est.loss_curve_, curve, rtol=SHARES_ATOL)
