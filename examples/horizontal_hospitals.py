"""Five hospitals, one model: horizontal federated learning on non-IID data, with and without
differential privacy.

1. five simulated hospitals (:func:`vfl.datasets.make_hospital_cohort`) that hold the same
   lab and imaging columns about different patients, deliberately unlike each other: their
   prevalences differ (label skew), their sizes differ (quantity skew) and their assays and
   scanners are calibrated differently (feature shift); a table of sizes, prevalence and the
   label skew (:func:`horizontal.skew_report`). A quarter of each hospital's patients
   (stratified) make up a pooled test set;
2. logistic regression trained by FedAvg, FedProx and Scaffold
   (:class:`horizontal.FederatedClassifier`, ``module="linear"``), by the same model and
   optimiser on the pooled rows (one client: centralised training), by scikit-learn on the
   pooled rows, and by each hospital alone: a table of test AUC, and a convergence plot
   (test AUC after every round, traced with ``fit(..., callback=...)``);
3. client-level differential privacy, central (:class:`horizontal.ClientDP`: the server adds
   the noise) against local (:class:`horizontal.LocalDP`: every client noises its own update)
   at several epsilons: a table and a privacy-utility plot, and the privacy ledger of one run.
4. FedAvg and FedProx on the population every scheme of the comparison shares
   (``examples/partition_schemes.py``, :mod:`vfl.app.compare`): its five hospitals (label and
   quantity skew, no feature shift), scaled with a public reference sample, scored on its
   held-out patients; the AUCs are the comparison's "horizontal FedAvg" and "horizontal
   FedProx" rows for the same ``--seed`` (``--quick``: the comparison's quick settings).

Every simulated party runs in this process. Seeds are fixed, so everything but the DP runs
(whose noise comes from the OS's randomness, by design) prints the same numbers every time.

Run::

    python examples/horizontal_hospitals.py [--out vflink-demo] [--dp-repeats 2] \
        [--seed 0] [--quick]

The plots (``horizontal_convergence.png``, ``horizontal_privacy_utility.png``) go to ``--out``
(default ``vflink-demo``, which git ignores); their paths are printed. About a minute on two
cores.
"""

from __future__ import annotations

import argparse
import time
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
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from horizontal import (
    ClientDP,
    FederatedClassifier,
    FedProx,
    LocalDP,
    Scaffold,
    comparison,
    iid_split,
    skew_report,
)
from vfl.comparison import FULL, QUICK, Context
from vfl.datasets import HOSPITAL_FEATURES, LABEL, make_hospital_cohort, make_population

# The non-IID cohort: Dirichlet concentrations for the prevalences (label skew) and the sizes
# (quantity skew), and per-hospital calibration offsets of half a standard deviation.
LABEL_SKEW, QUANTITY_SKEW, FEATURE_SHIFT = 5.0, 2.0, 0.5
N_PATIENTS = 6000
# The federated model: logistic regression, 20 rounds of 5 local epochs each.
OPTIONS: dict[str, Any] = dict(
    module="linear", max_iter=20, local_epochs=5, batch_size=32, learning_rate=0.05, random_state=0
)
FEDPROX_MU = 0.3
# Differential privacy: each hospital's training rows cut into wards, the wards the clients;
# every ward takes part in every round (client_fraction=1) under both kinds of noise.
WARDS = 20
DP_OPTIONS: dict[str, Any] = dict(
    module="linear",
    max_iter=10,
    local_epochs=2,
    batch_size=32,
    learning_rate=0.2,
    standardize=False,  # DP does not cover pooled statistics: the features are scaled below
    classes=[0, 1],  # ... and the classes are agreed in advance, not collected
    random_state=0,  # the initial model and batch orders; the noise is the OS's
)
CLIP = 0.3  # about the mean norm of a ward's update without DP, after the first round
EPSILONS = [1, 2, 4, 8, 16]
DELTA = 1e-5


