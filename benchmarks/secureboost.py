"""SecureBoost: seconds per tree and AUC beside scikit-learn's HistGradientBoostingClassifier
(and XGBoost, when it is installed) in the same run.

On FATE's default_credit (30,000 x 23: the guest holds 13 columns and the labels, the host 10;
joined on ``id``) when ``../shared/data/fate`` holds it, else on breast cancer; split 70/30
(stratified). Every learner gets the same trees, depth, learning rate and bins. SecureBoost's
seconds are the fit's wall clock divided by its trees (every party a thread of this process,
so both cores are shared by the label party's encryption and decryption and the host's
histograms); ``--rows`` fits on the first rows of the training split only.

    python benchmarks/secureboost.py [--trees 5] [--depth 5] [--rows 30000] [--key-bits 2048]

Being built (issue #32): the issue's goal is 50 trees of depth 5 on default_credit with
2048-bit keys in under 10 minutes on this 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from vfl.boost.estimator import SecureBoostClassifier  # noqa: E402

FATE = Path(__file__).resolve().parents[2] / "shared" / "data" / "fate"


def table() -> tuple[str, dict[str, pd.DataFrame], pd.Series, str]:
    guest_file = FATE / "default_credit_hetero_guest.csv"
    if not guest_file.exists():
        x, y = load_breast_cancer(return_X_y=True, as_frame=True)
        return "breast cancer 569 x (18 | 12)", {"a": x.iloc[:, 12:], "b": x.iloc[:, :12]}, y, "a"
    guest = pd.read_csv(guest_file).set_index("id")
    host = pd.read_csv(FATE / "default_credit_hetero_host.csv").set_index("id").add_prefix("h_")
    common = guest.index.intersection(host.index)
    guest, host = guest.loc[common], host.loc[common]
    y = guest.pop("y")
    return f"default_credit {len(y)} x (13 | 10)", {"guest": guest, "host": host}, y, "guest"


def main() -> None:
    os.environ.setdefault("VFLINK_PROGRESS", "0")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", type=int, default=5)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=0.3)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--rows", type=int, default=None, help="training rows of SecureBoost")
    parser.add_argument("--key-bits", type=int, default=2048)
    args = parser.parse_args()
    name, parts, y, label = table()
    index = np.arange(len(y))
    train, test = train_test_split(index, test_size=0.3, random_state=0, stratify=y)
    if args.rows is not None:
        train = train[: args.rows]
    tr = {p: f.iloc[train] for p, f in parts.items()}
    te = {p: f.iloc[test] for p, f in parts.items()}
    joined = pd.concat(list(parts.values()), axis=1)
    load = os.getloadavg()
    print(
        f"{name}; {len(train)} training rows, {len(test)} test rows; {args.trees} trees of depth "
        f"{args.depth}, rate {args.learning_rate}, {args.bins} bins; {args.key_bits}-bit keys\n"
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f}"
    )
    rows = []
    began = time.perf_counter()
    hgb = HistGradientBoostingClassifier(
        max_iter=args.trees,
        max_depth=args.depth,
        learning_rate=args.learning_rate,
        max_bins=args.bins,
        max_leaf_nodes=None,
        early_stopping=False,
        l2_regularization=1.0,
        min_samples_leaf=1,
    ).fit(joined.iloc[train], y.iloc[train])
    seconds = time.perf_counter() - began
    auc = roc_auc_score(y.iloc[test], hgb.decision_function(joined.iloc[test]))
    rows.append(("scikit-learn HistGradientBoosting", seconds, auc))
    try:
        import xgboost  # type: ignore[import-not-found]
    except ImportError:
        print("(XGBoost is not installed: its row is left out)")
    else:
        began = time.perf_counter()
        xgb = xgboost.XGBClassifier(
            n_estimators=args.trees,
            max_depth=args.depth,
            learning_rate=args.learning_rate,
            max_bin=args.bins,
            tree_method="hist",
            reg_lambda=1.0,
            min_child_weight=1.0,
        ).fit(joined.iloc[train], y.iloc[train])
        seconds = time.perf_counter() - began
        auc = roc_auc_score(y.iloc[test], xgb.predict_proba(joined.iloc[test])[:, 1])
        rows.append(("XGBoost hist", seconds, auc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SecureBoostClassifier(
            n_estimators=args.trees,
            max_depth=args.depth,
            learning_rate=args.learning_rate,
            max_bin=args.bins,
            key_bits=args.key_bits,
            insecure=args.key_bits < 2048,
        )
        began = time.perf_counter()
        model.fit(tr, y.iloc[train], label_party=label)
        seconds = time.perf_counter() - began
        auc = roc_auc_score(y.iloc[test], model.predict_proba(te)[:, 1])
    rows.append(("vflink SecureBoost (Paillier)", seconds, auc))
    print(f"\n{'learner':<34}{'fit s':>9}{'s/tree':>9}{'test AUC':>10}")
    for learner, seconds, auc in rows:
        print(f"{learner:<34}{seconds:>9.2f}{seconds / args.trees:>9.2f}{auc:>10.4f}")


if __name__ == "__main__":
    main()
