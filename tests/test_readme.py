"""The README's Python examples run, and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
# `print(...)  # {...}` or `# True False ...`: the output the README promises
PROMISED = re.compile(r"print\(.*\)\s+# (\{.*\}|(?:True|False)(?: True| False)*)$", flags=re.M)


def test_examples_run_and_print_what_they_promise() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the README has no Python example"
    assert len(PROMISED.findall(text)) >= 3
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(README), "exec"), {"__name__": "readme"})
        for promised in PROMISED.findall(block):
            assert promised in out.getvalue()


def test_readme_names_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text
    assert "make test" in text
