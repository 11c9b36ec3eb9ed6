"""The horizontal path on Flower's engine (:mod:`horizontal.flower`, the extra ``flower``).

Fast tests run the Flower strategy and client app in this process (a stand-in grid hands
the messages to the client app); the ``network`` test starts a SuperLink and two SuperNodes
on loopback and runs the app with ``flwr run``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from sklearn.metrics import roc_auc_score

from horizontal import ClientDP, FederatedClassifier, FedProx
from horizontal.aggregate import clip_to_norm, weighted_mean
from horizontal.flower import as_flower_strategy, client_app, run_server
from horizontal.privacy import largest_epsilon
from horizontal.robust import coordinate_median
from vfl.datasets import make_hospital_cohort

LABEL = "diagnosis"


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower stamps messages with the run, node and task of the process running them (set by
    its runtime); in-process tests play one."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _cohort() -> tuple[dict[str, Any], Any]:
    """Two hospitals to train on and a third held out."""
    cohort = make_hospital_cohort(3, 1200, random_state=0)
    train = {
        name: (frame.drop(columns=[LABEL]), frame[LABEL])
        for name, frame in cohort.items()
        if name != "hospital_3"
    }
    return train, cohort["hospital_3"]


def _replies(strategy: Any, messages: Iterable[Message], deltas: dict[str, Any]) -> list[Message]:
    """What the client app would answer: each client's given update."""
    names = {node: name for name, node in strategy.nodes.items()}
    out = []
    for msg in messages:
        name = names[msg.metadata.dst_node_id]
        delta, rows, bit = deltas[name]
        config = ConfigRecord({"client": name, "round": int(msg.content["config"]["round"])})
        if bit is not None:
            config["unclipped"] = bit
        content = RecordDict(
            {
                "arrays": ArrayRecord({"delta": Array(np.asarray(delta, dtype=np.float32))}),
                "metrics": MetricRecord({"num-examples": rows}),
                "config": config,
            }
        )
        out.append(Message(content, reply_to=msg))
    return out


def _one_round(strategy: Any, deltas: dict[str, Any], weights: Any) -> Any:
    strategy.begin(sorted(deltas), nodes={n: k + 1 for k, n in enumerate(sorted(deltas))})
    messages = list(
        strategy.configure_train(1, ArrayRecord({"weights": Array(weights)}), ConfigRecord(), None)
    )
    arrays, _ = strategy.aggregate_train(1, _replies(strategy, messages, deltas))
    return arrays["weights"].numpy()


def _deltas(seed: int = 0, size: int = 7) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        name: (rng.normal(size=size).astype(np.float32).astype(np.float64), rows, None)
        for name, rows in [("a", 10), ("b", 30), ("c", 60)]
    }


@pytest.mark.parametrize("strategy", ["fedavg", FedProx(mu=0.1)])
def test_aggregate_is_vflinks_weighted_mean(strategy: Any) -> None:
    deltas = _deltas()
    weights = np.linspace(-1, 1, 7)
    flower = as_flower_strategy(strategy, max_iter=1, random_state=0)
    got = _one_round(flower, deltas, weights)
    expected = weights + weighted_mean([d for d, _, _ in deltas.values()], [10, 30, 60])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert flower.history[0].replied == 3


def test_robust_aggregate_is_vflinks_median() -> None:
    deltas = _deltas(1)
    weights = np.zeros(7)
    flower = as_flower_strategy("fedavg", aggregator="median", max_iter=1)
    got = _one_round(flower, deltas, weights)
    np.testing.assert_allclose(got, coordinate_median([d for d, _, _ in deltas.values()]))


