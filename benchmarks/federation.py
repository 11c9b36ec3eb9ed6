"""Speed of the wire format and the in-process federation, against plain-Python baselines.

Prints, in one run on this machine:

* wire encode + decode throughput of float64 arrays, against the floor of copying the same
  bytes (``tobytes`` + ``frombuffer(...).copy()``);
* LocalFederation one-way throughput (MB/s) and ping-pong round-trip latency, against two
  threads passing the array's raw bytes through ``queue.Queue`` (the floor of any channel that
  copies: no framing, no checks, no transcript);
* one round of a 100-client FedAvg-like exchange (broadcast a model, gather the updates).

Run::

    python benchmarks/federation.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from vfl.federation import Federation, LocalFederation, wire


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


def main() -> None:
    parser = argparse.ArgumentParser(description="LocalFederation and wire format speed")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    bench_wire(3 if args.quick else 7)
    bench_local(args.quick)
    bench_many_clients(args.quick)


if __name__ == "__main__":
    main()