def auc(model: Any, x: Any, y: Any) -> float:
    """Test AUC of a fitted classifier (NaN where the rows hold one class only)."""
    if len(np.unique(y)) < 2:
        return float("nan")
    return float(roc_auc_score(y, model.predict_proba(x)[:, 1]))


# -- 1. the hospitals ---------------------------------------------------------------------------


def hospitals() -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    """Each hospital's training and test rows (a stratified quarter held out)."""
    cohort = make_hospital_cohort(
        5,
        N_PATIENTS,
        label_skew=LABEL_SKEW,
        quantity_skew=QUANTITY_SKEW,
        feature_shift=FEATURE_SHIFT,
        random_state=0,
    )
    train, test = {}, {}
    for name, frame in cohort.items():
        train[name], test[name] = train_test_split(
            frame, test_size=0.25, stratify=frame[LABEL], random_state=0
        )

    pooled = pd.concat(cohort.values())
    ends = np.cumsum([len(f) for f in cohort.values()])
    parts = {
        name: np.arange(end - len(frame), end)
        for (name, frame), end in zip(cohort.items(), ends, strict=True)
    }
    report = skew_report(pooled[LABEL].to_numpy(), parts)
    features = pooled[HOSPITAL_FEATURES]
    mean, sd = features.mean(), features.std()
    print(
        f"label_skew={LABEL_SKEW}, quantity_skew={QUANTITY_SKEW}, "
        f"feature_shift={FEATURE_SHIFT} SD, {N_PATIENTS} patients, random_state=0\n"
    )
    print(
        f"{'hospital':<12}{'rows':>6}{'train':>7}{'test':>6}{'cases':>7}{'prevalence':>12}"
        f"{'TV':>7}{'EMD':>7}{'shift':>7}"
    )
    for name, frame in cohort.items():
        # feature shift: mean |standardised difference| of the hospital's feature means
        shift = float(((frame[HOSPITAL_FEATURES].mean() - mean) / sd).abs().mean())
        row = report.loc[name]
        print(
            f"{name:<12}{len(frame):>6}{len(train[name]):>7}{len(test[name]):>6}"
            f"{int(frame[LABEL].sum()):>7}{frame[LABEL].mean():>12.1%}"
            f"{row['total_variation']:>7.3f}{row['earth_movers']:>7.3f}{shift:>7.3f}"
        )
    print(
        f"{'pooled':<12}{len(pooled):>6}{sum(map(len, train.values())):>7}"
        f"{sum(map(len, test.values())):>6}{int(pooled[LABEL].sum()):>7}"
        f"{pooled[LABEL].mean():>12.1%}"
    )
    print(
        "TV, EMD: total variation and earth mover's distance of the hospital's label "
        "distribution from the pooled one\n(equal for 0/1 labels); shift: mean |difference| "
        "of its feature means from the pooled ones, in pooled SDs"
    )
    return train, test


# -- 2. FedAvg, FedProx, Scaffold, centralised, alone -------------------------------------------


