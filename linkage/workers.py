"""Where a party's PSI work runs: this process, its own worker processes, or an executor.

ECDH PSI's blinding and the unbalanced PSI's OPRF evaluations are one elliptic-curve
multiplication per item, independent of each other: :func:`map_chunks` cuts a batch into
chunks and runs them

* in this process, for ``workers=1`` or a batch under :data:`PARALLEL_MIN_POINTS` (starting
  workers would cost more than it saves);
* on a pool of this machine's worker processes (``workers=N``; ``forkserver`` start, kept for
  the life of the process, never shared with a forked child);
* on an executor the party already runs: a ``dask.distributed.Client`` connected to its own
  cluster (the ``dask`` extra), or any :class:`concurrent.futures.Executor`.

Each task carries the party's secret scalar with its chunk (workers keep nothing between
tasks), so an executor must be the party's own: nothing here crosses an institution's
boundary. Dask tasks are submitted impure (``pure=False``) and gathered in order; a task that
fails past Dask's retries raises :class:`RuntimeError` naming the step. If this machine's own
pool breaks (a script that starts processes without ``if __name__ == "__main__":``, or a
killed worker), the batch runs in this process with a :class:`RuntimeWarning`.

No worker outlives the process that started it, however that process ends (``kill -9``
included): each worker runs :func:`exit_with_parent` as its pool's initializer, a thread that
waits on multiprocessing's sentinel of the parent process (a pipe that the kernel closes when
the parent dies, on every platform and start method) and ends the worker at once. With the
workers gone, multiprocessing's forkserver and resource tracker end too, as they do when
their last client closes (they hold no other reference to the party). Chosen over Linux's
``PR_SET_PDEATHSIG``, which fires when the *thread* that started a process ends (a party
thread that started the pool) and, under a forkserver, watches the forkserver rather than the
party.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.connection
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

__all__ = [
    "PARALLEL_MIN_POINTS",
    "Workers",
    "check_workers",
    "executor_slots",
    "exit_with_parent",
    "gather",
    "is_dask",
    "is_executor",
    "map_chunks",
    "run_on_executor",
]

PARALLEL_MIN_POINTS = 20_000
"""Batches smaller than this run in the calling process."""

Workers = int | Any | None
"""A ``workers`` argument: a count of this machine's processes (None: all cores), or an
executor (a ``dask.distributed.Client`` or any :class:`concurrent.futures.Executor`)."""


def is_executor(workers: Any) -> bool:
    """Whether ``workers`` is an executor (anything with ``submit``) rather than a count."""
    return not isinstance(workers, (int, type(None))) and callable(getattr(workers, "submit", None))


def is_dask(executor: Any) -> bool:
    """Whether ``executor`` is a ``dask.distributed.Client``."""
    return type(executor).__module__.split(".")[0] == "distributed"


def executor_slots(executor: Any) -> int:
    """How many tasks ``executor`` runs at once: a Dask client's worker threads (at the time
    of asking), a pool's ``max_workers``, else this machine's cores.

    Raises
    ------
    ValueError
        A Dask client that cannot reach its scheduler, or whose cluster has no worker.
    """
    if is_dask(executor):
        try:
            threads = int(sum(executor.nthreads().values()))
        except Exception as exc:  # say so here, not deep inside a later call
            raise ValueError(f"the Dask client cannot reach its scheduler: {exc}") from exc
        if threads == 0:  # tasks would wait for a worker forever
            raise ValueError(
                "the Dask cluster has no workers: start some (dask worker <scheduler address>) "
                "or pass workers=<a count of this machine's processes>"
            )
        return threads
    slots = getattr(executor, "_max_workers", None)
    return max(1, int(slots) if isinstance(slots, int) else os.cpu_count() or 1)


def check_workers(workers: Workers) -> int:
    """How many tasks may run at once: ``workers`` processes (None: every core), or an
    executor's slots (a Dask client's worker threads, a pool's ``max_workers``).

    Raises
    ------
    ValueError
        Neither a positive integer nor an executor.
    """
    if workers is None:
        return os.cpu_count() or 1
    if is_executor(workers):
        return executor_slots(workers)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(
            f"workers must be a positive integer or an executor (a dask.distributed.Client, a "
            f"concurrent.futures.Executor), got {workers!r}"
        )
    return min(workers, os.cpu_count() or 1, 64)  # this machine's processes: at most its cores


def map_chunks(
    step: Callable[..., Any],
    secret: bytes | str,
    items: Any,
    workers: Workers,
    *constants: Any,
    max_chunk: int | None = None,
) -> list[Any]:
    """``[step(secret, chunk, offset, *constants) for each chunk of items]``, in order.

    ``items`` is anything with ``len`` and positional slices (a list, a DataFrame's rows).
    One chunk (the whole batch, offset 0) in this process for one worker or a small batch;
    otherwise a few chunks per worker (at most ``max_chunk`` items each) on ``workers``."""
    slots = check_workers(workers)
    if (slots == 1 and not is_executor(workers)) or len(items) < PARALLEL_MIN_POINTS:
        return [step(secret, items, 0, *constants)]
    size = -(-len(items) // (4 * slots))  # a few chunks per worker
    if max_chunk is not None:
        size = min(size, max_chunk)
    starts = range(0, len(items), size)
    rows = items.iloc if hasattr(items, "iloc") else items  # a frame's rows by position
    tasks = [(secret, rows[i : i + size], i, *constants) for i in starts]
    if is_executor(workers):
        return run_on_executor(workers, step, tasks)
    try:
        return list(_pool(slots).map(step, *zip(*tasks, strict=True)))
    except BrokenProcessPool:
        with _POOL_LOCK:
            _POOLS.pop(slots, None)
        warnings.warn(
            "PSI worker processes failed (a script that starts processes needs "
            "`if __name__ == '__main__':`, or a worker died); continuing in this process",
            RuntimeWarning,
            stacklevel=3,
        )
        return [step(secret, items, 0, *constants)]


def run_on_executor(
    executor: Any,
    step: Callable[..., Any],
    tasks: Sequence[tuple[Any, ...]],
    shared: tuple[Any, ...] = (),
) -> list[Any]:
    """``[step(*task, *shared) for task in tasks]`` on ``executor``, in order (the one place
    vflink submits work to an executor: PSI, Bloom encoding, all-pairs Dice comparison and
    :mod:`vfl.crypto.parallel`).

    ``shared`` are arguments every task needs (the B filters of a comparison): a Dask client
    scatters them to every worker once (``broadcast=True``) instead of shipping them with each
    task; other executors receive them with each task. Dask tasks are impure (two chunks of
    random powers have equal arguments and must not be merged into one result) and carry
    their own arguments and result as one object each. A task that fails, or whose workers
    all died past Dask's retries, raises :class:`RuntimeError` naming the step and the cause;
    the others are cancelled."""
    if is_dask(executor):
        common = [executor.scatter(value, broadcast=True) for value in shared]
        futures = [
            executor.submit(_unpack, _Packed(step, task), *common, pure=False) for task in tasks
        ]
    else:
        futures = [executor.submit(step, *task, *shared) for task in tasks]
    what = f"a task of {getattr(step, '__name__', step)} failed on the executor"
    results = gather(futures, f"{what} {type(executor).__name__}")
    return [r.args[0] if isinstance(r, _Packed) else r for r in results]


def gather(futures: Sequence[Any], failure: str) -> list[Any]:
    """The results of ``futures`` in order. If one fails (or its workers all died past Dask's
    retries), the others are cancelled and :class:`RuntimeError` says ``failure`` and the
    cause."""
    try:
        return [f.result() for f in futures]
    except Exception as exc:
        for f in futures:
            f.cancel()
        raise RuntimeError(f"{failure}: {type(exc).__name__}: {exc}") from exc


class _Packed:
    """A task's function and arguments as one opaque object: Dask walks list and tuple
    arguments item by item looking for tasks and futures, which for a chunk of thousands of
    IDs or ciphertexts cost more than the work (measured: 0.2 s per 5,000-ID chunk)."""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.fn, self.args)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.fn, self.args = state


def _unpack(packed: _Packed, *shared: Any) -> _Packed:
    """Run the packed task (with the scattered ``shared`` arguments after its own); the result
    comes back packed too (Dask would otherwise serialise a returned list item by item, as
    many frames as items): its ``args[0]``."""
    return _Packed(_unpack, (packed.fn(*packed.args, *shared),))


def exit_with_parent() -> None:
    """In a worker process (a pool's ``initializer``): end this process as soon as the process
    that started it ends, whatever ended it.

    A daemon thread waits on :func:`multiprocessing.parent_process`'s sentinel, which becomes
    ready when the parent is gone, and then calls :func:`os._exit` (the worker holds nothing
    that needs cleaning: its tasks' results had nowhere to go). Without it a pool's workers
    wait forever for work from a parent that was killed (they hold their own end of the task
    queue), and keep the forkserver and the resource tracker alive with them. Does nothing in
    a process that multiprocessing did not start."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(_ORPHANED)

    threading.Thread(target=watch, name="vflink-exit-with-parent", daemon=True).start()


_ORPHANED = 70
"""The exit status of a worker whose parent died (EX_SOFTWARE: nobody waits for it)."""

_POOLS: dict[int, ProcessPoolExecutor] = {}
_POOL_PID = os.getpid()
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ProcessPoolExecutor:
    """A process pool kept for the life of the process (starting one costs about a second),
    never shared with a forked child."""
    global _POOL_PID
    with _POOL_LOCK:  # two parties' threads may ask at once
        if os.getpid() != _POOL_PID:  # a forked child must not use its parent's pools
            _POOLS.clear()
            _POOL_PID = os.getpid()
        if workers not in _POOLS:
            methods = multiprocessing.get_all_start_methods()
            start = "forkserver" if "forkserver" in methods else "spawn"
            _POOLS[workers] = ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context(start),
                initializer=exit_with_parent,  # no worker outlives the party
            )
            atexit.register(_POOLS[workers].shutdown, wait=False, cancel_futures=True)
        return _POOLS[workers]
