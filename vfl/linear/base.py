"""What every vertical linear estimator shares: hyperparameters, the roles it builds, scoring,
persistence. :class:`~vfl.linear.VerticalLogisticRegression` and
:class:`~vfl.linear.VerticalLinearRegression` add only their loss and their targets."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from vfl.crypto.policy import KeyPolicy
from vfl.estimator import (
    FederatedEstimator,
    Role,
    renamed_parameters,
    run_deployed,
    wait_limit,
)
from vfl.federation.base import Federation
from vfl.linear.common import FitResult, FitSpec
from vfl.linear.losses import LinearLoss
from vfl.linear.model import PartyModel
from vfl.linear.protocol import CoordinatorRole, DataRole
from vfl.linear.scoring import ScoreCoordinatorRole, ScoreRole, ScoreSpec
from vfl.linear.shared import SharedCoordinatorRole, SharedDataRole
from vfl.persistence import label_party_of_parts, model_files, save_parts
from vfl.preprocessing import PartyPreprocessor
from vfl.privacy.options import GaussianLabelDP
from vfl.training.divergence import DivergenceWarning
from vfl.training.optimizers import OPTIMIZERS
from vfl.training.schedule import auto_batch_size, check_batch_size
from vfl.validation import VerticalFrames, check_data_parties, check_parts, label_party_of

__all__ = ["PROTOCOLS", "VerticalLinearModel", "label_dp_of"]

PROTOCOLS = ("shared", "shared_coordinator", "coordinator", "two_party")
"""``shared`` (the default) and ``shared_coordinator`` reveal no gradient (secret-shared
training, :mod:`vfl.linear.shared`; any number of data parties); ``coordinator`` and
``two_party``
reveal each party its exact gradient, which lets it solve for labels (:mod:`vfl.linear`)."""
SHARED = ("shared", "shared_coordinator")

RENAMED = {
    "label_epsilon": "privacy=GaussianLabelDP(epsilon=...)",
    "label_delta": "privacy=GaussianLabelDP(delta=...)",
    "row_clip": "privacy=GaussianLabelDP(row_clip=...)",
}
"""The deprecated keywords of the vertical linear estimators and their replacements."""


def label_dp_of(old: dict[str, Any]) -> dict[str, Any]:
    """The ``privacy=`` that the deprecated ``label_epsilon``, ``label_delta`` and ``row_clip``
    spelled: a :class:`~vfl.privacy.options.GaussianLabelDP`; ``label_delta`` and ``row_clip``
    without ``label_epsilon`` did nothing and still do not (:func:`renamed_parameters` warns
    about each, and refuses them beside ``privacy=``)."""
    if old.get("label_epsilon") is None:
        return {}
    dp = GaussianLabelDP(
        epsilon=old["label_epsilon"],
        delta=old.get("label_delta", 1e-5),
        row_clip=old.get("row_clip"),
    )
    return {"privacy": dp}


class VerticalLinearModel(FederatedEstimator):
    """Base of the vertical linear estimators (see :mod:`vfl.linear` for the protocol).

    Subclasses set ``_loss`` and implement :meth:`label_targets` (the label party's targets in the
    loss's units, and what it keeps of them) and the prediction methods.
    """

    _loss: LinearLoss
    _label_dp = False
    privacy_ledger_: Any

    @renamed_parameters(RENAMED, label_dp_of)
    def __init__(
        self,
        *,
        max_iter: int = 100,
        batch_size: int | None = None,
        tol: float | None = 1e-4,
        n_iter_no_change: int = 5,
        learning_rate: float | None = None,
        optimizer: str | None = None,
        alpha: float | None = None,
        C: float = 1.0,  # noqa: N803 (scikit-learn's name)
        clip_outliers: bool = True,
        protocol: str = "shared",
        key_bits: int = 2048,
        random_state: int | None = None,
        standardize: bool = True,
        preprocess: Any = None,
        warm_start: bool = False,
        coordinator: str = "coordinator",
        workers: Any = None,
        timeout: float | None = None,
        insecure: bool = False,
        privacy: Any = None,
        verbose: int = 0,
    ) -> None:
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.learning_rate = learning_rate
        self.optimizer = optimizer
        self.alpha = alpha
        self.C = C
        self.clip_outliers = clip_outliers
        self.protocol = protocol
        self.key_bits = key_bits
        self.random_state = random_state
        self.standardize = standardize
        self.preprocess = preprocess
        self.warm_start = warm_start
        self.coordinator = coordinator
        self.workers = workers
        self.timeout = timeout
        self.insecure = insecure
        self.privacy = privacy
        self.verbose = verbose

    # -- what subclasses provide -------------------------------------------------------------

    def label_targets(
        self, y: Any, index: pd.Index, party: str, *, previous: PartyModel | None = None
    ) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        """The label party's targets ``(rows, outputs)`` in the loss's units (checked), and the
        fields its part keeps of them (classes, target scaling). Runs at the label party;
        ``previous`` is its part from the fit a warm start continues."""
        raise NotImplementedError

    def _learn_labels(self, part: PartyModel) -> None:
        """Set label-derived attributes (``classes_``) from the label party's part."""

    def _from_scores(self, scores: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """What the label party's :meth:`predict_party` returns for scores ``(rows, K)``."""
        return scores

    # -- checks ------------------------------------------------------------------------------

    def _optimizer(self) -> str:
        """The optimiser trained with: ``momentum`` under the secret-shared protocols (Adam's
        square roots are not linear in shares), ``adam`` by default otherwise."""
        if self.optimizer is None:
            return "momentum" if self.protocol in SHARED else "adam"
        return str(self.optimizer)

    def _alpha(self, rows: int | None) -> float:
        """The L2 penalty on the mean loss: ``alpha`` when given, else ``1 / (C * rows)``,
        which is scikit-learn's ``LogisticRegression(C=C)`` (and ``Ridge(alpha=1 / C)``) on
        the same rows, at every table size (0 where the rows are unknown: the coordinator,
        which applies no penalty)."""
        if self.alpha is not None:
            return float(self.alpha)
        return 1.0 / (float(self.C) * rows) if rows else 0.0

    def _batch_size(self, rows: int | None) -> int:
        """``batch_size``, or :func:`~vfl.training.schedule.auto_batch_size` of the rows (0
        where they are unknown: the coordinator derives it from the row count it is told)."""
        if self.batch_size is not None:
            return int(self.batch_size)
        return auto_batch_size(rows) if rows else 0

    def _wait_limit(self, rows: int) -> float:
        return wait_limit(self.timeout, rows, self.key_bits)

    def _check_params(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        optimizer = self._optimizer()
        if optimizer not in OPTIMIZERS:
            raise ValueError(
                f"optimizer must be one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}"
            )
        linear = [n for n, c in OPTIMIZERS.items() if c(1.0).linear_step(0) is not None]
        if self.protocol in SHARED and optimizer not in linear:
            raise ValueError(
                f"protocol={self.protocol!r} trains with an optimizer linear in the gradient "
                f"({sorted(linear)}): Adam's square roots cannot be computed on secret "
                "shares; use a gradient-revealing protocol ('coordinator', 'two_party') for "
                "Adam"
            )
        if self.privacy is not None and not isinstance(self.privacy, GaussianLabelDP):
            raise ValueError(
                f"privacy must be None or a GaussianLabelDP(epsilon, delta) (Gaussian noise on "
                f"the gradients), got {self.privacy!r}"
            )
        if self.protocol in SHARED and self.privacy is not None:
            raise ValueError(
                f"protocol={self.protocol!r} reveals no gradient, so label DP "
                "(privacy=GaussianLabelDP) has nothing to protect; it is for "
                "protocol='coordinator' or 'two_party'"
            )
        for name in ("max_iter", "batch_size"):
            value = getattr(self, name)
            if name == "batch_size" and value is None:
                continue
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.n_iter_no_change, int) or self.n_iter_no_change < 1:
            raise ValueError(
                f"n_iter_no_change must be a positive integer, got {self.n_iter_no_change!r}"
            )
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.alpha is not None and not self.alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha!r}")
        if not self.C > 0:
            raise ValueError(f"C must be > 0 (the inverse of the penalty), got {self.C!r}")
        self._check_preprocess()

    def _check_preprocess(self, data_parties: list[str] | None = None) -> None:
        """``preprocess`` is None/bool, a PartyPreprocessor, or a dict of them (or None) by
        party, whose parties are among ``data_parties`` when given."""
        allowed = (bool, PartyPreprocessor, type(None))
        value = self.preprocess
        if isinstance(value, dict):
            bad = {p: v for p, v in value.items() if not isinstance(v, allowed)}
            if bad or not all(isinstance(p, str) for p in value):
                raise ValueError(
                    "preprocess as a dict maps party names to a PartyPreprocessor, True or "
                    f"None; got {value!r}"
                )
            unknown = sorted(set(value) - set(data_parties or value))
            if unknown:
                raise ValueError(
                    f"preprocess names parties {unknown} that hold no data in this fit "
                    f"(the data parties: {sorted(data_parties or [])}); fix the names"
                )
        elif not isinstance(value, allowed):
            raise ValueError(
                "preprocess must be None/False, True (a default PartyPreprocessor per party), "
                f"a PartyPreprocessor, or a dict {{party: PartyPreprocessor or None}}; got "
                f"{value!r}"
            )

    def _preprocessor(self, party: str) -> PartyPreprocessor | None:
        """An unfitted copy of the preprocessing ``preprocess`` asks of ``party``, named
        after it (None: its numeric columns are used as they are)."""
        value = self.preprocess
        if isinstance(value, dict):
            value = value.get(party)
        if value is None or value is False:
            return None
        template = PartyPreprocessor() if value is True else value
        out: PartyPreprocessor = clone(template).set_params(party=party)
        return out

    def _workers(self) -> Any:
        # worker processes pay off under the secret-shared protocols at every batch size (a
        # batch's products cost the same whatever its rows; gmpy2 holds the interpreter lock
        # through products of its numbers, so a simulation's parties, threads of one process,
        # would otherwise take turns on one core: breast at batch 64, 0.41-0.46 -> 0.32-0.35 s
        # an epoch) and on large batches of the revealing ones (on small ones their traffic
        # costs what it saves); an executor (a Dask client) is used as given
        many = self.protocol in SHARED or (self.batch_size or 0) >= 512
        default = min(os.cpu_count() or 1, 4) if many else 1
        return self.workers if self.workers is not None else default

    def _policy(self) -> KeyPolicy:
        return KeyPolicy(self.key_bits, self.insecure)

    def _key_holder(self) -> str | None:
        return self.coordinator if self.protocol in ("coordinator", "shared_coordinator") else None

    def fit_spec(
        self, label_party: str, data_parties: list[str], rows: int | None = None
    ) -> FitSpec:
        """What every role of a fit on ``rows`` rows agrees on (hyperparameters checked,
        parties checked; the batch size and penalty derived from ``rows`` when not given)."""
        self._check_params()
        check_data_parties(list(data_parties), label_party)
        self._check_preprocess(list(data_parties))
        if self.protocol == "two_party" and len(data_parties) != 2:
            raise ValueError(
                f"protocol='two_party' needs exactly two data parties, got "
                f"{sorted(data_parties)}; for more, keep the default protocol='shared', which "
                "takes any number"
            )
        if self._key_holder() is not None and self.coordinator in data_parties:
            raise ValueError(
                f"{self.coordinator!r} is both a data party and the coordinator's name; pass "
                "coordinator='...' with another name"
            )
        noise = self._label_noise(len(data_parties) - 1)
        return FitSpec(
            label_noise=noise,
            row_clip=None if self.privacy is None else self.privacy.row_clip,
            loss=self._loss,
            label_party=label_party,
            data_parties=tuple(data_parties),
            coordinator=self._key_holder(),
            max_iter=self.max_iter,
            batch_size=self._batch_size(rows),
            tol=self.tol,
            patience=self.n_iter_no_change,
            learning_rate=self.learning_rate,
            optimizer=self._optimizer(),
            shared=self.protocol in SHARED,
            alpha=self._alpha(rows),
            warm_start=bool(self.warm_start and getattr(self, "parts_", None)),
            verbose=int(self.verbose),
            policy=self._policy(),
            workers=self._workers(),
            random_state=self.random_state,
        )

    def _label_noise(self, passives: int) -> float | None:
        """The noise multiplier that spends ``privacy``'s epsilon over the whole training
        (None without label DP)."""
        privacy = self.privacy
        if privacy is None:
            return None
        if not self._label_dp:
            raise ValueError(
                f"{type(self).__name__} has no label DP (its targets are unbounded); "
                "privacy=GaussianLabelDP(...) is for VerticalLogisticRegression"
            )
        privacy.check()
        if self.tol is not None:
            raise ValueError(
                "label DP needs a fixed number of epochs: set tol=None (stopping on the exact "
                "loss would reveal the labels through when training stops)"
            )
        if self.warm_start:
            raise ValueError(
                "label DP cannot continue a fit (warm_start=True): the earlier weights' spend "
                "would not be in this fit's account; fit from scratch"
            )
        from vfl.privacy.accounting import noise_multiplier_for

        return noise_multiplier_for(
            epsilon=privacy.epsilon,
            delta=privacy.delta,
            steps=self.max_iter * (1 + passives),
        )

    # -- the roles ---------------------------------------------------------------------------

    def _fit_roles(
        self,
        spec: FitSpec,
        frames: dict[str, pd.DataFrame | None],
        y: Any,
    ) -> dict[str, Role]:
        """One role per party of ``frames`` (None: a party whose data is elsewhere), plus the
        coordinator's; each data role holds only its own frame (and the labels, at the label
        party), all checked before any role starts."""
        roles: dict[str, Role] = {}
        previous = getattr(self, "parts_", {}) if self.warm_start else {}
        for name, frame in frames.items():
            if frame is None:
                continue
            is_label = name == spec.label_party
            earlier = previous.get(name)
            targets, keep = (
                self.label_targets(y, frame.index, name, previous=earlier)
                if is_label
                else (None, {})
            )
            outputs = targets.shape[1] if targets is not None else 1
            prep = self._preprocessor(name)
            if earlier is not None:
                part = self._warm_part(earlier, frame, keep, preprocessed=prep is not None)
            else:  # the preprocessing is fitted on this party's own rows, kept in its part
                features = frame if prep is None else prep.fit(frame).transform(frame)
                part = PartyModel.fresh(
                    name,
                    features,
                    standardize=self.standardize,
                    active=is_label,
                    outputs=outputs,
                    clip=self.clip_outliers,
                )
                for key, value in keep.items():
                    if key == "extra":  # beside the fences the part already keeps
                        part.extra.update(value)
                    else:
                        setattr(part, key, value)
                if prep is not None:
                    part.extra["preprocess"] = prep.to_dict()
            part.extra["data_parties"] = list(spec.data_parties)
            part.extra.pop("row_clip", None)  # the label party says whether rows are clipped
            x = part.design(frame)
            check_batch_size(name, len(x), x.shape[1] + int(is_label), spec.batch_size)
            role = SharedDataRole if spec.shared else DataRole
            roles[name] = role(spec, part, x, targets)
        if spec.coordinator is not None:
            coordinator = SharedCoordinatorRole if spec.shared else CoordinatorRole
            roles[spec.coordinator] = coordinator(spec)
        return roles

    @staticmethod
    def _warm_part(
        previous: PartyModel, frame: pd.DataFrame, keep: dict[str, Any], *, preprocessed: bool
    ) -> PartyModel:
        """A copy of the previous fit's part to continue from, refused when the columns, the
        classes or whether preprocessing is used changed; the previous preprocessing and
        standardisation (features and target) are kept, since the weights are in their units
        (so the raw columns are compared when preprocessing was used)."""
        name = previous.party
        state = previous.extra.get("preprocess")
        if (state is not None) != preprocessed:
            raise ValueError(
                f"party {name!r}: warm start {'without' if state else 'with'} preprocessing, "
                f"but the model was fitted {'with' if state else 'without'} it; fit with "
                "warm_start=False"
            )
        fitted = previous.input_columns
        if fitted != [str(c) for c in frame.columns]:
            raise ValueError(
                f"party {name!r}: warm start with other columns than fitted ({fitted});"
                " fit with warm_start=False"
            )
        before, now = previous.extra.get("classes"), keep.get("extra", {}).get("classes")
        if before is not None and now is not None and list(before) != list(now):
            raise ValueError(
                f"party {name!r}: warm start with the classes {now}, but the model was fitted on "
                f"{before}; fit with warm_start=False"
            )
        return PartyModel(
            **{**previous.__dict__, "coef": previous.coef.copy(), "extra": dict(previous.extra)}
        )

    def _collect(self, results: dict[str, Any], spec: FitSpec) -> None:
        """Read the roles' results (after the run)."""
        done = {n: r for n, r in results.items() if isinstance(r, FitResult)}
        self.parts_: dict[str, PartyModel] = {
            n: r.part for n, r in done.items() if r.part is not None
        }
        self.label_party_ = spec.label_party
        self.data_parties_ = list(spec.data_parties)
        self.n_iter_ = max((r.n_iter for r in done.values()), default=0)
        views = {n: r.view for n, r in done.items() if r.view is not None}
        if views:
            self.views_ = views
        elif hasattr(self, "views_"):  # no stale views from an earlier fit
            del self.views_
        label = done.get(spec.label_party)
        if label is not None and label.part is not None:
            self.loss_curve_ = list(label.loss_curve)
            self.best_epoch_ = label.best_epoch
            self.restarts_ = list(label.restarts)
            self.history_ = [
                {"epoch": i + 1, "loss": loss, "seconds": sec, "restart": i + 1 in label.restarts}
                for i, (loss, sec) in enumerate(
                    zip(label.loss_curve, label.epoch_seconds, strict=False)
                )
            ]
            warn_training(label, spec)
            self.epoch_seconds_ = list(label.epoch_seconds)
            self.setup_seconds_ = label.setup_seconds
            self.intercept_ = np.reshape(np.array(label.part.intercept, dtype=float), -1)
            self._learn_labels(label.part)
        else:
            self.loss_curve_ = []  # the loss is the label party's to learn
            self.history_ = []  # and so are the epochs' records (no stale ones of a refit)

    def _ledger(self, ledger: Any) -> Any:
        """The fit's ledger (``privacy_ledger_``; a new one unless given, empty without DP);
        what the roles record in (None without DP, which records nothing)."""
        delta = 1e-5 if self.privacy is None else self.privacy.delta
        kept = self._fitted_ledger(ledger, delta=delta)
        return None if self.privacy is None else kept

    # -- simulation --------------------------------------------------------------------------

    def fit(
        self,
        parts: dict[str, pd.DataFrame] | VerticalFrames,
        y: Any,
        *,
        label_party: str | None = None,
        keep_payloads: bool = False,
        keep_views: bool = False,
        ledger: Any = None,
    ) -> VerticalLinearModel:
        """Train with every party simulated in this process (one thread each).

        Parameters
        ----------
        parts : dict of str to DataFrame, or VerticalFrames
            Each party's features, all with the same index (the aligned common rows);
            :class:`~vfl.validation.VerticalFrames` for scikit-learn's model selection.
        y : array-like or Series
            Labels (targets) of those rows (a Series is aligned by index), held by
            ``label_party``.
        label_party : str
            The active party: one of ``parts`` (a VerticalFrames carries it).
        keep_payloads : bool
            Keep every message's payload in ``transcript_`` for audits (memory grows with the
            data); sizes are always kept.
        keep_views : bool
            Keep what each data party decrypts per batch in ``views_`` (``{party: [(rows,
            decrypted sum), ...]}``), for audits such as :class:`vfl.audit.LabelSolveAudit`.
        ledger : vfl.privacy.PrivacyLedger, optional
            Where label DP records its spend (with ``privacy=GaussianLabelDP(...)``); kept as
            ``privacy_ledger_`` (by default a new ledger, empty without DP).
        """
        label_party = label_party_of(parts, label_party)
        frames = check_parts(parts, label_party)
        rows = max(len(f) for f in frames.values())
        spec = replace(
            self.fit_spec(label_party, list(frames), rows),
            keep_views=keep_views,
            ledger=self._ledger(ledger),
        )
        roles = self._fit_roles(spec, dict(frames), y)
        results = self._simulate(roles, keep_payloads=keep_payloads, rows=rows)
        self._collect(results, spec)
        return self

    def _scores(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        """Scores ``(rows, outputs)`` of the rows of ``parts`` (simulated secure scoring)."""
        self._check_fitted()
        frames = check_parts(parts, self.label_party_)
        missing = sorted(set(self.parts_) - set(frames))
        extra = sorted(set(frames) - set(self.parts_))
        if missing or extra:
            raise ValueError(
                f"predict needs the parties the model was fitted with: missing {missing}, "
                f"unknown {extra}"
            )
        spec = self._score_spec(list(frames))
        roles: dict[str, Role] = {
            name: ScoreRole(spec, self.parts_[name], self.parts_[name].design(frame))
            for name, frame in frames.items()
        }
        if spec.coordinator is not None:
            roles[spec.coordinator] = ScoreCoordinatorRole(spec)
        rows = max(len(f) for f in frames.values())
        results = self._simulate(roles, fit=False, rows=rows)
        scores: np.ndarray[Any, Any] = results[self.label_party_]
        return scores

    def _score_spec(self, data_parties: list[str]) -> ScoreSpec:
        self._check_params()
        return ScoreSpec(
            self.label_party_,
            tuple(data_parties),
            self._key_holder(),
            self._policy(),
            self._workers(),
        )

    # -- deployment: one party, its own federation -------------------------------------------

    def fit_party(
        self,
        federation: Federation,
        frame: pd.DataFrame | None,
        y: Any = None,
        *,
        label_party: str,
        data_parties: list[str],
        ledger: Any = None,
    ) -> VerticalLinearModel:
        """Run this party's role of training (deployment): ``frame`` is its own aligned
        features (None for the coordinator), ``y`` its labels if it is ``label_party``,
        ``data_parties`` the names of all parties holding features; ``ledger`` as in
        :meth:`fit` (the label party records there)."""
        name = federation.name
        if frame is not None:
            frame = check_parts({name: frame}, name)[name]
        rows = None if frame is None else len(frame)
        spec = replace(
            self.fit_spec(label_party, list(data_parties), rows), ledger=self._ledger(ledger)
        )
        roles = self._fit_roles(spec, {name: frame}, y if name == label_party else None)
        self._collect(run_deployed(roles, federation), spec)
        return self

    def predict_party(
        self,
        federation: Federation,
        frame: pd.DataFrame | None,
        *,
        data_parties: list[str] | None = None,
    ) -> np.ndarray[Any, Any] | None:
        """Run this party's role of scoring (deployment): ``frame`` its own rows (None for the
        coordinator); ``data_parties`` defaults to those of the fit. The label party gets what
        ``decision_function`` (classifiers) or ``predict`` (regressors) would give, the
        others None."""
        name = federation.name
        parties = data_parties or getattr(self, "data_parties_", None)
        if not parties:
            raise ValueError("predict_party needs data_parties= (the parties holding features)")
        spec = self._score_spec(list(parties))
        roles: dict[str, Role] = {}
        if frame is not None:
            part = getattr(self, "parts_", {}).get(name)
            if part is None:
                raise ValueError(f"party {name!r} has no fitted part: fit or load it first")
            roles[name] = ScoreRole(spec, part, part.design(frame))
        elif spec.coordinator is not None:
            roles[spec.coordinator] = ScoreCoordinatorRole(spec)
        result = run_deployed(roles, federation)[name]
        return None if result is None else self._from_scores(np.asarray(result))

    # -- coefficients --------------------------------------------------------------------------

    def _held_parts(self) -> list[PartyModel]:
        self._check_fitted()
        order = list(getattr(self, "data_parties_", None) or self.parts_)
        return [self.parts_[p] for p in order if p in self.parts_]

    @property
    def coef_(self) -> np.ndarray[Any, Any]:
        """The coefficients this estimator holds, in standardised units, shape
        ``(outputs, columns)``: every party's in simulation (columns in
        :attr:`feature_names_in_` order, the data parties' order), only this party's own in
        deployment (a party never holds another's)."""
        parts = self._held_parts()
        blocks = [p.coef.reshape(len(p.columns), p.outputs) for p in parts]
        out: np.ndarray[Any, Any] = np.vstack(blocks).T
        return out

    @property
    def feature_names_in_(self) -> np.ndarray[Any, Any]:
        """The columns of :attr:`coef_`, as ``"<party>:<column>"``."""
        return np.array(
            [f"{p.party}:{c}" for p in self._held_parts() for c in p.columns], dtype=object
        )

    # -- persistence -------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the model to the folder ``path`` (created): each held party's part as
        ``<party>.npz`` (vflink's model format: weights, columns, standardisation; no key
        material, nothing of another party: in deployment a party saves only its own) and the
        privacy ledger, when DP spent anything, as ``privacy_ledger.json``. Returns the
        folder; :meth:`load` reads it back."""
        self._check_fitted()
        writers = {name: part.save for name, part in self.parts_.items()}
        return save_parts(path, writers, getattr(self, "privacy_ledger_", None))

    def load(self, *paths: str | Path, label_party: str | None = None) -> VerticalLinearModel:
        """Read a model written by :meth:`save`: its folder (every part in it, and its
        ledger), or part files (a party loads its own). ``label_party`` is the party whose
        part is the active one; name it where no loaded part is (a passive party loading its
        own, a coordinator loading none)."""
        from vfl.privacy import PrivacyLedger

        self.parts_ = {}
        self.privacy_ledger_ = PrivacyLedger()
        for path in model_files(paths):
            if path.name == "privacy_ledger.json":
                self.privacy_ledger_ = PrivacyLedger.load(path)
                continue
            part = PartyModel.load(path)
            self.parts_[part.party] = part
        self.label_party_ = label_party_of_parts(self.parts_, label_party)
        if self.label_party_ in self.parts_:
            self._learn_labels(self.parts_[self.label_party_])
        for part in self.parts_.values():
            if "data_parties" in part.extra:
                self.data_parties_ = list(part.extra["data_parties"])
        return self


def warn_training(result: FitResult, spec: FitSpec) -> None:
    """Say what went wrong in a fit, at the label party (in the caller's thread): a
    :class:`~vfl.training.divergence.DivergenceWarning` when the loss diverged (what the fit
    did about it, and which epoch it kept), else scikit-learn's ``ConvergenceWarning`` when
    ``max_iter`` ran out before the loss settled."""
    import warnings

    for note in result.notes:
        warnings.warn(note, UserWarning, stacklevel=4)
    if result.divergence:
        warnings.warn(result.divergence, DivergenceWarning, stacklevel=4)
    elif not result.converged and spec.tol is not None:
        from sklearn.exceptions import ConvergenceWarning

        warnings.warn(
            f"stopped after max_iter={spec.max_iter} epochs before the training loss settled "
            f"within tol={spec.tol} (kept epoch {result.best_epoch}); raise max_iter",
            ConvergenceWarning,
            stacklevel=4,
        )
