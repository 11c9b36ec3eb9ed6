"""A Flower deployment on this machine: a SuperLink and one SuperNode per client, each its
own OS process, started as Flower's documentation starts a deployment (``flower-superlink``,
``flower-supernode --node-config partition-id=K``, the app submitted with ``flwr run``).

``FederatedClassifier(...).fit(clients, engine="flower")`` runs one fit on such a
deployment and tears it down; :class:`LocalDeployment` keeps one up for several fits::

    from horizontal import FederatedClassifier
    from horizontal.flower_local import LocalDeployment

    with LocalDeployment(nodes=10) as flower:
        model = flower.fit(FederatedClassifier(strategy="fedavg", max_iter=5), hospitals)

What runs there is :mod:`horizontal.flower`: vflink's client round in each node's ClientApp
(Flower starts a process per message; a client's Scaffold control variate stays in its
node's ``context.state``), vflink's aggregation, DP and ledger in the ServerApp. On the same
data, client names and ``random_state`` it trains the model the in-process simulation trains
(with DP's noise drawn from the OS, the same spends and a model as close as the noise).

How the fit reaches the processes: a private working folder (mode 0700, removed at the end)
holds the Flower app (its ``pyproject.toml`` and module), and per fit a run folder with the
estimator's configuration (pickled: this process writes it for the deployment's processes,
which run as the same user on this machine; nothing another party sent is ever unpickled)
and each client's rows (``.npz``, no pickle), node ``K`` reading the ``K``-th client in the
order the caller gave them (which the server keeps: client sampling draws in that order, as
in the simulation). The ServerApp writes the fitted model (vflink's format, with the privacy ledger
beside it), or the error that ended the fit, into the run folder. Insecure transport on
loopback, without node authentication: any user of this machine could submit an app to the
SuperLink while it runs, so use it on a machine you trust (a laptop, CI, a test bed). A
deployment across machines sets up TLS and node authentication as Flower documents, with
:func:`horizontal.flower.server_app` and :func:`~horizontal.flower.client_app`. The
estimator's configuration must unpickle in another process: its strategy, privacy and
module objects come from importable modules, not ``__main__``.

Flower starts a Python process per message (about 3.5 s of CPU here for a training
message, mostly imports; 2.4 s for the profile query, which does without torch), so a fit
costs ``nodes * (rounds + 1)`` of those: ten nodes and three rounds take about a
minute on two cores; secure aggregation adds four round trips a round (with its consistency
check). Not on Flower yet: FedLBFGS, early stopping and standardisation under DP (refused
naming the setting).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from horizontal.client import client_data
from horizontal.flower import VflinkStrategy, client_app, run_server
from vfl.federation.base import FederationTimeoutError

__all__ = ["LocalDeployment", "components", "fit_on_flower"]

APP_MODULE = "vflink_flower_app"
PLAN = "plan.pkl"
MODEL = "model"
ERROR = "error.txt"
DONE = "done"
HISTORY = "history.json"

_APP = '''
"""vflink on Flower: the app :class:`horizontal.flower_local.LocalDeployment` submits."""
from horizontal.flower_local import components

_apps = components()
server = _apps[0]  # Flower looks for plain assignments to the names the pyproject gives
client = _apps[1]
'''

_PYPROJECT = f"""
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
serverapp = "{APP_MODULE}:server"
clientapp = "{APP_MODULE}:client"

[tool.flwr.app.config]
vflink-run = ""
"""


# -- inside the deployment's processes ---------------------------------------------------------


def _plan(context: Any) -> tuple[Any, list[str], Path]:
    """The fit's estimator and client names, from the run folder the run config names (read
    once per process: a ClientApp asks for them twice per message)."""
    run = Path(str(context.run_config.get("vflink-run", "")))
    estimator, names = _read_plan(str(run))
    return estimator, list(names), run


@functools.lru_cache(maxsize=4)
def _read_plan(run: str) -> tuple[Any, tuple[str, ...]]:
    path = Path(run) / PLAN
    if not path.is_file():
        raise FileNotFoundError(
            f"no vflink plan in {run}: submit the app with --run-config vflink-run=<folder>"
        )
    # written by the submitting process, as the same user, into its own 0700 folder: the
    # configuration holds strategy, privacy and module objects that no JSON would carry
    with open(path, "rb") as f:
        estimator, names = pickle.load(f)  # noqa: S301
    return estimator, tuple(names)


def _load(context: Any) -> tuple[str, Any, Any]:
    """This node's client: the name at its ``partition-id`` and its rows."""
    import pandas as pd

    _, names, run = _plan(context)
    k = int(context.node_config["partition-id"])
    with np.load(run / f"client_{k}.npz", allow_pickle=False) as data:
        x = pd.DataFrame(data["x"], columns=[str(c) for c in data["columns"]])
        return names[k], x, data["y"]


