"""``vflink party`` with ``model = "transfer"``: a hospital and a rare-disease centre as two OS
processes over mutual TLS; the centre gets its predictions and test AUC, the hospital nothing
of the centre's; then ``--predict``, where the centre scores new rows alone."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.parties import free_ports, in_process, kill_left, vflink
from transfer import FederatedTransferClassifier
from vfl.app.predict import run_predict
from vfl.datasets import TransferPair, make_transfer_pair
from vfl.federation.config import FederationConfig

CONFIG = """
[federation]
ca = "certs/ca.pem"
timeout = 120
connect_timeout = 60

[[party]]
name = "hospital"
role = "active"
address = "127.0.0.1:{p0}"
cert = "certs/hospital.pem"
key = "certs/hospital.key"

[[party]]
name = "centre"
role = "passive"
address = "127.0.0.1:{p1}"
cert = "certs/centre.pem"
key = "certs/centre.key"

[job]
id_column = "patient_id"
label_column = "diagnosis"
test_fraction = 0.3
model = "transfer"

[job.params]
max_iter = {max_iter}
key_bits = 1024
insecure = true
"""


def train(tmp_path: Path, pair: TransferPair, *, max_iter: int) -> Path:
    """Write the two parties' files, a config and certificates into ``tmp_path``, run both
    parties' training; returns the config."""
    (tmp_path / "data").mkdir()
    pair.source.assign(diagnosis=pair.source_labels).to_csv(
        tmp_path / "data" / "hospital.csv", index=False
    )
    centre = pair.target.assign(diagnosis=pair.target_labels.reindex(pair.target.index))
    centre.to_csv(tmp_path / "data" / "centre.csv", index=False)
    p0, p1 = free_ports(2)
    config = tmp_path / "federation.toml"
    config.write_text(CONFIG.format(p0=p0, p1=p1, max_iter=max_iter))
    in_process("certs", "--config", str(config), "--out", str(tmp_path / "certs"))
    procs = {}
    try:
        for name in ("hospital", "centre"):
            log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
            procs[name] = subprocess.Popen(
                vflink(
                    "party",
                    "--config",
                    str(config),
                    "--name",
                    name,
                    "--data",
                    str(tmp_path / "data" / f"{name}.csv"),
                    "--out",
                    str(tmp_path / "out" / name),
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        for name, proc in procs.items():
            assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    finally:
        kill_left(procs)
    return config


@pytest.mark.network
def test_vflink_party_runs_a_transfer_job(tmp_path: Path) -> None:
    pair = make_transfer_pair(800, 500, n_overlap=120, target_labels=150, random_state=7)
    train(tmp_path, pair, max_iter=30)
    metrics = json.loads((tmp_path / "out" / "centre" / "metrics.json").read_text())
    assert metrics["model"] == "transfer" and metrics["shared_patients"] == 120
    assert metrics["test_auc"] > 0.65 and metrics["test_rows"] == 45
    predictions = pd.read_csv(tmp_path / "out" / "centre" / "predictions.csv")
    assert len(predictions) == 500 and predictions["probability"].between(0, 1).all()
    held = predictions[predictions["test"]]
    assert held["diagnosis"].notna().all()
    shared = pd.read_csv(tmp_path / "out" / "hospital" / "aligned_hospital.csv")
    assert set(shared["patient_id"]) == set(pair.source.loc[pair.overlap["source"], "patient_id"])
    assert sorted(p.name for p in (tmp_path / "out" / "hospital").iterdir()) == [
        "aligned_hospital.csv",
        "model_hospital.npz",
    ]
    assert np.isfinite(predictions["probability"]).all()


@pytest.mark.network
def test_the_target_scores_new_rows_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``--predict`` at the target: its saved part, loaded in this process, gives the same
    probabilities; nothing reaches the source's address; the source has nothing to do."""
    pair = make_transfer_pair(200, 160, n_overlap=60, target_labels=80, random_state=3)
    config = train(tmp_path, pair, max_iter=3)
    part = tmp_path / "out" / "centre" / "model_centre.npz"
    new = make_transfer_pair(300, 60, n_overlap=20, random_state=11)
    rows = new.target.assign(diagnosis=new.target_labels.reindex(new.target.index))
    rows.to_csv(tmp_path / "data" / "centre_new.csv", index=False)
    host, port = FederationConfig.load(config).party("hospital").address.split(":")
    with socket.socket() as source:  # the source's address, watched: no one may connect
        # the training's connections to it may linger in TIME_WAIT: bind anyway
        source.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        source.bind((host, int(port)))
        source.listen()
        source.setblocking(False)
        scored = subprocess.run(
            vflink(
                "-v",
                "party",
                "--config",
                str(config),
                "--name",
                "centre",
                "--predict",
                "--model",
                str(part),
                "--data",
                str(tmp_path / "data" / "centre_new.csv"),
                "--out",
                str(tmp_path / "scored"),
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert scored.returncode == 0, scored.stderr[-3000:]
        with pytest.raises(BlockingIOError):
            source.accept()
    log = scored.stdout + scored.stderr
    assert "hospital" not in log and "scoring 60 rows alone" in log
    predictions = pd.read_csv(tmp_path / "scored" / "predictions.csv")
    model = FederatedTransferClassifier().load(part)
    assert model.head_ is not None  # the stacked head travelled too
    expected = model.predict_proba(rows[model.columns_["centre"]])[:, 1]
    np.testing.assert_allclose(predictions["probability"], expected, rtol=1e-12)
    assert list(predictions["patient_id"]) == list(rows["patient_id"])
    assert (predictions["predicted"] == model.predict(rows[model.columns_["centre"]])).all()
    metrics = json.loads((tmp_path / "scored" / "metrics.json").read_text())
    assert metrics["labelled_rows"] == int(rows["diagnosis"].notna().sum())
    assert metrics["test_auc"] is not None
    # the source's --predict has nothing to do (run in this process: no peer is contacted)
    with caplog.at_level(logging.INFO, logger="vflink.party"):
        summary = run_predict(
            FederationConfig.load(config),
            "hospital",
            model=tmp_path / "out" / "hospital" / "model_hospital.npz",
            out=tmp_path / "scored_source",
        )
    assert summary["outputs"] == [] and "the target scores its new rows alone" in caplog.text
    assert not (tmp_path / "scored_source").exists()
    # refused, naming the party and the fix: another party's part, a file that lacks a column
    with pytest.raises(ValueError, match="is the part of party 'hospital', not of party 'centre'"):
        run_predict(
            FederationConfig.load(config),
            "centre",
            model=tmp_path / "out" / "hospital" / "model_hospital.npz",
            data=tmp_path / "data" / "centre_new.csv",
            out=tmp_path / "refused",
        )
    dropped = model.columns_["centre"][0]
    rows.drop(columns=[dropped]).to_csv(tmp_path / "data" / "short.csv", index=False)
    with pytest.raises(ValueError, match=rf"party 'centre': .* lacks the columns \['{dropped}'\]"):
        run_predict(
            FederationConfig.load(config),
            "centre",
            model=part,
            data=tmp_path / "data" / "short.csv",
            out=tmp_path / "refused",
        )
    assert not (tmp_path / "refused").exists()
