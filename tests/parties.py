"""Real ``vflink party`` processes for the tests: a three-party config over loopback with free
ports and fresh certificates, the synthetic cohort, and starting, running and cleaning up the
parties (shared by the party, prediction, split and transfer tests)."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """
[federation]
ca = "certs/ca.pem"
timeout = 120
connect_timeout = 60
peer_timeout = {peer_timeout}
heartbeat = 0.5

[[party]]
name = "coordinator"
role = "coordinator"
address = "127.0.0.1:{p0}"
cert = "certs/coordinator.pem"
key = "certs/coordinator.key"

[[party]]
name = "lab"
role = "passive"
address = "127.0.0.1:{p1}"
cert = "certs/lab.pem"
key = "certs/lab.key"
columns = ["crp_mg_l", "wbc_10e9_l", "albumin_g_l", "ldh_u_l"]

[[party]]
name = "imaging"
role = "active"
address = "127.0.0.1:{p2}"
cert = "certs/imaging.pem"
key = "certs/imaging.key"
columns = ["lesion_volume_cm3", "suv_max", "margin_irregularity", "texture_entropy"]

[job]
id_column = "{id_column}"
label_column = "{label_column}"
test_fraction = 0.3
{job_extra}

[job.params]
max_iter = {max_iter}
tol = {tol}
batch_size = 64
{params}
key_bits = 1024
insecure = true
"""


def free_ports(k: int) -> list[int]:
    sockets = [socket.socket() for _ in range(k)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [int(s.getsockname()[1]) for s in sockets]
    for s in sockets:
        s.close()
    return ports


def vflink(*args: str) -> list[str]:
    return [sys.executable, "-m", "vfl.app.cli", *args]


def write_config(
    folder: Path,
    *,
    max_iter: int = 5,
    tol: str = "1e-4",
    peer: int = 20,
    bloom: bool = False,
    linear: bool = False,
    params: str = "",
) -> Path:
    p0, p1, p2 = free_ports(3)
    path = folder / "federation.toml"
    path.write_text(
        CONFIG.format(
            p0=p0,
            p1=p1,
            p2=p2,
            max_iter=max_iter,
            tol=tol,
            peer_timeout=peer,
            id_column="record_id" if bloom else "patient_id",
            label_column="necrosis_fraction" if linear else "diagnosis",
            params=params,
            job_extra=(
                'align = "bloom"\nschema = "data/identity_schema.json"'
                if bloom
                else 'model = "linear"'
                if linear
                else ""
            ),
        )
    )
    in_process("certs", "--config", str(path), "--out", str(folder / "certs"))
    in_process("cohort", "--out", str(folder / "data"), "--n-patients", "600", "--seed", "3")
    return path


def in_process(*argv: str) -> None:
    """``vflink *argv`` in this process: the command's own parser and handler, without the
    logging set-up ``main`` makes for a process of its own (and without starting one)."""
    from vfl.app.cli import _parser

    args = _parser().parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()):
        assert args.handler(args) == 0, argv


def start(folder: Path, config: Path, name: str, *extra: str) -> subprocess.Popen[str]:
    data = [] if name == "coordinator" else ["--data", str(folder / "data" / f"{name}.csv")]
    data += list(extra) if name != "coordinator" else []
    log = open(folder / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        vflink(
            "-v",
            "party",
            "--config",
            str(config),
            "--name",
            name,
            "--out",
            str(folder / "out" / name),
            *data,
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        # as a user runs it: gRPC's verbosity left to the command (importing Flower in another
        # test may have set it in this process's environment)
        env={
            **{k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"},
            "VFLINK_PROGRESS": "0",
            "PYTHONWARNINGS": "ignore",
        },
    )


def run_three(folder: Path) -> Path:
    """Write a config and the cohort into ``folder``, run the three parties, return ``out``."""
    config = write_config(folder)
    procs = {n: start(folder, config, n) for n in ("coordinator", "lab", "imaging")}
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (folder / f"{name}.log").read_text()[-2000:]
    return folder / "out"


def kill_left(procs: dict[str, subprocess.Popen[str]]) -> None:
    """End the party processes a failed test left running (each by its own handle)."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
