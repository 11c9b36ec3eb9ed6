"""How many labels a passive party recovers from the gradient-revealing vertical protocols.

For each protocol and batch size, trains one epoch of :class:`vfl.VerticalLogisticRegression`
with ``keep_views=True`` and runs :class:`vfl.audit.LabelSolveAudit` on the passive party's
first-batch view: labels recovered exactly, against the majority-class guess, and the solver's
seconds. Breast cancer (the passive holds 20 columns) and the synthetic cohort (the lab holds
10). 1024-bit keys (the attack does not depend on the key size). Integer programming gets
10 s, then lattice reduction (with the ``audit`` extra) 10 s per block size; an unsolved batch
counts as the majority guess (no advantage).

Then label DP (``label_epsilon``): on breast cancer (30 epochs, batch 64, coordinator
protocol), the test AUC and the audit's recovery at several budgets, against no DP and
scikit-learn.

Run::

    python benchmarks/label_leak.py
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from vfl.audit import LabelSolveAudit  # noqa: E402
from vfl.datasets import IMAGING_FEATURES, LAB_FEATURES, LABEL, make_lab_imaging_cohort  # noqa: E402
from vfl.linear import VerticalLogisticRegression  # noqa: E402


def cases() -> list[tuple[str, dict[str, pd.DataFrame], pd.Series, str, str]]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    breast = {"active": x[cols[:10]], "passive": x[cols[10:]]}
    lab, imaging, truth = make_lab_imaging_cohort(2000, overlap=0.8, random_state=0)
    cohort = {
        "imaging": imaging.loc[truth["imaging"], IMAGING_FEATURES].reset_index(drop=True),
        "lab": lab.loc[truth["lab"], LAB_FEATURES].reset_index(drop=True),
    }
    labels = imaging.loc[truth["imaging"], LABEL].reset_index(drop=True)
    return [
        ("breast cancer (passive: 20 columns)", breast, y, "active", "passive"),
        ("lab + imaging cohort (lab: 10 columns)", cohort, labels, "imaging", "lab"),
    ]


def main() -> None:
    warnings.simplefilter("ignore")  # 1024-bit keys warn; the attack does not need 2048
    print(f"{'data':<40}{'protocol':<13}{'batch':>6}{'recovered':>11}{'chance':>8}{'solver':>9}")
    for name, parts, y, label_party, passive in cases():
        for protocol in ("coordinator", "two_party"):
            for batch in (64, 128, 256):
                est = VerticalLogisticRegression(
                    key_bits=1024,
                    insecure=True,
                    protocol=protocol,
                    batch_size=batch,
                    max_iter=1,
                    tol=None,
                )
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est.fit(parts, y, label_party=label_party, keep_views=True)
                design = est.parts_[passive].design(parts[passive])
                result = LabelSolveAudit().run(
                    est.views_[passive], design, np.asarray(y), time_limit=10
                )
                print(
                    f"{name:<40}{protocol:<13}{batch:>6}{result.success_rate:>10.1%} "
                    f"{result.chance:>7.1%}{result.details['seconds']:>8.2f}s"
                    f"  ({result.details['status']})"
                )
    label_dp_costs()


def label_dp_costs() -> None:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    parts = {"active": x_tr[cols[:10]], "passive": x_tr[cols[10:]]}
    test = {"active": x_te[cols[:10]], "passive": x_te[cols[10:]]}
    scaler = StandardScaler().fit(x_tr)
    reference = LogisticRegression().fit(scaler.transform(x_tr), y_tr)
    auc_sklearn = roc_auc_score(y_te, reference.predict_proba(scaler.transform(x_te))[:, 1])
    print(f"\nlabel DP on breast cancer (scikit-learn test AUC {auc_sklearn:.4f})")
    print(f"{'label_epsilon':>14}{'delta':>8}{'test AUC':>10}{'recovered':>11}{'chance':>8}")
    for budget in (None, 8.0, 4.0, 2.0, 1.0):
        aucs, rates, chances = [], [], []
        for seed in range(3):
            est = VerticalLogisticRegression(
                key_bits=1024,
                insecure=True,
                batch_size=64,
                max_iter=30,
                tol=None,
                random_state=seed,
                label_epsilon=budget,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(parts, y_tr, label_party="active", keep_views=True)
            aucs.append(roc_auc_score(y_te, est.predict_proba(test)[:, 1]))
            design = est.parts_["passive"].design(parts["passive"])
            result = LabelSolveAudit().run(
                est.views_["passive"], design, y_tr.to_numpy(), time_limit=10
            )
            rates.append(result.success_rate)
            chances.append(result.chance)
        label = "none" if budget is None else f"{budget:g}"
        print(
            f"{label:>14}{'1e-5' if budget else '-':>8}{np.mean(aucs):>10.4f}"
            f"{np.mean(rates):>10.1%} {np.mean(chances):>7.1%}"
        )


if __name__ == "__main__":
    main()
