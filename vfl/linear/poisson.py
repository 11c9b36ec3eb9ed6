"""Vertical Poisson regression (log link, optional exposure) under Paillier encryption.

The model of scikit-learn's ``PoissonRegressor``, ``y ~ Poisson(e * exp(X w + b))``, on columns
split between a label party (the counts ``y``, the exposure ``e``, its own columns and the
intercept) and one passive party, with a coordinator holding the key, as FATE's hetero Poisson
regression. The protocol is in :mod:`vfl.linear.poisson_protocol`, its arithmetic and bounds in
:mod:`vfl.linear.poisson_math`.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import RegressorMixin

from vfl.crypto.policy import KeyPolicy
from vfl.estimator import FederatedEstimator, Role, run_deployed, wait_limit
from vfl.federation.base import Federation
from vfl.linear.common import FitResult
from vfl.linear.model import PartyModel
from vfl.linear.poisson_math import (
    check_counts,
    check_exposure,
    start_intercept,
)
from vfl.linear.poisson_protocol import (
    PoissonCoordinatorRole,
    PoissonDataRole,
    PoissonSpec,
)
from vfl.linear.scoring import ScoreCoordinatorRole, ScoreRole, ScoreSpec
from vfl.persistence import label_party_of_parts, model_files
from vfl.training.divergence import DivergenceWarning
from vfl.training.optimizers import OPTIMIZERS
from vfl.training.schedule import check_batch_size
from vfl.validation import (
    VerticalFrames,
    check_data_parties,
    check_parts,
    check_targets,
    label_party_of,
)

__all__ = ["ADAM_STEP", "Exposure", "VerticalPoissonRegression"]

ADAM_STEP = 0.02
"""Adam's default step here. At the linear models' 0.05, Adam overshoots in the first epochs
on a dvisits-like table (the loss of epochs 2-6 above the first's) and the intercept ends up
to 0.006 from scikit-learn's; at 0.02 the loss falls steadily and every coefficient lands
within 0.003 of scikit-learn's (five seeds, 20-28 epochs)."""

Exposure = str | float | np.ndarray[Any, Any] | pd.Series | None


class VerticalPoissonRegression(RegressorMixin, FederatedEstimator):  # type: ignore[misc]
    """Poisson regression with a log link on columns split between two parties, trained
    under Paillier encryption with a key-holding coordinator (FATE's hetero Poisson
    regression).

    The label party holds the counts ``y``, optionally an exposure ``e`` (time at risk, the
    population of an area) and the intercept; the passive party holds columns only. The model
    is ``E[y] = e * exp(u_A + u_B)``, ``u_p`` each party's partial score. Per mini-batch the
    passive party sends ``[[exp(u_B)]]`` under the coordinator's key; the label party turns
    it into the encrypted residuals ``[[r]] = e exp(u_A) [[exp(u_B)]] - y`` and sends them
    back; each party multiplies its columns into ``[[r]]`` and has its gradient decrypted by
    the coordinator under a mask only it can remove (:mod:`vfl.linear.poisson_protocol`).

    **The objective** is scikit-learn's ``PoissonRegressor(alpha=alpha)``: half the mean
    Poisson deviance plus ``alpha/2 |w|^2`` (intercept not penalised), on the standardised
    columns (``standardize=True``): compare with ``PoissonRegressor(alpha=alpha)`` fitted on
    ``StandardScaler``-ed columns. The default ``alpha=1.0`` is scikit-learn's default. With
    an exposure, the deviance is summed over rows and divided by the row count; scikit-learn
    fits the rates ``y / e`` with ``sample_weight=e`` and divides by ``sum(e)``, so its
    equivalent penalty is ``alpha * n / sum(e)``. ``loss_curve_`` holds this objective at
    each epoch's model (the mean of its iterates) over all rows; the intercept starts at
    ``log(sum y / sum e)``, the best constant model, as scikit-learn's does.

    **What each role learns.**

    * The label party: its own exact gradient ``X_A^T (mu - y)`` of each mini-batch, the
      training loss once per epoch, the passive party's column count, and its own part of the
      model. Its gradients are linear equations in the passive party's ``exp(u_B)`` per batch
      (``d_A + 1`` per batch, unknowns changing with every step), and at prediction it learns
      the score ``u_A + u_B`` of each predicted row, so ``u_B`` too.
    * The passive party: its own exact gradient ``X_B^T (mu - y)`` of each mini-batch, the
      label party's column count, the row count, when training stops, one bit per epoch (keep
      this epoch's model) and its own part. The targets never leave the label party, not even
      encrypted (the loss's ``sum y u_B`` is formed there from B's encrypted scores).
    * The coordinator: the row and column counts, the batch size and the number of epochs;
      every value it decrypts carries a mask ``KAPPA`` (40) bits longer than the value, fresh
      from the requester's OS randomness, and each request's layout is one it derived
      itself.

    No feature, target, exposure, ``exp(u)``, partial score or gradient of a party crosses a
    party boundary in the clear (``tests/vfl/linear/test_poisson.py`` searches every message).

    .. warning::
       Against a party that deviates, the coordinator opens whatever ciphertexts the
       requester holds under its key, packed into a request of the agreed layout, one value
       per column and batch: the passive party could have its batch's ``[[mu - y]]``
       opened, the label party the passive's ``[[exp(u_B)]]``, or its ``[[u_B]]`` at the
       epoch's model for any rows (and one more value per epoch in the loss request). A
       design of indicator columns gets each party as much through the honest protocol --
       the passive its batch's residuals, the label party ``exp(u_B)`` from its ``r``, its
       ``e exp(u_A)`` and ``y`` -- so deviating adds little beyond the choice of rows
       (``tests/vfl/linear/test_poisson.py`` plays the passive both ways). Unlike
       ``protocol="coordinator"`` of the linear models, the requests are not routed through
       the other party: each is computed from its receiver's own columns, which nobody else
       holds, so a forwarder could not check it; and no party holds the other's encrypted
       features. Honest-but-curious parties learn only what is listed above.

    .. warning::
       As under ``protocol="coordinator"`` of :class:`VerticalLogisticRegression`, each data
       party's exact gradient leaks. The passive party's first gradient, ``X_B^T (mu_0 -
       y)`` with the public starting model, is a system in the batch's counts that integer
       solving can attack, and later batches add equations. The label party accumulates
       equations in the passive party's scores over the epochs. Use it where each party may
       learn that much, as FATE's hetero Poisson regression does.

    Parameters
    ----------
    alpha : float
        L2 penalty on the standardised coefficients (scikit-learn's ``alpha``, default 1.0).
    max_iter, batch_size, tol, n_iter_no_change : int, int, float or None, int
        Epochs at most; rows per mini-batch (batches come from a seed the parties agree on);
        training stops when ``n_iter_no_change`` epochs in a row do not lower the best loss by
        ``tol`` (``None``: never), and keeps the model of the best epoch (``best_epoch_``);
        before stopping, a stalled fit goes on from the best epoch with a quarter of the step
        (twice), and an epoch whose loss rises far (a divergence) sends every party back to
        it likewise (:class:`~vfl.training.LossCurve`). The default ``tol=1e-5`` is small
        because the objective is flat near its optimum: at ``alpha=1`` coefficients 0.01 away
        cost about ``5e-5``.
    learning_rate : float, optional
        The step; Adam's default :data:`ADAM_STEP` (0.02), decaying as ``1 / (1 + epoch)``
        (:class:`~vfl.linear.poisson_protocol.PartyWeights`). The linear optimisers
        (``"sgd"``, ``"momentum"``) need it given: the Poisson loss's curvature is the mean
        count times the columns', which no party knows alone.
    optimizer : {"adam", "momentum", "sgd"}
        Each party runs it on its own weights; each epoch's model is the mean of its iterates.
    protocol : {"coordinator"}
        The only protocol: the exponential is not linear in the score, so the secret-shared
        protocols cannot compute it on shares.
    key_bits, insecure : int, bool
        Paillier modulus bits (2048; below only with ``insecure=True``, for tests).
    random_state : int, optional
        The batch seed (otherwise drawn jointly from the parties' OS randomness).
    standardize : bool
        Each party standardises its own columns with its own statistics (kept in its part).
    coordinator : str
        The coordinator's party name.
    workers, timeout : optional
        Processes per party for encryption; seconds a party waits for a message (None, the
        default: :func:`vfl.estimator.wait_limit`).
    verbose : int
        0 (default): nothing shown beyond long stages' progress (the label party's epoch
        lines still go to the ``vflink.progress`` logger at INFO); 1: the label party's loss,
        step and best epoch live (:class:`vfl.progress.EpochProgress`).

    Attributes
    ----------
    parts_, coef_, intercept_, feature_names_in_, label_party_, transcript_
        Each party's fitted part; the coefficients held here and the label party's
        intercept; their columns; the label party; the last simulated run's messages.
    n_iter_, best_epoch_, loss_curve_, epoch_seconds_, setup_seconds_
        Epochs run, the epoch kept, the objective per epoch, the wall time of each epoch and
        of the setup (at the label party).
    history_ : list of dict
        One record per epoch at the label party: ``epoch``, ``loss``, ``seconds``,
        ``restart``.
    privacy_ledger_ : PrivacyLedger
        Always empty: no DP mechanism runs here (kept for one surface with the others).
    """

    def __init__(
        self,
        *,
        alpha: float = 1.0,
        max_iter: int = 100,
        batch_size: int = 256,
        tol: float | None = 1e-5,
        n_iter_no_change: int = 5,
        learning_rate: float | None = None,
        optimizer: str = "adam",
        protocol: str = "coordinator",
        key_bits: int = 2048,
        random_state: int | None = None,
        standardize: bool = True,
        coordinator: str = "coordinator",
        workers: Any = None,
        timeout: float | None = None,
        insecure: bool = False,
        verbose: int = 0,
    ) -> None:
        self.alpha = alpha
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.learning_rate = learning_rate
        self.optimizer = optimizer
        self.protocol = protocol
        self.key_bits = key_bits
        self.random_state = random_state
        self.standardize = standardize
        self.coordinator = coordinator
        self.workers = workers
        self.timeout = timeout
        self.insecure = insecure
        self.verbose = verbose

    # -- checks --------------------------------------------------------------------------------

    def _check_params(self) -> None:
        if self.protocol != "coordinator":
            raise ValueError(
                f"VerticalPoissonRegression trains with protocol='coordinator' only, got "
                f"{self.protocol!r}: exp(score) is not linear in the score, so the "
                "secret-shared protocols cannot compute it on shares"
            )
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"optimizer must be one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}"
            )
        if self.optimizer != "adam" and self.learning_rate is None:
            raise ValueError(
                f"optimizer={self.optimizer!r} needs learning_rate=: the Poisson loss's "
                "curvature grows with the counts, so no fixed default step is safe for every "
                "table; Adam (the default) scales its own steps"
            )
        for name in ("max_iter", "batch_size", "n_iter_no_change"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if not self.alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha!r}")

    def _policy(self) -> KeyPolicy:
        return KeyPolicy(self.key_bits, self.insecure)

    def _workers(self) -> Any:
        return 1 if self.workers is None else self.workers

    def _wait_limit(self, rows: int) -> float:
        return wait_limit(self.timeout, rows, self.key_bits)

    def fit_spec(self, label_party: str, data_parties: list[str]) -> PoissonSpec:
        """What every role of a fit agrees on (hyperparameters and parties checked)."""
        self._check_params()
        check_data_parties(list(data_parties), label_party)
        if len(data_parties) != 2:
            raise ValueError(
                f"VerticalPoissonRegression trains with the label party and one passive party, "
                f"got {sorted(data_parties)}; join the passive parties' columns at one of them "
                "first, or, for any number of parties, fit VerticalLinearRegression("
                "protocol='coordinator') on log(1 + y)"
            )
        if self.coordinator in data_parties:
            raise ValueError(
                f"{self.coordinator!r} is both a data party and the coordinator's name; pass "
                "coordinator='...' with another name"
            )
        (passive,) = [p for p in data_parties if p != label_party]
        return PoissonSpec(
            label_party=label_party,
            passive=passive,
            coordinator=self.coordinator,
            max_iter=self.max_iter,
            batch_size=self.batch_size,
            tol=self.tol,
            patience=self.n_iter_no_change,
            learning_rate=ADAM_STEP if self.learning_rate is None else float(self.learning_rate),
            optimizer=self.optimizer,
            alpha=float(self.alpha),
            policy=self._policy(),
            workers=self._workers(),
            random_state=self.random_state,
            verbose=int(self.verbose),
        )

    def label_data(
        self, frame: pd.DataFrame, y: Any, party: str, exposure: Exposure = None
    ) -> tuple[pd.DataFrame, np.ndarray[Any, Any], np.ndarray[Any, Any], str | None]:
        """At the label party: its feature columns, the checked counts, the checked exposure
        (ones without) and the exposure's column name (when it is one of ``frame``'s)."""
        column, values, features = _exposure(frame, party, exposure)
        targets = check_targets(y, frame.index, party)
        check_counts(targets, frame.index, party)
        return features, targets, values, column

    def fit_parts(
        self,
        spec: PoissonSpec,
        frames: dict[str, pd.DataFrame | None],
        y: Any,
        exposure: Exposure = None,
    ) -> dict[str, tuple[PartyModel, np.ndarray[Any, Any], Any, Any]]:
        """Per data party of ``frames`` (None: its data is elsewhere): its fresh part, its
        design matrix, and at the label party its counts and exposure (else None), checked.
        The label party's intercept starts at ``log(sum y / sum e)``."""
        out: dict[str, tuple[PartyModel, np.ndarray[Any, Any], Any, Any]] = {}
        for name, frame in frames.items():
            if frame is None:
                continue
            is_label = name == spec.label_party
            targets = values = None
            column = None
            if is_label:
                frame, targets, values, column = self.label_data(frame, y, name, exposure)
            part = PartyModel.fresh(
                name, frame, standardize=self.standardize, active=is_label, outputs=1
            )
            part.extra["data_parties"] = [spec.label_party, spec.passive]
            if is_label and targets is not None and values is not None:
                part.intercept = start_intercept(targets, values)
                if column is not None:
                    part.extra["exposure_column"] = column
            x = part.design(frame)
            check_batch_size(name, len(x), x.shape[1] + int(is_label), spec.batch_size)
            out[name] = (part, x, targets, values)
        return out

    def _fit_roles(
        self,
        spec: PoissonSpec,
        frames: dict[str, pd.DataFrame | None],
        y: Any,
        exposure: Exposure = None,
    ) -> dict[str, Role]:
        roles: dict[str, Role] = {
            name: PoissonDataRole(spec, part, x, targets, values)
            for name, (part, x, targets, values) in self.fit_parts(
                spec, frames, y, exposure
            ).items()
        }
        if spec.coordinator in frames:
            roles[spec.coordinator] = PoissonCoordinatorRole(spec)
        return roles

    def _collect(self, results: dict[str, Any], spec: PoissonSpec) -> None:
        done = {n: r for n, r in results.items() if isinstance(r, FitResult)}
        self.parts_: dict[str, PartyModel] = {
            n: r.part for n, r in done.items() if r.part is not None
        }
        self.label_party_ = spec.label_party
        self.data_parties_ = [spec.label_party, spec.passive]
        self.n_iter_ = max((r.n_iter for r in done.values()), default=0)
        self._fitted_ledger(None)  # no mechanism spends here
        views = {n: r.view for n, r in done.items() if r.view is not None}
        if views:
            self.views_ = views
        elif hasattr(self, "views_"):
            del self.views_
        label = done.get(spec.label_party)
        if label is None or label.part is None:
            self.loss_curve_: list[float] = []  # the loss is the label party's to learn
            self.history_: list[dict[str, Any]] = []
            return
        self.loss_curve_ = list(label.loss_curve)
        self.best_epoch_ = label.best_epoch
        self.restarts_ = list(label.restarts)
        self.epoch_seconds_ = list(label.epoch_seconds)
        self.setup_seconds_ = label.setup_seconds
        self.intercept_ = float(label.part.intercept)
        self.history_ = [
            {"epoch": i + 1, "loss": loss, "seconds": sec, "restart": i + 1 in label.restarts}
            for i, (loss, sec) in enumerate(
                zip(label.loss_curve, label.epoch_seconds, strict=False)
            )
        ]
        if label.restarts or label.gave_up:
            ending = "; it diverged again and stopped" if label.gave_up else ""
            warnings.warn(
                f"the training loss rose after epoch(s) {label.restarts}; each time training "
                f"resumed from the best epoch with a quarter of the step{ending}; lower "
                "learning_rate or raise alpha if this recurs",
                DivergenceWarning,
                stacklevel=3,
            )
        elif not label.converged and spec.tol is not None:
            from sklearn.exceptions import ConvergenceWarning

            warnings.warn(
                f"stopped after max_iter={spec.max_iter} epochs before the loss settled "
                f"within tol={spec.tol}; raise max_iter",
                ConvergenceWarning,
                stacklevel=3,
            )

    # -- simulation ----------------------------------------------------------------------------

    def fit(
        self,
        parts: dict[str, pd.DataFrame] | VerticalFrames,
        y: Any,
        *,
        label_party: str | None = None,
        exposure: Exposure = None,
        keep_payloads: bool = False,
        keep_views: bool = False,
    ) -> VerticalPoissonRegression:
        """Train with every party simulated in this process (one thread each).

        Parameters
        ----------
        parts : dict of str to DataFrame, or VerticalFrames
            The two data parties' columns, with the same index (the aligned rows).
        y : array-like or Series
            Non-negative counts of those rows, held by ``label_party``.
        label_party : str
            The party holding ``y`` (and the exposure).
        exposure : str, array-like, Series or float, optional
            The label party's exposure (positive): the name of one of its columns (which is
            then not a feature, and is read again at :meth:`predict`), or values of its rows
            (a Series is aligned by index). None: 1 for every row.
        keep_payloads, keep_views : bool
            Keep every message's payload in ``transcript_``; keep what each data party
            decrypts per batch in ``views_`` (``{party: [(rows, gradient numerator)]}``).
        """
        label_party = label_party_of(parts, label_party)
        frames = check_parts(parts, label_party)
        spec = replace(self.fit_spec(label_party, list(frames)), keep_views=keep_views)
        roles = self._fit_roles(spec, {**frames, spec.coordinator: None}, y, exposure)
        rows = max(len(f) for f in frames.values())
        results = self._simulate(roles, keep_payloads=keep_payloads, rows=rows)
        self._collect(results, spec)
        return self

    def predict(
        self, parts: dict[str, pd.DataFrame] | VerticalFrames, *, exposure: Exposure = None
    ) -> np.ndarray[Any, Any]:
        """Expected counts ``e * exp(score)`` of the rows of ``parts`` (secure scoring: only the
        label party learns them). ``exposure`` as in :meth:`fit`; None: the label party's
        exposure column when the model was fitted with one and its frame has it, else 1
        (expected counts per unit of exposure)."""
        self._check_fitted()
        frames = check_parts(parts, self.label_party_)
        missing = sorted(set(self.parts_) - set(frames))
        extra = sorted(set(frames) - set(self.parts_))
        if missing or extra:
            raise ValueError(
                f"predict needs the parties the model was fitted with: missing {missing}, "
                f"unknown {extra}"
            )
        label = self.label_party_
        features, values = self._predict_exposure(frames[label], exposure)
        frames = {**frames, label: features}
        spec = self._score_spec(list(frames))
        roles: dict[str, Role] = {
            name: ScoreRole(spec, self.parts_[name], self.parts_[name].design(frame))
            for name, frame in frames.items()
        }
        roles[self.coordinator] = ScoreCoordinatorRole(spec)
        rows = max(len(f) for f in frames.values())
        scores = self._simulate(roles, fit=False, rows=rows)[label]
        return _counts(np.asarray(scores)[:, 0], values, label)

    def score(
        self,
        parts: dict[str, pd.DataFrame] | VerticalFrames,
        y: Any,
        sample_weight: Any = None,
        *,
        exposure: Exposure = None,
    ) -> float:
        """D^2, the share of Poisson deviance explained (scikit-learn's
        ``PoissonRegressor.score``); with an exposure, of the rates ``y / e`` weighted by
        ``e``, as scikit-learn fits them."""
        from sklearn.metrics import d2_tweedie_score

        self._check_fitted()
        frames = check_parts(parts, self.label_party_)
        _, values = self._predict_exposure(frames[self.label_party_], exposure)
        counts = self.predict(frames, exposure=values)
        truth = np.asarray(y, dtype=float)
        weights = np.ones(len(truth)) if sample_weight is None else np.asarray(sample_weight)
        return float(
            d2_tweedie_score(
                truth / values, counts / values, sample_weight=weights * values, power=1
            )
        )

    def _predict_exposure(
        self, frame: pd.DataFrame, exposure: Exposure
    ) -> tuple[pd.DataFrame, np.ndarray[Any, Any]]:
        """The label party's feature columns and the exposure of its rows to predict with."""
        part = self.parts_[self.label_party_]
        column = part.extra.get("exposure_column")
        if exposure is None and column is not None and column in frame.columns:
            exposure = column
        if exposure is not None:
            _, values, features = _exposure(frame, self.label_party_, exposure)
        else:
            values, features = np.ones(len(frame)), frame
        if column is not None and column in features.columns:
            features = features.drop(columns=[column])
        return features, values

    def _score_spec(self, data_parties: list[str]) -> ScoreSpec:
        self._check_params()
        return ScoreSpec(
            self.label_party_,
            tuple(data_parties),
            self.coordinator,
            self._policy(),
            self._workers(),
        )

    # -- deployment ----------------------------------------------------------------------------

    def fit_party(
        self,
        federation: Federation,
        frame: pd.DataFrame | None,
        y: Any = None,
        *,
        label_party: str,
        data_parties: list[str],
        exposure: Exposure = None,
    ) -> VerticalPoissonRegression:
        """Run this party's role of training (deployment): ``frame`` its own aligned columns
        (None for the coordinator), ``y`` and ``exposure`` at the label party (as in
        :meth:`fit`), ``data_parties`` the two parties holding columns."""
        name = federation.name
        spec = self.fit_spec(label_party, list(data_parties))
        if frame is not None:
            frame = check_parts({name: frame}, name)[name]
        roles = self._fit_roles(spec, {name: frame}, y if name == label_party else None, exposure)
        self._collect(run_deployed(roles, federation), spec)
        return self

    def predict_party(
        self,
        federation: Federation,
        frame: pd.DataFrame | None,
        *,
        data_parties: list[str] | None = None,
        exposure: Exposure = None,
    ) -> np.ndarray[Any, Any] | None:
        """Run this party's role of scoring (deployment): the label party gets the expected
        counts (exposure as in :meth:`predict`), the others None."""
        name = federation.name
        parties = data_parties or getattr(self, "data_parties_", None)
        if not parties:
            raise ValueError("predict_party needs data_parties= (the parties holding columns)")
        if not getattr(self, "label_party_", None):
            raise ValueError("predict_party needs a fitted or loaded model: fit_party or load")
        spec = self._score_spec(list(parties))
        roles: dict[str, Role] = {}
        values = None
        if frame is not None:
            part = getattr(self, "parts_", {}).get(name)
            if part is None:
                raise ValueError(f"party {name!r} has no fitted part: fit or load it first")
            if name == spec.label_party:
                frame, values = self._predict_exposure(frame, exposure)
            roles[name] = ScoreRole(spec, part, part.design(frame))
        else:
            roles[self.coordinator] = ScoreCoordinatorRole(spec)
        result = run_deployed(roles, federation)[name]
        if result is None or values is None:
            return None
        return _counts(np.asarray(result)[:, 0], values, name)

    # -- the model -----------------------------------------------------------------------------

    def _held_parts(self) -> list[PartyModel]:
        self._check_fitted()
        order = list(getattr(self, "data_parties_", None) or self.parts_)
        return [self.parts_[p] for p in order if p in self.parts_]

    @property
    def coef_(self) -> np.ndarray[Any, Any]:
        """The coefficients this estimator holds, on the standardised columns, shape
        ``(columns,)`` as scikit-learn's: every party's in simulation (in
        :attr:`feature_names_in_` order), a party's own in deployment."""
        return np.concatenate([np.ravel(p.coef) for p in self._held_parts()])

    @property
    def feature_names_in_(self) -> np.ndarray[Any, Any]:
        """The columns of :attr:`coef_`, as ``"<party>:<column>"``."""
        return np.array(
            [f"{p.party}:{c}" for p in self._held_parts() for c in p.columns], dtype=object
        )

    def save(self, path: str | Path) -> Path:
        """Write the model to the folder ``path`` (created): each held party's part as
        ``<party>.npz`` (vflink's model format: weights, columns, standardisation, the
        exposure column's name; nothing of another party). Returns the folder."""
        self._check_fitted()
        target = Path(path)
        target.mkdir(parents=True, exist_ok=True)
        for name, part in self.parts_.items():
            part.save(target / f"{name}.npz")
        return target

    def load(self, *paths: str | Path, label_party: str | None = None) -> VerticalPoissonRegression:
        """Read a model written by :meth:`save`: its folder, or part files (a party loads
        its own); ``label_party`` as in :meth:`VerticalLogisticRegression.load`."""
        self.parts_ = {}
        self._fitted_ledger(None)
        for path in model_files(paths):
            if path.suffix != ".npz":
                continue
            part = PartyModel.load(path)
            self.parts_[part.party] = part
        label_party = label_party_of_parts(self.parts_, label_party)
        self.label_party_ = label_party
        for part in self.parts_.values():
            if "data_parties" in part.extra:
                self.data_parties_ = list(part.extra["data_parties"])
        if label_party in self.parts_:
            self.intercept_ = float(self.parts_[label_party].intercept)
        return self


