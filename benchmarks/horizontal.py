"""The horizontal path: orchestration overhead, DP-SGD's cost and bytes per round.

Prints, in one run:

* seconds per round of ``horizontal.FederatedClassifier`` (FedAvg) with 100 simulated
  clients in one process, an MLP of about 100k parameters, one local epoch of 100 samples
  each (batch 32), against the same local training run back to back in a plain loop with
  the same averaging: the ratio is the orchestration overhead (threads, typed messages,
  the wire format, sampling, aggregation);
* the same against Flower's simulation (``flwr[simulation]``), when ``--flower-python``
  names a Python that has it (kept out of vflink's environment: it pins its own
  dependencies), or this Python has it; skipped otherwise;
* record-level DP-SGD (Opacus per-sample gradients) against non-private training, per round;
* bytes on the wire per round (the transcript's encoded sizes).

With ``--fate``, quality instead: on FATE's horizontal tables (``../shared/data/fate``,
``*_homo_*.csv``: each party's rows as a client, FATE's test rows held out), the estimators'
defaults against the same model trained on the pooled rows, per seed -- the linear module
against scikit-learn's ``LogisticRegression()`` (C=1) on the pooled rows standardised, the
default network against its pooled torch twin (:func:`horizontal.baseline.pooled_twin`: the
same MLP from the same initial weights, scikit-learn's MLP recipe) -- with the test AUC of
each, the difference, the rounds the federated fit took and its seconds.

Run::

    python benchmarks/horizontal.py [--rounds 5] [--clients 100] [--flower-python PATH]
    python benchmarks/horizontal.py --fate [--seeds 3] [--data ../shared/data/fate]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

# this script's folder comes first on sys.path and its name is the package's: step aside
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from horizontal import FederatedClassifier, RecordDP  # noqa: E402
from horizontal.model import build_module, flatten, load_vector  # noqa: E402

HIDDEN = (320, 256)
FEATURES = 64


def clients_data(n_clients: int, rows: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    w = rng.normal(size=FEATURES)
    out = {}
    for k in range(n_clients):
        x = rng.normal(size=(rows, FEATURES))
        y = (x @ w + rng.normal(size=rows) > 0).astype(np.int64)
        out[f"client_{k:03d}"] = (x, y)
    return out


def plain_loop(data: dict[str, Any], rounds: int, batch: int, lr: float) -> float:
    """The same local training and averaging, back to back, no federation: seconds/round."""
    x_all = np.vstack([x for x, _ in data.values()])
    mean, scale = x_all.mean(axis=0), x_all.std(axis=0)
    tensors = [
        (torch.as_tensor((x - mean) / scale, dtype=torch.float32), torch.as_tensor(y))
        for x, y in data.values()
    ]
    module = build_module(None, FEATURES, 2, HIDDEN, 0)
    weights = flatten(module)
    loss_fn = nn.CrossEntropyLoss()
    began = time.perf_counter()
    for round_ in range(rounds):
        deltas, sizes = [], []
        for k, (x, y) in enumerate(tensors):
            load_vector(module, weights)
            order = torch.randperm(len(x), generator=torch.Generator().manual_seed(round_ + k))
            for i in range(0, len(x), batch):
                rows = order[i : i + batch]
                for p in module.parameters():
                    p.grad = None
                loss_fn(module(x[rows]), y[rows]).backward()
                with torch.no_grad():
                    for p in module.parameters():
                        p.sub_(lr * p.grad)
            deltas.append(flatten(module) - weights)
            sizes.append(len(x))
        weights = weights + np.average(deltas, axis=0, weights=sizes)
    return (time.perf_counter() - began) / rounds


def vflink_round(data: dict[str, Any], rounds: int, batch: int, lr: float, **extra: Any) -> Any:
    model = FederatedClassifier(
        hidden_layer_sizes=HIDDEN,
        max_iter=rounds,
        batch_size=batch,
        learning_rate=lr,
        strategy="fedavg",  # local SGD, as the plain loop and Flower's clients run
        random_state=0,
        **extra,
    )
    began = time.perf_counter()
    model.fit(data)
    total = time.perf_counter() - began
    per_round = float(np.mean([r.seconds for r in model.rounds_]))
    sent = sum(r.nbytes for r in model.transcript_.records if r.tag.startswith("fed/update/0"))
    sent += sum(
        r.nbytes for r in model.transcript_.records if r.tag == "fed/task" and r.sender == "server"
    ) / (rounds + 1)
    return per_round, total, sent, sum(p.numel() for p in model.module_.parameters())


FLOWER = textwrap.dedent(
    """
    import sys, time, json
    import numpy as np, torch
    from torch import nn
    import flwr as fl
    n_clients, rows, rounds, batch, lr, features = map(float, sys.argv[1:7])
    n_clients, rows, rounds, batch, features = map(int, (n_clients, rows, rounds, batch, features))
    hidden = (320, 256)
    rng = np.random.default_rng(0)
    w = rng.normal(size=features)
    data = []
    for k in range(n_clients):
        x = rng.normal(size=(rows, features)).astype(np.float32)
        data.append((x, (x @ w + rng.normal(size=rows) > 0).astype(np.int64)))
    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(features, hidden[0]), nn.ReLU(),
                             nn.Linear(hidden[0], hidden[1]), nn.ReLU(), nn.Linear(hidden[1], 2))
    class Client(fl.client.NumPyClient):
        def __init__(self, k):
            self.x, self.y = map(torch.as_tensor, data[k]); self.model = net()
        def get_parameters(self, config):
            return [p.detach().numpy() for p in self.model.parameters()]
        def fit(self, parameters, config):
            with torch.no_grad():
                for p, v in zip(self.model.parameters(), parameters):
                    p.copy_(torch.as_tensor(v))
            order = torch.randperm(len(self.x)); loss_fn = nn.CrossEntropyLoss()
            for i in range(0, len(self.x), batch):
                r = order[i:i + batch]
                for p in self.model.parameters(): p.grad = None
                loss_fn(self.model(self.x[r]), self.y[r]).backward()
                with torch.no_grad():
                    for p in self.model.parameters(): p.sub_(lr * p.grad)
            return self.get_parameters({}), len(self.x), {}
    times = []
    class Timed(fl.server.strategy.FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            times.append(time.perf_counter())
            return super().configure_fit(server_round, parameters, client_manager)
    strategy = Timed(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n_clients,
                     min_available_clients=n_clients,
                     initial_parameters=fl.common.ndarrays_to_parameters(
                         [p.detach().numpy() for p in net().parameters()]))
    fl.simulation.start_simulation(
        client_fn=lambda cid: Client(int(cid)).to_client(), num_clients=n_clients,
        config=fl.server.ServerConfig(num_rounds=rounds), strategy=strategy,
        client_resources={"num_cpus": 1})
    times.append(time.perf_counter())
    print(json.dumps({"per_round": float(np.mean(np.diff(times)[1:] if len(times) > 2
                                                 else np.diff(times)))}))
    """
)


def flower(python: str, n_clients: int, rows: int, rounds: int, batch: int, lr: float) -> str:
    check = subprocess.run(
        [python, "-c", "import flwr, ray"], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        return "skipped (no flwr[simulation] in --flower-python)"
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "flower_bench.py"
        script.write_text(FLOWER)
        args = [str(v) for v in (n_clients, rows, rounds, batch, lr, FEATURES)]
        done = subprocess.run(
            [python, str(script), *args], capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr else '?'}"
    import json

    line = [x for x in done.stdout.splitlines() if x.startswith("{")][-1]
    return f"{json.loads(line)['per_round']:.2f} s/round"


FATE_TABLES = {
    "breast": ["guest", "host"],
    "default_credit": ["guest", "host_1", "host_2"],
}
"""FATE's horizontal tables: the parties' files (``<table>_homo_<party>.csv``), besides
``<table>_homo_test.csv``."""


def fate_table(folder: Path, name: str) -> tuple[dict[str, Any], Any, Any] | None:
    """The table's clients ``{party: (X, y)}`` and its test rows, or None when absent."""
    import pandas as pd

    files = [folder / f"{name}_homo_{part}.csv" for part in [*FATE_TABLES[name], "test"]]
    if not all(f.exists() for f in files):
        return None
    *frames, test = (pd.read_csv(f) for f in files)
    columns = [c for c in test.columns if c.startswith("x")]
    clients = {
        part: (frame[columns].to_numpy(), frame["y"].to_numpy())
        for part, frame in zip(FATE_TABLES[name], frames, strict=True)
    }
    return clients, test[columns].to_numpy(), test["y"].to_numpy()


def fate_quality(folder: Path, seeds: int) -> None:
    """The defaults against pooled training on FATE's horizontal tables (see the docstring)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import StandardScaler

    from horizontal.baseline import pooled_twin

    print(f"\nFATE's horizontal tables ({folder}): the defaults against pooled training, test AUC")
    print(
        f"  {'table':<15} {'model':<8} {'seed':>4} {'pooled':>7} {'federated':>9} "
        f"{'difference':>10} {'rounds':>6} {'seconds':>7}"
    )
    for name in FATE_TABLES:
        table = fate_table(folder, name)
        if table is None:
            print(f"  {name}: skipped (no {name}_homo_*.csv in {folder})")
            continue
        clients, x_test, y_test = table
        x = np.vstack([v for v, _ in clients.values()])
        y = np.concatenate([t for _, t in clients.values()])
        scaler = StandardScaler().fit(x)
        reference = LogisticRegression(max_iter=10_000).fit(scaler.transform(x), y)
        pooled_linear = roc_auc_score(y_test, reference.decision_function(scaler.transform(x_test)))
        for seed in range(seeds):
            for kind, options in (("linear", {"module": "linear"}), ("network", {})):
                began = time.perf_counter()
                model = FederatedClassifier(random_state=seed, **options).fit(clients)
                seconds = time.perf_counter() - began
                ours = roc_auc_score(y_test, model.predict_proba(x_test)[:, 1])
                if kind == "linear":
                    pooled = pooled_linear
                else:
                    twin = pooled_twin(FederatedClassifier(random_state=seed), clients)
                    pooled = roc_auc_score(y_test, twin.predict_proba(x_test)[:, 1])
                print(
                    f"  {name:<15} {kind:<8} {seed:>4} {pooled:7.4f} {ours:9.4f} "
                    f"{ours - pooled:+10.4f} {model.n_iter_:>6} {seconds:7.1f}",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rows", type=int, default=100, help="samples per client")
    parser.add_argument("--flower-python", default=sys.executable)
    parser.add_argument(
        "--fate", action="store_true", help="quality on FATE's horizontal tables instead"
    )
    parser.add_argument("--seeds", type=int, default=3, help="--fate: seeds per table")
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "data" / "fate",
        help="--fate: the folder of FATE's example tables",
    )
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads")
    if args.fate:
        fate_quality(args.data, args.seeds)
        return
    data = clients_data(args.clients, args.rows)
    batch, lr = 32, 0.05
    plain = plain_loop(data, args.rounds, batch, lr)
    ours, total, sent, params = vflink_round(data, args.rounds, batch, lr)
    print(
        f"\n{args.clients} clients x {args.rows} rows, an MLP of {params:,} parameters, one "
        f"local epoch (batch {batch}), {args.rounds} rounds of FedAvg:"
    )
    print(f"  plain loop (local training back to back + averaging): {plain:6.3f} s/round")
    print(
        f"  vflink FederatedClassifier (in-process federation):   {ours:6.3f} s/round "
        f"({ours / plain:.2f}x the plain loop; goal <= 1.3x); fit with setup {total:.1f} s"
    )
    print(f"  bytes on the wire per round: {sent / 1e6:.1f} MB (the model out, updates back)")
    other = flower(args.flower_python, args.clients, args.rows, args.rounds, batch, lr)
    print(f"  Flower simulation, the same setup: {other} (vflink {ours:.2f} s/round)")
    scaled = {n: ((x - x.mean()) / x.std(), y) for n, (x, y) in data.items()}
    dp, _, _, _ = vflink_round(
        scaled,
        args.rounds,
        batch,
        lr,
        privacy=RecordDP(noise_multiplier=1.0, max_grad_norm=1.0),
        standardize=False,
        classes=[0, 1],
    )
    base, _, _, _ = vflink_round(scaled, args.rounds, batch, lr, standardize=False)
    print(
        f"  record-level DP-SGD (Opacus per-sample gradients, Poisson batches): {dp:6.3f} "
        f"s/round against {base:6.3f} without DP ({dp / base:.2f}x)"
    )


if __name__ == "__main__":
    main()