def test_client_dp_mean_and_ledger_match_vflinks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("horizontal.privacy.gaussian_noise", lambda size, sigma: np.zeros(size))
    deltas = _deltas(2)
    weights = np.zeros(7)
    privacy = ClientDP(noise_multiplier=1.1, clip=0.5)
    rounds = 3
    params = {"max_iter": rounds, "standardize": False, "classes": [0, 1], "privacy": privacy}
    flower = as_flower_strategy("fedavg", **params)
    flower.begin(["a", "b", "c"], nodes={"a": 1, "b": 2, "c": 3})
    for r in range(1, rounds + 1):
        messages = list(
            flower.configure_train(
                r, ArrayRecord({"weights": Array(weights)}), ConfigRecord(), None
            )
        )
        arrays, _ = flower.aggregate_train(r, _replies(flower, messages, deltas))
        new = arrays["weights"].numpy()
        clipped = sum(clip_to_norm(d, 0.5)[0] for d, _, _ in deltas.values())
        np.testing.assert_allclose(new, weights + clipped / 3, atol=1e-12)  # (sum + 0) / (q N)
        weights = new
    # vflink's own fit with the same settings spends the same epsilon
    train, _ = _cohort()
    own = FederatedClassifier(module="linear", random_state=0, **params)
    own.fit(train)
    assert largest_epsilon(flower.ledger, ["a", "b", "c"]) == pytest.approx(own.epsilon_)
    assert len(flower.ledger) == rounds


# -- the whole protocol in this process ---------------------------------------------------------


class _InProcessGrid:
    """A stand-in for Flower's grid: messages go straight to a ClientApp per node."""

    def __init__(self, app: Any, partitions: int) -> None:
        self.app = app
        self.contexts = {
            node: Context(
                run_id=1,
                node_id=node,
                node_config={"partition-id": node - 1, "num-partitions": partitions},
                state=RecordDict(),
                run_config={},
            )
            for node in range(1, partitions + 1)
        }

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float) -> list[Message]:
        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            out.append(self.app(msg, self.contexts[node]))  # the reply's source: node
        return out


def _loader(train: dict[str, Any]) -> Any:
    names = sorted(train)

    def load(context: Context) -> tuple[str, Any, Any]:
        name = names[int(context.node_config["partition-id"])]
        return (name, *train[name])

    return load


@pytest.mark.parametrize("strategy", ["fedavg", FedProx(mu=0.05)])
def test_flower_protocol_in_process_trains_vflinks_model(strategy: Any) -> None:
    train, held_out = _cohort()
    params = {
        "module": "linear",
        "max_iter": 3,
        "learning_rate": 0.1,
        "strategy": strategy,
        "random_state": 0,
    }
    grid = _InProcessGrid(client_app(FederatedClassifier(**params), _loader(train)), 2)
    model = run_server(grid, FederatedClassifier(**params), min_nodes=2, timeout=60)
    own = FederatedClassifier(**params).fit(train)
    np.testing.assert_allclose(model.weights_, own.weights_, atol=1e-5)
    x, y = held_out.drop(columns=[LABEL]), held_out[LABEL]
    auc = roc_auc_score(y, model.predict_proba(x)[:, 1])
    assert auc == pytest.approx(roc_auc_score(y, own.predict_proba(x)[:, 1]), abs=1e-4)
    assert auc > 0.7
    assert len(model.history_) == 3


def test_unsupported_settings_are_refused() -> None:
    from horizontal import Scaffold

    strategy = as_flower_strategy(Scaffold(), max_iter=1)
    with pytest.raises(ValueError, match="Scaffold"):
        strategy.begin(["a", "b"])
    # the estimators' "auto" defaults end a fit at a round Flower does not know in advance
    with pytest.raises(ValueError, match="FedLBFGS"):
        as_flower_strategy("auto", module="linear", max_iter=5).begin(["a", "b"])
    with pytest.raises(ValueError, match="early stopping"):
        as_flower_strategy("fedavg").begin(["a", "b"])
    with pytest.raises(ValueError, match="standardisation under DP"):
        as_flower_strategy(
            "fedavg", max_iter=2, privacy=ClientDP(noise_multiplier=1.0), classes=[0, 1]
        ).begin(["a", "b"])


# -- SuperLink and SuperNodes on loopback --------------------------------------------------------

