"""``vflink party --predict``: the checks before any peer is contacted, and three party processes
scoring new rows with the parts a training run saved."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.parties import run_three, vflink
from vfl.app.cli import main
from vfl.app.plan import plan, read_data
from vfl.app.predict import check_columns, load_model, run_predict
from vfl.datasets import make_lab_imaging_cohort
from vfl.federation.config import FederationConfig
from vfl.linear import VerticalLogisticRegression
from vfl.linear.model import PartyModel

LAB = ["crp_mg_l", "wbc_10e9_l", "albumin_g_l", "ldh_u_l"]
IMAGING = ["lesion_volume_cm3", "suv_max", "margin_irregularity", "texture_entropy"]
# no certificates: a refusing party finds no endpoint to tell its peers from, and stops at once
OFFLINE = """
[federation]
ca = "ca.pem"

[[party]]
name = "coordinator"
role = "coordinator"
address = "127.0.0.1:5000"

[[party]]
name = "lab"
role = "passive"
address = "127.0.0.1:5001"

[[party]]
name = "imaging"
role = "active"
address = "127.0.0.1:5002"

[job]
id_column = "patient_id"
label_column = "diagnosis"
"""


def new_cohort(folder: Path, *, seed: int, labels: bool) -> Path:
    """A cohort of other patients than the training one, as the parties' new files."""
    lab, imaging, _ = make_lab_imaging_cohort(200, random_state=seed)
    folder.mkdir(parents=True, exist_ok=True)
    lab.to_csv(folder / "lab.csv")
    (imaging if labels else imaging.drop(columns=["diagnosis"])).to_csv(folder / "imaging.csv")
    return folder


@pytest.fixture
def offline(tmp_path: Path) -> tuple[FederationConfig, dict[str, Path], Path]:
    """A config without certificates, a part per data party (as a fit would save them) and new
    files for both."""
    (tmp_path / "ca.pem").write_text("x")
    path = tmp_path / "federation.toml"
    path.write_text(OFFLINE)
    data = new_cohort(tmp_path / "new", seed=5, labels=False)
    models = {}
    for name, columns in (("lab", LAB), ("imaging", IMAGING)):
        frame = pd.read_csv(data / f"{name}.csv")[columns]
        part = PartyModel.fresh(name, frame, standardize=True, active=name == "imaging", outputs=1)
        part.extra.update(data_parties=["imaging", "lab"], classes=[0, 1])
        models[name] = part.save(tmp_path / f"model_{name}.npz")
    return FederationConfig.load(path), models, data


def test_predict_refuses_bad_input_before_any_peer_naming_the_party_and_the_fix(
    offline: tuple[FederationConfig, dict[str, Path], Path], tmp_path: Path
) -> None:
    config, models, data = offline
    lab = data / "lab.csv"
    cases = [
        ("lab", lab, None, "party 'lab': --predict .* pass --model model_lab.npz"),
        (
            "lab",
            lab,
            models["imaging"],
            "party 'lab': --model .*model_imaging.npz is the part of party 'imaging', not of "
            "party 'lab'; pass the model_lab.npz",
        ),
        ("lab", lab, lab, "party 'lab': --model .*lab.csv: .*not a saved vflink model"),
        ("coordinator", None, models["lab"], "'coordinator' is the coordinator: .* do not pass"),
    ]
    for name, file, model, message in cases:
        with pytest.raises(ValueError, match=message):
            run_predict(config, name, data=file, model=model, out=tmp_path / "out")
    # the new file lacks two of the columns the lab's part was trained on
    pd.read_csv(lab).drop(columns=["crp_mg_l", "ldh_u_l"]).to_csv(tmp_path / "thin.csv")
    with pytest.raises(ValueError, match=r"lacks the columns \['crp_mg_l', 'ldh_u_l'\]"):
        run_predict(config, "lab", data=tmp_path / "thin.csv", model=models["lab"])
    # a part trained as the other role, or with other data parties
    part = PartyModel.load(models["lab"])
    part.role = "active"
    part.save(tmp_path / "active_lab.npz")
    with pytest.raises(ValueError, match=r"'lab' as the active party, but .* makes it passive"):
        run_predict(config, "lab", data=lab, model=tmp_path / "active_lab.npz")
    part.role, part.extra["data_parties"] = "passive", ["lab", "genomics"]
    part.save(tmp_path / "other_lab.npz")
    with pytest.raises(ValueError, match=r"data parties \['lab', 'genomics'\], but"):
        run_predict(config, "lab", data=lab, model=tmp_path / "other_lab.npz")
    assert not (tmp_path / "out").exists()  # nothing written


