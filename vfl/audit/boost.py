"""The instance-space attack on SecureBoost: a host predicts the label party's labels from the
node row sets it saw.

A host never sees a gradient, a histogram sum or a label, but it is told the rows of every node
it builds a histogram for or splits (:mod:`vfl.boost.protocol`): SecureBoost's known leak.
Rows that share nodes, tree after tree, share gradients, hence labels. The attack
(:class:`InstanceSpaceAudit`) writes each row as the indicator of the node sets it belongs to,
and, knowing the labels of a few rows (``known_fraction``: patients whose diagnosis the host
learned elsewhere), fits a logistic regression on them and scores the others; its AUC against
the truth is the leak (chance 0.5). Without any known label, the first node split gives an
oriented AUC (``details["first split AUC"]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl.audit.base import Audit, AuditResult
from vfl.audit.registry import register_audit

__all__ = ["InstanceSpaceAudit", "membership"]


def membership(view: list[np.ndarray[Any, Any]], rows: int) -> np.ndarray[Any, Any]:
    """``(rows, sets)``: 1 where a row is in a node set of ``view`` (repeated sets once)."""
    seen: dict[bytes, np.ndarray[Any, Any]] = {}
    for node in view:
        node = np.unique(np.asarray(node, dtype=np.int64))
        if 0 < len(node) < rows:
            seen.setdefault(node.tobytes(), node)
    out = np.zeros((rows, len(seen)), dtype=np.float32)
    for j, node in enumerate(seen.values()):
        out[node, j] = 1.0
    return out


@register_audit
class InstanceSpaceAudit(Audit):
    """Labels from a host's instance space (see the module docstring).

    Run it on ``model.views_[host]`` of a :class:`vfl.boost.SecureBoostClassifier` fitted
    with ``keep_views=True`` and the rows' true labels (binary; they only score the attack).
    Reports the attacker's AUC on the rows whose labels it did not know (chance 0.5).
    """

    name = "instance-space"
    family = "vertical"

    def run(
        self,
        view: list[np.ndarray[Any, Any]],
        labels: Any,
        *,
        known_fraction: float = 0.05,
        random_state: int = 0,
        features: Any = None,
    ) -> AuditResult:
        """``features``: the host's own columns of the rows, if given; the same attack on them
        alone is reported beside (``details["own columns AUC"]``: what the host could infer
        without the protocol)."""
        from sklearn.linear_model import LogisticRegression

        truth = np.asarray(labels).reshape(-1)
        positive = (truth == np.unique(truth)[-1]).astype(np.int64)
        rows = len(positive)
        if not view:
            raise ValueError("the view is empty: fit with keep_views=True")
        if not 0 < known_fraction < 1:
            raise ValueError(f"known_fraction must be in (0, 1), got {known_fraction!r}")
        x = membership(view, rows)
        rng = np.random.default_rng(random_state)
        known = np.zeros(rows, dtype=bool)
        for value in (0, 1):  # the host knows a few rows of each class
            pool = np.flatnonzero(positive == value)
            take = max(1, round(known_fraction * len(pool)))
            known[rng.choice(pool, size=min(take, len(pool)), replace=False)] = True
        root = len(np.unique(np.asarray(view[0])))  # the first tree's root: its rows
        below = [j for j in range(x.shape[1]) if 0 < x[:, j].sum() < root]
        first = x[:, below[0]] if below else np.zeros(rows)  # the first node below it
        details: dict[str, Any] = {
            "node sets": x.shape[1],
            "known rows": int(known.sum()),
            "first split AUC": AuditResult.from_auc(self.name, "", positive, first).rate,
        }
        if features is not None:
            own = np.nan_to_num(np.asarray(features, dtype=np.float64))
            own = (own - own.mean(axis=0)) / (own.std(axis=0) + 1e-12)
            baseline = LogisticRegression(C=1.0, max_iter=2000).fit(own[known], positive[known])
            details["own columns AUC"] = AuditResult.from_auc(
                self.name,
                "",
                positive[~known],
                baseline.decision_function(own[~known]),
                oriented=False,
            ).rate
        if x.shape[1] == 0:
            scores = np.zeros(int((~known).sum()))
        else:
            model = LogisticRegression(C=1.0, max_iter=2000)
            model.fit(x[known], positive[known])
            scores = model.decision_function(x[~known])
        return AuditResult.from_auc(
            self.name,
            "labels from the node sets a host saw",
            positive[~known],
            scores,
            oriented=False,
            details=details,
        )
