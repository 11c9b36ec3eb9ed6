"""The ``vflink`` console command.

Subcommands arrive with the capabilities they drive; for now:

``vflink cohort --out DIR``
    Write a synthetic lab + imaging cohort (:func:`vfl.datasets.make_lab_imaging_cohort`) as
    ``lab.csv``, ``imaging.csv`` and ``true_pairs.csv`` for trying vflink on files.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import vfl

logger = logging.getLogger("vflink")


def _write_csv_atomically(frame: pd.DataFrame, path: Path, *, index: bool) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            frame.to_csv(handle, index=index)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cohort(args: argparse.Namespace) -> int:
    from vfl.datasets import make_lab_imaging_cohort

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lab, imaging, pairs = make_lab_imaging_cohort(
        args.n_patients, overlap=args.overlap, typo_rate=args.typo_rate, random_state=args.seed
    )
    _write_csv_atomically(lab, out / "lab.csv", index=True)
    _write_csv_atomically(imaging, out / "imaging.csv", index=True)
    _write_csv_atomically(pairs, out / "true_pairs.csv", index=False)
    print(
        f"wrote {out / 'lab.csv'} ({len(lab)} rows), {out / 'imaging.csv'} ({len(imaging)} rows) "
        f"and {out / 'true_pairs.csv'} ({len(pairs)} true pairs)"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vflink",
        description=(
            "Vertical federated learning with privacy-preserving record linkage. "
            "Use the Python API (linkage, vfl) for analyses; this command runs the steps "
            "that need no Python code."
        ),
    )
    parser.add_argument("--version", action="version", version=f"vflink {vfl.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    cohort = sub.add_parser(
        "cohort",
        help="write a synthetic lab + imaging cohort as CSV files",
        description="Write lab.csv, imaging.csv and true_pairs.csv of a synthetic cohort.",
    )
    cohort.add_argument("--out", required=True, help="folder to write into (created if missing)")
    cohort.add_argument("--n-patients", type=int, default=2000, help="distinct patients (2000)")
    cohort.add_argument("--overlap", type=float, default=0.6, help="fraction in both tables (0.6)")
    cohort.add_argument(
        "--typo-rate",
        type=float,
        default=0.2,
        help="fraction of common patients with perturbed identity (0.2)",
    )
    cohort.add_argument("--seed", type=int, default=None, help="simulation seed")
    cohort.set_defaults(handler=_cohort)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vflink`` command; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
        return 0
    try:
        status: int = args.handler(args)
    except (ValueError, OSError) as exc:
        print(f"vflink {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
