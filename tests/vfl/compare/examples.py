"""The runnable examples, loaded as modules (their ``main`` called with arguments)."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.parties import ROOT

SEED = 0


def example(name: str) -> ModuleType:
    """``examples/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", ROOT / "examples" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
