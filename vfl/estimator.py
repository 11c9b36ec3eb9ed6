"""The role runner: one set of roles, run in simulation or in deployment.

A federated estimator describes a job as ``{party: role}``, each role a callable that takes
that party's :class:`~vfl.federation.Federation` and returns the party's result. It builds
the roles once, from each party's own data only (a role object holds its party's frame and
nothing of another's), and this module runs them:

* simulation -- :func:`run_simulation` runs every role as a thread of one
  :class:`~vfl.federation.LocalFederation` and returns ``{party: result}`` and the transcript;
* deployment -- :func:`run_deployed` runs this party's role on its own federation (gRPC, say).

Roles return their results; the estimator reads them afterwards in its ``_collect``
(never written to from party threads), so the same estimator code path serves both.

Both runners label what a role shows with its party (:func:`vfl.progress.party_context`):
every progress bar and epoch line a role draws names it (``lab: encrypting values ...``), and
a deployed role's epoch lines go to its log.

:class:`FederatedEstimator` is the scikit-learn-style base: ``fit(parts, y, label_party=...)``
and ``fit_party(federation, frame, y, ...)`` both call :meth:`FederatedEstimator._fit_roles`
and :meth:`FederatedEstimator._collect`; subclasses implement those two.

**One estimator surface.** Every estimator of every family (vertical linear, split, transfer,
horizontal; ``tests/test_api.py`` enumerates them) speaks alike:

* the same name for the same concept: ``max_iter`` (epochs, rounds or iterations: the most
  passes training makes), ``hidden_layer_sizes`` (a network's hidden layers), ``random_state``
  (simulation randomness only, never the cryptography's; default None: drawn afresh, and
  where the parties must agree on it, agreed from each party's OS randomness), ``timeout``
  (seconds a simulated party waits for a message; default None: :func:`wait_limit`),
  ``verbose`` (0 quiet, 1 the epochs live);
* one way to ask for differential privacy, ``privacy=<object>``, whose class names the
  mechanism (:mod:`vfl.privacy.options`, :mod:`horizontal.privacy`), and one way to ask for
  a secure variant, ``protocol=`` (family-specific values, each documented by its estimator);
* ``save(path)`` and ``load(path)`` on every estimator (a folder of one file per party for
  the vertical families, whose parties never share a file; one file otherwise);
* after ``fit``: ``history_``, one record per epoch or round, and ``privacy_ledger_``, the
  :class:`~vfl.privacy.PrivacyLedger` of the fit (empty when no mechanism ran).

Keywords renamed on the way there are still accepted for a while, each with a
``FutureWarning`` (:func:`renamed_parameters`, :func:`deprecated_parameters`), as
scikit-learn deprecates; an old keyword beside the parameter replacing it is a ``TypeError``.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from vfl.federation.base import Federation, Transcript
from vfl.federation.local import LocalFederation, Scheduling
from vfl.progress import party_context

__all__ = [
    "DEFAULT_TIMEOUT",
    "SECONDS_PER_ROW",
    "FederatedEstimator",
    "Role",
    "deprecated_parameters",
    "fresh_seed",
    "labelled",
    "outside_stacklevel",
    "renamed_parameters",
    "replacement",
    "run_deployed",
    "run_simulation",
    "wait_limit",
]

DEFAULT_TIMEOUT = 600.0
"""Seconds a party of a simulated job waits for a message, at least, under ``timeout=None``."""
SECONDS_PER_ROW = 2e-3
"""What ``timeout=None`` adds per row of the largest table, with 2048-bit keys (scaled by the
cube of the key size): a vertical fit's setup encrypts every row once before the first message
of training, about 0.6 ms per row on two cores (1,000,000 rows: 10 minutes), so a third of
the allowance on two cores and margin on one."""

Role = Callable[[Federation], Any]


def wait_limit(timeout: float | None, rows: int = 0, key_bits: int = 2048) -> float:
    """The seconds a simulated party waits for a message: ``timeout`` if given, otherwise
    :data:`DEFAULT_TIMEOUT` plus :data:`SECONDS_PER_ROW` per row of the largest table, times
    ``(key_bits / 2048) ** 3`` (1,000,000 rows with 2048-bit keys: 2,600 s). A peer that is
    stuck is caught at once regardless (the in-process federation fails when every party
    waits); the limit only bounds a peer still computing."""
    if timeout is not None:
        return float(timeout)
    return DEFAULT_TIMEOUT + SECONDS_PER_ROW * rows * (key_bits / 2048) ** 3


def run_simulation(
    roles: Mapping[str, Role],
    *,
    timeout: float,
    record_payloads: bool = False,
    scheduling: Scheduling = "threads",
) -> tuple[dict[str, Any], Transcript]:
    """Run every role in one process (a thread each, or with ``scheduling="cooperative"`` all
    in turn on this thread: :class:`~vfl.federation.LocalFederation`);
    ``({party: result}, transcript)``."""
    federation = LocalFederation(
        timeout=timeout, record_payloads=record_payloads, scheduling=scheduling
    )
    results = federation.run({name: labelled(name, role) for name, role in roles.items()})
    return results, federation.transcript


def run_deployed(roles: Mapping[str, Role], federation: Federation) -> dict[str, Any]:
    """Run this party's role (``roles[federation.name]``) on its own federation."""
    name = federation.name
    if name not in roles:
        raise ValueError(f"party {name!r} has no role in this job (roles: {sorted(roles)})")
    return {name: labelled(name, roles[name], deployed=True)(federation)}


