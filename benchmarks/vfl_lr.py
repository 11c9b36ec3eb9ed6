"""Vertical linear models: seconds per epoch of vflink against python-paillier.

The baseline is the same coordinator protocol written straightforwardly with phe (in this
script): the passive party encrypts its partial scores one ``EncryptedNumber`` at a time, the
active party adds its own and the labels, each party forms ``X^T [[d]]`` with phe's scalar
multiplications and additions, masks each value and the coordinator decrypts them one by one.
Same 2048-bit key size, data, batches. Where a phe epoch would take minutes, it is timed on its
first batches and scaled to the epoch (said so in the output).

Prints per-epoch seconds (vflink's gradient-revealing coordinator protocol with its default
workers -- all cores for batches of 512 rows or more -- and with one process; vflink's
secret-shared protocol, the default, in which nobody sees a gradient, with its default
workers -- all cores; phe), the setups, the ratios (at batch 64 the shared protocol's over the
coordinator's beside its goal, 3x), and the test AUC of vflink's defaults against
scikit-learn. Also multiclass
(one-vs-rest, K=3: the encrypted rows are set up once for all K models; phe's one-vs-rest
is K binary protocols, so its epoch is K times the per-row cost measured for the binary
case) and linear regression (the same exchange with the squared loss; phe's baseline is the
binary protocol's per-row cost, the same work).

With ``--fate`` (and FATE's example data in ``../shared/data/fate``), it prints, for every
FATE vertical table there (breast, default_credit, student, vehicle_scale) and a synthetic
heavy-tailed credit table (values up to hundreds of deviations out, as FATE's give_credit),
the default model's test AUC (classification; one-vs-rest macro AUC for vehicle's 4
classes) or R² (student) against scikit-learn's default on the joined, standardised table
(``LogisticRegression()``, C=1; ``LinearRegression()``), for model seeds 0-4 on one 70/30
split, with the epochs each fit took and the restarts the divergence rule made. Then it runs
default_credit end to end for each protocol: PSI alignment of the two tables on their IDs,
setup, seconds per epoch, epochs to convergence with the defaults, and test AUC.

Run::

    python benchmarks/vfl_lr.py [--quick] [--fate [--key-bits 1024] [--seeds 5]]
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
import warnings
from pathlib import Path

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import phe  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from vfl.linear import VerticalLinearRegression, VerticalLogisticRegression  # noqa: E402
from vfl.synthetic import make_heavy_tailed_credit  # noqa: E402


def phe_epoch_seconds(
    x_active: np.ndarray, x_passive: np.ndarray, y: np.ndarray, batch: int, max_batches: int
) -> tuple[float, int]:
    """Seconds of one epoch of the protocol with phe objects (scaled from the batches run)."""
    public, private = phe.generate_paillier_keypair(n_length=2048)
    w_a, w_p = np.zeros(x_active.shape[1]), np.zeros(x_passive.shape[1])
    y2 = 2 * y - 1
    n_batches = -(-len(y) // batch)
    run = min(n_batches, max_batches)
    started = time.perf_counter()
    for b in range(run):
        rows = slice(b * batch, (b + 1) * batch)
        u_p = x_passive[rows] @ w_p
        enc_u = [public.encrypt(float(v)) for v in u_p]  # passive
        u_a = x_active[rows] @ w_a
        enc_d = [e + float(a - 2 * t) for e, a, t in zip(enc_u, u_a, y2[rows], strict=True)]
        for x in (x_active[rows], x_passive[rows]):  # each party's encrypted gradient
            grad = []
            for j in range(x.shape[1]):
                acc = enc_d[0] * float(x[0, j])
                for i in range(1, len(enc_d)):
                    acc = acc + enc_d[i] * float(x[i, j])
                grad.append(acc)
            masks = [secrets.randbelow(2**60) for _ in grad]
            masked = [g + m for g, m in zip(grad, masks, strict=True)]
            plain = [private.decrypt(g) for g in masked]  # coordinator
            _ = [p - m for p, m in zip(plain, masks, strict=True)]
    return (time.perf_counter() - started) * n_batches / run, run


def vflink_epoch_seconds(
    parts: dict[str, pd.DataFrame],
    y: pd.Series,
    batch: int,
    workers: int | None,
    model: type = VerticalLogisticRegression,
    protocol: str = "coordinator",
) -> tuple[float, float]:
    """Steady-state seconds per epoch (mean of epochs 2-3) and the fit's one-off setup (key
    exchange and the encryption of every party's feature rows; for the shared protocol also
    sharing every batch's Gram matrix and encrypting its columns)."""
    est = model(
        max_iter=3, tol=None, batch_size=batch, workers=workers, random_state=0, protocol=protocol
    )
    est.fit(parts, y, label_party="active")
    # the first epoch also builds the fixed-base table of the re-randomising obfuscators
    return float(np.mean(est.epoch_seconds_[1:])), float(est.setup_seconds_)


