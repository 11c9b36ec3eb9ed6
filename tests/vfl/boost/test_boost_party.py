"""``vflink party`` with ``model = "secureboost"``: three processes (the config's coordinator
has no role in boosting) align, train and score, then score new rows with ``--predict``."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.parties import start, vflink, write_config
from vfl.datasets import make_lab_imaging_cohort

PARAMS = """[job.params]
n_estimators = 6
max_depth = 3
key_bits = 1024
insecure = true
"""


@pytest.mark.network
def test_a_secureboost_job_trains_scores_and_predicts_new_rows(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    text = config.read_text()
    text = re.sub(r"\[job\.params\].*", PARAMS, text, flags=re.S)
    config.write_text(text.replace("[job]\n", '[job]\nmodel = "secureboost"\n', 1))
    procs = {n: start(tmp_path, config, n) for n in ("coordinator", "lab", "imaging")}
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    out = tmp_path / "out"
    metrics = json.loads((out / "imaging" / "metrics.json").read_text())
    assert metrics["model"] == "secureboost" and metrics["test_auc"] > 0.7
    assert {p.name for p in (out / "lab").iterdir()} == {"aligned_lab.csv", "model_lab.npz"}
    # new patients, scored from the saved parts
    lab, imaging, _ = make_lab_imaging_cohort(150, random_state=21)
    new = tmp_path / "new"
    new.mkdir()
    lab.to_csv(new / "lab.csv")
    imaging.drop(columns=["diagnosis"]).to_csv(new / "imaging.csv")
    runs = {}
    for name in ("coordinator", "lab", "imaging"):
        extra = [] if name == "coordinator" else ["--data", str(new / f"{name}.csv")]
        extra += ["--model", str(out / name / f"model_{name}.npz")] if name != "coordinator" else []
        log = open(new / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        runs[name] = subprocess.Popen(
            vflink(
                "party",
                "--config",
                str(config),
                "--name",
                name,
                "--predict",
                "--out",
                str(new / "out" / name),
                *extra,
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    for name, proc in runs.items():
        assert proc.wait(timeout=300) == 0, (new / f"{name}.log").read_text()[-2000:]
    predictions = pd.read_csv(new / "out" / "imaging" / "predictions.csv")
    assert list(predictions.columns) == ["common_row", "patient_id", "predicted", "probability"]
    assert np.all((predictions["probability"] > 0) & (predictions["probability"] < 1))
    assert not (new / "out" / "lab" / "predictions.csv").exists()
