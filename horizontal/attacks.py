"""Attacks on the horizontal path, shipped as audits: what the server can read from updates,
what anyone can read from the model, and what one malicious client can do to it.

* **Gradient inversion, closed form** (:func:`invert_affine_update`): when a model's first
  layer is affine with a bias (``z = W x + b``), the gradient of one record's loss gives
  ``dL/dW_i = (dL/dz_i) x`` and ``dL/db_i = dL/dz_i``, so ``x = dL/dW_i / dL/db_i`` for any
  unit with a non-zero bias gradient: a client's update after one step on one record (or the
  server's view of a FedSGD round with one row per client) hands the record over exactly.
  With a batch the same formula returns a weighted mix of its records; under secure
  aggregation the server sees only the sum over clients, and the formula returns a mix of
  everyone's.
* **Gradient inversion by optimisation** (:func:`dlg_attack`, after Zhu et al. 2019, "Deep
  Leakage from Gradients"): a dummy record and label are fitted so that their gradient
  matches the observed one.
* **Membership inference** (:func:`membership_auc`, the loss-threshold attack of Yeom et al.
  2018): records the model was trained on tend to have a lower loss; the attacker's AUC of
  ``-loss`` between members and non-members (0.5 is chance).
* **Malicious clients** (``adversaries=`` of the estimators' ``fit``, simulation only):
  :func:`sign_flip` and :func:`random_update` (Byzantine), :func:`boost` (model replacement:
  a backdoored update scaled so that it survives averaging, Bagdasaryan et al. 2020), with
  :func:`add_trigger` and :func:`attack_success` to plant and measure a tabular backdoor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "add_trigger",
    "attack_success",
    "boost",
    "dlg_attack",
    "invert_affine_update",
    "membership_auc",
    "random_update",
    "reconstruction_error",
    "sign_flip",
]

Vector = np.ndarray[Any, Any]
Tamper = Callable[[Vector, int], Vector]


def _first_linear(module: nn.Module) -> tuple[int, nn.Linear]:
    """The offset of the first ``nn.Linear`` in the flat parameter vector, and the layer."""
    offset = 0
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            if sub.bias is None:
                raise ValueError("the closed form needs a first layer with a bias")
            return offset, sub
        if not list(sub.children()):
            offset += sum(p.numel() for p in sub.parameters(recurse=False))
    raise ValueError("the module has no nn.Linear layer")


def invert_affine_update(update: Vector, module: nn.Module) -> Vector:
    """The record behind ``update`` (a flat parameter update, in ``module``'s parameter order:
    :func:`horizontal.model.flatten`), by the closed form of the module docstring."""
    offset, layer = _first_linear(module)
    units, inputs = layer.weight.shape
    delta = np.asarray(update, dtype=np.float64)
    weight = delta[offset : offset + units * inputs].reshape(units, inputs)
    bias = delta[offset + units * inputs : offset + units * inputs + units]
    unit = int(np.argmax(np.abs(bias)))
    if bias[unit] == 0:
        raise ValueError("every bias gradient is zero: nothing to invert")
    out: Vector = weight[unit] / bias[unit]
    return out


def reconstruction_error(estimate: Vector, truth: Vector) -> float:
    """``||estimate - truth|| / ||truth||`` (0 is exact)."""
    truth = np.asarray(truth, dtype=np.float64)
    return float(np.linalg.norm(np.asarray(estimate) - truth) / (np.linalg.norm(truth) + 1e-12))


def dlg_attack(
    module: nn.Module,
    gradient: Vector,
    inputs: int,
    classes: int,
    *,
    steps: int = 300,
    seed: int = 0,
) -> Vector:
    """A record whose gradient under ``module`` matches ``gradient`` (flat, the parameters'
    order), found by L-BFGS on the squared gradient distance, with a soft label."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, inputs, generator=generator, dtype=torch.float64, requires_grad=True)
    label = torch.randn(1, classes, generator=generator, dtype=torch.float64, requires_grad=True)
    model = module.double()
    params = [p for p in model.parameters() if p.requires_grad]
    target = torch.as_tensor(np.asarray(gradient), dtype=torch.float64)
    optimizer = torch.optim.LBFGS([x, label], lr=0.5, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        logits = model(x)
        loss = torch.sum(-torch.softmax(label, dim=1) * torch.log_softmax(logits, dim=1))
        grads = torch.autograd.grad(loss, params, create_graph=True)
        flat = torch.cat([g.reshape(-1) for g in grads])
        distance = torch.sum((flat - target) ** 2)
        distance.backward()  # type: ignore[no-untyped-call]
        return distance

    optimizer.step(closure)  # type: ignore[no-untyped-call]
    out: Vector = x.detach().numpy()[0]
    return out


def membership_auc(
    predict_proba: Callable[[Any], Vector],
    members: tuple[Any, Any],
    others: tuple[Any, Any],
    classes: Any,
) -> float:
    """The loss-threshold attack's AUC between ``members`` ``(X, y)`` (trained on) and
    ``others`` (not): each record scored by ``-log p(y | x)`` under the model."""
    from sklearn.metrics import roc_auc_score

    def scores(x: Any, y: Any) -> Vector:
        proba = predict_proba(x)
        index = np.searchsorted(np.asarray(classes), np.asarray(y))
        picked = proba[np.arange(len(index)), index]
        out: Vector = np.log(np.clip(picked, 1e-12, 1.0))
        return out

    a, b = scores(*members), scores(*others)
    truth = np.concatenate([np.ones(len(a)), np.zeros(len(b))])
    return float(roc_auc_score(truth, np.concatenate([a, b])))


def sign_flip(scale: float = 1.0) -> Tamper:
    """A Byzantine client sending ``-scale`` times its honest update."""

    def tamper(delta: Vector, round_: int) -> Vector:
        out: Vector = -scale * np.asarray(delta, dtype=np.float64)
        return out

    return tamper


def random_update(scale: float = 1.0, seed: int = 0) -> Tamper:
    """A Byzantine client sending Gaussian noise of standard deviation ``scale``."""
    rng = np.random.default_rng(seed)

    def tamper(delta: Vector, round_: int) -> Vector:
        out: Vector = rng.normal(scale=scale, size=np.shape(delta))
        return out

    return tamper


def boost(factor: float, *, from_round: int = 0) -> Tamper:
    """Model replacement: the client's (backdoored) update times ``factor`` (``n_clients /
    server_lr`` replaces the global model), from ``from_round`` on."""

    def tamper(delta: Vector, round_: int) -> Vector:
        out: Vector = np.asarray(delta, dtype=np.float64)
        return out * factor if round_ >= from_round else out

    return tamper


def add_trigger(x: Any, columns: list[int], value: float) -> Vector:
    """Rows of ``x`` with the trigger planted: ``columns`` set to ``value``."""
    out = np.array(x, dtype=np.float64, copy=True)
    out[:, columns] = value
    return out


def attack_success(predict: Callable[[Any], Vector], triggered: Any, target: Any) -> float:
    """The fraction of triggered rows the model assigns to the attacker's ``target`` class."""
    return float(np.mean(np.asarray(predict(triggered)) == target))