def main() -> None:
    os.environ.setdefault("VFLINK_PROGRESS", "0")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="breast cancer only")
    parser.add_argument(
        "--fate", action="store_true", help="every FATE vertical table with the defaults"
    )
    parser.add_argument(
        "--key-bits", type=int, default=2048, help="--fate: key size (below 2048: insecure)"
    )
    parser.add_argument("--seeds", type=int, default=5, help="--fate: model seeds 0..N-1")
    parser.add_argument(
        "--no-end-to-end", action="store_true", help="--fate: skip the per-protocol run"
    )
    args = parser.parse_args()
    if args.fate:
        fate_defaults(args.key_bits, args.seeds)
        if not args.no_end_to_end:
            fate_end_to_end()
        return
    load = os.getloadavg()
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        "2048-bit keys; seconds per epoch at the label party (all parties' work), steady "
        "state: mean of epochs 2-3. 'setup' is vflink's once-per-fit cost (key generation and "
        "exchange, encrypting every party's packed feature rows); 'fit x30' compares a "
        "30-epoch fit of the shared protocol (the default max_iter) with its setup included; "
        "phe: key generation excluded. 'coord.': the gradient-revealing coordinator protocol "
        "(default workers, then 1 core); 'shared': the secret-shared default (nobody sees a "
        "gradient); 'sh/co': shared seconds per epoch over coordinator's\n"
    )
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    z_tr = pd.DataFrame(scaler.transform(x_tr), columns=x.columns, index=x_tr.index)
    cols = list(x.columns)
    cases: list[tuple[str, pd.DataFrame, pd.DataFrame, pd.Series, int, type, int]] = [
        (
            "breast cancer 10/20",
            z_tr[cols[:10]],
            z_tr[cols[10:]],
            y_tr,
            64,
            VerticalLogisticRegression,
            1,
        )
    ]
    synthetic = None
    if not args.quick:
        rng = np.random.default_rng(0)
        big = rng.normal(size=(30_000, 23))
        logits = big @ rng.normal(size=23) * 0.5
        labels = pd.Series((rng.random(30_000) < 1 / (1 + np.exp(-logits))).astype(int))
        frame = pd.DataFrame(big, columns=[f"f{i}" for i in range(23)])
        synthetic = (frame, labels)
        for batch in (1024, 10_000):
            cases.append(
                (
                    f"synthetic 30000x23 (13/10), batch {batch}",
                    frame.iloc[:, :13],
                    frame.iloc[:, 13:],
                    labels,
                    batch,
                    VerticalLogisticRegression,
                    1,
                )
            )
        three = pd.Series(np.digitize(logits, np.quantile(logits, [1 / 3, 2 / 3])))
        cases.append(
            (
                "  multiclass K=3, batch 1024",
                frame.iloc[:, :13],
                frame.iloc[:, 13:],
                three,
                1024,
                VerticalLogisticRegression,
                3,
            )
        )
        target = pd.Series(logits + rng.normal(size=30_000))
        cases.append(
            (
                "  linear regression, batch 1024",
                frame.iloc[:, :13],
                frame.iloc[:, 13:],
                target,
                1024,
                VerticalLinearRegression,
                1,
            )
        )
    print(
        f"{'case':<42}{'coord.':>8}{'1 core':>8}{'setup':>7}{'shared':>8}{'setup':>7}{'phe':>9}"
        f"{'coord.':>8}{'1 core':>7}{'shared':>8}{'sh/co':>7}{'fit x30':>8}"
    )
    print(
        f"{'':<42}{'s/epoch':>8}{'':>8}{'':>7}{'s/epoch':>8}{'':>7}{'':>9}{'phe/x':>8}{'':>7}"
        f"{'phe/x':>8}"
    )
    phe_per_row = 0.0
    for name, active, passive, labels, batch, model, k in cases:
        parts = {"active": active, "passive": passive}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours, setup = vflink_epoch_seconds(parts, labels, batch, None, model)
            ours_one, _ = vflink_epoch_seconds(parts, labels, batch, 1, model)
            shared, shared_setup = vflink_epoch_seconds(parts, labels, batch, None, model, "shared")
        if (batch >= 10_000 or k > 1 or model is VerticalLinearRegression) and phe_per_row:
            # phe's work is per row and model (an encryption, 23 multiplications and
            # additions); one 10000-row batch would take minutes, so reuse the per-row cost
            # just measured (times K for K one-vs-rest models)
            theirs = k * phe_per_row * len(labels)
            scaled = f" (phe: {k} x the per-row cost of the batch-1024 run)"
        else:
            theirs, ran = phe_epoch_seconds(
                active.to_numpy(),
                passive.to_numpy(),
                labels.to_numpy(),
                batch,
                2 if batch > 64 else 99,
            )
            scaled = "" if ran * batch >= len(labels) else f" (phe: {ran} batches, scaled)"
            phe_per_row = theirs / len(labels)
        fit30 = 30 * theirs / (shared_setup + 30 * shared)
        print(
            f"{name:<42}{ours:>7.2f}s{ours_one:>7.2f}s{setup:>6.1f}s{shared:>7.2f}s"
            f"{shared_setup:>6.1f}s{theirs:>8.1f}s{theirs / ours:>7.1f}x{theirs / ours_one:>6.1f}x"
            f"{theirs / shared:>7.1f}x{shared / ours:>6.1f}x{fit30:>7.1f}x{scaled}"
        )
        if batch == 64:  # the goal's row: nobody sees a gradient, at what cost per epoch
            ratio = shared / ours
            verdict = "met" if ratio <= 3 else "missed"
            print(
                f"{'':<42}shared / coordinator at batch 64: {ratio:.2f}x (goal <= 3x: "
                f"{verdict}; moonshot 2x: {'met' if ratio <= 2 else 'missed'})"
            )
    three_parties(z_tr, y_tr, synthetic)
    reference = LogisticRegression().fit(scaler.transform(x_tr), y_tr)
    auc_sk = roc_auc_score(y_te, reference.predict_proba(scaler.transform(x_te))[:, 1])
    parts = {"imaging": x_tr[cols[:10]], "lab": x_tr[cols[10:]]}
    test = {"imaging": x_te[cols[:10]], "lab": x_te[cols[10:]]}
    print(f"\nbreast cancer test AUC (scikit-learn {auc_sk:.4f}):")
    for protocol in ("shared", "coordinator"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = VerticalLogisticRegression(random_state=0, protocol=protocol)
            est.fit(parts, y_tr, label_party="imaging")
        auc = roc_auc_score(y_te, est.predict_proba(test)[:, 1])
        print(
            f"  vflink defaults, protocol={protocol!r}: {auc:.4f} ({est.n_iter_} epochs), "
            f"gap {auc_sk - auc:+.4f}"
        )


def three_parties(
    breast: pd.DataFrame, y: pd.Series, synthetic: tuple[pd.DataFrame, pd.Series] | None
) -> None:
    """The default protocol with three data parties against two (the same columns, split
    once more) and against the gradient-revealing coordinator protocol with three: seconds
    per epoch (all parties' work on this machine's cores; in a deployment each party runs on
    its own) and setup."""
    tables = [("breast cancer 10/10/10, batch 64", breast, y, 64)]
    if synthetic is not None:
        tables.append(("synthetic 30000x23 (8/8/7), batch 1024", synthetic[0], synthetic[1], 1024))
    load = os.getloadavg()
    print(
        f"\n(load average {load[0]:.2f}) "
        "three data parties under the default protocol ('shared'): the label party and its "
        "partner hold the shares, the third party's Gram share is raised by both\n"
        f"{'case':<42}{'2 shared':>9}{'setup':>7}{'3 shared':>9}{'setup':>7}{'3 coord.':>9}"
        f"{'setup':>7}{'3/2':>6}{'3sh/3co':>8}"
    )
    for name, frame, labels, batch in tables:
        cols = list(frame.columns)
        cut = [0, len(cols) // 3, 2 * len(cols) // 3, len(cols)]
        if len(cols) % 3:
            cut = [0, (len(cols) + 2) // 3, 2 * ((len(cols) + 2) // 3), len(cols)]
        blocks = [frame[cols[cut[i] : cut[i + 1]]] for i in range(3)]
        two = {"active": blocks[0], "passive": pd.concat(blocks[1:], axis=1)}
        three = {"active": blocks[0], "lab": blocks[1], "third": blocks[2]}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s2, setup2 = vflink_epoch_seconds(two, labels, batch, None, protocol="shared")
            s3, setup3 = vflink_epoch_seconds(three, labels, batch, None, protocol="shared")
            c3, setup_c = vflink_epoch_seconds(three, labels, batch, None)
        print(
            f"{name:<42}{s2:>8.2f}s{setup2:>6.1f}s{s3:>8.2f}s{setup3:>6.1f}s{c3:>8.2f}s"
            f"{setup_c:>6.1f}s{s3 / s2:>5.2f}x{s3 / c3:>7.2f}x"
        )


FATE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "fate"


def fate_tables() -> list[tuple[str, dict[str, pd.DataFrame], pd.Series]]:
    """``(name, {"guest": ..., "host": ...}, y)`` for every FATE vertical table found, joined
    on ``id``, and the heavy-tailed credit table cut as give_credit was (x0-x4 / x5-x9)."""
    out = []
    for guest_file in sorted(FATE.glob("*_hetero_guest.csv")):
        name = guest_file.name.removesuffix("_hetero_guest.csv")
        guest = pd.read_csv(guest_file).set_index("id")
        host = pd.read_csv(FATE / f"{name}_hetero_host.csv").set_index("id").loc[guest.index]
        y = guest.pop("y")
        out.append((name, {"guest": guest, "host": host}, y))
    x, y = make_heavy_tailed_credit()
    out.append(("heavy-tailed credit", {"guest": x.iloc[:, :5], "host": x.iloc[:, 5:]}, y))
    return out


def fate_defaults(key_bits: int, seeds: int) -> None:
    """Each table with the defaults (only the label party named) against scikit-learn."""
    from sklearn.linear_model import LinearRegression
    from sklearn.metrics import r2_score

    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f}; {key_bits}-bit keys")
    print(
        "defaults (protocol='shared', only label_party named) against scikit-learn's default "
        "on the joined, standardised table; one 70/30 split (random_state=0), model seeds "
        f"0-{seeds - 1}; AUC (vehicle: one-vs-rest macro) or R2 (student)\n"
    )
    header = f"{'table':<22}{'metric':>7}{'sklearn':>9}{'vflink per seed':>40}{'worst gap':>11}"
    print(f"{header}{'epochs':>16}{'restarts':>10}{'s/fit':>7}")
    for name, features, y in fate_tables():
        regression = name == "student"
        stratify = None if regression else y
        train, test = train_test_split(
            np.arange(len(y)), test_size=0.3, random_state=0, stratify=stratify
        )
        parts = {p: f.iloc[train] for p, f in features.items()}
        test_parts = {p: f.iloc[test] for p, f in features.items()}
        joined = pd.concat([f.add_prefix(f"{p}:") for p, f in features.items()], axis=1)
        scaler = StandardScaler().fit(joined.iloc[train])
        z_train, z_test = scaler.transform(joined.iloc[train]), scaler.transform(joined.iloc[test])
        y_train, y_test = y.iloc[train], y.iloc[test]
        if regression:
            reference = LinearRegression().fit(z_train, y_train)
            baseline = r2_score(y_test, reference.predict(z_test))
        else:
            reference = LogisticRegression().fit(z_train, y_train)
            baseline = _auc(y_test, reference.predict_proba(z_test))
        figures, epochs, restarts, seconds = [], [], [], []
        for seed in range(seeds):
            cls = VerticalLinearRegression if regression else VerticalLogisticRegression
            est = cls(random_state=seed, key_bits=key_bits, insecure=key_bits < 2048)
            began = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(parts, y_train, label_party="guest")
            seconds.append(time.perf_counter() - began)
            if regression:
                figures.append(r2_score(y_test, est.predict(test_parts)))
            else:
                figures.append(_auc(y_test, est.predict_proba(test_parts)))
            epochs.append(est.n_iter_)
            restarts.append(len(est.restarts_))
        gap = baseline - min(figures)
        per_seed = " ".join(f"{f:.4f}" for f in figures)
        metric = "R2" if regression else "AUC"
        print(
            f"{name:<22}{metric:>7}{baseline:>9.4f}{per_seed:>40}{gap:>+11.4f}"
            f"{','.join(map(str, epochs)):>16}{sum(restarts):>10}{np.mean(seconds):>6.0f}s"
        )
    print("\nworst gap: scikit-learn minus vflink's lowest seed (the goal: below 0.01)\n")


def _auc(y: pd.Series, proba: np.ndarray) -> float:
    if proba.shape[1] == 2:
        return float(roc_auc_score(y, proba[:, 1]))
    return float(roc_auc_score(y, proba, multi_class="ovr"))


def fate_end_to_end() -> None:
    """FATE's default_credit, as two institutions would run it: align by PSI on the IDs,
    then train each protocol with its defaults until it stops."""
    from vfl import align

    folder = FATE
    guest_file = folder / "default_credit_hetero_guest.csv"
    if not guest_file.exists():
        print(f"FATE data not found in {folder}")
        return
    guest = pd.read_csv(guest_file)
    host = pd.read_csv(folder / "default_credit_hetero_host.csv").sample(frac=1, random_state=1)
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f}")
    began = time.perf_counter()
    aligned = align({"guest": guest, "host": host}, method="psi", id_column="id")
    seconds_align = time.perf_counter() - began
    rows = len(aligned["guest"])
    print(
        f"PSI alignment of {len(guest)} x {len(host)} IDs: {rows} common in {seconds_align:.1f} s"
    )
    y = aligned["guest"]["y"]
    features = {
        "guest": aligned["guest"].drop(columns=["id", "y"]),
        "host": aligned["host"].drop(columns=["id"]),
    }
    train, test = train_test_split(np.arange(rows), test_size=0.3, random_state=0, stratify=y)
    parts = {p: f.iloc[train] for p, f in features.items()}
    test_parts = {p: f.iloc[test] for p, f in features.items()}
    joined = pd.concat([f.add_prefix(f"{p}:") for p, f in features.items()], axis=1)
    scaler = StandardScaler().fit(joined.iloc[train])
    reference = LogisticRegression(max_iter=2000).fit(
        scaler.transform(joined.iloc[train]), y.iloc[train]
    )
    auc_sk = roc_auc_score(
        y.iloc[test], reference.predict_proba(scaler.transform(joined.iloc[test]))[:, 1]
    )
    print(f"scikit-learn test AUC {auc_sk:.4f}; 2048-bit keys, each protocol's defaults\n")
    header = f"{'protocol':<20}{'setup':>8}{'s/epoch':>9}{'epochs':>8}{'fit':>8}"
    print(f"{header}{'test AUC':>10}{'gap':>8}")
    for protocol in ("shared", "shared_coordinator", "coordinator", "two_party"):
        est = VerticalLogisticRegression(protocol=protocol, random_state=0)
        began = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(parts, y.iloc[train], label_party="guest")
        fit = time.perf_counter() - began
        auc = roc_auc_score(y.iloc[test], est.predict_proba(test_parts)[:, 1])
        print(
            f"{protocol:<20}{est.setup_seconds_:>7.1f}s{np.mean(est.epoch_seconds_):>8.2f}s"
            f"{est.n_iter_:>8}{fit:>7.0f}s{auc:>10.4f}{auc_sk - auc:>+8.4f}"
        )


if __name__ == "__main__":
    main()
