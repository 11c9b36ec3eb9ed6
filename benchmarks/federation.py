"""Speed of the wire format and the in-process federation, against plain-Python baselines.

Prints, in one run on this machine:

* wire encode + decode throughput of float64 arrays, against the floor of copying the same
  bytes (``tobytes`` + ``frombuffer(...).copy()``);
* LocalFederation one-way throughput (MB/s) and ping-pong round-trip latency, against two
  threads passing the array's raw bytes through ``queue.Queue`` (the floor of any channel that
  copies: no framing, no checks, no transcript);
* one round of a 100-client FedAvg-like exchange (broadcast a model, gather the updates);
* GrpcFederation (mutual TLS on loopback, two endpoints in this process) against
  LocalFederation: one-way throughput and ping-pong latency;
* vertical logistic regression (2048-bit keys, coordinator protocol) with every party its own
  OS process over gRPC, against the same fit in-process: seconds and bytes per epoch, setup.

Run::

    python benchmarks/federation.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

from vfl.federation import Federation, LocalFederation, wire  # noqa: E402


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """Fastest wall time of ``repeats`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def bench_wire(repeats: int) -> None:
    print("wire format: encode + decode of a float64 array")
    print(f"  {'size':>10} {'wire MB/s':>10} {'memcpy MB/s':>12} {'ratio':>6}")
    for n in (128, 128 * 1024, 4 * 1024 * 1024):
        arr = np.random.default_rng(0).standard_normal(n)
        mb = arr.nbytes / 1e6
        t_wire = best_of(repeats, lambda arr=arr: wire.decode(wire.encode(arr)))
        t_copy = best_of(repeats, lambda arr=arr: np.frombuffer(arr.tobytes()).copy())
        print(
            f"  {_size(arr.nbytes):>10} {mb / t_wire:10.0f} {mb / t_copy:12.0f} "
            f"{t_copy / t_wire:6.2f}"
        )


def _size(nbytes: int) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.0f} {unit}"
    return f"{nbytes} B"


def queue_stream(payload: np.ndarray, count: int) -> float:
    """Baseline: two threads pass the array's bytes through a queue.Queue (copy out, copy in)."""
    q: queue.Queue[bytes] = queue.Queue(maxsize=64)

    def consumer() -> None:
        for _ in range(count):
            np.frombuffer(q.get()).copy()

    thread = threading.Thread(target=consumer)
    started = time.perf_counter()
    thread.start()
    for _ in range(count):
        q.put(payload.tobytes())
    thread.join()
    return time.perf_counter() - started


def federation_stream(payload: np.ndarray, count: int) -> float:
    def sender(fed: Federation) -> None:
        for _ in range(count):
            fed.send("b", "stream", payload)

    def receiver(fed: Federation) -> None:
        for _ in range(count):
            fed.recv("a", "stream")

    started = time.perf_counter()
    LocalFederation().run({"a": sender, "b": receiver})
    return time.perf_counter() - started


def queue_ping_pong(rounds: int) -> float:
    to_b: queue.Queue[int] = queue.Queue()
    to_a: queue.Queue[int] = queue.Queue()

    def b() -> None:
        for _ in range(rounds):
            to_a.put(to_b.get() + 1)

    thread = threading.Thread(target=b)
    started = time.perf_counter()
    thread.start()
    for i in range(rounds):
        to_b.put(i)
        to_a.get()
    thread.join()
    return time.perf_counter() - started


def federation_ping_pong(rounds: int) -> float:
    def a(fed: Federation) -> None:
        for i in range(rounds):
            fed.send("b", "ping", i)
            fed.recv("b", "pong")

    def b(fed: Federation) -> None:
        for _ in range(rounds):
            fed.send("a", "pong", fed.recv("a", "ping") + 1)

    started = time.perf_counter()
    LocalFederation().run({"a": a, "b": b})
    return time.perf_counter() - started


def bench_local(quick: bool) -> None:
    print("\nLocalFederation against two threads copying raw bytes through a queue.Queue")
    print(f"  {'message':>10} {'count':>6} {'federation MB/s':>16} {'queue MB/s':>11} {'ratio':>6}")
    for n, count in ((128, 5000), (128 * 1024, 400), (2 * 1024 * 1024, 40)):
        count = count // 5 if quick else count
        payload = np.random.default_rng(1).standard_normal(n)
        mb = payload.nbytes * count / 1e6
        t_fed = federation_stream(payload, count)
        t_queue = queue_stream(payload, count)
        print(
            f"  {_size(payload.nbytes):>10} {count:6d} {mb / t_fed:16.0f} {mb / t_queue:11.0f} "
            f"{t_queue / t_fed:6.2f}"
        )
    rounds = 500 if quick else 3000
    t_fed = federation_ping_pong(rounds)
    t_queue = queue_ping_pong(rounds)
    print(
        f"  ping-pong round trip: federation {t_fed / rounds * 1e6:.0f} us, "
        f"queue {t_queue / rounds * 1e6:.0f} us (ratio {t_queue / t_fed:.2f})"
    )


def bench_many_clients(quick: bool) -> None:
    n_clients, rounds, dim = 100, (3 if quick else 10), 10_000
    clients = [f"c{i:03d}" for i in range(n_clients)]

    def server(fed: Federation) -> float:
        model = np.zeros(dim)
        for r in range(rounds):
            fed.broadcast(f"model/{r}", model)
            updates = fed.gather(clients, f"update/{r}")
            model = np.mean(list(updates.values()), axis=0)
        return float(model[0])

    def client(fed: Federation) -> None:
        for r in range(rounds):
            model = fed.recv("server", f"model/{r}")
            fed.send("server", f"update/{r}", model + 1.0)

    local = LocalFederation()
    started = time.perf_counter()
    out = local.run({"server": server} | {c: client for c in clients})
    elapsed = time.perf_counter() - started
    assert out["server"] == rounds
    mb = local.transcript.total_bytes() / 1e6
    print(
        f"\n{n_clients} clients, model of {dim} float64, {rounds} rounds: "
        f"{elapsed / rounds * 1e3:.0f} ms per round, {mb / elapsed:.0f} MB/s through the hub, "
        f"{len(local.transcript)} messages"
    )


def _grpc_pair(folder: str) -> tuple[Any, Any]:
    from vfl.federation.certs import make_certificates
    from vfl.federation.network import GrpcFederation

    paths = make_certificates(folder, ["a", "b"])
    ports = [_free_port(), _free_port()]

    def endpoint(name: str, me: int, other: int) -> GrpcFederation:
        peer = "b" if name == "a" else "a"
        return GrpcFederation(
            name,
            f"127.0.0.1:{ports[me]}",
            {peer: f"127.0.0.1:{ports[other]}"},
            ca_cert=paths["ca"].read_bytes(),
            cert=paths[name].read_bytes(),
            key=paths[f"{name}_key"].read_bytes(),
        ).start()

    return endpoint("a", 0, 1), endpoint("b", 1, 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_grpc(quick: bool) -> None:
    print("\nGrpcFederation (mutual TLS, loopback) against LocalFederation")
    print(f"  {'message':>10} {'count':>6} {'gRPC MB/s':>10} {'local MB/s':>11} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as folder:
        a, b = _grpc_pair(folder)
        try:
            for n, count in ((128, 2000), (128 * 1024, 200), (2 * 1024 * 1024, 20)):
                count = count // 5 if quick else count
                payload = np.random.default_rng(1).standard_normal(n)
                mb = payload.nbytes * count / 1e6

                def drain(count: int = count) -> None:
                    for _ in range(count):
                        b.recv("a", "stream")

                reader = threading.Thread(target=drain)
                started = time.perf_counter()
                reader.start()
                for _ in range(count):
                    a.send("b", "stream", payload)
                reader.join()
                t_grpc = time.perf_counter() - started
                t_local = federation_stream(payload, count)
                print(
                    f"  {_size(payload.nbytes):>10} {count:6d} {mb / t_grpc:10.1f} "
                    f"{mb / t_local:11.1f} {t_local / t_grpc:6.2f}"
                )
            rounds = 100 if quick else 500

            def pong() -> None:
                for _ in range(rounds):
                    b.send("a", "pong", b.recv("a", "ping") + 1)

            thread = threading.Thread(target=pong)
            started = time.perf_counter()
            thread.start()
            for i in range(rounds):
                a.send("b", "ping", i)
                a.recv("b", "pong")
            thread.join()
            t_grpc = (time.perf_counter() - started) / rounds
            t_local = federation_ping_pong(rounds) / rounds
            print(
                f"  ping-pong round trip: gRPC {t_grpc * 1e3:.2f} ms, local {t_local * 1e3:.3f} ms"
            )
        finally:
            a.close()
            b.close()


def _lr_data(rows: int) -> tuple[dict[str, Any], Any]:
    import pandas as pd

    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 23))
    y = pd.Series((rng.random(rows) < 1 / (1 + np.exp(-x @ rng.normal(size=23)))).astype(int))
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(23)])
    return {"active": frame.iloc[:, :13], "passive": frame.iloc[:, 13:]}, y


def _is_setup(tag: str) -> bool:
    """Messages of the fit's setup: keys, encrypted rows, the packing size (tags under the
    protocol's namespace, ``vlr/``)."""
    tag = tag.removeprefix("vlr/")
    return tag in ("key", "rows", "setup") or tag.startswith("rows/")


LR_PARAMS = {
    "max_iter": 3,
    "tol": None,
    "batch_size": 1024,
    "random_state": 0,
    "protocol": "coordinator",
}


def _lr_party(name: str, rows: int, ports: dict[str, int], paths: dict[str, str], out: Any) -> None:
    import warnings

    from vfl.federation.network import GrpcFederation
    from vfl.linear import VerticalLogisticRegression

    warnings.simplefilter("ignore")
    parts, y = _lr_data(rows)
    fed = GrpcFederation.from_files(
        name,
        f"127.0.0.1:{ports[name]}",
        {p: f"127.0.0.1:{q}" for p, q in ports.items() if p != name},
        ca=paths["ca"],
        cert=paths[name],
        key=paths[f"{name}_key"],
    )
    est = VerticalLogisticRegression(**LR_PARAMS)  # type: ignore[arg-type]
    with fed:
        est.fit_party(
            fed,
            parts.get(name),
            y if name == "active" else None,
            label_party="active",
            data_parties=["active", "passive"],
        )
    per_epoch = sum(r.nbytes for r in fed.transcript if not _is_setup(r.tag))
    setup = sum(r.nbytes for r in fed.transcript if _is_setup(r.tag))
    out.put(
        (
            name,
            getattr(est, "epoch_seconds_", None),
            getattr(est, "setup_seconds_", None),
            per_epoch,
            setup,
        )
    )


def bench_lr_over_grpc(quick: bool) -> None:
    import multiprocessing
    import warnings

    from vfl.federation.certs import make_certificates
    from vfl.linear import VerticalLogisticRegression

    rows = 3000 if quick else 10_000
    print(
        f"\nvertical LR, {rows}x23 (13/10), batch 1024, 2048-bit keys, coordinator protocol, "
        "3 epochs: steady state = mean of epochs 2-3"
    )
    parts, y = _lr_data(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = VerticalLogisticRegression(**LR_PARAMS).fit(  # type: ignore[arg-type]
            parts, y, label_party="active"
        )
    records = local.transcript_.records
    local_setup = sum(r.nbytes for r in records if _is_setup(r.tag))
    local_epoch = sum(r.nbytes for r in records if not _is_setup(r.tag))
    names = ["active", "passive", "coordinator"]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as folder:
        paths = {k: str(v) for k, v in make_certificates(folder, names).items()}
        ports = {n: _free_port() for n in names}
        procs = [ctx.Process(target=_lr_party, args=(n, rows, ports, paths, out)) for n in names]
        for p in procs:
            p.start()
        results = {r[0]: r for r in (out.get(timeout=1200) for _ in names)}
        for p in procs:
            p.join()
    _, seconds, setup, _, _ = results["active"]
    grpc_epoch = sum(r[3] for r in results.values())
    grpc_setup = sum(r[4] for r in results.values())
    steady_local = float(np.mean(local.epoch_seconds_[1:]))
    steady_grpc = float(np.mean(seconds[1:]))
    print(f"  {'':<22}{'s/epoch':>9}{'setup s':>9}{'MB/epoch':>10}{'setup MB':>10}")
    print(
        f"  {'in-process (threads)':<22}{steady_local:9.2f}{local.setup_seconds_:9.1f}"
        f"{local_epoch / 3e6:10.2f}{local_setup / 1e6:10.1f}"
    )
    print(
        f"  {'gRPC, one process each':<22}{steady_grpc:9.2f}{setup:9.1f}"
        f"{grpc_epoch / 3e6:10.2f}{grpc_setup / 1e6:10.1f}"
    )
    print(f"  gRPC / in-process time per epoch: {steady_grpc / steady_local:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description="federation and wire format speed")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    bench_wire(3 if args.quick else 7)
    bench_local(args.quick)
    bench_many_clients(args.quick)
    bench_grpc(args.quick)
    bench_lr_over_grpc(args.quick)


if __name__ == "__main__":
    main()
