"""The ``vflink`` console command.

Subcommands arrive with the capabilities they drive; for now:

``vflink cohort --out DIR``
    Write a synthetic lab + imaging cohort (:func:`vfl.datasets.make_lab_imaging_cohort`) as
    ``lab.csv``, ``imaging.csv``, ``true_pairs.csv`` and ``identity_schema.json`` (the
    :class:`linkage.Schema` of the identity columns) for trying vflink on files.

``vflink compare [--quick] [--seed N] [--out DIR] [--schemes NAME ...]``
    Run every partition scheme on one synthetic population and print the side-by-side table
    (:func:`vfl.app.compare.compare`): AUC, epsilon, attack success, seconds and bytes per
    scheme, and what each party learns; write the table (``.txt``, ``.csv``) and the figure
    (AUC against privacy loss) into ``--out``. Under five minutes on two cores; ``--quick``
    about a minute.

``vflink certs --out DIR (--config FILE | --parties NAME ...)``
    Create a federation CA and a key and certificate per party, for pilots
    (:func:`vfl.federation.certs.make_certificates`).

``vflink party --config FILE --name NAME [--data CSV] [--out DIR] [--cert F --key F]
[--secret-file F]``
    Run one party's side of the config's job over gRPC with mutual TLS (:mod:`vfl.app.party`):
    alignment, training, prediction. Exits 0 on success; otherwise prints the error (naming
    the party or peer at fault) and exits non-zero, having written no output.

``vflink party --config FILE --name NAME --predict [--data CSV --model model_NAME.npz]
[--out DIR] ...``
    Score new rows with the parts a training run saved (:func:`vfl.app.predict.run_predict`): every
    party runs it (each data party with its new file and its own ``model_<party>.npz``, the
    coordinator with neither); the rows are aligned as in training and only the label party
    learns the scores (``predictions.csv``, and ``metrics.json`` when its file holds labels).
    A transfer job's target scores its new rows alone, contacting no peer
    (:func:`vfl.app.transfer.run_transfer_predict`); its source has nothing to do.

A party fails fast and plainly (:mod:`vfl.app.drive`): an error in its command line, its files,
its model file or its own certificate is logged at once, before any peer is contacted, and
told to the peers that come up within seconds; a peer whose certificate the federation's CA
did not sign is named as such (:mod:`vfl.federation.trust`); a peer that fails is named with
its reason. Exit statuses: 0 done, 2 this party's own input, 3 a peer or the federation, 130
interrupted (SIGTERM, Ctrl-C). gRPC's own log (every refused TLS handshake, retried) is off in
a party process: ``GRPC_VERBOSITY=ERROR vflink party ...`` brings it back. No process outlives
a party, however it ends: its worker processes end with it (:mod:`linkage.workers`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import vfl

logger = logging.getLogger("vflink")


def _cohort(args: argparse.Namespace) -> int:
    from vfl.datasets import make_lab_imaging_cohort

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lab, imaging, pairs = make_lab_imaging_cohort(
        args.n_patients, overlap=args.overlap, typo_rate=args.typo_rate, random_state=args.seed
    )
    from vfl.datasets import identity_schema
    from vfl.files import write_atomically

    write_atomically(out / "lab.csv", lab.to_csv(index=True))
    write_atomically(out / "imaging.csv", imaging.to_csv(index=True))
    write_atomically(out / "true_pairs.csv", pairs.to_csv(index=False))
    schema = out / "identity_schema.json"
    write_atomically(schema, identity_schema().to_json())
    print(
        f"wrote {out / 'lab.csv'} ({len(lab)} rows), {out / 'imaging.csv'} ({len(imaging)} rows), "
        f"{out / 'true_pairs.csv'} ({len(pairs)} true pairs) and the identity columns' "
        f"linkage schema {schema}"
    )
    return 0


def _compare(args: argparse.Namespace) -> int:
    from vfl.app.compare import compare

    def report(row: Any) -> None:
        print(f"  {row.scheme:<45} AUC {row.auc:.3f}  {row.seconds:6.1f} s", flush=True)

    mode = "quick" if args.quick else "full"
    print(f"comparing the partition schemes ({mode} settings, seed {args.seed}):", flush=True)
    result = compare(quick=args.quick, seed=args.seed, schemes=args.schemes, progress=report)
    print()
    print(result)
    written = result.save(args.out)
    print(f"\nwrote {', '.join(str(p) for p in written)}")
    return 0


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _certs(args: argparse.Namespace) -> int:
    from vfl.federation.certs import make_certificates

    if args.config:
        from vfl.federation.config import FederationConfig

        names = list(FederationConfig.load(args.config, check_files=False).parties)
    elif args.parties:
        names = list(args.parties)
    else:
        raise ValueError("name the parties: --config FILE or --parties NAME [NAME ...]")
    paths = make_certificates(args.out, names, hosts=args.host or ("localhost", "127.0.0.1"))
    print(f"wrote a CA and certificates for {', '.join(names)} into {Path(args.out)}")
    logger.info("files: %s", {k: str(v) for k, v in paths.items()})
    return 0


def _party(args: argparse.Namespace) -> int:
    from vfl.federation.config import FederationConfig

    config = FederationConfig.load(args.config)
    try:  # the command line first, in a second: before the job's modules load (pandas, ...)
        config.check_arguments(args.name, model=args.model, predict=args.predict)
        secret = _secret(args.secret_file)
    except ValueError as exc:  # say so at once, then tell the peers that come up why
        logger.error("party %r refuses to start: %s", args.name, exc)
        from vfl.app.party import job_runner

        # a transfer job's --predict contacts no peer (its target scores alone): none to tell
        if not (args.predict and job_runner(config) == "transfer"):
            config.stop_peers(args.name, str(exc), cert=args.cert, key=args.key)
        raise
    from vfl.app.party import run_party
    from vfl.app.predict import run_predict

    where = dict(data=args.data, out=args.out, cert=args.cert, key=args.key, secret=secret)
    if args.predict:
        summary = run_predict(config, args.name, model=args.model, **where)
    else:
        summary = run_party(config, args.name, **where)
    scored = " scored" if args.predict else ""
    line = f"party {args.name!r} done: {summary['rows']} common rows{scored}"
    alone = summary.get("scored_alone_by")  # a transfer job's --predict: the target alone
    if alone is not None:
        line = f"party {args.name!r} done: " + (
            f"{summary['rows']} rows scored alone"
            if alone == args.name
            else f"nothing to score (party {alone!r}, the target, scores alone)"
        )
    auc, accuracy, r2 = (summary.get(k) for k in ("test_auc", "test_accuracy", "test_r2"))
    if auc is not None:  # a binary classifier
        line += f", test AUC {auc:.4f}"
    elif accuracy is not None:  # multiclass
        line += f", test accuracy {accuracy:.4f}"
    elif r2 is not None:
        line += f", test R^2 {r2:.4f}"
    elif "test_auc" in summary or "test_r2" in summary:
        line += ", no test metric (no held-out rows, or one class among them)"
    if summary.get("outputs"):
        line += f"; wrote {', '.join(summary['outputs'])} in {Path(args.out)}"
    print(line)
    return 0


def _secret(path: str | None) -> str | None:
    """The data parties' linkage secret from ``--secret-file`` (None without one)."""
    if not path:
        return None
    try:
        secret = Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the secret file {path}: {exc}") from None
    if not secret:
        raise ValueError(f"the secret file {path} is empty")
    return secret


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
        description=(
            "Write lab.csv, imaging.csv, true_pairs.csv and identity_schema.json (the linkage "
            "schema of the identity columns) of a synthetic cohort."
        ),
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

    comparison = sub.add_parser(
        "compare",
        help="run every partition scheme on one synthetic population, side by side",
        description=(
            "Centralised, each party alone, vertical LR (each protocol), split NN (each "
            "defence), federated transfer, horizontal FedAvg/FedProx (with DP and secure "
            "aggregation) on one population: AUC, epsilon, attack success, seconds, bytes."
        ),
    )
    comparison.add_argument(
        "--quick", action="store_true", help="small population, 1024-bit demo keys (~1 min)"
    )
    comparison.add_argument("--seed", type=int, default=0, help="population and model seed (0)")
    comparison.add_argument(
        "--out", default="vflink-demo", help="folder for the table and figure (vflink-demo)"
    )
    comparison.add_argument(
        "--schemes",
        nargs="+",
        metavar="NAME",
        help="only these schemes or families (vertical, split, transfer, horizontal, ...)",
    )
    comparison.set_defaults(handler=_compare)

    certs = sub.add_parser(
        "certs",
        help="create a federation CA and per-party keys and certificates (pilots)",
        description="Write ca.pem, ca.key and <party>.pem, <party>.key into a folder.",
    )
    certs.add_argument("--out", required=True, help="folder to write into (created if missing)")
    certs.add_argument("--config", help="take the party names from this federation config")
    certs.add_argument("--parties", nargs="+", metavar="NAME", help="the party names")
    certs.add_argument(
        "--host",
        action="append",
        help="extra DNS name or IP for every certificate (repeatable; localhost and 127.0.0.1)",
    )
    certs.set_defaults(handler=_certs)

    party = sub.add_parser(
        "party",
        help="run one party of a federated job over gRPC with mutual TLS",
        description="Run one party's side of the job in a federation config (see vfl.app.party).",
    )
    party.add_argument("--config", required=True, help="the federation's TOML config")
    party.add_argument("--name", required=True, help="this party's name in the config")
    party.add_argument("--data", help="this party's data file (CSV); not for the coordinator")
    party.add_argument("--out", default=".", help="folder for this party's outputs (.)")
    party.add_argument("--cert", help="this party's certificate (overrides the config)")
    party.add_argument("--key", help="this party's private key (overrides the config)")
    party.add_argument(
        "--secret-file",
        help='the data parties\' shared linkage secret (align = "bloom"; or set '
        "VFLINK_LINKAGE_SECRET)",
    )
    party.add_argument(
        "--predict",
        action="store_true",
        help="score new rows with the saved parts instead of training (every party)",
    )
    party.add_argument(
        "--model",
        help="with --predict: this party's saved part, model_<party>.npz (not the coordinator)",
    )
    party.set_defaults(handler=_party)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vflink`` command; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(  # a party process logs its progress; other commands only when -v
        level=logging.INFO if args.verbose or args.command == "party" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # warnings (a diverged or unconverged fit, labels that look like counts) go to the log
    # with everything else, as WARNING lines of the "py.warnings" logger
    logging.captureWarnings(True)
    if args.command is None:
        parser.print_help()
        return 0
    from vfl.federation import FederationError

    if args.command == "party":  # a service manager's stop: shut down cleanly, tell the peers
        signal.signal(signal.SIGTERM, _terminate)
        # gRPC's core logs every refused TLS handshake of every retry (146 lines for a peer
        # with another CA's certificate); the party names such a peer itself, once. Read by
        # gRPC when it is imported: only then does this take effect.
        if "grpc" not in sys.modules:
            os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    try:
        status: int = args.handler(args)
    except (ValueError, OSError) as exc:
        print(f"vflink {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (FederationError, TimeoutError) as exc:
        print(f"vflink {args.command}: federation error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(f"vflink {args.command}: interrupted", file=sys.stderr)
        return 130
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
