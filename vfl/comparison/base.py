"""What every row of the comparison is made of: the settings, the shared context and the row.

A *scheme* is one way for the parties to learn together (or not): centralised, a party alone,
vertical logistic regression by one protocol, a split network with one defence, transfer, a
horizontal strategy with or without DP and secure aggregation. Each is a function of a
:class:`Context` that returns a :class:`SchemeResult`, registered with
:func:`vfl.registry.scheme` in its family's module (:mod:`vfl.comparison.vertical`,
:mod:`vfl.comparison.split`, :mod:`transfer.comparison`, :mod:`horizontal.comparison`), which
the application's comparison (:mod:`vfl.app.compare`) runs side by side.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from vfl.datasets import ClinicalPopulation

__all__ = ["FULL", "QUICK", "Attack", "Context", "SchemeResult", "Settings", "timed"]


@dataclass(frozen=True)
class Settings:
    """How large and how long every scheme runs (:data:`QUICK` and :data:`FULL`)."""

    name: str
    n_patients: int
    """Patients in the population (a quarter held out for testing)."""
    key_bits: int
    """Paillier key size of every encrypted scheme (below 2048 only for a quick look)."""
    vertical_epochs: int
    vertical_batch: int
    split_epochs: int
    ftl_iterations: int
    rounds: int
    """Horizontal rounds."""
    audit_time_limit: float
    """Seconds the label-solve audit may spend on a batch."""
    protected_layer: bool
    """Whether to run the split network's protected (encrypted) interactive layer."""

    @property
    def insecure(self) -> bool:
        return self.key_bits < 2048


QUICK = Settings(
    name="quick",
    n_patients=1600,
    key_bits=1024,
    vertical_epochs=3,
    vertical_batch=128,
    split_epochs=15,
    ftl_iterations=12,
    rounds=10,
    audit_time_limit=1.0,
    protected_layer=False,
)
"""About a minute on two cores: a smaller population, 1024-bit demo keys, short training."""

FULL = Settings(
    name="full",
    n_patients=4000,
    key_bits=2048,
    vertical_epochs=10,
    vertical_batch=128,
    split_epochs=40,
    ftl_iterations=12,
    rounds=30,
    audit_time_limit=10.0,
    protected_layer=True,
)
"""Under five minutes on two cores: 4,000 patients, 2048-bit keys."""


@dataclass(frozen=True)
class Attack:
    """One shipped audit run against one scheme's run.

    ``success`` is in the audit's own measure (share of labels recovered, attacker AUC,
    share of variance recovered); ``chance`` is what guessing gets in that measure.
    :attr:`advantage` puts every audit on one scale: 0 is chance, 1 is total success.
    """

    audit: str
    """The audit (``"label-solve"``, ``"split-label-norm"``, ``"membership"``, ...)."""
    target: str
    """What it tries to infer, and who tries (``"labels, by the lab"``)."""
    success: float
    chance: float
    measure: str
    """The unit of ``success`` and ``chance``."""

    @property
    def advantage(self) -> float:
        """``(success - chance) / (1 - chance)``, clipped to [0, 1]."""
        if not (math.isfinite(self.success) and math.isfinite(self.chance)) or self.chance >= 1:
            return 0.0
        return float(np.clip((self.success - self.chance) / (1.0 - self.chance), 0.0, 1.0))

    def __str__(self) -> str:
        return (
            f"{self.audit} ({self.target}): {self.success:.3f} {self.measure}, chance "
            f"{self.chance:.3f}"
        )


@dataclass
class SchemeResult:
    """One row of the comparison."""

    scheme: str
    family: str
    auc: float
    """Test AUC on the population's held-out patients, with the columns the scheme's model
    uses."""
    learns: str
    """What each party learns, in one sentence (from the protocol's own statement)."""
    seconds: float
    bytes_per_party: Mapping[str, int]
    """Bytes each party sent (for centralised: the rows it would hand over)."""
    attacks: tuple[Attack, ...] = ()
    ledger: Any = None
    """The run's :class:`vfl.privacy.PrivacyLedger` where DP applies."""
    exposure: float | None = None
    """Where the scheme sits on the privacy axis when no attack applies: 1 for handing over
    the rows (centralised), 0 for sharing nothing (a party alone)."""
    notes: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon(self) -> float | None:
        """The largest epsilon any holder of the ledger spent (at the ledger's delta)."""
        if self.ledger is None or not self.ledger.holders():
            return None
        return max(float(self.ledger.epsilon(holder=h)) for h in self.ledger.holders())

    @property
    def delta(self) -> float | None:
        return None if self.ledger is None else float(self.ledger.delta)

    def attack(self, audit: str) -> Attack:
        """The one attack whose audit name starts with ``audit`` (``KeyError`` otherwise)."""
        found = [a for a in self.attacks if a.audit.startswith(audit)]
        if len(found) != 1:
            raise KeyError(
                f"{self.scheme}: {len(found)} attacks match {audit!r}; attacks: "
                f"{[a.audit for a in self.attacks]}"
            )
        return found[0]

    @property
    def worst_attack(self) -> Attack | None:
        """The attack with the largest advantage (None if none ran)."""
        return max(self.attacks, key=lambda a: a.advantage, default=None)

    @property
    def privacy_loss(self) -> float:
        """The worst attack's advantage, or :attr:`exposure` where no attack applies."""
        worst = self.worst_attack
        if worst is not None:
            return worst.advantage
        return float(self.exposure) if self.exposure is not None else float("nan")

    @property
    def total_bytes(self) -> int:
        return int(sum(self.bytes_per_party.values()))

    def as_row(self) -> dict[str, Any]:
        worst = self.worst_attack
        return {
            "scheme": self.scheme,
            "family": self.family,
            "auc": self.auc,
            "epsilon": self.epsilon,
            "attack": None if worst is None else f"{worst.audit} ({worst.target})",
            "attack_success": None if worst is None else worst.success,
            "attack_chance": None if worst is None else worst.chance,
            "privacy_loss": self.privacy_loss,
            "seconds": self.seconds,
            "bytes": self.total_bytes,
            "bytes_per_party": dict(self.bytes_per_party),
            "learns": self.learns,
            "notes": self.notes,
        }


class Context:
    """What every scheme of one comparison shares: the population, the settings, the seed,
    and data cut or linked once (:meth:`cached`)."""

    def __init__(self, population: ClinicalPopulation, settings: Settings, seed: int) -> None:
        self.population = population
        self.settings = settings
        self.seed = seed
        self._cache: dict[str, Any] = {}

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()`` the first time ``key`` is asked for, the same object afterwards."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def test_set(self, columns: list[str] | None = None) -> tuple[pd.DataFrame, pd.Series]:
        return self.population.test_set(columns)


@contextmanager
def timed() -> Iterator[list[float]]:
    """``with timed() as t: ...`` leaves the seconds in ``t[0]``."""
    out = [0.0]
    began = time.perf_counter()
    try:
        yield out
    finally:
        out[0] = time.perf_counter() - began
