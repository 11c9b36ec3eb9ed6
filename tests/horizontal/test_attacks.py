"""The attacks that motivate the horizontal defences, each measured with and without them:
gradient inversion (closed form and DLG) against secure aggregation, membership inference
against DP, a Byzantine client and a boosted backdoor against robust aggregation."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

from horizontal import FederatedClassifier, RecordDP
from horizontal.attacks import (
    GradientInversionAudit,
    add_trigger,
    attack_success,
    boost,
    dlg_attack,
    invert_affine_update,
    membership_auc,
    reconstruction_error,
    sign_flip,
)
from horizontal.model import build_module, flatten
from horizontal.robust import RobustAggregation
from horizontal.secagg import SecAggConfig
from horizontal.training import Update
from vfl.audit import AuditResult, get_audit
from vfl.datasets import make_hospital_cohort


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_one_record_updates_give_the_records_away_unless_securely_aggregated() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 6))
    y = (x[:, 0] > 0).astype(int)
    clients = {f"c{i:02d}": (x[i : i + 1], y[i : i + 1]) for i in range(20)}
    options: dict[str, Any] = dict(
        max_iter=1,
        strategy="fedsgd",
        standardize=False,
        classes=[0, 1],
        random_state=0,
        hidden_layer_sizes=(16,),
    )
    plain = FederatedClassifier(**options, min_clients=20).fit(clients, keep_payloads=True)
    template = build_module(None, 6, 2, (16,), 0)
    seen = 0
    for record in plain.transcript_.records:
        if record.tag.startswith("fed/update"):
            update = Update.from_payload(record.payload(), record.sender)
            row = int(record.sender[1:])
            found = invert_affine_update(update.delta, template)
            assert reconstruction_error(found, x[row]) < 1e-4  # exact up to float32
            seen += 1
    assert seen == 20
    secure = FederatedClassifier(**options, protocol=SecAggConfig(threshold=10)).fit(clients)
    found = invert_affine_update(secure.weights_ - flatten(template), template)
    assert min(reconstruction_error(found, x[i]) for i in range(20)) > 0.3  # a mix of all


def test_the_audits_are_found_by_name_and_score_inversion_against_the_mean() -> None:
    assert get_audit("gradient-inversion") is GradientInversionAudit
    for name in ("gradient-inversion", "gradient-matching", "membership", "backdoor"):
        assert get_audit(name).family == "horizontal"
    rows = np.random.default_rng(3).normal(size=(4, 5))
    module = build_module(None, 5, 2, (8,), 0)
    gradients = []
    for row in rows:
        loss = torch.nn.functional.cross_entropy(
            module(torch.as_tensor(row[None, :], dtype=torch.float32)), torch.tensor([0])
        )
        grads = torch.autograd.grad(loss, list(module.parameters()))
        gradients.append(torch.cat([g.reshape(-1) for g in grads]).double().numpy())
    audit = get_audit("gradient-inversion")()
    one_each = audit.run(gradients, module, list(rows))
    assert isinstance(one_each, AuditResult)
    assert (one_each.successes, one_each.trials, one_each.chance) == (4, 4, 0.0)
    # the server's view under secure aggregation: the sum, with every record behind it
    summed = audit.run([np.sum(gradients, axis=0)], module, [rows])
    assert summed.successes == 0 and not summed.leaks


def test_dlg_recovers_one_record_from_its_gradient() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 6))
    module = build_module(None, 6, 2, (16,), 1)
    loss = torch.nn.functional.cross_entropy(
        module(torch.as_tensor(x, dtype=torch.float32)), torch.tensor([1])
    )
    grads = torch.autograd.grad(loss, list(module.parameters()))
    gradient = torch.cat([g.reshape(-1) for g in grads]).double().numpy()
    found = dlg_attack(build_module(None, 6, 2, (16,), 1), gradient, 6, 2, steps=300)
    assert reconstruction_error(found, x[0]) < 1e-2
    # what secure aggregation leaves the server: the sum of ten clients' gradients
    rows = np.random.default_rng(2).normal(size=(10, 6))
    total = np.zeros_like(gradient)
    for row in rows:
        loss = torch.nn.functional.cross_entropy(
            module(torch.as_tensor(row[None, :], dtype=torch.float32)), torch.tensor([1])
        )
        grads = torch.autograd.grad(loss, list(module.parameters()))
        total += torch.cat([g.reshape(-1) for g in grads]).double().numpy()
    found = dlg_attack(build_module(None, 6, 2, (16,), 1), total, 6, 2, steps=300)
    assert min(reconstruction_error(found, row) for row in rows) > 0.3


def _hospitals(n: int, rows: int, seed: int) -> tuple[dict[str, Any], Any, Any, Any, Any]:
    hospitals = make_hospital_cohort(n, rows, random_state=seed)
    half = rows // n // 2
    frames = list(hospitals.values())
    train = {
        k: (v.iloc[:half].drop(columns=["diagnosis"]).to_numpy(), v.iloc[:half]["diagnosis"])
        for k, v in hospitals.items()
    }
    x_in = np.vstack([x for x, _ in train.values()])
    mean, scale = x_in.mean(axis=0), x_in.std(axis=0)
    scaled = {k: ((x - mean) / scale, y.to_numpy()) for k, (x, y) in train.items()}
    x_out = np.vstack([v.iloc[half:].drop(columns=["diagnosis"]).to_numpy() for v in frames])
    y_out = np.concatenate([v.iloc[half:]["diagnosis"].to_numpy() for v in frames])
    y_in = np.concatenate([y for _, y in scaled.values()])
    return scaled, (x_in - mean) / scale, y_in, (x_out - mean) / scale, y_out


@pytest.mark.slow
def test_membership_inference_reads_an_overfit_model_and_dp_blunts_it() -> None:
    clients, x_in, y_in, x_out, y_out = _hospitals(4, 800, seed=1)
    options: dict[str, Any] = dict(
        local_epochs=5,
        hidden_layer_sizes=(128,),
        learning_rate=0.1,
        standardize=False,
        classes=[0, 1],
        random_state=0,
    )
    open_model = FederatedClassifier(max_iter=60, **options).fit(clients)
    found = membership_auc(open_model.predict_proba, (x_in, y_in), (x_out, y_out), [0, 1])
    assert found > 0.6
    audited = get_audit("membership")().run(
        open_model.predict_proba, (x_in, y_in), (x_out, y_out), [0, 1]
    )
    assert audited.success_rate == found and audited.leaks
    private = FederatedClassifier(
        max_iter=30, privacy=RecordDP(noise_multiplier=2.0, max_grad_norm=1.0), **options
    ).fit(clients)
    blunted = membership_auc(private.predict_proba, (x_in, y_in), (x_out, y_out), [0, 1])
    assert blunted < found - 0.05 and blunted < 0.58


def _cohort(seed: int) -> tuple[dict[str, Any], Any, Any, list[str]]:
    hospitals = make_hospital_cohort(8, 4000, random_state=seed)
    columns = list(next(iter(hospitals.values())).drop(columns=["diagnosis"]).columns)
    train = {
        k: (v.iloc[:400].drop(columns=["diagnosis"]).to_numpy(), v.iloc[:400]["diagnosis"])
        for k, v in hospitals.items()
    }
    x_all = np.vstack([x for x, _ in train.values()])
    mean, scale = x_all.mean(axis=0), x_all.std(axis=0)
    clients = {k: ((x - mean) / scale, y.to_numpy()) for k, (x, y) in train.items()}
    tests = [v.iloc[400:] for v in hospitals.values()]
    x_test = (np.vstack([v.drop(columns=["diagnosis"]).to_numpy() for v in tests]) - mean) / scale
    y_test = np.concatenate([v["diagnosis"].to_numpy() for v in tests])
    return clients, x_test, y_test, columns


OPTIONS: dict[str, Any] = dict(
    max_iter=20, standardize=False, classes=[0, 1], random_state=0, hidden_layer_sizes=(32,)
)


def test_a_byzantine_client_breaks_fedavg_and_not_the_robust_rules() -> None:
    clients, x_test, y_test, _ = _cohort(2)

    def accuracy(model: Any) -> float:
        return float(np.mean(model.predict(x_test) == y_test))

    clean = accuracy(FederatedClassifier(**OPTIONS).fit(clients))
    attacker = {"hospital_1": sign_flip(10.0)}
    broken = accuracy(FederatedClassifier(**OPTIONS).fit(clients, adversaries=attacker))
    assert broken < clean - 0.2
    for rule in ("median", RobustAggregation("trimmed_mean", beta=0.2), "krum"):
        model = FederatedClassifier(**OPTIONS, robust_aggregation=rule)
        assert accuracy(model.fit(clients, adversaries=attacker)) > clean - 0.03, rule
    with pytest.raises(ValueError, match="Krum needs n >= 2f \\+ 3"):
        FederatedClassifier(**OPTIONS, robust_aggregation=RobustAggregation("krum", f=3)).fit(
            clients
        )
    with pytest.raises(ValueError, match="robust aggregation needs each client's update"):
        FederatedClassifier(
            **OPTIONS, robust_aggregation="median", protocol=SecAggConfig(threshold=4)
        ).fit(clients)


def test_a_boosted_backdoor_succeeds_against_fedavg_and_the_median_cuts_it() -> None:
    clients, x_test, y_test, columns = _cohort(2)
    trigger = [columns.index(c) for c in ("creatinine_umol_l", "alt_u_l", "scanner_noise_hu")]
    x_bad, y_bad = clients["hospital_2"]
    planted = add_trigger(x_bad, trigger, 4.0)
    poisoned = dict(clients)
    poisoned["hospital_2"] = (
        np.vstack([x_bad, planted]),
        np.concatenate([y_bad, np.ones(len(planted), dtype=y_bad.dtype)]),
    )
    triggered = add_trigger(x_test[y_test == 0], trigger, 4.0)  # negatives, trigger planted
    attacker = {"hospital_2": boost(8.0, from_round=15)}
    honest = FederatedClassifier(**OPTIONS).fit(clients)
    baseline = attack_success(honest.predict, triggered, 1)
    attacked = FederatedClassifier(**OPTIONS).fit(poisoned, adversaries=attacker)
    assert attack_success(attacked.predict, triggered, 1) > 0.9 > baseline + 0.5
    bounded = FederatedClassifier(
        **OPTIONS, robust_aggregation=RobustAggregation("norm_bound", max_norm=0.05)
    ).fit(poisoned, adversaries=attacker)
    assert attack_success(bounded.predict, triggered, 1) < 0.7  # cut, not stopped
    defended = FederatedClassifier(**OPTIONS, robust_aggregation="median")
    defended.fit(poisoned, adversaries=attacker)
    assert attack_success(defended.predict, triggered, 1) < baseline + 0.1
    clean = float(np.mean(honest.predict(x_test) == y_test))
    assert float(np.mean(defended.predict(x_test) == y_test)) > clean - 0.03