def components() -> tuple[Any, Any]:
    """The ServerApp and ClientApp of a :class:`LocalDeployment` (the app module's
    ``server`` and ``client``)."""
    from flwr.serverapp import ServerApp

    server = ServerApp()

    @server.main()  # type: ignore[untyped-decorator,unused-ignore]
    def main(grid: Any, context: Any) -> None:
        run = Path(str(context.run_config.get("vflink-run", "")))
        try:
            estimator, names, run = _plan(context)
            timeout = float(estimator.timeout or 600.0)
            model = run_server(grid, estimator, min_nodes=len(names), timeout=timeout, order=names)
            history = [asdict(r) for r in getattr(model, "rounds_", [])]
            (run / HISTORY).write_text(json.dumps(history, default=float))
            model.save(run / f"{MODEL}.npz")
            (run / DONE).write_text("saved")  # after the model and its ledger
        except BaseException as exc:
            (run / ERROR).write_text(f"{type(exc).__name__}: {exc}")
            raise

    client = client_app(lambda context: _plan(context)[0], _load)
    return server, client


# -- the deployment ----------------------------------------------------------------------------


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _group_gone(group: int, seconds: float) -> bool:
    """Whether process group ``group`` is empty, waiting up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


class LocalDeployment:
    """A SuperLink and ``nodes`` SuperNodes on loopback, each its own process group, for
    :meth:`fit` (a context manager; :meth:`close` stops every process it started, the apps
    Flower started under them included, and removes the working folder).

    Parameters
    ----------
    nodes : int
        SuperNodes, one per client of each fit.
    timeout : float
        Seconds for the processes to start, and for a whole fit to finish (the estimator's
        own ``timeout`` is the server's wait for each step).
    """

    def __init__(self, nodes: int, *, timeout: float = 3600.0) -> None:
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise ValueError(f"nodes must be a positive number of SuperNodes, got {nodes!r}")
        self.nodes = nodes
        self.timeout = float(timeout)
        self.bin = Path(sys.executable).parent
        for tool in ("flower-superlink", "flower-supernode", "flwr"):
            if shutil.which(tool, path=str(self.bin)) is None:
                raise RuntimeError(
                    f"{tool} is not installed beside {sys.executable}: pip install 'vflink[flower]'"
                )
        self.folder: Path | None = None
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.runs = 0

    # -- processes ---------------------------------------------------------------------------

    def __enter__(self) -> LocalDeployment:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Write the app, start the SuperLink, wait for it, start the SuperNodes."""
        if self.folder is not None:
            return
        self.folder = Path(tempfile.mkdtemp(prefix="vflink-flower-"))  # mode 0700
        app = self.folder / "app"
        app.mkdir()
        (app / "pyproject.toml").write_text(_PYPROJECT)
        (app / f"{APP_MODULE}.py").write_text(textwrap.dedent(_APP))
        home = self.folder / "flwr"
        home.mkdir()
        (self.folder / "logs").mkdir()
        link_port, *runtimes = _free_ports(1 + self.nodes)
        self.env = {
            **os.environ,
            "FLWR_HOME": str(home),
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = '
            f'"127.0.0.1:{link_port}"\ninsecure = true\n'
        )
        try:
            link = self._start(
                "superlink",
                "flower-superlink",
                "--insecure",
                "--disable-runtime-dependency-installation",
                "--port",
                str(link_port),
            )
            self._wait_port(link_port, link)
            for k, port in enumerate(runtimes):
                self._start(
                    f"supernode_{k}",
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{link_port}",
                    "--port",
                    str(port),
                    "--node-config",
                    f"partition-id={k} num-partitions={self.nodes}",
                )
        except BaseException:
            self.close()
            raise

    def _working(self) -> Path:
        """The working folder, which :meth:`start` makes."""
        if self.folder is None:
            raise RuntimeError("the deployment is not started (or was closed): call start()")
        return self.folder

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self._working() / "logs" / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [str(self.bin / args[0]), *args[1:]],
            env=self.env,
            cwd=self.folder,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: close() stops what it starts too
        )
        log.close()
        self.processes[name] = process
        return process

    def _wait_port(self, port: int, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + min(self.timeout, 120.0)
        while time.monotonic() < deadline:
            self._check_alive()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise FederationTimeoutError(f"the SuperLink listens on no port {port}: {self._tail()}")

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"Flower's {name} exited with {process.returncode}: {self._tail(name)}"
                )

    def _tail(self, name: str = "superlink") -> str:
        if self.folder is None:
            return ""
        path = self.folder / "logs" / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.strip().splitlines()[-12:])

    def close(self) -> None:
        """Stop every process group started -- SIGTERM, then SIGKILL to what is left after
        10 s -- and wait until each group is empty (the apps Flower started under a
        SuperNode outlive their parent for a moment); remove the working folder."""
        groups = [process.pid for process in self.processes.values()]
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        for group in groups:
            if not _group_gone(group, 10.0):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
                _group_gone(group, 10.0)
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1)
        self.processes.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    # -- a fit -------------------------------------------------------------------------------

    def fit(self, estimator: Any, clients: Any, *, label: str | None = None) -> Any:
        """Fit ``estimator`` (a :class:`~horizontal.FederatedClassifier` or
        :class:`~horizontal.FederatedRegressor`) on ``clients`` (as its ``fit`` takes them,
        one per SuperNode) on this deployment, and return it fitted (its model, classes,
        ``history_``, and under DP ``privacy_ledger_`` and ``epsilon_``)."""
        data = client_data(clients, label)
        if len(data) != self.nodes:
            raise ValueError(
                f"{len(data)} clients for {self.nodes} SuperNodes: a deployment runs one client "
                "per node"
            )
        names = list(data)  # the caller's order: the simulation's (sampling, sums)
        VflinkStrategy(estimator).begin(names)  # refuses what Flower cannot run, at once
        self.start()
        folder = self._working()
        self.runs += 1
        run = folder / f"run_{self.runs}"
        run.mkdir()
        from sklearn.base import clone

        with open(run / PLAN, "wb") as f:  # the configuration only: a clone, unfitted
            pickle.dump((clone(estimator), names), f)
        for k, name in enumerate(names):
            x, y, columns = data[name]
            labels = y.astype(str) if y.dtype == object else y
            np.savez(run / f"client_{k}.npz", x=x, y=labels, columns=np.array(columns, dtype=str))
        submitted = subprocess.run(
            [
                str(self.bin / "flwr"),
                "run",
                str(folder / "app"),
                "local",
                "--run-config",
                f'vflink-run="{run}"',
            ],
            env=self.env,
            cwd=folder,
            capture_output=True,
            timeout=min(self.timeout, 300.0),
            check=False,
        )
        if submitted.returncode != 0:
            raise RuntimeError(
                f"flwr run failed ({submitted.returncode}): "
                f"{(submitted.stdout + submitted.stderr).decode(errors='replace')[-2000:]}"
            )
        deadline = time.monotonic() + self.timeout
        while not (run / DONE).exists():
            if (run / ERROR).exists():
                raise RuntimeError(
                    f"the fit on Flower failed: {(run / ERROR).read_text(errors='replace')}"
                )
            self._check_alive()
            if time.monotonic() > deadline:
                raise FederationTimeoutError(
                    f"no model from Flower after {self.timeout:g} s; the SuperLink's log ends: "
                    f"{self._tail()}"
                )
            time.sleep(0.25)
        return _fitted(estimator, run, data)


