"""A party's heavy work on 1 and 2 of its own worker processes and on a Dask cluster.

Prints items per second, in one run and on the same data, of

* Paillier encryption (2048-bit keys: the random powers, the part that splits),
* ``X.T @ ciphertexts`` (10,000 x 24 rows, Pippenger multi-exponentiation),
* the vertical models' gradient product: one batch's signed product over a peer's packed
  encrypted rows (:func:`vfl.crypto.store.signed_multiexp_chunks`, 49-bit multipliers),
* ECDH PSI blinding (X25519, one multiplication per ID),
* Bloom-filter encoding of identities (the cohort's five-field schema),
* Bloom-filter comparison: every pair's exact Dice score above 0.5
  (:func:`linkage.matching.dice_pairs`, without blocking; pairs per second),
* LSH blocking keeping each record's 10 best candidates, on two threads and on Dask (the same
  candidates), and a 10M x 10M link planned from the band rates measured on Dask
  (:meth:`linkage.LshBlocking.forecast`: bands, seconds on 16-256 cores, memory),

with ``workers=1``, ``workers=2`` (this machine's own processes; for the comparison, which
runs in this process on torch's threads, one thread and two) and a two-worker Dask
``LocalCluster`` (one thread each, separate processes: the ``dask`` extra), and Dask's cost as
the ratio of the two-worker rate to the Dask rate (the goal: at most 1.15). Before timing,
every path runs once (pools and fixed-base tables built), so the figures are steady-state
rates; the one-off start costs are printed apart.

Then the projection to a 10-million-row party on 16, 64 and 256 worker cores: each
workload's items for 10M rows (one packed ciphertext per row to encrypt, 24 terms per row of
``X.T @ ciphertexts`` per epoch, one gradient-product term per row and column group per
epoch, two curve multiplications per ID for PSI, one encoding per record, and for the
comparison 10M x 10M pairs, what blocking avoids) over the one-worker rate times the cores
times the parallel efficiency measured between one and two workers (``rate_2 / (2 rate_1)``,
capped at 1) and Dask's measured cost.
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

os.environ.setdefault("VFLINK_PROGRESS", "0")  # rates, not progress bars
# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

import linkage  # noqa: E402
from linkage.matching import dice_pairs  # noqa: E402
from linkage.psi import EcdhPsiParty  # noqa: E402
from vfl.crypto import SecurityWarning, generate_paillier_keypair, matvec  # noqa: E402
from vfl.crypto.store import CiphertextStore, signed_multiexp_chunks  # noqa: E402
from vfl.datasets import identity_schema, make_lab_imaging_cohort  # noqa: E402


def compare_on(a: Any, b: Any, workers: Any) -> object:
    """All pairs above 0.5: on ``workers`` torch threads in this process, or an executor."""
    import torch

    if isinstance(workers, int):
        before = torch.get_num_threads()
        torch.set_num_threads(workers)
        try:
            return dice_pairs(a, b, floor=0.5)
        finally:
            torch.set_num_threads(before)
    return dice_pairs(a, b, floor=0.5, workers=workers)


def lsh_on_dask(client: Any, patients: int) -> None:
    """LSH blocking (keeping each record's 10 best) on this machine's two threads and on the
    Dask cluster, the same candidates; then a 10M x 10M link planned from band rates measured
    on the cluster (:meth:`linkage.LshBlocking.forecast`)."""
    pair = make_lab_imaging_cohort(patients, overlap=0.6, typo_rate=0.2, random_state=2)
    secret = b"a benchmark's linkage secret, 32B"
    a = linkage.encode(pair.lab, identity_schema(), secret=secret)
    b = linkage.encode(pair.imaging, identity_schema(), secret=secret)
    lsh = linkage.LshBlocking(random_state=0, band_bits=32, bands=80, keep_best=10)
    seconds, found = {}, {}
    for label, workers in (("threads", 2), ("dask", client)):
        linkage.block(a, b, lsh, workers=workers)  # warm: the filters scattered once
        started = time.perf_counter()
        found[label] = linkage.block(a, b, lsh, workers=workers)
        seconds[label] = time.perf_counter() - started
    same = np.array_equal(found["threads"].ia, found["dask"].ia) and np.array_equal(
        found["threads"].ib, found["dask"].ib
    )
    print(
        f"\nLSH blocking, {len(a):,} x {len(b):,} records, 80 bands of 32 bits, each record's 10 "
        f"best: two threads {seconds['threads']:.1f} s, Dask x2 {seconds['dask']:.1f} s "
        f"({seconds['dask'] / seconds['threads']:.2f}x); the same {len(found['dask']):,} "
        f"candidate pairs: {same}"
    )
    rows = (10_000_000, 10_000_000)
    for blocking in (lsh, linkage.LshBlocking(random_state=0, keep_best=10)):
        plan = blocking.forecast(a, b, rows, workers=client)
        waves = {cores: -(-plan["bands"] // cores) for cores in (16, 64, 256)}
        print(
            f"  10M x 10M planned from rates measured on Dask "
            f"({plan['seconds_per_record'] * 1e9:.0f} ns a record, "
            f"{plan['seconds_per_collision'] * 1e9:.0f} ns a collision): "
            f"{plan['bands']} bands of {plan['band_bits']} bits (recall {plan['recall']:.3f} at "
            f"Dice {blocking.min_score}), {plan['collisions_per_band']:,.0f} collisions and "
            f"{plan['band_seconds']:.0f} s a band; minutes on 16 / 64 / 256 worker cores: "
            + " / ".join(f"{w * plan['band_seconds'] / 60:.1f}" for w in waves.values())
            + f"; {plan['worker_bytes'] / 2**30:.1f} GiB a task, "
            f"{plan['caller_bytes'] / 2**30:.1f} GiB at the caller"
        )


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
    n_dice = 15_000 if args.quick else 40_000
    n_grad = 8_000 if args.quick else 20_000  # a large batch (the product splits from 4,096)
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
    pair = make_lab_imaging_cohort(n_dice, overlap=0.8, typo_rate=0.2, random_state=1)
    enc_a = linkage.encode(pair.lab, schema, secret=secret)
    enc_b = linkage.encode(pair.imaging, schema, secret=secret)

    began = time.perf_counter()
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = distributed.Client(cluster)
    print(f"Dask LocalCluster (2 worker processes) started in {time.perf_counter() - began:.1f} s")
    vec = public.encrypt(x)
    store = CiphertextStore.of(public, public.raw_encrypt([1] * n_grad, workers=2))
    z = rng.integers(-(2**48), 2**48, size=(n_grad, 1))
    batch = rng.permutation(n_grad)

    ten_million = 10_000_000
    per_row = [1, 24, 1, 2, 1, ten_million]  # items per row of each workload below
    workloads: dict[str, tuple[int, Callable[[Any], object]]] = {
        f"encryption ({n_enc:,} values)": (
            n_enc,
            lambda w: public.raw_encrypt([1] * n_enc, workers=w),
        ),
        f"X.T @ ciphertexts ({rows:,} x 24)": (
            rows * 24,
            lambda w: matvec(X.T, vec, workers=w),
        ),
        f"gradient product ({n_grad:,} rows)": (
            n_grad,
            lambda w: signed_multiexp_chunks(store, batch, z, public.nsquare, w),
        ),
        f"ECDH PSI blinding ({n_psi:,} IDs)": (
            n_psi,
            lambda w: EcdhPsiParty(workers=w).blind(ids),
        ),
        f"Bloom encoding ({n_bloom:,} records)": (
            n_bloom,
            lambda w: linkage.encode(people, schema, secret=secret, workers=w),
        ),
        f"Dice, all pairs ({len(enc_a):,} x {len(enc_b):,})": (
            len(enc_a) * len(enc_b),
            lambda w: compare_on(enc_a, enc_b, w),
        ),
    }
    print(
        f"\n{'items per second':<38}{'1 worker':>14}{'2 workers':>14}{'Dask x2':>14}"
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
            f"{name:<38}{rates['1']:>14,.0f}{rates['2']:>14,.0f}{rates['dask']:>14,.0f}"
            f"{rates['2'] / rates['1']:>7.2f}x{rates['2'] / rates['dask']:>10.2f}x"
        )
    lsh_on_dask(client, 30_000 if args.quick else 150_000)
    client.close()
    cluster.close()
    print("\nprojected for 10M rows (minutes), on Dask with this many worker cores:")
    print(f"{'':<38}{'16':>9}{'64':>9}{'256':>9}")
    for (name, rates), items in zip(measured, per_row, strict=True):
        efficiency = min(1.0, rates["2"] / (2 * rates["1"]))
        dask_cost = rates["2"] / rates["dask"]
        cells = "".join(
            f"{ten_million * items / (rates['1'] * cores * efficiency) * dask_cost / 60:>9.1f}"
            for cores in (16, 64, 256)
        )
        print(f"{name.split(' (')[0]:<38}{cells}")
    print(
        f"\nDask cost: the two-process rate over the Dask rate (goal <= 1.15); load average "
        f"{os.getloadavg()[0]:.2f} at the end"
    )


if __name__ == "__main__":
    main()
