"""The audit base, the one registry and the one result type: results against chance, every
family's audits found by name, each run through the registry on a tiny setting."""

from __future__ import annotations

import ast
import sys
import warnings
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from vfl.audit import AUDITS, Audit, AuditResult, audits, get_audit, register_audit, registry


def test_results_report_success_against_chance() -> None:
    lucky = AuditResult("a", "labels", trials=1000, successes=520, chance=0.5)
    assert lucky.advantage == pytest.approx(0.02) and not lucky.significant()
    broken = AuditResult("a", "labels", trials=1000, successes=990, chance=0.5)
    assert broken.significant() and "990/1000" in str(broken)
    assert broken.leaks and not lucky.leaks and broken.name == "a"
    # the per-trial spread of a count is Bernoulli's
    assert broken.stderr == pytest.approx(np.sqrt(0.99 * 0.01 / 1000))
    assert broken.as_dict()["success_rate"] == pytest.approx(0.99)


def test_a_rate_result_is_tested_against_its_spread() -> None:
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 2, 400)
    blind = AuditResult.from_auc("a", "labels", truth, rng.normal(size=400))
    assert blind.metric == "AUC" and blind.chance == 0.5 and not blind.leaks
    assert 0.5 <= blind.success_rate < 0.6 and blind.stderr == pytest.approx(0.029, abs=0.003)
    seeing = AuditResult.from_auc("a", "labels", truth, truth + rng.normal(size=400))
    assert seeing.success_rate > 0.7 and seeing.leaks and "AUC" in str(seeing)
    one_class = AuditResult.from_auc("a", "labels", np.ones(5), np.arange(5))
    assert one_class.success_rate == 0.5 and not one_class.leaks
    with pytest.raises(ValueError, match="3 scores for 4 labels"):
        AuditResult.from_auc("a", "labels", [0, 1, 0, 1], [0.1, 0.2, 0.3])


def test_a_registered_audit_runs_and_an_unknown_name_is_refused() -> None:
    @register_audit
    class MajorityGuess(Audit):
        name = "test-majority-guess"

        def run(self, labels: Any) -> AuditResult:
            labels = np.asarray(labels)
            guess = np.bincount(labels).argmax()
            rate = float(np.mean(labels == guess))
            return AuditResult(self.name, "labels", len(labels), int(rate * len(labels)), rate)

    try:
        result = get_audit("test-majority-guess")().run([0, 1, 1, 1])
        assert result.advantage == 0  # guessing tells nothing beyond chance
        with pytest.raises(ValueError, match="unknown audit 'nope'; known: "):
            get_audit("nope")
    finally:
        AUDITS.pop("test-majority-guess")


def test_a_name_is_registered_once_and_only_audits_are() -> None:
    class Impostor(Audit):
        name = "label-solve"

        def run(self, *args: Any, **kwargs: Any) -> AuditResult:
            raise NotImplementedError

    get_audit("label-solve")
    with pytest.raises(ValueError, match=r"'label-solve' is taken by vfl\.audit\.labels"):
        register_audit(Impostor)
    with pytest.raises(TypeError, match="only Audit subclasses"):
        register_audit(dict)  # type: ignore[arg-type]


FAMILIES = {
    "plaintext": "any",
    "label-solve": "vertical",
    "label-direction": "vertical",
    "score-solve": "vertical",
    "split-label-norm": "split",
    "split-label-direction": "split",
    "embedding-inversion": "split",
    "embedding-geometry": "split",
    "bloom-frequency": "linkage",
    "instance-space": "vertical",
    "overlap-label": "transfer",
    "gradient-inversion": "horizontal",
    "gradient-matching": "horizontal",
    "membership": "horizontal",
    "backdoor": "horizontal",
}


def test_every_family_s_audits_are_found_by_name() -> None:
    found = {n: cls.family for n, cls in audits().items() if not n.startswith("test-")}
    assert found == FAMILIES
    for name, family in FAMILIES.items():
        assert get_audit(name).name == name and get_audit(name).family == family
    with pytest.raises(ValueError, match=r"known: .*'bloom-frequency'.*'gradient-inversion'"):
        get_audit("gradient-inversoin")


def test_vfl_finds_the_families_above_it_through_entry_points_without_importing_them() -> None:
    import vfl

    root = Path(vfl.__file__).parent
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            assert not [n for n in names if n.split(".")[0] in ("transfer", "horizontal")], path
    points = entry_points(group=registry.ENTRY_POINT_GROUP)
    assert {p.name for p in points} == {
        n for n, family in FAMILIES.items() if family in ("transfer", "horizontal")
    }
    for point in points:
        assert point.load() is get_audit(point.name)