def labelled(party: str, role: Role, *, deployed: bool = False) -> Role:
    """``role``, run with its progress labelled ``party`` (:func:`vfl.progress.party_context`;
    ``deployed``: the party's own process, whose epoch lines go to its log)."""

    def run(federation: Federation) -> Any:
        with party_context(party, deployed=deployed):
            return role(federation)

    return run


def deprecated_parameters(
    owner: str,
    given: Mapping[str, Any],
    renamed: Mapping[str, str],
    *,
    passed: Collection[str] = (),
) -> dict[str, Any]:
    """The deprecated keyword arguments ``given`` to ``owner``, each announced with a
    ``FutureWarning`` naming its replacement (``renamed``: old name -> what to use, a text that
    starts with the name of the parameter replacing it, ``"max_iter"`` or
    ``'protocol="secagg" or ...'``).

    The one rule for a conflict: an old keyword given together with the parameter that
    replaces it (``passed``: the current keywords the caller gave) is a ``TypeError`` naming
    both -- never a silent choice of one, which could switch a secure protocol off
    (``protocol="masked", secure=False``). A name that is neither old nor current is the
    ``TypeError`` Python raises for an unknown keyword."""
    unknown = sorted(set(given) - set(renamed))
    if unknown:
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}")
    for old in given:
        new = replacement(renamed[old])
        if new in passed:
            raise TypeError(
                f"{owner}: pass {new}= or the deprecated {old}=, not both ({old}= is "
                f"{renamed[old]})"
            )
    for old in given:
        warnings.warn(
            f"{owner}({old}=...) is deprecated and will be removed; use {renamed[old]} instead",
            FutureWarning,
            stacklevel=outside_stacklevel(),
        )
    return dict(given)


def replacement(hint: str) -> str:
    """The parameter a deprecation ``hint`` names first (``'protocol="plain"'``: protocol)."""
    match = re.match(r"[A-Za-z_]\w*", hint)
    if match is None:
        raise ValueError(f"a deprecation hint must start with a parameter name, got {hint!r}")
    return match.group()


Function = TypeVar("Function", bound=Callable[..., Any])


