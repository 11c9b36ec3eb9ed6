"""``vflink party`` and ``vflink certs``: the config's checks, and real party processes --
the whole lab + imaging pipeline, and a party killed mid-training."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.parties import (
    ROOT,
    free_ports,
    in_process,
    kill_left,
    run_three,
    start,
    vflink,
    write_config,
)
from tests.processes import HAS_PROC, command_line, descendants, running
from vfl.app.party import run_party
from vfl.federation.config import FederationConfig


def test_config_errors_name_the_file_the_party_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    base = '[federation]\nca = "ca.pem"\n'
    lab = '[[party]]\nname = "lab"\nrole = "passive"\naddress = "127.0.0.1:5001"\n'
    img = '[[party]]\nname = "imaging"\nrole = "active"\naddress = "127.0.0.1:5002"\n'
    cases = {
        base + lab + lab.replace("5001", "5003") + img: "party 'lab' is listed twice",
        base + lab + img.replace("127.0.0.1:5002", "nowhere"): "use host:port",
        base + lab + img.replace("5002", "99999"): "port from 1 to 65535",
        base + lab + img.replace("active", "boss"): "has role 'boss'",
        base + lab + img.replace("active", "passive"): "exactly one party must have role 'active'",
        '[federation]\nca = "missing.pem"\n' + lab + img: "no such file",
        base + lab: "at least two",
        base + lab + img + "oops = [": "not valid TOML",
        base.replace('"\n', '"\nheartbeat = 30\n') + lab + img: "shorter than peer_timeout",
        base.replace('"\n', '"\ntimout = 3\n') + lab + img: "unknown keys \\['timout'\\]",
    }
    for text, message in cases.items():
        path = tmp_path / "f.toml"
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            FederationConfig.load(path)
    path.write_text(base + lab + img)
    config = FederationConfig.load(path)
    with pytest.raises(ValueError, match="no party 'genomics'"):
        config.party("genomics")
    with pytest.raises(ValueError, match="party 'lab' needs its certificate and key"):
        config.federation("lab")
    result = subprocess.run(
        vflink("party", "--config", str(path), "--name", "lab"),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert '[job] needs id_column = "<column name>"' in result.stderr
    path.write_text(base + lab + img + '[job]\nid_column = "id"\nlabel_column = "y"\n')
    result = subprocess.run(
        vflink("party", "--config", str(path), "--name", "lab", "--data", "nope.csv"),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "vflink party: error:" in result.stderr and "nope.csv" in result.stderr
    job = '[job]\nid_column = "id"\nlabel_column = "y"\n'
    for extra, message in [
        (
            'model = "svm"\n',
            "model must be one of \\['linear', 'logistic', 'poisson', 'secureboost', "
            "'secureboost_regression', 'split', 'transfer'\\], got 'svm'",
        ),
        ("[job.model]\nmax_iter = 3\n", "\\[job.model\\] is now \\[job.params\\]"),
        ('model = "linear"\n[job.params]\nmax_iterations = 3\n', "unexpected keyword"),
        ("max_ambiguous = 2\n", "max_ambiguous must be a fraction in \\[0, 1\\], got 2"),
    ]:
        path.write_text(base + lab + img + job + extra)
        with pytest.raises(ValueError, match=message):
            run_party(FederationConfig.load(path), "lab")


def test_command_line_errors_are_named_before_anything_loads(tmp_path: Path) -> None:
    """``--predict``/``--model`` against the party's role: checked from the config alone (no
    pandas, no model file read), which ``vflink party`` does first."""
    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "model_lab.npz").write_bytes(b"checked later, when loaded")
    path = tmp_path / "f.toml"
    path.write_text(
        '[federation]\nca = "ca.pem"\n'
        '[[party]]\nname = "coordinator"\nrole = "coordinator"\naddress = "127.0.0.1:5000"\n'
        '[[party]]\nname = "lab"\nrole = "passive"\naddress = "127.0.0.1:5001"\n'
        '[[party]]\nname = "imaging"\nrole = "active"\naddress = "127.0.0.1:5002"\n'
    )
    config = FederationConfig.load(path)
    model = tmp_path / "model_lab.npz"
    config.check_arguments("lab")  # training: nothing to check here
    config.check_arguments("lab", model=model, predict=True)
    config.check_arguments("coordinator", predict=True)
    cases = [
        ("lab", None, True, "party 'lab': --predict .* pass --model model_lab.npz"),
        ("lab", tmp_path / "nope.npz", True, "--model .*nope.npz: no such file; pass the model"),
        ("coordinator", model, True, "'coordinator' is the coordinator: .* do not pass --model"),
        ("lab", model, False, "--model is for scoring new rows: add --predict"),
    ]
    for name, given, predict, message in cases:
        with pytest.raises(ValueError, match=message):
            config.check_arguments(name, model=given, predict=predict)


@pytest.mark.network
def test_three_party_processes_align_train_and_score(tmp_path: Path) -> None:
    out = run_three(tmp_path)
    log = (tmp_path / "imaging.log").read_text()
    assert "test AUC" in log and re.search(r"epoch 1\b.* loss", log)
    auc = float(log.split("test AUC ")[1].split(";")[0])
    # the features predict the diagnosis (in-process AUC 0.76-0.78); with about 125 test
    # rows the AUC's standard error is about 0.04: 0.6 is four of them below, 0.5 is chance
    assert auc > 0.6
    # a second run of the same job: the same common order and the same stratified test rows
    (tmp_path / "again").mkdir()
    again = run_three(tmp_path / "again")
    for name in ("lab", "imaging"):
        first = (out / name / f"aligned_{name}.csv").read_text()
        assert (again / name / f"aligned_{name}.csv").read_text() == first
    held_out = pd.read_csv(out / "imaging" / "predictions.csv")
    repeat = pd.read_csv(again / "imaging" / "predictions.csv")
    assert held_out["patient_id"].tolist() == repeat["patient_id"].tolist()
    # stratified by the label party: the held-out rows' class share is the cohort's
    cohort = pd.read_csv(tmp_path / "data" / "imaging.csv").set_index("patient_id")
    common = pd.read_csv(out / "imaging" / "aligned_imaging.csv")["patient_id"]
    share = cohort.loc[common, "diagnosis"].mean()
    assert abs(held_out["diagnosis"].mean() - share) <= 1 / len(held_out)
    out = tmp_path / "out"
    assert {p.name for p in (out / "imaging").iterdir()} == {
        "aligned_imaging.csv",
        "model_imaging.npz",
        "predictions.csv",
        "metrics.json",
    }
    assert {p.name for p in (out / "lab").iterdir()} == {"aligned_lab.csv", "model_lab.npz"}
    lab_ids = (out / "lab" / "aligned_lab.csv").read_text().splitlines()
    img_ids = (out / "imaging" / "aligned_imaging.csv").read_text().splitlines()
    assert lab_ids == img_ids  # same patients, same common order (patient_id is exact here)


@pytest.mark.network
def test_a_linear_regression_job_runs_from_the_registry(tmp_path: Path) -> None:
    import json

    config = write_config(tmp_path, linear=True, max_iter=40, tol="1e-5")
    procs = {n: start(tmp_path, config, n) for n in ("coordinator", "lab", "imaging")}
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    log = (tmp_path / "imaging.log").read_text()
    assert "test R^2" in log and "test AUC" not in log
    out = tmp_path / "out"
    metrics = json.loads((out / "imaging" / "metrics.json").read_text())
    assert metrics["model"] == "linear" and metrics["test_rmse"] > 0
    # what the divergence rule did is reported (nothing, here) beside the epoch it kept
    assert metrics["restarts"] == [] and 1 <= metrics["best_epoch"] <= metrics["epochs"]
    # the imaging columns listed predict the necrosis fraction (correlated with suv_max): R^2
    # 0.13-0.38 in-process over 15 splits (the test rows differ per run); 0 is the mean's
    assert metrics["test_r2"] > 0.0
    predictions = (out / "imaging" / "predictions.csv").read_text().splitlines()
    assert predictions[0].split(",") == [
        "common_row",
        "patient_id",
        "predicted",
        "necrosis_fraction",
    ]
    assert {p.name for p in (out / "lab").iterdir()} == {"aligned_lab.csv", "model_lab.npz"}


@pytest.mark.network
def test_label_dp_from_the_config_writes_the_ledger_beside_the_model(tmp_path: Path) -> None:
    import json

    config = write_config(
        tmp_path, max_iter=3, tol='"none"', params='label_epsilon = 4.0\nprotocol = "coordinator"'
    )
    procs = {n: start(tmp_path, config, n) for n in ("coordinator", "lab", "imaging")}
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    out = tmp_path / "out" / "imaging"
    ledger = json.loads((out / "privacy_ledger.json").read_text())
    assert "imaging" in json.dumps(ledger)
    metrics = json.loads((out / "metrics.json").read_text())
    assert 3.5 < metrics["label_epsilon"] <= 4.0 + 1e-6
    assert not (tmp_path / "out" / "lab" / "privacy_ledger.json").exists()  # the label party's


@pytest.mark.network
def test_a_party_killed_mid_training_stops_the_others_naming_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_iter=400, tol="-1.0", peer=4)
    procs = {n: start(tmp_path, config, n) for n in ("coordinator", "lab", "imaging")}
    deadline = time.monotonic() + 120
    while not re.search(r"epoch 2\b", (tmp_path / "imaging.log").read_text()):
        assert time.monotonic() < deadline, "training did not start"
        assert procs["imaging"].poll() is None, (tmp_path / "imaging.log").read_text()
        time.sleep(0.2)
    procs["lab"].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    for name in ("imaging", "coordinator"):
        code = procs[name].wait(timeout=60)
        assert code != 0
    assert time.monotonic() - killed < 4 + 15  # the peer timeout, plus shutdown
    log = (tmp_path / "imaging.log").read_text()
    assert "federation error" in log and "'lab'" in log.split("federation error")[1]
    out = tmp_path / "out"
    for name in ("imaging", "coordinator"):  # no output, not even half of one
        assert not (out / name).exists() or not any((out / name).iterdir())
    for proc in procs.values():
        assert proc.poll() is not None  # no process left behind


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC, reason="walks Linux's /proc")
def test_no_process_outlives_a_party_killed_with_sigkill(tmp_path: Path) -> None:
    """``kill -9`` of a party's main process mid-training: its worker processes, the
    forkserver and the resource tracker (``workers = 2``) end within 5 s, and the peers end
    naming it."""
    config = write_config(tmp_path, max_iter=400, tol="-1.0", peer=4, params="workers = 2")
    procs = {n: start(tmp_path, config, n) for n in ("coordinator", "lab", "imaging")}
    lab = procs["lab"]
    deadline = time.monotonic() + 120
    below: dict[int, str] = {}
    try:
        while not re.search(r"epoch 2\b", (tmp_path / "imaging.log").read_text()) or (
            len(below) < 3
        ):
            assert time.monotonic() < deadline, (tmp_path / "lab.log").read_text()[-2000:]
            assert lab.poll() is None, (tmp_path / "lab.log").read_text()[-2000:]
            time.sleep(0.2)
            below = descendants(lab.pid)  # resource tracker, forkserver, its workers
        lab.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        lab.wait(timeout=10)
        while any(running(p, s) for p, s in below.items()) and time.monotonic() < killed + 5:
            time.sleep(0.1)
        left = {p: command_line(p) for p, s in below.items() if running(p, s)}
        assert not left, f"alive 5 s after the party's death: {left}"
        for name in ("imaging", "coordinator"):
            assert procs[name].wait(timeout=30) != 0
        assert "'lab'" in (tmp_path / "imaging.log").read_text().split("federation error")[1]
    finally:
        kill_left(procs)
        for pid, started in below.items():  # what the party left behind, if the test failed
            if running(pid, started):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.network
def test_a_party_refusing_its_own_input_stops_the_others_within_seconds(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    lab = pd.read_csv(tmp_path / "data" / "lab.csv")
    lab.drop(columns=["patient_id"]).to_csv(tmp_path / "data" / "lab.csv", index=False)
    began = time.monotonic()
    procs = {n: start(tmp_path, config, n) for n in ("coordinator", "imaging", "lab")}
    codes = {name: proc.wait(timeout=60) for name, proc in procs.items()}
    assert time.monotonic() - began < 20  # not the peers' 60 s connect timeout
    assert codes["lab"] == 2  # bad input
    reason = (tmp_path / "lab.log").read_text().strip().splitlines()[-1]
    assert "lab" in reason
    for name in ("coordinator", "imaging"):
        assert codes[name] == 3  # a peer failed
        log = (tmp_path / f"{name}.log").read_text()
        # the root cause reaches every party, relayed by whoever waited on whom
        assert "'lab' stopped: party 'lab': its data file has no column 'patient_id'" in log


@pytest.mark.network
def test_a_certificate_from_another_ca_is_named_by_every_party_within_seconds(
    tmp_path: Path,
) -> None:
    """The lab holds a certificate from another CA: it says so itself at once, its peers name
    it as soon as they see it (they do not retry it for the minute of their connect timeout),
    every process ends, and gRPC's own log of the refused handshakes stays out of the logs.
    The lab starts once its peers listen, so that the times measure the refusal, not how long
    a loaded machine takes to start a process."""
    config = write_config(tmp_path)
    subprocess.run(
        vflink("certs", "--parties", "lab", "--out", str(tmp_path / "rogue")),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for suffix in ("pem", "key"):
        shutil.copy(tmp_path / "rogue" / f"lab.{suffix}", tmp_path / "certs" / f"lab.{suffix}")
    ca = tmp_path / "certs" / "ca.pem"
    expected = {
        "lab": f"party 'lab': its certificate {tmp_path / 'certs' / 'lab.pem'} is not signed by "
        f"{ca}, the federation's CA",
        "imaging": f"party 'lab' presents a certificate that is not signed by {ca}",
        "coordinator": f"party 'lab' presents a certificate that is not signed by {ca}",
    }
    procs = {n: start(tmp_path, config, n) for n in ("coordinator", "imaging")}
    named: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 120
        while not all("listening on" in (tmp_path / f"{n}.log").read_text() for n in procs):
            assert time.monotonic() < deadline, "the other parties did not start"
            time.sleep(0.1)
        began = time.monotonic()
        procs["lab"] = start(tmp_path, config, "lab")
        while len(named) < len(procs) and time.monotonic() < began + 30:
            for name in procs:
                if name not in named and expected[name] in (tmp_path / f"{name}.log").read_text():
                    named[name] = time.monotonic() - began
            time.sleep(0.1)
        codes = {name: proc.wait(timeout=30) for name, proc in procs.items()}
        ended = time.monotonic() - began
    finally:
        kill_left(procs)
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in procs}
    assert set(named) == set(procs), {n: logs[n][-1500:] for n in set(procs) - set(named)}
    assert max(named.values()) < 10, named  # not the 60 s connect timeout of retries
    assert ended < 30, ended
    assert codes == {"coordinator": 3, "imaging": 3, "lab": 2}, codes
    for name, log in logs.items():  # the reason is each process's last word, and no noise
        assert expected[name] in log.strip().splitlines()[-1]
        assert "Handshake failed" not in log and "BAD_SIGNATURE" not in log, log[-1500:]


@pytest.mark.network
def test_predict_without_model_is_refused_at_once_and_the_peers_are_told(tmp_path: Path) -> None:
    """``--predict`` without ``--model`` at a data party: the error names the flag within 2 s,
    before any peer is contacted; with its peers listening it is told to them and the party
    exits within 2 s; alone, it still reports at once and gives up telling within seconds."""
    from vfl.federation import PeerGoneError

    config = write_config(tmp_path)
    command = vflink(
        "party", "--config", str(config), "--name", "lab", "--predict", "--data",
        str(tmp_path / "data" / "lab.csv"),
    )  # fmt: skip
    env = {**os.environ, "VFLINK_PROGRESS": "0"}
    federation = FederationConfig.load(config)
    with (
        federation.federation("coordinator") as coordinator,
        federation.federation("imaging") as imaging,
    ):
        began = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
        took = time.monotonic() - began
        for peer in (coordinator, imaging):
            with pytest.raises(PeerGoneError, match=r"'lab' stopped: .* pass --model"):
                peer.recv("lab", "job/rows", timeout=5)
    assert result.returncode == 2, result.stderr
    assert "vflink party: error: party 'lab': --predict scores" in result.stderr
    assert "pass --model model_lab.npz" in result.stderr
    assert took < 2, took
    # alone: the error first, within 2 s; then a wait for peers that never come, bounded by
    # the connect timeout (3 s here; 60 s is capped at NOTICE_SECONDS)
    config.write_text(config.read_text().replace("connect_timeout = 60", "connect_timeout = 3"))
    began = time.monotonic()
    alone = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert alone.stderr is not None
        first = alone.stderr.readline()
        reported = time.monotonic() - began
        rest = alone.stderr.read()
        assert alone.wait(timeout=60) == 2
        ended = time.monotonic() - began
    finally:
        kill_left({"lab": alone})
    assert "party 'lab' refuses to start: party 'lab': --predict" in first, first + rest
    assert reported < 2, reported
    assert 3 <= ended < 15, ended


@pytest.mark.network
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_run_local_script_runs_the_pipeline_and_leaves_no_process(tmp_path: Path) -> None:
    vflink_bin = Path(sys.executable).with_name("vflink")
    env = {**os.environ, "TMPDIR": str(tmp_path), "VFLINK": str(vflink_bin)}
    result = subprocess.run(
        ["bash", str(ROOT / "examples" / "deploy" / "run_local.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test AUC" in result.stdout
    leftover = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
    ).stdout.split()
    assert leftover == []


@pytest.mark.network
def test_bloom_alignment_by_the_coordinator_without_the_secret(tmp_path: Path) -> None:
    config = write_config(tmp_path, bloom=True)
    secret = tmp_path / "linkage.secret"
    secret.write_text("a secret only the lab and the imaging centre share")
    # a dirty registry: 15 lab dates of birth with an impossible day never stop the linkage
    import pandas as pd

    lab_file = tmp_path / "data" / "lab.csv"
    lab_data = pd.read_csv(lab_file, dtype={"date_of_birth": str})
    dated = lab_data.index[lab_data["date_of_birth"].notna()][:15]
    lab_data.loc[dated, "date_of_birth"] = lab_data.loc[dated, "date_of_birth"].str[:6] + "93"
    lab_data.to_csv(lab_file, index=False)
    procs = {
        n: start(tmp_path, config, n, "--secret-file", str(secret))
        for n in ("coordinator", "lab", "imaging")
    }
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    log = (tmp_path / "imaging.log").read_text()
    auc = float(log.split("test AUC ")[1].split(";")[0])
    assert auc > 0.6  # as in the PSI test: the test rows differ per run
    # the common rows found by fuzzy linkage are (nearly all) the true pairs

    lab = pd.read_csv(tmp_path / "out" / "lab" / "aligned_lab.csv")
    img = pd.read_csv(tmp_path / "out" / "imaging" / "aligned_imaging.csv")
    truth = pd.read_csv(tmp_path / "data" / "true_pairs.csv")
    found = set(zip(lab["record_id"], img["record_id"], strict=True))
    true = set(zip(truth["lab"], truth["imaging"], strict=True))
    assert len(found & true) >= 0.9 * len(true)
    # the automatic threshold maximises F1: on 370 pairs it admits a few false links for recall
    assert len(found - true) <= 0.04 * len(found)
    assert secret.read_text() not in (tmp_path / "coordinator.log").read_text()
    import json

    metrics = json.loads((tmp_path / "out" / "imaging" / "metrics.json").read_text())
    assert metrics["ambiguous_links"] == 0  # every record of the cohort is entered once
    assert metrics["invalid_values"] == {}
    # counted and logged at the lab only
    assert "did not parse, per column: {'date_of_birth': 15}" in (tmp_path / "lab.log").read_text()


@pytest.mark.network
def test_three_data_parties_align_by_psi_with_the_coordinators_help(tmp_path: Path) -> None:
    """Four processes: the coordinator helps the three-party PSI (each data party learns only
    the triple intersection) and holds the key of the default protocol for three data parties
    (secret-shared, "shared_coordinator": no party sees a gradient)."""
    config = write_config(tmp_path)
    (port,) = free_ports(1)
    genomics = (
        '[[party]]\nname = "genomics"\nrole = "passive"\n'
        f'address = "127.0.0.1:{port}"\ncert = "certs/genomics.pem"\n'
        'key = "certs/genomics.key"\ncolumns = ["haemoglobin_g_dl", "platelets_10e9_l"]\n\n'
    )
    config.write_text(config.read_text().replace("[job]\n", genomics + "[job]\n", 1))
    shutil.rmtree(tmp_path / "certs")
    in_process("certs", "--config", str(config), "--out", str(tmp_path / "certs"))
    lab = pd.read_csv(tmp_path / "data" / "lab.csv")
    lab.iloc[::2][["patient_id", "haemoglobin_g_dl", "platelets_10e9_l"]].to_csv(
        tmp_path / "data" / "genomics.csv", index=False
    )
    names = ("coordinator", "lab", "imaging", "genomics")
    procs = {n: start(tmp_path, config, n) for n in names}
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    files = {n: pd.read_csv(tmp_path / "data" / f"{n}.csv") for n in names[1:]}
    triple = set.intersection(*(set(f["patient_id"]) for f in files.values()))
    pairwise = set(files["lab"]["patient_id"]) & set(files["imaging"]["patient_id"])
    assert len(pairwise) > len(triple) > 50
    aligned = {
        n: pd.read_csv(tmp_path / "out" / n / f"aligned_{n}.csv")["patient_id"].tolist()
        for n in names[1:]
    }
    assert aligned["lab"] == aligned["imaging"] == aligned["genomics"]
    assert set(aligned["lab"]) == triple
    log = (tmp_path / "imaging.log").read_text()
    assert float(log.split("test AUC ")[1].split(";")[0]) > 0.6


@pytest.mark.network
def test_each_party_runs_its_heavy_work_on_its_own_dask_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")  # the dask extra; make installs it
    clusters = {
        name: distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None
        )
        for name in ("lab", "imaging")
    }
    try:
        config = write_config(tmp_path)
        text = config.read_text()
        for name, cluster in clusters.items():
            own = f'key = "certs/{name}.key"\n'
            text = text.replace(own, own + f'scheduler = "{cluster.scheduler_address}"\n')
        config.write_text(text)
        assert FederationConfig.load(config).party("lab").scheduler == (
            clusters["lab"].scheduler_address
        )
        procs = {n: start(tmp_path, config, n) for n in ("coordinator", "lab", "imaging")}
        for name, proc in procs.items():
            assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
        for name, cluster in clusters.items():
            log = (tmp_path / f"{name}.log").read_text()
            assert f"heavy work on the Dask scheduler {cluster.scheduler_address}" in log
            # tasks did run there: the matrix products and encryptions of that party
            prefixes = cluster.scheduler.task_prefixes
            assert "run_packed" in prefixes, f"{name}: no task reached its cluster"
        log = (tmp_path / "imaging.log").read_text()
        assert float(log.split("test AUC ")[1].split(";")[0]) > 0.6
    finally:
        for cluster in clusters.values():
            cluster.close()


def test_a_dask_scheduler_that_does_not_answer_is_named(tmp_path: Path) -> None:
    from vfl.app.scheduler import connect_scheduler

    pytest.importorskip("distributed")
    config = write_config(tmp_path)
    (port,) = free_ports(1)
    text = config.read_text().replace(
        'key = "certs/lab.key"\n', f'key = "certs/lab.key"\nscheduler = "tcp://127.0.0.1:{port}"\n'
    )
    text = text.replace("connect_timeout = 60", "connect_timeout = 2")
    config.write_text(text)
    with pytest.raises(ValueError, match="party 'lab': cannot reach its Dask scheduler"):
        connect_scheduler(FederationConfig.load(config), "lab")
    bad = text.replace(f'scheduler = "tcp://127.0.0.1:{port}"', "scheduler = 8786")
    config.write_text(bad)
    with pytest.raises(ValueError, match="party 'lab': scheduler must be the address"):
        FederationConfig.load(config)
    # another host over plain TCP would carry the party's secrets in the clear: refused
    config.write_text(text.replace("tcp://127.0.0.1", "tcp://10.0.0.7"))
    with pytest.raises(ValueError, match=r"party 'lab': .* over plain TCP.*use tls://"):
        connect_scheduler(FederationConfig.load(config), "lab")


def test_a_dask_scheduler_without_workers_is_named_not_waited_for(tmp_path: Path) -> None:
    from vfl.app.scheduler import connect_scheduler

    distributed = pytest.importorskip("distributed")
    config = write_config(tmp_path)
    with distributed.LocalCluster(n_workers=0, dashboard_address=None) as cluster:
        text = config.read_text().replace(
            'key = "certs/lab.key"\n',
            f'key = "certs/lab.key"\nscheduler = "{cluster.scheduler_address}"\n',
        )
        config.write_text(text.replace("connect_timeout = 60", "connect_timeout = 2"))
        with pytest.raises(ValueError, match=r"party 'lab': its Dask scheduler .* has no worker"):
            connect_scheduler(FederationConfig.load(config), "lab")
        with distributed.Client(cluster) as client:
            from vfl.crypto import parallel

            with pytest.raises(ValueError, match="the Dask cluster has no workers"):
                parallel.check_workers(client)
