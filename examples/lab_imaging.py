"""The lab network and the imaging centre: private linkage, then encrypted training.

1. one synthetic population (:func:`vfl.datasets.make_population`), from which the lab
   network's table and the imaging centre's table (with the diagnosis) are cut: partly the
   same patients, identities with typos; a quarter of the patients is held out for testing;
2. private record linkage: both encode identities into Bloom filters with a secret they
   share; a linkage unit (here: this process) matches the encodings without the secret;
3. each side keeps its own linked rows, in the common order;
4. vertical logistic regression by the secret-shared protocol (the imaging centre holds the
   labels; weights and gradients exist only as additive shares, Paillier for the cross
   products, each party with its own key);
5. a table of test AUC on the held-out patients (federated, imaging alone, centralised
   plaintext), linkage quality, bytes each party sent, time per stage; plots of the training
   curve and the linkage scores in the output folder.

The population, the vertical cut and the training settings are those of the comparison of
every partition scheme (``examples/partition_schemes.py``, :mod:`vfl.app.compare`), so for the same
``--seed`` (and ``--quick``) the figures here are its rows "vertical LR, secret-shared",
"imaging centre alone" and "centralised LR".

Run::

    python examples/lab_imaging.py [OUTPUT_FOLDER] [--seed N] [--quick]   # default: vflink-demo

``--quick`` uses 1,600 patients and 1024-bit demo keys; the default 4,000 patients and
2048-bit keys (about 30 s on two cores).
"""

from __future__ import annotations

import argparse
import secrets
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import linkage
from vfl.comparison import FULL, QUICK
from vfl.crypto import SecurityWarning
from vfl.datasets import IMAGING_FEATURES, LAB_FEATURES, LABEL, identity_schema, make_population
from vfl.linear import VerticalLogisticRegression


def plain_auc(train_x, train_y, test_x, test_y) -> float:  # type: ignore[no-untyped-def]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(train_x, train_y)
    return float(roc_auc_score(test_y, model.predict_proba(test_x)[:, 1]))


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="vflink-demo", help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="population and model seed (0)")
    parser.add_argument("--quick", action="store_true", help="1,600 patients, demo keys")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}

    # 1. one population; the lab and the imaging centre hold parts of its training patients
    population = make_population(settings.n_patients, random_state=args.seed)
    lab, imaging, truth = population.vertical(overlap=0.6, typo_rate=0.2)
    print(f"{population}\ncut: lab {len(lab):,} rows, imaging {len(imaging):,} rows")

    # 2. linkage: the data holders share `secret`; the linkage unit never sees it
    started = time.perf_counter()
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
    # each only its own row ids)
    parts = {
        "imaging": imaging.loc[links["b"], IMAGING_FEATURES].reset_index(drop=True),
        "lab": lab.loc[links["a"], LAB_FEATURES].reset_index(drop=True),
    }
    labels = imaging.loc[links["b"], LABEL].reset_index(drop=True).astype(int)
    x_test, y_test = population.test_set()
    test_parts = {
        "imaging": x_test[IMAGING_FEATURES].reset_index(drop=True),
        "lab": x_test[LAB_FEATURES].reset_index(drop=True),
    }

    # 4. encrypted training (the secret-shared protocol: weights and gradients exist only as
    #    additive shares, so neither party sees a gradient)
    model = VerticalLogisticRegression(
        key_bits=settings.key_bits,
        insecure=settings.insecure,
        max_iter=settings.vertical_epochs,
        batch_size=settings.vertical_batch,
        tol=None,
        random_state=args.seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # --quick: 1024-bit demo keys
        started = time.perf_counter()
        model.fit(parts, labels, label_party="imaging")
        times["training"] = time.perf_counter() - started
        started = time.perf_counter()
        federated = float(roc_auc_score(y_test, model.predict_proba(test_parts)[:, 1]))
        times["scoring"] = time.perf_counter() - started

    fig, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(range(1, len(model.loss_curve_) + 1), model.loss_curve_, marker="o")
    axis.set_xlabel("epoch")
    axis.set_ylabel("training loss (Taylor, secure)")
    fig.tight_layout()
    fig.savefig(out / "training_curve.png", dpi=120)
    plt.close(fig)

    pooled_x, pooled_y = population.pooled()
    figures = {
        "federated (encrypted, both parties)": federated,
        "imaging alone": plain_auc(
            imaging[IMAGING_FEATURES], imaging[LABEL], x_test[IMAGING_FEATURES], y_test
        ),
        "centralised plaintext LR": plain_auc(pooled_x, pooled_y, x_test, y_test),
    }
    print(
        f"\nlinked {len(links):,} pairs (threshold {links.attrs['threshold']:.3f}): precision "
        f"{quality['precision']:.3f}, recall {quality['recall']:.3f}"
    )
    print(f"training: {model.n_iter_} epochs, {len(labels)} rows, {settings.key_bits}-bit keys\n")
    print(f"{'model':<38}{'test AUC':>9}   ({len(y_test)} held-out patients)")
    for name, auc in figures.items():
        print(f"{name:<38}{auc:>9.3f}")
    transcript = model.transcript_
    print("\nbytes sent during training:")
    for party in ("imaging", "lab"):
        print(f"  {party:<12}{transcript.total_bytes(sender=party) / 1e6:8.2f} MB")
    print("\ntime per stage:")
    for stage, seconds in times.items():
        print(f"  {stage:<12}{seconds:8.1f} s")
    print(f"\nplots in {out}/: linkage_scores.png, training_curve.png")
    return figures


if __name__ == "__main__":
    main()
