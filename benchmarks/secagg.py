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

Flower's SecAgg+ is not measured here (it needs ``flwr`` in its own environment, and this
script does not drive it yet): the issue's comparison with it is left open.

Run::

    python benchmarks/secagg.py [--clients 100] [--size 100000] [--threshold-fraction 0.5]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

from horizontal.secagg import SecAggConfig, client_round, server_round  # noqa: E402
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
    return timing


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--threshold-fraction", type=float, default=0.5)
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
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f}")


if __name__ == "__main__":
    main()
