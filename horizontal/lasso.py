"""Federated sparse regression: the Lasso (and the elastic net) by proximal gradient over
hospitals that hold the same columns for different patients, with secure aggregation and
differential privacy.

The objective is scikit-learn's, over the pooled rows (``N`` of them)::

    (1 / 2N) ||y - X b - c||^2 + alpha (l1_ratio ||b||_1 + (1 - l1_ratio) / 2 ||b||^2)

The protocol (tags under ``lasso/``):

1. **setup** -- each client sends its row count and column names, and (with
   ``fit_intercept``) its column sums and sums of squares and its target's sum; the server
   checks the columns, refuses a column that is constant over every client, and sends the
   pooled means (the intercept is handled by centring). Each client then sends the largest
   eigenvalue of its centred ``X_k^T X_k`` (one number): their sum over ``N`` bounds the
   gradient's Lipschitz constant ``L``, which fixes the step ``1 / L`` without pooling any
   data;
2. **rounds** -- the server sends the point ``b``; each client returns its gradient
   ``X_k^T (X_k b - y_k)`` (in the clear, or through :mod:`horizontal.secagg`, when the
   server learns only the sum); the server takes the proximal step (soft-thresholding,
   ``fista=True`` with Nesterov's momentum) until the coefficients move less than ``tol``.

**Differential privacy** (``privacy=``): :class:`LassoDP` clips each client's *average*
gradient ``X_k^T (X_k b - y_k) / n_k`` to ``clip`` and adds Gaussian noise -- ``"central"``
on the sum (sensitivity ``clip`` for changing one client, the mean's ``clip / m``;
distributed over the clients under secure aggregation, as :class:`horizontal.ClientDP`
does), or ``"local"`` at each client on its own gradient. The mean of the clients' average
gradients then replaces the pooled gradient: each client weighs the same (client-level DP).
The noise multiplier is calibrated to ``epsilon`` over the fit's ``max_iter`` rounds with the
library's accountant (a fixed number of rounds: DP runs every one), and the spend is in the
ledger. Central noise on the mean shrinks as ``1 / m`` with the number of clients, local as
``1 / sqrt(m)`` (the tests check it). Pooled means under DP: pass ``fit_intercept=False``
with centred data, as the setup's sums are not covered.

Diagnostics (:func:`support_recovery`, :func:`kkt_gap` beside :func:`kkt_order`,
:func:`heterogeneity`) compare a solution with the truth and with the optimality conditions,
and measure how unlike the clients are, on data the caller holds (an auditor's view).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import RegressorMixin

from horizontal.lasso_protocol import (
    LassoClient,
    LassoResult,
    LassoServer,
    LassoSpec,
    soft_threshold,
)
from vfl import persistence
from vfl.estimator import (
    FederatedEstimator,
    Role,
    deprecated_parameters,
    renamed_parameters,
    run_deployed,
)
from vfl.federation.base import Federation

__all__ = [
    "FederatedLasso",
    "LassoDP",
    "federated_lasso_cv",
    "heterogeneity",
    "kkt_gap",
    "kkt_order",
    "soft_threshold",
    "support_recovery",
]

KIND = "horizontal.FederatedLasso"

RENAMED = {
    "secure_aggregation": 'protocol="secagg" or protocol=SecAggConfig(threshold=...)',
}

Vector = np.ndarray[Any, Any]


def _translate(old: dict[str, Any]) -> dict[str, Any]:
    """The ``protocol=`` that the deprecated ``secure_aggregation=`` spelled."""
    from horizontal.estimator import secure_protocol

    return {"protocol": secure_protocol(old["secure_aggregation"])}


# -- kernels -------------------------------------------------------------------------------------


def kkt_gap(
    x: Any, y: Any, coef: Vector, intercept: float, alpha: float, l1_ratio: float = 1.0
) -> float:
    """How far ``coef`` is from the (elastic-net) Lasso's optimality conditions on ``(x, y)``:
    the largest violation of ``|grad_j| <= alpha l1_ratio`` off the support and of
    ``grad_j = -alpha l1_ratio sign(b_j)`` on it (``grad`` the smooth part's gradient)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    grad = x.T @ (x @ coef + intercept - y) / len(y) + alpha * (1 - l1_ratio) * coef
    level = alpha * l1_ratio
    on = coef != 0
    off_gap = np.maximum(np.abs(grad[~on]) - level, 0.0)
    on_gap = np.abs(grad[on] + level * np.sign(coef[on]))
    return float(max(off_gap.max(initial=0.0), on_gap.max(initial=0.0)))


def heterogeneity(clients: dict[str, Any]) -> float:
    """``max_k ||Sigma_k - Sigma||_2``: how far the clients' covariances (``X_k^T X_k / n_k``,
    uncentred, as the gradient sees them) stray from the pooled one, in spectral norm; 0 for
    identically distributed clients. An auditor's view of ``{client: (X, y)}``."""
    data = _clients(clients)
    grams = {n: x.T @ x / len(x) for n, (x, _, _) in data.items()}
    rows = {n: len(x) for n, (x, _, _) in data.items()}
    pooled = sum(g * rows[n] for n, g in grams.items()) / sum(rows.values())
    return float(max(np.linalg.norm(g - pooled, 2) for g in grams.values()))


def kkt_order(sigma: float, alpha: float, p: int, delta: float) -> float:
    """The order ``sigma / alpha sqrt(ln(p / delta))`` the KKT gap of a private solution is
    expected to reach (``sigma`` the noise on the mean gradient per coordinate)."""
    return float(sigma / alpha * math.sqrt(math.log(p / delta)))


def support_recovery(coef: Vector, truth: Vector) -> tuple[float, float]:
    """``(precision, recall)`` of the selected columns (``coef != 0``) against the true ones."""
    chosen = np.asarray(coef) != 0
    actual = np.asarray(truth) != 0
    hits = float(np.sum(chosen & actual))
    precision = hits / chosen.sum() if chosen.any() else 1.0
    recall = hits / actual.sum() if actual.any() else 1.0
    return precision, recall


@dataclass(frozen=True)
class LassoDP:
    """Differential privacy for :class:`FederatedLasso` (see the module docstring).

    Parameters
    ----------
    epsilon, delta : float
        The guarantee over the whole fit, for changing one client's data.
    clip : float
        The L2 norm each client's average gradient is clipped to.
    where : {"central", "local"}
        Noise on the sum (a trusted aggregator, or secure aggregation), or at each client.
    noise_multiplier : float, optional
        Give it instead of ``epsilon`` (then the ledger reports the epsilon spent).
    select : int, optional
        Private support selection for high dimensions: a first round releases the noisy
        gradient at zero, its ``select`` largest coordinates (post-processing) become the
        support, and the remaining rounds send and noise only those ``select`` coordinates,
        so the noise grows with ``select`` instead of every column.
    select_share : float
        With ``epsilon`` and ``select``: the share of ``epsilon`` (and half of ``delta``) the
        selection's single release spends; the rounds share the rest (basic composition of
        the two; the ledger composes them tighter).
    """

    epsilon: float | None = 1.0
    delta: float = 1e-5
    clip: float = 1.0
    where: str = "central"
    noise_multiplier: float | None = None
    select: int | None = None
    select_share: float = 0.5

    def check(self) -> None:
        if self.where not in ("central", "local"):
            raise ValueError(f'where must be "central" or "local", got {self.where!r}')
        if not self.clip > 0:
            raise ValueError(f"clip must be positive, got {self.clip!r}")
        if (self.epsilon is None) == (self.noise_multiplier is None):
            raise ValueError("LassoDP: give exactly one of epsilon= and noise_multiplier=")
        if self.select is not None and (isinstance(self.select, bool) or self.select < 1):
            raise ValueError(f"select must be a positive number of columns, got {self.select!r}")

        if not 0 < self.select_share < 1:
            raise ValueError(f"select_share must be in (0, 1), got {self.select_share!r}")

    def multiplier(self, rounds: int) -> float:
        """The rounds' noise multiplier for ``rounds`` releases (the accountant's)."""
        from vfl.privacy import resolve_noise_multiplier

        if self.select is None or self.epsilon is None:
            steps = rounds + (1 if self.select is not None and self.epsilon is None else 0)
            return float(
                resolve_noise_multiplier(
                    noise_multiplier=self.noise_multiplier,
                    epsilon=self.epsilon,
                    delta=self.delta,
                    steps=steps,
                    what="LassoDP",
                )
            )
        share = self.epsilon * (1 - self.select_share)
        return float(
            resolve_noise_multiplier(
                noise_multiplier=None,
                epsilon=share,
                delta=self.delta / 2,
                steps=rounds,
                what="LassoDP",
            )
        )

    def selection_multiplier(self) -> float:
        """The selection release's noise multiplier."""
        from vfl.privacy import resolve_noise_multiplier

        if self.epsilon is None:
            return self.multiplier(1)
        share = self.epsilon * self.select_share
        return float(
            resolve_noise_multiplier(
                noise_multiplier=None, epsilon=share, delta=self.delta / 2, steps=1, what="LassoDP"
            )
        )


# -- the estimator -------------------------------------------------------------------------------


class FederatedLasso(RegressorMixin, FederatedEstimator):  # type: ignore[misc]
    """The Lasso (``l1_ratio=1``) or the elastic net fitted over clients (see the module
    docstring).

    Parameters
    ----------
    alpha : float
        The penalty's weight (scikit-learn's ``alpha``), ``>= 0``.
    l1_ratio : float
        The elastic-net mix (1: the Lasso).
    fit_intercept : bool
        Centre with pooled means (sent at setup) and fit an intercept.
    max_iter, tol
        Rounds at most; stop when no coefficient moves more than ``tol`` (without DP; with
        DP every one of the ``max_iter`` rounds runs, as the accountant assumed).
    fista : bool
        Nesterov's momentum (FISTA), default; False: plain proximal gradient (always under
        DP: the momentum would accumulate the noise).
    warm_start : bool
        Start the next ``fit`` from the fitted coefficients (scikit-learn's ``warm_start``;
        ``fit(coef_init=...)`` names a start explicitly).
    protocol : {"plain", "secagg"} or SecAggConfig
        ``"plain"`` (default): each client's gradient reaches the server; ``"secagg"``: the
        gradients through secure aggregation with a threshold of a majority of the clients
        (a :class:`~horizontal.secagg.SecAggConfig` chooses it). Replaces the deprecated
        ``secure_aggregation``.
    privacy : LassoDP, optional
        Differential privacy on the gradients (Gaussian noise, central or local).
    server : str
        The server's party name.
    timeout : float, optional
        Seconds a simulated party waits for a message (None, the default:
        :func:`vfl.estimator.wait_limit`, 600 s).
    verbose : int
        0 (default): nothing shown (the rounds still go to the ``vflink.progress`` logger at
        INFO); 1: the server's rounds live (the largest coefficient move).

    No ``random_state``: proximal gradient draws nothing (DP's noise comes from the OS and
    is never seeded), so there is no simulation randomness to seed.

    Attributes
    ----------
    coef_, intercept_, n_iter_, lipschitz_, support_ (DP's selected columns, with
    ``select``), transcript_
    history_ : list of dict
        One record per round (the schema of every estimator's, :mod:`vfl.estimator`):
        ``epoch`` and ``round`` (the round, 1-based), ``loss`` (None: the server computes no
        objective), ``seconds`` (the round's, at the server) and ``step`` (the largest
        coefficient move).
    privacy_ledger_ : PrivacyLedger
        The fit's privacy spend (empty without ``privacy``).
    """

    @renamed_parameters(RENAMED, _translate)
    def __init__(
        self,
        *,
        alpha: float = 1.0,
        l1_ratio: float = 1.0,
        fit_intercept: bool = True,
        max_iter: int = 1000,
        tol: float = 1e-8,
        fista: bool = True,
        warm_start: bool = False,
        protocol: Any = "plain",
        privacy: LassoDP | None = None,
        server: str = "server",
        timeout: float | None = None,
        verbose: int = 0,
    ) -> None:
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.fista = fista
        self.warm_start = warm_start
        self.protocol = protocol
        self.privacy = privacy
        self.server = server
        self.timeout = timeout
        self.verbose = verbose

    def _secure(self, clients: int) -> Any:
        """The :class:`~horizontal.secagg.SecAggConfig` of ``protocol`` (None: plain),
        checked."""
        from horizontal.secagg import SecAggConfig

        given = self.protocol
        if isinstance(given, str) and given in ("plain", "secagg"):
            if given == "plain":
                return None
            given = SecAggConfig(threshold=max(2, clients // 2 + 1))
        if not isinstance(given, SecAggConfig):
            raise ValueError(
                "protocol must be 'plain', 'secagg' or a SecAggConfig(threshold=...), got "
                f"{given!r}"
            )
        given.check(clients)
        return given

    def _spec(self, clients: list[str], warm: Vector | None, ledger: Any) -> LassoSpec:
        if not (
            isinstance(self.alpha, (int, float)) and np.isfinite(self.alpha) and self.alpha >= 0
        ):
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}")
        if not 0 <= self.l1_ratio <= 1:
            raise ValueError(f"l1_ratio must be in [0, 1], got {self.l1_ratio!r}")
        if (
            isinstance(self.max_iter, bool)
            or not isinstance(self.max_iter, int)
            or self.max_iter < 1
        ):
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")
        if self.server in clients:
            raise ValueError(f"{self.server!r} is both a client and the server: pass server='...'")
        secure = self._secure(len(clients))
        if self.privacy is not None:
            self.privacy.check()
            if self.fit_intercept:
                raise ValueError(
                    "differential privacy covers the gradients, not the pooled means that "
                    "fit_intercept=True sends: centre the data with known means and pass "
                    "fit_intercept=False"
                )
        return LassoSpec(
            server=self.server,
            clients=tuple(clients),
            alpha=float(self.alpha),
            l1_ratio=float(self.l1_ratio),
            fit_intercept=bool(self.fit_intercept),
            max_iter=self.max_iter,
            tol=float(self.tol),
            fista=bool(self.fista),
            privacy=self.privacy,
            secure_aggregation=secure,
            warm_start=warm,
            ledger=ledger,
            verbose=int(self.verbose),
        )

    def fit(
        self,
        clients: dict[str, Any],
        *,
        label: str | None = None,
        keep_payloads: bool = False,
        coef_init: Vector | None = None,
        ledger: Any = None,
        **deprecated: Any,
    ) -> FederatedLasso:
        """Fit with the server and every client simulated here.

        Parameters
        ----------
        clients : dict
            ``{client: (X, y)}``, or ``{client: DataFrame}`` with the targets in column
            ``label`` (as :meth:`horizontal.FederatedClassifier.fit` takes them).
        label : str, optional
            The target column, for the DataFrame form.
        keep_payloads : bool
            Keep every message's payload in ``transcript_``.
        coef_init : array, optional
            The coefficients to start from (default: the fitted ones with
            ``warm_start=True``, else zeros). Replaces the deprecated ``warm_start=`` of
            ``fit``.
        ledger : PrivacyLedger, optional
            Where DP records its spend (by default a new one; kept as ``privacy_ledger_``).
        """
        passed = () if coef_init is None else ("coef_init",)
        old = deprecated_parameters("fit", deprecated, {"warm_start": "coef_init"}, passed=passed)
        if old.get("warm_start") is not None:
            coef_init = old["warm_start"]
        data = _clients(clients, label)
        if coef_init is None and self.warm_start and hasattr(self, "coef_"):
            coef_init = np.asarray(self.coef_, dtype=np.float64).copy()
        ledger = self._fitted_ledger(ledger)
        spec = self._spec(list(data), coef_init, ledger if self.privacy is not None else None)
        roles: dict[str, Role] = {
            n: LassoClient(spec, x, y, cols) for n, (x, y, cols) in data.items()
        }
        roles[spec.server] = LassoServer(spec)
        results = self._simulate(roles, keep_payloads=keep_payloads)
        self._collect(results[spec.server], next(iter(data.values()))[2])
        return self

    def fit_party(
        self, federation: Federation, x: Any = None, y: Any = None, *, clients: list[str]
    ) -> FederatedLasso:
        """This party's role (deployment): a client with its ``(x, y)``, or the server."""
        self._fitted_ledger(None)
        spec = self._spec(list(clients), None, None)
        if federation.name == spec.server:
            result = run_deployed({spec.server: LassoServer(spec)}, federation)[spec.server]
            self._collect(result, [])
            return self
        values, target, columns = _client(federation.name, x, y)
        self.history_: list[dict[str, Any]] = []  # the rounds are the server's to record
        run_deployed({federation.name: LassoClient(spec, values, target, columns)}, federation)
        return self

    def _collect(self, result: LassoResult, columns: list[str]) -> None:
        self.coef_ = result.coef
        self.intercept_ = result.intercept
        self.n_iter_ = result.n_iter
        self.lipschitz_ = result.lipschitz
        self.history_ = [
            {"epoch": i + 1, "round": i + 1, "loss": None, "seconds": seconds, "step": moved}
            for i, (moved, seconds) in enumerate(
                zip(result.history, result.round_seconds, strict=True)
            )
        ]
        self.feature_names_in_ = np.asarray(columns, dtype=object)
        self.n_features_in_ = len(result.coef)
        self.support_ = result.support

    def predict(self, x: Any) -> Vector:
        self._check_fitted("n_features_in_")
        values = np.asarray(x, dtype=np.float64)
        if values.ndim != 2 or values.shape[1] != len(self.coef_):
            raise ValueError(f"X must have {len(self.coef_)} columns, got shape {values.shape}")
        out: Vector = values @ self.coef_ + self.intercept_
        return out

    def save(self, path: str | Path) -> Path:
        """Write the fitted model to the file ``path`` (vflink's model format: the
        coefficients, the intercept, the columns, DP's support) and beside it, when DP spent
        anything, the ledger (``<path>.ledger.json``). Returns the path."""
        self._check_fitted("n_features_in_")
        meta = {
            "intercept": float(self.intercept_),
            "columns": [str(c) for c in self.feature_names_in_],
        }
        arrays = {"coef": np.asarray(self.coef_, dtype=np.float64)}
        if self.support_ is not None:
            arrays["support"] = np.asarray(self.support_, dtype=np.int64)
        ledger = getattr(self, "privacy_ledger_", None)
        return persistence.save_with_ledger(path, KIND, meta, arrays, ledger)

    def load(self, path: str | Path) -> FederatedLasso:
        """Read a model written by :meth:`save` into this estimator (with its ledger)."""

        meta, arrays = persistence.load_model(path, kind=KIND)
        self.coef_ = arrays["coef"]
        self.intercept_ = float(meta["intercept"])
        self.feature_names_in_ = np.asarray(meta["columns"], dtype=object)
        self.n_features_in_ = len(self.coef_)
        self.support_ = arrays.get("support")
        self.privacy_ledger_ = persistence.load_ledger(path)
        return self

    def path(self, clients: dict[str, Any], alphas: Any) -> Vector:
        """Coefficients for each of ``alphas`` (largest first), each fit warm-started from the
        previous one (rows: the alphas)."""
        coefs = []
        warm = None
        for alpha in sorted(np.asarray(alphas, dtype=np.float64), reverse=True):
            self.set_params(alpha=float(alpha))
            self.fit(clients, coef_init=warm)
            warm = self.coef_.copy()
            coefs.append(warm)
        return np.array(coefs)


def federated_lasso_cv(
    clients: dict[str, Any], alphas: Any, *, folds: int = 5, seed: int = 0, **params: Any
) -> tuple[float, Vector]:
    """Federated cross-validation: each client splits its own rows into ``folds`` (from
    ``seed``); for each fold the path is fitted on the others and each client scores its held
    rows (the squared errors summed, as the server would). Returns the chosen alpha and the
    mean validation error per alpha (largest alpha first)."""
    data = _clients(clients)
    ordered = sorted(np.asarray(alphas, dtype=np.float64), reverse=True)
    errors = np.zeros(len(ordered))
    rng = np.random.default_rng(seed)
    assignment = {n: rng.integers(0, folds, size=len(x)) for n, (x, _, _) in data.items()}
    total = sum(len(x) for x, _, _ in data.values())
    for fold in range(folds):
        train = {
            n: (x[assignment[n] != fold], y[assignment[n] != fold]) for n, (x, y, _) in data.items()
        }
        coefs = FederatedLasso(**params).path(train, ordered)
        model = FederatedLasso(**params)
        for i, alpha in enumerate(ordered):
            model.set_params(alpha=float(alpha)).fit(train, coef_init=coefs[i])
            for n, (x, y, _) in data.items():
                held = assignment[n] == fold
                errors[i] += float(np.sum((model.predict(x[held]) - y[held]) ** 2))
    errors /= total
    return float(ordered[int(np.argmin(errors))]), errors


def _client(name: str, x: Any, y: Any) -> tuple[Vector, Vector, list[str]]:
    columns = (
        [str(c) for c in x.columns]
        if isinstance(x, pd.DataFrame)
        else [f"x{j}" for j in range(np.shape(x)[1])]
    )
    values = np.asarray(x, dtype=np.float64)
    target = np.asarray(y, dtype=np.float64).ravel()
    if values.ndim != 2 or len(values) != len(target):
        raise ValueError(f"client {name!r}: X must be 2-d with one target per row")
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(
            f"client {name!r}: column {columns[col]!r} has a missing or infinite value at row {row}"
        )
    if not np.all(np.isfinite(target)):
        raise ValueError(f"client {name!r}: the target has a missing or infinite value")
    return values, target, columns


def _clients(
    clients: dict[str, Any], label: str | None = None
) -> dict[str, tuple[Vector, Vector, list[str]]]:
    """Each client's checked ``(X, y, columns)`` from ``{name: (X, y)}`` or ``{name:
    DataFrame}`` with the targets in column ``label``."""
    if not isinstance(clients, dict) or not clients:
        raise ValueError("clients must be {name: (X, y)} with at least one client")
    out = {}
    for name, value in clients.items():
        if isinstance(value, pd.DataFrame):
            if label is None or label not in value.columns:
                raise ValueError(
                    f"client {name!r}: a DataFrame needs label='<column>' naming its targets "
                    f"({label!r} is not one of its columns)"
                )
            value = (value.drop(columns=[label]), value[label])
        out[str(name)] = _client(str(name), *value)
    return out
