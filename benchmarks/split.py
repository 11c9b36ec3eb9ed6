"""Split learning: overhead against centralised training, bytes on the wire, defences' cost.

Prints, in one run, after the machine's load:

* seconds per epoch of ``vfl.SplitNNClassifier`` (every party in turn on one thread of this
  process, the embeddings and gradients typed messages through the in-process federation;
  ``tol=None``, a fixed number of epochs, no validation split) against a centralised torch
  loop training the
  same composed network in the same run: the same modules and initialisation
  (``model.build_modules``), the same standardisation, the same batches
  (``vfl.split.protocol.split_rows`` and ``vfl.training.schedule.Schedule``) and Adam (fused,
  as each party's optimiser is). The
  ratio (goal: at most 1.5x), the overhead per batch in milliseconds, and the largest
  difference between the two trainings' final parameters (0 up to float rounding: they are
  the same computation), and the floor: split learning's own computation in one thread with no
  messages (two backward passes, an optimiser per party; the same final parameters), with what
  the messages and the parties' turns add per batch over it. Split learning's seconds are the
  label party's clock of each epoch
  (``epoch_seconds_``: all parties' work and the messages between them), the centralised
  loop's the loop's; median and best epoch of each, epochs 2 onwards, the two runs
  interleaved and repeated (``--repeats``);
* bytes per epoch on the wire (every message of the fit's transcript over the epochs) with
  ``compression=None``, ``"float16"`` and 8 bits, and the test AUC for each, averaged over
  three seeds (breast cancer: ``--epochs`` at batch 64; default_credit: 5 epochs at batch
  256); the AUC cost of float16 (goal: below 0.002) and its byte ratio (goal: half);
* seconds per epoch with each defence: embedding noise (clip 1, noise multiplier 1), norm
  matching of the returned gradients, label DP by randomised response (epsilon 1: a one-off
  cost before training), against none.

On breast cancer (569 x 30; 12 columns at the data party, 18 at the label party) and on FATE's
default_credit (30,000 x 23: the guest holds 13 columns and the labels, the host 10; joined
on ``id``), when ``../shared/data/fate`` holds it (a note says so otherwise). Both are split
70/30 (stratified) into training and test rows; every timing trains on the training rows.

* (d) the protected interactive layer (:mod:`vfl.split.interactive`: the top's first layer
  on Paillier-encrypted embeddings, 2048-bit keys by default, ``--key-bits``): seconds per
  epoch (epochs 2 onwards: the first also makes the keys and the re-randomisation tables, its
  time printed apart), megabytes per epoch and test AUC, against plain split learning of the
  same network in the same run (``--protected-epochs`` at batch 64). On default_credit the
  protected fit trains on the first ``--credit-rows`` training rows and its seconds per epoch
  are extrapolated to all the training rows (the cost is linear in the batches: the line says
  so); FATE reports 347 s per epoch for its 1.x Hetero-NN interactive layer on its benchmark.

Threads: torch's intra-op threads are set to 1 (``--torch-threads``) for both trainings. On
batches of 64 rows they gain nothing, and on a small machine they make the centralised loop
contend with itself: in one run on 2 cores (load average 3), a centralised epoch of
default_credit at batch 64 took 6 s with torch's default 2 threads and 0.4 s with one. With
that baseline the ratio would flatter split learning; one thread each compares the same
computation.

Run::

    python benchmarks/split.py [--epochs 20] [--credit-epochs 3] [--repeats 3]
        [--overhead-only] [--protected-only]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from torch import nn  # noqa: E402

from vfl import SplitNNClassifier  # noqa: E402
from vfl.privacy.options import RandomizedResponse  # noqa: E402
from vfl.split import EmbeddingNoise, ProtectedLayer  # noqa: E402
from vfl.split.protocol import split_rows  # noqa: E402
from vfl.training.schedule import Schedule  # noqa: E402

FATE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "fate"


class Case:
    """A vertically split table: training and test parts, labels, the label party."""

    def __init__(
        self, name: str, parts: dict[str, pd.DataFrame], y: pd.Series, label_party: str
    ) -> None:
        self.name, self.label_party = name, label_party
        train, test = train_test_split(np.arange(len(y)), test_size=0.3, random_state=0, stratify=y)
        self.train = {p: f.iloc[train] for p, f in parts.items()}
        self.test = {p: f.iloc[test] for p, f in parts.items()}
        self.y_train, self.y_test = y.iloc[train], y.iloc[test]

    def fit(
        self, epochs: int, batch: int, seed: int = 0, rows: int | None = None, **extra: Any
    ) -> SplitNNClassifier:
        """Train on the training rows (the first ``rows`` of them when given)."""
        parts = {p: f.iloc[:rows] for p, f in self.train.items()}
        model = SplitNNClassifier(
            max_iter=epochs,
            batch_size=batch,
            tol=None,
            validation_fraction=0.0,
            random_state=seed,
            **extra,
        )
        return model.fit(parts, self.y_train.iloc[:rows], label_party=self.label_party)

    def auc(self, model: Any) -> float:
        return float(roc_auc_score(self.y_test, model.predict_proba(self.test)[:, 1]))


def breast_cancer() -> Case:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    parts = {"lab": x.iloc[:, :12], "imaging": x.iloc[:, 12:]}
    return Case("breast cancer 569 x (12 | 18)", parts, y, "imaging")


def default_credit() -> Case | None:
    guest_file = FATE / "default_credit_hetero_guest.csv"
    if not guest_file.exists():
        return None
    guest = pd.read_csv(guest_file).set_index("id")
    host = pd.read_csv(FATE / "default_credit_hetero_host.csv").set_index("id")
    common = guest.index.intersection(host.index)
    guest, host = guest.loc[common], host.loc[common]
    y = guest.pop("y")
    return Case(f"default_credit {len(y)} x (10 | 13)", {"guest": guest, "host": host}, y, "guest")


# -- (a) overhead against centralised training --------------------------------------------------


def centralised(
    model: SplitNNClassifier, case: Case, epochs: int, *, split: bool = False
) -> tuple[list[float], float]:
    """Train the composed network of ``model`` (fitted) in one place, from the same
    initialisation, on the same batches, with the same Adam: seconds per epoch, and the
    largest difference from the split model's final parameters.

    ``split``: the floor of split learning instead -- its computation in one thread with no
    messages: each sender's bottom forward, the label party's forward and backward from the
    detached embeddings and its own Adam step, then each sender's backward from the
    embeddings' gradients and its own Adam step (two backward passes and one optimiser per
    party, as split learning does them)."""
    order = model.data_parties_
    bottoms, top = model.build_modules(
        {p: case.train[p].shape[1] for p in order}, len(model.classes_)
    )
    x = {
        p: torch.as_tensor(
            model.standardisers_[p].transform(case.train[p].to_numpy(dtype=float)),
            dtype=torch.float32,
        )
        for p in order
    }
    target = torch.as_tensor(np.searchsorted(model.classes_, case.y_train.to_numpy()))
    label = case.label_party
    senders = [p for p in order if p != label] if split else []
    groups = [[top, *(bottoms[p] for p in order if p not in senders)]]
    groups += [[bottoms[p]] for p in senders]
    optimizers = [
        torch.optim.Adam([q for m in g for q in m.parameters()], lr=model.learning_rate, fused=True)
        for g in groups
    ]
    loss_fn = nn.CrossEntropyLoss()
    train, _ = split_rows(len(target), model.spec_)
    schedule = Schedule(len(train), model.batch_size, model.random_state).epochs()
    seconds = []
    for _ in range(epochs):
        began = time.perf_counter()
        for batch in next(schedule):
            rows = train[batch]
            sent = {p: bottoms[p](x[p][rows]) for p in senders}
            leaves = {p: h.detach().requires_grad_() for p, h in sent.items()}
            joined = torch.cat(
                [leaves[p] if p in leaves else bottoms[p](x[p][rows]) for p in order], dim=1
            )
            loss = loss_fn(top(joined), target[rows])
            optimizers[0].zero_grad()
            loss.backward()
            optimizers[0].step()
            for p, opt in zip(senders, optimizers[1:], strict=True):
                opt.zero_grad()
                torch.autograd.backward(sent[p], leaves[p].grad)
                opt.step()
        seconds.append(time.perf_counter() - began)
    pairs = [(model.top_, top)] + [(model.modules_[p], bottoms[p]) for p in order]
    with torch.no_grad():
        gap = max(
            float((a - b).abs().max())
            for split, central in pairs
            for a, b in zip(split.parameters(), central.parameters(), strict=True)
        )
    return seconds, gap


def overhead(case: Case, epochs: int, batch: int, repeats: int) -> None:
    split_s: list[float] = []
    central_s: list[float] = []
    floor_s: list[float] = []
    gap = 0.0
    for _ in range(repeats):  # interleaved, so that a burst of load hits both
        model = case.fit(epochs, batch)
        split_s += model.epoch_seconds_[1:]
        seconds, g = centralised(model, case, epochs)
        central_s += seconds[1:]
        seconds, g_floor = centralised(model, case, epochs, split=True)
        floor_s += seconds[1:]
        gap = max(gap, g, g_floor)
    batches = Schedule(len(case.y_train), batch, 0).batches_per_epoch()
    split_med, central_med = float(np.median(split_s)), float(np.median(central_s))
    floor_med = float(np.median(floor_s))
    split_min, central_min = min(split_s), min(central_s)
    per_batch = (split_med - central_med) / batches * 1e3
    messages = (split_med - floor_med) / batches * 1e3
    print(
        f"{case.name + f', batch {batch}':<46}{split_med:>8.3f}{central_med:>8.3f}"
        f"{split_med / central_med:>7.2f}x{split_min:>8.3f}{central_min:>8.3f}"
        f"{split_min / central_min:>7.2f}x{per_batch:>8.2f}{gap:>10.1e}"
        f"{floor_med / central_med:>7.2f}x{messages:>9.2f}"
    )


# -- (b) bytes and AUC per compression ----------------------------------------------------------


def compression(case: Case, epochs: int, batch: int, seeds: int) -> None:
    kinds: list[tuple[str, Any]] = [
        ("float32 (None)", None),
        ('"float16"', "float16"),
        ("8 bits", 8),
    ]
    sizes, aucs = {}, {}
    for label, kind in kinds:
        per_seed, auc = [], []
        for seed in range(seeds):
            model = case.fit(epochs, batch, seed=seed, compression=kind)
            per_seed.append(sum(r.nbytes for r in model.transcript_.records) / model.n_iter_)
            auc.append(case.auc(model))
        sizes[label], aucs[label] = float(np.mean(per_seed)), np.array(auc)
    base = kinds[0][0]
    print(f"{case.name}, batch {batch}, {epochs} epochs, test AUC the mean of {seeds} seeds:")
    for label, _ in kinds:
        cost = aucs[base] - aucs[label]
        print(
            f"  {label:<16}{sizes[label] / 1e6:>10.3f} MB/epoch{sizes[label] / sizes[base]:>7.2f}x"
            f"   test AUC {aucs[label].mean():.4f}   AUC cost {cost.mean():+.4f}"
            f" (per seed {', '.join(f'{c:+.4f}' for c in cost)})"
        )


# -- (c) the defences' cost ----------------------------------------------------------------------


def defences(case: Case, epochs: int, batch: int, repeats: int) -> None:
    options: list[tuple[str, dict[str, Any]]] = [
        ("none", {}),
        ("embedding noise (z=1, clip 1)", {"privacy": EmbeddingNoise(1.0, 1.0)}),
        ("norm matching", {"gradient_protection": "norm"}),
        ("label DP (eps 1)", {"privacy": RandomizedResponse(1.0)}),
    ]
    seconds: dict[str, list[float]] = {name: [] for name, _ in options}
    auc: dict[str, list[float]] = {name: [] for name, _ in options}
    for _ in range(repeats):
        for name, extra in options:
            model = case.fit(epochs, batch, **extra)
            seconds[name] += model.epoch_seconds_[1:]
            auc[name].append(case.auc(model))
    base, base_best = float(np.median(seconds["none"])), min(seconds["none"])
    print(f"{case.name}, batch {batch}, {epochs} epochs x {repeats} runs:")
    print(f"  {'':<32}{'median s/epoch':>25}{'best s/epoch':>26}")
    for name, _ in options:
        s, best = float(np.median(seconds[name])), min(seconds[name])
        print(
            f"  {name:<32}{s:>8.3f}{(s - base) * 1e3:>+9.1f} ms{s / base:>5.2f}x"
            f"{best:>8.3f}{(best - base_best) * 1e3:>+9.1f} ms{best / base_best:>5.2f}x"
            f"   test AUC {np.mean(auc[name]):.4f}"
        )


# -- (d) the protected interactive layer -----------------------------------------------------------


def protected(case: Case, epochs: int, batch: int, key_bits: int, rows: int | None) -> None:
    layer = ProtectedLayer(key_bits=key_bits, insecure=key_bits < 2048)
    full = len(case.y_train)
    used = full if rows is None else min(rows, full)
    scale = (
        Schedule(full, batch, 0).batches_per_epoch() / Schedule(used, batch, 0).batches_per_epoch()
    )
    results = {}
    for name, extra in [("plain", {}), ("protected", {"protocol": layer})]:
        began = time.perf_counter()
        model = case.fit(epochs, batch, rows=rows, **extra)
        wall = time.perf_counter() - began
        per_epoch = float(np.median(model.epoch_seconds_[1:])) * scale
        first = model.epoch_seconds_[0]
        mb = sum(r.nbytes for r in model.transcript_.records) / model.n_iter_ / 1e6 * scale
        results[name] = per_epoch
        print(
            f"  {name:<10}{per_epoch:>9.2f} s/epoch{'*' if scale > 1 else ' '}"
            f"{per_epoch / results['plain']:>8.1f}x   first epoch {first:6.2f} s   "
            f"{mb:>8.2f} MB/epoch   test AUC {case.auc(model):.4f}   fit {wall:.1f} s"
        )
    if scale > 1:
        print(
            f"  * measured on {used} of the {full} training rows, scaled to all of them "
            f"(x{scale:.1f}: the cost is linear in the batches); the AUC is of that smaller fit"
        )


def main() -> None:
    os.environ.setdefault("VFLINK_PROGRESS", "0")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=20, help="epochs on breast cancer")
    parser.add_argument("--credit-epochs", type=int, default=3, help="epochs on default_credit")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timing runs")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--protected-epochs", type=int, default=3, help="epochs of the protected-layer runs"
    )
    parser.add_argument("--key-bits", type=int, default=2048, help="the protected layer's keys")
    parser.add_argument(
        "--credit-rows", type=int, default=1280, help="default_credit rows of the protected run"
    )
    parser.add_argument(
        "--overhead-only", action="store_true", help="only (a), the overhead against torch"
    )
    parser.add_argument(
        "--protected-only", action="store_true", help="only (d), the protected layer"
    )
    args = parser.parse_args()
    if min(args.epochs, args.credit_epochs, args.protected_epochs) < 2 or args.repeats < 1:
        parser.error(
            "--epochs, --credit-epochs and --protected-epochs must be at least 2, --repeats at "
            "least 1"
        )
    torch.set_num_threads(args.torch_threads)
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}; torch intra-op threads {torch.get_num_threads()}"
    )
    began = time.perf_counter()
    # (case, epochs timed, batch sizes timed, (epochs, batch) of the compression runs)
    cases = [(breast_cancer(), args.epochs, [64], (args.epochs, 64))]
    credit = default_credit()
    if credit is None:
        print(f"(FATE's default_credit not found in {FATE}: breast cancer only)")
    else:
        cases.append((credit, args.credit_epochs, [64, 1024], (5, 256)))
    # the first fit of a process pays one-off costs (torch's lazy imports: about 1 s)
    cases[0][0].fit(1, 64)
    if args.protected_only:
        protected_runs(cases, args.key_bits, args.protected_epochs, args.credit_rows)
        return

    print(
        "\n(a) seconds per epoch: split learning in-process against the same network trained "
        "centrally in torch\n(same modules, initialisation, batches, Adam); epochs 2 onwards of "
        f"{args.repeats} interleaved runs each; 'ms/batch': split's\nextra time per batch "
        "(medians); 'param gap': largest |difference| of the final parameters; '(a | b)': the "
        "columns at the\ndata party | at the label party; 'floor': split learning's own "
        "computation in one thread without messages\n(two backward passes, an optimiser per "
        "party) against central; 'msgs ms': what the messages and the parties' turns add\nper "
        "batch over that floor. Goal: <= 1.5x"
    )
    print(
        f"{'':<46}{'median s/epoch':>23}{'best s/epoch':>23}{'ms/':>8}{'param':>10}"
        f"{'':>7}{'msgs':>9}\n"
        f"{'case':<46}{'split':>8}{'central':>8}{'ratio':>7}{'split':>8}{'central':>8}"
        f"{'ratio':>7}{'batch':>8}{'gap':>10}{'floor':>7}{'ms':>9}"
    )
    for case, epochs, batches, _ in cases:
        for batch in batches:
            overhead(case, epochs, batch, args.repeats)
    if args.overhead_only:
        return

    print(
        "\n(b) bytes per epoch on the wire (embeddings, gradients, control; encoded) and test "
        "AUC per compression.\nGoal: float16 halves the bytes at an AUC cost below 0.002 "
        "(cost: float32's AUC minus this one's, same seed)"
    )
    for case, _, _, (epochs, batch) in cases:
        compression(case, epochs, batch, seeds=3)

    print(
        "\n(c) the defences' cost: seconds per epoch (epochs 2 onwards), the extra over none and "
        "the ratio;\nlabel DP randomises the labels once before training (no per-epoch cost: "
        "its line shows the timing noise)"
    )
    for case, epochs, batches, _ in cases:
        defences(case, epochs, batches[0], args.repeats)

    protected_runs(cases, args.key_bits, args.protected_epochs, args.credit_rows)
    load = os.getloadavg()
    print(f"\nwhole run {time.perf_counter() - began:.0f} s; load average at the end {load[0]:.2f}")


def protected_runs(cases: list[Any], key_bits: int, epochs: int, credit_rows: int) -> None:
    """(d) on every case: breast cancer whole, default_credit on its first rows."""
    print(
        f"\n(d) the protected interactive layer ({key_bits}-bit Paillier keys at both "
        "parties) against plain split learning of the same\nnetwork: seconds per epoch (the "
        f"median of epochs 2 onwards of {epochs}; the first also makes the keys), "
        "bytes per epoch, test AUC; batch 64. Goal on default_credit: <= 200 s per epoch"
    )
    for case, _, _, _ in cases:
        print(f"{case.name}:")
        rows = None if case is cases[0][0] else credit_rows
        protected(case, epochs, 64, key_bits, rows)


if __name__ == "__main__":
    main()
