"""The base of inference audits and their result."""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AUDITS", "Audit", "AuditResult", "get_audit", "register_audit"]


@dataclass(frozen=True)
class AuditResult:
    """How well an attack inferred a hidden value, against guessing.

    Attributes
    ----------
    audit : str
        The audit's name.
    target : str
        What was attacked (``"labels of party 'imaging'"``).
    trials : int
        Hidden values attacked.
    successes : int
        Recovered exactly (or within the audit's tolerance).
    chance : float
        Success rate of the best guess without the protocol's messages (e.g. the majority
        class rate for labels).
    details : dict
        Audit-specific figures.
    """

    audit: str
    target: str
    trials: int
    successes: int
    chance: float
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def success_rate(self) -> float:
        return self.successes / self.trials if self.trials else 0.0

    @property
    def advantage(self) -> float:
        """Success rate minus chance (0: the messages told the attacker nothing)."""
        return self.success_rate - self.chance

    def significant(self, alpha: float = 1e-6) -> bool:
        """Whether the successes are more than chance would give with probability ``alpha``
        (one-sided binomial tail, normal approximation with continuity correction)."""
        if self.trials == 0 or self.chance >= 1:
            return False
        mean = self.trials * self.chance
        sd = math.sqrt(self.trials * self.chance * (1 - self.chance)) or 1e-12
        z = (self.successes - 0.5 - mean) / sd
        return 0.5 * math.erfc(z / math.sqrt(2)) < alpha

    def __str__(self) -> str:
        return (
            f"{self.audit}: {self.target}: {self.successes}/{self.trials} recovered "
            f"({self.success_rate:.1%}; chance {self.chance:.1%}, advantage "
            f"{self.advantage:+.1%})"
        )


class Audit(abc.ABC):
    """An attack run from one party's point of view on what it received."""

    name: str = ""

    @abc.abstractmethod
    def run(self, *args: Any, **kwargs: Any) -> AuditResult:
        """Attack and report."""


AUDITS: dict[str, type[Audit]] = {}
"""The registry: name -> audit class."""


def register_audit(cls: type[Audit]) -> type[Audit]:
    """Class decorator: add an audit to the registry under its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a name to be registered")
    AUDITS[cls.name] = cls
    return cls


def get_audit(name: str) -> type[Audit]:
    """The audit class named ``name`` (``ValueError`` listing the known ones otherwise)."""
    if name not in AUDITS:
        raise ValueError(f"unknown audit {name!r}; known: {sorted(AUDITS)}")
    return AUDITS[name]
