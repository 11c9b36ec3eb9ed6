"""Secure aggregation: the cost of one round against plain aggregation, with dropouts.

Prints, after the machine's load: for ``--clients`` clients (100) each summing a
``--size``-long update (100,000 parameters), with 0 %, 10 % and 30 % of them dropping out
after sharing their keys (the costly case: the server rebuilds each dropped client's mask
key and removes its masks from every survivor's input), the seconds of one secure round
(every client and the server taking turns on one thread of this process, as the estimator
runs them: the clients' work adds up) and that time per client, the bytes each client sends,
and the same for plain aggregation (each client sends its float32 update; the server sums
them), with the ratio;
for the complete graph (Bonawitz et al.) and for SecAgg+ with ``k = 2 ceil(log2 n)``
neighbours. Each run checks the secure sum against the plain sum of the survivors. These
rows draw every key for the round, as a fit's first round does.

Then a fit of ``--rounds`` SecAgg+ rounds (6) as the estimators run it, each client keeping its
``c`` key across the rounds (:class:`horizontal.secagg.ChannelKey`: every pair's X25519
agreement made in the first round, reused after; ``s`` and the self-mask drawn every round):
the first round's time per client, and the later rounds' median against rounds that draw
their ``c`` keys anew, alternated with them -- the goal's row (5 ms per client).

Then the cost of the consistency round (on by default; ``SecAggConfig(consistency=False)``
turns it off for this measurement only): the complete graph's and SecAgg+'s rounds with and
without it, in the same run, alternated ``--repeats`` times (2) and the fastest of each
kept; the bytes it adds per client (a 32-byte tag for every other survivor up, as many
down); and, timed on their own, what its pairwise tags cost beside what the paper's
signatures would (one Ed25519 verification per other survivor and client).

Flower's SecAgg+ (``SecAggPlusWorkflow`` with ``secaggplus_mod``, ``flwr.simulation``; the
same clients, dimension, neighbourhood size ``k + 1`` as ``num_shares`` and threshold) runs
when ``--flower-python`` names a Python with ``flwr[simulation]`` (it pins other versions of
our dependencies, so it lives in its own environment); its seconds per round are the time
between the strategy's rounds, which also carries the parameters to the clients.

Run::

    python benchmarks/secagg.py [--clients 100] [--size 100000] [--threshold-fraction 0.5]
        [--repeats 2] [--rounds 6] [--flower-python PATH]
"""

from __future__ import annotations

import argparse
import hashlib
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
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey  # noqa: E402

from horizontal.secagg import ChannelKey, SecAggConfig, client_round, server_round  # noqa: E402
from vfl.crypto.keys import SecurityWarning  # noqa: E402
from vfl.federation.base import PartyFailedError  # noqa: E402
from vfl.federation.local import LocalFederation  # noqa: E402
from vfl.federation.messages import Message, Namespace  # noqa: E402

PLAIN = Namespace("plain")


@dataclass(frozen=True)
class Update(Message):
    KIND = "plain update"
    values: np.ndarray


def secure(
    vectors: dict[str, Any],
    config: SecAggConfig,
    drops: set[str],
    *,
    channels: dict[str, ChannelKey] | None = None,
    round_: int = 0,
) -> dict[str, float]:
    size = len(next(iter(vectors.values())))
    timing: dict[str, float] = {}
    channels = channels or {}

    def server(fed: Any) -> Any:
        began = time.perf_counter()
        out = server_round(fed, list(vectors), size, config, round_)
        timing["server"] = time.perf_counter() - began
        return out

    roles: dict[str, Any] = {
        name: (
            lambda fed, name=name: client_round(
                fed,
                "server",
                vectors[name],
                config,
                round_,
                clients=len(vectors),
                drop_after="shares" if name in drops else None,
                channel=channels.get(name),
            )
        )
        for name in vectors
    }
    roles["server"] = server
    federation = LocalFederation(timeout=600, scheduling="cooperative")
    began = time.perf_counter()
    results = federation.run(roles)
    timing["round"] = time.perf_counter() - began
    total, survivors = results["server"]
    expected = sum(vectors[c] for c in survivors)
    timing["error"] = float(np.abs(total - expected).max())
    sent = [r.nbytes for r in federation.transcript.records if r.sender != "server"]
    timing["bytes"] = sum(sent) / len(vectors)
    for step in ("tags", "tag-inbox"):  # the consistency round: up, then down
        tag = f"secagg/{step}/"
        found = [r.nbytes for r in federation.transcript.records if r.tag.startswith(tag)]
        timing[step] = sum(found) / len(vectors)
    return timing


