"""The geometry leak of the protected layer (issue #31): the label party's ``z = h W`` keeps
the pairwise geometry of a sender's embeddings, the ``"embedding-geometry"`` audit measures
it, ``privacy=EmbeddingNoise(...)`` (noise on ``h`` before the layer) lowers it, and the ledger
records the noise's spend.

The bounds come from 20 fits of the fixtures' configuration (seeds 0-19, the noise from the
OS): without a defence the Gram correlation was 0.947 on average (sd 0.031, lowest 0.862),
the shuffled baseline -0.007 (sd 0.016, largest in size 0.03), the distance rank correlation
0.976 (sd 0.007, lowest 0.956), the neighbour overlap 0.822 (sd 0.019, lowest 0.769), the
correlation averaged over the epochs 0.948 (sd 0.035, lowest 0.852); with noise multiplier
0.3 the Gram correlation was 0.102 (sd 0.018, highest 0.143). Each bound sits 5 sd or more
from its mean."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

from vfl import SplitNNClassifier
from vfl.audit import AuditResult, get_audit
from vfl.audit.split import (
    EmbeddingGeometryAudit,
    distance_rank_correlation,
    gram_correlation,
    neighbour_overlap,
)
from vfl.privacy.accounting import epsilon, gaussian_event
from vfl.split import EmbeddingNoise, ProtectedLayer

SMALL = ProtectedLayer(key_bits=512, insecure=True)  # tests only: the default is 2048 bits
OPTIONS: dict[str, Any] = dict(
    max_iter=2, batch_size=64, tol=None, validation_fraction=0.0, random_state=0
)
NOISE = EmbeddingNoise(noise_multiplier=0.3, clip=1.0)


@pytest.fixture(scope="module")
def breast() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    return {"lab": x.iloc[:256, :12], "imaging": x.iloc[:256, 12:]}, y.iloc[:256]


@pytest.fixture(scope="module")
def fitted(breast: Any) -> dict[str, SplitNNClassifier]:
    """The label party "imaging" with the lab as the sender: protected without and with
    embedding noise, and plain without."""
    parts, y = breast
    settings: dict[str, dict[str, Any]] = {
        "protected": {"protocol": SMALL},
        "noise": {"protocol": SMALL, "privacy": NOISE},
        "plain": {},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small keys warn
        return {
            name: SplitNNClassifier(**OPTIONS, **extra).fit(
                parts, y, label_party="imaging", keep_views=True
            )
            for name, extra in settings.items()
        }


def _audit(model: SplitNNClassifier) -> AuditResult:
    return get_audit("embedding-geometry")().run(
        model.label_views_["lab"], model.embeddings_["lab"]
    )


def test_the_audit_finds_the_geometry_the_protected_layer_keeps(fitted: Any) -> None:
    result = _audit(fitted["protected"])
    assert result.audit == "embedding-geometry" and result.chance == 0.0
    assert result.trials == 8  # 2 epochs of 4 batches
    assert result.success_rate > 0.75 and result.leaks, str(result)
    assert abs(result.details["shuffled correlation"]) < 0.1  # chance, measured
    assert result.details["distance rank correlation"] > 0.9
    assert result.details["neighbour overlap"] > 0.6 > 0.1 > result.details["neighbour chance"]
    assert result.details["averaged correlation"] > 0.75


def test_embedding_noise_before_the_layer_lowers_it(fitted: Any) -> None:
    noisy = _audit(fitted["noise"])
    assert noisy.success_rate < 0.2, str(noisy)
    assert noisy.success_rate < _audit(fitted["protected"]).success_rate - 0.6


def test_the_label_party_s_view_is_the_layer_output_of_the_sent_embedding(fitted: Any) -> None:
    # the first batch went through the lab's initial block: z = h W
    for name, exact in [("protected", True), ("noise", False)]:
        model = fitted[name]
        (rows, z), (same, h) = model.label_views_["lab"][0], model.embeddings_["lab"][0]
        assert np.array_equal(rows, same) and z.shape == (len(rows), 32)
        gap = float(np.abs(z - h @ model.initial_["lab"]).max())
        assert (gap < 1e-5) if exact else (gap > 0.1), (name, gap)  # the noise acts on z
    # in plain split learning the label party sees the embeddings themselves
    plain = fitted["plain"]
    for (rows, seen), (same, h) in zip(
        plain.label_views_["lab"], plain.embeddings_["lab"], strict=True
    ):
        assert np.array_equal(rows, same)
        np.testing.assert_array_equal(seen, h)
    assert _audit(plain).success_rate == pytest.approx(1.0)


def test_the_ledger_records_the_noise_spend(fitted: Any) -> None:
    ledger = fitted["noise"].privacy_ledger_
    (entry,) = ledger.entries
    assert (entry.holder, entry.mechanism, entry.steps) == ("lab", "gaussian", 2)
    assert (entry.noise_multiplier, entry.sensitivity) == (0.3, 2.0)
    spent = epsilon(gaussian_event(noise_multiplier=0.3, steps=2), delta=ledger.delta)
    assert ledger.epsilon(holder="lab") == pytest.approx(spent) and 0 < spent < np.inf
    assert len(fitted["protected"].privacy_ledger_) == 0


def test_the_geometry_kernels_see_through_a_rotation_and_not_through_a_shuffle() -> None:
    rng = np.random.default_rng(0)
    h = rng.normal(size=(40, 6))
    rotation = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    z = 3.0 * h @ rotation  # z z^T = 9 h h^T: the geometry, scaled
    assert gram_correlation(z, h) == pytest.approx(1.0)
    assert distance_rank_correlation(z, h) == pytest.approx(1.0)
    assert neighbour_overlap(z, h, 5) == 1.0
    shuffled = h[rng.permutation(40)]
    assert gram_correlation(z, shuffled) < 0.5 and neighbour_overlap(z, shuffled, 5) < 0.5
    assert gram_correlation(np.ones((5, 2)), h[:5]) == 0.0  # no geometry to match


def test_the_audit_takes_an_array_of_the_sender_s_embeddings_by_row() -> None:
    rng = np.random.default_rng(1)
    h = rng.normal(size=(30, 4))
    view = [(np.arange(10), h[:10] @ np.eye(4)), (np.arange(10, 30), 2 * h[10:])]
    result = EmbeddingGeometryAudit().run(view, h)
    assert result.success_rate == pytest.approx(1.0) and result.trials == 2
    assert "averaged correlation" not in result.details  # only from a view of the truth


def test_bad_input_gets_clear_errors() -> None:
    h = np.random.default_rng(2).normal(size=(8, 3))
    audit = EmbeddingGeometryAudit()
    with pytest.raises(ValueError, match="view is empty: fit with keep_views=True"):
        audit.run([], h)
    with pytest.raises(ValueError, match="the view holds 1 batches, the truth 2"):
        audit.run([(np.arange(4), h[:4])], [(np.arange(4), h[:4])] * 2)
    with pytest.raises(ValueError, match="batch 0 of the view holds other rows"):
        audit.run([(np.arange(4), h[:4])], [(np.arange(1, 5), h[1:5])])
    with pytest.raises(ValueError, match="no batch of 3 rows or more"):
        audit.run([(np.arange(2), h[:2])], h)
    with pytest.raises(ValueError, match="same 3 or more rows on both sides"):
        gram_correlation(h[:4], h[:5])
    with pytest.raises(ValueError, match="need 2 or more rows"):
        neighbour_overlap(h[:1], h[:1])
