"""The manual under docs/: what its strict build (``make docs``) cannot see.

``mkdocs build --strict`` already fails on a broken link or anchor, a page missing from the
navigation, an example file a tutorial embeds that does not exist, and an API reference that
does not resolve. Here: every example script has its tutorial, and the Python on the guide's
pages runs and prints what its comments promise (with the README's demo-key substitution,
see ``tests/test_readme.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docblocks import python_blocks, run_blocks

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# pages whose examples train for longer than a few seconds
SLOW_PAGES = {"guide/vertical-linear.md", "guide/transfer.md", "guide/split.md"}


def pages_with_python() -> list[str]:
    return sorted(
        str(page.relative_to(DOCS))
        for page in DOCS.rglob("*.md")
        if python_blocks(page.read_text(encoding="utf-8"))
        and page.relative_to(DOCS).parts[0] != "tutorials"  # they embed examples/
    )


def test_every_example_has_its_tutorial() -> None:
    embedded = set()
    for page in (DOCS / "tutorials").glob("*.md"):
        embedded |= set(re.findall(r'--8<-- "([^"]+)"', page.read_text(encoding="utf-8")))
    scripts = {str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.py")}
    scripts.add("examples/deploy/run_local.sh")
    assert scripts <= embedded, f"no tutorial embeds {sorted(scripts - embedded)}"


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(page, marks=pytest.mark.slow) if page in SLOW_PAGES else page
        for page in pages_with_python()
    ],
)
def test_the_guide_examples_run(page: str) -> None:
    path = DOCS / page
    run_blocks(python_blocks(path.read_text(encoding="utf-8")), path)