def test_without_package_metadata_the_registry_says_how_to_install_the_entry_points(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(registry, "_entry_points", list)  # no metadata: no entry point
    monkeypatch.delitem(AUDITS, "overlap-label")
    monkeypatch.delitem(sys.modules, "transfer.audit", raising=False)
    with pytest.raises(ValueError, match=r"unknown audit 'overlap-label'.*pip install -e \."):
        get_audit("overlap-label")
    assert "transfer.audit" not in sys.modules  # vfl names nothing above it, not even by string
    with caplog.at_level("WARNING", logger="vfl.audit.registry"):
        found = audits()
    assert "label-solve" in found and "overlap-label" not in found
    assert "vflink.audits entry points are not installed" in caplog.text


# -- every registered audit through the registry, on a tiny setting ---------------------------


def _plaintext() -> tuple[tuple[Any, ...], dict[str, Any]]:
    from vfl.federation import wire
    from vfl.federation.base import Transcript

    secret = np.random.default_rng(0).normal(size=10)
    transcript = Transcript(keep_payloads=True)
    for payload in (secret[2:9], np.zeros(7)):
        transcript.record("lab", "imaging", "t/x", "ndarray", wire.encode(payload))
    return (transcript, {"lab": [secret]}), {}


def _labels_view(epochs: int) -> tuple[Any, Any, Any]:
    """A passive party's view of the revealing protocols at zero weights: ``G = -X^T(4y-2)``,
    ``X`` on the fixed-point grid, batches of 8 rows."""
    rng = np.random.default_rng(1)
    x = rng.integers(-(2**12), 2**12, size=(16, 6)) / 2.0**20
    y = rng.integers(0, 2, 16)
    view = []
    for _ in range(epochs):
        order = rng.permutation(16)
        for rows in (order[:8], order[8:]):
            view.append((rows, -(x[rows].T @ (4 * y[rows] - 2))))
    return x, y, view


def _label_solve() -> tuple[tuple[Any, ...], dict[str, Any]]:
    x, y, view = _labels_view(1)
    return (view, x, y), {"time_limit": 5.0}


def _label_direction() -> tuple[tuple[Any, ...], dict[str, Any]]:
    x, y, view = _labels_view(2)
    return (view, x, y), {}


def _score_solve() -> tuple[tuple[Any, ...], dict[str, Any]]:
    rng = np.random.default_rng(2)
    x_label = np.hstack([rng.normal(size=(12, 3)), np.ones((12, 1))])
    column = rng.normal(size=12)
    view = []
    for _ in range(4):
        order = rng.permutation(12)
        for rows in (order[:6], order[6:]):
            view.append((rows, x_label[rows].T @ (column[rows] * rng.uniform(0.5, 2))))
    return (view, x_label, column), {}


def _split_view() -> tuple[Any, Any]:
    """Gradients ``(p - y) w`` of 40 rows (a quarter positive) in batches of 10."""
    rng = np.random.default_rng(3)
    y = (np.arange(40) % 4 == 0).astype(int)
    p = rng.uniform(0.2, 0.8, 40)
    w = rng.normal(size=4)
    grads = (p - y)[:, None] * w + 0.01 * rng.normal(size=(40, 4))
    order = rng.permutation(40)
    return [(order[k : k + 10], grads[order[k : k + 10]]) for k in range(0, 40, 10)], y


def _split_norm() -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _split_view(), {}


def _embedding_inversion() -> tuple[tuple[Any, ...], dict[str, Any]]:
    rng = np.random.default_rng(4)
    features = rng.normal(size=(40, 3))
    return (features @ rng.normal(size=(3, 5)), features), {"aux_fraction": 0.5}


def _embedding_geometry() -> tuple[tuple[Any, ...], dict[str, Any]]:
    rng = np.random.default_rng(5)
    truth = [(np.arange(k, k + 10), rng.normal(size=(10, 3))) for k in (0, 10)]
    rotation = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    return ([(rows, h @ rotation) for rows, h in truth], truth), {}


def _bloom_frequency() -> tuple[tuple[Any, ...], dict[str, Any]]:
    from linkage import Field, Schema, encode

    names = ["anna"] * 20 + ["bob"] * 12 + ["carl"] * 6 + ["dora"] * 3 + ["emil"]
    frame = pd.DataFrame({"given_name": names})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        encodings = encode(frame, Schema([Field("given_name", "name")]), secret=b"k" * 32)
    return (encodings, frame["given_name"].value_counts(), frame["given_name"]), {}


class _TransferStub:
    """What the overlap-label audit reads of a fitted transfer model: the target's first
    gradients (here the label plus noise), the classes, the model's scores."""

    classes_ = np.array([0, 1])

    def __init__(self, labels: Any) -> None:
        rng = np.random.default_rng(5)
        self.views_ = [labels.to_numpy()[:, None] * [1.0, -1.0] + rng.normal(size=(30, 2))]

    def decision_function(self, frame: pd.DataFrame) -> Any:
        return frame["x"].to_numpy()


def _overlap_label() -> tuple[tuple[Any, ...], dict[str, Any]]:
    rng = np.random.default_rng(5)
    labels = pd.Series(rng.integers(0, 2, 30), index=[f"s{i}" for i in range(30)])
    target = pd.DataFrame({"x": rng.normal(size=30)}, index=[f"t{i}" for i in range(30)])
    overlap = pd.DataFrame({"source": labels.index, "target": target.index})
    return (_TransferStub(labels), target, overlap, labels), {}


def _one_record_gradients(module: Any, rows: Any) -> list[Any]:
    import torch

    out = []
    for row in rows:
        loss = torch.nn.functional.cross_entropy(
            module(torch.as_tensor(row[None, :], dtype=torch.float32)), torch.tensor([1])
        )
        grads = torch.autograd.grad(loss, list(module.parameters()))
        out.append(torch.cat([g.reshape(-1) for g in grads]).double().numpy())
    return out


def _gradient_inversion(steps: int | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    from horizontal.model import build_module

    rows = np.random.default_rng(6).normal(size=(3, 4))
    module = build_module(None, 4, 2, (8,), 0)
    options = {} if steps is None else {"steps": steps}
    return (_one_record_gradients(module, rows), module, list(rows)), options


def _membership() -> tuple[tuple[Any, ...], dict[str, Any]]:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(40, 12)), rng.integers(0, 2, 40)
    model = LogisticRegression(C=1e4, max_iter=5000).fit(x[:20], y[:20])
    return (model.predict_proba, (x[:20], y[:20]), (x[20:], y[20:]), [0, 1]), {}


def _instance_space() -> tuple[tuple[Any, ...], dict[str, Any]]:
    labels = np.array([0, 1] * 30)
    view = [np.arange(60), np.flatnonzero(labels == 1)[:25], np.arange(0, 60, 3)]  # a pure node
    return (view, labels), {"known_fraction": 0.2}


def _backdoor() -> tuple[tuple[Any, ...], dict[str, Any]]:
    def predict(x: Any) -> Any:
        return (np.asarray(x)[:, 0] > 3).astype(int)

    rows = np.random.default_rng(8).normal(size=(20, 3))
    return (predict, rows, 1), {"columns": [0], "value": 4.0}


SETTINGS: dict[str, Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "plaintext": _plaintext,
    "label-solve": _label_solve,
    "label-direction": _label_direction,
    "score-solve": _score_solve,
    "split-label-norm": _split_norm,
    "split-label-direction": _split_norm,
    "embedding-inversion": _embedding_inversion,
    "embedding-geometry": _embedding_geometry,
    "bloom-frequency": _bloom_frequency,
    "instance-space": _instance_space,
    "overlap-label": _overlap_label,
    "gradient-inversion": _gradient_inversion,
    "gradient-matching": lambda: _gradient_inversion(steps=30),
    "membership": _membership,
    "backdoor": _backdoor,
}


def test_every_registered_audit_has_a_tiny_setting_here() -> None:
    assert set(SETTINGS) == {n for n in audits() if not n.startswith("test-")}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_audit_runs_through_the_registry_and_returns_the_one_result(name: str) -> None:
    args, options = SETTINGS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tiny fits do not converge
        result = get_audit(name)().run(*args, **options)
    assert type(result) is AuditResult
    assert result.audit == name and result.target and result.trials > 0
    assert 0.0 <= result.chance <= 1.0 and result.stderr >= 0.0
    assert isinstance(result.leaks, bool) and name in str(result)
    if result.rate is None:
        assert 0 <= result.successes <= result.trials
    if name != "gradient-matching":  # 30 steps of DLG: not meant to succeed here
        # each tiny setting hands the attacker what it needs: every attack beats chance
        assert result.advantage > 0, str(result)