def test_predict_needs_no_label_column_and_takes_the_parts_columns(
    offline: tuple[FederationConfig, dict[str, Path], Path],
) -> None:
    config, models, data = offline
    training = plan(config, "imaging", None)
    with pytest.raises(ValueError, match="no column 'diagnosis'"):
        read_data(training, data / "imaging.csv")
    run = plan(config, "imaging", None)
    run.predict = True
    load_model(run, models["imaging"])
    read_data(run, data / "imaging.csv")
    check_columns(run, models["imaging"])
    # every numeric column would be a feature for training; scoring takes the part's
    assert run.features == IMAGING
    assert run.estimator.label_party_ == "imaging" and list(run.estimator.classes_) == [0, 1]


def test_cli_refuses_a_model_without_predict(
    offline: tuple[FederationConfig, dict[str, Path], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, models, data = offline
    args = ["party", "--config", str(config.path), "--name", "lab", "--data", str(data)]
    assert main([*args, "--model", str(models["lab"])]) == 2
    assert "--model is for scoring new rows: add --predict" in capsys.readouterr().err


# -- three processes over gRPC ------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A logistic regression trained by three party processes (the deployment test's job)."""
    folder = tmp_path_factory.mktemp("trained")
    run_three(folder)
    return folder


def predict(
    folder: Path, trained: Path, models: dict[str, Path] | None = None, *, last: str = ""
) -> dict[str, subprocess.Popen[str]]:
    """Start the three parties with ``--predict`` on the new files in ``folder``; party
    ``last`` only once the others listen (a relayed stop reaches only peers that are up)."""
    models = models or {n: trained / "out" / n / f"model_{n}.npz" for n in ("lab", "imaging")}
    procs = {}
    for name in sorted(("coordinator", "lab", "imaging"), key=lambda n: n == last):
        deadline = time.monotonic() + 60
        while name == last and not all(
            "listening on" in (folder / f"{n}.log").read_text() for n in procs
        ):
            assert time.monotonic() < deadline, "the other parties did not start"
            time.sleep(0.1)
        extra = [] if name == "coordinator" else ["--data", str(folder / f"{name}.csv")]
        extra += ["--model", str(models[name])] if name in models else []
        log = open(folder / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        procs[name] = subprocess.Popen(
            vflink(
                "-v",
                "party",
                "--config",
                str(trained / "federation.toml"),
                "--name",
                name,
                "--predict",
                "--out",
                str(folder / "out" / name),
                *extra,
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "VFLINK_PROGRESS": "0", "PYTHONWARNINGS": "ignore"},
        )
    return procs


def aligned_frames(folder: Path, out: Path) -> dict[str, pd.DataFrame]:
    """Each data party's new rows in the common order its ``aligned_<party>.csv`` gives."""
    frames = {}
    for name in ("lab", "imaging"):
        order = pd.read_csv(out / name / f"aligned_{name}.csv")
        assert list(order.columns) == ["common_row", "patient_id"]
        rows = pd.read_csv(folder / f"{name}.csv").set_index("patient_id")
        frames[name] = rows.loc[order["patient_id"]].reset_index()
    return frames


@pytest.mark.network
@pytest.mark.filterwarnings("ignore::vfl.crypto.SecurityWarning")  # the simulated check's keys
def test_predict_scores_new_rows_and_only_the_label_party_learns_the_scores(
    trained: Path, tmp_path: Path
) -> None:
    folder = new_cohort(tmp_path, seed=11, labels=False)
    procs = predict(folder, trained)
    for name, proc in procs.items():
        assert proc.wait(timeout=120) == 0, (folder / f"{name}.log").read_text()[-2000:]
    out = folder / "out"
    assert {p.name for p in (out / "imaging").iterdir()} == {
        "aligned_imaging.csv",
        "predictions.csv",
    }  # no labels in the new file: no metrics
    assert {p.name for p in (out / "lab").iterdir()} == {"aligned_lab.csv"}  # no scores
    assert not (out / "coordinator").exists()
    frames = aligned_frames(folder, out)
    lab = pd.read_csv(folder / "lab.csv")
    imaging = pd.read_csv(folder / "imaging.csv")
    common = set(lab["patient_id"]) & set(imaging["patient_id"])
    assert set(frames["lab"]["patient_id"]) == common and len(common) > 50
    assert frames["lab"]["patient_id"].tolist() == frames["imaging"]["patient_id"].tolist()
    predictions = pd.read_csv(out / "imaging" / "predictions.csv")
    assert list(predictions.columns) == [
        "common_row",
        "patient_id",
        "predicted",
        "score",
        "probability",
    ]
    assert predictions["patient_id"].tolist() == frames["imaging"]["patient_id"].tolist()
    # the federated scores are the saved parts' plaintext scores of the same rows ...
    models = {n: trained / "out" / n / f"model_{n}.npz" for n in ("lab", "imaging")}
    parts = {n: PartyModel.load(p) for n, p in models.items()}
    plain = parts["imaging"].intercept + sum(
        part.design(frames[n][part.columns]) @ part.coef for n, part in parts.items()
    )
    assert np.abs(plain).max() > 0.1  # a trained model, not zeros
    np.testing.assert_allclose(predictions["score"], plain, atol=1e-4)
    # ... and what the estimator loaded from them scores in simulation
    model = VerticalLogisticRegression(key_bits=1024, insecure=True)
    model.load(*models.values(), label_party="imaging")
    rows = {n: frames[n][parts[n].columns] for n in parts}
    np.testing.assert_allclose(predictions["score"], model.decision_function(rows), atol=1e-4)
    np.testing.assert_allclose(
        predictions["probability"], model.predict_proba(rows)[:, 1], atol=1e-5
    )
    assert predictions["predicted"].tolist() == model.predict(rows).tolist()
    log = (folder / "imaging.log").read_text()
    assert f"{len(common)} common rows scored" in log


@pytest.mark.network
def test_predict_on_labelled_rows_reports_the_jobs_metrics(trained: Path, tmp_path: Path) -> None:
    folder = new_cohort(tmp_path, seed=12, labels=True)
    procs = predict(folder, trained)
    for name, proc in procs.items():
        assert proc.wait(timeout=120) == 0, (folder / f"{name}.log").read_text()[-2000:]
    out = folder / "out" / "imaging"
    metrics = json.loads((out / "metrics.json").read_text())
    predictions = pd.read_csv(out / "predictions.csv")
    assert metrics["mode"] == "predict" and metrics["model"] == "logistic"
    assert metrics["labelled_rows"] == metrics["rows"] == len(predictions)
    from sklearn.metrics import roc_auc_score

    auc = roc_auc_score(predictions["diagnosis"], predictions["score"])
    assert metrics["test_auc"] == pytest.approx(auc)
    assert metrics["test_auc"] > 0.6  # the features predict the diagnosis of other patients
    assert "diagnosis" not in pd.read_csv(folder / "out" / "lab" / "aligned_lab.csv")


@pytest.mark.network
def test_another_partys_model_is_refused_and_the_peers_stop_within_seconds(
    trained: Path, tmp_path: Path
) -> None:
    folder = new_cohort(tmp_path, seed=13, labels=False)
    imaging = trained / "out" / "imaging" / "model_imaging.npz"
    began = time.monotonic()
    procs = predict(folder, trained, {"lab": imaging, "imaging": imaging}, last="lab")
    codes = {name: proc.wait(timeout=60) for name, proc in procs.items()}
    assert time.monotonic() - began < 20  # not the peers' 60 s connect timeout
    assert codes["lab"] == 2
    reason = (folder / "lab.log").read_text().strip().splitlines()[-1]
    assert "party 'lab': --model" in reason and "the part of party 'imaging', not of" in reason
    for name in ("coordinator", "imaging"):
        assert codes[name] == 3
        assert "'lab' stopped: party 'lab': --model" in (folder / f"{name}.log").read_text()
    assert not (folder / "out").exists()
