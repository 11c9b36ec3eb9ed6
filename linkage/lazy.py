"""Lazy package exports (PEP 562): a name is imported from its module on first use.

The one helper of the house: ``linkage`` keeps it because it is the lowest layer, and every
package above (``vfl``, its subpackages, ``transfer``, ``horizontal``) imports it from here, so
``import vfl.federation`` or ``import linkage`` loads no pandas. It imports nothing of ours.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    namespace: dict[str, Any],
    exports: Mapping[str, str],
    submodules: Iterable[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``exports`` is imported from the
    module it maps to; each of ``submodules`` is ``package.<name>`` itself.

    Parameters
    ----------
    package
        The package's ``__name__``.
    namespace
        The package's ``globals()``: a name, once imported, is stored there, so the next access
        does not come back here.
    exports
        ``{name: module}``: where each exported name lives.
    submodules
        Names of submodules that ``package.<name>`` imports on first access.

    Returns
    -------
    tuple
        The module-level ``__getattr__`` and ``__dir__`` of PEP 562.

    Notes
    -----
    A name should not be both a function and a submodule of the package: importing the
    submodule rebinds the package attribute to the module.
    """
    modules = frozenset(submodules)

    def getattr_(name: str) -> Any:
        if name in modules:
            return importlib.import_module(f"{package}.{name}")
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *exports, *modules})

    return getattr_, dir_
