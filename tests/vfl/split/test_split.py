"""Split learning: equal to centralised training of the composed network, nothing raw leaves
a party, the label-leakage and inversion audits with and without defences, bad input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import roc_auc_score
from torch import nn

from vfl import SplitNNClassifier, SplitNNRegressor
from vfl.audit.split import direction_scores, leakage_auc, norm_scores, split_privacy_audit
from vfl.audit.transcript import find_plaintext, numbers_in
from vfl.privacy.options import RandomizedResponse
from vfl.split import EmbeddingNoise
from vfl.split.protocol import split_rows
from vfl.training.schedule import Schedule


@pytest.fixture(scope="module")
def breast() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    return {"lab": x.iloc[:, :12], "imaging": x.iloc[:, 12:]}, y


def test_split_training_is_centralised_training_of_the_composed_network(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    options: dict[str, Any] = dict(
        max_iter=2, batch_size=64, tol=None, validation_fraction=0.1, random_state=3
    )
    model = SplitNNClassifier(**options).fit(parts, y, label_party="imaging")
    # the same network trained in one place: same initialisation, batches and optimiser
    twin = SplitNNClassifier(**options)
    bottoms, top = twin.build_modules({p: f.shape[1] for p, f in parts.items()}, 2)
    x = {
        p: torch.tensor(((f - f.mean()) / f.std(ddof=0)).to_numpy(), dtype=torch.float32)
        for p, f in parts.items()
    }
    target = torch.tensor(y.to_numpy())
    params = [q for m in [top, *bottoms.values()] for q in m.parameters()]
    optimizer = torch.optim.Adam(params, lr=0.01)
    train, _ = split_rows(len(y), model.spec_)
    epochs = Schedule(len(train), 64, 3).epochs()
    for _ in range(2):
        for batch in next(epochs):
            rows = train[batch]
            joined = torch.cat([bottoms[p](x[p][rows]) for p in parts], dim=1)
            loss = nn.CrossEntropyLoss()(top(joined), target[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    for name in parts:
        for a, b in zip(model.modules_[name].parameters(), bottoms[name].parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for a, b in zip(model.top_.parameters(), top.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_parties_taking_turns_on_one_thread_train_what_threads_train(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A simulated fit runs its parties in turn on one thread (the split estimator's choice);
    the same fit with a thread per party gives the same parameters, scores and messages."""
    parts, y = breast
    assert SplitNNClassifier()._scheduling == "cooperative"
    assert SplitNNClassifier(protocol="protected")._scheduling == "threads"
    options: dict[str, Any] = dict(max_iter=2, batch_size=64, tol=None, random_state=3)
    fits = {}
    for scheduling in ("cooperative", "threads"):
        monkeypatch.setattr(SplitNNClassifier, "_scheduling", scheduling)
        model = SplitNNClassifier(**options).fit(
            parts, y, label_party="imaging", keep_payloads=True
        )
        records = [(r.sender, r.receiver, r.tag, r.data) for r in model.transcript_.records]
        fits[scheduling] = (model, records, model.predict_proba(parts))
    (turns, turns_records, turns_scores), (threads, threads_records, threads_scores) = fits.values()
    assert turns_records == threads_records and len(turns_records) > 20
    np.testing.assert_array_equal(turns_scores, threads_scores)
    for name in [*parts, "top"]:
        a = turns.top_ if name == "top" else turns.modules_[name]
        b = threads.top_ if name == "top" else threads.modules_[name]
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_it_learns_with_or_without_features_at_the_label_party(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    model = SplitNNClassifier(max_iter=15, random_state=0).fit(parts, y, label_party="imaging")
    assert roc_auc_score(y, model.predict_proba(parts)[:, 1]) > 0.97
    assert model.best_epoch_ <= model.n_iter_
    alone = SplitNNClassifier(max_iter=15, random_state=0).fit(parts, y, label_party="registry")
    assert roc_auc_score(y, alone.predict_proba(parts)[:, 1]) > 0.97
    assert set(alone.modules_) == {"lab", "imaging"}  # the label party holds only the top
    summed = SplitNNClassifier(max_iter=5, aggregation="sum", random_state=0)
    assert summed.fit(parts, y, label_party="imaging").predict(parts).shape == (len(y),)
    t = parts["lab"].iloc[:, 0] * 3 + parts["imaging"].iloc[:, 0]
    reg = SplitNNRegressor(max_iter=20, random_state=0).fit(parts, t, label_party="imaging")
    assert np.corrcoef(reg.predict(parts), t)[0, 1] > 0.9


def test_no_raw_feature_or_label_leaves_its_party(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    model = SplitNNClassifier(max_iter=2, random_state=0)
    model.fit(parts, y, label_party="imaging", keep_payloads=True)
    tags = {(r.sender, r.tag.split("/")[1]) for r in model.transcript_.records}
    assert tags == {
        ("lab", "seed"),  # the seed agreement: each party's random_state, compared
        ("imaging", "seed"),
        ("lab", "width"),
        ("lab", "emb"),
        ("lab", "val"),
        ("imaging", "grad"),
        ("imaging", "control"),
    }
    secrets = {
        "lab": [
            parts["lab"].to_numpy(),
            ((parts["lab"] - parts["lab"].mean()) / parts["lab"].std(ddof=0)).to_numpy(),
        ],
        "imaging": [parts["imaging"].to_numpy()],
    }
    assert find_plaintext(model.transcript_, secrets) == []
    # the labels, as runs of 24 that hold both classes (a run of zeros also matches a dead
    # unit's zero gradients, which says nothing of the labels)
    labels = y.to_numpy().astype(float)
    runs = {
        tuple(labels[k : k + 24])
        for k in range(len(labels) - 23)
        if 0 < labels[k : k + 24].sum() < 24
    }
    for record in model.transcript_.records:
        for values in numbers_in(record.payload()):
            found = {tuple(values[k : k + 24]) for k in range(len(values) - 23)}
            assert not found & runs, record.tag


def test_the_label_leakage_attack_succeeds_without_defence_and_drops_with_it(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    labels = y.to_numpy()

    def attack(**defence: Any) -> float:
        model = SplitNNClassifier(
            max_iter=2, tol=None, validation_fraction=0.0, random_state=0, **defence
        )
        model.fit(parts, y, label_party="imaging", keep_views=True)
        rows, scores = direction_scores(
            model.views_["lab"], len(y), known=int(np.flatnonzero(labels == 1)[0])
        )
        return leakage_auc(rows, scores, labels)

    undefended = attack()
    protected = attack(
        privacy=RandomizedResponse(0.5)
    )  # randomised response: the gradients follow noisy labels
    assert undefended > 0.95  # measured: 1.0
    assert protected < undefended - 0.2  # measured: about 0.6
    one = SplitNNClassifier(max_iter=1, tol=None, random_state=0)
    one.fit(parts, y, label_party="imaging", keep_views=True)
    rows, norms = norm_scores(one.views_["lab"], len(y))
    assert norms.shape == rows.shape and (norms >= 0).all()
    assert len(rows) == len(set(rows.tolist()))  # one epoch, each row once


def test_embedding_noise_follows_the_dp_module_and_defeats_inversion(breast) -> None:  # type: ignore[no-untyped-def]
    from vfl.privacy.accounting import epsilon, gaussian_event

    parts, y = breast
    noise = EmbeddingNoise(noise_multiplier=1.5, clip=0.5)
    h = torch.full((4000, 8), 10.0)
    released = noise.apply(h)
    clipped = h * (0.5 / torch.linalg.vector_norm(h, dim=1, keepdim=True))
    assert float((released - clipped).std()) == pytest.approx(1.5 * 2 * 0.5, rel=0.05)
    model = SplitNNClassifier(max_iter=3, tol=None, random_state=0, privacy=noise)
    model.fit(parts, y, label_party="imaging")
    expected = epsilon(gaussian_event(noise_multiplier=1.5, steps=3), delta=1e-5)
    assert model.privacy_ledger_.epsilon(holder="lab") == pytest.approx(expected, rel=1e-9)
    table = split_privacy_audit(
        parts,
        y,
        label_party="imaging",
        defences={"none": {}, "noise": {"privacy": noise}},
        max_iter=5,
    )
    assert table.loc["none", "inversion error"] < 0.5  # embeddings give the features away
    assert table.loc["noise", "inversion error"] > 0.9  # no better than the mean
    assert table.loc["noise", "epsilon"] > 0 and np.isnan(table.loc["none", "epsilon"])


def test_float16_halves_the_bytes(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    sizes = {}
    for kind in (None, "float16", 8):
        model = SplitNNClassifier(max_iter=2, tol=None, random_state=0, compression=kind)
        model.fit(parts, y, label_party="imaging")
        sizes[kind] = sum(
            r.nbytes for r in model.transcript_.records if r.tag.startswith("split/emb")
        )
    assert sizes["float16"] < 0.6 * sizes[None] and sizes[8] < 0.35 * sizes[None]


def test_bad_input_gets_clear_errors(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    shifted = {"lab": parts["lab"].set_axis(parts["lab"].index + 1), "imaging": parts["imaging"]}
    with pytest.raises(ValueError, match="index"):
        SplitNNClassifier().fit(shifted, y, label_party="imaging")
    holed = parts["lab"].copy()
    holed.iloc[5, 2] = np.nan
    with pytest.raises(ValueError, match=f"party 'lab': column '{holed.columns[2]}' has NaN"):
        SplitNNClassifier().fit({**parts, "lab": holed}, y, label_party="imaging")
    with pytest.raises(
        ValueError, match="party 'lab': its bottom module does not take rows of 12 values"
    ):
        SplitNNClassifier(bottoms={"lab": nn.Linear(5, 4)}).fit(parts, y, label_party="imaging")
    model = SplitNNClassifier(max_iter=1, random_state=0).fit(parts, y, label_party="imaging")
    with pytest.raises(ValueError, match="party 'lab': the columns differ"):
        model.predict_proba({**parts, "lab": parts["lab"].iloc[:, :5]})
    with pytest.raises(ValueError, match="random_state must be None or an integer"):
        SplitNNClassifier(random_state=1.5).fit(parts, y, label_party="imaging")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="compression must be"):
        SplitNNClassifier(compression=1).fit(parts, y, label_party="imaging")


def test_frames_with_integer_column_names_and_a_refit_leave_nothing_stale() -> None:
    from vfl import VerticalLogisticRegression

    rng = np.random.default_rng(0)
    a, b = pd.DataFrame(rng.normal(size=(200, 3))), pd.DataFrame(rng.normal(size=(200, 2)))
    y = pd.Series((a[0] + b[1] > 0).astype(int))
    parts = {"a": a, "b": b}  # pd.DataFrame(array) names its columns 0, 1, ...
    split = SplitNNClassifier(max_iter=3, random_state=0)
    split.fit(parts, y, label_party="b", keep_views=True)
    assert split.predict(parts).shape == (200,) and hasattr(split, "views_")
    split.fit(parts, y, label_party="b")
    assert not hasattr(split, "views_")  # not the earlier fit's
    linear = VerticalLogisticRegression(max_iter=2, tol=None, key_bits=1024, insecure=True)
    from vfl.crypto import SecurityWarning

    with pytest.warns(SecurityWarning):  # 1024-bit keys warn
        linear.fit(parts, y, label_party="b")
    assert list(linear.feature_names_in_) == ["a:0", "a:1", "a:2", "b:0", "b:1"]


def test_validation_runs_with_dropout_off() -> None:
    seen: list[bool] = []

    class Spy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 2))

        def forward(self, z: torch.Tensor) -> torch.Tensor:
            seen.append(self.training)
            out: torch.Tensor = self.layer(z)
            return out

    rng = np.random.default_rng(1)
    parts = {
        "a": pd.DataFrame(rng.normal(size=(100, 3))),
        "b": pd.DataFrame(rng.normal(size=(100, 2))),
    }
    y = pd.Series(rng.integers(0, 2, 100))
    model = SplitNNClassifier(
        top=Spy(), embedding_dim=4, max_iter=2, tol=None, batch_size=50, random_state=0
    )
    model.fit(parts, y, label_party="b")
    # per epoch: two training batches in training mode, then the validation pass in eval mode
    assert seen[-6:] == [True, True, False, True, True, False]


def test_split_parties_with_and_without_random_state_fail_naming_the_party() -> None:
    from vfl.federation import LocalFederation, PartyFailedError

    rng = np.random.default_rng(2)
    parts = {
        "a": pd.DataFrame(rng.normal(size=(40, 2))),
        "b": pd.DataFrame(rng.normal(size=(40, 2))),
    }
    y = pd.Series(rng.integers(0, 2, 40))
    seeds = {"a": 3, "b": None}

    def party(name: str) -> Any:
        def run(fed: Any) -> Any:
            model = SplitNNClassifier(max_iter=1, random_state=seeds[name])
            label = y if name == "b" else None
            return model.fit_party(
                fed, parts[name], label, label_party="b", data_parties=["a", "b"]
            )

        return run

    with pytest.raises(PartyFailedError, match="trains with another random_state"):
        LocalFederation(timeout=20).run({n: party(n) for n in parts})


def test_a_fit_without_random_state_keeps_the_agreed_seed_in_its_spec() -> None:
    rng = np.random.default_rng(3)
    parts = {
        "a": pd.DataFrame(rng.normal(size=(40, 2))),
        "b": pd.DataFrame(rng.normal(size=(40, 2))),
    }
    y = pd.Series(rng.integers(0, 2, 40))
    seeds = {
        SplitNNClassifier(max_iter=1).fit(parts, y, label_party="b").spec_.random_state
        for _ in range(2)
    }
    assert None not in seeds and len(seeds) == 2  # agreed afresh each fit, not a placeholder
    given = SplitNNClassifier(max_iter=1, random_state=5).fit(parts, y, label_party="b")
    assert given.spec_.random_state == 5


@pytest.mark.network
def test_each_party_its_own_grpc_endpoint_gives_the_simulated_model(breast, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.grpc_parties import run_endpoints

    parts, y = breast
    names = list(parts)  # lab, imaging
    options: dict[str, Any] = dict(max_iter=3, random_state=2)
    scores: dict[str, Any] = {}

    def party(name: str, fed: Any) -> Any:
        model = SplitNNClassifier(**options).fit_party(
            fed,
            parts[name],
            y if name == "imaging" else None,
            label_party="imaging",
            data_parties=names,
        )
        model.save(tmp_path / name)  # each party saves only its own part
        again = SplitNNClassifier(**options).load(
            tmp_path / name / f"{name}.npz", label_party="imaging"
        )
        scores[name] = again.predict_party(fed, parts[name])
        return model

    models = run_endpoints(tmp_path, names, party)
    simulated = SplitNNClassifier(**options).fit(parts, y, label_party="imaging")
    for name in names:
        for a, b in zip(
            models[name].modules_[name].parameters(),
            simulated.modules_[name].parameters(),
            strict=True,
        ):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert sorted(p.name for p in (tmp_path / "lab").iterdir()) == ["lab.npz", "model.json"]
    assert scores["lab"] is None  # only the label party learns the scores
    np.testing.assert_allclose(scores["imaging"], simulated.predict_proba(parts), atol=1e-5)


@pytest.mark.network
def test_vflink_party_runs_a_split_network_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import subprocess

    from tests.parties import start, vflink, write_config

    config = write_config(tmp_path, max_iter=5)
    text = config.read_text().replace("key_bits = 1024\ninsecure = true\n", "")
    config.write_text(text.replace("[job]\n", '[job]\nmodel = "split"\n', 1))
    procs = {n: start(tmp_path, config, n) for n in ("coordinator", "lab", "imaging")}
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    metrics = json.loads((tmp_path / "out" / "imaging" / "metrics.json").read_text())
    assert metrics["model"] == "split" and metrics["test_auc"] > 0.6
    assert (tmp_path / "out" / "lab" / "model_lab.npz").exists()
    assert not (tmp_path / "out" / "coordinator").exists() or not any(
        (tmp_path / "out" / "coordinator").iterdir()
    )
    # scoring with the saved parts (vflink party --predict): only the label party gets scores
    trained = tmp_path / "trained"
    (tmp_path / "out").rename(trained)
    procs = {
        n: start(tmp_path, config, n, "--predict", "--model", str(trained / n / f"model_{n}.npz"))
        for n in ("lab", "imaging")
    }
    coordinator = ["-v", "party", "--config", str(config), "--name", "coordinator", "--predict"]
    with open(tmp_path / "coordinator.log", "w") as log:
        procs["coordinator"] = subprocess.Popen(
            vflink(*coordinator, "--out", str(tmp_path / "out" / "coordinator")),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    scored = pd.read_csv(tmp_path / "out" / "imaging" / "predictions.csv")
    assert scored["probability"].between(0, 1).all() and len(scored) > 300
    again = json.loads((tmp_path / "out" / "imaging" / "metrics.json").read_text())
    assert again["test_auc"] > 0.6  # the new file holds the labels: scored on every row
    assert "probability" not in pd.read_csv(tmp_path / "out" / "lab" / "aligned_lab.csv")
