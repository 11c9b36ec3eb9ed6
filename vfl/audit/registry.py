"""The one registry of audits: name -> :class:`~vfl.audit.base.Audit` class, for every family.

The vertical, split, transcript and linkage audits live in :mod:`vfl.audit` and register when
their module is imported (:func:`get_audit` and :func:`audits` import them on first use).
The transfer and horizontal audits live in their own packages (:mod:`transfer.audit`,
:mod:`horizontal.attacks`), which stand *above* ``vfl``: ``vfl`` must not import them. They
register themselves when their module is imported, and the registry finds them through the
Python entry points of group :data:`ENTRY_POINT_GROUP` (``vflink.audits``), which
``pyproject.toml`` declares one per audit (``name = "module:Class"``) -- the plug-in pattern of
pytest or Flower: the families fill the registry, nothing in ``vfl`` names them in code.

Where the package metadata is missing (a source tree that was never installed, or installed
before the entry points were declared), the registry holds ``vfl``'s own audits only: it does
not guess the packages above it by name. :func:`audits` says so in the log and
:func:`get_audit` in its error, with the fix (:data:`MISSING_PLUGINS`).

As Opacus' ``create_accountant``, an unknown name raises a ``ValueError`` that lists the
valid ones.
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import EntryPoint, entry_points

from vfl.audit.base import Audit

__all__ = [
    "AUDITS",
    "ENTRY_POINT_GROUP",
    "MISSING_PLUGINS",
    "audits",
    "get_audit",
    "register_audit",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "vflink.audits"
"""The entry-point group through which packages above ``vfl`` (and third parties) add audits."""

BUILTIN_MODULES = (
    "vfl.audit.labels",
    "vfl.audit.scores",
    "vfl.audit.split",
    "vfl.audit.transcript",
    "vfl.audit.linkage",
    "vfl.audit.boost",
)
"""``vfl``'s own audit modules, imported on the registry's first use."""

MISSING_PLUGINS = (
    f"the {ENTRY_POINT_GROUP} entry points are not installed, so only vfl's own audits are "
    "known: pip install -e . (or the package) to add the transfer and horizontal ones"
)
"""What the log and :func:`get_audit`'s error say when no entry point of
:data:`ENTRY_POINT_GROUP` is installed."""

AUDITS: dict[str, type[Audit]] = {}
"""The registry: name -> audit class."""

_loaded: set[str] = set()


def register_audit(cls: type[Audit]) -> type[Audit]:
    """Class decorator: add an audit to the registry under its ``name``.

    Raises
    ------
    ValueError
        The class has no name, or another class is registered under it already.
    TypeError
        ``cls`` is not an :class:`Audit` subclass.
    """
    if not (isinstance(cls, type) and issubclass(cls, Audit)):
        raise TypeError(f"only Audit subclasses can be registered, got {cls!r}")
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a name to be registered")
    known = AUDITS.get(cls.name)
    if known is not None and _qualified(known) != _qualified(cls):  # a reload replaces itself
        raise ValueError(
            f"the audit name {cls.name!r} is taken by {_qualified(known)}; give "
            f"{_qualified(cls)} another name"
        )
    AUDITS[cls.name] = cls
    return cls


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def get_audit(name: str) -> type[Audit]:
    """The audit class registered as ``name``, from any family.

    Raises
    ------
    ValueError
        No audit of that name: the message lists every valid name.
    ImportError
        The audit exists but its module cannot be imported (an optional dependency such as
        torch is missing): the message says which.
    """
    if name not in AUDITS:
        _load_builtin()
    if name not in AUDITS:
        _load_plugins(only=name)
    if name not in AUDITS:
        _load_plugins()  # every plug-in, so that the error lists every valid name
        hint = "" if _entry_points() else f" ({MISSING_PLUGINS})"
        raise ValueError(f"unknown audit {name!r}; known: {sorted(AUDITS)}{hint}")
    return AUDITS[name]


def audits() -> dict[str, type[Audit]]:
    """Every registered audit, by name (sorted), after loading ``vfl``'s own and every
    installed plug-in; a plug-in whose module cannot be imported (torch missing) is left
    out with a warning in the log."""
    _load_builtin()
    _load_plugins()
    return {name: AUDITS[name] for name in sorted(AUDITS)}


def _load_builtin() -> None:
    for module in BUILTIN_MODULES:
        if module not in _loaded:
            importlib.import_module(module)
            _loaded.add(module)


def _entry_points() -> list[EntryPoint]:
    return list(entry_points(group=ENTRY_POINT_GROUP))


def _load_plugins(only: str | None = None) -> None:
    """Load the entry points of :data:`ENTRY_POINT_GROUP` (the one named ``only``, or all);
    without any, log :data:`MISSING_PLUGINS` (see the module docstring)."""
    points = _entry_points()
    if not points:
        logger.warning(MISSING_PLUGINS)
        return
    for point in points:
        if (only is not None and point.name != only) or point.name in AUDITS:
            continue
        try:
            loaded = point.load()
        except ImportError as error:
            if only is not None:
                raise ImportError(
                    f"the audit {point.name!r} lives in {point.value}, which cannot be "
                    f"imported: {error} (install the extra it needs, e.g. vflink[torch])"
                ) from error
            logger.warning("audit %r is unavailable: %s", point.name, error)
            continue
        if isinstance(loaded, type) and issubclass(loaded, Audit):
            if loaded.name != point.name:
                raise ValueError(
                    f"entry point {point.name!r} of group {ENTRY_POINT_GROUP!r} names "
                    f"{_qualified(loaded)}, whose name is {loaded.name!r}"
                )
            register_audit(loaded)
