"""The vertical family's jobs and comparison rows: what it offers the application.

:func:`register` (the ``vertical`` entry point of the ``vflink.families`` group) adds to the
registries of :mod:`vfl.registry` the learners ``vflink party`` can run with ``[job] model =
"..."`` -- ``"logistic"`` (binary or multiclass), ``"linear"`` (regression), ``"poisson"``
(counts), ``"split"`` (a split neural network, :mod:`vfl.split`), ``"secureboost"`` and
``"secureboost_regression"`` (gradient-boosted trees, :mod:`vfl.boost`) -- and the modules of its
comparison rows (:mod:`vfl.comparison.vertical`, :mod:`vfl.comparison.split`). A job says how
to build its estimator from ``[job.params]`` and how the label party evaluates the held-out
rows (metrics and a predictions table), so a new learner adds a :class:`~vfl.registry.Job`
here, not an edit of the party runner (:mod:`vfl.app.party`).

``[job.params]`` holds the estimator's keyword arguments, with two things TOML cannot write
directly: the ``privacy=`` object and a ``protocol=`` object. A job's make function reads them
as tables (:func:`privacy_from_params`, :func:`split_protocol`)::

    [job.params]
    protocol = "protected"        # split: or a [job.params.protocol] table of ProtectedLayer's
    max_iter = 30

    [job.params.privacy]          # the privacy= object: its mechanism and its arguments
    mechanism = "randomized_response"
    epsilon = 2.0

``mechanism`` is one of :data:`MECHANISMS` (``"gaussian_label_dp"``: logistic;
``"randomized_response"``: split and transfer; ``"embedding_noise"``: split); for a split
network with both, ``[[job.params.privacy]]`` twice (an array of tables: the tuple).

The keys that deployments wrote before the estimators took these objects keep working, as the
short TOML spelling, translated without a deprecation warning (the estimators warn about the
keyword arguments, not the config): ``label_epsilon`` (with ``label_delta`` and ``row_clip``,
which apply only with it) is :class:`~vfl.privacy.GaussianLabelDP` for logistic (and linear,
which refuses it) and :class:`~vfl.privacy.RandomizedResponse` for split and transfer; for
split, ``embedding_noise``
(a table of :class:`~vfl.split.EmbeddingNoise`'s arguments) and ``protected_layer`` (``true``,
``false`` or a table of :class:`~vfl.split.ProtectedLayer`'s); for transfer
(:mod:`transfer.jobs`), ``secure`` (``protocol = "masked"`` or ``"plain"``) and ``hidden``
(``hidden_layer_sizes``). Giving one of them beside ``privacy`` or ``protocol`` is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl.registry import Job, register_job, register_scheme_module

__all__ = [
    "LINEAR",
    "LOGISTIC",
    "MECHANISMS",
    "POISSON",
    "SECUREBOOST",
    "SECUREBOOST_REGRESSION",
    "SPLIT",
    "privacy_from_params",
    "register",
    "split_protocol",
]

MECHANISMS = {
    "gaussian_label_dp": "vfl.privacy.options:GaussianLabelDP",
    "randomized_response": "vfl.privacy.options:RandomizedResponse",
    "embedding_noise": "vfl.split.defences:EmbeddingNoise",
}
"""The ``mechanism`` of a ``[job.params.privacy]`` table -> the ``privacy=`` class it builds
(``module:name``; the class name itself, e.g. ``"RandomizedResponse"``, is accepted too)."""


def _mechanism(table: Any) -> Any:
    """The ``privacy=`` object of one ``[job.params.privacy]`` table."""
    import importlib

    if not isinstance(table, dict) or "mechanism" not in table:
        raise ValueError(
            "[job.params.privacy] must be a table with a mechanism (one of "
            f"{sorted(MECHANISMS)}) and its arguments, got {table!r}"
        )
    options = dict(table)
    name = options.pop("mechanism")
    by_class = {target.rsplit(":", 1)[1]: target for target in MECHANISMS.values()}
    target = (MECHANISMS.get(name) or by_class.get(name)) if isinstance(name, str) else None
    if target is None:
        raise ValueError(
            f"[job.params.privacy] mechanism must be one of {sorted(MECHANISMS)}, got {name!r}"
        )
    module, attribute = target.split(":")
    cls = getattr(importlib.import_module(module), attribute)
    try:
        return cls(**options)
    except TypeError as exc:
        raise ValueError(f"[job.params.privacy] mechanism {name!r}: {exc}") from None


def privacy_from_params(params: dict[str, Any], *, label_dp: str) -> None:
    """Replace, in ``params`` (a job's ``[job.params]``), a ``privacy`` table (or array of
    tables) by its ``privacy=`` object, and the short spelling ``label_epsilon`` (with
    ``label_delta`` and ``row_clip`` for ``label_dp="gaussian"``) by the object it stands for:
    :class:`~vfl.privacy.GaussianLabelDP` (``label_dp="gaussian"``) or
    :class:`~vfl.privacy.RandomizedResponse` (``label_dp="randomized_response"``)."""
    from vfl.privacy.options import GaussianLabelDP, RandomizedResponse

    given = params.get("privacy")
    if isinstance(given, dict):
        params["privacy"] = _mechanism(given)
    elif isinstance(given, list):
        params["privacy"] = tuple(_mechanism(table) for table in given)
    keys = ("label_epsilon", "label_delta", "row_clip") if label_dp == "gaussian" else ()
    old = {k: params.pop(k) for k in keys or ("label_epsilon",) if k in params}
    epsilon = old.get("label_epsilon")
    if epsilon is None:  # label_delta and row_clip apply only with label_epsilon
        return
    if params.get("privacy") is not None:
        raise ValueError("give [job.params.privacy] or label_epsilon, not both")
    if label_dp == "gaussian":
        delta = old.get("label_delta")
        params["privacy"] = GaussianLabelDP(
            epsilon, delta=1e-5 if delta is None else delta, row_clip=old.get("row_clip")
        )
    else:
        params["privacy"] = RandomizedResponse(epsilon)


def split_protocol(params: dict[str, Any]) -> None:
    """Replace, in a split job's ``params``, a ``protocol`` table by the
    :class:`~vfl.split.ProtectedLayer` of those arguments, and the short spelling
    ``protected_layer`` (``true``, ``false`` or such a table) by ``protocol``."""
    from vfl.split.interactive import ProtectedLayer

    def layer(table: dict[str, Any]) -> Any:
        try:
            return ProtectedLayer(**table)
        except TypeError as exc:
            raise ValueError(f"[job.params.protocol] (a ProtectedLayer): {exc}") from None

    if isinstance(params.get("protocol"), dict):
        params["protocol"] = layer(params["protocol"])
    if "protected_layer" not in params:
        return
    old = params.pop("protected_layer")
    if "protocol" in params:
        raise ValueError("give protocol or protected_layer, not both")
    if isinstance(old, dict):
        params["protocol"] = layer(old)
    elif old is True:
        params["protocol"] = "protected"
    elif old is False or old is None:
        params["protocol"] = "plain"
    else:
        raise ValueError(f"protected_layer must be true, false or a table, got {old!r}")


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

    privacy_from_params(params, label_dp="gaussian")
    return VerticalLogisticRegression(**params)


def _linear(**params: Any) -> Any:
    from vfl.linear import VerticalLinearRegression

    privacy_from_params(params, label_dp="gaussian")
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
    """A split network; ``protocol`` a string or a table of
    :class:`~vfl.split.ProtectedLayer`'s arguments, ``privacy`` a table (or an array of
    tables) naming its mechanism; the short spellings ``protected_layer`` (``true`` or such a
    table), ``label_epsilon`` (randomised response) and ``embedding_noise`` (a table of
    :class:`~vfl.split.EmbeddingNoise`'s arguments) as the module docstring says."""
    from vfl.split import EmbeddingNoise, SplitNNClassifier

    split_protocol(params)
    noise = params.pop("embedding_noise", None)
    if isinstance(noise, dict):
        noise = EmbeddingNoise(**noise)
    privacy_from_params(params, label_dp="randomized_response")
    if noise is not None:
        given = params.get("privacy")
        if isinstance(given, (tuple, EmbeddingNoise)):
            raise ValueError("give [job.params.privacy] or embedding_noise, not both")
        params["privacy"] = noise if given is None else (given, noise)
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


def _secureboost(**params: Any) -> Any:
    """Vertical gradient-boosted trees (:mod:`vfl.boost`): a classifier."""
    from vfl.boost.estimator import SecureBoostClassifier

    return SecureBoostClassifier(**params)


def _secureboost_regression(**params: Any) -> Any:
    """Vertical gradient-boosted trees (:mod:`vfl.boost`): a regressor."""
    from vfl.boost.estimator import SecureBoostRegressor

    return SecureBoostRegressor(**params)


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


SECUREBOOST = Job(
    "secureboost",
    _secureboost,
    _evaluate_split,
    ("test_auc", "test_accuracy"),
    present=_present_split,
    protocols=False,
)
SECUREBOOST_REGRESSION = Job(
    "secureboost_regression",
    _secureboost_regression,
    _evaluate_regressor,
    ("test_r2", "test_rmse"),
    protocols=False,
)


def register() -> None:
    """Add the vertical family's jobs and modules of comparison rows to :mod:`vfl.registry`."""
    for job in (LOGISTIC, LINEAR, POISSON, SPLIT, SECUREBOOST, SECUREBOOST_REGRESSION):
        register_job(job)
    register_scheme_module("vertical", "vfl.comparison.vertical")
    register_scheme_module("split", "vfl.comparison.split", needs=("torch",))
