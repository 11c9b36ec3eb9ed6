"""The base of every audit and the one result type every family's audits return.

An audit is an attack run from one party's (or an outsider's) point of view on what it
received; it reports an :class:`AuditResult`: what was attacked, over how many trials, the
success rate against the chance level (what the best guess without the protocol's messages
achieves), the per-trial spread and so the standard error, and a verdict (:attr:`leaks`).

Two kinds of success rate share the type:

* **counts** (the default): ``successes`` of ``trials`` hidden values recovered (labels,
  records within a tolerance, re-identified names); the spread of one trial is the Bernoulli
  one, and significance is the one-sided binomial tail under chance;
* **rates** (``rate=`` given): a figure that is not a count -- an attacker's AUC
  (:meth:`AuditResult.from_auc`, chance 0.5) or the share of variance a reconstruction
  explains (chance 0) -- with the per-trial spread the audit measured (``spread=``);
  significance is the normal tail of ``(rate - chance) / stderr``.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Audit", "AuditResult"]

DEFAULT_ALPHA = 1e-6
"""The significance level of :attr:`AuditResult.leaks`: strict, so that a leak reported on a
small run is not a fluke."""


@dataclass(frozen=True)
class AuditResult:
    """How well an attack inferred a hidden value, against guessing.

    Attributes
    ----------
    audit : str
        The audit's name (its registry name; also :attr:`name`).
    target : str
        What was attacked (``"labels of the first batch"``).
    trials : int
        Hidden values attacked (rows, records, messages).
    successes : int
        Recovered exactly (or within the audit's tolerance); 0 where the success rate is not a
        count (``rate`` given).
    chance : float
        Success rate of the best guess without the protocol's messages (e.g. the majority
        class rate for labels, 0.5 for an AUC).
    details : dict
        Audit-specific figures.
    rate : float or None
        The success rate when it is not ``successes / trials`` (an AUC, an explained share of
        variance).
    spread : float or None
        Standard deviation of one trial's outcome; ``None``: the Bernoulli spread of a count.
    metric : str
        What the success rate measures (``"recovered"``, ``"AUC"``, ``"explained variance"``).
    two_sided : bool
        The rate is the better of an attack and its negation (an oriented AUC): its test is
        two-sided.
    """

    audit: str
    target: str
    trials: int
    successes: int
    chance: float
    details: dict[str, Any] = field(default_factory=dict)
    rate: float | None = None
    spread: float | None = None
    metric: str = "recovered"
    two_sided: bool = False

    @classmethod
    def from_auc(
        cls,
        audit: str,
        target: str,
        truth: Any,
        scores: Any,
        *,
        oriented: bool = True,
        details: dict[str, Any] | None = None,
    ) -> AuditResult:
        """The result of an attack that scores each row, as its AUC against the binary
        ``truth`` (chance 0.5). ``oriented``: the attacker can orient the score with one known
        label, so the AUC is ``max(auc, 1 - auc)`` and the test two-sided. The spread is the
        Hanley-McNeil (1982) standard error times ``sqrt(trials)``; one class only gives 0.5
        with no spread."""
        positive = np.asarray(truth).astype(bool).reshape(-1)
        values = np.asarray(scores, dtype=np.float64).reshape(-1)
        if len(positive) != len(values):
            raise ValueError(f"{len(values)} scores for {len(positive)} labels")
        n1, n0 = int(positive.sum()), int((~positive).sum())
        if n1 == 0 or n0 == 0:
            auc, stderr = 0.5, 0.0
        else:
            from sklearn.metrics import roc_auc_score

            auc = float(roc_auc_score(positive, values))
            if oriented:
                auc = max(auc, 1.0 - auc)
            q1, q2 = auc / (2 - auc), 2 * auc**2 / (1 + auc)
            variance = auc * (1 - auc) + (n1 - 1) * (q1 - auc**2) + (n0 - 1) * (q2 - auc**2)
            stderr = math.sqrt(max(variance, 0.0) / (n1 * n0))
        trials = len(positive)
        return cls(
            audit,
            target,
            trials=trials,
            successes=0,
            chance=0.5,
            details=dict(details or {}),
            rate=auc,
            spread=stderr * math.sqrt(trials),
            metric="AUC",
            two_sided=oriented,
        )

    @property
    def name(self) -> str:
        """The audit's name (the same as :attr:`audit`)."""
        return self.audit

    @property
    def success_rate(self) -> float:
        if self.rate is not None:
            return self.rate
        return self.successes / self.trials if self.trials else 0.0

    @property
    def advantage(self) -> float:
        """Success rate minus chance (0: the messages told the attacker nothing)."""
        return self.success_rate - self.chance

    @property
    def stderr(self) -> float:
        """Standard error of the success rate: the per-trial spread over ``sqrt(trials)``."""
        if not self.trials:
            return 0.0
        if self.spread is not None:
            return self.spread / math.sqrt(self.trials)
        p = self.success_rate
        return math.sqrt(p * (1 - p) / self.trials)

    def significant(self, alpha: float = DEFAULT_ALPHA) -> bool:
        """Whether the success rate is above chance beyond what chance gives with probability
        ``alpha``. Counts: one-sided binomial tail under chance, normal approximation with
        continuity correction. Rates: normal tail of ``(rate - chance) / stderr`` (doubled
        when ``two_sided``)."""
        if self.trials == 0:
            return False
        if self.rate is None and self.spread is None:
            if self.chance >= 1:
                return False
            mean = self.trials * self.chance
            sd = math.sqrt(self.trials * self.chance * (1 - self.chance)) or 1e-12
            z = (self.successes - 0.5 - mean) / sd
            return 0.5 * math.erfc(z / math.sqrt(2)) < alpha
        z = self.advantage / (self.stderr or 1e-12)
        tail = 0.5 * math.erfc(z / math.sqrt(2))
        return (2 * tail if self.two_sided else tail) < alpha

    @property
    def leaks(self) -> bool:
        """The verdict: the attack did better than chance (:meth:`significant` at
        :data:`DEFAULT_ALPHA`). ``False`` is no proof of privacy: a better attack may exist."""
        return self.significant()

    def as_dict(self) -> dict[str, Any]:
        """The summary figures as a plain dict (a table row)."""
        return {
            "audit": self.audit,
            "target": self.target,
            "metric": self.metric,
            "trials": self.trials,
            "success_rate": self.success_rate,
            "chance": self.chance,
            "advantage": self.advantage,
            "stderr": self.stderr,
            "leaks": self.leaks,
        }

    def __str__(self) -> str:
        if self.rate is None:
            return (
                f"{self.audit}: {self.target}: {self.successes}/{self.trials} recovered "
                f"({self.success_rate:.1%}; chance {self.chance:.1%}, advantage "
                f"{self.advantage:+.1%})"
            )
        return (
            f"{self.audit}: {self.target}: {self.metric} {self.success_rate:.3f} "
            f"+- {self.stderr:.3f} over {self.trials} trials (chance {self.chance:.3f}, "
            f"advantage {self.advantage:+.3f})"
        )


class Audit(abc.ABC):
    """An attack run from one party's point of view on what it received.

    Subclasses set ``name`` (the registry name, :func:`vfl.audit.register_audit`) and
    ``family`` (the protocol family attacked: ``"vertical"``, ``"split"``, ``"transfer"``,
    ``"horizontal"``, ``"linkage"``, or ``"any"``), and implement :meth:`run`, whose inputs
    are what the attacker holds plus the truth that only scores the attack.
    """

    name: str = ""
    family: str = ""

    @abc.abstractmethod
    def run(self, *args: Any, **kwargs: Any) -> AuditResult:
        """Attack and report."""
