"""A million-row vertical cohort end to end, stage by stage: seconds and peak memory.

A synthetic lab + imaging cohort of ``--rows`` patients in each table (80 % in both;
identities with typos) goes through every stage of a real run, every party simulated in this
process with 2048-bit keys and both cores (``workers=2``):

1. the cohort (the simulation itself, for scale);
2. alignment by ECDH PSI on the exact ID (:func:`vfl.align`, both parties' blinding);
3. Bloom-filter linkage of the identities with LSH blocking (30 bands of 40 bits) and the
   automatic threshold (encode both, block, score, match);
4. one epoch of vertical logistic regression by the gradient-revealing coordinator protocol
   and by the secret-shared protocol (batches of 10,000 rows; the setup, which encrypts the
   feature rows once, counted in the fit), on the PSI-aligned rows;
5. scoring every aligned row with the secret-shared model.

Peak memory is the largest resident set size of the process seen during the stage (sampled
every 0.2 s from ``/proc/self/statm``, Linux), which includes what earlier stages left
allocated; "added" is that peak over the resident size when the stage began. Beside the sum
of every stage it prints what one deployment runs, against the goal of 20 minutes: one
alignment (PSI, or the Bloom linkage), one fit with the default secret-shared protocol, and
the scoring. Run::

    python benchmarks/million.py [--rows 1000000] [--protocols shared]
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import linkage  # noqa: E402
from vfl import align  # noqa: E402
from vfl.datasets import (  # noqa: E402
    IMAGING_FEATURES,
    LAB_FEATURES,
    LABEL,
    identity_schema,
    make_lab_imaging_cohort,
)
from vfl.linear import VerticalLogisticRegression  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@contextmanager
def stage(name: str, table: list[tuple[str, float, float, float]]) -> Iterator[None]:
    start = rss()
    peak = [start]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - began
        done.set()
        sampler.join()
        peak[0] = max(peak[0], rss())
        table.append((name, seconds, peak[0] / 2**30, (peak[0] - start) / 2**30))
        print(
            f"  {name:<52}{seconds:>9.1f} s{peak[0] / 2**30:>8.2f} GiB "
            f"(+{(peak[0] - start) / 2**30:.2f})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="patients per table")
    parser.add_argument(
        "--protocols",
        nargs="*",
        default=["coordinator", "shared"],
        help="vertical LR protocols to train (default both)",
    )
    parser.add_argument("--no-scoring", action="store_true", help="skip the scoring stage")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds a party waits for a message (default: the estimator's, which grows "
        "with the rows: vfl.estimator.wait_limit)",
    )
    args = parser.parse_args()
    n = args.rows
    print(f"{n:,} rows per table, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    table: list[tuple[str, float, float, float]] = []
    warnings.simplefilter("ignore")  # convergence notes after one epoch

    with stage("cohort (simulation)", table):
        lab, imaging, truth = make_lab_imaging_cohort(
            int(n / 0.9), overlap=0.8, typo_rate=0.2, random_state=0
        )
    print(f"  lab {len(lab):,} rows, imaging {len(imaging):,}, in both {len(truth):,}")

    with stage("PSI alignment (both parties)", table):
        aligned = align(
            {"lab": lab.reset_index(), "imaging": imaging.reset_index()},
            method="psi",
            id_column="patient_id",
        )

    with stage("Bloom linkage, LSH blocking, automatic threshold", table):
        secret = secrets.token_bytes(32)
        schema = identity_schema()
        a = linkage.encode(lab, schema, secret=secret)
        b = linkage.encode(imaging, schema, secret=secret)
        lsh = linkage.LshBlocking(random_state=0, bands=30, band_bits=40)
        links = linkage.match(a, b, blocking=lsh)
    quality = linkage.evaluate(links, truth)
    print(
        f"  linked {len(links):,}: precision {quality['precision']:.3f}, "
        f"recall {quality['recall']:.3f}"
    )

    parts = {
        "imaging": aligned["imaging"][IMAGING_FEATURES],
        "lab": aligned["lab"][LAB_FEATURES],
    }
    y = aligned["imaging"][LABEL]
    models: dict[str, Any] = {}
    for protocol in args.protocols:
        model = VerticalLogisticRegression(
            protocol=protocol,
            batch_size=10_000,
            max_iter=1,
            tol=None,
            workers=2,
            timeout=args.timeout,
        )
        with stage(f"vertical LR, {protocol}: setup + 1 epoch ({len(y):,} rows)", table):
            model.fit(parts, y, label_party="imaging")
        models[protocol] = model
    if not args.no_scoring and models:
        last = list(models)[-1]
        score: Callable[[], Any] = lambda: models[last].predict_proba(parts)  # noqa: E731
        with stage(f"scoring every aligned row ({last} model)", table):
            score()

    total = sum(s for _, s, _, _ in table[1:])
    print(f"\n{'stage':<52}{'seconds':>9}{'peak GiB':>10}{'added GiB':>11}")
    for name, seconds, peak, added in table:
        print(f"{name:<52}{seconds:>9.1f}{peak:>10.2f}{added:>11.2f}")
    print(f"{'every stage (without the simulation)':<52}{total:>9.1f}")
    # what one deployment runs: one alignment, one fit (the default protocol), the scoring
    seconds = {name: s for name, s, _, _ in table}
    fit = next((s for name, s in seconds.items() if name.startswith("vertical LR, shared")), None)
    scored = next((s for name, s in seconds.items() if name.startswith("scoring")), None)
    if fit is not None and scored is not None:
        for how in ("PSI alignment", "Bloom linkage"):
            align_s = next(s for name, s in seconds.items() if name.startswith(how))
            one_run = align_s + fit + scored
            print(
                f"one run: {how}, the default secret-shared fit, scoring: {one_run:.0f} s "
                f"({one_run / 1200:.2f}x the goal of 20 minutes)"
            )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