APP = '''
"""vflink on Flower: the test's app."""
from horizontal import FederatedClassifier
from horizontal.flower import client_app, server_app
from vfl.datasets import make_hospital_cohort

PARAMS = {PARAMS!r}


def load(context):
    cohort = make_hospital_cohort(3, 1200, random_state=0)
    name = ["hospital_1", "hospital_2"][int(context.node_config["partition-id"])]
    frame = cohort[name]
    return name, frame.drop(columns=["diagnosis"]), frame["diagnosis"]


server = server_app(FederatedClassifier(**PARAMS), min_nodes=2, timeout=240)
client = client_app(FederatedClassifier(**PARAMS), load)
'''

PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "vflinkflower"
version = "1.0.0"
description = "vflink on Flower"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "vflink"

[tool.flwr.app.components]
serverapp = "vflink_flower_app:server"
clientapp = "vflink_flower_app:client"

[tool.flwr.app.config]
model-path = ""
"""


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _wait_port(port: int, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port} after {seconds} s")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes started by the test, each the leader of its own group: the group is killed
    at the end (a SuperLink's and SuperNode's app subprocesses with it)."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:  # the leader and whatever it started in its group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    for process in started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):  # what outlived SIGTERM
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.mark.network
def test_superlink_and_two_supernodes_train_as_vflink(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    bin_dir = Path(sys.executable).parent
    if shutil.which("flower-superlink", path=str(bin_dir)) is None:
        pytest.skip("flower-superlink is not installed beside this Python")
    params = {
        "module": "linear",
        "max_iter": 3,
        "learning_rate": 0.1,
        "strategy": "fedavg",  # "auto" would be FedLBFGS, which Flower's fixed rounds refuse
        "random_state": 0,
    }
    app = tmp_path / "app"
    app.mkdir()
    (app / "pyproject.toml").write_text(PYPROJECT)
    (app / "vflink_flower_app.py").write_text(
        textwrap.dedent(APP).replace("{PARAMS!r}", repr(params))
    )
    home = tmp_path / "flwr"
    (home).mkdir()
    link, node_1, node_2 = _free_ports(3)
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:{link}"\n'
        "insecure = true\n"
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    log = tmp_path / "logs"
    log.mkdir()

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        out = (log / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [str(bin_dir / args[0]), *args[1:]],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        processes.append(process)
        return process

    superlink = start(
        "superlink",
        "flower-superlink",
        "--insecure",
        "--disable-runtime-dependency-installation",
        "--port",
        str(link),
    )
    try:
        _wait_port(link, superlink, 60)
        for k, port in enumerate([node_1, node_2]):
            start(
                f"supernode_{k}",
                "flower-supernode",
                "--insecure",
                "--superlink",
                f"127.0.0.1:{link}",
                "--port",
                str(port),
                "--node-config",
                f"partition-id={k} num-partitions=2",
            )
        model_path = tmp_path / "model.npz"
        run = subprocess.run(
            [
                str(bin_dir / "flwr"),
                "run",
                str(app),
                "test",
                "--run-config",
                f'model-path="{model_path}"',
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 0, run.stdout.decode() + run.stderr.decode()
        deadline = time.monotonic() + 240
        while not model_path.exists() and time.monotonic() < deadline:
            time.sleep(1)
        assert model_path.exists(), "no model after 240 s"
    except BaseException:
        for file in sorted(log.iterdir()):
            sys.stderr.write(f"--- {file.name}\n{file.read_text(errors='replace')[-4000:]}\n")
        raise
    flower_model = FederatedClassifier(**params).load(model_path)
    train, held_out = _cohort()
    own = FederatedClassifier(**params).fit(train)
    x, y = held_out.drop(columns=[LABEL]), held_out[LABEL]
    auc = roc_auc_score(y, flower_model.predict_proba(x)[:, 1])
    assert auc == pytest.approx(roc_auc_score(y, own.predict_proba(x)[:, 1]), abs=1e-4)
    np.testing.assert_allclose(flower_model.weights_, own.weights_, atol=1e-4)
