"""How many labels a passive party recovers from the gradient-revealing vertical protocols.

For each protocol and batch size, trains one epoch of :class:`vfl.VerticalLogisticRegression`
with ``keep_views=True`` and runs :class:`vfl.audit.LabelSolveAudit` on the passive party's
first-batch view: labels recovered exactly, against the majority-class guess, and the solver's
seconds. Breast cancer (the passive holds 20 columns) and the synthetic cohort (the lab holds
10). 1024-bit keys (the attack does not depend on the key size). The solver gets 10 s; an
unsolved batch counts as the majority guess (no advantage).

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
                    f"{'' if result.details['solved'] else '  (not solved)'}"
                )


if __name__ == "__main__":
    main()
