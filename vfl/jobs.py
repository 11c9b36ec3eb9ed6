"""The vertical family's jobs and comparison rows: what it offers the application.

:func:`register` (the ``vertical`` entry point of the ``vflink.families`` group) adds to the
registries of :mod:`vfl.registry` the learners ``vflink party`` can run with ``[job] model =
"..."`` -- ``"logistic"`` (binary or multiclass), ``"linear"`` (regression), ``"poisson"``
(counts) and ``"split"`` (a split neural network, :mod:`vfl.split`) -- and the modules of its
comparison rows (:mod:`vfl.comparison.vertical`, :mod:`vfl.comparison.split`). A job says how
to build its estimator from ``[job.params]`` and how the label party evaluates the held-out
rows (metrics and a predictions table), so a new learner adds a :class:`~vfl.registry.Job`
here, not an edit of the party runner (:mod:`vfl.app.party`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl.registry import Job, register_job, register_scheme_module

__all__ = ["LINEAR", "LOGISTIC", "POISSON", "SPLIT", "register"]


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


LOGISTIC = Job(
    "logistic",
    _logistic,
    _evaluate_classifier,
    ("test_auc", "test_accuracy"),
    present=_present_classifier,
)
LINEAR = Job("linear", _linear, _evaluate_regressor, ("test_r2", "test_rmse"))
POISSON = Job("poisson", _poisson, _evaluate_poisson, ("test_d2", "test_mean_poisson_deviance"))
SPLIT = Job(
    "split",
    _split,
    _evaluate_split,
    ("test_auc", "test_accuracy"),
    present=_present_split,
    protocols=False,
)


def register() -> None:
    """Add the vertical family's jobs and modules of comparison rows to :mod:`vfl.registry`."""
    for job in (LOGISTIC, LINEAR, POISSON, SPLIT):
        register_job(job)
    register_scheme_module("vertical", "vfl.comparison.vertical")
    register_scheme_module("split", "vfl.comparison.split", needs=("torch",))
