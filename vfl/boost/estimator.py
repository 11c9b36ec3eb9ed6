"""``SecureBoostClassifier`` and ``SecureBoostRegressor``: vertical gradient-boosted trees.

Each party's rows are one table of the same patients (aligned, as for every vertical model);
the label party holds the targets. ``fit(parts, y, label_party=...)`` runs the protocol of
:mod:`vfl.boost.protocol` with every party a thread of this process; ``predict`` routes the
rows through the trees, each host answering for its own splits.

Options as XGBoost users know them: ``n_estimators``, ``max_depth``, ``learning_rate``,
``min_child_weight``, ``reg_lambda``, ``min_split_loss`` (XGBoost's ``gamma``), ``max_bin``.
``subsample`` (the share of the rows each tree grows on, drawn by the label party: the hosts
see each tree's rows, random, and the others only where they split) and ``colsample_bytree``
(each party offers each tree a share of its own columns, drawn by itself) also halve the
ciphertext work at 0.5. Multiclass fits one multi-output tree per round (XGBoost's ``multi_strategy=
"multi_output_tree"``): every class's gradient pair travels in one plaintext, so a round
costs one encryption per row whatever the number of classes. ``protocol="paillier"``
(default, 2048-bit keys) or ``"plain"`` (the plaintext simulation: the same trees, gradients
in the clear; warns).

Early stopping (``early_stopping="auto"``: from 10,000 rows, as scikit-learn's
``HistGradientBoosting``): the label party holds out ``validation_fraction`` of the rows
(stratified by class), routes them with each tree as it grows, and stops when their loss has
not fallen by ``tol`` for ``n_iter_no_change`` trees, keeping the trees up to the best. The
hosts learn which rows are held out (each tree's root lists the rows it grows on).
``history_``: one record per tree grown (``epoch``, ``loss``, ``val_loss``, ``seconds``).

``save``/``load``: a folder of one file per party (:mod:`vfl.boost.part`); ``fit_party`` and
``predict_party`` run one party's role in deployment. After ``fit``: ``n_iter_`` trees were
grown, ``n_estimators_`` kept (fewer with early stopping).

``hide_nodes=True`` hides the instance space: per level the label party encrypts each row's
gradients at the slots of the node it is in (zeros elsewhere, every row), a host sums over all
rows and answers its splits for all rows, so it never learns a node's rows (nor the held-out
or sampled rows). The trees are the same; the cost is one encryption per row per level
instead of per tree.

Label privacy (``privacy=``): :class:`~vfl.privacy.GaussianGradientDP` (noise on each row's
gradients per tree; the fit then starts from 0, not from the labels' mean) or
:class:`~vfl.privacy.RandomizedResponse`; what a host infers is measured by
:class:`vfl.audit.InstanceSpaceAudit`. Not done: GOSS (its sample would tell the hosts which
rows have large gradients).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.model_selection import train_test_split

from vfl import persistence
from vfl.boost.objectives import Logistic, Objective, Softmax, Squared
from vfl.boost.part import BoostPart
from vfl.boost.protocol import BoostSpec, HostRole, HostScoreRole, LabelRole, LabelScoreRole
from vfl.boost.splits import SplitRule
from vfl.crypto.policy import KeyPolicy
from vfl.estimator import FederatedEstimator, Role, run_deployed
from vfl.federation.base import Federation
from vfl.persistence import model_files
from vfl.privacy import GaussianGradientDP, RandomizedResponse, record_randomized_response
from vfl.privacy.accounting import resolve_noise_multiplier
from vfl.privacy.mechanisms import randomized_response
from vfl.validation import check_data_parties, check_parts, label_party_of

__all__ = ["SecureBoostClassifier", "SecureBoostRegressor"]

PROTOCOLS = ("paillier", "plain")


class _SecureBoost(FederatedEstimator):
    def __init__(
        self,
        *,
        n_estimators: int = 50,
        max_depth: int = 3,
        learning_rate: float = 0.3,
        min_child_weight: float = 1.0,
        reg_lambda: float = 1.0,
        min_split_loss: float = 0.0,
        max_bin: int = 32,
        subsample: float = 1.0,
        colsample_bytree: float = 1.0,
        early_stopping: str | bool = "auto",
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        tol: float = 1e-7,
        local_first_tree: bool = False,
        hide_nodes: bool = False,
        privacy: Any = None,
        protocol: str = "paillier",
        key_bits: int = 2048,
        insecure: bool = False,
        workers: Any = None,
        random_state: int | None = None,
        verbose: int = 0,
        timeout: float | None = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.reg_lambda = reg_lambda
        self.min_split_loss = min_split_loss
        self.max_bin = max_bin
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.local_first_tree = local_first_tree
        self.hide_nodes = hide_nodes
        self.privacy = privacy
        self.protocol = protocol
        self.key_bits = key_bits
        self.insecure = insecure
        self.workers = workers
        self.random_state = random_state
        self.verbose = verbose
        self.timeout = timeout

    # -- hyperparameters ---------------------------------------------------------------------

    def _spec(
        self,
        label_party: str,
        parties: list[str],
        rows: int,
        strata: np.ndarray[Any, Any] | None,
        keep_views: bool = False,
    ) -> BoostSpec:
        for name in ("n_estimators", "max_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("learning_rate", "reg_lambda"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        for name in ("subsample", "colsample_bytree"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise ValueError(f"{name} must be in (0, 1], got {value!r}")
        for name in ("min_child_weight", "min_split_loss"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        policy = None
        if self.protocol == "paillier":
            policy = KeyPolicy(self.key_bits, self.insecure)
        else:
            warnings.warn(
                'protocol="plain" sends the gradients and histograms in the clear: a plaintext '
                "simulation, not for real parties",
                stacklevel=3,
            )
        check_data_parties(parties, label_party)
        return BoostSpec(
            label_party=label_party,
            parties=tuple([label_party] + [p for p in parties if p != label_party]),
            n_estimators=int(self.n_estimators),
            max_depth=int(self.max_depth),
            learning_rate=float(self.learning_rate),
            rule=SplitRule(
                float(self.reg_lambda), float(self.min_child_weight), float(self.min_split_loss)
            ),
            max_bin=int(self.max_bin),
            policy=policy,
            rows=rows,
            workers=self._workers(rows),
            validation=self._validation(rows, strata),
            n_iter_no_change=int(self.n_iter_no_change),
            tol=float(self.tol),
            verbose=int(self.verbose),
            local_first_tree=bool(self.local_first_tree),
            hide_nodes=bool(self.hide_nodes),
            keep_views=keep_views,
            subsample=float(self.subsample),
            colsample_bytree=float(self.colsample_bytree),
            seed=self.random_state,
            gradient_noise=self._gradient_noise(),
        )

    def _gradient_noise(self) -> float:
        """The Gaussian noise's standard deviation on each row's gradients under
        ``privacy=GaussianGradientDP``, else 0."""
        privacy = self.privacy
        if not isinstance(privacy, GaussianGradientDP):
            return 0.0
        multiplier = resolve_noise_multiplier(
            noise_multiplier=None,
            epsilon=privacy.epsilon,
            delta=privacy.delta,
            steps=int(self.n_estimators),
            what="GaussianGradientDP",
        )
        return multiplier * self._sensitivity

    @property
    def _sensitivity(self) -> float:
        """How far one label moves its row's gradients (L2): 1, or sqrt(2) with several
        classes (two of the row's entries move by 1)."""
        classes = getattr(self, "classes_", None)
        return 1.0 if classes is None or len(classes) <= 2 else float(np.sqrt(2.0))

    def _validation(self, rows: int, strata: np.ndarray[Any, Any] | None) -> Any:
        """The held-out rows of early stopping (stratified by class for a classifier), or
        None: ``early_stopping="auto"`` holds out from 10,000 rows on (scikit-learn's rule)."""
        if self.early_stopping not in ("auto", True, False):
            raise ValueError(
                f"early_stopping must be 'auto', True or False, got {self.early_stopping!r}"
            )
        on = rows > 10_000 if self.early_stopping == "auto" else bool(self.early_stopping)
        if self.privacy is not None and self.early_stopping is True:
            raise ValueError(
                "early_stopping=True reads the held-out rows' labels, which privacy= does not "
                "cover: pass early_stopping=False (or 'auto', which is off with privacy)"
            )
        if not on or self.privacy is not None:
            return None
        if not 0 < self.validation_fraction < 1:
            raise ValueError(
                f"validation_fraction must be in (0, 1), got {self.validation_fraction!r}"
            )
        if (
            isinstance(self.n_iter_no_change, bool)
            or not isinstance(self.n_iter_no_change, (int, np.integer))
            or self.n_iter_no_change < 1
        ):
            raise ValueError(
                f"n_iter_no_change must be a positive integer, got {self.n_iter_no_change!r}"
            )
        _, held = train_test_split(
            np.arange(rows),
            test_size=self.validation_fraction,
            random_state=self.random_state,
            stratify=strata,
        )
        return np.sort(held)

    def _workers(self, rows: int) -> Any:
        """``workers``, or by default one process per core (at most 4) from 2,048 rows
        (below, starting processes costs more than it saves)."""
        if self.workers is not None:
            return self.workers
        return min(os.cpu_count() or 1, 4) if rows >= 2048 else 1

    def _objective(self, y: np.ndarray[Any, Any], label_party: str) -> tuple[Objective, Any]:
        raise NotImplementedError

    # -- fitting -------------------------------------------------------------------------------

    def _targets(self, y: Any, index: pd.Index, label_party: str) -> Any:
        values = np.asarray(y.loc[index] if isinstance(y, pd.Series) else y)
        if values.shape != (len(index),):
            raise ValueError(
                f"labels of party {label_party!r}: expected {len(index)} values, one per row, "
                f"got shape {values.shape}"
            )
        return values

    def _roles(
        self,
        frames: dict[str, pd.DataFrame | None],
        y: Any,
        label_party: str,
        parties: list[str],
        rows: int,
        keep_views: bool = False,
    ) -> tuple[dict[str, Role], BoostSpec]:
        """The roles of the parties whose frames are given (the label party's needs ``y``)."""
        for party, frame in frames.items():
            if frame is None:
                raise ValueError(f"party {party!r} holds no rows to train on")
        label_frame = frames.get(label_party)
        learn: tuple[Objective, Any] | None = None
        strata = None
        self._check_privacy()
        self._fitted_ledger(None)
        if label_frame is not None:
            values = self._targets(y, label_frame.index, label_party)
            learn = self._objective(values, label_party)
            strata = learn[1] if isinstance(learn[0], (Logistic, Softmax)) else None
            learn = self._private(learn, label_party)
        spec = self._spec(label_party, parties, rows, strata, keep_views)
        roles: dict[str, Role] = {}
        for party, frame in frames.items():
            if party == label_party and label_frame is not None and learn is not None:
                roles[party] = LabelRole(spec, label_frame, learn[1], learn[0])
            elif frame is not None:
                roles[party] = HostRole(spec, frame)
        return roles, spec

    def fit(
        self,
        parts: dict[str, pd.DataFrame],
        y: Any,
        *,
        label_party: str | None = None,
        keep_payloads: bool = False,
        keep_views: bool = False,
    ) -> _SecureBoost:
        """Fit on ``parts`` (``{party: DataFrame}``, rows aligned), ``y`` the label party's
        targets (one per row); every party a thread of this process. ``keep_views``: keep
        each host's instance space (``views_[host]``: the row positions of every node it was
        asked about), for :class:`vfl.audit.InstanceSpaceAudit`."""
        label_party = label_party_of(parts, label_party)
        frames = check_parts(parts, label_party)
        rows = len(frames[label_party])
        _check_size(rows)
        roles, spec = self._roles(dict(frames), y, label_party, list(frames), rows, keep_views)
        results = self._simulate(roles, keep_payloads=keep_payloads, rows=rows)
        self._collect(results, spec)
        self.views_ = {
            p: r.view for p, r in results.items() if getattr(r, "view", None) is not None
        }
        return self

    def fit_party(
        self,
        federation: Federation,
        frame: pd.DataFrame | None,
        y: Any = None,
        *,
        label_party: str,
        data_parties: list[str],
    ) -> _SecureBoost:
        """Run this party's role of training (deployment): ``frame`` its own aligned rows,
        ``y`` its targets if it is ``label_party``."""
        name = federation.name
        if name != label_party and name not in data_parties:
            return self  # a coordinator of the deployment: SecureBoost has no role for it
        if frame is None:
            raise ValueError(f"party {name!r} holds no rows to train on")
        frame = check_parts({name: frame}, name)[name]
        _check_size(len(frame))
        roles, spec = self._roles({name: frame}, y, label_party, list(data_parties), len(frame))
        self._collect(run_deployed(roles, federation), spec)
        return self

    def _collect(self, results: dict[str, Any], spec: BoostSpec) -> None:
        """Each held party's part (in deployment, only this party's)."""
        extra = {
            "label_party": spec.label_party,
            "data_parties": list(spec.parties),
            "task": self._task,
            "max_bin": spec.max_bin,
        }
        self.parts_: dict[str, BoostPart] = {}
        for party, result in results.items():
            if party == spec.label_party:  # the classes or the targets' scale: its own
                self.parts_[party] = BoostPart(
                    party,
                    "active",
                    result.mapper,
                    result.table,
                    result.trees,
                    result.start,
                    extra={**extra, **self._target_description()},
                )
                self.history_ = list(result.history)
                self.n_estimators_ = len(result.trees)
                self.n_iter_ = len(result.history)
            else:
                self.parts_[party] = BoostPart(
                    party, "passive", result.mapper, result.table, extra=extra
                )
        self.label_party_, self.data_parties_ = spec.label_party, list(spec.parties)
        if spec.label_party not in results:
            self.history_, self.n_iter_ = [], 0

    # -- label privacy -------------------------------------------------------------------------

    def _check_privacy(self) -> None:
        privacy = self.privacy
        if privacy is None:
            return
        if not isinstance(privacy, (GaussianGradientDP, RandomizedResponse)):
            raise ValueError(
                "privacy must be GaussianGradientDP(epsilon) or RandomizedResponse(epsilon), "
                f"got {privacy!r}"
            )
        if self._task != "classification":
            raise ValueError(
                f"privacy={type(privacy).__name__}(...) protects class labels: "
                f"{type(self).__name__} has none (regression targets are not covered)"
            )
        privacy.check()

    def _private(self, learn: tuple[Objective, Any], label_party: str) -> tuple[Objective, Any]:
        """The label party's targets under ``privacy=`` (randomised response draws new
        labels once, from the OS), and the spend in ``privacy_ledger_``."""
        privacy, ledger = self.privacy, self.privacy_ledger_
        objective, targets = learn
        if isinstance(privacy, RandomizedResponse):
            codes = np.asarray(targets).astype(np.int64)
            noisy = randomized_response(codes, classes=len(self.classes_), epsilon=privacy.epsilon)
            record_randomized_response(ledger, holder=label_party, epsilon=privacy.epsilon)
            return objective, noisy.astype(np.asarray(targets).dtype)
        if isinstance(privacy, GaussianGradientDP):
            ledger.record(
                holder=label_party,
                data="its labels (noisy gradients, one release per tree)",
                mechanism="gaussian",
                noise_multiplier=self._gradient_noise() / self._sensitivity,
                sensitivity=self._sensitivity,
                steps=int(self.n_estimators),
            )
        return objective, targets

    # -- scoring -------------------------------------------------------------------------------

    def _raw(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        """Raw scores ``(rows, outputs)`` of the rows of ``parts`` (simulated scoring)."""
        self._check_fitted("parts_")
        frames = check_parts(parts, self.label_party_)
        if sorted(frames) != sorted(self.data_parties_) or sorted(self.parts_) != sorted(frames):
            raise ValueError(
                f"predict needs the parties the model was fitted with: "
                f"{sorted(self.data_parties_)}, got {sorted(frames)}"
            )
        roles = self._score_roles(frames)
        rows = len(frames[self.label_party_])
        out: np.ndarray[Any, Any] = self._simulate(roles, fit=False, rows=rows)[self.label_party_]
        return out

    def _score_roles(self, frames: dict[str, pd.DataFrame]) -> dict[str, Role]:
        roles: dict[str, Role] = {}
        for party, frame in frames.items():
            part = self.parts_.get(party)
            if part is None:
                raise ValueError(f"party {party!r} has no fitted part: fit or load it first")
            if party == self.label_party_:
                roles[party] = LabelScoreRole(tuple(self.data_parties_), part, frame)
            else:
                roles[party] = HostScoreRole(self.label_party_, part, frame)
        return roles

    def predict_party(
        self,
        federation: Federation,
        frame: pd.DataFrame | None,
        *,
        data_parties: list[str] | None = None,
    ) -> np.ndarray[Any, Any] | None:
        """Run this party's role of scoring (deployment): the label party gets what
        ``predict_proba`` (classifiers) or ``predict`` (regressors) would give, the others
        None."""
        name = federation.name
        if frame is None and name not in getattr(self, "parts_", {}):
            return None  # a coordinator of the deployment: no role here
        if frame is None:
            raise ValueError(f"party {name!r}: give its rows to score")
        if data_parties is not None:
            self.data_parties_ = list(data_parties)
        frame = check_parts({name: frame}, name)[name]
        raw = run_deployed(self._score_roles({name: frame}), federation)[name]
        return None if raw is None else self._from_raw(np.asarray(raw))

    # -- saving --------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the model to the folder ``path``: each held party's part as ``<party>.npz``
        (a party saves only its own: a host's split thresholds stay in its file). Returns
        the folder."""
        self._check_fitted("parts_")
        writers = {party: part.save for party, part in self.parts_.items()}
        return persistence.save_parts(path, writers, getattr(self, "privacy_ledger_", None))

    def load(self, *paths: str | Path, label_party: str | None = None) -> _SecureBoost:
        """Read a model written by :meth:`save` (or ``vflink party``): its folder, or part
        files (a party loads its own)."""
        from vfl.privacy import PrivacyLedger

        self.privacy_ledger_ = PrivacyLedger()
        self.parts_ = {}
        for path in model_files(paths):
            if path.name == persistence.LEDGER:
                self.privacy_ledger_ = PrivacyLedger.load(path)
                continue
            part = BoostPart.load(path)
            if part.extra.get("task") != self._task:
                raise ValueError(
                    f"{path} holds a {part.extra.get('task')} model; load it with the "
                    f"matching estimator, not {type(self).__name__}"
                )
            self.parts_[part.party] = part
        if not self.parts_:
            if paths or label_party is None:
                raise ValueError(f"no SecureBoost part in {[str(p) for p in paths]}")
            self.label_party_, self.data_parties_, self.history_ = label_party, [], []
            return self  # a coordinator, which holds no part
        extra = next(iter(self.parts_.values())).extra
        self.label_party_ = label_party or str(extra["label_party"])
        self.data_parties_ = [str(p) for p in extra["data_parties"]]
        active = self.parts_.get(self.label_party_)
        if active is not None:  # the classes or the targets' scale: in its part only
            self._read_target_description(active.extra)
        self.n_estimators_ = len(active.trees) if active is not None else 0
        self.history_ = []
        return self

    # -- the targets -----------------------------------------------------------------------------

    _task = ""

    def _target_description(self) -> dict[str, Any]:
        return {}

    def _read_target_description(self, extra: dict[str, Any]) -> None:
        pass

    def _from_raw(self, raw: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        raise NotImplementedError


MAX_ROWS = 1 << 23
"""The most rows a fit takes: sums of fixed-point gradients up to 64 (``2**30``) stay exact
in float64 below ``2**53``."""


def _check_size(rows: int) -> None:
    if rows > MAX_ROWS:
        raise ValueError(
            f"SecureBoost fits at most {MAX_ROWS:,} rows ({rows:,} given): sample the rows "
            "(subsample= draws a share per tree, but the fit still holds them all)"
        )


class SecureBoostClassifier(ClassifierMixin, _SecureBoost):  # type: ignore[misc]
    """Vertical gradient-boosted trees for binary and multiclass labels (see the module
    docstring)."""

    _task = "classification"

    def _target_description(self) -> dict[str, Any]:
        """The classes, at the label party (a host never learns them)."""
        classes = getattr(self, "classes_", None)
        if classes is None:
            return {}
        return {"classes": [c.item() if isinstance(c, np.generic) else c for c in classes]}

    def _read_target_description(self, extra: dict[str, Any]) -> None:
        if "classes" in extra:
            self.classes_ = np.array(extra["classes"])

    def _from_raw(self, raw: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Class probabilities ``(rows, classes)``."""
        if raw.shape[1] == 1:
            p = 1.0 / (1.0 + np.exp(-raw[:, 0]))
            return np.column_stack([1 - p, p])
        z = np.exp(raw - raw.max(axis=1, keepdims=True))
        out: np.ndarray[Any, Any] = z / z.sum(axis=1, keepdims=True)
        return out

    def _classes(self, y: np.ndarray[Any, Any]) -> Any:
        """The targets as class codes (and ``classes_``)."""
        self.classes_, codes = np.unique(y, return_inverse=True)
        return codes.astype(np.float64) if len(self.classes_) == 2 else codes

    def _objective(self, y: np.ndarray[Any, Any], label_party: str) -> tuple[Objective, Any]:
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(
                f"labels of party {label_party!r}: one class only ({self.classes_[0]!r}); "
                "a classifier needs two or more"
            )
        if len(self.classes_) == 2:
            return Logistic(), codes.astype(np.float64)
        return Softmax(len(self.classes_)), codes

    def decision_function(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        raw = self._raw(parts)
        out: np.ndarray[Any, Any] = raw[:, 0] if raw.shape[1] == 1 else raw
        return out

    def predict_proba(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        return self._from_raw(self._raw(parts))

    def predict(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = self.classes_[np.argmax(self.predict_proba(parts), axis=1)]
        return out


class SecureBoostRegressor(RegressorMixin, _SecureBoost):  # type: ignore[misc]
    """Vertical gradient-boosted trees for real targets, fitted on the targets standardised
    at the label party (squared error; see the module docstring)."""

    _task = "regression"

    def _target_description(self) -> dict[str, Any]:
        """The targets' mean and scale, at the label party (a host never learns them)."""
        if not hasattr(self, "target_mean_"):
            return {}
        return {"target": [self.target_mean_, self.target_scale_]}

    def _read_target_description(self, extra: dict[str, Any]) -> None:
        if "target" in extra:
            self.target_mean_, self.target_scale_ = (float(v) for v in extra["target"])

    def _from_raw(self, raw: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = raw[:, 0] * self.target_scale_ + self.target_mean_
        return out

    def _objective(self, y: np.ndarray[Any, Any], label_party: str) -> tuple[Objective, Any]:
        values = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(values)):
            raise ValueError(f"labels of party {label_party!r}: targets must be finite numbers")
        self.target_mean_ = float(values.mean())
        self.target_scale_ = float(values.std()) or 1.0
        return Squared(), (values - self.target_mean_) / self.target_scale_

    def predict(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        return self._from_raw(self._raw(parts))
