"""Both cores for the Paillier work that splits: worker processes and GIL-free threads.

Measured on a 2-core machine, and chosen by that measurement:

* fixed-base encryption and Pippenger multi-exponentiation are loops of gmpy2 multiplications
  driven from Python, so they hold the interpreter lock: they run in worker **processes**
  (``forkserver`` start method, safe beside the federation's threads), each of which builds and
  caches its own fixed-base table per key (about 0.7 s once);
* decryption is ``gmpy2.powmod_base_list`` modulo ``p**2`` and ``q**2``, which releases the
  lock: its two halves run in two **threads**, without copying anything.

No worker outlives the process that started it, however that process ends (``kill -9``
included): each runs :func:`exit_with_parent` as its initializer, which ends it as soon as
multiprocessing's sentinel of its parent is ready (see :func:`linkage.workers.exit_with_parent`,
whose twin it is: a worker here must not import ``linkage``, whose package imports pandas --
about a second and 80 MB per worker). With the workers gone, the forkserver and the resource
tracker end too.

Worker processes start without importing the caller's main module (:class:`_MainHidden`),
so a script without an ``if __name__ == "__main__":`` guard runs once. Workers exchange only
integers and int64 arrays with this process (through the standard
library's process pool); nothing crosses a party boundary here. ``workers=1`` (the default
everywhere) runs in the calling thread. Small batches stay in the caller, where starting
workers would cost more than it saves.

Beyond one machine, ``workers`` may instead be an executor the party already runs: a
``dask.distributed.Client`` (the ``dask`` extra) connected to the party's own cluster, or any
:class:`concurrent.futures.Executor`. The public-key work that splits (encryption's random
powers, re-randomisation, ``matrix @ ciphertexts``) is then submitted to it in as many chunks
as it has worker threads, through :func:`linkage.workers.run_on_executor` (imported then, so
that ``import vfl.crypto`` stays light); Dask tasks are impure (``pure=False``), since two
chunks of random powers have the same arguments and must not share one result. Private-key
work (CRT encryption, decryption) stays in this process: no cluster worker holds a key's
factors. Results do not depend on where they ran: the same ciphertext arithmetic.

.. warning::
   The cluster must be inside the party's own trust boundary. What it computes is as
   sensitive as the data: an encryption's random power decrypts that ciphertext without the
   key (``c * r**-1 = 1 + m n``), and the party's feature rows and, in the secret-shared
   protocol, its shares travel as exponents. ``vflink party`` reaches another host's
   scheduler only over ``tls://`` (:func:`vfl.party._connect_scheduler`).
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from vfl.crypto.kernels import FixedBaseTable, multiexp_big, multiexp_rows

__all__ = [
    "Workers",
    "check_workers",
    "default_workers",
    "executor_slots",
    "exit_with_parent",
    "is_executor",
    "local_workers",
    "map_processes",
    "map_threads",
    "set_default_workers",
    "split",
]

T = TypeVar("T")

_DEFAULT_WORKERS = 1
_process_pools: dict[int, ProcessPoolExecutor] = {}
_thread_pools: dict[int, ThreadPoolExecutor] = {}
_pool_lock = threading.Lock()


def set_default_workers(workers: int) -> None:
    """Default number of workers for encryption, decryption and ``matrix @ vector``."""
    global _DEFAULT_WORKERS
    _DEFAULT_WORKERS = check_workers(workers)


def default_workers() -> int:
    """The current default number of workers (1 unless :func:`set_default_workers` changed it)."""
    return _DEFAULT_WORKERS


Workers = int | Executor | Any | None
"""A ``workers`` argument: a count of this machine's processes (None: the default), or an
executor (a ``dask.distributed.Client`` or any :class:`concurrent.futures.Executor`)."""


def is_executor(workers: Any) -> bool:
    """Whether ``workers`` is an executor (anything with ``submit``) rather than a count."""
    return not isinstance(workers, (int, type(None))) and callable(getattr(workers, "submit", None))


def executor_slots(executor: Any) -> int:
    """How many tasks ``executor`` runs at once (:func:`linkage.workers.executor_slots`,
    imported only when an executor is used: ``import vfl.crypto`` stays light)."""
    from linkage.workers import executor_slots as slots

    return slots(executor)


def check_workers(workers: Workers) -> int:
    """Validate a ``workers`` argument and return how many tasks may run at once (None means
    the default; an executor, its slots)."""
    if workers is None:
        return _DEFAULT_WORKERS
    if is_executor(workers):
        return executor_slots(workers)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(
            f"workers must be a positive integer or an executor (a dask.distributed.Client, a "
            f"concurrent.futures.Executor), got {workers!r}"
        )
    return min(workers, os.cpu_count() or 1, 64)


def local_workers(workers: Workers) -> int:
    """The count of this machine's workers for private-key work, which never goes to an
    executor: an executor counts as 2 (the two halves of a CRT computation)."""
    return 2 if is_executor(workers) else check_workers(workers)


def split(items: Sequence[T], parts: int) -> list[Sequence[T]]:
    """``items`` cut into ``parts`` contiguous, nearly equal chunks (none empty)."""
    parts = max(1, min(parts, len(items)))
    bounds = np.linspace(0, len(items), parts + 1).astype(int)
    return [items[a:b] for a, b in itertools.pairwise(bounds.tolist())]


_registered_exit = [False]


def _process_pool(workers: int) -> Executor:
    with _pool_lock:
        pool = _process_pools.get(workers)
        if pool is None:
            context = multiprocessing.get_context("forkserver")
            pool = ProcessPoolExecutor(
                max_workers=workers, mp_context=context, initializer=exit_with_parent
            )
            _process_pools[workers] = pool
            if not _registered_exit[0]:
                # in a process that multiprocessing started itself, the exit joins every child
                # before atexit runs, and closes queues first: shut the pools down (waiting for
                # their workers) before either, or the exit would wait for them forever
                multiprocessing.util.Finalize(None, _shutdown_and_wait, exitpriority=100)
                _registered_exit[0] = True
        return pool


def _thread_pool(workers: int) -> Executor:
    with _pool_lock:
        pool = _thread_pools.get(workers)
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vflink-crypto")
            _thread_pools[workers] = pool
        return pool


def _shutdown_and_wait() -> None:
    for pool in list(_process_pools.values()):
        pool.shutdown(wait=True, cancel_futures=True)


@atexit.register
def _shutdown() -> None:
    for pool in list(_process_pools.values()) + list(_thread_pools.values()):
        pool.shutdown(wait=False, cancel_futures=True)


_main_lock = threading.Lock()


class _MainHidden:
    """While worker processes start: hide the ``__main__`` module's file and spec, so that
    the workers (and the forkserver) do not import it.

    multiprocessing imports the parent's main module in every process it starts (as
    ``__mp_main__``), which runs a script's top level again when it has no
    ``if __name__ == "__main__":`` guard: the user's pipeline re-runs in each worker, which
    then fails trying to start workers of its own. Our workers run functions of this module
    only and never need the user's main module."""

    def __enter__(self) -> None:
        _main_lock.acquire()
        import sys

        self.main = sys.modules.get("__main__")
        self.saved: dict[str, Any] = {}
        for name in ("__file__", "__spec__"):
            if self.main is not None and name in vars(self.main):
                self.saved[name] = vars(self.main)[name]
        if self.main is not None:
            self.main.__spec__ = None
            if "__file__" in self.saved:
                del self.main.__file__

    def __exit__(self, *exc: object) -> None:
        try:
            if self.main is not None:
                for name, value in self.saved.items():
                    setattr(self.main, name, value)
        finally:
            _main_lock.release()


