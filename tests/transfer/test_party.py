"""``vflink party`` with ``model = "transfer"``: a hospital and a rare-disease centre as two OS
processes over mutual TLS; the centre gets its predictions and test AUC, the hospital nothing
of the centre's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.parties import free_ports, vflink
from vfl.datasets import make_transfer_pair

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
max_iter = 30
key_bits = 1024
insecure = true
"""


@pytest.mark.network
def test_vflink_party_runs_a_transfer_job(tmp_path: Path) -> None:
    pair = make_transfer_pair(800, 500, n_overlap=120, target_labels=150, random_state=7)
    (tmp_path / "data").mkdir()
    pair.source.assign(diagnosis=pair.source_labels).to_csv(
        tmp_path / "data" / "hospital.csv", index=False
    )
    centre = pair.target.assign(diagnosis=pair.target_labels.reindex(pair.target.index))
    centre.to_csv(tmp_path / "data" / "centre.csv", index=False)
    p0, p1 = free_ports(2)
    config = tmp_path / "federation.toml"
    config.write_text(CONFIG.format(p0=p0, p1=p1))
    subprocess.run(
        vflink("certs", "--config", str(config), "--out", str(tmp_path / "certs")), check=True
    )
    procs = {}
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
        )
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
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
        "aligned_hospital.csv"
    ]
    assert np.isfinite(predictions["probability"]).all()
