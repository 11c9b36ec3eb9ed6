"""The registries the families fill: the jobs ``vflink party`` can run and the rows of the
partition-scheme comparison.

Each family (the vertical models of :mod:`vfl`, :mod:`transfer`, :mod:`horizontal`) registers
what it offers from a module of its own (``vfl.jobs``, ``transfer.jobs``, ``horizontal.jobs``),
named by an entry point of the ``vflink.families`` group; the application (:mod:`vfl.app`)
loads those and reads the registries, so that neither the registries nor any family imports
the application, and the application imports no family by name. A new learner is a
:func:`register_job` call in its family, not an edit of the party runner.

This module is light: it imports nothing heavier than the standard library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from vfl.comparison.base import Context, SchemeResult

__all__ = [
    "FAMILIES",
    "JOBS",
    "RUNNERS",
    "SCHEMES",
    "SCHEME_MODULES",
    "Job",
    "SchemeModule",
    "SchemeSpec",
    "get_job",
    "register_job",
    "register_scheme_module",
    "scheme",
]


def present_outputs(estimator: Any, outputs: np.ndarray[Any, Any]) -> dict[str, Any]:
    """The default :attr:`Job.present`: the outputs as the ``predicted`` column."""
    return {"predicted": outputs}


RUNNERS = ("vertical", "transfer")
"""The party runners of the application a job may name (:attr:`Job.runner`)."""


@dataclass(frozen=True)
class Job:
    """A learner ``vflink party`` can run (``[job] model = "<name>"`` in the config).

    Attributes
    ----------
    name : str
        Its name in ``[job] model = "..."``.
    make : callable
        ``make(**params)``: the estimator (with ``fit_party``/``predict_party``/``parts_``),
        from ``[job.params]``.
    evaluate : callable
        ``evaluate(estimator, labels, outputs)``: ``(metrics, columns)`` from the held-out
        rows' true labels and what the label party's ``predict_party`` returned; ``columns``
        are added to ``predictions.csv``.
    metrics : tuple of str
        The names ``evaluate`` reports (each None in ``metrics.json`` when there are no
        held-out rows).
    present : callable
        ``present(estimator, outputs)``: the ``predictions.csv`` columns of rows without
        labels (``vflink party --predict``); by default the outputs as ``predicted``.
    protocols : bool
        Whether the learner takes ``protocol=`` and ``coordinator=`` (the vertical linear
        models; ``vflink party`` then defaults them from the config).
    runner : {"vertical", "transfer"}
        Which of the application's party runners drives it: ``"vertical"`` (align, split,
        train, score; scoring new rows with ``--predict``) or ``"transfer"`` (the source
        labels every row, the target keeps its own).
    """

    name: str
    make: Callable[..., Any]
    evaluate: Callable[
        [Any, np.ndarray[Any, Any], np.ndarray[Any, Any]], tuple[dict[str, Any], dict[str, Any]]
    ]
    metrics: tuple[str, ...] = ()
    present: Callable[[Any, np.ndarray[Any, Any]], dict[str, Any]] = field(default=present_outputs)
    protocols: bool = True
    runner: str = "vertical"

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise ValueError(
                f"job {self.name!r}: runner must be one of {list(RUNNERS)}, got {self.runner!r}"
            )


JOBS: dict[str, Job] = {}
"""The job registry: name -> job (filled by the families' ``register()``)."""


def register_job(job: Job) -> None:
    """Add (or replace) a job in the registry."""
    JOBS[job.name] = job


def get_job(name: Any) -> Job:
    """The job named ``name`` (``ValueError`` listing the known names otherwise)."""
    job = JOBS.get(name) if isinstance(name, str) else None
    if job is None:
        raise ValueError(f"model must be one of {sorted(JOBS)}, got {name!r}")
    return job


# -- the comparison's rows ---------------------------------------------------------------------

FAMILIES = ("centralised", "alone", "vertical", "split", "transfer", "horizontal")
"""The families of schemes, in the order the comparison's table lists them."""


@dataclass(frozen=True)
class SchemeModule:
    """A module of comparison rows (its :func:`scheme` registrations run when it is imported),
    with the optional packages it needs; the comparison skips it, with the reason, when one
    is missing."""

    label: str
    """What the comparison calls it when it is skipped (``"split"``, ``"transfer"``...)."""
    module: str
    needs: tuple[str, ...] = ()


SCHEME_MODULES: dict[str, SchemeModule] = {}
"""The modules of comparison rows, by label, in registration order."""


def register_scheme_module(label: str, module: str, *, needs: tuple[str, ...] = ()) -> None:
    """Register ``module`` (imported by the comparison, not now) as holding rows."""
    SCHEME_MODULES[label] = SchemeModule(label, module, tuple(needs))


@dataclass(frozen=True)
class SchemeSpec:
    """One registered row of the comparison."""

    name: str
    family: str
    run: Callable[[Context], SchemeResult]
    module: str = ""
    """The module that registered it (``vfl.comparison.split``...)."""


SCHEMES: dict[str, SchemeSpec] = {}
"""Every registered scheme, by name, in registration order."""


def scheme(
    name: str, family: str, **options: Any
) -> Callable[[Callable[..., SchemeResult]], Callable[..., SchemeResult]]:
    """Register ``run(ctx, **options)`` as the scheme ``name`` of ``family`` (the same
    function may be registered several times with different options)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; families: {FAMILIES}")

    def register(run: Callable[..., SchemeResult]) -> Callable[..., SchemeResult]:
        if name in SCHEMES:
            raise ValueError(f"scheme {name!r} is registered twice")

        def bound(ctx: Context) -> SchemeResult:
            result = run(ctx, **options)
            result.scheme, result.family = name, family
            return result

        SCHEMES[name] = SchemeSpec(name, family, bound, run.__module__)
        return run

    return register
