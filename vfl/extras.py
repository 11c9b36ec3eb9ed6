"""Optional dependencies: which extra of ``pip install 'vflink[...]'`` brings each, and the
error that names it (as pandas' ``import_optional_dependency``).

``pip install vflink`` gives the core: record linkage and PSI (:mod:`linkage`), the Paillier
engine (:mod:`vfl.crypto`), the in-process federation and the vertical linear models
(:mod:`vfl.linear`). The rest comes with extras named for what they bring:

========  ==============================  =================================================
extra     brings                          for
========  ==============================  =================================================
torch     ``torch``                       split networks, transfer learning, the horizontal
                                          estimators and their audits
dp        ``opacus``                      record-level DP-SGD (:class:`horizontal.RecordDP`)
net       ``grpcio``                      the gRPC federation (``vflink party``)
plot      ``matplotlib``                  figures (:func:`linkage.plot_scores`, comparisons)
audit     ``fpylll``                      lattice reduction in the label-solve audit
dask      ``distributed``                 a party's work on its own Dask cluster
flower    ``flwr``                        :mod:`horizontal.flower`
========  ==============================  =================================================

Every public name imports without its extra; using it raises :class:`MissingExtraError` (an
``ImportError``) that names the extra to install. Two ways to get there:

* :func:`require` where the dependency is used (inside a function or at the top of ``fit``):
  the module, or the error;
* :func:`optional` at a module's top, for a dependency the module's *bodies* use throughout
  (torch in the neural estimators)::

      if TYPE_CHECKING:
          import torch
      else:
          torch = optional("torch", for_=__name__)

  It returns the module when it is installed (imported on the first lookup of one of its
  names, so that importing vflink does not import torch; a name looked up at import time, a
  base class or a default, imports it then). Otherwise it returns a stand-in whose names
  may be subclassed (``class Top(nn.Module)``) and named at import time (a default, a type
  alias), but raise :class:`MissingExtraError` when called or instantiated, and
  :class:`MissingExtraAttributeError` (an ``AttributeError``, so that ``hasattr`` and
  ``getattr(name, default)`` answer as for any missing attribute) when looked into. The
  module imports, and its first real use fails with the fix. This is the one piece of magic
  here, and it is why a module can keep ``torch.`` throughout its bodies: moving every
  ``import torch`` into the functions would scatter the same line over dozens of them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

__all__ = [
    "EXTRAS",
    "MissingExtraAttributeError",
    "MissingExtraError",
    "available",
    "optional",
    "require",
]

EXTRAS: dict[str, tuple[str, str]] = {
    "torch": ("torch", "torch"),
    "opacus": ("opacus", "dp"),
    "grpc": ("grpcio", "net"),
    "matplotlib": ("matplotlib", "plot"),
    "fpylll": ("fpylll", "audit"),
    "cysignals": ("cysignals", "audit"),
    "distributed": ("distributed", "dask"),
    "dask": ("distributed", "dask"),
    "flwr": ("flwr", "flower"),
}
"""``{top-level module: (distribution, extra)}`` for every optional dependency."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it.

    Attributes
    ----------
    name : str
        The missing module (``torch``), as :class:`ImportError` has it.
    extra : str
        The extra that brings it (``pip install 'vflink[<extra>]'``).
    """

    def __init__(self, module: str, *, for_: str) -> None:
        top = module.split(".")[0]
        distribution, extra = EXTRAS[top]
        super().__init__(
            f"{for_} needs {distribution}, which is not installed: pip install 'vflink[{extra}]'",
            name=top,
        )
        self.extra = extra


class MissingExtraAttributeError(AttributeError):
    """An attribute of a stand-in for a missing optional dependency was looked up (``torch.nn
    .functional`` without torch): an ``AttributeError``, so that ``hasattr`` and
    ``getattr(obj, name, default)`` treat it as any missing attribute, with the message of the
    :class:`MissingExtraError` it is raised from (its ``__cause__``).

    It cannot also be a :class:`MissingExtraError`: CPython refuses a class with both
    ``ImportError`` and ``AttributeError`` as bases (their instance layouts conflict), so
    ``except MissingExtraError`` does not catch it; catch ``(MissingExtraError,
    MissingExtraAttributeError)`` for both.

    Attributes
    ----------
    name : str
        The attribute looked up, as :class:`AttributeError` has it.
    extra : str
        The extra that brings the missing dependency.
    """

    def __init__(self, cause: MissingExtraError, *, name: str) -> None:
        super().__init__(str(cause), name=name)
        self.extra = cause.extra


def _missing(module: str, error: ModuleNotFoundError) -> str | None:
    """The optional top-level module whose absence caused ``error`` while importing
    ``module`` (itself, or an optional dependency of it), or None for anything else."""
    top = (error.name or module).split(".")[0]
    return top if top in EXTRAS else None


def _extra_top(module: str) -> str:
    """``module``'s top-level name, refused unless it is an optional dependency."""
    top = module.split(".")[0]
    if top not in EXTRAS:
        raise ValueError(f"{module!r} is not an optional dependency; known: {sorted(EXTRAS)}")
    return top


