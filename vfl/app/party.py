"""One party's side of a vertical job, as ``vflink party`` runs it in deployment.

The ``[job]`` table of the federation config says what to run; every party runs the same job
with its own data file::

    [job]
    id_column = "patient_id"      # exact ID column for the alignment (ECDH PSI)
    label_column = "diagnosis"    # in the active party's file
    align = "psi"                 # or "bloom": fuzzy identity linkage by the coordinator;
                                  # or "unbalanced": a small party against a very large one
    # schema = "identity_schema.json"   # "bloom": the linkage.Schema (Schema.to_json)
    # threshold = 0.8                   # "bloom": match threshold (else chosen from the scores)
    # max_ambiguous = 0.01              # "bloom": refuse when more of the common patients
                                        # were linked by a tie (vfl.align_party)
    test_fraction = 0.3           # common rows held out for the test AUC
    split_seed = 0                # the same split at every party (no message needed)

    # [job.unbalanced]            # align = "unbalanced" (vfl.align_unbalanced): an OPRF
    # server = "registry"         # the data party with the large set (and the OPRF key)
    # max_evaluations = 12000     # the IDs the other party may test, probes included
    # max_queries = 1             # optional: alignments it may run (across jobs: ledger)
    # ledger = "upsi_ledger.json" # optional, the server's: counts kept across jobs
    # probes = 32                 # the client's check of the server's key (0: none)

    model = "logistic"            # the learner, from the registry the families fill
                                  # (vfl.registry; vfl.jobs, transfer.jobs):
                                  # "logistic": binary or multiclass; "linear": regression;
                                  # "poisson": counts; "split": a split neural network,
                                  # vfl.split; "transfer": federated transfer learning, its
                                  # own stages in vfl.app.transfer

    [job.params]                  # the learner's keyword arguments ("none" for None)
    max_iter = 10
    batch_size = 256

    # [job.params.privacy]        # label DP (logistic; needs tol = "none"): the privacy=
    # mechanism = "gaussian_label_dp"   # object (vfl.jobs; label_epsilon = 4.0 is short
    # epsilon = 4.0                     # for this table)

Steps: align the data parties' rows to their common patients (:func:`vfl.align_party`): by
ECDH PSI on the exact ``id_column`` (three or more data parties: with the coordinator's help,
each learning only the common intersection and the set sizes), or with ``align = "bloom"``
by Bloom-filter encodings of the schema's identity columns, linked by the coordinator, which
never has the data parties' shared secret (each data party reads it from ``--secret-file`` or
the ``VFLINK_LINKAGE_SECRET`` environment variable: it must not be in the shared config);
with ``"bloom"`` the ``id_column`` is only each party's own row ID in the outputs, the common
order is reproducible when the coordinator has a key of its own in ``VFLINK_ORDER_KEY``
(random otherwise), and the coordinator refuses to go on when more than ``max_ambiguous`` of
the common patients were linked by a tie. With ``align = "unbalanced"`` (two data parties)
the party named ``server`` in ``[job.unbalanced]`` draws a fresh OPRF key for the job, sends
its prepared set and answers the other party's blinded IDs within ``max_evaluations`` (a
client past it is refused by name), and the client tells it the matches: both end with the
common rows in PSI's reproducible order, each learning the intersection and the other's set
size, as with ECDH PSI (:mod:`vfl.align_unbalanced`). Then the label party draws the test rows from
``split_seed`` (stratified by class for a classifier) and sends the other
parties their aligned positions; with PSI's reproducible common order, one config gives the
same split run after run. Train the job's estimator (by default the
secret-shared protocol: ``"shared_coordinator"`` when the config has a coordinator, else
``"shared"``; three or more data parties must name ``protocol = "coordinator"`` in
``[job.params]``, accepting that it reveals each party its gradient); score the test
rows, which only the active party learns; the active party evaluates them (the job's metrics:
test AUC and accuracy for ``logistic``, R^2 and RMSE for ``linear``).

:func:`run_party` runs the stages in order -- :func:`~vfl.app.plan.plan` (every check that
needs no peer), :func:`~vfl.app.plan.read_data`, :func:`align_rows`, :func:`split_rows`,
:func:`train`, :func:`score`, :func:`outputs` -- each a function of its own; a job whose
:attr:`~vfl.registry.Job.runner` is ``"transfer"`` runs :func:`vfl.app.transfer.run_transfer_party`
instead.

Each party's features are the ``columns`` of its ``[[party]]`` table (by default every numeric
column other than the ID and the label, which are logged). Outputs, written only when the job
has succeeded (written to a staging folder first, then each renamed into place), in the
``--out`` folder:

* every data party: ``model_<party>.npz`` (its fitted part, :mod:`vfl.persistence`) and
  ``aligned_<party>.csv`` (its own row IDs in the common order, with the test flag);
* the active party: ``predictions.csv`` (its test rows' IDs, predictions, labels) and
  ``metrics.json`` (the job's metrics, row counts, epochs, seconds per stage), and with label
  DP (``privacy`` in ``[job.params]``) ``privacy_ledger.json``.

Scoring new rows with the saved parts (``vflink party --predict``,
:func:`vfl.app.predict.run_predict`): every
data party loads its own part (``--model model_<party>.npz``, as a training run wrote it) and
reads its new data file (the label column is optional); the parties align the rows as above
(:func:`align_rows`) and score every common row, with no split and no training; only the active
party learns the scores (the stages: :mod:`vfl.app.predict`).
Outputs: every data party's ``aligned_<party>.csv`` (``common_row`` and its own IDs); the active
party's ``predictions.csv`` (IDs and the job's prediction columns: predicted class, score and
probability for ``logistic``, the predicted value for ``linear``) and, when its new file holds
the label column, ``metrics.json`` (the job's metrics on the labelled rows). Refused before any
peer is contacted (and the peers told why): a data party without ``--model``, a model file that
is not a model or is another party's, one trained in another role or with other data parties,
the part's columns missing from the new file, and ``--model`` given to the coordinator.

Failing fast (:func:`vfl.app.drive.drive`): before any peer is contacted a party checks its own
certificate and key against the federation's CA file (:mod:`vfl.federation.trust`) and its
input; a refusal is logged at once, then told to the peers that are up or come up within
:data:`~vfl.federation.config.NOTICE_SECONDS` (its endpoint open until all are told), and
raised. A failure in a stage is logged at once and told to the peers as the endpoint closes; so
is an unexpected error (by its type and message) and an interruption. A peer whose certificate
the CA did not sign is named as such (:class:`~vfl.federation.network.UntrustedPeerError`), not
retried.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vfl.app.drive import drive
from vfl.app.families import get_job
from vfl.app.plan import PartyRun, plan, read_data
from vfl.app.transfer import run_transfer_party
from vfl.federation.base import Federation
from vfl.federation.config import FederationConfig
from vfl.federation.messages import Message, Namespace

__all__ = [
    "JOB",
    "CohortSize",
    "HeldOutRows",
    "align_rows",
    "align_unbalanced_rows",
    "draw_test_rows",
    "job_runner",
    "outputs",
    "predictions_frame",
    "run_party",
    "score",
    "split_rows",
    "train",
]

logger = logging.getLogger("vflink.party")

JOB = Namespace("job")


@dataclass(frozen=True)
class CohortSize(Message):
    """The label party to the coordinator: how many common rows the data parties hold."""

    KIND = "cohort size"
    rows: int


def run_party(
    config: FederationConfig,
    name: str,
    *,
    data: str | Path | None = None,
    out: str | Path = ".",
    cert: str | Path | None = None,
    key: str | Path | None = None,
    secret: str | None = None,
) -> dict[str, Any]:
    """Run party ``name``'s side of the config's job; returns a summary (the active party's
    includes the job's test metrics). ``secret`` is the data parties' shared linkage secret
    (``align = "bloom"``; default: the ``VFLINK_LINKAGE_SECRET`` environment variable).
    Raises ValueError for bad input, a FederationError when a peer fails; writes nothing
    unless the whole job succeeded. A job whose runner is ``"transfer"`` (``model =
    "transfer"``) runs :func:`vfl.app.transfer.run_transfer_party` instead."""
    if job_runner(config) == "transfer":
        return run_transfer_party(
            config, name, data=data, out=out, cert=cert, key=key, secret=secret
        )

    def prepare() -> PartyRun:
        run = plan(config, name, secret)
        read_data(run, data)
        return run

    def summarize(run: PartyRun) -> dict[str, Any]:
        aligned = run.aligned
        return {
            "test_rows": int(run.is_test.sum()),
            "ambiguous_links": 0 if aligned is None else aligned.attrs["ambiguous_links"],
            # this party's own identity values that did not parse (linkage.Field.on_invalid)
            "invalid_values": {} if aligned is None else aligned.attrs.get("invalid_values", {}),
        }

    return drive(
        config,
        name,
        cert,
        key,
        out,
        prepare,
        [align_rows, split_rows, train, score],
        summarize,
        outputs,
    )


def align_rows(run: PartyRun, fed: Federation) -> None:
    """Align the data parties' rows (PSI on the ID column, or Bloom filters through the
    coordinator); every party, the coordinator included, learns the common row count."""
    from vfl.alignment import align_party

    began = time.perf_counter()
    config, job, name = run.config, run.job, run.name
    if job["align"] == "bloom":
        logger.info("party %r: aligning by Bloom-filter linkage", name)
        run.aligned = align_party(
            fed,
            run.frame,
            method="bloom",
            schema=run.schema,
            secret=run.secret,
            parties=run.data_parties,
            threshold=job.get("threshold"),
            linkage_unit=config.coordinator,  # type: ignore[arg-type]
            # the linkage unit's own key makes the common order reproducible; the data
            # parties must not hold it (vfl.alignment)
            order_key=os.environ.get("VFLINK_ORDER_KEY") if run.frame is None else None,
            max_ambiguous=job["max_ambiguous"],
        )
    elif job["align"] == "unbalanced":  # two data parties; the coordinator takes no part
        if run.frame is not None:
            run.aligned = align_unbalanced_rows(run, fed)
    elif run.frame is not None or len(run.data_parties) > 2:  # 3+: the coordinator helps
        if run.frame is not None:
            logger.info(
                "party %r: aligning %d rows by PSI on %r", name, len(run.frame), job["id_column"]
            )
        run.aligned = align_party(
            fed,
            run.frame,
            method="psi",
            id_column=job["id_column"],
            parties=run.data_parties,
            linkage_unit=config.coordinator or "coordinator",
            workers=run.workers,
        )
    if run.aligned is not None:
        logger.info(
            "party %r: %d common rows (%d linked by a tie); identity values that did not "
            "parse, per column: %s",
            name,
            len(run.aligned),
            run.aligned.attrs.get("ambiguous_links", 0),
            run.aligned.attrs.get("invalid_values", {}),
        )
    if run.aligned is None:  # the coordinator learns the count from the label party
        n = JOB.recv(fed, config.active, "rows", CohortSize).rows
    else:
        n = len(run.aligned)
        if name == config.active and config.coordinator:
            JOB.send(fed, config.coordinator, "rows", CohortSize(n))
    if n < 1:
        raise ValueError(f"party {name!r}: no common rows to train on")
    run.rows = n
    run.seconds["align"] = time.perf_counter() - began


def align_unbalanced_rows(run: PartyRun, fed: Federation) -> pd.DataFrame:
    """A data party's side of ``align = "unbalanced"`` (:mod:`vfl.align_unbalanced`): the
    server, named in ``[job.unbalanced]``, with a fresh OPRF key for the job and the client's
    caps (and its ledger, if any); the other data party as the client, with its probes."""
    from vfl.align_unbalanced import align_unbalanced_party

    options, name = run.job["unbalanced"], run.name
    serving = name == options["server"]
    logger.info(
        "party %r: aligning %d rows by unbalanced PSI on %r, as the %s",
        name,
        len(run.frame),  # type: ignore[arg-type]
        run.job["id_column"],
        "server (the large set)" if serving else "client (the small set)",
    )
    aligned: pd.DataFrame = align_unbalanced_party(
        fed,
        run.frame,  # type: ignore[arg-type]
        server=options["server"],
        parties=run.data_parties,
        id_column=run.job["id_column"],
        max_evaluations=options["max_evaluations"] if serving else None,
        max_queries=options["max_queries"] if serving else None,
        ledger=options["ledger"] if serving else None,
        probes=options["probes"],
        workers=run.workers,
    )
    return aligned


@dataclass(frozen=True)
class HeldOutRows(Message):
    """The label party to every other party: the aligned positions held out for testing."""

    KIND = "test rows"
    rows: np.ndarray


def split_rows(run: PartyRun, fed: Federation) -> None:
    """Training and test rows, drawn by the label party from ``split_seed`` -- stratified by
    class for a classifier -- and sent to the other parties as aligned positions only. With
    the aligned order reproducible (:mod:`vfl.alignment`), one config gives the same split
    run after run. The others learn which rows are held out, which a stratified draw leaves
    nearly independent of any row's label."""
    config = run.config
    others = [p for p in [*run.data_parties, config.coordinator] if p and p != run.name]
    if run.name == config.active:
        test = draw_test_rows(run)
        JOB.broadcast(fed, "test-rows", HeldOutRows(test), to=others)
    else:
        test = JOB.recv(fed, config.active, "test-rows", HeldOutRows).rows
        if test.ndim != 1 or test.dtype.kind not in "iu" or len(np.unique(test)) != len(test):
            HeldOutRows.refuse(config.active, "rows", "are not distinct integer positions")
        if len(test) and (test.min() < 0 or test.max() >= run.rows):
            HeldOutRows.refuse(config.active, "rows", f"fall outside the {run.rows} common rows")
    run.is_test = np.zeros(run.rows, dtype=bool)
    run.is_test[test] = True


