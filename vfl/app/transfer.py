"""One party's side of a transfer job, as ``vflink party`` runs it (``model = "transfer"``, a
job whose :attr:`~vfl.registry.Job.runner` is ``"transfer"``, registered by
:mod:`transfer.jobs`).

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
(:func:`score_target`). Outputs, written only when the job has succeeded: each party's
``aligned_<party>.csv`` (its IDs of the shared patients, in the common order); the target's
``predictions.csv`` (every row: its ID, the probability, its label where known and whether
it was held out) and ``metrics.json`` (test AUC on the held-out labelled rows, the counts,
seconds per stage); the source's ``privacy_ledger.json`` with label DP (``privacy``). The fitted
encoders are not written (not yet: a transfer model file).
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
from vfl.app.plan import PartyRun, plan, read_data
from vfl.federation.base import Federation
from vfl.federation.config import FederationConfig

__all__ = [
    "find_overlap",
    "hold_out",
    "run_transfer_party",
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


def transfer_outputs(run: PartyRun, summary: dict[str, Any]) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {}
    if run.frame is None or run.aligned is None:
        return files
    id_column, label_column = run.job["id_column"], run.job["label_column"]
    rows = list(run.aligned.attrs["source_rows"])
    ids = run.frame[id_column].to_numpy()[rows]
    files[f"aligned_{run.name}.csv"] = pd.DataFrame(
        {"common_row": np.arange(len(rows)), id_column: ids}
    ).to_csv(index=False)
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
