"""A party's heavy work on 1 and 2 of its own worker processes and on a Dask cluster.

Prints items per second, in one run and on the same data, of

* Paillier encryption (2048-bit keys: the random powers, the part that splits),
* ``X.T @ ciphertexts`` (10,000 x 24 rows, Pippenger multi-exponentiation),
* ECDH PSI blinding (X25519, one multiplication per ID),
* Bloom-filter encoding of identities (the cohort's five-field schema),

with ``workers=1``, ``workers=2`` (this machine's own processes) and a two-worker Dask
``LocalCluster`` (one thread each, separate processes: the ``dask`` extra), and Dask's cost as
the ratio of the two-process rate to the Dask rate (the goal: at most 1.15). Before timing,
every path runs once (pools and fixed-base tables built), so the figures are steady-state
rates; the one-off start costs are printed apart.

Then the projection to a 10-million-row party on 16, 64 and 256 worker cores: each
workload's items for 10M rows (one packed ciphertext per row to encrypt, 24 terms per row of
``X.T @ ciphertexts`` per epoch, two curve multiplications per ID for PSI, one encoding per
record) over the one-worker rate times the cores times the parallel efficiency measured
between one and two workers (``rate_2 / (2 rate_1)``, capped at 1) and Dask's measured cost.
It assumes that efficiency holds beyond two cores, which one machine cannot check.

Run::

    python benchmarks/scale.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

import linkage  # noqa: E402
from linkage.psi import EcdhPsiParty  # noqa: E402
from vfl.crypto import SecurityWarning, generate_paillier_keypair, matvec  # noqa: E402
from vfl.datasets import identity_schema, make_lab_imaging_cohort  # noqa: E402


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - began)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller batches")
    args = parser.parse_args()
    import distributed

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    n_enc = 2_000 if args.quick else 8_000
    rows = 2_000 if args.quick else 10_000
    n_psi = 40_000 if args.quick else 200_000
    n_bloom = 60_000 if args.quick else 300_000
    repeats = 2 if args.quick else 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        public, _ = generate_paillier_keypair(2048)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(rows)
    X = rng.standard_normal((rows, 24))
    ids = [f"P{i:09d}" for i in range(n_psi)]
    people = make_lab_imaging_cohort(n_bloom, overlap=1.0, typo_rate=0.0, random_state=0).lab
    schema, secret = identity_schema(), b"a benchmark's linkage secret, 32B"

    began = time.perf_counter()
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = distributed.Client(cluster)
    print(f"Dask LocalCluster (2 worker processes) started in {time.perf_counter() - began:.1f} s")
    vec = public.encrypt(x)

    ten_million = 10_000_000
    per_row = [1, 24, 2, 1]  # items per row of each workload below
    workloads: dict[str, tuple[int, Callable[[Any], object]]] = {
        f"encryption ({n_enc:,} values)": (
            n_enc,
            lambda w: public.raw_encrypt([1] * n_enc, workers=w),
        ),
        f"X.T @ ciphertexts ({rows:,} x 24)": (
            rows * 24,
            lambda w: matvec(X.T, vec, workers=w),
        ),
        f"ECDH PSI blinding ({n_psi:,} IDs)": (
            n_psi,
            lambda w: EcdhPsiParty(workers=w).blind(ids),
        ),
        f"Bloom encoding ({n_bloom:,} records)": (
            n_bloom,
            lambda w: linkage.encode(people, schema, secret=secret, workers=w),
        ),
    }
    print(
        f"\n{'items per second':<34}{'1 worker':>11}{'2 workers':>11}{'Dask x2':>11}"
        f"{'2 / 1':>8}{'Dask cost':>11}"
    )
    measured: list[tuple[str, dict[str, float]]] = []
    for name, (count, run) in workloads.items():
        rates = {}
        for label, workers in (("1", 1), ("2", 2), ("dask", client)):
            started = time.perf_counter()
            run(workers)  # warm: pools, per-worker fixed-base tables
            warm = time.perf_counter() - started
            rates[label] = count / best_seconds(lambda r=run, w=workers: r(w), repeats)
            if label == "dask":
                rates["warm"] = warm
        measured.append((name, rates))
        print(
            f"{name:<34}{rates['1']:>11,.0f}{rates['2']:>11,.0f}{rates['dask']:>11,.0f}"
            f"{rates['2'] / rates['1']:>7.2f}x{rates['2'] / rates['dask']:>10.2f}x"
        )
    client.close()
    cluster.close()
    print("\nprojected for 10M rows (minutes), on Dask with this many worker cores:")
    print(f"{'':<34}{'16':>9}{'64':>9}{'256':>9}")
    for (name, rates), items in zip(measured, per_row, strict=True):
        efficiency = min(1.0, rates["2"] / (2 * rates["1"]))
        dask_cost = rates["2"] / rates["dask"]
        cells = "".join(
            f"{ten_million * items / (rates['1'] * cores * efficiency) * dask_cost / 60:>9.1f}"
            for cores in (16, 64, 256)
        )
        print(f"{name.split(' (')[0]:<34}{cells}")
    print(
        f"\nDask cost: the two-process rate over the Dask rate (goal <= 1.15); load average "
        f"{os.getloadavg()[0]:.2f} at the end"
    )


if __name__ == "__main__":
    main()
