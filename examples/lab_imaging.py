"""The lab network and the imaging centre: private linkage, then encrypted training.

1. the synthetic cohort: a lab table and an imaging table (with the diagnosis), partly the same
   patients, identities with typos;
2. private record linkage: both encode identities into Bloom filters with a secret they
   share; a linkage unit (here: the coordinator) matches the encodings without the secret;
3. each side keeps its own linked rows, in the common order, split into train and test;
4. vertical logistic regression by the secret-shared protocol (the imaging centre holds the
   labels; weights and gradients exist only as additive shares, Paillier for the cross
   products, each party with its own key);
5. a table of test AUC (federated, imaging alone, lab alone, centralised plaintext), linkage
   quality, bytes each party sent, time per stage; plots of the training curve and the
   linkage scores in the output folder.

Run::

    python examples/lab_imaging.py [OUTPUT_FOLDER]     # default: vflink-demo
"""

from __future__ import annotations

import secrets
import sys
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

import linkage
from vfl.datasets import (
    IMAGING_FEATURES,
    LAB_FEATURES,
    LABEL,
    identity_schema,
    make_lab_imaging_cohort,
)
from vfl.linear import VerticalLogisticRegression


def plain_auc(train_x, train_y, test_x, test_y) -> float:  # type: ignore[no-untyped-def]
    scaler = StandardScaler().fit(train_x)
    model = LogisticRegression(max_iter=1000).fit(scaler.transform(train_x), train_y)
    return float(roc_auc_score(test_y, model.predict_proba(scaler.transform(test_x))[:, 1]))


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "vflink-demo")
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}

    started = time.perf_counter()
    lab, imaging, truth = make_lab_imaging_cohort(3000, overlap=0.6, random_state=7)
    print(f"cohort: lab {len(lab):,} rows, imaging {len(imaging):,} rows")

    # 2. linkage: the data holders share `secret`; the linkage unit never sees it
    secret = secrets.token_bytes(32)
    schema = identity_schema()
    enc_lab = linkage.encode(lab, schema, secret=secret)
    enc_imaging = linkage.encode(imaging, schema, secret=secret)
    links = linkage.match(enc_lab, enc_imaging)  # run by the linkage unit
    quality = linkage.evaluate(links, truth)
    times["linkage"] = time.perf_counter() - started
    ax = linkage.plot_scores(links)
    ax.figure.tight_layout()
    ax.figure.savefig(out / "linkage_scores.png", dpi=120)
    plt.close(ax.figure)

    # 3. each party keeps its own linked rows in the common order (the linkage unit returns to
    # each only its own row ids); a shared row order splits train and test
    common = np.arange(len(links))
    rng = np.random.default_rng(0)
    rng.shuffle(common)
    cut = int(0.7 * len(common))
    train, test = np.sort(common[:cut]), np.sort(common[cut:])
    lab_rows = lab.loc[links["a"], LAB_FEATURES].reset_index(drop=True)
    img_rows = imaging.loc[links["b"], IMAGING_FEATURES].reset_index(drop=True)
    labels = imaging.loc[links["b"], LABEL].reset_index(drop=True).astype(int)
    parts_train = {"imaging": img_rows.iloc[train], "lab": lab_rows.iloc[train]}
    parts_test = {"imaging": img_rows.iloc[test], "lab": lab_rows.iloc[test]}

    # 4. encrypted training (2048-bit Paillier, the secret-shared protocol: weights and
    #    gradients exist only as additive shares, so neither party sees a gradient)
    started = time.perf_counter()
    model = VerticalLogisticRegression(random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        model.fit(parts_train, labels.iloc[train], label_party="imaging")
    times["training"] = time.perf_counter() - started
    started = time.perf_counter()
    federated = roc_auc_score(labels.iloc[test], model.predict_proba(parts_test)[:, 1])
    times["scoring"] = time.perf_counter() - started

    fig, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(range(1, len(model.loss_curve_) + 1), model.loss_curve_, marker="o")
    axis.set_xlabel("epoch")
    axis.set_ylabel("training loss (Taylor, secure)")
    fig.tight_layout()
    fig.savefig(out / "training_curve.png", dpi=120)
    plt.close(fig)

    y_tr, y_te = labels.iloc[train], labels.iloc[test]
    both_tr = np.column_stack([img_rows.iloc[train], lab_rows.iloc[train]])
    both_te = np.column_stack([img_rows.iloc[test], lab_rows.iloc[test]])
    rows = [
        ("federated (encrypted, both parties)", federated),
        ("imaging alone", plain_auc(img_rows.iloc[train], y_tr, img_rows.iloc[test], y_te)),
        ("lab alone", plain_auc(lab_rows.iloc[train], y_tr, lab_rows.iloc[test], y_te)),
        ("centralised plaintext LR", plain_auc(both_tr, y_tr, both_te, y_te)),
    ]
    print(
        f"\nlinked {len(links):,} pairs (threshold {links.attrs['threshold']:.3f}): precision "
        f"{quality['precision']:.3f}, recall {quality['recall']:.3f}"
    )
    print(f"training: {model.n_iter_} epochs, {len(train)} rows\n")
    print(f"{'model':<38}{'test AUC':>9}")
    for name, auc in rows:
        print(f"{name:<38}{auc:>9.3f}")
    transcript = model.transcript_
    print("\nbytes sent during training:")
    for party in ("imaging", "lab"):
        print(f"  {party:<12}{transcript.total_bytes(sender=party) / 1e6:8.2f} MB")
    print("\ntime per stage:")
    for stage, seconds in times.items():
        print(f"  {stage:<12}{seconds:8.1f} s")
    print(f"\nplots in {out}/: linkage_scores.png, training_curve.png")


if __name__ == "__main__":
    main()
