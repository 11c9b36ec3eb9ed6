"""Worker processes from scripts as users write them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import HAS_PROC, command_line, descendants, running

SCRIPT = """
import warnings
warnings.simplefilter("ignore")
from vfl.crypto import generate_paillier_keypair
print("top level runs", flush=True)
public, private = generate_paillier_keypair(1024, insecure=True)
ciphertexts = public.raw_encrypt(list(range(300)), workers=2)
print("sum", sum(int(v) for v in private.raw_decrypt(ciphertexts)), flush=True)
"""


def test_a_script_without_a_main_guard_runs_once_with_worker_processes(tmp_path: Path) -> None:
    script = tmp_path / "pipeline.py"  # no `if __name__ == "__main__":`, as README snippets
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["top level runs", f"sum {sum(range(300))}"]
    assert "Traceback" not in done.stderr
    assert "leaked semaphore" not in done.stderr


POOL = """
import sys, time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from {module} import exit_with_parent
if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    pool = ProcessPoolExecutor(2, mp_context=context, initializer=exit_with_parent)
    busy = [pool.submit(time.sleep, 60) for _ in range(3)]  # one worker busy, one idle
    lock = context.Lock()  # starts the resource tracker
    print("up", flush=True)
    time.sleep(120)
"""


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC, reason="walks Linux's /proc")
@pytest.mark.parametrize("module", ["vfl.crypto.parallel", "linkage.workers"])
def test_no_worker_forkserver_or_tracker_outlives_a_killed_parent(
    tmp_path: Path, module: str
) -> None:
    """Both pools' initializer: after ``kill -9`` of the process that made the pool, its
    workers (busy or idle), the forkserver and the resource tracker are gone within 5 s."""
    script = tmp_path / "pool.py"
    script.write_text(POOL.format(module=module))
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    below: dict[int, str] = {}
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "up"
        deadline = time.monotonic() + 30
        while len(below) < 4:  # the tracker, the forkserver and two workers
            assert time.monotonic() < deadline, below
            time.sleep(0.1)
            below = descendants(parent.pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        killed = time.monotonic()
        while any(running(p, s) for p, s in below.items()) and time.monotonic() < killed + 5:
            time.sleep(0.1)
        left = {p: command_line(p) for p, s in below.items() if running(p, s)}
        assert not left, f"alive 5 s after their parent's death: {left}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
        for pid, started in below.items():  # what a failed test left behind
            if running(pid, started):
                os.kill(pid, signal.SIGKILL)
