"""Federated transfer learning: the encrypted protocol equals its plaintext version, transfer
helps the target at small label counts, nothing raw crosses, the encoder artefact is checked,
bad input gets clear errors."""

from __future__ import annotations

import warnings
import zipfile
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn

from horizontal import pretrain_encoder
from transfer import (
    EncoderArtifact,
    EncoderTransferClassifier,
    FederatedTransferClassifier,
    overlap_pairs,
)
from transfer.ftl import held_out
from vfl.audit.transcript import find_plaintext
from vfl.datasets import make_transfer_pair

SMALL: dict[str, Any] = dict(key_bits=1024, insecure=True)  # tests only: 2048 by default


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small keys and protocol="plain" warn
        yield


def _features(pair: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    return pair.source.drop(columns="patient_id"), pair.target.drop(columns="patient_id")


def _fit(pair: Any, keep_views: bool = False, keep_payloads: bool = False, **options: Any) -> Any:
    """A FederatedTransferClassifier (``options``) fitted on ``pair``."""
    source, target = _features(pair)
    return FederatedTransferClassifier(**{"random_state": 0, **options}).fit(
        source,
        target,
        pair.source_labels,
        target_labels=pair.target_labels,
        overlap=pair.overlap,
        keep_views=keep_views,
        keep_payloads=keep_payloads,
    )


def _alone_auc(pair: Any) -> float:
    """The target alone: logistic regression on its labelled rows, AUC on the others."""
    _, target = _features(pair)
    alone = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    alone.fit(target.loc[pair.target_labels.index], pair.target_labels)
    test = pair.target_truth.index.difference(pair.target_labels.index)
    return float(
        roc_auc_score(pair.target_truth[test], alone.predict_proba(target.loc[test])[:, 1])
    )


def _target_auc(model: Any, pair: Any, target: pd.DataFrame) -> float:
    test = pair.target_truth.index.difference(pair.target_labels.index)
    return float(roc_auc_score(pair.target_truth[test], model.decision_function(target.loc[test])))


def test_the_encrypted_protocol_computes_the_plaintext_gradients() -> None:
    pair = make_transfer_pair(400, 300, n_overlap=60, target_labels=30, random_state=1)
    _source, _target = _features(pair)
    fitted = {}
    for secure in (False, True):
        model = _fit(
            pair,
            max_iter=3,
            protocol="masked" if secure else "plain",
            random_state=0,
            **SMALL,
            keep_views=True,
        )
        fitted[secure] = model
    for plain, encrypted in zip(fitted[False].views_, fitted[True].views_, strict=True):
        np.testing.assert_allclose(encrypted, plain, rtol=0, atol=1e-7)  # fixed point: 2**-50
    for name in ("source_encoder_", "target_encoder_"):
        for a, b in zip(
            getattr(fitted[False], name).parameters(),
            getattr(fitted[True], name).parameters(),
            strict=True,
        ):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    np.testing.assert_allclose(fitted[True].phi_, fitted[False].phi_, atol=1e-6)


def test_nothing_raw_crosses_and_the_source_sees_no_target_representation() -> None:
    pair = make_transfer_pair(400, 300, n_overlap=60, target_labels=30, random_state=2)
    source, target = _features(pair)
    model = _fit(pair, max_iter=2, random_state=0, **SMALL, keep_payloads=True)
    # the target's representations of the overlap rows at the first iteration
    twin = FederatedTransferClassifier(max_iter=1, random_state=0, **SMALL)
    encoder = twin.build_encoder("target", "target", target.shape[1])
    design = (target - target.mean()) / target.std(ddof=0)
    rows = target.index.get_indexer(pair.overlap["target"])
    with torch.no_grad():
        u = encoder(torch.as_tensor(design.to_numpy()[rows], dtype=torch.float32)).double()
    secrets = {
        "source": [source.to_numpy(), pair.source_labels.to_numpy()[:, None].astype(float)],
        "target": [target.to_numpy(), u.numpy().T, 0.5 * u.numpy().T],
    }
    assert find_plaintext(model.transcript_, secrets, scales=(1.0, 2.0**20, 2.0**50)) == []
    plain = _fit(pair, max_iter=2, random_state=0, protocol="plain", keep_payloads=True)
    assert find_plaintext(plain.transcript_, secrets)  # the search finds them when sent
    kinds = {(r.sender, r.tag.split("/")[1]) for r in model.transcript_.records}
    assert ("target", "tgt") in kinds and ("source", "src") in kinds
    # only the end's Phi crosses in the clear (d numbers, by design)
    clear = [r for r in model.transcript_.records if r.tag.startswith("ftl/phi")]
    assert len(clear) == 1 and clear[0].sender == "source"


def _held_out_loss(model: Any, pair: Any, target: pd.DataFrame) -> float:
    """The fitted model's transferred loss on the rows the target held out, recomputed."""
    labelled = pair.target_labels.drop(pair.overlap["target"], errors="ignore")
    signs = np.where(labelled.to_numpy() == model.classes_[1], 1.0, -1.0)
    rows = labelled.index[held_out(signs, model.spec_)]
    design = (target - target.mean()) / target.std(ddof=0)
    with torch.no_grad():
        u = model.target_encoder_(torch.as_tensor(design.loc[rows].to_numpy(), dtype=torch.float32))
    score = u.double().numpy() @ model.phi_
    y = signs[held_out(signs, model.spec_)]
    return float(np.mean(np.log(2.0) - y * score / 2 + score**2 / 8))


def test_early_stopping_stops_on_a_plateau_and_keeps_the_best_iteration() -> None:
    pair = make_transfer_pair(600, 400, n_overlap=80, target_labels=80, random_state=7)
    _source, target = _features(pair)
    model = _fit(pair, protocol="plain", max_iter=300, learning_rate=0.1, n_iter_no_change=5)
    curve = model.validation_loss_curve_
    assert model.n_iter_ < 300  # it stopped before max_iter
    assert len(curve) == model.n_iter_ + 1  # iterations 0 (the initial model) .. n_iter_
    assert model.best_epoch_ == int(np.argmin(curve))
    # it stopped because the last n_iter_no_change=5 losses fell by less than tol=1e-4
    assert all(curve[k] > min(curve[:k]) - 1e-4 for k in range(len(curve) - 5, len(curve)))
    assert min(curve) < curve[-1] and min(curve) < curve[0]  # a minimum inside the run
    # the kept model is the best iteration's, not the last: its held-out loss is the minimum
    assert _held_out_loss(model, pair, target) == pytest.approx(min(curve), abs=1e-5)
    without = _fit(pair, protocol="plain", max_iter=20, learning_rate=0.1, tol=None)
    assert without.n_iter_ == 20 and without.validation_loss_curve_ == []


def test_the_encrypted_protocol_stops_where_its_simulation_does() -> None:
    # tol=10: no iteration counts as progress, so training stops after n_iter_no_change=1
    pair = make_transfer_pair(400, 300, n_overlap=60, target_labels=60, random_state=1)
    fitted = {
        secure: _fit(
            pair,
            max_iter=4,
            protocol="masked" if secure else "plain",
            tol=10.0,
            n_iter_no_change=1,
            **SMALL,
        )
        for secure in (False, True)
    }
    for model in fitted.values():
        assert (model.n_iter_, len(model.validation_loss_curve_)) == (1, 2)
        assert model.best_epoch_ == int(np.argmin(model.validation_loss_curve_))
    assert fitted[True].best_epoch_ == fitted[False].best_epoch_
    np.testing.assert_allclose(
        fitted[True].validation_loss_curve_, fitted[False].validation_loss_curve_, atol=1e-6
    )
    np.testing.assert_allclose(fitted[True].phi_, fitted[False].phi_, atol=1e-6)
    for name in ("source_encoder_", "target_encoder_"):  # both kept the same iteration
        for a, b in zip(
            getattr(fitted[False], name).parameters(),
            getattr(fitted[True], name).parameters(),
            strict=True,
        ):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    longer = {
        secure: _fit(
            pair, max_iter=3, protocol="masked" if secure else "plain", **SMALL, keep_views=True
        )
        for secure in (False, True)
    }
    assert len(longer[True].validation_loss_curve_) == 4  # the last update evaluated too
    np.testing.assert_allclose(
        longer[True].validation_loss_curve_, longer[False].validation_loss_curve_, atol=1e-6
    )
    for plain, encrypted in zip(longer[False].views_, longer[True].views_, strict=True):
        np.testing.assert_allclose(encrypted, plain, rtol=0, atol=1e-7)


def test_a_target_that_stops_without_holding_out_rows_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from transfer.ftl import TargetRole

    honest = TargetRole._send_terms

    def stopper(self: Any, fed: Any, u: Any, it: int, *, keep: bool, stop: bool) -> None:
        honest(self, fed, u, it, keep=keep, stop=True)

    monkeypatch.setattr(TargetRole, "_send_terms", stopper)
    pair = make_transfer_pair(300, 200, n_overlap=40, target_labels=10, random_state=6)
    with pytest.raises(Exception, match="'stop' is set, but the target holds out no rows"):
        _fit(pair, max_iter=3, protocol="plain", tol=None)


@pytest.mark.slow
def test_transfer_helps_the_target_at_small_label_counts() -> None:
    for labels in (20, 50):
        pair = make_transfer_pair(target_labels=labels, random_state=0)
        source, target = _features(pair)
        base = _alone_auc(pair)
        ftl = _fit(pair, protocol="plain", random_state=0)  # the defaults: early stopping at 50
        assert _target_auc(ftl, pair, target) > base + 0.03
        artifact = pretrain_encoder(
            {"hospital": (source, pair.source_labels)},
            columns=pair.shared_columns,
            max_iter=10,
            random_state=0,
        )
        head = EncoderTransferClassifier(artifact, random_state=0).fit(
            target.loc[pair.target_labels.index], pair.target_labels
        )
        assert _target_auc(head, pair, target) > base + 0.005


def test_the_encoder_artifact_round_trips_and_refuses_tampered_or_foreign_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pair = make_transfer_pair(600, 300, n_overlap=0, target_labels=100, random_state=3)
    source, target = _features(pair)
    artifact = pretrain_encoder(
        {
            "a": (source.iloc[:300], pair.source_labels.iloc[:300]),
            "b": (source.iloc[300:], pair.source_labels.iloc[300:]),
        },
        columns=pair.shared_columns,
        max_iter=3,
        random_state=0,
    )
    path = artifact.save(tmp_path / "encoder.npz")
    again = EncoderArtifact.load(path)
    x = torch.randn(5, len(pair.shared_columns))
    with torch.no_grad():
        torch.testing.assert_close(again.module()(x), artifact.module()(x))
    assert again.columns == pair.shared_columns and again.info["sources"] == ["a", "b"]
    # tampered: one weight changed inside the file
    tampered = tmp_path / "tampered.npz"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tampered, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            if item.startswith("state."):
                array = np.load(__import__("io").BytesIO(data))
                array = array + 0.01
                buffer = __import__("io").BytesIO()
                np.save(buffer, array)
                data = buffer.getvalue()
            dst.writestr(item, data)
    with pytest.raises(ValueError, match="do not match their digest"):
        EncoderArtifact.load(tampered)
    # foreign: another kind of vflink model
    from vfl import SplitNNClassifier

    parts = {"a": target.iloc[:, :5], "b": target.iloc[:, 5:]}
    split = SplitNNClassifier(max_iter=1).fit(parts, pair.target_truth, label_party="b")
    split.save(tmp_path / "split")
    with pytest.raises(ValueError, match=r"transfer\.EncoderArtifact"):
        EncoderArtifact.load(tmp_path / "split" / "b.npz")


def test_dp_pretraining_records_its_epsilon() -> None:
    from horizontal import RecordDP

    pair = make_transfer_pair(400, 200, n_overlap=0, target_labels=50, random_state=4)
    source, _ = _features(pair)
    artifact = pretrain_encoder(
        {"hospital": (source, pair.source_labels)},
        columns=pair.shared_columns,
        max_iter=2,
        privacy=RecordDP(noise_multiplier=1.0),
    )
    assert 0 < artifact.info["epsilon"] < np.inf and artifact.info["delta"] == 1e-5


def test_pretrain_encoder_takes_the_estimators_names_and_its_old_ones_warn() -> None:
    pair = make_transfer_pair(200, 100, n_overlap=0, target_labels=20, random_state=4)
    source, _ = _features(pair)
    sources = {"hospital": (source, pair.source_labels)}
    with pytest.warns(FutureWarning) as caught:
        artifact = pretrain_encoder(sources, rounds=1, hidden=(4,))
    said = sorted(str(w.message) for w in caught)
    assert [m.split(" is ")[0] for m in said] == [
        "pretrain_encoder(hidden=...)",
        "pretrain_encoder(rounds=...)",
    ]
    assert {w.filename for w in caught} == {__file__}
    assert artifact.hidden == [4]
    with pytest.raises(TypeError, match="pass max_iter= or the deprecated rounds="):
        pretrain_encoder(sources, rounds=1, max_iter=2)


def test_overlap_pairs_finds_the_common_patients_by_psi() -> None:
    pair = make_transfer_pair(300, 200, n_overlap=40, target_labels=10, random_state=5)
    found = overlap_pairs(pair.source, pair.target, id_column="patient_id")
    assert set(map(tuple, found.to_numpy())) == set(map(tuple, pair.overlap.to_numpy()))


def test_bad_input_gets_clear_errors() -> None:
    pair = make_transfer_pair(300, 200, n_overlap=40, target_labels=10, random_state=6)
    source, target = _features(pair)
    fit = dict(y=pair.source_labels, target_labels=pair.target_labels)
    wrong = pair.overlap.copy()
    wrong.loc[0, "target"] = "T999999"
    with pytest.raises(ValueError, match="party 'target': overlap names rows it does not hold"):
        FederatedTransferClassifier(protocol="plain").fit(source, target, overlap=wrong, **fit)
    with pytest.raises(ValueError, match="columns \\['source', 'target'\\]"):
        FederatedTransferClassifier(protocol="plain").fit(
            source, target, overlap=pair.overlap.rename(columns={"source": "a"}), **fit
        )
    with pytest.raises(ValueError, match="party 'target': its encoder gives 4 numbers, dim is 8"):
        FederatedTransferClassifier(protocol="plain", target_encoder=nn.Linear(18, 4)).fit(
            source, target, overlap=pair.overlap, **fit
        )
    with pytest.raises(ValueError, match="party 'source': its encoder does not take rows of 10"):
        FederatedTransferClassifier(protocol="plain", source_encoder=nn.Linear(3, 8)).fit(
            source, target, overlap=pair.overlap, **fit
        )
    cases: list[tuple[dict[str, Any], str]] = [
        ({"validation_fraction": 0.5}, r"validation_fraction must be in \[0, 0.5\)"),
        ({"n_iter_no_change": 0}, "n_iter_no_change must be a positive integer"),
        ({"tol": -1.0}, "tol must be None"),
        ({"verbose": -1}, "verbose must be an integer >= 0"),
    ]
    for option, message in cases:
        with pytest.raises(ValueError, match=message):
            FederatedTransferClassifier(protocol="plain", **option).fit(
                source, target, overlap=pair.overlap, **fit
            )
    artifact = pretrain_encoder(
        {"hospital": (source, pair.source_labels)}, columns=["crp_mg_l", "alt_u_l"], max_iter=1
    )
    with pytest.raises(ValueError, match="lacks the encoder's columns \\['alt_u_l'\\]"):
        EncoderTransferClassifier(artifact).fit(target, pair.target_truth)


@pytest.mark.slow
def test_transfer_does_not_hurt_with_many_target_labels() -> None:
    pair = make_transfer_pair(target_labels=1000, random_state=0)
    _source, target = _features(pair)
    base = _alone_auc(pair)
    ftl = _fit(pair, protocol="plain", random_state=0)
    assert _target_auc(ftl, pair, target) > base - 0.01
    paper = _fit(pair, protocol="plain", head="phi", random_state=0)
    assert _target_auc(paper, pair, target) < base - 0.02  # what the stacked head is for


def test_the_overlap_label_attack_reads_as_much_as_the_model_and_no_more() -> None:
    from transfer.audit import overlap_label_attack

    pair = make_transfer_pair(target_labels=50, random_state=0)
    _source, target = _features(pair)
    model = _fit(pair, max_iter=30, protocol="plain", random_state=0, keep_views=True)
    found = overlap_label_attack(model, target, pair.overlap, pair.source_labels)
    assert found["gradient attack AUC"] > 0.7  # the leak is real
    assert found["gradient attack AUC"] < found["model AUC on the overlap"] + 0.05
