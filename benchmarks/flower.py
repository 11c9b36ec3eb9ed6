"""The horizontal path on a Flower deployment at its real size, beside vflink's simulation.

Starts a SuperLink and ``--nodes`` SuperNodes (10) on loopback as their own processes
(:class:`horizontal.flower_local.LocalDeployment`), fits the same model there and in
process for FedAvg, Scaffold, secure aggregation, top-k compression (10%, error feedback)
and 8-bit codes (``--rounds`` rounds, 2; a linear model on the hospital cohort, ``--rows``
rows per hospital), and prints for each: seconds on Flower, seconds in the simulation, their
ratio, and the largest weight difference (the goal: equal, to 1e-5; the 8-bit codes round
with fresh OS randomness at each client, so there the two differ by the codes' rounding).
Flower starts a Python process per message, so most of a round's time on Flower is those
processes' start (about 3.5 s of CPU each here for a training message, mostly imports;
2.4 s for a profile query, which does without torch).

Run::

    python benchmarks/flower.py [--nodes 10] [--rounds 2] [--rows 150] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

from horizontal import FederatedClassifier, Scaffold, SecAggConfig  # noqa: E402
from horizontal.flower_local import LocalDeployment  # noqa: E402
from vfl.datasets import make_hospital_cohort  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=150)
    parser.add_argument(
        "--only", choices=["fedavg", "scaffold", "secagg", "top-k", "8-bit"], default=None
    )
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f}")
    cohort = make_hospital_cohort(args.nodes, args.rows, random_state=0)
    clients = {n: (f.drop(columns=["diagnosis"]), f["diagnosis"]) for n, f in cohort.items()}
    base = {"module": "linear", "max_iter": args.rounds, "learning_rate": 0.1}
    base |= {"random_state": 0, "timeout": 600}
    settings = {
        "fedavg": {"strategy": "fedavg"},
        "scaffold": {"strategy": Scaffold(), "local_epochs": 2},
        "secagg": {"strategy": "fedavg", "protocol": SecAggConfig(threshold=args.nodes // 2 + 1)},
        "top-k": {"strategy": "fedavg", "compression": 0.1},
        "8-bit": {"strategy": "fedavg", "compression": 8},
    }
    print(
        f"\n{args.nodes} SuperNodes, {args.rounds} rounds, {args.rows} rows each "
        "(seconds of the fit; the deployment's start counted once, below)"
    )
    print(f"{'':<10}{'Flower s':>10}{'vflink s':>10}{'ratio':>9}{'max |dw|':>11}  equal (1e-5)")
    began = time.perf_counter()
    with LocalDeployment(args.nodes) as flower:
        started = time.perf_counter() - began
        for name, extra in settings.items():
            if args.only and name != args.only:
                continue
            params = base | extra
            t0 = time.perf_counter()
            on_flower = flower.fit(FederatedClassifier(**params), clients)
            t1 = time.perf_counter()
            own = FederatedClassifier(**params).fit(clients)
            t2 = time.perf_counter()
            gap = float(np.abs(on_flower.weights_ - own.weights_).max())
            print(
                f"{name:<10}{t1 - t0:>10.1f}{t2 - t1:>10.2f}{(t1 - t0) / (t2 - t1):>8.0f}x"
                f"{gap:>11.1e}  "
                + ("(random codes)" if name == "8-bit" else "yes" if gap <= 1e-5 else "NO")
            )
    print(f"deployment start: {started:.1f} s; stopped, every process gone")
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f}")


if __name__ == "__main__":
    main()