def draw_test_rows(run: PartyRun) -> np.ndarray[Any, Any]:
    count = round(run.rows * run.job["test_fraction"])
    seed = run.job["split_seed"]
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    if run.job["learner"].name == "logistic" and run.aligned is not None:
        from sklearn.model_selection import StratifiedShuffleSplit

        labels = run.aligned[run.job["label_column"]].to_numpy()
        try:
            split = StratifiedShuffleSplit(n_splits=1, test_size=count, random_state=seed)
            _, test = next(split.split(np.zeros(len(labels)), labels))
            return np.sort(test).astype(np.int64)
        except ValueError as exc:  # a class too small to stratify
            logger.warning("party %r: test rows not stratified (%s)", run.name, exc)
    order = np.random.default_rng(seed).permutation(run.rows)
    return np.sort(order[:count]).astype(np.int64)


def train(run: PartyRun, fed: Federation) -> None:
    """This party's role of training."""
    began = time.perf_counter()
    logger.info("party %r: training on %d rows", run.name, int((~run.is_test).sum()))
    config, estimator = run.config, run.estimator
    if run.aligned is None:
        estimator.fit_party(fed, None, label_party=config.active, data_parties=run.data_parties)
    else:
        train_rows = run.aligned.loc[~run.is_test, run.features]
        labels = (
            run.aligned.loc[~run.is_test, run.job["label_column"]]
            if run.name == config.active
            else None
        )
        estimator.fit_party(
            fed, train_rows, labels, label_party=config.active, data_parties=run.data_parties
        )
    run.seconds["train"] = time.perf_counter() - began


