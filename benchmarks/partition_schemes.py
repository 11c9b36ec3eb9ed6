"""Every partition scheme's cost against the centralised baseline of the same run.

Runs :func:`vfl.app.compare.compare` (the table of ``examples/partition_schemes.py``) and prints,
per scheme, against the centralised logistic regression measured in the same run on the same
population: the AUC gap, the seconds, the bytes every party sent and their ratio to what
handing the rows over would cost (the centralised row's bytes: the features and labels as
float64), and the privacy loss. The per-scheme details (key sizes, batch sizes, protocols at
scale) are in ``benchmarks/vfl_lr.py``, ``split.py``, ``transfer.py``, ``horizontal.py``,
``secagg.py`` and ``label_leak.py``.

Run::

    python benchmarks/partition_schemes.py [--quick] [--seed 0] [--out FOLDER]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from vfl.app.compare import compare  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick settings (~1 min)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the table and figure into this folder")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    began = time.perf_counter()
    result = compare(quick=args.quick, seed=args.seed)
    wall = time.perf_counter() - began
    print(result)
    if args.out:
        result.save(args.out)
    base = result["centralised LR"]
    print(
        f"\nagainst centralised LR (AUC {base.auc:.3f}, {base.seconds:.2f} s, handing the rows "
        f"over {base.total_bytes / 1e6:.2f} MB):\n"
    )
    print(f"{'scheme':<46}{'AUC gap':>8}{'seconds':>9}{'MB sent':>9}{'x rows':>8}{'loss':>6}")
    for row in result.results:
        print(
            f"{row.scheme:<46}{row.auc - base.auc:>+8.3f}{row.seconds:>9.1f}"
            f"{row.total_bytes / 1e6:>9.2f}{row.total_bytes / base.total_bytes:>8.1f}"
            f"{row.privacy_loss:>6.2f}"
        )
    trained = sum(r.seconds for r in result.results)
    print(
        f"\n{len(result)} schemes in {wall:.0f} s wall ({trained:.0f} s of training; the rest "
        f"is linkage, scoring and the attacks); load average "
        f"{load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
