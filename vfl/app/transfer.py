"""One party's side of a transfer job, as ``vflink party`` runs it (``model = "transfer"``, a
job whose :attr:`~vfl.registry.Job.runner` is ``"transfer"``, registered by
:mod:`transfer.jobs`), and scoring new rows with the saved part (``vflink party --predict``).

The source is the config's active party (every row of its file labelled); the target is the
other data party, whose ``label_column`` may be missing on most rows (its few labels). A
coordinator, if the config names one, has no part in it. ``[job.params]`` holds
:class:`transfer.FederatedTransferClassifier`'s arguments::

    [job]
    id_column = "patient_id"
    label_column = "diagnosis"
    test_fraction = 0.3        # of the target's labelled rows, held out for its test AUC
    split_seed = 0
    model = "transfer"

    [job.params]
    max_iter = 100

Stages: :func:`vfl.app.plan.plan` and :func:`vfl.app.plan.read_data` as for a vertical job; align
the two parties' rows (PSI on ``id_column``, or ``align = "bloom"``) to find the patients in
both (:func:`find_overlap`); the target holds out ``test_fraction`` of its labelled rows
(stratified, from ``split_seed``: its own decision, nothing is sent) (:func:`hold_out`); train
on every row of each party (:func:`train_transfer`); the target scores all its rows
(:func:`score_target`). Outputs, written only when the job has succeeded: each data party's
``model_<party>.npz`` (its own part, as :meth:`~transfer.FederatedTransferClassifier.save`
writes it, :func:`model_part`: its encoder, its columns and their scaling; the target's also
``Phi``, the stacked head and the classes; nothing of the other party) and
``aligned_<party>.csv`` (its IDs of the shared patients, in the common order); the target's
``predictions.csv`` (every row: its ID, the probability, its label where known and whether
it was held out) and ``metrics.json`` (test AUC on the held-out labelled rows, the counts,
seconds per stage); the source's ``privacy_ledger.json`` with label DP (``privacy``).

Scoring new rows (:func:`run_transfer_predict`, which ``vflink party --predict`` runs for a
transfer job): the target scores alone, as the estimator's ``decision_function`` does (its
standardisation, its encoder, ``Phi`` and its head: nothing of the source's). It loads its
part (``--model model_<target>.npz``, checked against the party and the config,
:func:`load_transfer_model`), checks that its new file has the columns the part was trained on
(:func:`vfl.app.plan.check_trained_columns`, as for a vertical job), scores every row
(:func:`score_new_rows`) and writes ``predictions.csv`` (the ID column if the file has one, the
probability and the predicted class) and, when the file has labels, ``metrics.json`` (the AUC
on the labelled rows) (:func:`new_rows_outputs`). No federation is opened: nothing about the
rows is sent to the source, nor is the source needed. The source's ``--predict`` (with its own
``--model``, checked) and the coordinator's have nothing to do: each logs that the target
scores alone and exits successfully, writing nothing.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vfl.app.drive import drive, publish
from vfl.app.plan import (
    PartyRun,
    check_saved_part,
    check_trained_columns,
    job_table,
    load_saved_part,
    make_estimator,
    plan,
    read_csv,
    read_data,
)
from vfl.federation.base import Federation
from vfl.federation.config import FederationConfig

__all__ = [
    "find_overlap",
    "hold_out",
    "load_transfer_model",
    "model_part",
    "new_rows_outputs",
    "run_transfer_party",
    "run_transfer_predict",
    "score_new_rows",
    "score_target",
    "train_transfer",
    "transfer_outputs",
]

logger = logging.getLogger("vflink.party")


def _peer(run: PartyRun) -> str:
    parties = run.data_parties
    if len(parties) != 2:
        raise ValueError(
            f"{run.config.path}: a transfer job has exactly two data parties (the source, "
            f"active, and the target); the config has {parties}"
        )
    return next(p for p in parties if p != run.name)


def _target(config: FederationConfig) -> str | None:
    """The target: the data party that is not the active one (``_peer`` checks there are two)."""
    return next((p for p in config.data_parties if p != config.active), None)


def find_overlap(run: PartyRun, fed: Federation) -> None:
    """The shared patients: this party's row positions, in the common order."""
    from vfl.alignment import align_party

    if run.frame is None:  # a coordinator: no part in a transfer job
        return
    began = time.perf_counter()
    job = run.job
    _peer(run)
    options: dict[str, Any] = (
        {"method": "psi", "id_column": job["id_column"]}
        if job["align"] == "psi"
        else {
            "method": "bloom",
            "schema": run.schema,
            "secret": run.secret,
            "threshold": job.get("threshold"),
        }
    )
    run.aligned = align_party(
        fed,
        run.frame,
        parties=run.data_parties,
        linkage_unit=run.config.coordinator or "coordinator",
        max_ambiguous=job["max_ambiguous"],
        **options,
    )
    run.rows = len(run.frame)
    logger.info("party %r: %d patients in both", run.name, len(run.aligned))
    run.seconds["align"] = time.perf_counter() - began


