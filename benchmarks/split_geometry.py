"""Split learning's protected layer: the pairwise geometry its output keeps of the embeddings,
and what embedding noise buys against it at what cost in AUC (issue #31).

Under ``protocol="protected"`` the label party never sees a data party's embedding ``h``, but
it decrypts the layer's output ``z = h W`` of every training batch. This prints, for the
protected layer without a defence and with ``privacy=EmbeddingNoise(noise_multiplier, clip=1)``
at a few noise multipliers (noise on ``h`` before the layer), what the
``"embedding-geometry"`` audit (:class:`vfl.audit.split.EmbeddingGeometryAudit`) measures on
the fit's training batches:

* ``gram``: the correlation of the off-diagonal entries of ``z z^T`` and ``h h^T`` per batch,
  mean and standard error over the batches (chance 0); ``shuffled``: the same with the rows
  of ``h`` shuffled within each batch (the measured chance);
* ``dist``: Spearman's correlation of the pairwise distances; ``knn``: the share of each
  row's 5 nearest rows in ``z`` that are among its 5 nearest in ``h`` (chance about 0.08);
* ``avg``: ``gram`` after averaging each row's ``z`` (and ``h``) over the epochs, an attacker
  that averages the noise away;

and the test AUC and the epsilon the privacy ledger records for the data party (delta 1e-5;
``-`` without noise). A ``plain`` row (no protected layer: the label party sees ``h`` itself)
is the reference.

On FATE's breast table (``../shared/data/fate/breast_hetero_{guest,host}.csv``, 569 rows
joined on ``id``: the guest holds the labels and 10 columns, the host 20; sklearn's copy of
the same data, split 10 | 20, when the folder is absent, with a note), 70/30 stratified, in
two settings: the guest with its columns (FATE's setting: its own 10 columns carry much of
the model, so the host's noise costs little AUC) and the guest with the labels only (the
host's embeddings carry the whole model: the defence's full cost). ``--epochs`` epochs at
batch 64, no early stopping, model seeds ``0 .. --seeds - 1`` (figures averaged; the noise
comes from the OS, as does the protected block's initial value, so they vary from run to
run). 512-bit keys by default (insecure, for the demonstration, to keep the run near two
minutes on two cores: the label party decrypts the same ``z`` under any key size;
``--key-bits 2048`` for the deployment's cost).

Run::

    python benchmarks/split_geometry.py [--epochs 5] [--noise 0.1 0.3 1.0] [--seeds 1]
        [--key-bits 512]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from vfl import SplitNNClassifier  # noqa: E402
from vfl.audit import get_audit  # noqa: E402
from vfl.split import EmbeddingNoise, ProtectedLayer  # noqa: E402

FATE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "fate"
SENDER, LABEL = "host", "guest"


def breast() -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, str]:
    """``(guest columns, host columns, labels, source)``: FATE's breast table, or sklearn's."""
    guest_file, host_file = FATE / "breast_hetero_guest.csv", FATE / "breast_hetero_host.csv"
    if guest_file.exists() and host_file.exists():
        guest = pd.read_csv(guest_file).set_index("id")
        host = pd.read_csv(host_file).set_index("id").loc[guest.index]
        return guest.drop(columns="y"), host, guest["y"], "FATE breast 569 x (10 | 20)"
    from sklearn.datasets import load_breast_cancer

    print(f"note: FATE's breast table is not in {FATE}; sklearn's copy of it instead")
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    return x.iloc[:, :10], x.iloc[:, 10:], y, "sklearn breast cancer 569 x (10 | 20)"


def run(
    parts: dict[str, pd.DataFrame],
    y: pd.Series,
    test: dict[str, pd.DataFrame],
    y_test: pd.Series,
    *,
    protocol: Any,
    privacy: Any,
    epochs: int,
    seed: int,
) -> dict[str, float]:
    """One fit: the audit's figures on its training batches, test AUC, epsilon, seconds."""
    began = time.perf_counter()
    model = SplitNNClassifier(
        max_iter=epochs,
        batch_size=64,
        tol=None,
        validation_fraction=0.0,
        random_state=seed,
        protocol=protocol,
        privacy=privacy,
    )
    model.fit(parts, y, label_party=LABEL, keep_views=True)
    seconds = time.perf_counter() - began
    result = get_audit("embedding-geometry")().run(
        model.label_views_[SENDER], model.embeddings_[SENDER], random_state=seed
    )
    ledger = model.privacy_ledger_
    return {
        "gram": result.success_rate,
        "stderr": result.stderr,
        "shuffled": result.details["shuffled correlation"],
        "dist": result.details["distance rank correlation"],
        "knn": result.details["neighbour overlap"],
        "avg": result.details["averaged correlation"],
        "auc": float(roc_auc_score(y_test, model.predict_proba(test)[:, 1])),
        "epsilon": ledger.epsilon(holder=SENDER) if len(ledger) else float("nan"),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5, help="epochs of each fit")
    parser.add_argument(
        "--noise", type=float, nargs="+", default=[0.1, 0.3, 1.0], help="noise multipliers"
    )
    parser.add_argument("--seeds", type=int, default=1, help="model seeds 0..N-1, averaged")
    parser.add_argument("--key-bits", type=int, default=512, help="Paillier key size")
    args = parser.parse_args()
    layer = ProtectedLayer(key_bits=args.key_bits, insecure=args.key_bits < 2048)
    guest, host, y, source = breast()
    train, test = train_test_split(np.arange(len(y)), test_size=0.3, random_state=0, stratify=y)
    settings = {
        "guest with its 10 columns": {LABEL: guest, SENDER: host},
        "guest with the labels only": {SENDER: host},
    }
    cases: list[tuple[str, Any, Any]] = [
        ("plain (reference)", "plain", None),
        ("protected, no defence", layer, None),
    ]
    cases += [
        (f"protected, noise {m:g}", layer, EmbeddingNoise(noise_multiplier=m, clip=1.0))
        for m in args.noise
    ]
    print(
        f"{source}; {len(train)} training rows, {len(test)} test rows; {args.epochs} epochs "
        f"at batch 64, seeds 0..{args.seeds - 1}, {args.key_bits}-bit keys"
    )
    for setting, frames in settings.items():
        print(f"\n{setting}")
        print(
            f"{'':<24}{'gram':>7}{'+-':>7}{'shuffled':>10}{'dist':>7}{'knn':>7}{'avg':>7}"
            f"{'AUC':>8}{'epsilon':>9}{'s/fit':>7}"
        )
        fit = {p: f.iloc[train] for p, f in frames.items()}
        held = {p: f.iloc[test] for p, f in frames.items()}
        for name, protocol, privacy in cases:
            rows = [
                run(
                    fit,
                    y.iloc[train],
                    held,
                    y.iloc[test],
                    protocol=protocol,
                    privacy=privacy,
                    epochs=args.epochs,
                    seed=seed,
                )
                for seed in range(args.seeds)
            ]
            mean = {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}
            epsilon = "-" if np.isnan(mean["epsilon"]) else f"{mean['epsilon']:.1f}"
            print(
                f"{name:<24}{mean['gram']:>7.3f}{mean['stderr']:>7.3f}{mean['shuffled']:>10.3f}"
                f"{mean['dist']:>7.3f}{mean['knn']:>7.3f}{mean['avg']:>7.3f}{mean['auc']:>8.4f}"
                f"{epsilon:>9}{mean['seconds']:>7.1f}",
                flush=True,
            )


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # keys below 2048 bits warn: a demonstration
        main()
