"""The protected interactive layer: training through it equals centralised SGD training of
the same network, no raw embedding reaches the label party, saved shares score as the fitted
model, and bad options get clear errors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import roc_auc_score
from torch import nn

from vfl import SplitNNClassifier
from vfl.audit.split import protected_layer_block
from vfl.audit.transcript import find_plaintext
from vfl.federation.base import PartyFailedError
from vfl.split import ProtectedLayer
from vfl.split.interactive import FW, LabelSide, SenderSide, _g_layout
from vfl.split.protocol import split_rows
from vfl.training.schedule import Schedule

SMALL = ProtectedLayer(key_bits=512, insecure=True)  # tests only: the default is 2048 bits


@pytest.fixture(scope="module")
def breast() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    return {"lab": x.iloc[:, :12], "imaging": x.iloc[:, 12:]}, y


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small keys warn
        yield


def _standardised(frame: pd.DataFrame) -> torch.Tensor:
    return torch.tensor(
        ((frame - frame.mean()) / frame.std(ddof=0)).to_numpy(), dtype=torch.float32
    )


@pytest.mark.slow
@pytest.mark.parametrize(("k", "fd"), [(6, 32), (4, 29)])
def test_training_through_the_protected_layer_is_centralised_sgd_training(breast, k, fd) -> None:  # type: ignore[no-untyped-def]
    """Also where the embedding gradient carries ``d`` at fewer fractional bits (``k = 4``:
    29 bits put a row of ``g`` in one 512-bit ciphertext where 32 took two)."""
    assert _g_layout(k, 8, SMALL.key_bits)[0] == fd
    parts, y = breast
    options: dict[str, Any] = dict(
        max_iter=2,
        batch_size=64,
        tol=None,
        validation_fraction=0.1,
        random_state=3,
        optimizer="sgd",
        learning_rate=0.05,
        hidden_layer_sizes=(8,),
        embedding_dim=k,
    )
    model = SplitNNClassifier(**options, protocol=SMALL)
    model.fit(parts, y, label_party="imaging", keep_views=True)
    # the same network in one place: the lab's block starts where the lab drew it
    twin = SplitNNClassifier(**options, protocol=SMALL)
    bottoms = {p: twin.build_bottom(p, k, f.shape[1]) for k, (p, f) in enumerate(parts.items())}
    top = twin.build_top(2 * k, 2, own=k)
    lab_block = nn.Parameter(torch.tensor(model.initial_["lab"], dtype=torch.float32))
    x = {p: _standardised(f) for p, f in parts.items()}
    target = torch.tensor(y.to_numpy())
    params = [lab_block, *top.parameters()] + [q for m in bottoms.values() for q in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.05)
    train, _ = split_rows(len(y), model.spec_)
    epochs = Schedule(len(train), 64, 3).epochs()
    for _ in range(2):
        for batch in next(epochs):
            rows = train[batch]
            remote = bottoms["lab"](x["lab"][rows]) @ lab_block
            out = top(remote, bottoms["imaging"](x["imaging"][rows]))
            loss = nn.CrossEntropyLoss()(out, target[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    np.testing.assert_allclose(
        protected_layer_block(model, "lab"), lab_block.detach().numpy(), atol=1e-5
    )
    for name in parts:
        for a, b in zip(model.modules_[name].parameters(), bottoms[name].parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for a, b in zip(model.top_.parameters(), top.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_no_raw_embedding_reaches_the_label_party(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    options: dict[str, Any] = dict(max_iter=1, tol=None, random_state=0, embedding_dim=6)
    # the lab's embeddings of the first batch, as its bottom computes them before any step
    twin = SplitNNClassifier(**options)
    bottom = twin.build_bottom("lab", 0, 12)
    plain = SplitNNClassifier(**options).fit(parts, y, label_party="imaging", keep_payloads=True)
    train, _ = split_rows(len(y), plain.spec_)
    rows = train[next(Schedule(len(train), 64, 0).epochs())[0]]
    with torch.no_grad():
        first = bottom(_standardised(parts["lab"])[rows]).numpy()
    secret = {"lab": [first.T.astype(np.float64)]}  # searched row by row
    assert find_plaintext(plain.transcript_, secret)  # plain split learning sends them
    model = SplitNNClassifier(**options, protocol=SMALL)
    model.fit(parts, y, label_party="imaging", keep_payloads=True)
    assert find_plaintext(model.transcript_, secret, scales=(1.0, 2.0**24)) == []
    sent = {r.tag.split("/")[1] for r in model.transcript_.records if r.sender == "lab"}
    assert sent == {"seed", "width", "base", "pkey", "share", "encz", "encg"}
    raw = [f.to_numpy() for f in parts.values()]
    assert find_plaintext(model.transcript_, {"lab": [raw[0]], "imaging": [raw[1]]}) == []
    # the label party learns z = h W, and W is not h's identity: its share alone is noise
    share = model.shares_["imaging"]["lab"].values
    assert max(abs(int(v)) for v in share.ravel()) > 2 ** (FW + 30)


@pytest.mark.slow
@pytest.mark.parametrize("label", ["imaging", "registry"])  # with and without its own features
def test_it_learns_and_saved_shares_score_like_the_fitted_model(breast, tmp_path, label) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    # two epochs reach AUC 0.99 (with and without the label party's features); the bound
    # of 0.97 leaves room for the shares' random rounding
    options: dict[str, Any] = dict(max_iter=2, random_state=0, protocol=SMALL)
    model = SplitNNClassifier(**options).fit(parts, y, label_party=label)
    proba = model.predict_proba(parts)
    assert roc_auc_score(y, proba[:, 1]) > 0.97
    again = SplitNNClassifier(**options).load(model.save(tmp_path / label))
    np.testing.assert_allclose(again.predict_proba(parts), proba, atol=1e-6)


def test_bad_options_get_clear_errors(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    with pytest.raises(ValueError, match='aggregation="concat"'):
        SplitNNClassifier(aggregation="sum", protocol=SMALL).fit(parts, y, label_party="imaging")
    with pytest.raises(ValueError, match="compression applies to plaintext"):
        SplitNNClassifier(compression="float16", protocol=SMALL).fit(
            parts, y, label_party="imaging"
        )
    with pytest.raises(ValueError, match=r"ProtectedLayer\(width=...\) is needed"):
        SplitNNClassifier(top=nn.Linear(4, 2), protocol=SMALL).fit(parts, y, label_party="imaging")
    with pytest.raises(ValueError, match="below 2048: pass insecure=True"):
        SplitNNClassifier(protocol=ProtectedLayer(key_bits=1024)).fit(
            parts, y, label_party="imaging"
        )
    with pytest.raises(PartyFailedError, match=r"learning_rate 1e-09 is below 2\*\*-21"):
        SplitNNClassifier(
            protocol=ProtectedLayer(key_bits=512, insecure=True, learning_rate=1e-9), max_iter=1
        ).fit(parts, y, label_party="imaging")
    huge = nn.Sequential(nn.Linear(12, 4), nn.ReLU())
    with torch.no_grad():
        huge[0].weight.fill_(1e4)
    with pytest.raises(PartyFailedError, match="party 'lab': its embedding reached"):
        SplitNNClassifier(bottoms={"lab": huge}, protocol=SMALL, max_iter=1).fit(
            parts, y, label_party="imaging"
        )


def test_a_side_without_its_share_of_the_layer_says_so() -> None:
    sender = SenderSide(SMALL, "imaging", 2, 0.1)
    with pytest.raises(RuntimeError, match="layer with 'imaging' has no share of the weights"):
        sender.backward(None)  # type: ignore[arg-type]
    label = LabelSide(SMALL, "lab", None, None, 0.1)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="layer with 'lab' has no share of the weights"):
        label.forward(None, 3, training=False)  # type: ignore[arg-type]


@pytest.mark.network
def test_each_party_its_own_grpc_endpoint_trains_and_scores_through_the_layer(
    breast, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from tests.grpc_parties import run_endpoints
    from vfl.app.families import get_job

    parts, y = breast
    names = list(parts)  # lab, imaging
    # as a vflink party job reads it: [job.params] protocol = {key_bits = 512, ...}
    options: dict[str, Any] = dict(
        max_iter=2, random_state=2, protocol={"key_bits": 512, "insecure": True}
    )
    scores: dict[str, Any] = {}

    def party(name: str, fed: Any) -> Any:
        model = (
            get_job("split")
            .make(**dict(options))
            .fit_party(
                fed,
                parts[name],
                y if name == "imaging" else None,
                label_party="imaging",
                data_parties=names,
            )
        )
        model.save(tmp_path / name)  # each party saves only its own part, its share with it
        again = (
            get_job("split")
            .make(**dict(options))
            .load(tmp_path / name / f"{name}.npz", label_party="imaging")
        )
        scores[name] = again.predict_party(fed, parts[name])
        return model

    run_endpoints(tmp_path, names, party)
    assert scores["lab"] is None  # only the label party learns the scores
    assert roc_auc_score(y, scores["imaging"][:, 1]) > 0.95
