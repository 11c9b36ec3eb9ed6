"""The one executor layer (linkage.executors): what a workers argument means, this machine's
pools, executors, and that importing it (as every worker process does) loads no pandas."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest

from linkage import executors
from linkage.executors import (
    check_workers,
    is_dask,
    is_executor,
    map_processes,
    map_threads,
    run_on_executor,
    thread_pool,
)


def test_the_layer_and_the_crypto_workers_import_no_pandas() -> None:
    code = (
        "import sys, linkage.executors, vfl.crypto.parallel as p; p.check_workers(2); "
        "print(','.join(m for m in ('pandas', 'linkage.encoding', 'linkage.psi') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_linkage_and_the_crypto_use_the_one_layer() -> None:
    import linkage.workers
    from vfl.crypto import parallel

    for name in ("check_workers", "executor_slots", "exit_with_parent", "is_executor"):
        assert getattr(linkage.workers, name) is getattr(executors, name)
    for name in ("executor_slots", "exit_with_parent", "is_executor"):
        assert getattr(parallel, name) is getattr(executors, name)


def test_a_workers_argument_counts_processes_or_an_executors_slots() -> None:
    cores = os.cpu_count() or 1
    assert check_workers(None) == cores  # the linkage steps: every core
    assert check_workers(None, default=1) == 1  # the Paillier work's default
    assert check_workers(1) == 1
    assert check_workers(10**6) == min(cores, executors.MAX_PROCESSES)
    with ThreadPoolExecutor(max_workers=3) as pool:
        assert is_executor(pool) and not is_dask(pool)
        assert check_workers(pool) == 3
    assert not is_executor(2) and not is_executor(None)
    for bad in (0, -1, True, "two", 2.0):
        with pytest.raises(ValueError, match=r"a positive integer or an executor .* got "):
            check_workers(bad)


def test_an_executor_runs_the_tasks_in_order_with_the_shared_arguments() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        assert run_on_executor(pool, pow, [(2,), (3,), (4,)], shared=(5,)) == [32, 243, 1024]
        assert map_processes(pow, [(2, 3), (3, 2)], pool) == [8, 9]


def test_a_failed_task_names_the_step_the_executor_and_the_cause() -> None:
    with (
        ThreadPoolExecutor(max_workers=2) as pool,
        pytest.raises(
            RuntimeError,
            match="a task of sqrt failed on the executor ThreadPoolExecutor: ValueError: math",
        ),
    ):
        run_on_executor(pool, math.sqrt, [(4.0,), (-1.0,)])


def test_one_worker_or_one_task_runs_in_this_process() -> None:
    here = os.getpid()
    assert map_processes(os.getpid, [(), ()], 1) == [here, here]
    assert map_processes(os.getpid, [()], 2) == [here]
    assert map_threads(pow, [(2, 10), (3, 3)], 2) == [1024, 27]
    assert thread_pool(2) is thread_pool(2)  # kept for the life of the process


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_use_its_parents_pools() -> None:
    parents = thread_pool(2)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report, then leave without pytest's teardown
        os.close(read)
        os.write(write, b"own" if thread_pool(2) is not parents else b"shared")
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    os.waitpid(child, 0)
    assert answer == "own"
    assert thread_pool(2) is parents


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores for two processes")
def test_worker_processes_run_in_order_and_a_broken_pool_is_replaced() -> None:
    tasks = [(2, k) for k in range(8)]
    assert map_processes(pow, tasks, 2) == [2**k for k in range(8)]
    pool = executors.process_pool(2)
    assert executors.process_pool(2) is pool  # started once, kept
    assert os.getpid() not in map_processes(os.getpid, [(), (), (), ()], 2)
    with pytest.raises(BrokenProcessPool):
        map_processes(os._exit, [(1,), (1,)], 2)  # the workers die mid-task
    assert executors.process_pool(2) is not pool  # the broken pool was forgotten ...
    assert map_processes(pow, tasks, 2) == [2**k for k in range(8)]  # ... and a fresh one works
