"""What the target of federated transfer learning can infer about the patients it shares with
the source (:mod:`transfer.ftl`).

The target receives, per iteration, the gradient of the loss with respect to its
representation of every overlapping patient. That gradient mixes the source's label of the
patient (``-y Phi / 2|L|``) and the source's representation of the patient (the alignment
term): its main direction separates the labels. :func:`overlap_label_attack` runs that attack
(the first principal component of the first iteration's gradients; the attacker's AUC against
the source's true labels, oriented) and sets it beside what the target learns legitimately:
the AUC of its own fitted model on the same patients. On the synthetic task the two agree
(0.79 and 0.78): the gradients tell the target about the shared patients' outcomes about as
much as the transferred model does, and randomised response on the source's labels
(``privacy=RandomizedResponse(...)``) barely changes it, because most of it comes through the
source's representations, not the labels themselves. This is the price of transfer through
the overlap; a source that must not let the target predict its shared patients' outcomes
should not take part.

:class:`OverlapLabelAudit` (``"overlap-label"``) is the same attack as a registered audit of
:mod:`vfl.audit` (found by ``vfl.audit.get_audit("overlap-label")`` through the
``vflink.audits`` entry points): its :class:`~vfl.audit.AuditResult` is the gradient attack's
AUC against chance (0.5), with the model's AUC on the overlap, what the target learns
legitimately, in ``details``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from vfl.audit import Audit, AuditResult, register_audit

__all__ = ["OverlapLabelAudit", "overlap_label_attack"]


def _oriented_auc(truth: np.ndarray[Any, Any], scores: np.ndarray[Any, Any]) -> float:
    from sklearn.metrics import roc_auc_score

    if len(np.unique(truth)) < 2:
        return 0.5
    auc = float(roc_auc_score(truth, scores))
    return max(auc, 1 - auc)


def overlap_label_attack(
    model: Any, target: pd.DataFrame, overlap: pd.DataFrame, source_labels: Any
) -> dict[str, float]:
    """The target's label inference on the overlapping patients.

    ``model``: a :class:`transfer.FederatedTransferClassifier` fitted with ``keep_views=True``;
    ``target`` its feature frame; ``overlap`` the pairs of the fit; ``source_labels`` the
    source's labels (the truth the attack is scored against: an auditor's view).

    Returns ``{"gradient attack AUC": ..., "model AUC on the overlap": ...}`` (0.5 is chance).
    """
    truth, attack = _gradient_attack(model, overlap, source_labels)
    scores = model.decision_function(target.loc[overlap["target"]])
    return {
        "gradient attack AUC": _oriented_auc(truth, attack),
        "model AUC on the overlap": _oriented_auc(truth, scores),
    }


def _gradient_attack(
    model: Any, overlap: pd.DataFrame, source_labels: Any
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(truth, scores)``: the source's labels of the overlap (True: the positive class) and
    the attack's score of each overlapping patient (the first principal component of the
    first iteration's gradients)."""
    views = getattr(model, "views_", None)
    if not views:
        raise ValueError("fit the model with keep_views=True to audit what the target saw")
    truth = pd.Series(source_labels).loc[overlap["source"]].to_numpy() == model.classes_[1]
    gradients = np.asarray(views[0], dtype=np.float64)
    centred = gradients - gradients.mean(axis=0)
    _, _, directions = np.linalg.svd(centred, full_matrices=False)
    attack: np.ndarray[Any, Any] = centred @ directions[0]
    return np.asarray(truth), attack


@register_audit
class OverlapLabelAudit(Audit):
    """The target's inference of the source's labels of the shared patients, from the
    gradients it receives (:func:`overlap_label_attack`).

    Run it as :func:`overlap_label_attack`: the model fitted with ``keep_views=True``, the
    target's feature frame, the overlap pairs and the source's labels (scoring only).
    Reports the attack's AUC (oriented; chance 0.5) and, in ``details``, the model's AUC on
    the same patients.
    """

    name = "overlap-label"
    family = "transfer"

    def run(
        self, model: Any, target: pd.DataFrame, overlap: pd.DataFrame, source_labels: Any
    ) -> AuditResult:
        truth, attack = _gradient_attack(model, overlap, source_labels)
        scores = model.decision_function(target.loc[overlap["target"]])
        return AuditResult.from_auc(
            self.name,
            "the source's labels of the shared patients",
            truth,
            attack,
            details={"model AUC on the overlap": _oriented_auc(truth, scores)},
        )
