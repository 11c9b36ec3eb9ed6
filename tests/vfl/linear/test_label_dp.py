"""Label DP for the gradient-revealing protocols: the noise the label party adds under
encryption has the scale it claims, the ledger's epsilon is the accountant's, and the
label-solve audit that breaks the exact protocols gets nothing beyond chance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.datasets import load_breast_cancer

from tests.vfl.linear.conftest import small_model
from vfl.audit import LabelSolveAudit
from vfl.crypto import SecurityWarning, generate_paillier_keypair
from vfl.crypto.packing import RowPacking, unpack_signed
from vfl.linear import VerticalLinearRegression, VerticalLogisticRegression
from vfl.linear.exchange import FEATURE_BITS, SCORE_BITS, encrypted_noise
from vfl.privacy.accounting import epsilon, gaussian_event

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")


def std_bounds(n: int) -> tuple[float, float]:
    """Bounds on sample std / sigma of n normal samples, each side failing with 5e-8."""
    return (
        float(np.sqrt(stats.chi2.ppf(5e-8, n) / n)),
        float(np.sqrt(stats.chi2.ppf(1 - 5e-8, n) / n)),
    )


def test_the_encrypted_noise_has_the_claimed_scale() -> None:
    public, secret = generate_paillier_keypair(1024, insecure=True)
    packing = RowPacking.plan(80, 7, 1024, kappa=None)
    sigma, draws = 3.0, []
    for _ in range(300):
        vector = encrypted_noise(public, packing, 1, sigma, masked=False)
        (plain,) = secret.raw_decrypt(vector.ciphertexts)
        value = int(plain) - int(public.n) if plain > public.n // 2 else int(plain)
        draws += unpack_signed(value, packing, 0, packing.value_bits(None))
    samples = np.array(draws, dtype=float) / 2.0 ** (FEATURE_BITS + SCORE_BITS)
    low, high = std_bounds(len(samples))
    assert low < samples.std() / sigma < high
    assert abs(samples.mean()) < 5.5 * sigma / np.sqrt(len(samples))  # false failure < 1e-7


@pytest.mark.parametrize("protocol", ["coordinator", "two_party"])
def test_label_dp_spends_what_the_ledger_says_and_defeats_the_solver(protocol: str) -> None:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    parts = {"imaging": x[cols[:10]], "lab": x[cols[10:]]}
    est = small_model(
        VerticalLogisticRegression,
        protocol=protocol,
        batch_size=64,
        max_iter=3,
        tol=None,
        label_epsilon=2.0,
        label_delta=1e-5,
    )
    est.fit(parts, y, label_party="imaging", keep_views=True)
    ledger = est.privacy_ledger_
    (entry,) = ledger.entries
    assert entry.holder == "imaging" and entry.steps == 3 * 2
    expected = epsilon(
        [gaussian_event(noise_multiplier=entry.noise_multiplier, steps=6)], delta=1e-5
    )
    assert ledger.epsilon(holder="imaging") == pytest.approx(expected, rel=1e-9)
    assert 1.9 < expected <= 2.0 + 1e-6  # calibrated to the budget asked for
    # the passive's first-batch view is the exact gradient plus noise of the claimed scale
    design = est.parts_["lab"].design(parts["lab"])
    assert np.linalg.norm(design, axis=1).max() <= np.sqrt(20) + 1e-5  # rows clipped
    rows, decrypted = est.views_["lab"][0]
    t = 2.0 * (2.0 * y.to_numpy()[rows] - 1.0)
    noise = decrypted[:, 0] - design[rows].T @ (-t)
    sigma = entry.noise_multiplier * 4 * np.sqrt(20)
    low, high = std_bounds(len(noise))
    assert low < np.sqrt(np.mean(noise**2)) / sigma < high
    # and the integer solver that recovers every label without DP gets no advantage
    result = LabelSolveAudit().run(est.views_["lab"], design, y, time_limit=5)
    assert not result.details["solved"] and result.advantage == pytest.approx(0, abs=0.01)


def test_label_dp_bad_settings_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(200, 6)), columns=list("abcdef"))
    parts = {"a": frame[["a", "b", "c"]], "b": frame[["d", "e", "f"]]}
    y = pd.Series((frame.sum(axis=1) > 0).astype(int))
    with pytest.raises(ValueError, match="label DP needs a fixed number of epochs: set tol=None"):
        small_model(VerticalLogisticRegression, label_epsilon=1.0).fit(parts, y, label_party="a")
    reg = small_model(VerticalLinearRegression, tol=None)
    reg.label_epsilon = 1.0
    with pytest.raises(ValueError, match="VerticalLinearRegression has no label DP"):
        reg.fit(parts, frame["a"], label_party="a")
    est = small_model(
        VerticalLogisticRegression, label_epsilon=4.0, tol=None, max_iter=2, batch_size=64
    )
    est.fit(parts, y, label_party="a")
    paths = est.save(tmp_path)
    assert (tmp_path / "privacy_ledger.json") in paths
    loaded = small_model(VerticalLogisticRegression).load(*paths, label_party="a")
    assert loaded.privacy_ledger_.epsilon(holder="a") == pytest.approx(
        est.privacy_ledger_.epsilon(holder="a")
    )
    np.testing.assert_allclose(loaded.decision_function(parts), est.decision_function(parts))
