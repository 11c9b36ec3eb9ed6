"""Scoring new rows with the saved parts: ``vflink party --predict``.

Every data party loads its own part (``--model model_<party>.npz``, as a training run wrote
it, :func:`load_model`) and reads its new data file (the label column is optional,
:func:`check_columns`); the parties align the rows as a training job does
(:func:`vfl.app.party.align_rows`) and score every common row (:func:`predict_rows`), with no
split and no training; only the active party learns the scores (:func:`predict_outputs`). See
:mod:`vfl.app.party` for the outputs and what is refused before any peer is contacted.

A transfer job's target scores its new rows alone, with no federation and nothing sent to the
source (:func:`vfl.app.transfer.run_transfer_predict`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vfl.app.drive import drive
from vfl.app.party import align_rows, job_runner, predictions_frame
from vfl.app.plan import (
    PartyRun,
    check_saved_part,
    check_trained_columns,
    load_saved_part,
    plan,
    read_data,
)
from vfl.app.transfer import run_transfer_predict
from vfl.federation.base import Federation
from vfl.federation.config import FederationConfig
from vfl.persistence import load_model as load_saved

__all__ = ["check_columns", "load_model", "predict_outputs", "predict_rows", "run_predict"]

logger = logging.getLogger("vflink.party")


def load_model(run: PartyRun, model: str | Path | None) -> None:
    """``--predict``: give the estimator this party's saved part (the ``model_<party>.npz`` its
    training run wrote), checked against the party and the config; the coordinator holds no
    part and is given none."""
    name, config = run.name, run.config
    config.check_arguments(name, model=model, predict=True)
    if run.role == "coordinator":
        run.estimator.load(label_party=config.active)
        return
    _check_role(run, model)
    load_saved_part(run, model, lambda: run.estimator.load(model, label_party=config.active))
    parts = run.estimator.parts_
    part = parts.get(name)
    owner = name if part is not None else next(iter(parts), None)
    trained = part.extra.get("data_parties") if part is not None else None
    check_saved_part(run, model, owner=owner, trained=trained)
    _refuse_other_role(run, model, part.role)


def _check_role(run: PartyRun, model: str | Path | None) -> None:
    """The saved part's own party and role against the config, before the estimator reads it
    (whose check only knows the label party, not which config the part was trained with)."""
    if model is None or not Path(model).is_file():
        return
    try:
        meta, _ = load_saved(model)
    except ValueError:
        return  # not a model file: the estimator's load names that
    if meta.get("party") == run.name and meta.get("role") is not None:
        _refuse_other_role(run, model, str(meta["role"]))


def _refuse_other_role(run: PartyRun, model: str | Path | None, role: str) -> None:
    if role != run.role:
        raise ValueError(
            f"party {run.name!r}: --model {model} was trained with {run.name!r} as the {role} "
            f"party, but {run.config.path} makes it {run.role}; score with the config it was "
            "trained with"
        )


def check_columns(run: PartyRun, model: str | Path | None) -> None:
    """``--predict``: the new data file has every column the saved part was trained on; they
    are this party's features (the label column is not needed)."""
    if run.frame is None:
        return
    part = run.estimator.parts_[run.name]
    # the raw columns the part's design reads (its preprocessing's inputs, when it keeps one)
    run.features = check_trained_columns(run.frame, run.name, list(part.input_columns), model)


def predict_rows(run: PartyRun, fed: Federation) -> None:
    """This party's role of scoring every aligned row with the saved parts (no split, no
    training); only the label party learns the scores."""
    began = time.perf_counter()
    logger.info("party %r: scoring %d common rows", run.name, run.rows)
    rows = None if run.aligned is None else run.aligned[run.features]
    run.predicted = run.estimator.predict_party(fed, rows, data_parties=run.data_parties)
    run.seconds["predict"] = time.perf_counter() - began


def predict_outputs(run: PartyRun, summary: dict[str, Any]) -> dict[str, str | bytes]:
    """The files of ``--predict``: every data party's ``aligned_<party>.csv``; the label
    party's ``predictions.csv`` and, when the new file holds labels, ``metrics.json`` (the
    job's metrics on the labelled rows, which go into ``summary``)."""
    files: dict[str, str | bytes] = {}
    if run.aligned is None or run.frame is None:
        return files
    id_column, label_column = run.job["id_column"], run.job["label_column"]
    ids = run.frame.loc[list(run.aligned.attrs["source_rows"]), id_column].to_numpy()
    mapping = pd.DataFrame({"common_row": run.aligned.index, id_column: ids})
    files[f"aligned_{run.name}.csv"] = mapping.to_csv(index=False)
    if run.name != run.config.active:
        return files
    if run.predicted is None:
        raise RuntimeError(f"party {run.name!r}: the label party received no scores")
    labels = run.aligned[label_column].to_numpy() if label_column in run.aligned else None
    columns = run.learner.present(run.estimator, run.predicted)
    files["predictions.csv"] = predictions_frame(
        run.aligned.index, ids, id_column, label_column, labels, columns
    ).to_csv(index=False)
    known = np.zeros(0, dtype=bool) if labels is None else np.asarray(pd.notna(labels))
    if labels is not None and known.any():  # metrics on the rows that have a label
        found, _ = run.learner.evaluate(run.estimator, labels[known], run.predicted[known])
        metrics: dict[str, Any] = dict.fromkeys(run.learner.metrics)
        metrics.update(found)
        summary.update(metrics, model=run.learner.name, labelled_rows=int(known.sum()))
        files["metrics.json"] = json.dumps(summary, indent=1)
    return files


def run_predict(
    config: FederationConfig,
    name: str,
    *,
    data: str | Path | None = None,
    model: str | Path | None = None,
    out: str | Path = ".",
    cert: str | Path | None = None,
    key: str | Path | None = None,
    secret: str | None = None,
) -> dict[str, Any]:
    """Run party ``name``'s side of scoring new rows with the saved parts (``vflink party
    --predict``): each data party loads its own ``model`` (``model_<party>.npz``) and reads its
    new ``data``; the parties align the rows as the training job does (:func:`align_rows`) and
    score them all; only the label party learns the scores. ``secret`` as in
    :func:`vfl.app.party.run_party`. Returns a summary (the label party's includes the job's
    metrics when the new file holds labels). Raises ValueError for bad input (telling the peers
    why), a FederationError when a peer fails; writes nothing unless every stage succeeded.

    A transfer job (``model = "transfer"``) runs :func:`vfl.app.transfer.run_transfer_predict`
    instead: its target scores its new rows alone, with no federation (``cert``, ``key`` and
    ``secret`` unused), and nothing about them is sent to the source."""
    if job_runner(config) == "transfer":
        return run_transfer_predict(config, name, data=data, model=model, out=out)

    def prepare() -> PartyRun:
        config.check_arguments(name, model=model, predict=True)  # before anything loads
        run = plan(config, name, secret)
        run.predict = True
        load_model(run, model)
        read_data(run, data)
        check_columns(run, model)
        return run

    return drive(
        config,
        name,
        cert,
        key,
        out,
        prepare,
        [align_rows, predict_rows],
        lambda run: {"mode": "predict"},
        predict_outputs,
    )
