"""A party's PSI and encoding work, cut into chunks for the executor layer.

ECDH PSI's blinding, the unbalanced PSI's OPRF evaluations and Bloom encoding are independent
per item: :func:`map_chunks` cuts a batch into chunks and runs them

* in this process, for ``workers=1`` or a batch under :data:`PARALLEL_MIN_POINTS` (starting
  workers would cost more than it saves);
* on this machine's worker processes (``workers=N``), or on an executor the party already
  runs (a ``dask.distributed.Client`` connected to its own cluster, or any
  :class:`concurrent.futures.Executor`): both through :mod:`linkage.executors`, the one
  executor layer, which also keeps every worker from outliving the party.

Each task carries the party's secret with its chunk (workers keep nothing between tasks), so
an executor must be the party's own: nothing here crosses an institution's boundary. A task
that fails on an executor raises :class:`RuntimeError` naming the step. If this machine's own
pool breaks (a killed worker), the batch runs in this process with a :class:`RuntimeWarning`.

The executor names this module exported before :mod:`linkage.executors` existed
(:func:`check_workers`, :func:`run_on_executor`, ...) are that module's, imported here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from linkage.executors import (
    Workers,
    check_workers,
    executor_slots,
    exit_with_parent,
    gather,
    is_dask,
    is_executor,
    map_processes,
    run_on_executor,
)

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
    otherwise a few chunks per worker (at most ``max_chunk`` items each) on ``workers``
    (None: every core)."""
    slots = check_workers(workers)
    if (slots == 1 and not is_executor(workers)) or len(items) < PARALLEL_MIN_POINTS:
        return [step(secret, items, 0, *constants)]
    size = -(-len(items) // (4 * slots))  # a few chunks per worker
    if max_chunk is not None:
        size = min(size, max_chunk)
    rows = items.iloc if hasattr(items, "iloc") else items  # a frame's rows by position
    tasks = [(secret, rows[i : i + size], i, *constants) for i in range(0, len(items), size)]
    try:
        return map_processes(step, tasks, workers if is_executor(workers) else slots)
    except BrokenProcessPool:
        warnings.warn(
            "PSI worker processes failed (a worker died); continuing in this process",
            RuntimeWarning,
            stacklevel=3,
        )
        return [step(secret, items, 0, *constants)]
