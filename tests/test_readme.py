"""The README's Python examples run, in order, and print what their comments say.

The README shows the default, 2048-bit keys, which make its first example take the better part
of a minute. To keep the test short it runs with one documented substitution, ``DEMO_KEYS``:
demo keys of 512 bits (``insecure=True``; 1024 for federated transfer), whose
``SecurityWarning`` the test requires rather than hides. The README itself filters no warning.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docblocks import DEMO_KEYS, PROMISED, python_blocks, run_blocks

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_examples_run_and_print_what_they_promise() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = python_blocks(text)
    assert blocks, "the README has no Python example"
    assert len(PROMISED.findall(text)) >= 3
    run_blocks(blocks, README)


def test_the_first_example_is_lab_and_imaging_with_default_keys() -> None:
    first = python_blocks(README.read_text(encoding="utf-8"))[0]
    assert "make_lab_imaging_cohort" in first
    assert "linkage." in first and "VerticalLogisticRegression(" in first
    assert "key_bits" not in first and "insecure" not in first
    assert DEMO_KEYS[0].search(first), "the test's substitution no longer applies"


def test_the_readme_is_short_and_suppresses_no_warning() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400, "the rest belongs in the manual under docs/"
    assert "simplefilter" not in text and "catch_warnings" not in text


def test_readme_names_the_two_commands_and_the_install() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text
    assert "make test" in text
    assert 'pip install "vflink[all]"' in text


@pytest.mark.parametrize("target", sorted(set(LINK.findall(README.read_text(encoding="utf-8")))))
def test_readme_links_point_at_files(target: str) -> None:
    assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
