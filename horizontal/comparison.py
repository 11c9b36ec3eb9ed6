"""Horizontal federated learning: five hospitals holding every column about different patients.

The rows of this module train one logistic regression (:class:`horizontal.FederatedClassifier`,
``module="linear"``) on one horizontal cut of the population (:func:`hospitals`: five hospitals,
label skew 5, quantity skew 2, no feature shift) by FedAvg, FedProx, FedAvg with client-level
central DP, FedAvg under secure aggregation and FedAvg under secure aggregation with
distributed DP noise; and each hospital alone. Every model is scored on the population's
held-out patients with all 25 features, so its AUC is comparable with the vertical LR rows.

Scaling: the federated rows standardise with the means and deviations of a separate public
reference sample of the same population (as ``examples/horizontal_hospitals.py`` does for DP),
with ``standardize=False`` and ``classes=[0, 1]`` agreed in advance, so that every federated row
runs the same preprocessing and DP covers everything the server is sent. A hospital alone
standardises with its own rows' statistics (the estimator's ``standardize=True``).

Attacks, by the server:

* **membership inference** (:func:`horizontal.attacks.membership_auc`) on the final model: the
  hospitals' training patients against the held-out patients of the same diagnosis (the
  label-skewed cut leaves the members with a lower prevalence than the held-out patients, which
  the loss alone would tell apart); success is the attacker's AUC, the mean over the two
  diagnoses (chance 0.5);
* **record reconstruction** by the closed-form inversion of an affine layer
  (:func:`horizontal.attacks.invert_affine_update`) of every update the server sees: each
  hospital's update every round where it sees them (FedAvg, FedProx, central DP), each round's
  sum where it sees only that (secure aggregation, read off consecutive global models).
  Success: the share of the hospitals' training rows recovered, a row counting as recovered
  when a guess recovers at least 99 % of its variance (``1 - reconstruction_error**2 >= 0.99``,
  in the scaled space whose origin is the public reference mean); chance 0. The closed form is
  exact for an update computed from one record; from a hospital's hundreds of rows and several
  local epochs it returns a weighted mix of them, so no row is expected to be recovered: the
  details keep the best share of variance any guess recovered of any row
  (``details["inversion_best"]``), which is not a recovery (a guess near the centre of the
  data is about as close to some row by chance).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

from vfl.comparison.base import Attack, Context, SchemeResult, timed
from vfl.datasets import HOSPITAL_FEATURES, LABEL, make_population
from vfl.registry import scheme

__all__ = [
    "CLIP",
    "EPSILON",
    "FEDPROX_MU",
    "N_HOSPITALS",
    "RECOVERED",
    "SKEW",
    "THRESHOLD",
    "Hospitals",
    "hospitals",
    "inversion_attack",
]

N_HOSPITALS = 5
SKEW: dict[str, float] = {"label_skew": 5.0, "quantity_skew": 2.0}
"""The cut's Dirichlet concentrations: prevalences and sizes differ moderately."""
OPTIONS: dict[str, Any] = {
    "module": "linear",
    "local_epochs": 2,
    "batch_size": 32,
    "learning_rate": 0.05,
    "classes": [0, 1],
}
"""Every horizontal row's logistic regression (rounds from the settings)."""
FEDPROX_MU = 0.3
EPSILON = 4.0
"""The client-level DP rows' target epsilon over the whole fit (at ClientDP's delta, 1e-5)."""
CLIP = 0.1
"""The L2 norm each hospital's update is clipped to under DP (a little below the norms of the
updates after the first round without DP: about 0.15 in QUICK, 0.25 in FULL). With only five
clients the noise is large against the signal (the Gaussian's standard deviation is
``z * CLIP`` on a sum of five clipped updates, z about 3.7 over 10 rounds at epsilon 4); fewer
local epochs and a clip below the norms gave the best AUC of the settings tried."""
THRESHOLD = 3
"""Secure aggregation's Shamir threshold: a majority of the five hospitals (two may drop out;
two colluding with the server learn nothing)."""
RECOVERED = 0.99
"""A row counts as reconstructed when a guess recovers this share of its variance."""
REFERENCE_PATIENTS = 2000