def _labels(run: PartyRun) -> pd.Series:
    column = run.job["label_column"]
    if run.frame is None or column not in run.frame.columns:
        return pd.Series(dtype=float)
    labels: pd.Series = run.frame[column].dropna()
    return labels


def hold_out(run: PartyRun, fed: Federation) -> None:
    """The target holds out ``test_fraction`` of its labelled rows (its own decision)."""
    if run.frame is None:
        return
    run.is_test = np.zeros(len(run.frame), dtype=bool)
    if run.name == run.config.active:
        missing = run.frame[run.job["label_column"]].isna()
        if missing.any():
            raise ValueError(
                f"party {run.name!r} is the source: every row needs its label; row "
                f"{int(np.flatnonzero(missing)[0])} has none"
            )
        return
    labelled = _labels(run)
    count = round(len(labelled) * run.job["test_fraction"])
    if count == 0:
        return
    from sklearn.model_selection import StratifiedShuffleSplit

    split = StratifiedShuffleSplit(n_splits=1, test_size=count, random_state=run.job["split_seed"])
    try:
        _, test = next(split.split(np.zeros(len(labelled)), labelled.to_numpy()))
    except ValueError as exc:
        raise ValueError(
            f"party {run.name!r}: cannot hold out {count} of its {len(labelled)} labelled rows "
            f"by class ({exc}); lower test_fraction or label more rows"
        ) from None
    run.is_test[run.frame.index.get_indexer(labelled.index[test])] = True


def train_transfer(run: PartyRun, fed: Federation) -> None:
    """This party's role of training, on every one of its rows."""
    if run.frame is None or run.aligned is None:
        return
    began = time.perf_counter()
    role = "source" if run.name == run.config.active else "target"
    frame = run.frame[run.features]
    shared = run.frame.index[list(run.aligned.attrs["source_rows"])]
    labels: Any = run.frame[run.job["label_column"]] if role == "source" else None
    if role == "target":
        known = _labels(run)
        labels = known[~run.is_test[run.frame.index.get_indexer(known.index)]]
    logger.info("party %r: %s, %d rows, %d shared", run.name, role, len(frame), len(shared))
    run.estimator.fit_party(fed, frame, labels, role=role, peer=_peer(run), overlap=shared)
    run.seconds["train"] = time.perf_counter() - began


def score_target(run: PartyRun, fed: Federation) -> None:
    """The target scores all its rows (alone: it holds ``Phi``)."""
    if run.frame is None or run.name == run.config.active:
        return
    began = time.perf_counter()
    run.predicted = run.estimator.predict_proba(run.frame[run.features])[:, 1]
    run.seconds["predict"] = time.perf_counter() - began


def model_part(run: PartyRun) -> bytes:
    """This party's own part of the fitted model, the ``<party>.npz`` that
    :meth:`~transfer.FederatedTransferClassifier.save` writes (the estimator holds no other
    party's part after ``fit_party``)."""
    with tempfile.TemporaryDirectory(prefix="vflink-model-") as folder:
        run.estimator.save(folder)
        return (Path(folder) / f"{run.name}.npz").read_bytes()


