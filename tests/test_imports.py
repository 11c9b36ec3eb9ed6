"""The runtime and the crypto stay light: importing them loads no pandas, scikit-learn or
linkage module (checked in a fresh interpreter) -- only the ``linkage`` package itself, whose
``__init__`` imports nothing heavy, and its :mod:`linkage.lazy`, the one lazy-export helper."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("pandas", "sklearn", "torch", "dp_accounting")
LIGHT_LINKAGE = ("linkage", "linkage.lazy")


@pytest.mark.parametrize(
    "module",
    [
        "vfl",
        "vfl.federation",
        "vfl.federation.local",
        "vfl.federation.messages",
        "vfl.crypto",
        "vfl.crypto.masked",
        "vfl.training",
        "vfl.privacy",
        "vfl.persistence",
        "vfl.extras",
        "linkage",
    ],
)
def test_light_modules_do_not_import_heavy_ones(module: str) -> None:
    code = (
        f"import sys, {module}; print(','.join(m for m in sys.modules if m in {HEAVY!r} or "
        f"(m.startswith('linkage.') and m not in {LIGHT_LINKAGE!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"{module} imported {result.stdout.strip()}"


def test_lazy_exports_resolve() -> None:
    import vfl
    import vfl.federation

    assert vfl.VerticalLogisticRegression.__name__ == "VerticalLogisticRegression"
    assert vfl.federation.LocalFederation.__name__ == "LocalFederation"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = vfl.nope  # type: ignore[attr-defined]


def test_linkage_exports_its_names_and_submodules_lazily() -> None:
    import linkage

    assert linkage.match_many.__module__ == "linkage.multiparty"
    assert linkage.threshold.__name__ == "linkage.threshold"  # a submodule, on first access
    assert {"encode", "psi", "lazy"} <= set(dir(linkage))
    with pytest.raises(AttributeError, match="module 'linkage' has no attribute 'nope'"):
        _ = linkage.nope  # type: ignore[attr-defined]


def test_vfl_align_is_the_function_whatever_was_imported_before() -> None:
    import vfl.alignment
    from vfl import align

    assert callable(align) and align is vfl.alignment.align
    assert vfl.federation.wire.__name__ == "vfl.federation.wire"


NEURAL = (
    "horizontal.flower_local",
    "horizontal.client",
    "horizontal.local",
    "horizontal.estimator",
    "transfer.estimator",
)
"""Modules that name torch throughout their bodies (``vfl.extras.optional``): a Flower
message that only asks a node for its profile imports the first without torch."""


def test_modules_naming_torch_import_it_on_first_use_as_the_module_itself() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("flwr")
    code = f"""
import sys, importlib
for name in {NEURAL!r}:
    importlib.import_module(name)
print("torch" in sys.modules)
import horizontal.local as local
tensor = local.torch.ones(2)
import torch
print(local.torch.ones is torch.ones, local.nn.Module is torch.nn.Module)
print(type(tensor) is torch.Tensor)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "True", "True"]
