"""``SecureBoostClassifier`` and ``SecureBoostRegressor``: vertical gradient-boosted trees.

Each party's rows are one table of the same patients (aligned, as for every vertical model);
the label party holds the targets. ``fit(parts, y, label_party=...)`` runs the protocol of
:mod:`vfl.boost.protocol` with every party a thread of this process; ``predict`` routes the
rows through the trees, each host answering for its own splits.

Options as XGBoost users know them: ``n_estimators``, ``max_depth``, ``learning_rate``,
``min_child_weight``, ``reg_lambda``, ``min_split_loss`` (XGBoost's ``gamma``), ``max_bin``.
Multiclass fits one multi-output tree per round (XGBoost's ``multi_strategy=
"multi_output_tree"``): every class's gradient pair travels in one plaintext, so a round
costs one encryption per row whatever the number of classes. ``protocol="paillier"``
(default, 2048-bit keys) or ``"plain"`` (the plaintext simulation: the same trees, gradients
in the clear; warns).

Early stopping (``early_stopping="auto"``: from 10,000 rows, as scikit-learn's
``HistGradientBoosting``): the label party holds out ``validation_fraction`` of the rows
(stratified by class), routes them with each tree as it grows, and stops when their loss has
not fallen by ``tol`` for ``n_iter_no_change`` trees, keeping the trees up to the best. The
hosts learn the held-out rows only as rows of the nodes they split. ``history_``: one record
per tree grown (``epoch``, ``loss``, ``val_loss``, ``seconds``).

Being built (issue #32): not yet ``save``/``load``, row and column subsampling, the privacy
options, ``vflink party``; this module is not exported from ``vfl`` until they are.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.model_selection import train_test_split

from vfl.boost.objectives import Logistic, Objective, Softmax, Squared
from vfl.boost.protocol import (
    BoostSpec,
    HostResult,
    HostRole,
    HostScoreRole,
    LabelResult,
    LabelRole,
    LabelScoreRole,
)
from vfl.boost.splits import SplitRule
from vfl.crypto.policy import KeyPolicy
from vfl.estimator import FederatedEstimator, Role
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
        early_stopping: str | bool = "auto",
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        tol: float = 1e-7,
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
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.protocol = protocol
        self.key_bits = key_bits
        self.insecure = insecure
        self.workers = workers
        self.random_state = random_state
        self.verbose = verbose
        self.timeout = timeout

    # -- hyperparameters ---------------------------------------------------------------------

    def _spec(
        self, label_party: str, parties: list[str], rows: int, strata: np.ndarray[Any, Any] | None
    ) -> BoostSpec:
        for name in ("n_estimators", "max_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("learning_rate", "reg_lambda"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
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
        )

    def _validation(self, rows: int, strata: np.ndarray[Any, Any] | None) -> Any:
        """The held-out rows of early stopping (stratified by class for a classifier), or
        None: ``early_stopping="auto"`` holds out from 10,000 rows on (scikit-learn's rule)."""
        if self.early_stopping not in ("auto", True, False):
            raise ValueError(
                f"early_stopping must be 'auto', True or False, got {self.early_stopping!r}"
            )
        on = rows > 10_000 if self.early_stopping == "auto" else bool(self.early_stopping)
        if not on:
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
        """``workers``, or by default both cores from 2,048 rows (below, starting processes
        costs more than it saves)."""
        if self.workers is not None:
            return self.workers
        return min(os.cpu_count() or 1, 4) if rows >= 2048 else 1

    def _objective(self, y: np.ndarray[Any, Any], label_party: str) -> tuple[Objective, Any]:
        raise NotImplementedError

    # -- fitting -------------------------------------------------------------------------------

    def fit(
        self,
        parts: dict[str, pd.DataFrame],
        y: Any,
        *,
        label_party: str | None = None,
        keep_payloads: bool = False,
    ) -> _SecureBoost:
        """Fit on ``parts`` (``{party: DataFrame}``, rows aligned), ``y`` the label party's
        targets (one per row)."""
        label_party = label_party_of(parts, label_party)
        frames = check_parts(parts, label_party)
        rows = len(frames[label_party])
        values = np.asarray(y.loc[frames[label_party].index] if isinstance(y, pd.Series) else y)
        if values.shape != (rows,):
            raise ValueError(
                f"labels of party {label_party!r}: expected {rows} values, one per row, got "
                f"shape {values.shape}"
            )
        objective, targets = self._objective(values, label_party)
        strata = targets if isinstance(objective, (Logistic, Softmax)) else None
        spec = self._spec(label_party, list(frames), rows, strata)
        roles: dict[str, Role] = {
            p: HostRole(spec, frames[p]) for p in spec.parties if p != label_party
        }
        roles[label_party] = LabelRole(spec, frames[label_party], targets, objective)
        results = self._simulate(roles, keep_payloads=keep_payloads, rows=rows)
        self.spec_ = spec
        self.label_part_: LabelResult = results[label_party]
        self.host_parts_: dict[str, HostResult] = {
            p: results[p] for p in spec.parties if p != label_party
        }
        self.label_party_ = label_party
        self.n_estimators_ = len(self.label_part_.trees)
        self.history_ = list(self.label_part_.history)
        self._fitted_ledger(None)
        return self

    def _raw(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        """Raw scores ``(rows, outputs)`` of the rows of ``parts`` (simulated scoring)."""
        self._check_fitted("label_part_")
        frames = check_parts(parts, self.label_party_)
        if sorted(frames) != sorted(self.spec_.parties):
            raise ValueError(
                f"predict needs the parties the model was fitted with: {sorted(self.spec_.parties)}"
                f", got {sorted(frames)}"
            )
        roles: dict[str, Role] = {
            p: HostScoreRole(self.spec_, part, frames[p]) for p, part in self.host_parts_.items()
        }
        roles[self.label_party_] = LabelScoreRole(
            self.spec_, self.label_part_, frames[self.label_party_]
        )
        out: np.ndarray[Any, Any] = self._simulate(
            roles, fit=False, rows=len(frames[self.label_party_])
        )[self.label_party_]
        return out


class SecureBoostClassifier(ClassifierMixin, _SecureBoost):  # type: ignore[misc]
    """Vertical gradient-boosted trees for binary and multiclass labels (see the module
    docstring)."""

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
        raw = self._raw(parts)
        if raw.shape[1] == 1:
            p = 1.0 / (1.0 + np.exp(-raw[:, 0]))
            return np.column_stack([1 - p, p])
        z = np.exp(raw - raw.max(axis=1, keepdims=True))
        out: np.ndarray[Any, Any] = z / z.sum(axis=1, keepdims=True)
        return out

    def predict(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = self.classes_[np.argmax(self.predict_proba(parts), axis=1)]
        return out


class SecureBoostRegressor(RegressorMixin, _SecureBoost):  # type: ignore[misc]
    """Vertical gradient-boosted trees for real targets, fitted on the targets standardised
    at the label party (squared error; see the module docstring)."""

    def _objective(self, y: np.ndarray[Any, Any], label_party: str) -> tuple[Objective, Any]:
        values = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(values)):
            raise ValueError(f"labels of party {label_party!r}: targets must be finite numbers")
        self.target_mean_ = float(values.mean())
        self.target_scale_ = float(values.std()) or 1.0
        return Squared(), (values - self.target_mean_) / self.target_scale_

    def predict(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = self._raw(parts)[:, 0] * self.target_scale_ + self.target_mean_
        return out
