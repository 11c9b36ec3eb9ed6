"""The learners ``vflink party`` can run: a name registry of :class:`Job` entries.

``[job] model = "logistic"`` in the federation config picks an entry; ``[job.params]`` holds the
estimator's keyword arguments. A job says how to build its estimator and how the label party
evaluates the held-out rows (metrics and a predictions table), so a new learner adds an entry
here (:func:`register_job`), not an edit of :mod:`vfl.party`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["JOBS", "Job", "get_job", "register_job"]


def _present_outputs(estimator: Any, outputs: np.ndarray[Any, Any]) -> dict[str, Any]:
    return {"predicted": outputs}


@dataclass(frozen=True)
class Job:
    """A learner ``vflink party`` can run.

    Attributes
    ----------
    name : str
        Its name in ``[job] model = "..."``.
    make : callable
        ``make(**params)``: the estimator (with ``fit_party``/``predict_party``/``parts_``).
    evaluate : callable
        ``evaluate(estimator, labels, outputs)``: ``(metrics, columns)`` from the held-out
        rows' true labels and what the label party's ``predict_party`` returned; ``columns``
        are added to ``predictions.csv``.
    metrics : tuple of str
        The names ``evaluate`` reports (each None in ``metrics.json`` when there are no
        held-out rows).
    present : callable
        ``present(estimator, outputs)``: the ``predictions.csv`` columns of rows without
        labels (``vflink party --predict``); by default the outputs as ``predicted``.
    """

    name: str
    make: Callable[..., Any]
    evaluate: Callable[
        [Any, np.ndarray[Any, Any], np.ndarray[Any, Any]], tuple[dict[str, Any], dict[str, Any]]
    ]
    metrics: tuple[str, ...] = ()
    present: Callable[[Any, np.ndarray[Any, Any]], dict[str, Any]] = field(default=_present_outputs)
    protocols: bool = True
    """Whether the learner takes ``protocol=`` and ``coordinator=`` (the vertical linear
    models; ``vflink party`` then defaults them from the config)."""


def _present_classifier(estimator: Any, scores: np.ndarray[Any, Any]) -> dict[str, Any]:
    """The predicted class, and the score and probability (binary) or each class's
    probability (multiclass)."""
    from vfl.linear.logistic import probabilities

    classes = estimator.classes_
    matrix = scores[:, None] if scores.ndim == 1 else scores
    proba = probabilities(matrix)
    columns: dict[str, Any] = {"predicted": classes[proba.argmax(axis=1)]}
    if matrix.shape[1] == 1:
        columns.update(score=matrix[:, 0], probability=proba[:, 1])
    else:
        for k, label in enumerate(classes):
            columns[f"probability_{label}"] = proba[:, k]
    return columns


def _evaluate_classifier(
    estimator: Any, labels: np.ndarray[Any, Any], scores: np.ndarray[Any, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    from sklearn.metrics import accuracy_score, roc_auc_score

    columns = _present_classifier(estimator, scores)
    metrics: dict[str, Any] = {"test_accuracy": float(accuracy_score(labels, columns["predicted"]))}
    if "score" in columns:
        present = set(np.asarray(labels).tolist())
        metrics["test_auc"] = (
            float(roc_auc_score(labels == estimator.classes_[1], columns["score"]))
            if len(present) == 2
            else None
        )
    return metrics, columns


def _evaluate_regressor(
    estimator: Any, labels: np.ndarray[Any, Any], predicted: np.ndarray[Any, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    from sklearn.metrics import mean_squared_error, r2_score

    truth = np.asarray(labels, dtype=float)
    metrics = {
        "test_r2": float(r2_score(truth, predicted)) if len(truth) > 1 else None,
        "test_rmse": float(np.sqrt(mean_squared_error(truth, predicted))),
    }
    return metrics, {"predicted": predicted}


def _logistic(**params: Any) -> Any:
    from vfl.linear import VerticalLogisticRegression

    return VerticalLogisticRegression(**params)


def _linear(**params: Any) -> Any:
    from vfl.linear import VerticalLinearRegression

    return VerticalLinearRegression(**params)


def _poisson(**params: Any) -> Any:
    """Vertical Poisson regression; it trains under ``protocol = "coordinator"`` only, which
    ``[job.params]`` must name (it reveals each party its gradient; the default secret-shared
    protocol is refused with the reason)."""
    from vfl.linear import VerticalPoissonRegression

    return VerticalPoissonRegression(**params)


def _evaluate_poisson(
    estimator: Any, labels: np.ndarray[Any, Any], predicted: np.ndarray[Any, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    from sklearn.metrics import d2_tweedie_score, mean_poisson_deviance

    truth = np.asarray(labels, dtype=float)
    metrics = {
        "test_d2": float(d2_tweedie_score(truth, predicted, power=1)) if len(truth) > 1 else None,
        "test_mean_poisson_deviance": float(mean_poisson_deviance(truth, predicted)),
    }
    return metrics, {"predicted": predicted}


def _split(**params: Any) -> Any:
    """A split network; ``protected_layer = true`` or a table of
    :class:`~vfl.split.ProtectedLayer`'s arguments, ``embedding_noise`` a table of
    :class:`~vfl.split.EmbeddingNoise`'s."""
    from vfl.split import EmbeddingNoise, ProtectedLayer, SplitNNClassifier

    layer = params.get("protected_layer")
    if layer is True:
        params["protected_layer"] = ProtectedLayer()
    elif isinstance(layer, dict):
        params["protected_layer"] = ProtectedLayer(**layer)
    elif layer is False:
        params["protected_layer"] = None
    if isinstance(params.get("embedding_noise"), dict):
        params["embedding_noise"] = EmbeddingNoise(**params["embedding_noise"])
    return SplitNNClassifier(**params)