def transfer_outputs(run: PartyRun, summary: dict[str, Any]) -> dict[str, str | bytes]:
    """The files of a training run (see the module docstring); the target's metrics go into
    ``summary``."""
    files: dict[str, str | bytes] = {}
    if run.frame is None or run.aligned is None:
        return files
    id_column, label_column = run.job["id_column"], run.job["label_column"]
    rows = list(run.aligned.attrs["source_rows"])
    ids = run.frame[id_column].to_numpy()[rows]
    files[f"aligned_{run.name}.csv"] = pd.DataFrame(
        {"common_row": np.arange(len(rows)), id_column: ids}
    ).to_csv(index=False)
    files[f"model_{run.name}.npz"] = model_part(run)
    ledger = getattr(run.estimator, "privacy_ledger_", None)
    if ledger is not None and len(ledger):
        files["privacy_ledger.json"] = ledger.to_json()
    if run.predicted is None:
        return files
    labels = (
        run.frame[label_column]
        if label_column in run.frame.columns
        else pd.Series(np.nan, index=run.frame.index)
    )
    files["predictions.csv"] = pd.DataFrame(
        {
            id_column: run.frame[id_column].to_numpy(),
            "probability": run.predicted,
            label_column: labels.to_numpy(),
            "test": run.is_test,
        }
    ).to_csv(index=False)
    test_auc = None
    truth = labels.to_numpy()[run.is_test]
    if len(np.unique(truth)) == 2:
        from sklearn.metrics import roc_auc_score

        positive = truth == run.estimator.classes_[1]
        test_auc = float(roc_auc_score(positive, run.predicted[run.is_test]))
    summary.update(
        model="transfer",
        test_auc=test_auc,
        shared_patients=len(rows),
        labelled_rows=int(labels.notna().sum()),
        test_rows=int(run.is_test.sum()),
    )
    files["metrics.json"] = json.dumps(summary, indent=1)
    return files


def run_transfer_party(
    config: FederationConfig,
    name: str,
    *,
    data: str | Path | None = None,
    out: str | Path = ".",
    cert: str | Path | None = None,
    key: str | Path | None = None,
    secret: str | None = None,
) -> dict[str, Any]:
    """Run party ``name``'s side of the config's transfer job (see the module docstring)."""

    def prepare() -> PartyRun:
        run = plan(config, name, secret)
        read_data(run, data)
        if run.role != "coordinator":
            _peer(run)
        return run

    def summarize(run: PartyRun) -> dict[str, Any]:
        return {"test_rows": int(run.is_test.sum())}

    return drive(
        config,
        name,
        cert,
        key,
        out,
        prepare,
        [find_overlap, hold_out, train_transfer, score_target],
        summarize,
        transfer_outputs,
    )


# -- scoring new rows: the target alone ----------------------------------------------------


def load_transfer_model(run: PartyRun, model: str | Path | None) -> None:
    """``--predict``: give the estimator this party's saved part (the ``model_<party>.npz`` its
    training run wrote), checked against the party and the config: its own part, trained with
    these two data parties, in the role (source or target) the config gives it."""
    name, config = run.name, run.config
    load_saved_part(run, model, lambda: run.estimator.load(model))
    spec = run.estimator.spec_
    held = "target" if getattr(run.estimator, "target_encoder_", None) is not None else "source"
    owner = spec.target if held == "target" else spec.source
    check_saved_part(run, model, owner=owner, trained=[spec.source, spec.target])
    role = "source" if name == config.active else "target"
    if held != role:
        raise ValueError(
            f"party {name!r}: --model {model} was trained with {name!r} as the {held}, but "
            f"{config.path} makes it the {role}; score with the config it was trained with"
        )


def score_new_rows(run: PartyRun, model: str | Path | None) -> None:
    """The target scores every row of its new file alone, after checking its columns (those
    its part was trained on) and its labels, where it has any (the model's classes)."""
    if run.frame is None:
        return
    began = time.perf_counter()
    estimator, label_column = run.estimator, run.job["label_column"]
    run.features = check_trained_columns(
        run.frame, run.name, list(estimator.columns_[run.name]), model
    )
    if label_column in run.frame.columns:
        known = run.frame[label_column].dropna()
        unknown = sorted(set(known.tolist()) - set(estimator.classes_.tolist()), key=str)
        if unknown:
            raise ValueError(
                f"party {run.name!r}: its label column {label_column!r} holds {unknown[:5]} "
                f"(e.g. row {int(np.flatnonzero(known.isin(unknown))[0])}), not the classes "
                f"{estimator.classes_.tolist()} its model {model} was trained on; fix those "
                "labels or drop the column"
            )
    run.rows = len(run.frame)
    logger.info("party %r: scoring %d rows alone (nothing is sent)", run.name, run.rows)
    run.predicted = estimator.predict_proba(run.frame[run.features])[:, 1]
    run.seconds["predict"] = time.perf_counter() - began


