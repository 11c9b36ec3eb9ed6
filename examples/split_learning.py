"""Split learning on the lab + imaging cohort: an outcome no linear model fits, learnt by a
split neural network without either party showing the other its rows; what it leaks, and what
each defence buys.

1. the synthetic cohort (:func:`vfl.datasets.make_lab_imaging_cohort`): a lab network's table
   and an imaging centre's table, partly the same patients, aligned by private set
   intersection on ``patient_id`` (:func:`vfl.align`) and checked against the true pairs;
2. a simulated outcome held by the imaging centre (a stand-in for, say, response to a
   treatment; the cohort's own ``diagnosis`` is additive in the log-odds, which vertical
   logistic regression already fits: ``examples/lab_imaging.py``). Its log-odds are
   ``3 * inflammation * burden + 0.4 * burden - 0.3``, where *inflammation* is a lab score
   (the mean z-score of log CRP, white cells, LDH and minus albumin) and *burden* an imaging
   score (log lesion volume, log SUVmax, log oedema volume). The risk rises with inflammation
   where the burden is high and falls with it where the burden is low (an interaction, XOR-like):
   no model linear in the features fits it, and neither party alone can see it;
3. test AUC on held-out rows: the split network (:class:`vfl.SplitNNClassifier`; the lab's
   bottom network on its columns, the imaging centre's bottom and top), vertical logistic
   regression (:class:`vfl.linear.VerticalLogisticRegression`, the secret-shared protocol),
   each party alone (a scikit-learn MLP on its own columns, as if it held the labels),
   centralised (scikit-learn MLP, and logistic regression, on all columns) and the true
   log-odds (the best any model can do);
4. the privacy audit (:func:`vfl.audit.split.split_privacy_audit`), training the split network
   once per defence (none; norm matching of the returned gradients; label DP by randomised
   response at epsilon 4 and 1; clipping and Gaussian noise on the lab's embeddings at two
   noise multipliers; float16 messages; the protected interactive layer, whose first top layer
   runs on encrypted embeddings, with 1024-bit demo keys) and attacking it: the lab's
   label-leakage attacks on the gradients it receives (norm and direction; attacker AUC, 0.5
   is chance), the imaging centre's inversion of the lab's embeddings (with the protected
   layer, of the layer's output it sees instead; error over the features' variance, 1.0 is no
   better than the mean), epsilon, seconds and megabytes;
5. plots: the training curves (the split network's validation loss per epoch, vertical LR's
   training loss), and privacy against utility (test AUC against each attack, per defence).
6. the same network on the population every scheme of the comparison shares
   (``examples/partition_schemes.py``, :mod:`vfl.app.compare`): the cohort's own diagnosis, which is
   additive in the log-odds, on the rows Bloom-filter linkage finds, scored on the held-out
   patients. There the split network does no better than vertical logistic regression (the
   comparison's table puts them side by side); its AUC here is the comparison's "split NN, no
   defence" row for the same ``--seed`` (``--quick``: the comparison's quick settings).

Every party runs in this process. The cohort, the split and the split network's batches and
initialisation are seeded; label DP, embedding noise and norm matching draw from the OS's
randomness (by design), so their rows vary a little from run to run.

Run::

    python examples/split_learning.py [--out vflink-demo] [--seed 0] [--quick]

The plots (``split_training_curves.png``, ``split_privacy_utility.png``) go to ``--out``
(default ``vflink-demo``, which git ignores); their paths are printed. About a minute and a
half on two cores (the protected layer's row is half of it).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import MaxNLocator
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vfl import SplitNNClassifier, align
from vfl.audit.split import split_privacy_audit
from vfl.comparison import FULL, QUICK, Context
from vfl.comparison.split import SPLIT_OPTIONS as COMPARISON_OPTIONS
from vfl.comparison.vertical import linked, linked_test
from vfl.crypto import SecurityWarning
from vfl.datasets import IMAGING_FEATURES, LAB_FEATURES, make_lab_imaging_cohort, make_population
from vfl.linear import VerticalLogisticRegression
from vfl.privacy.options import RandomizedResponse
from vfl.split import EmbeddingNoise, ProtectedLayer

N_PATIENTS, OVERLAP = 4000, 0.75  # 3000 patients in both tables
# The split network: default modules (each bottom Linear(columns, 16) -> ReLU, the top an MLP
# with one hidden layer of 32), Adam at a tenth of the default learning rate (at 0.01 the
# validation loss bottoms out by epoch 4 and wanders), early stopping on 10% of the training
# rows with a patience of 10.
SPLIT_OPTIONS: dict[str, Any] = dict(
    max_iter=60, learning_rate=0.001, n_iter_no_change=10, random_state=0
)
# The audit: each defence's extra parameters of the same network.
DEFENCES: dict[str, dict[str, Any]] = {
    "none": {},
    "norm matching": {"gradient_protection": "norm"},
    "label DP, eps 4": {"privacy": RandomizedResponse(4.0)},
    "label DP, eps 1": {"privacy": RandomizedResponse(1.0)},
    # clip each embedding (16 numbers) to norm 1, add N(0, (2 z)^2) to each number: z=0.5
    # keeps most of the AUC at a large epsilon, z=1 costs nearly all of it
    "embedding noise z=0.5": {"privacy": EmbeddingNoise(noise_multiplier=0.5, clip=1.0)},
    "embedding noise z=1": {"privacy": EmbeddingNoise(noise_multiplier=1.0, clip=1.0)},
    "float16": {"compression": "float16"},
    # the top's first layer on encrypted embeddings: the imaging centre sees z = h W, never h.
    # Demo speed: 1024-bit keys (2048 by default) and 3 epochs at a learning rate of 0.01
    # (benchmarks/split.py prints the cost with 2048-bit keys)
    "protected layer (3 epochs)": {
        "protocol": ProtectedLayer(key_bits=1024, insecure=True),
        "max_iter": 3,
        "learning_rate": 0.01,
    },
}


def auc(y: Any, scores: Any) -> float:
    return float(roc_auc_score(y, scores))


# -- 1-2. the cohort and the outcome ------------------------------------------------------------


def cohort() -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, pd.Series]:
    """The aligned lab and imaging features, the simulated outcome and its true log-odds."""
    lab, imaging, truth = make_lab_imaging_cohort(N_PATIENTS, overlap=OVERLAP, random_state=7)
    # each party keeps its record_id as a column; PSI on patient_id finds the common patients
    aligned = align(
        {"lab": lab.reset_index(), "imaging": imaging.reset_index()},
        method="psi",
        id_column="patient_id",
    )
    found = set(zip(aligned["lab"]["record_id"], aligned["imaging"]["record_id"], strict=True))
    expected = set(zip(truth["lab"], truth["imaging"], strict=True))
    print(
        f"cohort: lab {len(lab):,} rows, imaging {len(imaging):,} rows; PSI on patient_id: "
        f"{len(found):,} common patients ({len(found & expected):,} of the {len(expected):,} "
        f"true pairs, {len(found - expected)} wrong)"
    )
    x_lab = aligned["lab"][LAB_FEATURES].reset_index(drop=True)
    x_img = aligned["imaging"][IMAGING_FEATURES].reset_index(drop=True)

    # the simulation, outside both parties: the outcome is the imaging centre's
    def z(values: pd.Series) -> pd.Series:
        return (values - values.mean()) / values.std()

    inflammation = z(
        z(np.log(x_lab["crp_mg_l"]))
        + z(x_lab["wbc_10e9_l"])
        + z(x_lab["ldh_u_l"])
        - z(x_lab["albumin_g_l"])
    )
    burden = z(
        z(np.log(x_img["lesion_volume_cm3"]))
        + z(np.log(x_img["suv_max"]))
        + z(np.log(x_img["edema_volume_cm3"]))
    )
    log_odds = 3.0 * inflammation * burden + 0.4 * burden - 0.3
    rng = np.random.default_rng(1)
    y = pd.Series((rng.random(len(log_odds)) < 1 / (1 + np.exp(-log_odds))).astype(int))
    print(
        f"outcome: prevalence {y.mean():.1%}; log-odds 3 * inflammation (lab) * burden "
        "(imaging) + 0.4 * burden - 0.3"
    )
    return x_lab, x_img, y, log_odds


# -- 3. the models ------------------------------------------------------------------------------


def mlp() -> Any:
    """The plaintext baselines' network: about the split network's size."""
    return make_pipeline(
        StandardScaler(),
        MLPClassifier(
            hidden_layer_sizes=(32, 32), max_iter=500, early_stopping=True, random_state=0
        ),
    )


def compare(
    x_lab: pd.DataFrame, x_img: pd.DataFrame, y: pd.Series, log_odds: pd.Series, out: Path
) -> float:
    train, test = train_test_split(np.arange(len(y)), test_size=0.3, random_state=0, stratify=y)
    parts = {"lab": x_lab, "imaging": x_img}
    fit_parts = {p: f.iloc[train] for p, f in parts.items()}
    test_parts = {p: f.iloc[test] for p, f in parts.items()}
    y_train, y_test = y.iloc[train], y.iloc[test]
    results: dict[str, float] = {}
    seconds: dict[str, float] = {}

    began = time.perf_counter()
    split = SplitNNClassifier(**SPLIT_OPTIONS)
    split.fit(fit_parts, y_train, label_party="imaging")
    seconds["split NN"] = time.perf_counter() - began
    results["split NN (SplitNNClassifier)"] = auc(y_test, split.predict_proba(test_parts)[:, 1])

    began = time.perf_counter()
    # 1024-bit keys with insecure=True keep the demo quick (the default is 2048 bits); they
    # protect nothing, so the SecurityWarning that says so is silenced here, for fitting
    # and for scoring (which exchanges keys too)
    linear = VerticalLogisticRegression(key_bits=1024, insecure=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        linear.fit(fit_parts, y_train, label_party="imaging")
        scores = linear.predict_proba(test_parts)[:, 1]
    seconds["vertical LR"] = time.perf_counter() - began
    results["vertical LR (secret-shared, 1024-bit)"] = auc(y_test, scores)

    for name, frame in [("lab", x_lab), ("imaging", x_img)]:
        model = mlp().fit(frame.iloc[train], y_train)
        results[f"{name} alone (MLP)"] = auc(y_test, model.predict_proba(frame.iloc[test])[:, 1])
    both = pd.concat([x_lab, x_img], axis=1)
    central = mlp().fit(both.iloc[train], y_train)
    results["centralised MLP"] = auc(y_test, central.predict_proba(both.iloc[test])[:, 1])
    central_lr = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    central_lr.fit(both.iloc[train], y_train)
    results["centralised LR"] = auc(y_test, central_lr.predict_proba(both.iloc[test])[:, 1])
    results["true log-odds (the ceiling)"] = auc(y_test, log_odds.iloc[test])

    print(
        f"\n{len(train)} training rows, {len(test)} test rows; the split network stopped after "
        f"{split.n_iter_} epochs (kept epoch {split.best_epoch_}) in {seconds['split NN']:.1f} s,"
        f"\nvertical LR after {linear.n_iter_} epochs in {seconds['vertical LR']:.1f} s\n"
    )
    print(f"{'model':<40}{'test AUC':>9}")
    for name, value in results.items():
        print(f"{name:<40}{value:>9.3f}")
    mb = sum(r.nbytes for r in split.transcript_.records) / 1e6
    print(
        f"\nthe split network's fit sent {mb:.2f} MB "
        f"({split.transcript_.total_bytes(sender='lab') / 1e6:.2f} MB of embeddings from the "
        f"lab, the rest gradients and control from the imaging centre)"
    )

    fig, ax = plt.subplots(figsize=(6, 4))
    epochs = np.arange(1, len(split.loss_curve_) + 1)
    ax.plot(epochs, split.loss_curve_, marker="o", markersize=3, label="split NN (validation)")
    ax.axvline(split.best_epoch_, color="grey", linestyle=":", label="split NN: kept epoch")
    ax.plot(
        np.arange(1, len(linear.loss_curve_) + 1),
        linear.loss_curve_,
        marker="s",
        markersize=3,
        label="vertical LR (training)",
    )
    ax.axhline(np.log(2), color="black", linestyle="--", linewidth=0.8, label="ln 2")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("cross-entropy")
    ax.set_title("Training curves: the interaction outcome")
    ax.legend(loc="center right")
    fig.tight_layout()
    path = out / "split_training_curves.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\ntraining curves: {path}")
    return results["split NN (SplitNNClassifier)"]


# -- 4. the privacy audit -------------------------------------------------------------------


def audit(x_lab: pd.DataFrame, x_img: pd.DataFrame, y: pd.Series, out: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # the protected row's demo keys
        table = split_privacy_audit(
            {"lab": x_lab, "imaging": x_img},
            y,
            label_party="imaging",
            defences=DEFENCES,
            **SPLIT_OPTIONS,
        )
    print(
        "The split network trained once per defence (its own 70/30 split of the rows); the lab "
        "attacks the gradients\nit received in the first epoch (attacker AUC, 0.5 is chance), "
        "the imaging centre inverts the lab's embeddings\nwith 20% of the rows' lab features "
        "known (error / variance, 1.0 is no better than the mean). Embedding noise:\nclip 1, "
        "noise multiplier z; epsilon at delta 1e-5 over the epochs trained (a row's embedding "
        "is released once an epoch).\n"
    )
    shown = table.copy()
    shown["epsilon"] = shown["epsilon"].map(lambda e: "-" if pd.isna(e) else f"{e:.1f}")
    with pd.option_context("display.width", 160, "display.float_format", "{:.3f}".format):
        print(shown.to_string())

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for k, (name, row) in enumerate(table.iterrows()):
        # each defence its colour; the earlier ones larger, so that coinciding points show
        style = dict(color=f"C{k}", s=110 - 12 * k)
        axes[0].scatter(
            row["direction attack AUC"], row["test AUC"], marker="o", label=name, **style
        )
        axes[0].scatter(row["norm attack AUC"], row["test AUC"], marker="x", **style)
        axes[1].scatter(row["inversion error"], row["test AUC"], marker="o", **style)
    axes[0].axvline(0.5, color="grey", linestyle=":", linewidth=0.8)
    axes[0].set_xlabel("the lab's attack AUC on the labels (o: direction, x: norm; 0.5: chance)")
    axes[0].set_ylabel("test AUC")
    axes[0].set_title("Labels (the imaging centre's)")
    axes[0].legend(loc="lower left", fontsize=8)
    axes[1].axvline(1.0, color="grey", linestyle=":", linewidth=0.8)
    axes[1].set_xlabel("inversion error of the lab's features (1: no better than the mean)")
    axes[1].set_title("Features (the lab's)")
    fig.suptitle("Split learning: privacy against utility, per defence")
    fig.tight_layout()
    path = out / "split_privacy_utility.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nprivacy-utility plot: {path}")


def shared_population(seed: int, quick: bool, context: Context | None = None) -> dict[str, float]:
    """6. The split network on the comparison's population: its diagnosis, its linked rows.

    ``context`` (a comparison's ``Comparison.context``) reuses that run's linkage, so that the
    figures are the comparison's rows themselves; without it the population is linked afresh
    (a new shared secret: a few rows more or fewer link, and the AUC moves by about 0.01)."""
    settings = QUICK if quick else FULL
    ctx = context or Context(
        make_population(settings.n_patients, random_state=seed), settings, seed
    )
    cut = linked(ctx)  # Bloom-filter linkage of the vertical cut, as examples/lab_imaging.py
    x_test, y_test = linked_test(ctx)
    results = {}
    for name, extra in (
        ("split NN, no defence", {}),
        ("split NN, label DP (eps 2)", {"privacy": RandomizedResponse(2.0)}),
    ):
        model = SplitNNClassifier(
            **COMPARISON_OPTIONS, **extra, max_iter=settings.split_epochs, random_state=seed
        )
        model.fit(cut.parts, cut.labels, label_party="imaging")
        results[name] = auc(y_test, model.predict_proba(x_test)[:, 1])
    # the linear model on the same rows, pooled: what vertical LR reaches without sharing them
    both = pd.concat(cut.parts.values(), axis=1)
    central = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(
        both, cut.labels
    )
    results["centralised LR (the linked rows, pooled)"] = auc(
        y_test, central.predict_proba(pd.concat(x_test.values(), axis=1))[:, 1]
    )
    print(
        f"{ctx.population}; {len(cut.labels)} linked rows, {settings.split_epochs} epochs at most\n"
    )
    print(f"{'model':<40}{'test AUC':>9}")
    for name, value in results.items():
        print(f"{name:<40}{value:>9.3f}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("vflink-demo"), help="plot folder")
    parser.add_argument("--seed", type=int, default=0, help="section 6's population seed (0)")
    parser.add_argument(
        "--quick", action="store_true", help="section 6 on the comparison's quick settings"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # Every simulated party is a thread of this process training a small network: torch's
    # intra-op threads gain nothing there and, on a small machine, only contend.
    torch.set_num_threads(1)
    times = {}

    print("== 1-2. The cohort, aligned, and an outcome that needs both parties' features")
    began = time.perf_counter()
    x_lab, x_img, y, log_odds = cohort()
    times["data"] = time.perf_counter() - began

    print("\n== 3. Split network, vertical LR, each party alone, centralised")
    began = time.perf_counter()
    compare(x_lab, x_img, y, log_odds, args.out)
    times["models"] = time.perf_counter() - began

    print("\n== 4. What leaks, with and without each defence")
    began = time.perf_counter()
    audit(x_lab, x_img, y, args.out)
    times["audit"] = time.perf_counter() - began

    print("\n== 6. The population every scheme of the comparison shares (its diagnosis)")
    began = time.perf_counter()
    shared_population(args.seed, args.quick)
    times["shared population"] = time.perf_counter() - began

    print("\ntime per stage: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))


if __name__ == "__main__":
    main()
