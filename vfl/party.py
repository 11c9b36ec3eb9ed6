"""One party's side of a vertical job, as ``vflink party`` runs it in deployment.

The ``[job]`` table of the federation config says what to run; every party runs the same job
with its own data file::

    [job]
    id_column = "patient_id"      # exact ID column for the alignment (ECDH PSI)
    label_column = "diagnosis"    # in the active party's file
    align = "psi"                 # or "bloom": fuzzy identity linkage by the coordinator
    # schema = "identity_schema.json"   # "bloom": the linkage.Schema (Schema.to_json)
    # threshold = 0.8                   # "bloom": match threshold (else chosen from the scores)
    test_fraction = 0.3           # common rows held out for the test AUC
    split_seed = 0                # the same split at every party (no message needed)

    [job.model]                   # VerticalLogisticRegression's keyword arguments
    max_iter = 10
    batch_size = 256

Steps: align the data parties' rows to their common patients (:func:`vfl.align_party`): by
ECDH PSI on the exact ``id_column``, or with ``align = "bloom"`` by Bloom-filter encodings of the
schema's identity columns, linked by the coordinator, which never has the data parties' shared
secret (each data party reads it from ``--secret-file`` or the ``VFLINK_LINKAGE_SECRET``
environment variable: it must not be in the shared config); with ``"bloom"`` the
``id_column`` is only each party's own row ID in the outputs. Then split the common rows into
training and test rows with the shared seed; train :class:`~vfl.VerticalLogisticRegression`
(protocol ``"coordinator"`` when the config has a coordinator, else ``"two_party"``); score
the test rows, which only the active party learns; the active party computes the test AUC.

Each party's features are the ``columns`` of its ``[[party]]`` table (by default every numeric
column other than the ID and the label, which are logged). Outputs, written only when the job
has succeeded (written to a staging folder first, then each renamed into place), in the
``--out`` folder:

* every data party: ``model_<party>.json`` (its fitted part) and ``aligned_<party>.csv`` (its
  own row IDs in the common order, with the test flag);
* the active party: ``predictions.csv`` (its test rows' IDs, scores, probabilities, labels) and
  ``metrics.json`` (test AUC, row counts, epochs, seconds per stage).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vfl.federation.config import FederationConfig

__all__ = ["run_party"]

logger = logging.getLogger("vflink.party")

_JOB_KEYS = {
    "id_column",
    "label_column",
    "test_fraction",
    "split_seed",
    "model",
    "align",
    "schema",
    "threshold",
}


def _publish(target: Path, outputs: dict[str, str]) -> None:
    """Write every output into a staging folder first, then move each into ``target`` (a
    rename each): a failure while writing leaves nothing behind."""
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".vflink-staging-", dir=target))
    try:
        for filename, text in outputs.items():
            with open(staging / filename, "w", newline="") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        for filename in outputs:
            os.replace(staging / filename, target / filename)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _job(config: FederationConfig) -> dict[str, Any]:
    job = dict(config.job)
    where = f"{config.path}: [job]"
    unknown = sorted(set(job) - _JOB_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; known: {sorted(_JOB_KEYS)}")
    for key in ("id_column", "label_column"):
        if not isinstance(job.get(key), str):
            raise ValueError(f'{where} needs {key} = "<column name>"')
    fraction = job.setdefault("test_fraction", 0.3)
    if not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise ValueError(f"{where} test_fraction must be in [0, 1), got {fraction!r}")
    if not isinstance(job.setdefault("split_seed", 0), int):
        raise ValueError(f"{where} split_seed must be an integer")
    method = job.setdefault("align", "psi")
    if method not in ("psi", "bloom"):
        raise ValueError(f'{where} align must be "psi" or "bloom", got {method!r}')
    if method == "bloom":
        if config.coordinator is None:
            raise ValueError(f'{where} align = "bloom" needs a coordinator (the linkage unit)')
        if not isinstance(job.get("schema"), str):
            raise ValueError(f'{where} align = "bloom" needs schema = "<schema JSON file>"')
        path = Path(job["schema"])
        job["schema"] = path if path.is_absolute() else config.path.parent / path
    threshold = job.get("threshold")
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not 0 < threshold <= 1
    ):
        raise ValueError(f"{where} threshold must be in (0, 1], got {threshold!r}")
    model = job.setdefault("model", {})
    if not isinstance(model, dict):
        raise ValueError(f"{where}.model must be a table of VerticalLogisticRegression arguments")
    return job


def _estimator(config: FederationConfig, job: dict[str, Any]) -> Any:
    from vfl.logistic import VerticalLogisticRegression

    params = dict(job["model"])
    coordinator = config.coordinator
    params.setdefault("protocol", "coordinator" if coordinator else "two_party")
    if coordinator:
        params.setdefault("coordinator", coordinator)
    try:
        return VerticalLogisticRegression(**params)
    except TypeError as exc:
        raise ValueError(f"{config.path}: [job.model]: {exc}") from None


def _read_data(path: str | Path | None, name: str, text: list[str]) -> pd.DataFrame:
    """The party's CSV; the identity columns in ``text`` are read as text (a postcode or a
    date of birth must keep its leading zeros)."""
    if path is None:
        raise ValueError(f"party {name!r} holds data: pass its file with --data FILE.csv")
    try:
        return pd.read_csv(path, dtype={c: str for c in text})
    except (OSError, ValueError) as exc:
        raise ValueError(f"party {name!r}: cannot read its data file {path}: {exc}") from None


def _features(
    frame: pd.DataFrame, name: str, listed: list[str] | None, skip: set[str]
) -> list[str]:
    if listed is not None:
        missing = [c for c in listed if c not in frame.columns]
        if missing:
            raise ValueError(
                f"party {name!r}: columns {missing} of its [[party]] table are not in its data "
                f"file (it has {list(frame.columns)})"
            )
        return listed
    chosen = [
        c
        for c in frame.columns
        if c not in skip
        and pd.api.types.is_numeric_dtype(frame[c])
        and not pd.api.types.is_bool_dtype(frame[c])
    ]
    if not chosen:
        raise ValueError(f"party {name!r}: its data file has no numeric feature columns")
    logger.info("party %r: features (all numeric columns): %s", name, chosen)
    return chosen


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
    includes the test AUC). ``secret`` is the data parties' shared linkage secret (``align =
    "bloom"``; default: the ``VFLINK_LINKAGE_SECRET`` environment variable). Raises ValueError
    for bad input, a FederationError when a peer fails; writes nothing unless the whole job
    succeeded."""
    import linkage
    from vfl.align import align_party

    me = config.party(name)
    job = _job(config)
    estimator = _estimator(config, job)
    data_parties = config.data_parties
    if job["align"] == "psi" and len(data_parties) != 2:
        raise ValueError(
            f"{config.path}: PSI alignment runs between two data parties, the config has "
            f'{data_parties}; use align = "bloom" for more'
        )
    schema = None
    if job["align"] == "bloom" and me.role != "coordinator":
        try:
            schema = linkage.Schema.from_json(Path(job["schema"]).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"party {name!r}: cannot use the schema {job['schema']}: {exc}"
            ) from None
    # identity columns are read as text (leading zeros); PSI IDs keep pandas' reading, which
    # normalize_ids expects (an integer ID written as 1234.0 is 1234)
    text = schema.columns if schema is not None else []
    frame = None if me.role == "coordinator" else _read_data(data, name, text)
    id_column, label_column = job["id_column"], job["label_column"]
    if frame is not None:
        needed = [id_column] + ([label_column] if me.role == "active" else [])
        missing = [c for c in needed if c not in frame.columns]
        if missing:
            raise ValueError(f"party {name!r}: its data file has no column {missing[0]!r}")
        features = _features(frame, name, me.columns, {id_column, label_column})
        absent = [c for c in (schema.columns if schema is not None else []) if c not in frame]
        if absent:
            raise ValueError(
                f"party {name!r}: the linkage schema reads columns {absent} that its data file "
                "does not have"
            )
    if me.role == "coordinator" and secret is not None:
        raise ValueError(
            f"party {name!r} is the coordinator: it must never have the data parties' linkage "
            "secret (do not pass --secret-file to it)"
        )
    if job["align"] == "bloom" and frame is not None:
        secret = secret if secret is not None else os.environ.get("VFLINK_LINKAGE_SECRET")
        if not secret or len(secret) < 16:
            raise ValueError(
                f"party {name!r}: Bloom-filter alignment needs the data parties' shared "
                "secret, at least 16 characters: --secret-file FILE or the "
                "VFLINK_LINKAGE_SECRET variable"
            )
    target = Path(out)
    seconds: dict[str, float] = {}
    summary: dict[str, Any] = {"party": name, "role": me.role}
    with config.federation(name, cert=cert, key=key) as fed:
        began = time.perf_counter()
        aligned = None
        if job["align"] == "bloom":
            logger.info("party %r: aligning by Bloom-filter linkage", name)
            aligned = align_party(
                fed,
                frame,
                method="bloom",
                schema=schema,
                secret=secret,
                parties=data_parties,
                threshold=job.get("threshold"),
                linkage_unit=config.coordinator,  # type: ignore[arg-type]
            )
        elif frame is not None:
            logger.info("party %r: aligning %d rows by PSI on %r", name, len(frame), id_column)
            aligned = align_party(
                fed, frame, method="psi", id_column=id_column, parties=data_parties
            )
        if aligned is not None:
            logger.info("party %r: %d common rows", name, len(aligned))
        seconds["align"] = time.perf_counter() - began
        n = fed.recv(config.active, "job/n") if aligned is None else len(aligned)
        if name == config.active and config.coordinator:
            fed.send(config.coordinator, "job/n", len(aligned))  # type: ignore[arg-type]
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"party {name!r}: no common rows to train on")
        order = np.random.default_rng(job["split_seed"]).permutation(n)
        is_test = np.zeros(n, dtype=bool)
        is_test[order[: round(n * job["test_fraction"])]] = True
        began = time.perf_counter()
        logger.info("party %r: training on %d rows", name, int((~is_test).sum()))
        if aligned is None:
            estimator.fit_party(fed, None, label_party=config.active, data_parties=data_parties)
        else:
            train = aligned.loc[~is_test, features]
            labels = aligned.loc[~is_test, label_column] if name == config.active else None
            estimator.fit_party(
                fed, train, labels, label_party=config.active, data_parties=data_parties
            )
        seconds["train"] = time.perf_counter() - began
        began = time.perf_counter()
        scores = None
        if is_test.any():
            test = None if aligned is None else aligned.loc[is_test, features]
            scores = estimator.predict_party(fed, test)
        seconds["predict"] = time.perf_counter() - began
    summary.update(rows=n, test_rows=int(is_test.sum()), seconds=seconds)
    outputs: dict[str, str] = {}  # everything is ready before the first file is written
    if aligned is not None:
        ids = frame.loc[list(aligned.attrs["source_rows"]), id_column].to_numpy()  # type: ignore[union-attr]
        mapping = pd.DataFrame({"common_row": aligned.index, id_column: ids, "test": is_test})
        outputs[f"aligned_{name}.csv"] = mapping.to_csv(index=False)
        outputs[f"model_{name}.json"] = estimator.parts_[name].to_json()
        if name == config.active:
            auc, predictions = _evaluate(aligned, is_test, scores, label_column, id_column, mapping)
            summary.update(test_auc=auc, epochs=int(estimator.n_iter_))
            outputs["predictions.csv"] = predictions.to_csv(index=False)
            outputs["metrics.json"] = json.dumps(summary, indent=1)
    if outputs:
        _publish(target, outputs)
    summary["outputs"] = list(outputs)
    return summary


def _evaluate(
    aligned: pd.DataFrame,
    is_test: np.ndarray[Any, Any],
    scores: Any,
    label_column: str,
    id_column: str,
    mapping: pd.DataFrame,
) -> tuple[float | None, pd.DataFrame]:
    """The test AUC (None when undefined) and the predictions table of the test rows."""
    from sklearn.metrics import roc_auc_score

    if scores is None:
        return None, pd.DataFrame()
    labels = aligned.loc[is_test, label_column].to_numpy()
    scores = np.asarray(scores, dtype=float)
    predictions = pd.DataFrame(
        {
            "common_row": aligned.index[is_test],
            id_column: mapping.loc[is_test, id_column].to_numpy(),
            "score": scores,
            "probability": 1.0 / (1.0 + np.exp(-scores)),
            label_column: labels,
        }
    )
    auc = float(roc_auc_score(labels, scores)) if len(set(labels.tolist())) == 2 else None
    return auc, predictions
