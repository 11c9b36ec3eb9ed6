"""Secure aggregation: the cost of one round against plain aggregation, with dropouts.

Prints, after the machine's load: for ``--clients`` clients (100) each summing a
``--size``-long update (100,000 parameters), with 0 %, 10 % and 30 % of them dropping out
after sharing their keys (the costly case: the server rebuilds each dropped client's mask
key and removes its masks from every survivor's input), the seconds of one secure round
(every client and the server threads of this process, so the clients' work adds up on this
machine's cores) and that time per client, the bytes each client sends, and the same for plain
aggregation (each client sends its float32 update; the server sums them), with the ratio;
for the complete graph (Bonawitz et al.) and for SecAgg+ with ``k = 2 ceil(log2 n)``
neighbours. Each run checks the secure sum against the plain sum of the survivors.

Then the cost of the consistency round (on by default; ``SecAggConfig(consistency=False)``
turns it off for this measurement only): the complete graph's round with and without it, in
the same run, alternated ``--repeats`` times (2) and the fastest of each kept; the bytes it
adds per client (one signature up, ``n`` down); and its Ed25519 verifications (``n`` per
client and at the server) timed on their own.

Flower's SecAgg+ (``SecAggPlusWorkflow`` with ``secaggplus_mod``, ``flwr.simulation``; the
same clients, dimension, neighbourhood size ``k + 1`` as ``num_shares`` and threshold) runs
when ``--flower-python`` names a Python with ``flwr[simulation]`` (it pins other versions of
our dependencies, so it lives in its own environment); its seconds per round are the time
between the strategy's rounds, which also carries the parameters to the clients.

Run::

    python benchmarks/secagg.py [--clients 100] [--size 100000] [--threshold-fraction 0.5]
        [--repeats 2] [--flower-python PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from horizontal.secagg import SecAggConfig, client_round, server_round  # noqa: E402
from vfl.crypto.keys import SecurityWarning  # noqa: E402
from vfl.federation.base import PartyFailedError  # noqa: E402
from vfl.federation.local import LocalFederation  # noqa: E402
from vfl.federation.messages import Message, Namespace  # noqa: E402

PLAIN = Namespace("plain")


@dataclass(frozen=True)
class Update(Message):
    KIND = "plain update"
    values: np.ndarray


def secure(vectors: dict[str, Any], config: SecAggConfig, drops: set[str]) -> dict[str, float]:
    size = len(next(iter(vectors.values())))
    timing: dict[str, float] = {}

    def server(fed: Any) -> Any:
        began = time.perf_counter()
        out = server_round(fed, list(vectors), size, config)
        timing["server"] = time.perf_counter() - began
        return out

    roles: dict[str, Any] = {
        name: (
            lambda fed, name=name: client_round(
                fed,
                "server",
                vectors[name],
                config,
                clients=len(vectors),
                drop_after="shares" if name in drops else None,
            )
        )
        for name in vectors
    }
    roles["server"] = server
    federation = LocalFederation(timeout=600)
    began = time.perf_counter()
    results = federation.run(roles)
    timing["round"] = time.perf_counter() - began
    total, survivors = results["server"]
    expected = sum(vectors[c] for c in survivors)
    timing["error"] = float(np.abs(total - expected).max())
    sent = [r.nbytes for r in federation.transcript.records if r.sender != "server"]
    timing["bytes"] = sum(sent) / len(vectors)
    for step in ("signature", "signatures"):  # the consistency round: up, then down
        tag = f"secagg/{step}/"
        found = [r.nbytes for r in federation.transcript.records if r.tag.startswith(tag)]
        timing[step] = sum(found) / len(vectors)
    return timing


def consistency_cost(vectors: dict[str, Any], config: SecAggConfig, repeats: int) -> str:
    """The consistency round's cost: the same round with and without it, alternated
    ``repeats`` times (the fastest of each kept: the machine is shared), its bytes per client,
    and the Ed25519 work it adds (one signature per client, ``n`` verifications per client
    and at the server) timed on its own."""
    without = replace(config, consistency=False)
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # off only to measure it
        for _ in range(repeats):
            for chosen in (config, without):
                runs[chosen.consistency].append(secure(vectors, chosen, set()))
    on = min(r["round"] for r in runs[True])
    off = min(r["round"] for r in runs[False])
    key = Ed25519PrivateKey.generate()
    public, signature = key.public_key(), key.sign(b"x" * 32)
    batches = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(200):
            public.verify(signature, b"x" * 32)
        batches.append((time.perf_counter() - began) / 200)
    verify = min(batches)
    n = len(vectors)
    up, down = runs[True][0]["signature"], runs[True][0]["signatures"]
    sent = runs[True][0]["bytes"]
    return (
        f"consistency round (complete graph, 0 % dropouts, fastest of {repeats}): "
        f"{on:.2f} s a round with it, {off:.2f} s without: {on - off:+.2f} s "
        f"({(on - off) / off:+.1%}); per client {up:.0f} B sent ({up / sent:.3%} of what it "
        f"sends in the round) and {down / 1e3:.1f} kB received; its {n * (n + 1):,} Ed25519 "
        f"verifications take {n * (n + 1) * verify:.2f} s of CPU in all "
        f"({n * verify * 1e3:.1f} ms per party)"
    )


def plain(vectors: dict[str, Any]) -> dict[str, float]:
    size = len(next(iter(vectors.values())))
    timing: dict[str, float] = {}

    def server(fed: Any) -> Any:
        began = time.perf_counter()
        got = fed.gather(list(vectors), PLAIN.tag("update"))
        total = np.zeros(size)
        for name, payload in got.items():
            total += Update.from_payload(payload, name).values
        timing["server"] = time.perf_counter() - began
        return total

    roles: dict[str, Any] = {
        name: (
            lambda fed, name=name: PLAIN.send(
                fed, "server", "update", Update(values=vectors[name].astype(np.float32))
            )
        )
        for name in vectors
    }
    roles["server"] = server
    federation = LocalFederation(timeout=600)
    began = time.perf_counter()
    federation.run(roles)
    timing["round"] = time.perf_counter() - began
    timing["bytes"] = sum(r.nbytes for r in federation.transcript.records) / len(vectors)
    return timing


FLOWER = textwrap.dedent(
    """
