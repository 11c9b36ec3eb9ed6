"""Worker processes from scripts as users write them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
