"""Every check of one party's job that needs no peer: the job table, the learner and its
arguments, the alignment method against the parties, the linkage schema and secret
(:func:`plan`), then the party's data file (:func:`read_data`).

The ``[job]`` table is described in :mod:`vfl.app.party`; its ``model`` names a job of the
registry the families fill (:mod:`vfl.registry`, found by :mod:`vfl.app.families`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vfl.app.families import get_job
from vfl.federation.config import FederationConfig
from vfl.registry import Job

__all__ = [
    "ALIGN_METHODS",
    "JOB_KEYS",
    "UNBALANCED_KEYS",
    "PartyRun",
    "check_ledger",
    "check_saved_part",
    "check_trained_columns",
    "feature_columns",
    "job_table",
    "load_saved_part",
    "make_estimator",
    "plan",
    "read_csv",
    "read_data",
    "unbalanced_table",
]

logger = logging.getLogger("vflink.party")


JOB_KEYS = {
    "id_column",
    "label_column",
    "test_fraction",
    "split_seed",
    "model",
    "params",
    "align",
    "schema",
    "threshold",
    "max_ambiguous",
    "unbalanced",
}

ALIGN_METHODS = ("psi", "bloom", "unbalanced")
UNBALANCED_KEYS = {"server", "max_evaluations", "max_queries", "ledger", "probes"}


def job_table(config: FederationConfig) -> dict[str, Any]:
    """The config's ``[job]`` table, checked, with its defaults filled in and its learner
    (``"learner"``: the registry's :class:`~vfl.registry.Job` named by ``model``); a
    ``ValueError`` naming the config and the key otherwise."""
    job = dict(config.job)
    where = f"{config.path}: [job]"
    unknown = sorted(set(job) - JOB_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; known: {sorted(JOB_KEYS)}")
    for key in ("id_column", "label_column"):
        if not isinstance(job.get(key), str):
            raise ValueError(f'{where} needs {key} = "<column name>"')
    fraction = job.setdefault("test_fraction", 0.3)
    if not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise ValueError(f"{where} test_fraction must be in [0, 1), got {fraction!r}")
    if not isinstance(job.setdefault("split_seed", 0), int):
        raise ValueError(f"{where} split_seed must be an integer")
    method = job.setdefault("align", "psi")
    if method not in ALIGN_METHODS:
        raise ValueError(
            f"{where} align must be one of {', '.join(repr(m) for m in ALIGN_METHODS)}, got "
            f"{method!r}"
        )
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
    ambiguous = job.setdefault("max_ambiguous", 0.01)
    if (
        isinstance(ambiguous, bool)
        or not isinstance(ambiguous, (int, float))
        or not (0 <= ambiguous <= 1)
    ):
        raise ValueError(f"{where} max_ambiguous must be a fraction in [0, 1], got {ambiguous!r}")
    model = job.setdefault("model", "logistic")
    if isinstance(model, dict):
        raise ValueError(
            f"{where}: [job.model] is now [job.params] (the learner's arguments), and model = "
            '"logistic" names the learner'
        )
    try:
        job["learner"] = get_job(model)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not isinstance(job.setdefault("params", {}), dict):
        raise ValueError(f"{where}.params must be a table of the learner's arguments")
    if method == "unbalanced":
        job["unbalanced"] = unbalanced_table(config, job)
    elif "unbalanced" in job:
        raise ValueError(
            f'{where}.unbalanced is read only with align = "unbalanced" (align is {method!r})'
        )
    return job


def unbalanced_table(config: FederationConfig, job: dict[str, Any]) -> dict[str, Any]:
    """The ``[job.unbalanced]`` table of ``align = "unbalanced"`` (:mod:`vfl.align_unbalanced`),
    checked, with its defaults: ``server`` (the data party with the large set), ``max_evaluations``
    (required: the OPRF evaluations the client may have), ``max_queries``, ``ledger`` (a path
    relative to the config) and ``probes``."""
    from vfl.align_unbalanced import DEFAULT_PROBES

    where = f"{config.path}: [job.unbalanced]"
    table = job.get("unbalanced")
    if not isinstance(table, dict):
        raise ValueError(
            f'{config.path}: [job] align = "unbalanced" needs a [job.unbalanced] table with '
            'server = "<the data party with the large set>" and max_evaluations = <the most '
            "IDs the other party may test>"
        )
    options = dict(table)
    unknown = sorted(set(options) - UNBALANCED_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; known: {sorted(UNBALANCED_KEYS)}")
    parties = config.data_parties
    if len(parties) != 2:
        raise ValueError(
            f"{where}: unbalanced PSI aligns exactly two data parties; the config has "
            f'{parties} (use align = "psi" for three or more)'
        )
    if job["learner"].runner == "transfer":
        raise ValueError(
            f'{where}: a transfer job aligns by align = "psi" or "bloom", not "unbalanced"'
        )
    server = options.get("server")
    if server not in parties:
        raise ValueError(
            f"{where} server must name the data party that holds the large set, one of "
            f"{parties}; got {server!r}"
        )
    for key, required in (("max_evaluations", True), ("max_queries", False)):
        value = options.get(key)
        if value is None and not required:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"{where} {key} must be a positive integer"
                + (" (the most IDs the client may test, its probes included)" if required else "")
                + f", got {value!r}"
            )
    probes = options.setdefault("probes", DEFAULT_PROBES)
    if isinstance(probes, bool) or not isinstance(probes, int) or probes < 0:
        raise ValueError(f"{where} probes must be a non-negative integer, got {probes!r}")
    if probes == 0:
        logger.warning(
            "%s: probes = 0: the client will not check that the server answers with the key "
            "it committed to",
            where,
        )
    ledger = options.get("ledger")
    if ledger is not None:
        if not isinstance(ledger, str):
            raise ValueError(f'{where} ledger must be a file name, "<ledger>.json"')
        path = Path(ledger)
        options["ledger"] = path if path.is_absolute() else config.path.parent / path
    options.setdefault("max_queries", None)
    options.setdefault("ledger", None)
    return options


def make_estimator(config: FederationConfig, job: dict[str, Any]) -> Any:
    """The job's estimator from ``[job.params]``; a learner that takes ``protocol=`` gets the
    secret-shared protocol by default (with the config's coordinator when it has one)."""
    # TOML has no null: "none" stands for None (tol = "none" runs every epoch)
    params = {
        k: None if isinstance(v, str) and v.lower() == "none" else v
        for k, v in job["params"].items()
    }
    coordinator = config.coordinator
    if job["learner"].protocols:
        # secure by default: the secret-shared protocol, for any number of data parties
        params.setdefault("protocol", "shared_coordinator" if coordinator else "shared")
        if coordinator:
            params.setdefault("coordinator", coordinator)
    try:
        return job["learner"].make(**params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{config.path}: [job.params]: {exc}") from None


def read_csv(path: str | Path | None, name: str, text: list[str]) -> pd.DataFrame:
    """The party's CSV; the identity columns in ``text`` are read as text (a postcode or a
    date of birth must keep its leading zeros)."""
    if path is None:
        raise ValueError(f"party {name!r} holds data: pass its file with --data FILE.csv")
    try:
        return pd.read_csv(path, dtype={c: str for c in text})
    except (OSError, ValueError) as exc:
        raise ValueError(f"party {name!r}: cannot read its data file {path}: {exc}") from None


def feature_columns(
    frame: pd.DataFrame,
    name: str,
    listed: list[str] | None,
    skip: set[str],
    *,
    preprocess: bool = False,
) -> list[str]:
    """The ``[[party]]`` table's ``columns``; by default every numeric column but those of
    ``skip`` (the ID and the label), or with ``preprocess`` (the estimator preprocesses each
    party's columns, :mod:`vfl.preprocessing`) every column but those."""
    if listed is not None:
        missing = [c for c in listed if c not in frame.columns]
        if missing:
            raise ValueError(
                f"party {name!r}: columns {missing} of its [[party]] table are not in its data "
                f"file (it has {list(frame.columns)})"
            )
        return listed
    if preprocess:  # text columns are one-hot encoded, missing values imputed
        chosen = [c for c in frame.columns if c not in skip]
        if not chosen:
            raise ValueError(f"party {name!r}: its data file has no feature columns")
        logger.info("party %r: features (all columns, preprocessed): %s", name, chosen)
        return chosen
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


def check_trained_columns(
    frame: pd.DataFrame, name: str, columns: list[str], model: str | Path | None
) -> list[str]:
    """``--predict``: the new data file has every column that party ``name``'s saved part
    (``model``) was trained on; returns them (this party's features, in the fitted order)."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(
            f"party {name!r}: its data file lacks the columns {missing} that its model "
            f"{model} was trained on (it has {list(frame.columns)}); add them, under the "
            "same names"
        )
    return list(columns)


@dataclass
class PartyRun:
    """One party's job as it goes through the stages (built by :func:`plan`)."""

    config: FederationConfig
    name: str
    role: str
    job: dict[str, Any]
    learner: Job
    estimator: Any
    schema: Any = None
    secret: str | None = None
    frame: pd.DataFrame | None = None
    features: list[str] = field(default_factory=list)
    aligned: pd.DataFrame | None = None
    rows: int = 0
    is_test: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    predicted: np.ndarray[Any, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    predict: bool = False  # scoring new rows with saved parts: no label column needed
    workers: Any = None  # this party's own Dask client, when the config names its scheduler

    @property
    def data_parties(self) -> list[str]:
        return self.config.data_parties


def load_saved_part(run: PartyRun, model: str | Path | None, load: Callable[[], Any]) -> None:
    """``--predict``: ``load()`` the estimator's saved part, its error naming the party, the
    file and the fix."""
    try:
        load()
    except ValueError as exc:
        raise ValueError(
            f"party {run.name!r}: --model {model}: {exc}; pass the model_{run.name}.npz that "
            "its training run wrote"
        ) from None


def check_saved_part(
    run: PartyRun,
    model: str | Path | None,
    *,
    owner: str | None,
    trained: list[str] | None,
) -> None:
    """``--predict``: the loaded part is this party's own (``owner``, None when the file
    held no part) and was trained with the config's data parties (``trained``, None when
    the part does not say)."""
    name, path = run.name, run.config.path
    if owner != name:
        whose = f"the part of party {owner!r}" if owner is not None else "no part of a model"
        raise ValueError(
            f"party {name!r}: --model {model} is {whose}, not of party {name!r}; pass the "
            f"model_{name}.npz that its own training run wrote"
        )
    if trained is not None and sorted(trained) != sorted(run.data_parties):
        raise ValueError(
            f"party {name!r}: --model {model} was trained with the data parties {trained}, "
            f"but {path} has {run.data_parties}; score with the config it was trained with"
        )


def plan(config: FederationConfig, name: str, secret: str | None) -> PartyRun:
    """Every check that needs no peer: the job table, the learner and its arguments, the
    alignment method against the parties, the linkage schema and secret."""
    import linkage

    me = config.party(name)
    job = job_table(config)
    run = PartyRun(config, name, me.role, job, job["learner"], make_estimator(config, job))
    if job["align"] == "psi" and len(run.data_parties) > 2 and config.coordinator is None:
        raise ValueError(
            f"{config.path}: PSI among {len(run.data_parties)} data parties needs a coordinator "
            "(it helps the intersection and never sees an ID); add a [[party]] with role = "
            '"coordinator"'
        )
    if job["align"] == "bloom" and me.role != "coordinator":
        try:
            run.schema = linkage.Schema.from_json(Path(job["schema"]).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"party {name!r}: cannot use the schema {job['schema']}: {exc}"
            ) from None
    if job["align"] == "unbalanced" and name == job["unbalanced"]["server"]:
        check_ledger(run)
    if me.role == "coordinator" and secret is not None:
        raise ValueError(
            f"party {name!r} is the coordinator: it must never have the data parties' linkage "
            "secret (do not pass --secret-file to it)"
        )
    if job["align"] == "bloom" and me.role != "coordinator":
        secret = secret if secret is not None else os.environ.get("VFLINK_LINKAGE_SECRET")
        if not secret or len(secret) < 16:
            raise ValueError(
                f"party {name!r}: Bloom-filter alignment needs the data parties' shared "
                "secret, at least 16 characters: --secret-file FILE or the "
                "VFLINK_LINKAGE_SECRET variable"
            )
        run.secret = secret
    return run


def check_ledger(run: PartyRun) -> None:
    """The unbalanced PSI server's ledger (``[job.unbalanced] ledger``), if any: its folder
    exists and the file, if it exists, is a ledger (read as the alignment will read it)."""
    import linkage

    options = run.job["unbalanced"]
    ledger = options["ledger"]
    if ledger is None:
        return
    if not ledger.parent.is_dir():
        raise ValueError(
            f"party {run.name!r}: the folder of its unbalanced PSI ledger {ledger} does not "
            "exist; create it, or fix [job.unbalanced] ledger"
        )
    try:
        linkage.UnbalancedPsiServer(ledger=ledger, workers=1)
    except ValueError as exc:
        raise ValueError(f"party {run.name!r}: {exc}") from None


def read_data(run: PartyRun, data: str | Path | None) -> None:
    """A data party's file, its ID, label and feature columns, checked."""
    if run.role == "coordinator":
        return
    # identity columns are read as text (leading zeros); PSI IDs keep pandas' reading, which
    # normalize_ids expects (an integer ID written as 1234.0 is 1234)
    text = run.schema.columns if run.schema is not None else []
    frame = read_csv(data, run.name, text)
    id_column, label_column = run.job["id_column"], run.job["label_column"]
    needed = [id_column] + ([label_column] if run.role == "active" and not run.predict else [])
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ValueError(f"party {run.name!r}: its data file has no column {missing[0]!r}")
    me = run.config.party(run.name)
    run.features = feature_columns(
        frame,
        run.name,
        me.columns,
        {id_column, label_column, *text},  # never the identity columns of the linkage
        preprocess=bool(getattr(run.estimator, "preprocess", None)),
    )
    absent = [c for c in text if c not in frame]
    if absent:
        raise ValueError(
            f"party {run.name!r}: the linkage schema reads columns {absent} that its data file "
            "does not have"
        )
    run.frame = frame