def new_rows_outputs(run: PartyRun, summary: dict[str, Any]) -> dict[str, str | bytes]:
    """The target's files of ``--predict``: ``predictions.csv`` (every row, in the file's
    order: its ID when the file has the ID column, the job's prediction columns -- the
    probability and the predicted class -- and its label where the file has one) and, when
    some rows are labelled, ``metrics.json`` (the AUC on those rows, in ``summary``)."""
    files: dict[str, str | bytes] = {}
    if run.frame is None or run.predicted is None:
        return files
    id_column, label_column = run.job["id_column"], run.job["label_column"]
    predictions = pd.DataFrame(index=range(len(run.frame)))
    if id_column in run.frame.columns:
        predictions[id_column] = run.frame[id_column].to_numpy()
    for column, values in run.learner.present(run.estimator, run.predicted).items():
        predictions[column] = values
    labels = run.frame[label_column] if label_column in run.frame.columns else None
    if labels is not None:
        predictions[label_column] = labels.to_numpy()
    files["predictions.csv"] = predictions.to_csv(index=False)
    known = np.zeros(0, dtype=bool) if labels is None else labels.notna().to_numpy()
    if labels is not None and known.any():
        truth = labels.to_numpy()[known]
        found, _ = run.learner.evaluate(run.estimator, truth, run.predicted[known])
        metrics: dict[str, Any] = dict.fromkeys(run.learner.metrics)
        metrics.update(found)
        summary.update(metrics, model=run.learner.name, labelled_rows=int(known.sum()))
        files["metrics.json"] = json.dumps(summary, indent=1)
    return files


def run_transfer_predict(
    config: FederationConfig,
    name: str,
    *,
    data: str | Path | None = None,
    model: str | Path | None = None,
    out: str | Path = ".",
) -> dict[str, Any]:
    """Party ``name``'s ``vflink party --predict`` in a transfer job (see the module
    docstring): the target loads its part (``model``, ``model_<target>.npz``), scores every
    row of its new ``data`` alone and writes its outputs into ``out``; the source (its own
    ``model`` checked) and the coordinator log that the target scores alone and write nothing.

    No federation is opened and no peer is contacted: nothing about the new rows reaches the
    source (which need not be running), so a refusal is not told to anyone either.

    Returns
    -------
    dict
        The summary (``rows`` scored, ``outputs``, ``scored_alone_by``: the target's name; the
        target's metrics when its new file holds labels).

    Raises
    ------
    ValueError
        Naming the party and the fix: no or another party's model, a config the model was not
        trained with, a file that lacks the trained columns or holds other labels.
    """
    summary: dict[str, Any] = {"party": name, "mode": "predict", "rows": 0}
    try:
        config.check_arguments(name, model=model, predict=True)
        job = job_table(config)
        summary["scored_alone_by"] = _target(config)
        role = config.party(name).role
        run = PartyRun(config, name, role, job, job["learner"], make_estimator(config, job))
        run.predict = True
        summary["role"] = role
        if role != "coordinator":
            _peer(run)
            load_transfer_model(run, model)
        if role != "coordinator" and name != config.active:
            run.frame = read_csv(data, name, [])
            score_new_rows(run, model)
    except ValueError as exc:
        logger.error("party %r refuses to score: %s", name, exc)
        raise
    if run.frame is None:  # the source or the coordinator
        logger.info(
            "party %r: in a transfer job the target scores its new rows alone (nothing is "
            "sent to or from the other parties); nothing to do here",
            name,
        )
        summary["outputs"] = []
        return summary
    summary.update(rows=run.rows, seconds=run.seconds)
    files = new_rows_outputs(run, summary)
    publish(Path(out), files)
    summary["outputs"] = list(files)
    return summary
