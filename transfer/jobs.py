"""The transfer family's job and comparison rows: what it offers the application.

:func:`register` (the ``transfer`` entry point of the ``vflink.families`` group) adds to the
registries of :mod:`vfl.registry` the job ``model = "transfer"`` (federated transfer learning,
:class:`transfer.FederatedTransferClassifier`, run by the application's transfer runner: the
source labels every row, the target keeps its own) and the module of its comparison rows,
:mod:`transfer.comparison`. ``[job.params]`` is read as :mod:`vfl.jobs` says (a
``[job.params.privacy]`` table, and the short spellings of older configs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl.jobs import privacy_from_params
from vfl.registry import Job, register_job, register_scheme_module

__all__ = ["TRANSFER", "register"]


def _transfer(**params: Any) -> Any:
    """Federated transfer learning; ``privacy`` a ``[job.params.privacy]`` table
    (``mechanism = "randomized_response"``) and the short spellings ``label_epsilon``,
    ``secure`` (``protocol = "masked"`` or ``"plain"``) and ``hidden``
    (``hidden_layer_sizes``), as :mod:`vfl.jobs` says."""
    from transfer.estimator import FederatedTransferClassifier

    privacy_from_params(params, label_dp="randomized_response")
    if "secure" in params:
        if "protocol" in params:
            raise ValueError("give protocol or secure, not both")
        params["protocol"] = "masked" if params.pop("secure") else "plain"
    if "hidden" in params:
        if "hidden_layer_sizes" in params:
            raise ValueError("give hidden_layer_sizes or hidden, not both")
        params["hidden_layer_sizes"] = params.pop("hidden")
    if isinstance(params.get("hidden_layer_sizes"), list):  # a TOML array
        params["hidden_layer_sizes"] = tuple(params["hidden_layer_sizes"])
    return FederatedTransferClassifier(**params)


def _evaluate_transfer(
    estimator: Any, labels: np.ndarray[Any, Any], proba: np.ndarray[Any, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    from sklearn.metrics import roc_auc_score

    positive = np.asarray(labels) == estimator.classes_[1]
    auc = float(roc_auc_score(positive, proba)) if len(set(positive.tolist())) == 2 else None
    return {"test_auc": auc}, {"probability": proba}


def _present_transfer(estimator: Any, proba: np.ndarray[Any, Any]) -> dict[str, Any]:
    """The ``predictions.csv`` columns of new rows (``vflink party --predict``): the
    probability of ``classes_[1]`` and the predicted class (that one where it is above 0.5)."""
    return {"probability": proba, "predicted": estimator.classes_[(proba > 0.5).astype(int)]}


TRANSFER = Job(
    "transfer",
    _transfer,
    _evaluate_transfer,
    ("test_auc",),
    present=_present_transfer,
    protocols=False,
    runner="transfer",
)


def register() -> None:
    """Add the transfer family's job and module of comparison rows to :mod:`vfl.registry`."""
    register_job(TRANSFER)
    register_scheme_module("transfer", "transfer.comparison", needs=("torch",))
