"""The pooled twin: the model a horizontal fit stands for, trained on the clients' rows pooled in
one place -- the yardstick federated quality is measured against (the tests and
``benchmarks/horizontal.py`` compare the estimators' defaults with it).

* a linear model (``module="linear"``): scikit-learn on the pooled rows standardised with
  their own means and deviations, with the fit's penalty: ``LogisticRegression`` (the
  default ``alpha`` is its ``C=1``) or ``LinearRegression`` (``Ridge`` when ``alpha > 0``);
* a network (any other module): the same module from the same initial weights (the
  estimator's ``random_state``), with the same penalty, trained in torch by
  scikit-learn's ``MLPClassifier`` recipe -- Adam at 1e-3, batches of ``min(200, n)``,
  early stopping on a 10% split of the pooled rows (stratified for a classifier), patience
  ``n_iter_no_change`` with ``tol``, at most 200 epochs, the best epoch's weights kept.

This is a simulation tool: it needs every client's rows in one process, which a federation
never has.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from horizontal.local import holdout, penalty
from horizontal.model import build_module
from vfl.extras import optional
from vfl.training.standardise import Standardiser
from vfl.training.torch_loop import torch_optimizer, train_step

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

__all__ = ["PooledModel", "pooled_twin"]

Vector = np.ndarray[Any, Any]

MAX_EPOCHS = 200
"""The network twin's most epochs (scikit-learn's ``max_iter``)."""


class PooledModel:
    """A pooled twin's fitted model: ``predict_proba`` (a classifier), ``predict``, ``score``
    (accuracy or R^2), ``n_iter_`` (solver iterations or epochs)."""

    def __init__(
        self,
        task: str,
        predict_scores: Any,
        classes: Vector,
        n_iter: int,
        target: tuple[float, float] = (0.0, 1.0),
    ) -> None:
        self.task = task
        self._scores = predict_scores
        self.classes_ = classes
        self.n_iter_ = n_iter
        self._target = target

    def predict_proba(self, x: Any) -> Vector:
        from scipy.special import softmax

        if self.task != "classification":
            raise AttributeError("a regression has no predict_proba")
        out: Vector = softmax(self._scores(x), axis=1)
        return out

    def predict(self, x: Any) -> Vector:
        scores = self._scores(x)
        if self.task == "classification":
            out: Vector = self.classes_[scores.argmax(axis=1)]
            return out
        mean, scale = self._target
        regression: Vector = scores[:, 0] * scale + mean
        return regression

    def score(self, x: Any, y: Any) -> float:
        if self.task == "classification":
            return float(np.mean(self.predict(x) == np.asarray(y)))
        from sklearn.metrics import r2_score

        return float(r2_score(np.asarray(y, dtype=float), self.predict(x)))


def pooled_twin(estimator: Any, clients: Mapping[str, Any], *, label: str | None = None) -> Any:
    """The pooled twin of ``estimator`` (a :class:`~horizontal.FederatedClassifier` or
    :class:`~horizontal.FederatedRegressor`, its hyperparameters) trained on ``clients``
    (what its ``fit`` takes) pooled: a :class:`PooledModel` for a network, a scikit-learn
    pipeline for a linear model (see the module docstring)."""
    from horizontal.training import default_alpha

    parts = [_rows(value, label) for value in clients.values()]
    x = np.vstack([v for v, _ in parts])
    y = np.concatenate([t for _, t in parts])
    spec = estimator.fit_spec(list(clients))
    classification = spec.task == "classification"
    classes = np.unique(y) if classification else np.zeros(0)
    alpha = spec.alpha
    if alpha is None:
        alpha = default_alpha(spec, len(y), len(classes))
    if spec.module == "linear" or (spec.module is None and not spec.hidden):
        return _linear(x, y, classification, alpha, len(classes))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the estimators train: small steps, one thread is faster
    try:
        return _network(spec, x, y, classes, alpha)
    finally:
        torch.set_num_threads(threads)


def _rows(value: Any, label: str | None) -> tuple[Vector, Vector]:
    """A client's ``(X, y)`` or DataFrame (labels in ``label``) as arrays."""
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        if label is None:
            raise ValueError("a DataFrame needs label='<column>' naming its labels")
        return value.drop(columns=[label]).to_numpy(dtype=np.float64), value[label].to_numpy()
    x, y = value
    return np.asarray(x, dtype=np.float64), np.asarray(y)


def _linear(x: Vector, y: Vector, classification: bool, alpha: float, n_classes: int) -> Any:
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    n = len(y)
    model: Any
    if classification:
        if alpha > 0:  # alpha on each of two logits' weights is C = 2 / (alpha n) on theirs
            c = (2.0 if n_classes == 2 else 1.0) / (alpha * n)
            model = LogisticRegression(C=c, max_iter=10_000, tol=1e-8)
        else:
            model = LogisticRegression(penalty=None, max_iter=10_000, tol=1e-8)
    else:  # alpha / 2 ||w||^2 on the mean squared error of the standardised target
        model = Ridge(alpha=alpha * n / 2) if alpha > 0 else LinearRegression()
    return make_pipeline(StandardScaler(), model).fit(x, y)


def _network(spec: Any, x: Vector, y: Vector, classes: Vector, alpha: float) -> PooledModel:
    classification = spec.task == "classification"
    scaling = Standardiser().fit(x)
    z = torch.as_tensor(scaling.transform(x), dtype=torch.float32)
    if classification:
        index = {c: k for k, c in enumerate(classes.tolist())}
        t = torch.as_tensor([index[v] for v in y.tolist()], dtype=torch.long)
        target = (0.0, 1.0)
        loss_fn: Any = nn.CrossEntropyLoss()
    else:
        target = (float(y.mean()), float(y.std()) or 1.0)
        t = torch.as_tensor((y - target[0]) / target[1], dtype=torch.float32).reshape(-1, 1)
        loss_fn = nn.MSELoss()
    seed = 0 if spec.random_state is None else int(spec.random_state)
    train, held = holdout(y, spec.validation_fraction, seed, stratify=classification)
    outputs = len(classes) if classification else 1
    module = build_module(spec.module, x.shape[1], outputs, spec.hidden, spec.random_state)
    optimiser = torch_optimizer("adam", module.parameters(), learning_rate=1e-3)
    params = list(module.parameters())
    batch = min(200, len(train))
    generator = torch.Generator().manual_seed(seed)
    best, best_state, waited, epochs = np.inf, copy.deepcopy(module.state_dict()), 0, 0
    while epochs < MAX_EPOCHS and waited < spec.n_iter_no_change:
        epochs += 1
        order = torch.as_tensor(train)[torch.randperm(len(train), generator=generator)]
        for i in range(0, len(order), batch):
            rows = order[i : i + batch]
            train_step(optimiser, loss_fn(module(z[rows]), t[rows]) + penalty(params, alpha))
        with torch.no_grad():
            loss = float(loss_fn(module(z[held]), t[held]).item())
        waited = waited + 1 if not loss < best - spec.tol else 0
        if loss < best:
            best, best_state = loss, copy.deepcopy(module.state_dict())
    module.load_state_dict(best_state)
    module.eval()

    def scores(values: Any) -> Vector:
        rows = torch.as_tensor(scaling.transform(np.asarray(values, dtype=np.float64)))
        with torch.no_grad():
            out: Vector = module(rows.float()).double().numpy()
        return out

    return PooledModel(spec.task, scores, classes, epochs, target)
