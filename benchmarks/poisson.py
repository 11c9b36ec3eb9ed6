"""Vertical Poisson regression against scikit-learn's PoissonRegressor on a dvisits-like table.

For each seed, draws the synthetic 5,190-row table shaped like FATE's dvisits example
(:func:`vfl.linear.poisson_data.make_count_table`: an insurer with 7 columns and the visit
counts, a clinic with 5), holds out 30% of the rows, and fits
:class:`vfl.linear.VerticalPoissonRegression` (defaults: ``alpha=1``, Adam, batches of 256,
early stopping; every party a thread of this process) and ``PoissonRegressor`` at the same
penalty on the standardised joined columns. Prints, per seed, the held-out D^2 of both, the
largest coefficient gap, the epochs (and the best one kept), and the seconds per epoch, after
the machine's load.

Run::

    python benchmarks/poisson.py [--quick] [--seeds 0 1 2 3 4] [--exposure]

``--quick`` uses 1024-bit keys (insecure, for a fast run); the default is 2048 bits.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from sklearn.linear_model import PoissonRegressor  # noqa: E402
from sklearn.metrics import d2_tweedie_score  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from vfl.linear import VerticalPoissonRegression  # noqa: E402
from vfl.linear.poisson_data import make_count_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1024-bit keys (insecure)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--exposure", action="store_true", help="counts over a follow-up time")
    parser.add_argument("--alpha", type=float, default=1.0)
    args = parser.parse_args()
    bits = 1024 if args.quick else 2048
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}; {bits}-bit keys, alpha {args.alpha:g}"
        + (", exposure" if args.exposure else "")
    )
    print("seed  D2 vflink  D2 sklearn  |coef gap|  epochs (best)  s/epoch  setup s")
    for seed in args.seeds:
        table = make_count_table(exposure=args.exposure, random_state=seed)
        train, test = train_test_split(np.arange(len(table.y)), test_size=0.3, random_state=seed)
        e = table.exposure.to_numpy() if table.exposure is not None else np.ones(len(table.y))
        parts = {name: frame.iloc[train] for name, frame in table.parts.items()}
        held = {name: frame.iloc[test] for name, frame in table.parts.items()}
        y, y_test = table.y.iloc[train], table.y.iloc[test].to_numpy()
        model = VerticalPoissonRegression(
            alpha=args.alpha, key_bits=bits, insecure=args.quick, random_state=seed
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(parts, y, label_party="insurer", exposure=e[train])
            predicted = model.predict(held, exposure=e[test])
        rates = predicted / e[test]
        ours = d2_tweedie_score(y_test / e[test], rates, sample_weight=e[test], power=1)
        scaler = StandardScaler().fit(pd.concat(parts.values(), axis=1))
        x = scaler.transform(pd.concat(parts.values(), axis=1))
        x_test = scaler.transform(pd.concat(held.values(), axis=1))
        alpha = args.alpha * len(train) / e[train].sum()  # scikit-learn divides by sum(e)
        sk = PoissonRegressor(alpha=alpha, max_iter=1000, tol=1e-10)
        sk.fit(x, y.to_numpy() / e[train], sample_weight=e[train])
        theirs = sk.score(x_test, y_test / e[test], sample_weight=e[test])
        gap = max(np.max(np.abs(model.coef_ - sk.coef_)), abs(model.intercept_ - sk.intercept_))
        per_epoch = float(np.mean(model.epoch_seconds_))
        print(
            f"{seed:>4}  {ours:9.4f}  {theirs:10.4f}  {gap:10.4f}  {model.n_iter_:>6} "
            f"({model.best_epoch_:>2})    {per_epoch:7.2f}  {model.setup_seconds_:7.2f}"
        )


if __name__ == "__main__":
    main()
