"""Seconds per epoch of the default vertical protocol here against an earlier revision.

Checks the revision out into a temporary git worktree and runs the same fits in both trees,
alternating (old, new, old, new, ...), each in its own Python process, so that both see the
same machine load; prints the best of the rounds and the ratio. What it measures: the
two-party secret-shared protocol (``protocol="shared"``, 2048-bit keys) on breast cancer
(batch 64) and a synthetic 6000 x 23 table (batch 512), 4 epochs, steady state (epochs 2-4).
Used to measure what a change to the protocol costs, e.g. #31's hardening::

    python benchmarks/against_revision.py 0163fbe [--rounds 2]

``--case protected`` times split learning through the protected layer instead
(``SplitNNClassifier(protocol=ProtectedLayer())``, 2048-bit keys, breast cancer with 12
columns at the data party, batch 64, 3 epochs; the "setup" column is then the first epoch,
which makes the keys)::

    python benchmarks/against_revision.py c008988 --case protected
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

FITS = r"""
import json, os, sys, warnings
os.environ["VFLINK_PROGRESS"] = "0"
sys.path.insert(0, os.getcwd())
import numpy as np, pandas as pd
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler
from vfl.linear import VerticalLogisticRegression

x, y = load_breast_cancer(return_X_y=True, as_frame=True)
z = pd.DataFrame(StandardScaler().fit_transform(x), columns=x.columns)
rng = np.random.default_rng(0)
big = rng.normal(size=(6000, 23))
labels = pd.Series((rng.random(6000) < 1 / (1 + np.exp(-big @ rng.normal(size=23) * 0.5))))
frame = pd.DataFrame(big, columns=[f"f{i}" for i in range(23)])
cases = [
    ("breast cancer 10/20, batch 64", {"a": z.iloc[:, :10], "b": z.iloc[:, 10:]}, y, 64),
    ("synthetic 6000x23, batch 512", {"a": frame.iloc[:, :13], "b": frame.iloc[:, 13:]},
     labels.astype(int), 512),
]
out = {}
for name, parts, target, batch in cases:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = VerticalLogisticRegression(
            max_iter=4, tol=None, batch_size=batch, random_state=0, protocol="shared"
        )
        est.fit(parts, target, label_party="a")
    out[name] = [float(np.mean(est.epoch_seconds_[1:])), float(est.setup_seconds_)]
print(json.dumps(out))
"""


PROTECTED = r"""
import json, os, sys, warnings
os.environ["VFLINK_PROGRESS"] = "0"
sys.path.insert(0, os.getcwd())
import numpy as np, torch
from sklearn.datasets import load_breast_cancer
from vfl import SplitNNClassifier
from vfl.split import ProtectedLayer

torch.set_num_threads(1)
x, y = load_breast_cancer(return_X_y=True, as_frame=True)
parts = {"lab": x.iloc[:, :12], "imaging": x.iloc[:, 12:]}
model = SplitNNClassifier(
    max_iter=3, batch_size=64, tol=None, validation_fraction=0.0, random_state=0,
    protocol=ProtectedLayer(),
)
model.fit(parts, y, label_party="imaging")
seconds = model.epoch_seconds_
name = "breast 12/18, protected layer, batch 64"
print(json.dumps({name: [float(np.mean(seconds[1:])), float(seconds[0])]}))
"""

CASES = {"linear": FITS, "protected": PROTECTED}


def run(tree: Path, script: str) -> dict[str, list[float]]:
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tree, capture_output=True, text=True, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"the fits failed in {tree}:\n{done.stderr[-3000:]}")
    result: dict[str, list[float]] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("revision", help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    parser.add_argument(
        "--case", choices=sorted(CASES), default="linear", help="what to time (default linear)"
    )
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as folder:
        old = Path(folder) / "old"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old), args.revision],
            cwd=here,
            check=True,
            capture_output=True,
        )
        try:
            results: dict[str, list[dict[str, list[float]]]] = {"old": [], "new": []}
            for r in range(args.rounds):
                for which, tree in (("old", old), ("new", here)):
                    results[which].append(run(tree, CASES[args.case]))
                    print(f"round {r + 1} {which}: load average {os.getloadavg()[0]:.2f}")
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(old)], cwd=here, check=False
            )
    print(f"\n{'case':<34}{args.revision:>12}{'here':>10}{'ratio':>8}{'setup':>9}{'here':>8}")
    for name in results["new"][0]:
        before = min(r[name][0] for r in results["old"])
        after = min(r[name][0] for r in results["new"])
        setup_before = min(r[name][1] for r in results["old"])
        setup_after = min(r[name][1] for r in results["new"])
        print(
            f"{name:<34}{before:>10.3f}s{after:>9.3f}s{after / before:>7.3f}x"
            f"{setup_before:>8.2f}s{setup_after:>7.2f}s"
        )


if __name__ == "__main__":
    main()