def score(run: PartyRun, fed: Federation) -> None:
    """This party's role of scoring the test rows (only the label party learns the result)."""
    began = time.perf_counter()
    if run.is_test.any():
        test = None if run.aligned is None else run.aligned.loc[run.is_test, run.features]
        run.predicted = run.estimator.predict_party(fed, test)
    run.seconds["predict"] = time.perf_counter() - began


def outputs(run: PartyRun, summary: dict[str, Any]) -> dict[str, str | bytes]:
    """The files to publish (everything is ready before the first is written); the label
    party's metrics go into ``summary``."""
    files: dict[str, str | bytes] = {}
    if run.aligned is None or run.frame is None:
        return files
    id_column, label_column = run.job["id_column"], run.job["label_column"]
    ids = run.frame.loc[list(run.aligned.attrs["source_rows"]), id_column].to_numpy()
    mapping = pd.DataFrame({"common_row": run.aligned.index, id_column: ids, "test": run.is_test})
    files[f"aligned_{run.name}.csv"] = mapping.to_csv(index=False)
    files[f"model_{run.name}.npz"] = run.estimator.parts_[run.name].to_bytes()
    ledger = getattr(run.estimator, "privacy_ledger_", None)
    if ledger is not None and len(ledger):  # label DP's spend, beside the model
        files["privacy_ledger.json"] = ledger.to_json()
        summary["label_epsilon"] = ledger.epsilon()
    if run.name == run.config.active:
        metrics: dict[str, Any] = dict.fromkeys(run.learner.metrics)
        predictions = pd.DataFrame()
        if run.predicted is not None:
            labels = run.aligned.loc[run.is_test, label_column].to_numpy()
            found, columns = run.learner.evaluate(run.estimator, labels, run.predicted)
            metrics.update(found)
            predictions = predictions_frame(
                run.aligned.index[run.is_test],
                mapping.loc[run.is_test, id_column].to_numpy(),
                id_column,
                label_column,
                labels,
                columns,
            )
        summary.update(metrics, model=run.learner.name, epochs=int(run.estimator.n_iter_))
        restarts = getattr(run.estimator, "restarts_", None)
        if restarts is not None:  # what the divergence rule did (vfl.training.LossCurve)
            summary.update(best_epoch=int(run.estimator.best_epoch_), restarts=list(restarts))
        files["predictions.csv"] = predictions.to_csv(index=False)
        files["metrics.json"] = json.dumps(summary, indent=1)
    return files


def predictions_frame(
    common_rows: Any,
    ids: Any,
    id_column: str,
    label_column: str,
    labels: Any,
    columns: dict[str, Any],
) -> pd.DataFrame:
    """The label party's ``predictions.csv``: the held-out rows, their IDs, what the model
    predicted and the true labels (none when ``labels`` is None: new rows scored with
    ``--predict``)."""
    frame: pd.DataFrame = pd.DataFrame({"common_row": common_rows, id_column: ids})
    for name, values in columns.items():
        frame[name] = values
    if labels is not None:
        frame[label_column] = labels
    return frame


def job_runner(config: FederationConfig) -> str:
    """The runner of the config's job; ``"vertical"`` for a model that is not a job, whose
    :func:`~vfl.app.plan.plan` then refuses it with the valid names (telling the peers)."""
    try:
        return get_job(config.job.get("model", "logistic")).runner
    except ValueError:
        return "vertical"
