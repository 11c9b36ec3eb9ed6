"""Finding the families: each fills the registries of :mod:`vfl.registry` (its jobs, its
comparison rows) from a ``register()`` function of its own, named by an entry point.

The families declare themselves in ``pyproject.toml``::

    [project.entry-points."vflink.families"]
    vertical = "vfl.jobs:register"
    transfer = "transfer.jobs:register"
    horizontal = "horizontal.jobs:register"

so a package of one's own adds a family the same way, with no edit here. Without installed
metadata (running from a source tree that was never installed) the built-in list
:data:`BUILTIN` is used instead. The application imports no family by name: a family that
cannot be imported (a missing optional dependency) is skipped, with the reason.
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points
from typing import Any

from vfl.registry import Job
from vfl.registry import get_job as _registered_job

__all__ = ["BUILTIN", "GROUP", "get_job", "load_families"]

logger = logging.getLogger(__name__)

GROUP = "vflink.families"
"""The entry-point group the families declare their ``register()`` in."""

BUILTIN = {
    "vertical": "vfl.jobs:register",
    "transfer": "transfer.jobs:register",
    "horizontal": "horizontal.jobs:register",
}
"""The families of this distribution, used when its entry points are not installed."""

_loaded: dict[str, str] | None = None


def _declared() -> dict[str, str]:
    """``{family: "module:function"}`` from the installed entry points, else :data:`BUILTIN`."""
    found = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    if not found:
        return dict(BUILTIN)
    # a fixed order (this distribution's first, then the others by name): the registries, and
    # so the comparison's rows within a family, come out the same in every run
    order = [f for f in BUILTIN if f in found] + sorted(set(found) - set(BUILTIN))
    return {f: found[f] for f in order}


def _load(value: str) -> Any:
    module, _, attribute = value.partition(":")
    target: Any = importlib.import_module(module)
    for part in filter(None, attribute.split(".")):
        target = getattr(target, part)
    return target


def load_families(*, reload: bool = False) -> dict[str, str]:
    """Call every family's ``register()`` (once per process, unless ``reload``); returns the
    families that could not be loaded, with the reason (an optional dependency missing)."""
    global _loaded
    if _loaded is not None and not reload:
        return dict(_loaded)
    skipped: dict[str, str] = {}
    for family, value in _declared().items():
        try:
            register = _load(value)
        except ImportError as exc:
            skipped[family] = f"cannot be imported ({exc})"
            logger.warning("the %s family is skipped: %s", family, skipped[family])
            continue
        register()
    _loaded = skipped
    return dict(skipped)


def get_job(name: Any) -> Job:
    """The job named ``name`` among every family's (``ValueError`` listing the known names
    otherwise)."""
    load_families()
    return _registered_job(name)
