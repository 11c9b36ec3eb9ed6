"""One party's side of a vertical job, as ``vflink party`` runs it in deployment.

The ``[job]`` table of the federation config says what to run; every party runs the same job
with its own data file::

    [job]
    id_column = "patient_id"      # exact ID column for the alignment (ECDH PSI)
    label_column = "diagnosis"    # in the active party's file
    align = "psi"                 # or "bloom": fuzzy identity linkage by the coordinator
    # schema = "identity_schema.json"   # "bloom": the linkage.Schema (Schema.to_json)
    # threshold = 0.8                   # "bloom": match threshold (else chosen from the scores)
    # max_ambiguous = 0.01              # "bloom": refuse when more of the common patients
                                        # were linked by a tie (vfl.align_party)
    test_fraction = 0.3           # common rows held out for the test AUC
    split_seed = 0                # the same split at every party (no message needed)

    model = "logistic"            # the learner, from the registry vfl.jobs.JOBS
                                  # ("logistic": binary or multiclass; "linear": regression;
                                  # "split": a split neural network, vfl.split;
                                  # "transfer": federated transfer learning, its own
                                  # stages in transfer.party)

    [job.params]                  # the learner's keyword arguments ("none" for None)
    max_iter = 10
    batch_size = 256
    # label_epsilon = 4.0         # label DP (logistic; needs tol = "none")

Steps: align the data parties' rows to their common patients (:func:`vfl.align_party`): by
ECDH PSI on the exact ``id_column`` (three or more data parties: with the coordinator's help,
each learning only the common intersection and the set sizes), or with ``align = "bloom"``
by Bloom-filter encodings of the schema's identity columns, linked by the coordinator, which
never has the data parties' shared secret (each data party reads it from ``--secret-file`` or
the ``VFLINK_LINKAGE_SECRET`` environment variable: it must not be in the shared config);
with ``"bloom"`` the ``id_column`` is only each party's own row ID in the outputs, the common
order is reproducible when the coordinator has a key of its own in ``VFLINK_ORDER_KEY``
(random otherwise), and the coordinator refuses to go on when more than ``max_ambiguous`` of
the common patients were linked by a tie. Then the label party draws the test rows from
``split_seed`` (stratified by class for a classifier) and sends the other
parties their aligned positions; with PSI's reproducible common order, one config gives the
same split run after run. Train the job's estimator (by default the
secret-shared protocol: ``"shared_coordinator"`` when the config has a coordinator, else
``"shared"``; three or more data parties must name ``protocol = "coordinator"`` in
``[job.params]``, accepting that it reveals each party its gradient); score the test
rows, which only the active party learns; the active party evaluates them (the job's metrics:
test AUC and accuracy for ``logistic``, R^2 and RMSE for ``linear``).

:func:`run_party` runs the stages in order -- :func:`plan` (every check that needs no peer),
:func:`read_data`, :func:`align_rows`, :func:`split_rows`, :func:`train`, :func:`score`,
:func:`outputs` -- each a function of its own.

Each party's features are the ``columns`` of its ``[[party]]`` table (by default every numeric
column other than the ID and the label, which are logged). Outputs, written only when the job
has succeeded (written to a staging folder first, then each renamed into place), in the
``--out`` folder:

* every data party: ``model_<party>.npz`` (its fitted part, :mod:`vfl.persistence`) and
  ``aligned_<party>.csv`` (its own row IDs in the common order, with the test flag);
* the active party: ``predictions.csv`` (its test rows' IDs, predictions, labels) and
  ``metrics.json`` (the job's metrics, row counts, epochs, seconds per stage), and with label
  DP (``label_epsilon`` in ``[job.params]``) ``privacy_ledger.json``.

Scoring new rows with the saved parts (``vflink party --predict``, :func:`run_predict`): every
data party loads its own part (``--model model_<party>.npz``, as a training run wrote it) and
reads its new data file (the label column is optional); the parties align the rows as above
(:func:`align_rows`) and score every common row, with no split and no training; only the active
party learns the scores. The stages: :func:`plan`, :func:`load_model`, :func:`read_data`,
:func:`check_columns`, :func:`align_rows`, :func:`predict_rows`, :func:`predict_outputs`.
Outputs: every data party's ``aligned_<party>.csv`` (``common_row`` and its own IDs); the active
party's ``predictions.csv`` (IDs and the job's prediction columns: predicted class, score and
probability for ``logistic``, the predicted value for ``linear``) and, when its new file holds
the label column, ``metrics.json`` (the job's metrics on the labelled rows). Refused before any
peer is contacted (and the peers told why): a data party without ``--model``, a model file that
is not a model or is another party's, one trained in another role or with other data parties,
the part's columns missing from the new file, and ``--model`` given to the coordinator.

Failing fast (:func:`_drive`): before any peer is contacted a party checks its own certificate
and key against the federation's CA file (:mod:`vfl.federation.trust`) and its input; a refusal
is logged at once, then told to the peers that are up or come up within
:data:`~vfl.federation.config.NOTICE_SECONDS` (its endpoint open until all are told), and
raised. A failure in a stage is logged at once and told to the peers as the endpoint closes;
so is an unexpected error (by its type and message) and an interruption. A peer whose
certificate the CA did not sign is named as such
(:class:`~vfl.federation.network.UntrustedPeerError`), not retried.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vfl.federation.base import Federation, FederationError
from vfl.federation.config import FederationConfig
from vfl.federation.messages import Message, Namespace
from vfl.jobs import Job, get_job, predictions_frame

__all__ = [
    "align_rows",
    "check_columns",
    "load_model",
    "outputs",
    "plan",
    "predict_outputs",
    "predict_rows",
    "read_data",
    "run_party",
    "run_predict",
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


_JOB_KEYS = {
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
}


def _publish(target: Path, outputs: dict[str, str | bytes]) -> None:
    """Write every output into a staging folder first, then move each into ``target`` (a
    rename each): a failure while writing leaves nothing behind."""
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".vflink-staging-", dir=target))
    try:
        for filename, content in outputs.items():
            data = content.encode() if isinstance(content, str) else content
            with open(staging / filename, "wb") as handle:
                handle.write(data)
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
    return job


def _estimator(config: FederationConfig, job: dict[str, Any]) -> Any:
    # TOML has no null: "none" stands for None (tol = "none" runs every epoch)
    params = {
        k: None if isinstance(v, str) and v.lower() == "none" else v
        for k, v in job["params"].items()
    }
    coordinator = config.coordinator
    if job["learner"].protocols:
        # secure by default: the secret-shared protocol; three or more data parties must name
        # protocol = "coordinator" (which reveals gradients) themselves
        params.setdefault("protocol", "shared_coordinator" if coordinator else "shared")
        if coordinator:
            params.setdefault("coordinator", coordinator)
    try:
        return job["learner"].make(**params)
    except TypeError as exc:
        raise ValueError(f"{config.path}: [job.params]: {exc}") from None


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


def plan(config: FederationConfig, name: str, secret: str | None) -> PartyRun:
    """Every check that needs no peer: the job table, the learner and its arguments, the
    alignment method against the parties, the linkage schema and secret."""
    import linkage

    me = config.party(name)
    job = _job(config)
    run = PartyRun(config, name, me.role, job, job["learner"], _estimator(config, job))
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


def read_data(run: PartyRun, data: str | Path | None) -> None:
    """A data party's file, its ID, label and feature columns, checked."""
    if run.role == "coordinator":
        return
    # identity columns are read as text (leading zeros); PSI IDs keep pandas' reading, which
    # normalize_ids expects (an integer ID written as 1234.0 is 1234)
    text = run.schema.columns if run.schema is not None else []
    frame = _read_data(data, run.name, text)
    id_column, label_column = run.job["id_column"], run.job["label_column"]
    needed = [id_column] + ([label_column] if run.role == "active" and not run.predict else [])
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ValueError(f"party {run.name!r}: its data file has no column {missing[0]!r}")
    me = run.config.party(run.name)
    run.features = _features(
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
        test = _draw_test_rows(run)
        JOB.broadcast(fed, "test-rows", HeldOutRows(test), to=others)
    else:
        test = JOB.recv(fed, config.active, "test-rows", HeldOutRows).rows
        if test.ndim != 1 or test.dtype.kind not in "iu" or len(np.unique(test)) != len(test):
            HeldOutRows.refuse(config.active, "rows", "are not distinct integer positions")
        if len(test) and (test.min() < 0 or test.max() >= run.rows):
            HeldOutRows.refuse(config.active, "rows", f"fall outside the {run.rows} common rows")
    run.is_test = np.zeros(run.rows, dtype=bool)
    run.is_test[test] = True


def _draw_test_rows(run: PartyRun) -> np.ndarray[Any, Any]:
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


def _check_certificate(
    config: FederationConfig, name: str, cert: str | Path | None, key: str | Path | None
) -> None:
    """This party's own certificate and key against the federation's CA file, before any peer
    is contacted (:func:`vfl.federation.trust.check_own_certificate`); the paths as
    :meth:`FederationConfig.federation` resolves them (which names a missing one, later)."""
    from vfl.federation.trust import check_own_certificate

    me = config.party(name)
    own_cert, own_key = cert or me.cert, key or me.key
    if own_cert is not None and own_key is not None:
        check_own_certificate(name, ca=config.ca, cert=own_cert, key=own_key)


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
    unless the whole job succeeded. A transfer job (``model = "transfer"``) runs
    :func:`transfer.party.run_transfer_party` instead."""
    if config.job.get("model") == "transfer":
        from transfer.party import run_transfer_party

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

    return _drive(
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


_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _connect_scheduler(
    config: FederationConfig,
    name: str,
    cert: str | Path | None = None,
    key: str | Path | None = None,
) -> Any:
    """A client of the party's own Dask scheduler when the config names one (None otherwise).

    What the cluster receives is as sensitive as the party's data: encryption's random powers
    (each decrypts its ciphertext without the key), the PSI scalar, the Bloom secret, feature
    rows and the party's secret shares. So a scheduler on another host must be reached over
    ``tls://``, authenticated with the party's own certificate and key and the federation CA
    (the cluster's TLS must accept them); plain ``tcp://`` is refused except on this machine.
    Clear errors when the ``dask`` extra is missing, the scheduler does not answer, or no
    worker joins it within the connect timeout (instead of tasks that would wait forever)."""
    me = config.party(name)
    address = me.scheduler
    if address is None:
        return None
    scheme, _, rest = address.rpartition("://")
    host = rest.rsplit(":", 1)[0]
    if scheme in ("", "tcp") and host not in _LOOPBACK:
        raise ValueError(
            f"party {name!r}: its Dask scheduler {address!r} would be reached over plain TCP, "
            "which carries encryption randomness, the PSI scalar and secret shares in the "
            "clear: use tls://host:port (with this party's certificate and the federation CA) "
            "or a scheduler on this machine (tcp://127.0.0.1:port)"
        )
    if scheme not in ("", "tcp", "tls"):
        raise ValueError(
            f"party {name!r}: scheduler {address!r}: use tls://host:port (or tcp:// on this "
            "machine)"
        )
    try:
        import distributed
    except ImportError:
        raise ValueError(
            f"party {name!r}: the config names its Dask scheduler {address!r}, but Dask is not "
            "installed here: pip install 'vflink[dask]'"
        ) from None
    security = None
    if scheme == "tls":
        own_cert, own_key = cert or me.cert, key or me.key
        if own_cert is None or own_key is None:
            raise ValueError(
                f"party {name!r}: a tls:// Dask scheduler needs this party's certificate and key "
                "(--cert/--key or the config)"
            )
        make_security: Any = distributed.security.Security  # (untyped)
        security = make_security(
            tls_ca_file=str(config.ca),
            tls_client_cert=str(own_cert),
            tls_client_key=str(own_key),
            require_encryption=True,
        )
    connect: Any = distributed.Client  # (untyped)
    try:
        client: Any = connect(address, timeout=config.connect_timeout, security=security)
    except (OSError, TimeoutError) as exc:
        raise ValueError(
            f"party {name!r}: cannot reach its Dask scheduler {address!r} within "
            f"{config.connect_timeout:g} s ({exc}); start it (dask scheduler) or fix the "
            "address in the config"
        ) from None
    try:
        client.wait_for_workers(1, timeout=config.connect_timeout)
    except (OSError, TimeoutError):
        client.close()
        raise ValueError(
            f"party {name!r}: its Dask scheduler {address!r} has no worker after "
            f"{config.connect_timeout:g} s: start workers (dask worker {address}) or remove "
            "scheduler from its config entry"
        ) from None
    logger.info(
        "party %r: heavy work on the Dask scheduler %s (%d worker threads)",
        name,
        address,
        sum(client.nthreads().values()),
    )
    return client


def _drive(
    config: FederationConfig,
    name: str,
    cert: str | Path | None,
    key: str | Path | None,
    out: str | Path,
    prepare: Any,
    stages: list[Any],
    summarize: Any,
    publish: Any,
) -> dict[str, Any]:
    """One party's job: its own certificate and ``prepare()`` (every check without a peer),
    the ``stages`` on the federation, then the summary and the outputs, written only when
    every stage succeeded.

    Fails fast and says why: a refusal of its own input or certificate is logged at once,
    before any peer is contacted, then told to the peers
    (:meth:`~vfl.federation.config.FederationConfig.stop_peers`) before it is raised; a
    failure in a stage is logged at once and told to the peers as the endpoint closes, and so
    is an unexpected error (by its type and message) or an interruption."""
    try:
        _check_certificate(config, name, cert, key)
        run = prepare()
        run.workers = _connect_scheduler(config, name, cert, key)
    except ValueError as exc:  # refused our own input: say so, tell the peers why, then stop
        logger.error("party %r refuses to start: %s", name, exc)
        config.stop_peers(name, str(exc), cert=cert, key=key)
        raise
    if run.workers is not None and "workers" in run.estimator.get_params():
        run.estimator.set_params(workers=run.workers)
    try:
        with config.federation(name, cert=cert, key=key) as fed:
            # say why, so that peers end at once (waiting a few seconds for a peer that is
            # still starting: not the whole connect timeout, which a peer that died without a
            # word would make this party wait out)
            patience = min(config.connect_timeout, 5.0)
            try:
                for stage in stages:
                    stage(run, fed)
            except (ValueError, FederationError) as exc:
                logger.error("party %r stops: %s", name, exc)
                fed.close(reason=str(exc), patience=patience)
                raise
            except Exception as exc:  # a fault of this party's own, reported with its type
                logger.error("party %r stops on an unexpected error: %r", name, exc)
                fed.close(reason=f"party {name!r} failed: {exc!r}", patience=patience)
                raise
            except KeyboardInterrupt:  # SIGTERM or Ctrl-C: tell the peers that are up
                fed.close(reason=f"party {name!r} was interrupted", patience=0.0)
                raise
    finally:
        if run.workers is not None:
            run.workers.close()
    summary: dict[str, Any] = {"party": name, "role": run.role, "rows": run.rows}
    summary.update(summarize(run), seconds=run.seconds)
    files = publish(run, summary)
    if files:
        _publish(Path(out), files)
    summary["outputs"] = list(files)
    return summary


# -- scoring new rows with saved parts (vflink party --predict) ---------------------------------


def load_model(run: PartyRun, model: str | Path | None) -> None:
    """``--predict``: give the estimator this party's saved part (the ``model_<party>.npz`` its
    training run wrote), checked against the party and the config; the coordinator holds no
    part and is given none."""
    name, config = run.name, run.config
    config.check_arguments(name, model=model, predict=True)
    if run.role == "coordinator":
        run.estimator.load(label_party=config.active)
        return
    try:
        run.estimator.load(model, label_party=config.active)
    except ValueError as exc:
        raise ValueError(
            f"party {name!r}: --model {model}: {exc}; pass the model_{name}.npz that its "
            "training run wrote"
        ) from None
    parts = run.estimator.parts_
    if name not in parts:
        owner = f"the part of party {next(iter(parts))!r}" if parts else "no part of a model"
        raise ValueError(
            f"party {name!r}: --model {model} is {owner}, not of party {name!r}; pass the "
            f"model_{name}.npz that its own training run wrote"
        )
    part = parts[name]
    if part.role != run.role:
        raise ValueError(
            f"party {name!r}: --model {model} was trained with {name!r} as the {part.role} "
            f"party, but {config.path} makes it {run.role}; score with the config it was "
            "trained with"
        )
    trained = part.extra.get("data_parties")
    if trained is not None and sorted(trained) != sorted(run.data_parties):
        raise ValueError(
            f"party {name!r}: --model {model} was trained with the data parties {trained}, "
            f"but {config.path} has {run.data_parties}; score with the config it was trained "
            "with"
        )


def check_columns(run: PartyRun, model: str | Path | None) -> None:
    """``--predict``: the new data file has every column the saved part was trained on; they
    are this party's features (the label column is not needed)."""
    if run.frame is None:
        return
    part = run.estimator.parts_[run.name]
    # the raw columns the part's design reads (its preprocessing's inputs, when it keeps one)
    columns = list(part.input_columns)
    missing = [c for c in columns if c not in run.frame.columns]
    if missing:
        raise ValueError(
            f"party {run.name!r}: its data file lacks the columns {missing} that its model "
            f"{model} was trained on (it has {list(run.frame.columns)}); add them, under the "
            "same names"
        )
    run.features = list(columns)


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
    --predict``): each data party loads its own ``model`` (``model_<party>.npz``) and reads
    its new ``data``; the parties align the rows as the training job does (:func:`align_rows`)
    and score them all; only the label party learns the scores. ``secret`` as in
    :func:`run_party`. Returns a summary (the label party's includes the job's metrics when
    the new file holds labels). Raises ValueError for bad input (telling the peers why), a
    FederationError when a peer fails; writes nothing unless every stage succeeded."""

    def prepare() -> PartyRun:
        config.check_arguments(name, model=model, predict=True)  # before anything loads
        run = plan(config, name, secret)
        if run.learner.name == "transfer":
            raise ValueError(
                f"{config.path}: a transfer job has no --predict yet: its target scores every "
                "row of its file in the training run (predictions.csv)"
            )
        run.predict = True
        load_model(run, model)
        read_data(run, data)
        check_columns(run, model)
        return run

    return _drive(
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