class Hospitals:
    """The horizontal cut, scaled: each hospital's training rows (raw and scaled with the
    public reference), the held-out patients likewise, and the reference's means and SDs."""

    def __init__(self, frames: dict[str, pd.DataFrame], mean: pd.Series, sd: pd.Series) -> None:
        self.frames = frames
        self.mean = mean
        self.sd = sd
        self.raw = {h: (f[HOSPITAL_FEATURES], f[LABEL].to_numpy()) for h, f in frames.items()}
        self.scaled = {h: (self.scale(x), y) for h, (x, y) in self.raw.items()}

    def scale(self, x: pd.DataFrame) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = ((x[HOSPITAL_FEATURES] - self.mean) / self.sd).to_numpy()
        return out

    @property
    def members(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Every hospital's training rows (scaled) and labels, stacked."""
        x = np.vstack([x for x, _ in self.scaled.values()])
        return x, np.concatenate([y for _, y in self.scaled.values()])

    def describe(self) -> str:
        sizes = ", ".join(f"{len(f)} ({f[LABEL].mean():.0%} cases)" for f in self.frames.values())
        return f"{len(self.frames)} hospitals of {sizes}"


def hospitals(ctx: Context) -> Hospitals:
    """The population's horizontal cut (:data:`N_HOSPITALS` hospitals, :data:`SKEW`) and the
    public reference scaling (a separate draw of :data:`REFERENCE_PATIENTS` patients of the
    same population model), computed once per comparison."""

    def make() -> Hospitals:
        frames = ctx.population.horizontal(N_HOSPITALS, **SKEW)
        reference = make_population(REFERENCE_PATIENTS, random_state=ctx.population.seed + 1)
        x_ref = reference.pooled()[0]
        return Hospitals(frames, x_ref.mean(), x_ref.std())

    result: Hospitals = ctx.cached("horizontal-hospitals", make)
    return result


def _template(ctx: Context) -> Any:
    """The initial global model (every party builds the same one from the seed)."""
    from horizontal.model import build_module

    return build_module("linear", len(HOSPITAL_FEATURES), 2, (), ctx.seed)


def inversion_attack(
    guesses: list[tuple[str | None, np.ndarray[Any, Any]]], cut: Hospitals, target: str
) -> tuple[Attack, dict[str, Any]]:
    """Score closed-form guesses: each ``(hospital, guess)`` against that hospital's rows
    (``None``: a guess from a sum, against every hospital's rows). The attack's success is the
    share of all training rows recovered (:data:`RECOVERED`); the details give the best share
    of variance any guess recovered and the guesses scored."""
    from horizontal.attacks import reconstruction_error

    recovered = {h: np.zeros(len(x), dtype=bool) for h, (x, _) in cut.scaled.items()}
    best = 0.0
    for hospital, guess in guesses:
        for h in [hospital] if hospital is not None else list(cut.scaled):
            rows = cut.scaled[h][0]
            share = np.array([1.0 - reconstruction_error(guess, row) ** 2 for row in rows])
            recovered[h] |= share >= RECOVERED
            best = max(best, float(share.max()))
    total = sum(len(r) for r in recovered.values())
    success = float(sum(int(r.sum()) for r in recovered.values()) / total)
    attack = Attack(
        "gradient inversion (closed form)",
        target,
        success,
        0.0,
        f"share of rows recovered (>= {RECOVERED:.0%} of a row's variance)",
    )
    return attack, {"inversion_best": best, "inversion_guesses": len(guesses)}


def _update_guesses(model: Any, template: Any) -> list[tuple[str | None, np.ndarray[Any, Any]]]:
    """The closed-form guess from every hospital's update of every round (payloads kept)."""
    from horizontal.attacks import invert_affine_update
    from horizontal.training import Update

    out: list[tuple[str | None, np.ndarray[Any, Any]]] = []
    for message in model.transcript_.records:
        if message.tag.startswith("fed/update/"):
            update = Update.from_payload(message.payload(), message.sender)
            out.append((message.sender, invert_affine_update(update.delta, template)))
    return out


def _sum_guesses(
    weights: list[np.ndarray[Any, Any]], template: Any
) -> list[tuple[str | None, np.ndarray[Any, Any]]]:
    """The closed-form guess from every round's sum: the step between consecutive global
    models is the (noisy) sum over a fixed denominator, which the ratio ignores."""
    from horizontal.attacks import invert_affine_update
    from horizontal.model import flatten

    steps = np.diff(np.vstack([flatten(template), *weights]), axis=0)
    return [(None, invert_affine_update(step, template)) for step in steps]


def _membership(
    model: Any, cut: Hospitals, x_test: np.ndarray[Any, Any], y_test: np.ndarray[Any, Any]
) -> float:
    """The loss-threshold attack's AUC between the hospitals' training patients and the
    held-out patients of the same diagnosis, averaged over the two diagnoses: the label-skewed
    cut leaves the members with a prevalence unlike the held-out patients', which a pooled AUC
    would count as membership signal."""
    from horizontal.attacks import membership_auc

    x, y = cut.members
    return float(
        np.mean(
            [
                membership_auc(
                    model.predict_proba,
                    (x[y == k], y[y == k]),
                    (x_test[y_test == k], y_test[y_test == k]),
                    [0, 1],
                )
                for k in (0, 1)
            ]
        )
    )


LEARNS = {
    "plain": (
        "the server sees each hospital's row count and model update every round (a function of "
        "its records, not the records); every hospital sees the global models"
    ),
    "dp": (
        "the server sees each hospital's clipped update and adds the Gaussian noise itself; "
        "anyone who sees only the global models gets client-level (epsilon, delta)-DP"
    ),
    "secure": (
        "the server learns only each round's sum of row-weighted updates and of row counts "
        "over the surviving hospitals, never one hospital's update"
    ),
    "secure_dp": (
        "the server learns only each round's sum, every hospital's share of the Gaussian noise "
        "already in it (distributed DP): never one update, never a noise-free sum"
    ),
}


def _horizontal(
    ctx: Context, strategy: str = "fedavg", dp: bool = False, secure: bool = False
) -> SchemeResult:
    from horizontal import ClientDP, FederatedClassifier, FedProx
    from horizontal.secagg import SecAggConfig

    cut = hospitals(ctx)
    rounds = ctx.settings.rounds
    model = FederatedClassifier(
        **OPTIONS,
        max_iter=rounds,
        strategy=FedProx(mu=FEDPROX_MU) if strategy == "fedprox" else strategy,
        standardize=False,
        privacy=ClientDP(epsilon=EPSILON, clip=CLIP) if dp else None,
        protocol=SecAggConfig(threshold=THRESHOLD) if secure else "plain",
        random_state=ctx.seed,
    )
    weights: list[np.ndarray[Any, Any]] = []

    def keep(record: Any, snapshot: Any) -> None:
        weights.append(np.array(snapshot.weights_, dtype=np.float64))

    callback: Callable[[Any, Any], None] | None = keep if secure else None
    with timed() as t:
        model.fit(cut.scaled, keep_payloads=not secure, callback=callback)
    x_test, y_test = ctx.test_set()
    x_scaled, y = cut.scale(x_test), y_test.to_numpy()
    auc = float(roc_auc_score(y, model.predict_proba(x_scaled)[:, 1]))
    membership = Attack(
        "membership",
        "training patients, by the server (or anyone with the model)",
        _membership(model, cut, x_scaled, y),
        0.5,
        "attacker AUC within each diagnosis (mean of the two)",
    )
    template = _template(ctx)
    if secure:
        guesses = _sum_guesses(weights, template)
        target = "a hospital's rows, by the server, from each round's sum"
    else:
        guesses = _update_guesses(model, template)
        target = "a hospital's rows, by the server, from its updates"
    inversion, details = inversion_attack(guesses, cut, target)
    transcript = model.transcript_
    parties = sorted({r.sender for r in transcript.records})
    kind = ("secure_dp" if dp else "secure") if secure else ("dp" if dp else "plain")
    notes = f"{cut.describe()}; logistic regression, {rounds} rounds of {OPTIONS['local_epochs']}"
    notes += " local epochs; features scaled with a public reference sample"
    if dp:
        notes += f"; client-level DP, target epsilon {EPSILON:g}, clip {CLIP:g}"
    if secure:
        notes += f"; secure aggregation, threshold {THRESHOLD} of {N_HOSPITALS}"
    if dp and secure:
        notes += (
            f" (each hospital adds 1/{THRESHOLD} of the noise variance, so with all "
            f"{N_HOSPITALS} surviving the sum carries {N_HOSPITALS}/{THRESHOLD} of what central "
            f"DP adds)"
        )
    return SchemeResult(
        "",
        "",
        auc=auc,
        learns=LEARNS[kind],
        seconds=t[0],
        bytes_per_party={p: transcript.total_bytes(sender=p) for p in parties},
        attacks=(membership, inversion),
        ledger=model.privacy_ledger_ if dp else None,
        notes=notes,
        details={"model": model, **details},
    )


scheme("horizontal FedAvg", "horizontal")(_horizontal)
scheme("horizontal FedProx", "horizontal", strategy="fedprox")(_horizontal)
scheme("horizontal FedAvg + central DP", "horizontal", dp=True)(_horizontal)
scheme("horizontal FedAvg + secure aggregation", "horizontal", secure=True)(_horizontal)
scheme("horizontal FedAvg + secure aggregation + DP", "horizontal", dp=True, secure=True)(
    _horizontal
)


@scheme("a hospital alone (mean)", "alone")
def hospital_alone(ctx: Context) -> SchemeResult:
    """Each hospital trains the same logistic regression on its own rows (standardised with its
    own statistics); the AUC is the mean over hospitals of each one's model on the held-out
    patients."""
    from horizontal import FederatedClassifier

    cut = hospitals(ctx)
    x_test, y_test = ctx.test_set()
    aucs: dict[str, float] = {}
    with timed() as t:
        for hospital, data in cut.raw.items():
            model = FederatedClassifier(
                **OPTIONS,
                max_iter=ctx.settings.rounds,
                strategy="fedavg",  # the federated rows' training, on one hospital's rows
                standardize=True,
                random_state=ctx.seed,
            ).fit({hospital: data})
            aucs[hospital] = float(roc_auc_score(y_test, model.predict_proba(x_test)[:, 1]))
    return SchemeResult(
        "",
        "",
        auc=float(np.mean(list(aucs.values()))),
        learns="nothing is shared",
        seconds=t[0],
        bytes_per_party=dict.fromkeys(cut.raw, 0),
        exposure=0.0,
        notes=f"{cut.describe()}; each alone, the mean of their AUCs",
        details={"aucs": aucs},
    )
