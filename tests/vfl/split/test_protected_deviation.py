"""The protected layer against a party that deviates (issue #31).

The label party used to send its share ``[A]_L`` every batch for the data party to compute
``[h (A + B)]_L``; a label party that sent a shifted share ``A + Delta`` read the raw
embedding ``h`` in the layer's output (``z = h W + h Delta``). Now the shares step exactly
(no rounding) and the data party steps the label party's encrypted share itself, by the very
masked gradient it sends: the label party sends no share, and a shift of its own share does
not reach ``z``.

Two leaks stay, named here and in docs/deviation.md; closing them takes authenticated shares
or proofs that each encrypted value is the protocol's:

* a label party that sends a chosen gradient ``d`` moves ``W`` by ``-eta h^T d`` and reads,
  in the next batch's outputs, the inner products of that batch's embeddings with a row of
  the last (the geometry the honest layer shows approximately, exactly);
* a data party that sends a shifted ``[B]_P`` reads ``d = dLoss/dz`` in its gradient
  ``d (W + Delta)^T``, instead of ``d W^T`` only.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

import vfl.split.protocol as protocol
from vfl import SplitNNClassifier
from vfl.split import ProtectedLayer
from vfl.split.interactive import FW, LabelSide, SenderSide

SMALL = ProtectedLayer(key_bits=512, insecure=True, learning_rate=0.1)  # tests only


@pytest.fixture(scope="module")
def breast() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    x, y = x.iloc[:192], y.iloc[:192]
    return {"lab": x.iloc[:, :12], "imaging": x.iloc[:, 12:]}, y


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small keys warn
        yield


def fit(
    parts: Any,
    y: Any,
    monkeypatch: pytest.MonkeyPatch,
    label: type = LabelSide,
    sender: type = SenderSide,
) -> SplitNNClassifier:
    monkeypatch.setattr(protocol, "LabelSide", label)
    monkeypatch.setattr(protocol, "SenderSide", sender)
    model = SplitNNClassifier(
        max_iter=1,
        batch_size=64,
        tol=None,
        validation_fraction=0.0,
        random_state=0,
        embedding_dim=6,
        hidden_layer_sizes=(8,),
        protocol=SMALL,
    )
    return model.fit(parts, y, label_party="imaging", keep_views=True)


class ShiftedShare(LabelSide):
    """The attack of the old protocol: a share shifted by ``2**16`` at ``(0, 0)``, so that
    ``z[:, 0]`` would carry ``2**16 h[:, 0]``."""

    def connect(self, fed: Any, width: int, joined: int, k: int, *, training: bool) -> None:
        super().connect(fed, width, joined, k, training=training)
        shift = np.zeros(self.share.shape, dtype=object)
        shift[0, 0] = 1 << (FW + 16)
        self.share = self.share + shift


def test_a_label_party_that_shifts_its_share_does_not_reach_the_output(
    breast, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    model = fit(*breast, monkeypatch, label=ShiftedShare)
    (rows, z), (same, h) = model.label_views_["lab"][0], model.embeddings_["lab"][0]
    assert np.array_equal(rows, same)
    np.testing.assert_allclose(z, h @ model.initial_["lab"], atol=1e-5)  # z = h W, no h
    tags = {r.tag.split("/")[1] for r in model.transcript_.records if r.sender == "imaging"}
    assert "encw" not in tags  # the label party sends no share


class ChosenGradient(LabelSide):
    """Sends ``d = 2**7`` at row 0, column 0 of the first batch and 0 elsewhere."""

    def backward(self, fed: Any, delta: Any, *index: int) -> None:
        if index[-1] == 0:
            delta = np.zeros_like(delta)
            delta[0, 0] = 2.0**7
        super().backward(fed, delta, *index)


def test_a_label_party_that_sends_a_chosen_gradient_reads_inner_products(
    breast, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The named leak: ``z_1[:, 0] = h_1 W_0[:, 0] - eta 2**7 h_1 . h_0[0]``, dominated by
    the second term, the inner products of the second batch's rows with the first's row 0."""
    model = fit(*breast, monkeypatch, label=ChosenGradient)
    h0, h1 = (model.embeddings_["lab"][b][1] for b in (0, 1))
    z1 = model.label_views_["lab"][1][1]
    truth = h1 @ h0[0]
    assert np.corrcoef(-z1[:, 0], truth)[0, 1] > 0.98  # 0.998 to 0.9995 in 12 runs


class ShiftedB(SenderSide):
    """Sends ``[B + Delta]_P`` with ``Delta = 2**7`` on the diagonal ``(i, i)`` and reads
    ``d[:, i]`` as ``g[:, i] / 2**7`` of the gradient it decrypts (several columns: a unit
    whose ReLU is off for a whole batch has no gradient to read)."""

    read: ClassVar[list[np.ndarray[Any, Any]]] = []

    def _share_sent(self, share: Any) -> Any:
        shift = np.zeros(share.shape, dtype=object)
        for i in range(min(share.shape)):
            shift[i, i] = 1 << (FW + 7)
        return share + shift

    def backward(self, fed: Any, *index: int) -> Any:
        g = super().backward(fed, *index)
        type(self).read.append(np.asarray(g, dtype=float) / 2**7)
        return g


class Recorder(LabelSide):
    seen: ClassVar[list[np.ndarray[Any, Any]]] = []

    def backward(self, fed: Any, delta: Any, *index: int) -> None:
        type(self).seen.append(np.array(delta, copy=True))
        super().backward(fed, delta, *index)


def test_a_data_party_that_shifts_its_share_reads_the_layer_gradient(
    breast, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The named leak: the data party reads ``d = dLoss/dz`` on the columns it shifted, to
    within ``g / 2**7``: every column that carries a gradient in a batch (the layer's
    initial shares come from the OS, so which units are off for a batch varies by run).

    Bounds from 900 batches (300 fits): over a batch's live columns the read correlates with
    ``d`` at 0.99998 or more, and its largest error is at most 0.0066 of the batch's largest
    ``|d|``. A column's own correlation is no bound: a unit on for one row of the batch fell
    to 0.977 in a clean-clone run, the error of the other terms then weighing on one value."""
    ShiftedB.read, Recorder.seen = [], []
    fit(*breast, monkeypatch, label=Recorder, sender=ShiftedB)
    assert len(ShiftedB.read) == len(Recorder.seen) == 3
    for got, d in zip(ShiftedB.read, Recorder.seen, strict=True):
        shifted = min(got.shape[1], d.shape[1])
        live = [i for i in range(shifted) if np.ptp(d[:, i]) > 0]
        assert live  # at least one unit of the batch is on
        read, truth = got[:, live], d[:, live]
        assert np.corrcoef(read.ravel(), truth.ravel())[0, 1] > 0.999
        assert np.abs(read - truth).max() <= 0.02 * np.abs(truth).max()
