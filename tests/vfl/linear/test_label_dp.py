"""Label DP for the gradient-revealing protocols: the noise the label party adds under
encryption has the scale it claims, the ledger's epsilon is the accountant's, and the
label-solve audit that breaks the exact protocols gets nothing beyond chance."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.datasets import load_breast_cancer

from tests.vfl.linear.tables import small_model as _small_model
from vfl.audit import LabelSolveAudit
from vfl.crypto import SecurityWarning, generate_paillier_keypair
from vfl.crypto.packing import RowPacking, unpack_signed
from vfl.linear import VerticalLinearRegression, VerticalLogisticRegression
from vfl.linear.exchange import FEATURE_BITS, SCORE_BITS, encrypted_noise
from vfl.privacy.accounting import epsilon, gaussian_event
from vfl.privacy.options import GaussianLabelDP


def small_model(cls: Any, **params: Any) -> Any:
    """Label DP is for the gradient-revealing protocols (the shared one refuses it)."""
    params.setdefault("protocol", "coordinator")
    return _small_model(cls, **params)


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
        privacy=GaussianLabelDP(2.0, delta=1e-5),
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
    design = est.parts_["lab"].design(parts["lab"])
    assert np.linalg.norm(design, axis=1).max() <= np.sqrt(20)  # rows clipped
    # and the integer solver that recovers every label without DP gets no advantage
    result = LabelSolveAudit().run(est.views_["lab"], design, y, index=y.index, time_limit=30)
    assert result.details["status"] == "infeasible"  # the equations are no longer exact
    assert result.advantage == pytest.approx(0, abs=0.01)


def test_one_labels_sensitivity_is_what_the_noise_is_scaled_to() -> None:
    from vfl.linear.protocol import label_sensitivity

    spec = small_model(VerticalLogisticRegression, privacy=GaussianLabelDP(1.0), tol=None).fit_spec(
        "a", ["a", "b"]
    )
    # a label moves t = 2(2y - 1) by 4, times the row's norm bound (sqrt(columns) by default)
    assert label_sensitivity(spec, 16, 1) == pytest.approx(16.0)
    assert label_sensitivity(spec, 16, 1, intercept=True) == pytest.approx(4 * np.sqrt(17))
    assert label_sensitivity(spec, 16, 3) == pytest.approx(16.0 * np.sqrt(2))  # two outputs
    clipped = small_model(
        VerticalLogisticRegression, privacy=GaussianLabelDP(1.0, row_clip=2.0), tol=None
    ).fit_spec("a", ["a", "b"])
    assert label_sensitivity(clipped, 16, 1) == pytest.approx(8.0)


@pytest.mark.parametrize("classes", [2, 3])
def test_every_batch_a_passive_decrypts_carries_noise_of_the_claimed_scale(classes: int) -> None:
    from sklearn.datasets import load_wine

    x, y = load_wine(return_X_y=True, as_frame=True)
    if classes == 2:
        y = (y == 0).astype(int)
    cols = list(x.columns)
    parts = {"cellar": x[cols[:6]], "lab": x[cols[6:]]}
    # a learning rate of 1e-12 keeps every weight at about 0, so each view is -X^T t + noise
    est = small_model(
        VerticalLogisticRegression,
        batch_size=32,
        max_iter=6,
        tol=None,
        learning_rate=1e-12,
        privacy=GaussianLabelDP(3.0),
    )
    est.fit(parts, y, label_party="cellar", keep_views=True)
    (entry,) = est.privacy_ledger_.entries
    design = est.parts_["lab"].design(parts["lab"])
    classes_ = np.unique(y)
    onehot = (y.to_numpy()[:, None] == classes_[None, :]).astype(float)
    targets = 2 * (2 * (onehot[:, 1:] if classes == 2 else onehot) - 1)
    noise = np.concatenate(
        [
            (decrypted - design[rows].T @ (-targets[rows])).ravel()
            for rows, decrypted in est.views_["lab"]
        ]
    )
    sigma = entry.noise_multiplier * 4 * np.sqrt(7) * (np.sqrt(2) if classes > 2 else 1)
    low, high = std_bounds(len(noise))
    assert len(noise) >= 7 * 5 * 6
    assert low < np.sqrt(np.mean(noise**2)) / sigma < high  # catches a factor of sqrt(2)
    # noise on the features' own grid (multiples of 2**-20), never finer
    assert np.allclose(noise * 2**20, np.round(noise * 2**20), atol=1e-3)


def test_a_passive_clips_its_rows_when_the_label_party_asks_even_if_its_own_settings_do_not() -> (
    None
):
    from vfl.federation import LocalFederation

    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.normal(size=(300, 6)) * [1, 1, 1, 5, 5, 5], columns=list("abcdef"))
    parts = {"a": frame[["a", "b", "c"]], "b": frame[["d", "e", "f"]]}
    y = pd.Series((frame.sum(axis=1) > 0).astype(int))
    label = small_model(
        VerticalLogisticRegression,
        privacy=GaussianLabelDP(2.0),
        tol=None,
        max_iter=1,
        batch_size=64,
        protocol="two_party",
    )
    passive = small_model(
        VerticalLogisticRegression, tol=None, max_iter=1, batch_size=64, protocol="two_party"
    )
    LocalFederation(timeout=60).run(
        {
            "a": lambda fed: label.fit_party(
                fed, parts["a"], y, label_party="a", data_parties=["a", "b"]
            ),
            "b": lambda fed: passive.fit_party(
                fed, parts["b"], label_party="a", data_parties=["a", "b"]
            ),
        }
    )
    part = passive.parts_["b"]
    assert part.extra["row_clip"] == pytest.approx(np.sqrt(3))
    assert np.linalg.norm(part.design(parts["b"]), axis=1).max() <= np.sqrt(3)
    with pytest.raises(ValueError, match="label DP cannot continue a fit"):
        small_model(
            VerticalLogisticRegression, privacy=GaussianLabelDP(2.0), tol=None, warm_start=True
        ).fit(parts, y, label_party="a")


def test_label_dp_bad_settings_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(200, 6)), columns=list("abcdef"))
    parts = {"a": frame[["a", "b", "c"]], "b": frame[["d", "e", "f"]]}
    y = pd.Series((frame.sum(axis=1) > 0).astype(int))
    with pytest.raises(ValueError, match="label DP needs a fixed number of epochs: set tol=None"):
        small_model(VerticalLogisticRegression, privacy=GaussianLabelDP(1.0)).fit(
            parts, y, label_party="a"
        )
    reg = small_model(VerticalLinearRegression, tol=None)
    reg.privacy = GaussianLabelDP(1.0)
    with pytest.raises(ValueError, match="VerticalLinearRegression has no label DP"):
        reg.fit(parts, frame["a"], label_party="a")
    est = small_model(
        VerticalLogisticRegression,
        privacy=GaussianLabelDP(4.0),
        tol=None,
        max_iter=2,
        batch_size=64,
    )
    est.fit(parts, y, label_party="a")
    folder = est.save(tmp_path)
    assert (folder / "privacy_ledger.json").exists()
    loaded = small_model(VerticalLogisticRegression).load(folder)
    assert loaded.privacy_ledger_.epsilon(holder="a") == pytest.approx(
        est.privacy_ledger_.epsilon(holder="a")
    )
    np.testing.assert_allclose(loaded.decision_function(parts), est.decision_function(parts))
