"""The audit base: results against chance, the registry."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from vfl.audit import AUDITS, Audit, AuditResult, get_audit, register_audit


def test_results_report_success_against_chance() -> None:
    lucky = AuditResult("a", "labels", trials=1000, successes=520, chance=0.5)
    assert lucky.advantage == pytest.approx(0.02) and not lucky.significant()
    broken = AuditResult("a", "labels", trials=1000, successes=990, chance=0.5)
    assert broken.significant() and "990/1000" in str(broken)


def test_a_registered_audit_runs_and_an_unknown_name_is_refused() -> None:
    @register_audit
    class MajorityGuess(Audit):
        name = "test-majority-guess"

        def run(self, labels: Any) -> AuditResult:  # type: ignore[override]
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
