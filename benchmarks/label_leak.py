"""What a party recovers from each vertical protocol, and what each defence costs.

1. **Labels from the first batch.** For each protocol and batch size, trains one epoch of
   :class:`vfl.VerticalLogisticRegression` with ``keep_views=True`` and runs
   :class:`vfl.audit.LabelSolveAudit` on the passive party's first-batch view (under the
   secret-shared protocols: its share of its gradient numerator). It prints the labels
   recovered exactly, against the majority-class guess, and the solver's seconds. Data:
   breast cancer (the passive holds 20 columns) and the synthetic cohort (the lab holds
   10). Keys are 1024-bit, since the attack does not depend on the key size. Integer
   programming gets 10 s, then lattice reduction (with the ``audit`` extra) 10 s per block
   size. An unsolved batch counts as the majority guess (no advantage).
2. **A one-column passive's scores from the label party's view.** Eight epochs at batch 64
   on breast cancer; :class:`vfl.audit.ScoreSolveAudit` recovers the passive's column
   (rows within 1% of a standard deviation, and the correlation).
3. **Each protocol and defence side by side** on breast cancer: 30 epochs, batch 64,
   2048-bit keys. It prints test AUC, the labels recovered from the first batch
   (``LabelSolveAudit``) and from every batch (``LabelDirectionAudit``, statistical; chance
   is the majority class) and seconds per epoch.
4. **Label DP** (``privacy=GaussianLabelDP(epsilon)``) on breast cancer: 30 epochs, batch
   64, coordinator protocol, mean of three seeds. It prints the test AUC and the audit's recovery at
   several budgets, against no DP and scikit-learn.

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

from vfl.audit import LabelDirectionAudit, LabelSolveAudit, ScoreSolveAudit  # noqa: E402
from vfl.datasets import IMAGING_FEATURES, LAB_FEATURES, LABEL, make_lab_imaging_cohort  # noqa: E402
from vfl.linear import VerticalLogisticRegression  # noqa: E402
from vfl.privacy.options import GaussianLabelDP  # noqa: E402


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
    print(f"{'data':<40}{'protocol':<20}{'batch':>6}{'recovered':>11}{'chance':>8}{'solver':>9}")
    for name, parts, y, label_party, passive in cases():
        for protocol in PROTOCOLS:
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
                    f"{name:<40}{protocol:<20}{batch:>6}{result.success_rate:>10.1%} "
                    f"{result.chance:>7.1%}{result.details['seconds']:>8.2f}s"
                    f"  ({result.details['status']})"
                )
    score_solve()
    side_by_side()
    label_dp_costs()


PROTOCOLS = ("coordinator", "two_party", "shared", "shared_coordinator")


def breast_split() -> tuple[dict[str, pd.DataFrame], pd.Series, dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    parts = {"active": x_tr[cols[:10]], "passive": x_tr[cols[10:]]}
    test = {"active": x_te[cols[:10]], "passive": x_te[cols[10:]]}
    return parts, y_tr, test, y_te


def score_solve() -> None:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    parts = {"active": x[cols[:10]], "passive": x[cols[10:11]]}
    print("\none-column passive: its column from the label party's view (8 epochs, batch 64)")
    print(f"{'protocol':<20}{'recovered':>11}{'chance':>8}{'correlation':>13}")
    for protocol in PROTOCOLS:
        est = VerticalLogisticRegression(
            key_bits=1024, insecure=True, protocol=protocol, batch_size=64, max_iter=8, tol=None
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(parts, y, label_party="active", keep_views=True)
        design = est.parts_["active"].design(parts["active"])
        design = np.column_stack([design, np.ones(len(design))])
        column = est.parts_["passive"].design(parts["passive"])[:, 0]
        result = ScoreSolveAudit().run(est.views_["active"], design, column)
        print(
            f"{protocol:<20}{result.success_rate:>10.1%} {result.chance:>7.1%}"
            f"{result.details['correlation']:>13.4f}"
        )


def side_by_side() -> None:
    parts, y_tr, test, y_te = breast_split()
    print("\nbreast cancer, 30 epochs, batch 64, 2048-bit keys")
    print(
        f"{'protocol (defence)':<34}{'test AUC':>9}{'first batch':>13}{'every batch':>13}"
        f"{'chance':>8}{'s/epoch':>9}"
    )
    runs: list[tuple[str, dict[str, object]]] = [
        ("coordinator", {"protocol": "coordinator"}),
        ("two_party", {"protocol": "two_party"}),
        (
            "coordinator (label DP, eps 4)",
            {"protocol": "coordinator", "privacy": GaussianLabelDP(4.0)},
        ),
        ("shared (default)", {"protocol": "shared"}),
        ("shared_coordinator", {"protocol": "shared_coordinator"}),
    ]
    for name, params in runs:
        est = VerticalLogisticRegression(
            batch_size=64,
            max_iter=30,
            tol=None,
            random_state=0,
            **params,  # type: ignore[arg-type]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(parts, y_tr, label_party="active", keep_views=True)
        auc = roc_auc_score(y_te, est.predict_proba(test)[:, 1])
        design = est.parts_["passive"].design(parts["passive"])
        result = LabelSolveAudit().run(
            est.views_["passive"][:1], design, y_tr.to_numpy(), time_limit=10
        )
        every = LabelDirectionAudit().run(est.views_["passive"], design, y_tr.to_numpy())
        seconds = float(np.mean(est.epoch_seconds_[1:]))
        print(
            f"{name:<34}{auc:>9.4f}{result.success_rate:>12.1%}{every.success_rate:>13.1%}"
            f"{result.chance:>8.1%}{seconds:>8.2f}s"
        )


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
                protocol="coordinator",
                batch_size=64,
                max_iter=30,
                tol=None,
                random_state=seed,
                privacy=None if budget is None else GaussianLabelDP(budget),
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