def _map(
    pool: Callable[[int], Executor],
    fn: Callable[..., T],
    argument_tuples: Sequence[tuple[Any, ...]],
    workers: Workers,
) -> list[T]:
    if is_executor(workers):
        return _map_executor(workers, fn, argument_tuples)
    workers = check_workers(workers)
    if workers <= 1 or len(argument_tuples) <= 1:
        return [fn(*args) for args in argument_tuples]
    executor = pool(workers)
    if pool is _process_pool:  # submitting may start the processes
        with _MainHidden():
            futures = [executor.submit(fn, *args) for args in argument_tuples]
    else:
        futures = [executor.submit(fn, *args) for args in argument_tuples]
    return [f.result() for f in futures]


def _map_executor(
    executor: Any, fn: Callable[..., T], argument_tuples: Sequence[tuple[Any, ...]]
) -> list[T]:
    from linkage.workers import run_on_executor

    return run_on_executor(executor, fn, argument_tuples)


def map_processes(
    fn: Callable[..., T], argument_tuples: Sequence[tuple[Any, ...]], workers: Workers
) -> list[T]:
    """``[fn(*args) for args in argument_tuples]`` on ``workers`` processes, or on the
    executor ``workers`` is (in order)."""
    return _map(_process_pool, fn, argument_tuples, workers)


def map_threads(
    fn: Callable[..., T], argument_tuples: Sequence[tuple[Any, ...]], workers: int
) -> list[T]:
    """Like :func:`map_processes`, on this machine's threads (for work that releases the
    interpreter lock; never an executor)."""
    return _map(_thread_pool, fn, argument_tuples, workers)


# -- worker-side functions (top level, so that worker processes can import them) ---------------


def exit_with_parent() -> None:
    """In a worker process (the pools' ``initializer``): end this process as soon as the
    process that started it ends, whatever ended it (a daemon thread waits on
    :func:`multiprocessing.parent_process`'s sentinel, then :func:`os._exit`). The twin of
    :func:`linkage.workers.exit_with_parent`, kept here so that a worker imports no
    ``linkage``."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(70)  # EX_SOFTWARE: nobody waits for this status

    threading.Thread(target=watch, name="vflink-exit-with-parent", daemon=True).start()


_tables: dict[tuple[int, int, int], FixedBaseTable] = {}
_MAX_TABLES = 4  # about 54 MiB each for 2048-bit keys: keep the most recently used few


def random_powers_worker(base: int, modulus: int, bits: int, count: int) -> list[Any]:
    """In a worker: ``count`` random powers of ``base`` (tables cached per process, LRU)."""
    key = (int(base), int(modulus), int(bits))
    table = _tables.pop(key, None)
    if table is None:
        table = FixedBaseTable(base, modulus, bits)
    _tables[key] = table  # most recent last
    while len(_tables) > _MAX_TABLES:
        del _tables[next(iter(_tables))]
    return table.random_powers(count)


def multiexp_big_worker(bases: Sequence[Any], exponents: Sequence[int], modulus: int) -> Any:
    """In a worker: :func:`~vfl.crypto.kernels.multiexp_big` (non-negative exponents)."""
    return multiexp_big(bases, exponents, modulus)


def multiexp_rows_worker(
    bases: Sequence[Any], rows: Sequence[np.ndarray[Any, Any]], modulus: int
) -> list[Any]:
    """In a worker: :func:`~vfl.crypto.kernels.multiexp_rows` (signed exponents)."""
    return multiexp_rows(bases, rows, modulus)