def fit_rounds(vectors: dict[str, Any], config: SecAggConfig, rounds: int) -> dict[str, float]:
    """Seconds of a fit's rounds, no dropouts: with each client's ``c`` key kept across them
    (:class:`~horizontal.secagg.ChannelKey`, as the estimators run it: the first round agrees
    every pair, the later ones reuse the agreements) and with ``c`` keys drawn every round,
    alternated round by round; the median of the later rounds of each."""
    channels = {name: ChannelKey() for name in vectors}
    first = secure(vectors, config, set(), channels=channels)["round"]
    kept, fresh = [], []
    for round_ in range(1, rounds):
        kept.append(secure(vectors, config, set(), channels=channels, round_=round_)["round"])
        fresh.append(secure(vectors, config, set(), round_=round_)["round"])
    return {"first": first, "kept": float(np.median(kept)), "fresh": float(np.median(fresh))}


def consistency_cost(
    vectors: dict[str, Any], configs: dict[str, SecAggConfig], repeats: int
) -> list[str]:
    """The consistency round's cost for each of ``configs``: the same round with and without
    it, alternated ``repeats`` times (the fastest of each kept: the machine is shared), its
    bytes per client; then its tags' work timed on its own beside the paper's signatures'."""
    lines = []
    n = len(vectors)
    for label, config in configs.items():
        without = replace(config, consistency=False)
        runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SecurityWarning)  # off only to measure it
            for _ in range(repeats):
                for chosen in (config, without):
                    runs[chosen.consistency].append(secure(vectors, chosen, set()))
        on = min(r["round"] for r in runs[True])
        off = min(r["round"] for r in runs[False])
        up, down = runs[True][0]["tags"], runs[True][0]["tag-inbox"]
        sent = runs[True][0]["bytes"]
        lines.append(
            f"consistency round, {label} (0 % dropouts, fastest of {repeats}): {on:.2f} s a "
            f"round with it, {off:.2f} s without: {on - off:+.2f} s ({(on - off) / off:+.1%}), "
            f"{1e3 * (on - off) / n:+.2f} ms per client; per client {up / 1e3:.1f} kB sent "
            f"({up / sent:.2%} of what it sends in the round) and {down / 1e3:.1f} kB received"
        )
    key, peer = X25519PrivateKey.generate(), X25519PrivateKey.generate().public_key()
    signer = Ed25519PrivateKey.generate()
    public, signature = signer.public_key(), signer.sign(b"x" * 32)
    costs = {
        "tag": lambda: hashlib.blake2s(b"x" * 96, key=b"k" * 32).digest(),
        "exchange": lambda: key.exchange(peer),
        "verify": lambda: public.verify(signature, b"x" * 32),
    }
    each = {name: _fastest(call) for name, call in costs.items()}
    k = next((c.neighbours for c in configs.values() if c.neighbours), 0)
    tags = 2 * (n - 1) * each["tag"]  # one made and one checked per other survivor
    lines.append(
        f"per client and round: {n - 1} tags made and {n - 1} checked "
        f"({1e6 * each['tag']:.1f} us each), {tags * 1e3:.2f} ms; under SecAgg+ k={k} also "
        f"{n - 1 - k} X25519 agreements outside its neighbourhood "
        f"({1e6 * each['exchange']:.0f} us each), {(n - 1 - k) * each['exchange'] * 1e3:.2f} ms; "
        f"the paper's signatures would verify {n - 1} Ed25519 signatures per client "
        f"({1e6 * each['verify']:.0f} us each), {(n - 1) * each['verify'] * 1e3:.1f} ms "
        "(CPU, one core)"
    )
    return lines


def _fastest(call: Any, number: int = 200, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(number):
            call()
        best = min(best, (time.perf_counter() - began) / number)
    return best


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
    federation = LocalFederation(timeout=600, scheduling="cooperative")
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
    parser.add_argument(
        "--rounds", type=int, default=6, help="rounds of the fit (c keys kept across them)"
    )
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (a first round and a later one)")
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
    rounds = fit_rounds(vectors, plus, args.rounds)
    n, later = args.clients, args.rounds - 1
    ms = 1e3 * rounds["kept"] / n
    first, fresh = 1e3 * rounds["first"] / n, 1e3 * rounds["fresh"] / n
    print(
        f"\nSecAgg+ k={k} over a fit of {args.rounds} rounds, no dropouts (the estimators keep "
        f"each client's c key across rounds): the first round {first:.1f} ms per client; each "
        f"later round {ms:.1f} ms per client (median of {later}), against {fresh:.1f} ms with "
        "c keys drawn every round, alternated with them (goal <= 5 ms per client: "
        f"{'met' if ms <= 5 else 'missed'}); the rows above draw every round's keys; the "
        "consistency round's share is measured below"
    )
    print()
    configs = {"complete graph": config, f"SecAgg+ k={k}": plus}
    for line in consistency_cost(vectors, configs, args.repeats):
        print(line)
    other = flower(args.flower_python, args.clients, args.size, k + 1, plus.threshold)
    print(
        f"\nFlower SecAgg+ (num_shares {k + 1}, threshold {plus.threshold}, 0 % dropouts): {other}"
    )
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f}")


if __name__ == "__main__":
    main()
