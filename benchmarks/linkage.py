"""Record linkage and PSI speed and quality on the synthetic cohort (work in progress, issue 4).

Prints: encoding rate, unblocked Dice comparisons per second, precision / recall / F1 at the
automatic threshold against the best threshold in hindsight, ECDH-PSI and HMAC-join times.
Comparisons with clkhash + anonlink and the blocked 100k x 100k run come with issue 4's
blocking work.

Run::

    python benchmarks/linkage.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path

# this script shares its name with the linkage package: keep its own folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

from linkage import (  # noqa: E402
    dice_pairs,
    encode,
    evaluate,
    match,
    psi_intersection,
)
from vfl.datasets import identity_schema, make_lab_imaging_cohort  # noqa: E402

SCHEMA = identity_schema()


def main() -> None:
    parser = argparse.ArgumentParser(description="linkage speed and quality")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    secret = secrets.token_bytes(32)
    n = 10_000 if args.quick else 30_000
    lab, imaging, truth = make_lab_imaging_cohort(n, overlap=0.6, typo_rate=0.2, random_state=0)
    started = time.perf_counter()
    enc_a, enc_b = encode(lab, SCHEMA, secret=secret), encode(imaging, SCHEMA, secret=secret)
    elapsed = time.perf_counter() - started
    total = len(lab) + len(imaging)
    print(f"encode: {total} records in {elapsed:.2f} s ({total / elapsed:,.0f} records/s)")
    started = time.perf_counter()
    dice_pairs(enc_a, enc_b, floor=0.5)
    elapsed = time.perf_counter() - started
    rate = len(enc_a) * len(enc_b) / elapsed / 1e6
    print(f"Dice, unblocked, floor 0.5 (the length filter prunes few pairs): {rate:.0f} M pairs/s")
    started = time.perf_counter()
    links = match(enc_a, enc_b)
    elapsed = time.perf_counter() - started
    auto = evaluate(links, truth)
    best_f1, best_t = max(
        (evaluate(match(enc_a, enc_b, threshold=t), truth)["f1"], t)
        for t in np.arange(0.75, 0.96, 0.01)
    )
    print(
        f"match {len(enc_a)} x {len(enc_b)} (unblocked, length filter at 0.5): {elapsed:.1f} s; "
        f"automatic threshold {links.attrs['threshold']:.3f}: precision {auto['precision']:.4f} "
        f"recall {auto['recall']:.4f} F1 {auto['f1']:.4f}; "
        f"best threshold {best_t:.2f}: F1 {best_f1:.4f}"
    )
    for n_a, n_b in (
        ((10_000, 10_000), (1_000, 100_000))
        if args.quick
        else ((100_000, 100_000), (1_000, 1_000_000))
    ):
        ids_a = [f"P{i}" for i in range(n_a)]
        ids_b = [f"P{i}" for i in range(n_a // 2, n_a // 2 + n_b)]
        for method in ("ecdh", "hmac"):
            started = time.perf_counter()
            pairs = psi_intersection(ids_a, ids_b, method=method)
            print(
                f"PSI {method:<4} {n_a:>9,} x {n_b:>9,}: {time.perf_counter() - started:6.1f} s "
                f"(both parties in one process, one core each in turn), {len(pairs):,} common"
            )


if __name__ == "__main__":
    main()
