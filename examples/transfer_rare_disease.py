"""Transfer learning for a rare-disease centre: a general hospital's many labels help a centre
that has few, through the patients both have seen (secure FTL) or through a shipped encoder.

1. the simulated pair (:func:`vfl.datasets.make_transfer_pair`): a general hospital with 3,000
   labelled patients and its lab columns; a rare-disease centre with 1,500 patients, imaging
   columns and 3 of the lab tests, and few labels; 200 patients in both, found by private set
   intersection on ``patient_id`` (:func:`transfer.overlap_pairs`) and checked against the
   truth;
2. secure federated transfer learning (:class:`transfer.FederatedTransferClassifier`) for a
   few iterations with 2048-bit keys, beside its plaintext simulation: the same model, and the
   seconds an encrypted iteration costs;
3. the centre's test AUC by its number of labels (20, 50, 200, 1000): the centre alone
   (logistic regression on its labelled rows), FTL (the plaintext simulation, which computes
   what the encrypted protocol does), encoder transfer (an encoder pretrained at the hospital
   on the 3 shared lab tests, shipped as a checked file, a head fine-tuned at the centre) and
   the centre with every training row labelled (the upper bound); and FTL by the size of the
   overlap;
4. what the centre can infer about the shared patients' outcomes from the gradients it
   receives (:func:`transfer.audit.overlap_label_attack`);
5. one plot: AUC against the centre's labels, and against the overlap.

Run::

    python examples/transfer_rare_disease.py [--out vflink-demo]

The plot (``transfer_rare_disease.png``) goes to ``--out`` (default ``vflink-demo``, which git
ignores). About a minute on two cores.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from horizontal import pretrain_encoder
from transfer import (
    EncoderArtifact,
    EncoderTransferClassifier,
    FederatedTransferClassifier,
    overlap_pairs,
)
from transfer.audit import overlap_label_attack
from vfl.datasets import make_transfer_pair

LABELS = [20, 50, 200, 1000]
OVERLAPS = [20, 50, 200, 500]


def features(pair: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    return pair.source.drop(columns="patient_id"), pair.target.drop(columns="patient_id")


def ftl(pair: Any, overlap: pd.DataFrame, **options: Any) -> FederatedTransferClassifier:
    source, target = features(pair)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # protocol="plain" warns: a simulation, by design
        model = FederatedTransferClassifier(random_state=0, **options)
        return model.fit(
            source,
            target,
            pair.source_labels,
            target_labels=pair.target_labels,
            overlap=overlap,
            keep_views=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="vflink-demo")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    print("== 1. The hospital and the centre")
    pair = make_transfer_pair(target_labels=50, random_state=0)
    overlap = overlap_pairs(pair.source, pair.target, id_column="patient_id")
    truth = set(map(tuple, pair.overlap.to_numpy()))
    found = set(map(tuple, overlap.to_numpy()))
    print(
        f"hospital {pair.source.shape[0]} patients x {pair.source.shape[1] - 1} columns, all "
        f"labelled; centre {pair.target.shape[0]} x {pair.target.shape[1] - 1}, "
        f"{len(pair.target_labels)} labelled; shared columns {pair.shared_columns}\n"
        f"PSI on patient_id: {len(found)} patients in both, {len(found & truth)} of them true "
        f"pairs ({len(truth)} exist)"
    )

    print("\n== 2. Secure FTL (2048-bit Paillier keys) against its plaintext simulation")
    began = time.perf_counter()
    secure = ftl(pair, overlap, max_iter=4, verbose=1)  # each party's iterations, live
    seconds = time.perf_counter() - began
    plain = ftl(pair, overlap, max_iter=4, protocol="plain")
    gap = max(float(np.abs(a - b).max()) for a, b in zip(secure.views_, plain.views_, strict=True))
    print(
        f"4 iterations in {seconds:.1f} s ({np.median(secure.iteration_seconds_[1:]):.2f} s per "
        f"iteration after the first); the centre's gradients differ from the plaintext run's "
        f"by at most {gap:.1e}"
    )

    print("\n== 3. The centre's test AUC by its labels (500 held-out centre rows)")
    full = make_transfer_pair(target_labels=max(LABELS), random_state=0)
    test = full.target_truth.index.difference(full.target_labels.index)
    _, target_all = features(full)
    train_rows = full.target_truth.index.difference(test)
    results: dict[str, list[float]] = {
        k: [] for k in ("centre alone", "secure FTL", "encoder transfer", "all labelled")
    }
    folder = Path(tempfile.mkdtemp())
    for count in LABELS:
        p = make_transfer_pair(target_labels=count, random_state=0)
        source, target = features(p)
        y_test = p.target_truth[test]
        labelled = target.loc[p.target_labels.index]
        alone = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        alone.fit(labelled, p.target_labels)
        results["centre alone"].append(
            roc_auc_score(y_test, alone.predict_proba(target.loc[test])[:, 1])
        )
        model = ftl(p, p.overlap, protocol="plain")
        results["secure FTL"].append(
            roc_auc_score(y_test, model.decision_function(target.loc[test]))
        )
        artifact = pretrain_encoder(
            {"hospital": (source, p.source_labels)},
            columns=p.shared_columns,
            max_iter=10,
            random_state=0,
        )
        shipped = EncoderArtifact.load(artifact.save(folder / f"encoder_{count}.npz"))
        head = EncoderTransferClassifier(shipped).fit(labelled, p.target_labels)
        results["encoder transfer"].append(
            roc_auc_score(y_test, head.decision_function(target.loc[test]))
        )
        upper = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        upper.fit(target_all.loc[train_rows], full.target_truth[train_rows])
        results["all labelled"].append(
            roc_auc_score(y_test, upper.predict_proba(target.loc[test])[:, 1])
        )
    table = pd.DataFrame(results, index=pd.Index(LABELS, name="centre labels")).T
    print(table.round(3).to_string())

    by_overlap: dict[str, list[float]] = {"secure FTL": [], "centre alone": []}
    for size in OVERLAPS:
        p = make_transfer_pair(n_overlap=size, target_labels=50, random_state=0)
        _, target = features(p)
        held = p.target_truth.index.difference(p.target_labels.index)
        model = ftl(p, p.overlap, protocol="plain")
        by_overlap["secure FTL"].append(
            roc_auc_score(p.target_truth[held], model.decision_function(target.loc[held]))
        )
        alone = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        alone.fit(target.loc[p.target_labels.index], p.target_labels)
        by_overlap["centre alone"].append(
            roc_auc_score(p.target_truth[held], alone.predict_proba(target.loc[held])[:, 1])
        )
    print("\nat 50 centre labels, by the patients in both (each size its own simulated data):")
    print(pd.DataFrame(by_overlap, index=pd.Index(OVERLAPS, name="overlap")).T.round(3).to_string())

    print("\n== 4. What the centre learns about the shared patients")
    found_attack = overlap_label_attack(plain, features(pair)[1], overlap, pair.source_labels)
    model = ftl(pair, overlap, protocol="plain")
    model_auc = overlap_label_attack(model, features(pair)[1], overlap, pair.source_labels)
    print(
        f"the first iteration's gradients separate the shared patients' outcomes at AUC "
        f"{found_attack['gradient attack AUC']:.3f}; the centre's fitted model scores them at "
        f"{model_auc['model AUC on the overlap']:.3f}:\nthe gradients say about as much as the "
        "transferred model does (the price of transfer through the overlap)"
    )

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, values in results.items():
        left.plot(LABELS, values, marker="o", label=name)
    left.set_xscale("log")
    left.set_xticks(LABELS, [str(v) for v in LABELS])
    left.minorticks_off()
    left.set_xlabel("centre labels")
    left.set_ylabel("test AUC")
    left.set_title("AUC by the centre's labels (200 shared patients)")
    left.legend()
    for name, values in by_overlap.items():
        right.plot(OVERLAPS, values, marker="o", label=name)
    right.set_xscale("log")
    right.set_xticks(OVERLAPS, [str(v) for v in OVERLAPS])
    right.minorticks_off()
    right.set_xlabel("patients in both")
    right.set_title("AUC by the overlap (50 centre labels)")
    right.legend()
    fig.tight_layout()
    path = out / "transfer_rare_disease.png"
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")


if __name__ == "__main__":
    main()
