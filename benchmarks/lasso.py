"""Federated Lasso against scikit-learn's coordinate descent on the pooled rows.

Prints, after the machine's load, for ``p`` = 500 and 5,000 markers (10 true) over 10
hospitals of 200 patients each (``--clients``, ``--rows``): the reference optimum from
scikit-learn's ``Lasso`` at ``tol=1e-12`` (untimed); the seconds scikit-learn's coordinate
descent takes on the pooled data at ``tol=1e-6``; and the seconds
:class:`horizontal.FederatedLasso` takes (FISTA, every party a thread of this process,
stopping when no coefficient moves more than ``1e-5``), with secure aggregation off and on
(threshold 6). With each, the rounds and the objective gap to the optimum (the goal: within
1e-6).

Run::

    python benchmarks/lasso.py [--clients 10] [--rows 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
from sklearn.linear_model import Lasso  # noqa: E402

from horizontal.lasso import FederatedLasso  # noqa: E402
from horizontal.secagg import SecAggConfig  # noqa: E402


def objective(
    x: np.ndarray, y: np.ndarray, coef: np.ndarray, intercept: float, alpha: float
) -> float:
    residual = y - x @ coef - intercept
    return float(residual @ residual / (2 * len(y)) + alpha * np.abs(coef).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rows", type=int, default=200)
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    rng = np.random.default_rng(0)
    for p in (500, 5000):
        truth = np.zeros(p)
        truth[:10] = rng.choice([-1.0, 1.0], size=10) * rng.uniform(0.5, 2.0, size=10)
        n = args.clients * args.rows
        x = rng.normal(size=(n, p))
        y = x @ truth + rng.normal(size=n)
        alpha = 0.1
        clients = {
            f"hospital_{k}": (
                x[k * args.rows : (k + 1) * args.rows],
                y[k * args.rows : (k + 1) * args.rows],
            )
            for k in range(args.clients)
        }
        reference = Lasso(alpha=alpha, tol=1e-12, max_iter=100_000).fit(x, y)
        best = objective(x, y, reference.coef_, reference.intercept_, alpha)
        began = time.perf_counter()
        pooled = Lasso(alpha=alpha, tol=1e-6, max_iter=100_000).fit(x, y)
        sk_seconds = time.perf_counter() - began
        sk_gap = objective(x, y, pooled.coef_, pooled.intercept_, alpha) - best
        print(
            f"\np = {p}, {args.clients} clients x {args.rows} rows, alpha {alpha}: scikit-learn "
            f"Lasso (coordinate descent, pooled) {sk_seconds:.2f} s, objective gap {sk_gap:.1e}"
        )
        for label, secure in (
            ("federated", "plain"),
            ("federated + secure aggregation", SecAggConfig(threshold=6)),
        ):
            model = FederatedLasso(alpha=alpha, tol=1e-5, max_iter=20_000, protocol=secure)
            began = time.perf_counter()
            model.fit(clients)
            seconds = time.perf_counter() - began
            gap = objective(x, y, model.coef_, model.intercept_, alpha) - best
            print(
                f"  {label:<32}{seconds:8.2f} s  {model.n_iter_:5d} rounds  objective gap "
                f"{gap:.1e}  ({seconds / sk_seconds:.1f}x scikit-learn)"
            )
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f}")


if __name__ == "__main__":
    main()
