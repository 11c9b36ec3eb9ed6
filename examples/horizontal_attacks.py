"""The attacks that motivate the horizontal defences, each with and without them, on the
hospital cohort: one table and one plot.

Eight hospitals hold the same lab and imaging columns for different patients
(:func:`vfl.datasets.make_hospital_cohort`). For each attack, the attack's success and the
model's clean accuracy (and the seconds the fit took) with no defence and with each defence:

* **gradient inversion** (the server reads a record from an update): 20 clients with one row
  each, one FedSGD round; the closed form for a first affine layer
  (:func:`horizontal.attacks.invert_affine_update`) on each client's update, against secure
  aggregation (the server sees only the sum); success: the share of rows recovered to 1 %;
* **membership inference** (anyone with the model tells training rows from others): an
  overfit MLP, against record-level DP-SGD (``RecordDP``); success: the attacker's AUC;
* **a Byzantine client** (one hospital sends ten times its update, sign-flipped): against the
  coordinate-wise median, the trimmed mean and Krum; success: the accuracy it destroys;
* **a boosted backdoor** (one hospital trains on rows with a trigger in three nuisance columns,
  labelled positive, and scales its update in the last rounds): against norm bounding and the
  median; success: the share of triggered negative rows classified positive.

Run::

    python examples/horizontal_attacks.py [--out vflink-demo]

The plot (``horizontal_attacks.png``) goes to ``--out``. About 30 seconds on two cores.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from horizontal import FederatedClassifier, RecordDP
from horizontal.attacks import (
    add_trigger,
    attack_success,
    boost,
    invert_affine_update,
    membership_auc,
    reconstruction_error,
    sign_flip,
)
from horizontal.model import build_module, flatten
from horizontal.robust import RobustAggregation
from horizontal.secagg import SecAggConfig
from horizontal.training import Update
from vfl.datasets import make_hospital_cohort

ROWS: list[dict[str, Any]] = []


def record(attack: str, defence: str, success: float, accuracy: float, seconds: float) -> None:
    ROWS.append(
        {
            "attack": attack,
            "defence": defence,
            "attack success": success,
            "clean accuracy": accuracy,
            "seconds": seconds,
        }
    )


def cohort(n: int, rows: int, train: int, seed: int) -> tuple[dict[str, Any], Any, Any, list[str]]:
    hospitals = make_hospital_cohort(n, rows, random_state=seed)
    columns = list(next(iter(hospitals.values())).drop(columns=["diagnosis"]).columns)
    parts = {
        k: (v.iloc[:train].drop(columns=["diagnosis"]).to_numpy(), v.iloc[:train]["diagnosis"])
        for k, v in hospitals.items()
    }
    pooled = np.vstack([x for x, _ in parts.values()])
    mean, scale = pooled.mean(axis=0), pooled.std(axis=0)
    clients = {k: ((x - mean) / scale, y.to_numpy()) for k, (x, y) in parts.items()}
    rest = [v.iloc[train:] for v in hospitals.values()]
    x_test = (np.vstack([v.drop(columns=["diagnosis"]).to_numpy() for v in rest]) - mean) / scale
    y_test = np.concatenate([v["diagnosis"].to_numpy() for v in rest])
    return clients, x_test, y_test, columns


def timed(model: FederatedClassifier, clients: dict[str, Any], **fit: Any) -> tuple[Any, float]:
    began = time.perf_counter()
    model.fit(clients, **fit)
    return model, time.perf_counter() - began


def inversion() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 6))
    y = (x[:, 0] > 0).astype(int)
    clients = {f"c{i:02d}": (x[i : i + 1], y[i : i + 1]) for i in range(20)}
    options: dict[str, Any] = dict(
        max_iter=1, strategy="fedsgd", standardize=False, classes=[0, 1], random_state=0
    )
    template = build_module(None, 6, 2, (64,), 0)
    plain, seconds = timed(
        FederatedClassifier(**options, min_clients=20), clients, keep_payloads=True
    )
    found = 0
    for message in plain.transcript_.records:
        if message.tag.startswith("fed/update"):
            update = Update.from_payload(message.payload(), message.sender)
            guess = invert_affine_update(update.delta, template)
            found += reconstruction_error(guess, x[int(message.sender[1:])]) < 0.01
    record("gradient inversion", "none", found / 20, float("nan"), seconds)
    secure, seconds = timed(
        FederatedClassifier(**options, protocol=SecAggConfig(threshold=10)), clients
    )
    guess = invert_affine_update(secure.weights_ - flatten(template), template)
    hits = sum(reconstruction_error(guess, row) < 0.01 for row in x)
    record("gradient inversion", "secure aggregation", hits / 20, float("nan"), seconds)


def membership() -> None:
    clients, x_test, y_test, _ = cohort(4, 800, 100, seed=1)
    x_in = np.vstack([x for x, _ in clients.values()])
    y_in = np.concatenate([y for _, y in clients.values()])
    options: dict[str, Any] = dict(
        local_epochs=5,
        hidden_layer_sizes=(128,),
        learning_rate=0.1,
        standardize=False,
        classes=[0, 1],
        random_state=0,
    )
    for name, extra in [
        ("none", {"max_iter": 60}),
        ("record-level DP (z = 2)", {"max_iter": 30, "privacy": RecordDP(noise_multiplier=2.0)}),
    ]:
        model, seconds = timed(FederatedClassifier(**options, **extra), clients)
        auc = membership_auc(model.predict_proba, (x_in, y_in), (x_test, y_test), [0, 1])
        accuracy = float(np.mean(model.predict(x_test) == y_test))
        record("membership inference (AUC)", name, auc, accuracy, seconds)


OPTIONS: dict[str, Any] = dict(
    max_iter=20, standardize=False, classes=[0, 1], random_state=0, hidden_layer_sizes=(32,)
)


def byzantine(clients: dict[str, Any], x_test: Any, y_test: Any) -> None:
    clean_model, _ = timed(FederatedClassifier(**OPTIONS), clients)
    clean = float(np.mean(clean_model.predict(x_test) == y_test))
    attacker = {"hospital_1": sign_flip(10.0)}
    for name, rule in [
        ("none", None),
        ("median", "median"),
        ("trimmed mean (0.2)", RobustAggregation("trimmed_mean", beta=0.2)),
        ("Krum (f = 1)", "krum"),
    ]:
        model, seconds = timed(
            FederatedClassifier(**OPTIONS, robust_aggregation=rule), clients, adversaries=attacker
        )
        accuracy = float(np.mean(model.predict(x_test) == y_test))
        record("Byzantine client (accuracy lost)", name, clean - accuracy, accuracy, seconds)


def backdoor(clients: dict[str, Any], x_test: Any, y_test: Any, columns: list[str]) -> None:
    trigger = [columns.index(c) for c in ("creatinine_umol_l", "alt_u_l", "scanner_noise_hu")]
    x_bad, y_bad = clients["hospital_2"]
    planted = add_trigger(x_bad, trigger, 4.0)
    poisoned = dict(clients)
    poisoned["hospital_2"] = (
        np.vstack([x_bad, planted]),
        np.concatenate([y_bad, np.ones(len(planted), dtype=y_bad.dtype)]),
    )
    triggered = add_trigger(x_test[y_test == 0], trigger, 4.0)
    attacker = {"hospital_2": boost(8.0, from_round=15)}
    honest, _ = timed(FederatedClassifier(**OPTIONS), clients)
    record(
        "backdoor (attack success)",
        "no attack (baseline)",
        attack_success(honest.predict, triggered, 1),
        float(np.mean(honest.predict(x_test) == y_test)),
        float("nan"),
    )
    for name, rule in [
        ("none", None),
        ("norm bound (0.05)", RobustAggregation("norm_bound", max_norm=0.05)),
        ("median", "median"),
    ]:
        model, seconds = timed(
            FederatedClassifier(**OPTIONS, robust_aggregation=rule), poisoned, adversaries=attacker
        )
        record(
            "backdoor (attack success)",
            name,
            attack_success(model.predict, triggered, 1),
            float(np.mean(model.predict(x_test) == y_test)),
            seconds,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="vflink-demo")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore")  # small DP demos warn about their epsilon, by design
    inversion()
    membership()
    clients, x_test, y_test, columns = cohort(8, 4000, 400, seed=2)
    byzantine(clients, x_test, y_test)
    backdoor(clients, x_test, y_test, columns)
    table = pd.DataFrame(ROWS).set_index(["attack", "defence"])
    with pd.option_context("display.width", 120):
        print(table.round(3).to_string())

    fig, axis = plt.subplots(figsize=(9, 4.5))
    labels = [f"{a}\n{d}" for a, d in table.index]
    axis.barh(range(len(table)), table["attack success"], color="tab:red", alpha=0.7)
    axis.set_yticks(range(len(table)), labels, fontsize=7)
    axis.invert_yaxis()
    axis.set_xlabel("attack success (the attack's own measure, see the table)")
    axis.set_title("Attacks on horizontal training, with and without each defence")
    fig.tight_layout()
    path = out / "horizontal_attacks.png"
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")


if __name__ == "__main__":
    main()