def fit_on_flower(estimator: Any, clients: Any, *, label: str | None = None) -> Any:
    """``estimator.fit(clients, engine="flower")``: a :class:`LocalDeployment` with a
    SuperNode per client for this one fit, stopped after it."""
    nodes = len(client_data(clients, label))
    with LocalDeployment(nodes) as flower:
        return flower.fit(estimator, clients, label=label)


def _fitted(estimator: Any, run: Path, data: dict[str, Any]) -> Any:
    """``estimator`` with the model the ServerApp saved, its classes as the caller's labels,
    its rounds' history and, under DP, its ledger's epsilon."""
    from horizontal.training import RoundRecord

    estimator.load(run / f"{MODEL}.npz")
    history = json.loads((run / HISTORY).read_text()) if (run / HISTORY).exists() else []
    estimator.rounds_ = [RoundRecord(**record) for record in history]
    estimator.history_ = [{"epoch": r.round} | asdict(r) for r in estimator.rounds_]
    estimator.n_iter_ = len(estimator.rounds_)
    estimator.best_round_ = None  # no early stopping on Flower
    if getattr(estimator, "_task", "") == "classification":
        originals = {str(v): v for _, y, _ in data.values() for v in np.unique(y)}
        estimator._originals = originals
        estimator.classes_ = np.array([originals.get(c, c) for c in estimator._class_names])
    ledger = getattr(estimator, "privacy_ledger_", None)
    if estimator.privacy is not None and ledger is not None:
        from horizontal.privacy import largest_epsilon

        estimator.epsilon_ = largest_epsilon(ledger, sorted(data))
    return estimator