def _exposure(
    frame: pd.DataFrame, party: str, exposure: Exposure
) -> tuple[str | None, np.ndarray[Any, Any], pd.DataFrame]:
    """``(column name or None, checked exposure values, the frame without that column)``."""
    if exposure is None:
        return None, np.ones(len(frame)), frame
    if isinstance(exposure, str):
        if exposure not in frame.columns:
            raise ValueError(
                f"exposure {exposure!r} is not a column of the label party {party!r} (its "
                f"columns: {[str(c) for c in frame.columns]}); pass the column's name or the "
                "values"
            )
        values = pd.to_numeric(frame[exposure], errors="coerce").to_numpy(dtype=float)
        check_exposure(values, frame.index, party, exposure)
        return exposure, values, frame.drop(columns=[exposure])
    if isinstance(exposure, pd.Series):
        if not exposure.index.equals(frame.index):
            try:
                exposure = exposure.loc[frame.index]
            except KeyError:
                raise ValueError(
                    f"exposure of party {party!r}: its index does not cover the rows"
                ) from None
        values = exposure.to_numpy(dtype=float)
    else:
        values = np.broadcast_to(np.asarray(exposure, dtype=float), (len(frame),)).copy()
    if values.shape != (len(frame),):
        raise ValueError(
            f"exposure of party {party!r}: expected {len(frame)} values, got {values.shape}"
        )
    check_exposure(values, frame.index, party, None)
    return None, values, frame


def _counts(
    scores: np.ndarray[Any, Any], exposure: np.ndarray[Any, Any], party: str
) -> np.ndarray[Any, Any]:
    """Expected counts ``e * exp(score)`` at the label party (refusing overflow)."""
    with np.errstate(over="ignore"):
        out: np.ndarray[Any, Any] = exposure * np.exp(scores)
    if not np.all(np.isfinite(out)):
        raise FloatingPointError(
            f"party {party!r}: expected counts overflow (scores up to {float(np.max(scores)):g});"
            " the rows to predict are far outside the training range"
        )
    return out
