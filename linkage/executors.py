"""Where work that splits runs: this process, this machine's workers, or the party's executor.

The one executor layer of vflink, under both the linkage steps (PSI, Bloom encoding, all-pairs
comparison: :mod:`linkage.workers`) and the Paillier work (:mod:`vfl.crypto.parallel`). It
sits in ``linkage`` because that is the lowest floor that needs it (``linkage`` imports no
other vflink package), and it imports the standard library only: a worker process that
unpickles :func:`exit_with_parent` or a ``vfl.crypto`` worker function loads no pandas.

A ``workers`` argument (:data:`Workers`) is

* a count of this machine's processes: ``1`` runs in the calling process; more run on a pool
  of worker processes (:func:`process_pool`: ``forkserver`` start, kept for the life of the
  process, never shared with a forked child), or of threads for work that releases the
  interpreter lock (:func:`thread_pool`);
* or an executor the party already runs: a ``dask.distributed.Client`` connected to its own
  cluster (the ``dask`` extra; Dask is never imported here, a client is recognised by its
  type's module), or any :class:`concurrent.futures.Executor`. :func:`run_on_executor` is the
  one place vflink submits work to one.

Each task carries what it needs (workers keep nothing between tasks but caches of public
values), so an executor must be the party's own: nothing here crosses an institution's
boundary.

Worker processes start without importing the caller's main module (:class:`MainHidden`), so
a script without an ``if __name__ == "__main__":`` guard runs once; the functions they run
must therefore live in an importable module, not in ``__main__``.

No worker outlives the process that started it, however that process ends (``kill -9``
included): each worker runs :func:`exit_with_parent` as its pool's initializer, a thread that
waits on multiprocessing's sentinel of the parent process (a pipe that the kernel closes when
the parent dies, on every platform and start method) and ends the worker at once. With the
workers gone, multiprocessing's forkserver and resource tracker end too, as they do when
their last client closes (they hold no other reference to the party). Chosen over Linux's
``PR_SET_PDEATHSIG``, which fires when the *thread* that started a process ends (a party
thread that started the pool) and, under a forkserver, watches the forkserver rather than the
party.

.. warning::
   An executor's cluster must be inside the party's own trust boundary: what it computes is
   as sensitive as the data (secret scalars, feature rows as exponents, encryption
   randomness).
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType
from typing import Any, TypeVar

__all__ = [
    "MAX_PROCESSES",
    "ORPHANED_EXIT_STATUS",
    "MainHidden",
    "Workers",
    "check_workers",
    "executor_slots",
    "exit_with_parent",
    "failure_of",
    "gather",
    "is_dask",
    "is_executor",
    "map_processes",
    "map_threads",
    "process_pool",
    "run_on_executor",
    "scatter",
    "submit",
    "thread_pool",
]

T = TypeVar("T")

Workers = int | Executor | Any | None
"""A ``workers`` argument: a count of this machine's processes (None: the caller's default),
or an executor (a ``dask.distributed.Client`` or any :class:`concurrent.futures.Executor`)."""

MAX_PROCESSES = 64
"""The most worker processes one pool starts (and never more than this machine's cores)."""


# -- what a workers argument is ----------------------------------------------------------------


def is_executor(workers: Any) -> bool:
    """Whether ``workers`` is an executor (anything with ``submit``) rather than a count."""
    return not isinstance(workers, (int, type(None))) and callable(getattr(workers, "submit", None))


def is_dask(executor: Any) -> bool:
    """Whether ``executor`` is a ``dask.distributed.Client`` (recognised without importing
    Dask)."""
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


def check_workers(workers: Workers, *, default: int | None = None) -> int:
    """How many tasks may run at once for a ``workers`` argument.

    Parameters
    ----------
    workers : int, executor or None
        A count of this machine's processes (capped at its cores and :data:`MAX_PROCESSES`),
        an executor (its :func:`executor_slots`), or None.
    default : int, optional
        What None means; None means every core (the linkage steps), the Paillier work passes
        its own default (:func:`vfl.crypto.parallel.default_workers`).

    Returns
    -------
    int
        At least 1.

    Raises
    ------
    ValueError
        ``workers`` is neither a positive integer nor an executor, or an executor whose
        slots cannot be counted (:func:`executor_slots`).
    """
    if workers is None:
        return default if default is not None else os.cpu_count() or 1
    if is_executor(workers):
        return executor_slots(workers)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(
            f"workers must be a positive integer or an executor (a dask.distributed.Client, a "
            f"concurrent.futures.Executor), got {workers!r}"
        )
    return min(workers, os.cpu_count() or 1, MAX_PROCESSES)  # at most this machine's cores


# -- this machine's pools ----------------------------------------------------------------------

_process_pools: dict[int, ProcessPoolExecutor] = {}
_thread_pools: dict[int, ThreadPoolExecutor] = {}
_pools_pid = os.getpid()
_pool_lock = threading.Lock()
_exit_registered = [False]


def _forget_if_forked() -> None:
    """A forked child must not use its parent's pools (their workers and queues are the
    parent's): it starts its own. Called with ``_pool_lock`` held."""
    global _pools_pid
    if os.getpid() != _pools_pid:
        _process_pools.clear()
        _thread_pools.clear()
        _pools_pid = os.getpid()


def process_pool(processes: int) -> ProcessPoolExecutor:
    """This process's pool of ``processes`` worker processes, started once and kept for its
    life (starting one costs about a second); never shared with a forked child.

    ``forkserver`` start (``spawn`` where the platform has none): safe beside the federation's
    threads. Each worker runs :func:`exit_with_parent`. Submit to it under
    :class:`MainHidden`, as :func:`map_processes` does."""
    with _pool_lock:  # two parties' threads may ask at once
        _forget_if_forked()
        pool = _process_pools.get(processes)
        if pool is None:
            methods = multiprocessing.get_all_start_methods()
            start = "forkserver" if "forkserver" in methods else "spawn"
            pool = ProcessPoolExecutor(
                processes,
                mp_context=multiprocessing.get_context(start),
                initializer=exit_with_parent,  # no worker outlives the party
            )
            _process_pools[processes] = pool
            if not _exit_registered[0]:
                # in a process that multiprocessing started itself, the exit joins every child
                # before atexit runs, and closes queues first: shut the pools down (waiting for
                # their workers) before either, or the exit would wait for them forever
                multiprocessing.util.Finalize(None, _shutdown_and_wait, exitpriority=100)
                _exit_registered[0] = True
        return pool


def thread_pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of ``threads`` threads, kept for its life: for work that releases
    the interpreter lock (gmpy2's modular exponentiation of big lists)."""
    with _pool_lock:
        _forget_if_forked()
        pool = _thread_pools.get(threads)
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="vflink-worker")
            _thread_pools[threads] = pool
        return pool


def _drop_process_pool(processes: int, pool: ProcessPoolExecutor) -> None:
    """Forget a broken pool, so that the next call starts a fresh one."""
    with _pool_lock:
        if _process_pools.get(processes) is pool:
            del _process_pools[processes]


def _shutdown_and_wait() -> None:
    if os.getpid() == _pools_pid:  # a forked child's copies are its parent's to end
        for pool in list(_process_pools.values()):
            pool.shutdown(wait=True, cancel_futures=True)


@atexit.register
def _shutdown() -> None:
    if os.getpid() == _pools_pid:
        for pool in [*_process_pools.values(), *_thread_pools.values()]:
            pool.shutdown(wait=False, cancel_futures=True)


_main_lock = threading.Lock()


class MainHidden:
    """While worker processes start: hide the ``__main__`` module's file and spec, so that
    the workers (and the forkserver) do not import it.

    multiprocessing imports the parent's main module in every process it starts (as
    ``__mp_main__``), which runs a script's top level again when it has no
    ``if __name__ == "__main__":`` guard: the user's pipeline re-runs in each worker, which
    then fails trying to start workers of its own. vflink's workers run functions of its own
    modules only and never need the user's main module."""

    def __enter__(self) -> None:
        _main_lock.acquire()
        self.main = sys.modules.get("__main__")
        self.saved: dict[str, Any] = {}
        for name in ("__file__", "__spec__"):
            if self.main is not None and name in vars(self.main):
                self.saved[name] = vars(self.main)[name]
        if self.main is not None:
            self.main.__spec__ = None
            if "__file__" in self.saved:
                del self.main.__file__

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        try:
            if self.main is not None:
                for name, value in self.saved.items():
                    setattr(self.main, name, value)
        finally:
            _main_lock.release()


# -- running a batch of tasks ------------------------------------------------------------------


def map_processes(
    fn: Callable[..., T],
    argument_tuples: Sequence[tuple[Any, ...]],
    workers: Workers,
    *,
    default: int | None = None,
) -> list[T]:
    """``[fn(*args) for args in argument_tuples]``, in order: on the executor ``workers`` is
    (:func:`run_on_executor`), in this process for one worker or one task, otherwise on
    :func:`process_pool` (``fn`` must be importable from a module other than ``__main__``).

    ``default`` is what ``workers=None`` means (:func:`check_workers`).

    Raises
    ------
    concurrent.futures.process.BrokenProcessPool
        A worker process died; the pool is forgotten, and the next call starts a fresh one.
    RuntimeError
        A task failed on an executor (:func:`run_on_executor`).
    """
    if is_executor(workers):
        return run_on_executor(workers, fn, argument_tuples)
    processes = check_workers(workers, default=default)
    if processes <= 1 or len(argument_tuples) <= 1:
        return [fn(*args) for args in argument_tuples]
    pool = process_pool(processes)
    try:
        with MainHidden():  # submitting may start the processes
            futures = [pool.submit(fn, *args) for args in argument_tuples]
        return [f.result() for f in futures]
    except BrokenProcessPool:
        _drop_process_pool(processes, pool)
        raise


def map_threads(
    fn: Callable[..., T], argument_tuples: Sequence[tuple[Any, ...]], threads: int
) -> list[T]:
    """Like :func:`map_processes`, on :func:`thread_pool` (for work that releases the
    interpreter lock; never an executor)."""
    threads = check_workers(threads)
    if threads <= 1 or len(argument_tuples) <= 1:
        return [fn(*args) for args in argument_tuples]
    pool = thread_pool(threads)
    futures = [pool.submit(fn, *args) for args in argument_tuples]
    return [f.result() for f in futures]


def run_on_executor(
    executor: Any,
    step: Callable[..., T],
    tasks: Sequence[tuple[Any, ...]],
    shared: tuple[Any, ...] = (),
) -> list[T]:
    """``[step(*task, *shared) for task in tasks]`` on ``executor``, in order (the one place
    vflink submits work to an executor: PSI, Bloom encoding, all-pairs Dice comparison and
    the Paillier work of :mod:`vfl.crypto.parallel`).

    ``shared`` are arguments every task needs (the B filters of a comparison): a Dask client
    scatters them to every worker once (``broadcast=True``) instead of shipping them with each
    task; other executors receive them with each task. Dask tasks are impure (two chunks of
    random powers have equal arguments and must not be merged into one result) and carry
    their own arguments and result as one object each.

    Raises
    ------
    RuntimeError
        A task failed, or its workers all died past Dask's retries: the message names the
        step and the cause; the other tasks are cancelled.
    """
    common = scatter(executor, shared)
    futures = [submit(executor, step, task, common) for task in tasks]
    return gather(futures, failure_of(executor, step))


def scatter(executor: Any, shared: tuple[Any, ...]) -> tuple[Any, ...]:
    """``shared`` made ready for every task :func:`submit` sends to ``executor``: a Dask
    client scatters each value to every worker once (``broadcast=True``) and this returns
    their futures; other executors take the values as they are.

    Each scatter gets a fresh key (``hash=False``). Keys hashed from the content made two
    calls with the same filters share one: the release of the first call's futures could
    reach the scheduler after the second scattered them again, and the second call's tasks
    were then cancelled for "lost dependencies" (seen once under load)."""
    if is_dask(executor):
        return tuple(executor.scatter(value, broadcast=True, hash=False) for value in shared)
    return shared


def submit(
    executor: Any, step: Callable[..., Any], task: tuple[Any, ...], shared: tuple[Any, ...] = ()
) -> Any:
    """Submit ``step(*task, *shared)`` (``shared`` from :func:`scatter`) to ``executor``; its
    future's result, through :func:`gather`, is the step's. Dask tasks are impure and carry
    their arguments and result as one object each (see :func:`run_on_executor`)."""
    if is_dask(executor):
        return executor.submit(_run_packed, _Packed(step, task), *shared, pure=False)
    return executor.submit(step, *task, *shared)


def failure_of(executor: Any, step: Callable[..., Any]) -> str:
    """What :func:`gather` says when a task of ``step`` failed on ``executor``."""
    name = getattr(step, "__name__", step)
    return f"a task of {name} failed on the executor {type(executor).__name__}"


def gather(futures: Sequence[Any], failure: str) -> list[Any]:
    """The results of ``futures``, in order.

    Raises
    ------
    RuntimeError
        One failed (or its workers all died past Dask's retries): ``failure`` and the cause;
        the others are cancelled.
    """
    try:
        return [_unpacked(f.result()) for f in futures]
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


def _unpacked(result: Any) -> Any:
    """A task's result as its step returned it (a Dask task's comes back packed)."""
    return result.args[0] if isinstance(result, _Packed) else result


def _run_packed(packed: _Packed, *shared: Any) -> _Packed:
    """Run the packed task (with the scattered ``shared`` arguments after its own); the result
    comes back packed too (Dask would otherwise serialise a returned list item by item, as
    many frames as items): its ``args[0]``."""
    return _Packed(_run_packed, (packed.fn(*packed.args, *shared),))


# -- in a worker process -----------------------------------------------------------------------

ORPHANED_EXIT_STATUS = 70
"""The exit status of a worker whose parent died (EX_SOFTWARE: nobody waits for it)."""


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
        os._exit(ORPHANED_EXIT_STATUS)

    threading.Thread(target=watch, name="vflink-exit-with-parent", daemon=True).start()