def renamed_parameters(
    renamed: Mapping[str, str],
    translate: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    owner: str | None = None,
) -> Callable[[Function], Function]:
    """Decorate an estimator's ``__init__`` (or the function ``owner``) to accept the
    deprecated keywords ``renamed`` (old name -> what to use, as :func:`deprecated_parameters`
    takes them).

    The wrapper takes the old keywords out of the call, checks and announces them
    (:func:`deprecated_parameters`, against the current keywords the caller gave: an old one
    beside its replacement is a ``TypeError``), and calls ``__init__`` with what
    ``translate(old)`` returns (current name -> value) instead. ``__init__`` itself keeps
    scikit-learn's contract (parameters stored unchanged, no logic); ``get_params`` reports
    only current names, so ``clone`` and ``set_params`` keep working and a fitted model never
    carries the old spelling (scikit-learn keeps the old parameter beside the new one until
    removal; with renames this wide that would list every concept twice). The signature that
    :func:`inspect.signature` (and so scikit-learn) sees is ``__init__``'s own."""

    def decorate(function: Function) -> Function:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            old = {name: kwargs.pop(name) for name in list(kwargs) if name in renamed}
            if old:
                name = owner if owner is not None else type(args[0]).__name__
                deprecated_parameters(name, old, renamed, passed=set(kwargs))
                kwargs.update(translate(old))
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def outside_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the function calling this one that points
    at the first caller outside vflink's packages (``vfl``, ``horizontal``, ``transfer``,
    ``linkage``): the user's line, however many of vflink's frames lie between (a subclass's
    ``__init__``, a decorator, a job's factory)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and _inside(frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


@functools.cache
def _roots() -> tuple[str, ...]:
    import vfl

    base = os.path.dirname(os.path.dirname(os.path.abspath(vfl.__file__)))
    return tuple(
        os.path.join(base, package) + os.sep
        for package in ("vfl", "horizontal", "transfer", "linkage")
    )


def _inside(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_roots())


def fresh_seed() -> int:
    """A seed for ``random_state=None`` in simulation randomness (batch orders, module
    initialisation), from the OS; never for cryptography."""
    import numpy as np

    return int(np.random.SeedSequence().generate_state(1)[0])


class FederatedEstimator(BaseEstimator):  # type: ignore[misc]
    """Base of vflink's federated estimators (see the module docstring).

    Subclasses keep scikit-learn's contract: keyword-only hyperparameters stored unchanged in
    ``__init__``, validation in ``fit``, learned attributes ending in ``_``.
    """

    timeout: float | None

    def _fitted_ledger(self, ledger: Any, *, delta: float = 1e-5) -> Any:
        """The fit's ledger, kept as ``privacy_ledger_``: ``ledger`` when given, else a new
        :class:`~vfl.privacy.PrivacyLedger` (empty when no mechanism spends in it)."""
        if ledger is None:
            from vfl.privacy import PrivacyLedger

            ledger = PrivacyLedger(delta=delta)
        self.privacy_ledger_ = ledger
        return ledger

    def _wait_limit(self, rows: int) -> float:
        """:func:`wait_limit` of this estimator's ``timeout`` for a job on ``rows`` rows."""
        return wait_limit(self.timeout, rows)

    def _check_fitted(self, attribute: str = "parts_") -> None:
        if not getattr(self, attribute, None):
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this estimator."
            )

    def _simulate(
        self,
        roles: Mapping[str, Role],
        *,
        keep_payloads: bool = False,
        fit: bool = True,
        rows: int = 0,
        scheduling: Scheduling = "threads",
    ) -> dict[str, Any]:
        """Run ``roles`` in this process (on ``rows`` rows at most per party, for the wait
        limit; ``scheduling`` as :class:`~vfl.federation.LocalFederation` takes it); a fit's
        transcript is kept as ``transcript_``."""
        results, transcript = run_simulation(
            roles,
            timeout=self._wait_limit(rows),
            record_payloads=keep_payloads,
            scheduling=scheduling,
        )
        if fit:
            self.transcript_ = transcript
        return results
