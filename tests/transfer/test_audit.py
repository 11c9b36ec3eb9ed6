"""The overlap-label attack as a registered audit: found by name through the registry, the
same figures as the function."""

from __future__ import annotations

import warnings

from transfer import FederatedTransferClassifier
from transfer.audit import OverlapLabelAudit, overlap_label_attack
from vfl.audit import AuditResult, get_audit
from vfl.datasets import make_transfer_pair


def test_the_overlap_label_audit_reports_the_attack_s_auc_against_chance() -> None:
    assert get_audit("overlap-label") is OverlapLabelAudit
    assert OverlapLabelAudit.family == "transfer"
    pair = make_transfer_pair(200, 150, n_overlap=40, target_labels=20, random_state=0)
    source = pair.source.drop(columns="patient_id")
    target = pair.target.drop(columns="patient_id")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = FederatedTransferClassifier(max_iter=2, protocol="plain", random_state=0).fit(
            source,
            target,
            pair.source_labels,
            target_labels=pair.target_labels,
            overlap=pair.overlap,
            keep_views=True,
        )
    result = get_audit("overlap-label")().run(model, target, pair.overlap, pair.source_labels)
    found = overlap_label_attack(model, target, pair.overlap, pair.source_labels)
    assert isinstance(result, AuditResult) and result.trials == 40
    assert result.success_rate == found["gradient attack AUC"] and result.chance == 0.5
    assert result.details["model AUC on the overlap"] == found["model AUC on the overlap"]
    assert result.stderr > 0 and result.two_sided
