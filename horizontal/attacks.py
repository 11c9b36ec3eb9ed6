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

The functions are the kernels; the attacks that measure a leak are also registered audits of
:mod:`vfl.audit` (found by ``vfl.audit.get_audit(name)`` through the ``vflink.audits`` entry
points; each returns a :class:`vfl.audit.AuditResult`):

* ``"gradient-inversion"`` (:class:`GradientInversionAudit`) and ``"gradient-matching"``
  (:class:`GradientMatchingAudit`): records reconstructed from updates within a relative
  tolerance, against the best guess without them (the records' mean);
* ``"membership"`` (:class:`MembershipAudit`): the loss-threshold attack's AUC (chance 0.5);
* ``"backdoor"`` (:class:`BackdoorAudit`): rows a planted trigger sends to the attacker's
  class, against the rate the model gives them without it.

The Byzantine tampers (:func:`sign_flip`, :func:`random_update`) are adversary behaviours,
not measurements; their effect is the model's accuracy, which the robust-aggregation tests
measure.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl.audit import Audit, AuditResult, register_audit
from vfl.extras import optional

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

__all__ = [
    "BackdoorAudit",
    "GradientInversionAudit",
    "GradientMatchingAudit",
    "MembershipAudit",
    "add_trigger",
    "attack_success",
    "boost",
    "dlg_attack",
    "invert_affine_update",
    "membership_auc",
    "membership_scores",
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

    a = membership_scores(predict_proba, *members, classes)
    b = membership_scores(predict_proba, *others, classes)
    truth = np.concatenate([np.ones(len(a)), np.zeros(len(b))])
    return float(roc_auc_score(truth, np.concatenate([a, b])))


def membership_scores(
    predict_proba: Callable[[Any], Vector], x: Any, y: Any, classes: Any
) -> Vector:
    """Each record's membership score, ``log p(y | x)`` under the model (``-loss``: higher
    for records it was trained on)."""
    proba = predict_proba(x)
    index = np.searchsorted(np.asarray(classes), np.asarray(y))
    picked = proba[np.arange(len(index)), index]
    out: Vector = np.log(np.clip(picked, 1e-12, 1.0))
    return out


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


def _sequence(values: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
    return list(values.values()) if isinstance(values, Mapping) else list(values)


def _reconstructions(
    audit: str,
    target: str,
    estimates: list[Vector | None],
    records: list[Any],
    tolerance: float,
) -> AuditResult:
    """Score reconstructions: an estimate succeeds when it is within ``tolerance`` (relative
    error, :func:`reconstruction_error`) of one of the records behind its update; chance is
    the same for the best guess without the updates, the mean of all the records."""
    rows = [np.atleast_2d(np.asarray(r, dtype=np.float64)) for r in records]
    if len(rows) != len(estimates):
        raise ValueError(
            f"{len(estimates)} updates and {len(rows)} record sets: give the records behind "
            "each update, in the same order"
        )
    if not rows:
        raise ValueError("no update to attack")
    mean = np.vstack(rows).mean(axis=0)
    errors, guesses = [], []
    for estimate, truth in zip(estimates, rows, strict=True):
        found = np.inf
        if estimate is not None:
            found = min(reconstruction_error(estimate, row) for row in truth)
        errors.append(found)
        guesses.append(min(reconstruction_error(mean, row) for row in truth))
    return AuditResult(
        audit,
        target,
        trials=len(rows),
        successes=int(np.sum(np.asarray(errors) <= tolerance)),
        chance=float(np.mean(np.asarray(guesses) <= tolerance)),
        details={
            "errors": errors,
            "median error": float(np.median(errors)),
            "tolerance": tolerance,
        },
    )


@register_audit
class GradientInversionAudit(Audit):
    """The server's closed-form inversion (:func:`invert_affine_update`) of every update it
    sees.

    Run it on the updates (flat, in ``module``'s parameter order; a sequence, or a mapping
    client -> update), the module they update (its first layer must be affine with a bias),
    and, per update, the records it was computed from (one row, or several; they only score
    the attack: the update of a secure-aggregation round is the sum over every client, whose
    records are all behind it). A record counts as recovered when the estimate is within
    ``tolerance`` relative error of one of them.
    """

    name = "gradient-inversion"
    family = "horizontal"

    def run(
        self,
        updates: Sequence[Vector] | Mapping[str, Vector],
        module: nn.Module,
        records: Sequence[Any] | Mapping[str, Any],
        *,
        tolerance: float = 0.01,
    ) -> AuditResult:
        estimates: list[Vector | None] = []
        for update in _sequence(updates):
            try:
                estimates.append(invert_affine_update(update, module))
            except ValueError as error:
                if "bias gradient is zero" not in str(error):
                    raise  # a module the closed form does not apply to
                estimates.append(None)  # nothing to invert: the attacker has no guess
        return _reconstructions(
            self.name, "records behind the updates", estimates, _sequence(records), tolerance
        )


@register_audit
class GradientMatchingAudit(Audit):
    """Gradient inversion by optimisation (:func:`dlg_attack`, Deep Leakage from Gradients)
    on each gradient (one record's, or a sum), scored as :class:`GradientInversionAudit`.

    The module (an MLP of :mod:`horizontal.model`: its first and last layers ``nn.Linear``)
    is copied, not changed; ``steps`` and ``seed`` go to :func:`dlg_attack`.
    """

    name = "gradient-matching"
    family = "horizontal"

    def run(
        self,
        gradients: Sequence[Vector] | Mapping[str, Vector],
        module: nn.Module,
        records: Sequence[Any] | Mapping[str, Any],
        *,
        tolerance: float = 0.05,
        steps: int = 300,
        seed: int = 0,
    ) -> AuditResult:
        linear = [m for m in module.modules() if isinstance(m, nn.Linear)]
        if not linear:
            raise ValueError("the module has no nn.Linear layer")
        inputs, classes = linear[0].in_features, linear[-1].out_features
        estimates: list[Vector | None] = [
            dlg_attack(copy.deepcopy(module), g, inputs, classes, steps=steps, seed=seed)
            for g in _sequence(gradients)
        ]
        return _reconstructions(
            self.name, "records behind the gradients", estimates, _sequence(records), tolerance
        )


@register_audit
class MembershipAudit(Audit):
    """The loss-threshold membership attack (:func:`membership_scores`, Yeom et al. 2018) on
    a model's ``predict_proba``: its AUC between ``members`` ``(X, y)``, records it was
    trained on, and ``others`` (chance 0.5; not oriented: a lower loss means member)."""

    name = "membership"
    family = "horizontal"

    def run(
        self,
        predict_proba: Callable[[Any], Vector],
        members: tuple[Any, Any],
        others: tuple[Any, Any],
        classes: Any,
    ) -> AuditResult:
        a = membership_scores(predict_proba, *members, classes)
        b = membership_scores(predict_proba, *others, classes)
        truth = np.concatenate([np.ones(len(a)), np.zeros(len(b))])
        return AuditResult.from_auc(
            self.name,
            "membership of records in the training data",
            truth,
            np.concatenate([a, b]),
            oriented=False,
        )


@register_audit
class BackdoorAudit(Audit):
    """A planted backdoor's success (:func:`add_trigger`, :func:`attack_success`): the share
    of ``rows`` that the model's ``predict`` assigns to the attacker's ``target`` class once
    ``columns`` are set to ``value``, against the share it assigns them without the trigger
    (chance). Give rows of the other classes to measure the backdoor alone."""

    name = "backdoor"
    family = "horizontal"

    def run(
        self,
        predict: Callable[[Any], Vector],
        rows: Any,
        target: Any,
        *,
        columns: list[int],
        value: float,
    ) -> AuditResult:
        clean = np.asarray(rows, dtype=np.float64)
        if len(clean) == 0:
            raise ValueError("no rows to plant the trigger in")
        hits = np.asarray(predict(add_trigger(clean, columns, value))) == target
        return AuditResult(
            self.name,
            f"rows sent to class {target!r} by the trigger",
            trials=len(clean),
            successes=int(np.sum(hits)),
            chance=attack_success(predict, clean, target),
            details={"columns": list(columns), "value": value},
        )