def _present_split(estimator: Any, proba: np.ndarray[Any, Any]) -> dict[str, Any]:
    """The predicted class, and the positive class's probability (binary) or each class's."""
    classes = estimator.classes_
    columns: dict[str, Any] = {"predicted": classes[proba.argmax(axis=1)]}
    if proba.shape[1] == 2:
        columns["probability"] = proba[:, 1]
    else:
        for k, label in enumerate(classes):
            columns[f"probability_{label}"] = proba[:, k]
    return columns


def _evaluate_split(
    estimator: Any, labels: np.ndarray[Any, Any], proba: np.ndarray[Any, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    from sklearn.metrics import accuracy_score, roc_auc_score

    columns = _present_split(estimator, proba)
    metrics: dict[str, Any] = {"test_accuracy": float(accuracy_score(labels, columns["predicted"]))}
    two = proba.shape[1] == 2 and len(set(np.asarray(labels).tolist())) == 2
    metrics["test_auc"] = (
        float(roc_auc_score(labels == estimator.classes_[1], proba[:, 1])) if two else None
    )
    return metrics, columns


def _transfer(**params: Any) -> Any:
    from transfer import FederatedTransferClassifier

    return FederatedTransferClassifier(**params)


def _evaluate_transfer(
    estimator: Any, labels: np.ndarray[Any, Any], proba: np.ndarray[Any, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    from sklearn.metrics import roc_auc_score

    positive = np.asarray(labels) == estimator.classes_[1]
    auc = float(roc_auc_score(positive, proba)) if len(set(positive.tolist())) == 2 else None
    return {"test_auc": auc}, {"probability": proba}


JOBS: dict[str, Job] = {}
"""The registry: name -> job."""


def register_job(job: Job) -> None:
    """Add (or replace) a job in the registry."""
    JOBS[job.name] = job


def get_job(name: Any) -> Job:
    """The job named ``name`` (``ValueError`` listing the known names otherwise)."""
    job = JOBS.get(name) if isinstance(name, str) else None
    if job is None:
        raise ValueError(f"model must be one of {sorted(JOBS)}, got {name!r}")
    return job


register_job(
    Job(
        "logistic",
        _logistic,
        _evaluate_classifier,
        ("test_auc", "test_accuracy"),
        present=_present_classifier,
    )
)
register_job(Job("linear", _linear, _evaluate_regressor, ("test_r2", "test_rmse")))
register_job(Job("poisson", _poisson, _evaluate_poisson, ("test_d2", "test_mean_poisson_deviance")))


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


register_job(
    Job("transfer", _transfer, _evaluate_transfer, ("test_auc",), protocols=False)
)  # run by transfer.party (the target keeps its rows; the source labels every row)
register_job(
    Job(
        "split",
        _split,
        _evaluate_split,
        ("test_auc", "test_accuracy"),
        present=_present_split,
        protocols=False,
    )
)
