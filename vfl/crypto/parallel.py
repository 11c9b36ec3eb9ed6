"""Both cores for the Paillier work that splits: worker processes and GIL-free threads.

Measured on a 2-core machine, and chosen by that measurement:

* fixed-base encryption and Pippenger multi-exponentiation are loops of gmpy2 multiplications
  driven from Python, so they hold the interpreter lock: they run in worker **processes**,
  each of which builds and caches its own fixed-base table per key (about 0.7 s once);
* decryption is ``gmpy2.powmod_base_list`` modulo ``p**2`` and ``q**2``, which releases the
  lock: its two halves run in two **threads**, without copying anything.

The pools, the executor support and the worker checks are vflink's one executor layer,
:mod:`linkage.executors` (``forkserver`` workers that never outlive the party and never import
the caller's main module, so a script without an ``if __name__ == "__main__":`` guard runs
once). This module adds what is Paillier's: the default worker count (1, set by
:func:`set_default_workers`), :func:`local_workers` for private-key work, and the functions
the workers run. The executor layer is imported on first use, not with this module, so that
``import vfl.crypto`` stays light; it imports the standard library only, so a worker loads
neither pandas nor the linkage steps. Workers exchange only integers and int64 arrays with
this process; nothing crosses a party boundary here. ``workers=1`` (the default everywhere)
runs in the calling thread. Small batches stay in the caller, where starting workers would
cost more than it saves.

Beyond one machine, ``workers`` may instead be an executor the party already runs: a
``dask.distributed.Client`` (the ``dask`` extra) connected to the party's own cluster, or any
:class:`concurrent.futures.Executor`. The public-key work that splits (encryption's random
powers, re-randomisation, ``matrix @ ciphertexts``) is then submitted to it in as many chunks
as it has worker threads (:func:`linkage.executors.run_on_executor`); Dask tasks are impure
(``pure=False``), since two chunks of random powers have the same arguments and must not share
one result. Private-key work (CRT encryption, decryption) stays in this process: no cluster
worker holds a key's factors. Results do not depend on where they ran: the same ciphertext
arithmetic.

.. warning::
   The cluster must be inside the party's own trust boundary. What it computes is as
   sensitive as the data: an encryption's random power decrypts that ciphertext without the
   key (``c * r**-1 = 1 + m n``), and the party's feature rows and, in the secret-shared
   protocol, its shares travel as exponents. ``vflink party`` reaches another host's
   scheduler only over ``tls://`` (:func:`vfl.app.scheduler.connect_scheduler`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from linkage.lazy import lazy_exports
from vfl.crypto.kernels import FixedBaseTable, bin_products, multiexp_big, multiexp_rows

if TYPE_CHECKING:
    from linkage.executors import Workers, executor_slots, exit_with_parent, is_executor

__all__ = [
    "Workers",
    "bin_products_worker",
    "check_workers",
    "default_workers",
    "executor_slots",
    "exit_with_parent",
    "is_executor",
    "local_workers",
    "map_processes",
    "map_threads",
    "multiexp_big_worker",
    "multiexp_rows_worker",
    "random_powers_worker",
    "set_default_workers",
    "split",
]

T = TypeVar("T")

# the executor layer's own names, imported on first use (import vfl.crypto stays light)
__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        name: "linkage.executors"
        for name in ("Workers", "executor_slots", "exit_with_parent", "is_executor")
    },
)

_DEFAULT_WORKERS = 1


def set_default_workers(workers: int) -> None:
    """Default number of workers for encryption, decryption and ``matrix @ vector``."""
    global _DEFAULT_WORKERS
    _DEFAULT_WORKERS = check_workers(workers)


def default_workers() -> int:
    """The current default number of workers (1 unless :func:`set_default_workers` changed it)."""
    return _DEFAULT_WORKERS


def check_workers(workers: Workers) -> int:
    """Validate a ``workers`` argument and return how many tasks may run at once
    (:func:`linkage.executors.check_workers`; None means :func:`default_workers`).

    Raises
    ------
    ValueError
        Neither a positive integer nor an executor.
    """
    from linkage.executors import check_workers as check

    return check(workers, default=_DEFAULT_WORKERS)


def local_workers(workers: Workers) -> int:
    """The count of this machine's workers for private-key work, which never goes to an
    executor: an executor counts as 2 (the two halves of a CRT computation)."""
    from linkage.executors import is_executor

    return 2 if is_executor(workers) else check_workers(workers)


def split(items: Sequence[T], parts: int) -> list[Sequence[T]]:
    """``items`` cut into ``parts`` contiguous, nearly equal chunks (none empty)."""
    parts = max(1, min(parts, len(items)))
    bounds = np.linspace(0, len(items), parts + 1).astype(int)
    return [items[a:b] for a, b in itertools.pairwise(bounds.tolist())]


def map_processes(
    fn: Callable[..., T], argument_tuples: Sequence[tuple[Any, ...]], workers: Workers
) -> list[T]:
    """``[fn(*args) for args in argument_tuples]`` on ``workers`` processes (None:
    :func:`default_workers`), or on the executor ``workers`` is, in order
    (:func:`linkage.executors.map_processes`)."""
    from linkage.executors import map_processes as run

    return run(fn, argument_tuples, workers, default=_DEFAULT_WORKERS)


def map_threads(
    fn: Callable[..., T], argument_tuples: Sequence[tuple[Any, ...]], workers: int
) -> list[T]:
    """Like :func:`map_processes`, on this machine's threads (for work that releases the
    interpreter lock; never an executor: :func:`linkage.executors.map_threads`)."""
    from linkage.executors import map_threads as run

    return run(fn, argument_tuples, workers)


# -- worker-side functions (top level, so that worker processes can import them) ---------------

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


def bin_products_worker(
    ciphertexts: Sequence[Any], codes: np.ndarray[Any, Any], width: int, modulus: int
) -> list[list[Any]]:
    """In a worker: :func:`~vfl.crypto.kernels.bin_products`."""
    return bin_products(ciphertexts, codes, width, modulus)


def multiexp_big_worker(bases: Sequence[Any], exponents: Sequence[int], modulus: int) -> Any:
    """In a worker: :func:`~vfl.crypto.kernels.multiexp_big` (non-negative exponents)."""
    return multiexp_big(bases, exponents, modulus)


def multiexp_rows_worker(
    bases: Sequence[Any], rows: Sequence[np.ndarray[Any, Any]], modulus: int
) -> list[Any]:
    """In a worker: :func:`~vfl.crypto.kernels.multiexp_rows` (signed exponents)."""
    return multiexp_rows(bases, rows, modulus)