import sys, time, json
import numpy as np
import flwr as fl
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.simulation import run_simulation

n_clients, size, rounds, shares, threshold = map(int, sys.argv[1:6])
times = []

class Client(NumPyClient):
    def fit(self, parameters, config):
        rng = np.random.default_rng()
        return [parameters[0] + rng.normal(scale=0.01, size=size).astype(np.float32)], 1, {}

def client_fn(context: Context):
    return Client().to_client()

client_app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])

class Timed(FedAvg):
    def configure_fit(self, server_round, parameters, client_manager):
        times.append(time.perf_counter())
        return super().configure_fit(server_round, parameters, client_manager)

strategy = Timed(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n_clients,
                 min_available_clients=n_clients,
                 initial_parameters=ndarrays_to_parameters([np.zeros(size, np.float32)]))
app = ServerApp()

@app.main()
def main(grid: Grid, context: Context) -> None:
    config = ServerConfig(num_rounds=rounds)
    legacy = LegacyContext(context=context, config=config, strategy=strategy)
    secagg = SecAggPlusWorkflow(num_shares=shares, reconstruction_threshold=threshold)
    workflow = DefaultWorkflow(fit_workflow=secagg)
    workflow(grid, legacy)

run_simulation(server_app=app, client_app=client_app, num_supernodes=n_clients,
               backend_config={"client_resources": {"num_cpus": 1}})
times.append(time.perf_counter())
gaps = np.diff(times)[1:] if len(times) > 2 else np.diff(times)
print(json.dumps({"per_round": float(np.mean(gaps))}))
    """
)


def flower(python: str, clients: int, size: int, shares: int, threshold: int) -> str:
    try:
        check = subprocess.run(
            [python, "-c", "import flwr, ray"], capture_output=True, text=True, check=False
        )
    except OSError as exc:
        return f"skipped (cannot run {python}: {exc.strerror})"
    if check.returncode != 0:
        return "skipped (no flwr[simulation] in --flower-python)"
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "flower_secagg.py"
        script.write_text(FLOWER)
        args = [str(v) for v in (clients, size, 2, shares, threshold)]
        done = subprocess.run(
            [python, str(script), *args], capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr else '?'}"
    line = [x for x in done.stdout.splitlines() if x.startswith("{")][-1]
    return f"{json.loads(line)['per_round']:.2f} s/round"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--threshold-fraction", type=float, default=0.5)
    parser.add_argument("--flower-python", default=sys.executable)
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs with and without the consistency round"
    )
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    rng = np.random.default_rng(0)
    vectors = {f"client_{i:03d}": rng.normal(size=args.size) * 0.01 for i in range(args.clients)}
    threshold = max(2, math.ceil(args.threshold_fraction * args.clients))
    config = SecAggConfig(threshold=threshold)
    base = plain(vectors)
    print(
        f"\n{args.clients} clients x {args.size:,} parameters, threshold {threshold}; plain "
        f"aggregation: {base['round']:.2f} s a round (server {base['server']:.2f} s), "
        f"{base['bytes'] / 1e6:.2f} MB per client"
    )
    k = 2 * math.ceil(math.log2(args.clients))
    plus = SecAggConfig(threshold=max(2, k // 2 + 1), neighbours=k)
    print(
        f"{'':<34}{'dropouts':>9}{'round s':>9}{'s/client':>10}{'MB/client':>11}{'x plain':>9}"
        f"{'max error':>11}"
    )
    per_client: dict[str, float] = {}
    for label, chosen in [
        (f"complete graph, threshold {threshold}", config),
        (f"SecAgg+ k={k}, threshold {plus.threshold}", plus),
    ]:
        for fraction in (0.0, 0.1, 0.3):
            drops = set(list(vectors)[: round(fraction * args.clients)])
            try:
                found = secure(vectors, chosen, drops)
            except PartyFailedError as exc:
                reason = str(exc).splitlines()[0].split(": ", 2)[-1]
                print(f"{label:<34}{fraction:>9.0%}   aborted: {reason[:70]}")
                continue
            print(
                f"{label:<34}{fraction:>9.0%}{found['round']:>9.2f}"
                f"{found['round'] / args.clients:>10.3f}{found['bytes'] / 1e6:>11.2f}"
                f"{found['round'] / base['round']:>8.1f}x{found['error']:>11.1e}"
            )
            if fraction == 0.0:
                per_client[label] = found["round"] / args.clients
    plus_label = [label for label in per_client if label.startswith("SecAgg+")]
    if plus_label:
        ms = 1e3 * per_client[plus_label[0]]
        print(
            f"SecAgg+ per client, no dropouts: {ms:.1f} ms (goal <= 5 ms: "
            f"{'met' if ms <= 5 else 'missed'}); its {args.clients} Ed25519 verifications of the "
            "consistency round are timed below"
        )
    print(f"\n{consistency_cost(vectors, config, args.repeats)}")
    other = flower(args.flower_python, args.clients, args.size, k + 1, plus.threshold)
    print(
        f"\nFlower SecAgg+ (num_shares {k + 1}, threshold {plus.threshold}, 0 % dropouts): {other}"
    )
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f}")


if __name__ == "__main__":
    main()
