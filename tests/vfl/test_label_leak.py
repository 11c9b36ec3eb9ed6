"""The label-solve audit recovers a batch's labels from what a passive party decrypts in the
gradient-revealing protocols: the leak the README names, reproduced (so the audit can fail)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

from vfl.audit import LabelSolveAudit, get_audit
from vfl.crypto import SecurityWarning
from vfl.linear import VerticalLogisticRegression

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")


@pytest.mark.parametrize(("protocol", "batch"), [("coordinator", 64), ("two_party", 128)])
def test_a_passive_party_solves_for_the_first_batchs_labels(protocol: str, batch: int) -> None:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    parts = {"imaging": x[cols[:10]], "lab": x[cols[10:]]}
    labels = pd.Series(np.where(y == 1, "benign", "malignant"), index=y.index)
    est = VerticalLogisticRegression(
        key_bits=1024,
        insecure=True,
        random_state=0,
        protocol=protocol,
        batch_size=batch,
        max_iter=1,
        tol=None,
    )
    est.fit(parts, labels, label_party="imaging", keep_views=True)
    assert set(est.views_) == {"imaging", "lab"}
    design = est.parts_["lab"].design(parts["lab"])
    result = get_audit("label-solve")().run(est.views_["lab"], design, labels, index=y.index)
    assert result.trials == batch and result.details["solved"]
    assert result.success_rate == 1.0 and result.significant()  # every label, exactly
    # the same equations with a wrong guess of the labels are not satisfied: the solver
    # found the labels because the view determines them, not by luck
    rows, decrypted = est.views_["lab"][0]
    from vfl.audit.labels import first_batch_equations, solve_binary

    a, b = first_batch_equations(design[rows], decrypted[:, 0])
    b_wrong = b.copy()
    b_wrong[0] += 1
    assert solve_binary(a, b_wrong, time_limit=30) == (None, "infeasible")


def test_the_audit_needs_a_view() -> None:
    with pytest.raises(ValueError, match="fit with keep_views=True"):
        LabelSolveAudit().run([], np.zeros((3, 2)), [0, 1, 0])


def test_lattice_reduction_solves_a_party_with_few_columns() -> None:
    pytest.importorskip("fpylll", reason="the audit extra (fpylll) is not installed")
    from vfl.datasets import IMAGING_FEATURES, LAB_FEATURES, LABEL, make_lab_imaging_cohort

    lab, imaging, truth = make_lab_imaging_cohort(1000, overlap=0.8, random_state=0)
    parts = {
        "imaging": imaging.loc[truth["imaging"], IMAGING_FEATURES].reset_index(drop=True),
        "lab": lab.loc[truth["lab"], LAB_FEATURES].reset_index(drop=True),
    }
    y = imaging.loc[truth["imaging"], LABEL].reset_index(drop=True)
    est = VerticalLogisticRegression(
        key_bits=1024,
        insecure=True,
        random_state=0,
        batch_size=64,
        max_iter=1,
        tol=None,
        protocol="coordinator",
    )
    est.fit(parts, y, label_party="imaging", keep_views=True)
    design = est.parts_["lab"].design(parts["lab"])  # 10 columns: integer programming stalls
    result = LabelSolveAudit().run(est.views_["lab"], design, y, time_limit=2)
    assert result.details["status"] == "solved by lattice reduction"
    assert result.success_rate == 1.0