def require(module: str, *, for_: str) -> ModuleType:
    """``module``, imported; or :class:`MissingExtraError` naming the extra that brings it.

    Parameters
    ----------
    module : str
        A module of an optional dependency (``"torch"``, ``"matplotlib.pyplot"``).
    for_ : str
        What needs it, the subject of the message (``"SplitNNClassifier"``).

    Returns
    -------
    module

    Raises
    ------
    MissingExtraError
        When ``module`` (or an optional dependency it imports) is not installed:
        ``"SplitNNClassifier needs torch, which is not installed: pip install
        'vflink[torch]'"``. Any other failure to import propagates unchanged.
    """
    _extra_top(module)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = _missing(module, exc)
        if top is None:
            raise
        raise MissingExtraError(top, for_=for_) from None


def available(module: str) -> bool:
    """Whether the optional ``module`` is installed (found, without running its code)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def optional(module: str, *, for_: str) -> ModuleType:
    """``module`` if it is imported already; if it is installed but not imported yet, a
    stand-in that imports it when one of its names is first looked up; otherwise a stand-in
    that raises :class:`MissingExtraError` on use (see the module docstring).

    Deferred so that importing a module that names torch throughout its bodies does not
    import torch (1.5 s of CPU here) until something is built or trained with it: a Flower
    message that only asks a node for its profile, or ``import horizontal``, goes without.

    Parameters
    ----------
    module : str
        A module of an optional dependency (``"torch"``, ``"torch.nn"``).
    for_ : str
        What needs it, for the message: the importing module's ``__name__``.
    """
    top = _extra_top(module)
    loaded = sys.modules.get(module)
    if loaded is not None:
        return loaded
    if available(top):
        return _Deferred(module, for_=for_)
    return _Absent(module, missing=top, for_=for_)


class _Deferred(ModuleType):
    """Stands in for an installed module not imported yet: the first lookup of one of its names
    imports it (under the import system's lock, so threads may race to it), and each name
    looked up is kept, so that later lookups cost what they cost on the module itself. Where
    the import finds a dependency of it missing, it answers as :class:`_Absent`; any other
    failure of the import (a broken install) is raised at that first lookup, not when the
    module naming it is imported."""

    def __init__(self, module: str, *, for_: str) -> None:
        super().__init__(module)
        self._for = for_

    def __getattr__(self, name: str) -> Any:
        real: ModuleType
        try:
            real = require(self.__name__, for_=self._for)
        except MissingExtraError as exc:
            real = _Absent(self.__name__, missing=exc.name or self.__name__, for_=self._for)
        value = getattr(real, name)
        if not name.startswith("__"):
            self.__dict__[name] = value
        return value


class _Absent(ModuleType):
    """Stands in for a module that is not installed: each attribute a :class:`_StandIn`."""

    def __init__(self, module: str, *, missing: str, for_: str) -> None:
        super().__init__(module)
        self._missing = missing
        self._for = for_

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        stand_in = _StandIn(
            name,
            (),
            {"__module__": self.__name__, "_missing": self._missing, "_for": self._for},
        )
        setattr(self, name, stand_in)
        return stand_in


class _StandIn(type):
    """The type of a missing module's names: classes that can be subclassed and named but
    raise :class:`MissingExtraError` when called (instantiated) and
    :class:`MissingExtraAttributeError` when looked into."""

    _missing: str
    _for: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # the stand-in itself names the importing module; a subclass (``class Top(nn.Module)``)
        # names itself
        subject = cls._for if "_for" in vars(cls) else cls.__name__
        raise MissingExtraError(cls._missing, for_=subject)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") or name in ("_missing", "_for"):
            raise AttributeError(name)
        cause = MissingExtraError(cls._missing, for_=cls._for)
        raise MissingExtraAttributeError(cause, name=name) from cause