def xy(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    return frame[HOSPITAL_FEATURES], frame[LABEL]


def tracer(curve: list[float], x: Any, y: Any) -> Any:
    """A ``fit(callback=...)`` that appends the test AUC of each round's global model."""

    def callback(record: Any, model: Any) -> None:  # model: a fitted snapshot of the round
        curve.append(auc(model, x, y))

    return callback


def compare(
    train: dict[str, pd.DataFrame], test: dict[str, pd.DataFrame], out: Path
) -> dict[str, float]:
    x_test, y_test = xy(pd.concat(test.values()))
    clients = {name: xy(frame) for name, frame in train.items()}
    pooled = xy(pd.concat(train.values()))
    models: dict[str, Any] = {}
    curves: dict[str, list[float]] = {}
    drift: dict[str, float] = {}
    for name, strategy in [
        ("FedAvg", "fedavg"),
        (f"FedProx (mu={FEDPROX_MU})", FedProx(mu=FEDPROX_MU)),
        ("Scaffold", Scaffold()),
    ]:
        curves[name] = []
        models[name] = FederatedClassifier(strategy=strategy, **OPTIONS).fit(
            clients, callback=tracer(curves[name], x_test, y_test)
        )
        drift[name] = float(np.mean([r.drift for r in models[name].rounds_[-5:]]))
    # one client holding every training row: centralised training, same model and optimiser
    models["centralised (same model, SGD)"] = FederatedClassifier(strategy="fedavg", **OPTIONS).fit(
        {"pooled": pooled}
    )
    models["centralised (scikit-learn LR)"] = make_pipeline(
        StandardScaler(), LogisticRegression(max_iter=2000)
    ).fit(*pooled)
    alone = {
        name: FederatedClassifier(strategy="fedavg", **OPTIONS).fit({name: xy_})
        for name, xy_ in clients.items()
    }

    names = list(train)
    at_hospital = {  # AUC at each hospital's own test rows
        model_name: [auc(model, *xy(test[h])) for h in names]
        for model_name, model in models.items()
    }
    at_hospital["alone (its own model)"] = [auc(alone[h], *xy(test[h])) for h in names]

    print(f"\n{'model':<32}{'pooled test AUC':>16}{'mean at hospitals':>19}{'drift':>8}")
    results = {}
    for model_name, model in models.items():
        results[model_name] = auc(model, x_test, y_test)
        d = f"{drift[model_name]:8.3f}" if model_name in drift else ""
        print(
            f"{model_name:<32}{results[model_name]:>16.3f}"
            f"{np.nanmean(at_hospital[model_name]):>19.3f}{d}"
        )
    for h in names:
        print(f"{h + ' alone':<32}{auc(alone[h], x_test, y_test):>16.3f}")
    alone_pooled = np.mean([auc(alone[h], x_test, y_test) for h in names])
    print(
        f"{'hospitals alone (mean)':<32}{alone_pooled:>16.3f}"
        f"{np.nanmean(at_hospital['alone (its own model)']):>19.3f}"
    )
    print(
        "mean at hospitals: the mean over hospitals of the AUC at the hospital's own test rows "
        "(alone: of its own model);\ndrift: mean L2 distance of the clients' models from the "
        "global one, last 5 rounds"
    )

    print(f"\nAUC at each hospital's own test rows ({', '.join(names)}):")
    for model_name, values in at_hospital.items():
        print(f"  {model_name:<32}" + "".join(f"{v:>8.3f}" for v in values))
    print(
        "The pooled AUC also ranks patients of different hospitals against each other (whose "
        "prevalences and calibrations\ndiffer), the AUC at a hospital only its own: with "
        "shifted features the two orders need not agree."
    )

    fig, ax = plt.subplots(figsize=(6, 4))
    rounds = np.arange(1, OPTIONS["max_iter"] + 1)
    for name, curve in curves.items():
        ax.plot(rounds, curve, marker="o", markersize=3, label=name)
    ax.axhline(
        results["centralised (same model, SGD)"], color="black", linestyle="--", label="centralised"
    )
    ax.axhline(alone_pooled, color="grey", linestyle=":", label="hospitals alone (mean)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"round ({OPTIONS['local_epochs']} local epochs each)")
    ax.set_ylabel("pooled test AUC")
    ax.set_title("Five non-IID hospitals: logistic regression")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = out / "horizontal_convergence.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nconvergence plot: {path}")
    return results


# -- 3. differential privacy ------------------------------------------------------------------


def privacy_utility(
    train: dict[str, pd.DataFrame], test: dict[str, pd.DataFrame], out: Path, repeats: int
) -> None:
    # ASSUMPTION: the features are scaled with statistics taken as public -- here the means and
    # SDs of a separate reference sample, standing in for published reference ranges of each
    # assay. Nothing is computed from the hospitals' rows, which DP would not cover.
    reference = make_hospital_cohort(1, 2000, random_state=1)["hospital_1"][HOSPITAL_FEATURES]
    mean, sd = reference.mean(), reference.std()

    def scaled(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
        return (frame[HOSPITAL_FEATURES] - mean) / sd, frame[LABEL]

    x_test, y_test = scaled(pd.concat(test.values()))
    wards = {}
    for name, frame in train.items():
        for k, rows in enumerate(iid_split(len(frame), WARDS, random_state=0)):
            wards[f"{name}/ward_{k + 1}"] = scaled(frame.iloc[rows])
    n = len(wards)
    sizes = [len(x) for x, _ in wards.values()]
    print(
        f"\nWith 5 clients, client-level DP has too few clients to hide one among: each "
        f"hospital's training rows are\ncut into {WARDS} wards (random, "
        f"horizontal.iid_split), {n} clients of {min(sizes)} to {max(sizes)} rows, every ward "
        f"in every round.\nFeatures scaled with a public reference sample's means and SDs "
        f"(assumed public); classes=[0, 1] agreed.\n{DP_OPTIONS['max_iter']} rounds of "
        f"{DP_OPTIONS['local_epochs']} local epochs, clip {CLIP}, delta {DELTA:g}; "
        f"AUC the mean of {repeats} run(s) (DP noise from the OS; the plot's bars: "
        f"min to max)."
    )

    no_dp = auc(FederatedClassifier(**DP_OPTIONS).fit(wards), x_test, y_test)
    results: dict[str, list[list[float]]] = {"central": [], "local": []}
    shown: Any = None
    local_shown: Any = None
    for epsilon in EPSILONS:
        for kind, privacy in (
            ("central", ClientDP(epsilon=epsilon, delta=DELTA, clip=CLIP)),
            ("local", LocalDP(epsilon=epsilon, delta=DELTA, clip=CLIP)),
        ):
            runs = []
            for _ in range(repeats):
                model = FederatedClassifier(privacy=privacy, **DP_OPTIONS).fit(wards)
                runs.append(auc(model, x_test, y_test))
            results[kind].append(runs)
            if epsilon == 4 and kind == "central":
                shown = model
            if epsilon == 4 and kind == "local":
                local_shown = model

    print(
        f"\n{'epsilon':>7}{'z':>8}{'noise SD in the mean':>23}{'AUC':>14}{'AUC lost to DP':>18}"
        f"{'local - central':>17}"
    )
    print(
        f"{'':>7}{'':>8}{'central':>12}{'local':>11}{'central':>9}{'local':>7}"
        f"{'central':>11}{'local':>7}{'(AUC lost)':>15}"
    )
    for i, epsilon in enumerate(EPSILONS):
        rounds = DP_OPTIONS["max_iter"]
        z = ClientDP(epsilon=epsilon, delta=DELTA).multiplier(rounds, 1.0)
        assert np.isclose(z, LocalDP(epsilon=epsilon, delta=DELTA).multiplier(rounds))
        central, local = np.mean(results["central"][i]), np.mean(results["local"][i])
        print(
            f"{epsilon:>7g}{z:>8.2f}{z * CLIP / n:>12.4f}{z * CLIP / np.sqrt(n):>11.4f}"
            f"{central:>9.3f}{local:>7.3f}{no_dp - central:>11.3f}{no_dp - local:>7.3f}"
            f"{(no_dp - local) - (no_dp - central):>15.3f}"
        )
    print(f"{'inf':>7}{'':>8}{'':>12}{'':>11}{no_dp:>9.3f}{no_dp:>7.3f}   (no DP, the same wards)")
    print(
        f"z: noise multiplier for epsilon over {DP_OPTIONS['max_iter']} rounds (the same for "
        f"both); noise SD per coordinate of the averaged update:\ncentral z*clip/N (one draw on "
        f"the sum), local z*clip/sqrt(N) (N draws), sqrt({n}) = {np.sqrt(n):.0f} times more"
    )

    fig, ax = plt.subplots(figsize=(6, 4))
    for kind, marker in (("central", "o"), ("local", "s")):
        runs = np.array(results[kind])
        ax.errorbar(
            EPSILONS,
            runs.mean(axis=1),
            yerr=[runs.mean(axis=1) - runs.min(axis=1), runs.max(axis=1) - runs.mean(axis=1)],
            marker=marker,
            capsize=3,
            label=f"{kind} DP ({'ClientDP' if kind == 'central' else 'LocalDP'})",
        )
    ax.axhline(no_dp, color="black", linestyle="--", label="no DP")
    ax.set_xscale("log", base=2)
    ax.set_xticks(EPSILONS, [str(e) for e in EPSILONS])
    ax.set_xlabel(f"epsilon (delta = {DELTA:g}), client level")
    ax.set_ylabel("pooled test AUC")
    ax.set_title(f"Privacy vs utility: {n} wards of 5 hospitals")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = out / "horizontal_privacy_utility.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nprivacy-utility plot: {path}")

    print("\nThe privacy ledger of one run (central DP, epsilon 4):")
    print(shown.privacy_ledger_)
    print(f"epsilon_ = {shown.epsilon_:.4f} at delta {DELTA:g}")
    ledger = local_shown.privacy_ledger_
    print(
        f"(local DP, epsilon 4: {len(ledger)} entries, one account per ward for "
        f"{len(ledger.holders())} wards; largest epsilon_ = {local_shown.epsilon_:.4f})"
    )


def shared_population(seed: int, quick: bool) -> dict[str, float]:
    """4. FedAvg and FedProx on the comparison's population and its five hospitals."""
    settings = QUICK if quick else FULL
    ctx = Context(make_population(settings.n_patients, random_state=seed), settings, seed)
    cut = comparison.hospitals(ctx)  # the hospitals, scaled with a public reference sample
    print(f"{ctx.population}\n{cut.describe()}\n")
    x_test, y_test = ctx.test_set()
    results = {}
    for name, strategy in (("FedAvg", "fedavg"), ("FedProx", FedProx(mu=comparison.FEDPROX_MU))):
        model = FederatedClassifier(
            **comparison.OPTIONS,
            max_iter=settings.rounds,
            strategy=strategy,
            standardize=False,  # scaled already, with the public reference's statistics
            random_state=seed,
        ).fit(cut.scaled)
        results[name] = auc(model, cut.scale(x_test), y_test)
        print(f"{name:<32}{results[name]:>16.3f}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("vflink-demo"), help="plot folder")
    parser.add_argument(
        "--dp-repeats", type=int, default=2, help="DP runs averaged per epsilon and kind"
    )
    parser.add_argument("--seed", type=int, default=0, help="section 4's population seed (0)")
    parser.add_argument(
        "--quick", action="store_true", help="section 4 on the comparison's quick settings"
    )
    args = parser.parse_args()
    if args.dp_repeats < 1:
        parser.error("--dp-repeats must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    # Every simulated party is a thread of this process training a small model: torch's
    # intra-op threads gain nothing there and, on a small machine, only contend.
    torch.set_num_threads(1)
    times = {}

    print("== 1. Five hospitals, not alike")
    began = time.perf_counter()
    train, test = hospitals()
    times["data"] = time.perf_counter() - began

    print("\n== 2. FedAvg, FedProx, Scaffold, centralised, each hospital alone")
    began = time.perf_counter()
    compare(train, test, args.out)
    times["strategies"] = time.perf_counter() - began

    print("\n== 3. Client-level differential privacy: central vs local noise")
    began = time.perf_counter()
    privacy_utility(train, test, args.out, args.dp_repeats)
    times["privacy"] = time.perf_counter() - began

    print("\n== 4. The population every scheme of the comparison shares")
    began = time.perf_counter()
    shared_population(args.seed, args.quick)
    times["shared population"] = time.perf_counter() - began

    print("\ntime per stage: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))


if __name__ == "__main__":
    main()
