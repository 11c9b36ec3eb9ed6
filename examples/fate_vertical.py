"""Vertical linear models on real, public, vertically split tables (FATE's example data).

* ``student``: a regression (final grade) split 6 + 7 columns between a guest (with the grade)
  and a host -- :class:`vfl.VerticalLinearRegression` against scikit-learn's
  ``LinearRegression`` on the joined table;
* ``vehicle_scale``: four classes split 9 + 9 columns -- multiclass (one-vs-rest)
  :class:`vfl.VerticalLogisticRegression` against scikit-learn's one-vs-rest logistic
  regression, and against the guest's columns alone.

Both train with their defaults (only the label party named) under 2048-bit Paillier keys,
every party simulated in this process. The tables are
read from ``--data`` (default: the project's shared data folder).

Run::

    python examples/fate_vertical.py [--data ../shared/data/fate]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import train_test_split
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vfl.linear import VerticalLinearRegression, VerticalLogisticRegression

DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "fate"


def hetero(folder: Path, name: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    guest_file = folder / f"{name}_hetero_guest.csv"
    host_file = folder / f"{name}_hetero_host.csv"
    for path in (guest_file, host_file):
        if not path.exists():
            raise SystemExit(f"{path} not found: pass --data with FATE's example data folder")
    guest = pd.read_csv(guest_file).set_index("id")
    host = pd.read_csv(host_file).set_index("id").add_prefix("host_")
    y = guest.pop("y")
    return guest, host.loc[guest.index], y


def regression(folder: Path) -> None:
    guest, host, y = hetero(folder, "student")
    train, test = train_test_split(guest.index, test_size=0.3, random_state=0)
    parts = {"guest": guest.loc[train], "host": host.loc[train]}
    test_parts = {"guest": guest.loc[test], "host": host.loc[test]}
    began = time.perf_counter()
    model = VerticalLinearRegression(random_state=0)  # the defaults
    model.fit(parts, y.loc[train], label_party="guest")
    seconds = time.perf_counter() - began
    r2 = r2_score(y.loc[test], model.predict(test_parts))
    joined = pd.concat([guest, host], axis=1)
    reference = make_pipeline(StandardScaler(), LinearRegression())
    reference.fit(joined.loc[train], y.loc[train])
    r2_sklearn = r2_score(y.loc[test], reference.predict(joined.loc[test]))
    print(
        f"student (regression, {len(train)} training rows, 6 + 7 columns): test R^2 "
        f"{r2:.4f} federated, {r2_sklearn:.4f} scikit-learn on the joined table "
        f"({model.n_iter_} epochs, {seconds:.1f} s, setup {model.setup_seconds_:.1f} s)"
    )


def multiclass(folder: Path) -> None:
    guest, host, y = hetero(folder, "vehicle_scale")
    train, test = train_test_split(guest.index, test_size=0.3, random_state=0, stratify=y)
    parts = {"guest": guest.loc[train], "host": host.loc[train]}
    test_parts = {"guest": guest.loc[test], "host": host.loc[test]}
    began = time.perf_counter()
    model = VerticalLogisticRegression(random_state=0)  # the defaults
    model.fit(parts, y.loc[train], label_party="guest")
    seconds = time.perf_counter() - began
    accuracy = accuracy_score(y.loc[test], model.predict(test_parts))
    joined = pd.concat([guest, host], axis=1)

    def ovr() -> object:
        return make_pipeline(StandardScaler(), OneVsRestClassifier(LogisticRegression()))

    both = ovr().fit(joined.loc[train], y.loc[train])  # type: ignore[attr-defined]
    alone = ovr().fit(guest.loc[train], y.loc[train])  # type: ignore[attr-defined]
    print(
        f"vehicle ({len(model.classes_)} classes, {len(train)} training rows, 9 + 9 columns): "
        f"test accuracy {accuracy:.4f} federated, "
        f"{accuracy_score(y.loc[test], both.predict(joined.loc[test])):.4f} scikit-learn "
        f"one-vs-rest on the joined table, "
        f"{accuracy_score(y.loc[test], alone.predict(guest.loc[test])):.4f} the guest alone "
        f"({seconds:.1f} s, setup {model.setup_seconds_:.1f} s, once for all classes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT, help="FATE's example data folder")
    args = parser.parse_args()
    regression(args.data)
    multiclass(args.data)


if __name__ == "__main__":
    main()
