"""Vertical (split-feature) logistic regression under Paillier encryption.

The parties hold different columns of the same (aligned) rows. The *active* party holds the
label and the intercept; *passive* parties hold features only. Training minimises the Taylor
approximation of the logistic loss, ``log 2 - y'u/2 + u^2/8`` with ``y' = 2y - 1`` and
``u = sum of the parties' partial scores``, whose gradient in ``u`` is ``(u - 2y') / 4``:
linear in ``u``, hence computable under additively homomorphic encryption.

The parties' features stay where they are; what moves is a one-off encryption of them. Per
batch, the gradient of party ``t`` is ``X_t^T 4d`` with ``4d = sum over parties p of z_p``,
where ``z_A = u_A - 2y'`` at the active party (its partial score and its labels) and
``z_k = u_k`` at a passive party (its partial score). So each party only needs ``X_t^T z_p``
for every other party ``p``, which ``p`` can compute from ``t``'s rows encrypted once:

* **setup, once per fit**: every data party rounds its features to multiples of ``2**-20``,
  packs each row into as few plaintexts as fit (one for up to about 15-22 columns at 2048 bits:
  signed slots wide enough for a batch sum), encrypts them and sends them to every other data
  party -- one encryption per row, not per row and epoch;
* **per batch**: every party ``p`` computes ``[[X_t^T z_p]]`` for every other party ``t`` as one
  Pippenger multi-exponentiation over ``t``'s encrypted rows (negative ``z`` use the rows'
  inverses, computed once), re-randomises it and sends it to ``t``; ``t`` multiplies together
  what it receives, has the sum decrypted, and adds ``X_t^T z_t`` of its own in the clear.

``protocol="coordinator"`` (in the spirit of Hardy et al. 2017 and FATE's hetero-LR, whose
coordinator holds the only key): the rows are encrypted under the coordinator's key; ``t``
hides each slot of the summed share under a random mask with 40 bits of statistical hiding
before the coordinator decrypts it, and removes the masks from the answer.

``protocol="two_party"`` (no third party; exactly two data parties, each with its own key
pair): the rows are encrypted under their owner's key, so the share computed on them comes
back to the owner, who decrypts it itself. Nobody else ever decrypts anything.

The loss ``8 * sum(log 2 - y'u/2 + u^2/8)`` of a batch splits into the active party's part
``8 n log 2 + |u_A|^2 - 4 y'.u_A`` and each passive party's ``2 w_k^T G_k + |u_k|^2``, where
``G_k`` is the share it decrypted (``w_k^T G_k`` is the inner product of its scores with the
others'); with two or more passives their cross terms ``-2 u_k.u_l`` come from one encrypted
score vector per batch of all passives but the last (the only per-row encryptions after
setup). The passives send their epoch sums encrypted; the active party learns the total once
per epoch (through a masked decryption by the coordinator, or with its own key).

Compared with encrypting the partial scores (or residuals) every batch, as Hardy et al. and
FATE do, this moves every per-row encryption to the setup: an epoch then costs one
multi-exponentiation per party and direction per batch, several hundred times less than phe
object by object (``benchmarks/vfl_lr.py``). What each role learns is the same (its own
gradients and, for the label party, the loss); the difference is that encrypted features, not
encrypted scores, sit at the other parties: under the honest-but-curious, no-collusion model
that is equally safe (Paillier is semantically secure), but a coordinator colluding with a
data party could decrypt the other parties' features (with score encryption it would read
their partial scores). ``protocol="two_party"`` has no such third party.

**What each role learns** (honest-but-curious parties, no collusion): every data party learns
its own weights and its own gradient of each mini-batch -- an aggregate ``X_j^T (u - 2y')``
over the batch, which is the known leakage of gradient-based vertical LR (Hardy et al.; FATE):
to keep a single batch from being solved for per-row values, every batch must have more rows
than the party has columns (checked; a short last batch joins the one before). The active
party learns the training loss per epoch (``loss_curve_``) and, at prediction, the scores of
the predicted rows -- with a single passive party that is also the passive party's partial
score of each predicted row, which any protocol that gives the active party the score
reveals. The coordinator decrypts only masked values; in ``two_party`` each party decrypts only
the shares computed on its own rows. No party sees another's features, labels, partial scores,
residuals or gradients; ``tests/vfl/test_logistic.py`` checks every message of a run for them.

Numerics: each party may standardise its own columns (``standardize=True``); features are then
rounded to multiples of ``2**-20`` and every ``z`` to multiples of ``2**-32``, so the shares are
exact integers; the encrypted run matches a plaintext run of the same protocol
(:func:`plaintext_reference`) to about ``1e-9`` in the weights. The packing's slot width is
public (it follows from the batch size and the magnitude of the party's largest feature, in
bits).
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning

from vfl.crypto import EncryptedVector, generate_paillier_keypair, matvec
from vfl.crypto.kernels import batch_invert, multiexp
from vfl.crypto.keys import PaillierPrivateKey, PaillierPublicKey
from vfl.crypto.packing import pack_masked
from vfl.federation import Federation, LocalFederation

__all__ = ["VerticalLogisticRegression", "plaintext_reference"]

logger = logging.getLogger(__name__)

FEATURE_BITS = 20
"""Features are rounded to multiples of ``2**-FEATURE_BITS`` before training."""
SCORE_BOUND = 2.0**16
"""Public bound on ``|u|`` used to size masks; larger partial scores raise an overflow error."""
KAPPA = 40
"""Bits of statistical hiding of every mask."""
SCORE_BITS = 32
"""Partial scores and residual terms ``z`` are rounded to multiples of ``2**-SCORE_BITS``."""
ROWS_MESSAGE_BYTES = 32 * 2**20
"""Bytes of encrypted feature rows per setup message (62k rows of one group at 2048 bits)."""
Z_BITS = SCORE_BITS + 17
"""Bits of ``|z| * 2**SCORE_BITS`` (``|z| <= SCORE_BOUND + 2 < 2**17``)."""
PROTOCOLS = ("coordinator", "two_party")
OPTIMIZERS = ("adam", "sgd")


@dataclass
class PartyModel:
    """One party's fitted part: its columns, standardisation and weights (nothing else)."""

    party: str
    role: str
    columns: list[str]
    mean: np.ndarray[Any, Any]
    scale: np.ndarray[Any, Any]
    coef: np.ndarray[Any, Any]
    intercept: float = 0.0

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": "vflink.VerticalLogisticRegression.part/1",
                "party": self.party,
                "role": self.role,
                "columns": self.columns,
                "mean": self.mean.tolist(),
                "scale": self.scale.tolist(),
                "coef": self.coef.tolist(),
                "intercept": self.intercept,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> PartyModel:
        try:
            data = json.loads(text)
            if data.get("format") != "vflink.VerticalLogisticRegression.part/1":
                raise ValueError("not a saved VerticalLogisticRegression part")
            return cls(
                party=str(data["party"]),
                role=str(data["role"]),
                columns=[str(c) for c in data["columns"]],
                mean=np.asarray(data["mean"], dtype=float),
                scale=np.asarray(data["scale"], dtype=float),
                coef=np.asarray(data["coef"], dtype=float),
                intercept=float(data["intercept"]),
            )
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a saved VerticalLogisticRegression part: {exc}") from None

    def design(self, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        """This party's standardised, rounded feature matrix of ``frame`` (checked)."""
        values = _numeric(frame, self.party, self.columns)
        return _quantize((values - self.mean) / self.scale)


@dataclass
class _Config:
    max_iter: int
    batch_size: int
    tol: float | None
    learning_rate: float
    optimizer: str
    alpha: float
    key_bits: int
    insecure: bool
    workers: int
    seed: int | None
    epoch_seconds: list[float] = field(default_factory=list)
    setup_seconds: float = 0.0


# -- the estimator -----------------------------------------------------------------------------


class VerticalLogisticRegression(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """Logistic regression on columns split across parties, trained under Paillier encryption.

    Parameters
    ----------
    max_iter : int
        Epochs at most.
    batch_size : int
        Rows per mini-batch (the last batch of an epoch may be smaller).
    tol : float or None
        Stop when an epoch lowers the (securely computed, Taylor) training loss by less than
        ``tol``; None runs ``max_iter`` epochs.
    learning_rate : float
        Step size (Adam) or initial step size (SGD, decayed as ``1 / (1 + epoch)``).
    optimizer : {"adam", "sgd"}
        Each party runs it on its own weights, which is the same as running it centrally.
    alpha : float
        L2 penalty on the weights (not the intercept).
    protocol : {"coordinator", "two_party"}
        See the module docstring.
    key_bits : int
        Paillier modulus size (2048 by default; smaller needs ``insecure=True``).
    random_state : int, optional
        Seeds the mini-batch order (not the cryptography, whose randomness is from the OS).
    standardize : bool
        Each party standardises its own columns with its own training means and deviations.
    warm_start : bool
        Continue from the fitted weights on the next ``fit``.
    coordinator : str
        Name of the coordinator party (``protocol="coordinator"``).
    workers : int, optional
        Processes for encryption and ``X^T [[d]]`` (default: all cores, up to 4, for batches of
        512 rows or more; one process below, where the parties' threads already fill the
        cores).
    timeout : float
        Seconds any party waits for a message before failing.

    Attributes
    ----------
    parts_ : dict of str to PartyModel
        Each party's fitted part (in deployment, only this party's).
    classes_, n_iter_, loss_curve_, epoch_seconds_, label_party_, transcript_
        The classes (0, 1), epochs run, training loss per epoch (the active party's view), the
        wall time of each epoch at the label party, the label party, and the message
        transcript of the last simulated ``fit``.
    """

    def __init__(
        self,
        *,
        max_iter: int = 30,
        batch_size: int = 256,
        tol: float | None = 1e-4,
        learning_rate: float = 0.05,
        optimizer: str = "adam",
        alpha: float = 1e-3,
        protocol: str = "coordinator",
        key_bits: int = 2048,
        random_state: int | None = None,
        standardize: bool = True,
        warm_start: bool = False,
        coordinator: str = "coordinator",
        workers: int | None = None,
        timeout: float = 600.0,
        insecure: bool = False,
    ) -> None:
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.tol = tol
        self.learning_rate = learning_rate
        self.optimizer = optimizer
        self.alpha = alpha
        self.protocol = protocol
        self.key_bits = key_bits
        self.random_state = random_state
        self.standardize = standardize
        self.warm_start = warm_start
        self.coordinator = coordinator
        self.workers = workers
        self.timeout = timeout
        self.insecure = insecure

    # -- simulation ---------------------------------------------------------------------------

    def fit(
        self,
        parts: dict[str, pd.DataFrame],
        y: Any,
        *,
        label_party: str,
        keep_payloads: bool = False,
    ) -> VerticalLogisticRegression:
        """Train with every party simulated in this process (one thread each).

        Parameters
        ----------
        parts : dict of str to DataFrame
            Each party's features, all with the same index (the aligned common rows).
        y : array-like or Series of 0/1
            Labels of those rows (a Series is aligned by index), held by ``label_party``.
        label_party : str
            The active party: one of ``parts``.
        keep_payloads : bool
            Keep every message's payload in ``transcript_`` for audits (memory grows with the
            data: a few hundred bytes per row and epoch); sizes are always kept.
        """
        frames = _check_parts(parts, label_party)
        labels = _check_labels(y, frames[label_party].index, label_party)
        _check_data_parties(list(frames), label_party)
        if self.protocol == "two_party" and len(frames) != 2:
            raise ValueError(
                f"protocol='two_party' needs exactly two data parties, got {sorted(frames)}; "
                "use protocol='coordinator' for more"
            )
        if self.protocol == "coordinator" and self.coordinator in frames:
            raise ValueError(
                f"{self.coordinator!r} is both a data party and the coordinator's name; pass "
                "coordinator='...' with another name"
            )
        for name, frame in frames.items():  # check every party's data before starting
            _prepare_part(name, frame, self.standardize, None, name == label_party)
            columns = frame.shape[1] + (1 if name == label_party else 0)
            _check_batch_size(name, len(frame), columns, self._config().batch_size)
        roles: dict[str, Any] = {}
        for name, frame in frames.items():
            roles[name] = lambda fed, frame=frame, name=name: self._fit_role(
                fed, frame, labels if name == label_party else None, label_party, frames
            )
        if self.protocol == "coordinator":
            roles[self.coordinator] = lambda fed: self._fit_role(
                fed, None, None, label_party, frames
            )
        federation = LocalFederation(timeout=self.timeout, record_payloads=keep_payloads)
        results = federation.run(roles)
        self.transcript_ = federation.transcript
        self._collect(results, label_party)
        return self

    def _collect(self, results: dict[str, Any], label_party: str) -> None:
        self.parts_ = {name: part for name, part in results.items() if isinstance(part, PartyModel)}
        active = self.parts_[label_party]
        self.label_party_ = label_party
        self.classes_ = np.array([0, 1])
        self.intercept_ = np.array([active.intercept])
        self.n_iter_ = int(getattr(self, "_last_n_iter", 0))
        self.loss_curve_ = list(getattr(self, "_last_loss_curve", []))

    def predict_proba(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        """Probabilities ``(n, 2)`` for the rows of ``parts`` (simulated secure scoring)."""
        scores = self.decision_function(parts)
        p = 1.0 / (1.0 + np.exp(-scores))
        return np.column_stack([1 - p, p])

    def decision_function(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        """Scores ``u`` of the rows of ``parts``: each party contributes its partial score
        encrypted (or masked); only the label party learns the sums."""
        self._check_fitted()
        frames = _check_parts(parts, self.label_party_)
        missing = sorted(set(self.parts_) - set(frames))
        extra = sorted(set(frames) - set(self.parts_))
        if missing or extra:
            raise ValueError(
                f"predict needs the parties the model was fitted with: missing {missing}, "
                f"unknown {extra}"
            )
        for name, frame in frames.items():  # check the columns before starting
            self.parts_[name].design(frame)
        roles: dict[str, Any] = {
            name: (lambda fed, name=name: self._predict_role(fed, frames[name])) for name in frames
        }
        if self.protocol == "coordinator":
            roles[self.coordinator] = lambda fed: self._predict_role(fed, None)
        results = LocalFederation(timeout=self.timeout).run(roles)
        scores: np.ndarray[Any, Any] = results[self.label_party_]
        return scores

    def predict(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        """Predicted classes (0/1)."""
        return (self.decision_function(parts) > 0).astype(int)

    # -- deployment: one party, its own federation ----------------------------------------------

    def fit_party(
        self,
        federation: Federation,
        frame: pd.DataFrame | None,
        y: Any = None,
        *,
        label_party: str,
        data_parties: list[str],
    ) -> VerticalLogisticRegression:
        """Run this party's role of training (deployment): ``frame`` is its own aligned
        features (None for the coordinator), ``y`` its labels if it is ``label_party``,
        ``data_parties`` the names of all parties holding features."""
        name = federation.name
        if frame is not None:
            frame = _check_parts({name: frame}, name)[name]
        labels = (
            _check_labels(y, frame.index, name)
            if name == label_party and frame is not None
            else None
        )
        _check_data_parties(list(data_parties), label_party)
        frames = {p: (frame if p == name else None) for p in data_parties}
        result = self._fit_role(federation, frame, labels, label_party, frames)
        self.label_party_ = label_party
        if isinstance(result, PartyModel):
            self.parts_ = {name: result}
            self.classes_ = np.array([0, 1])
            self.n_iter_ = int(getattr(self, "_last_n_iter", 0))
            # the loss is the label party's to learn
            self.loss_curve_ = (
                list(getattr(self, "_last_loss_curve", [])) if name == label_party else []
            )
        return self

    def predict_party(
        self, federation: Federation, frame: pd.DataFrame | None
    ) -> np.ndarray[Any, Any] | None:
        """Run this party's role of scoring (deployment); the label party gets the scores."""
        result: np.ndarray[Any, Any] | None = self._predict_role(federation, frame)
        return result

    # -- persistence ----------------------------------------------------------------------------

    def save(self, folder: str | Path) -> list[Path]:
        """Write each held party's part to ``folder/<party>.json`` (weights, columns,
        standardisation; no key material, nothing of other parties)."""
        self._check_fitted()
        target = Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for name, part in self.parts_.items():
            path = target / f"{name}.json"
            path.write_text(part.to_json())
            written.append(path)
        return written

    def load(self, *paths: str | Path, label_party: str) -> VerticalLogisticRegression:
        """Load parts written by :meth:`save` (a party loads its own)."""
        self.parts_ = {}
        for path in paths:
            part = PartyModel.from_json(Path(path).read_text())
            self.parts_[part.party] = part
        self.label_party_ = label_party
        self.classes_ = np.array([0, 1])
        return self

    # -- the roles ------------------------------------------------------------------------------

    def _config(self) -> _Config:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        for name in ("max_iter", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.learning_rate > 0 or not self.alpha >= 0:
            raise ValueError("learning_rate must be > 0 and alpha >= 0")
        # worker processes pay off on large batches; on small ones the parties' threads
        # already keep the cores busy and the inter-process traffic costs more than it saves
        # (breast cancer at batch 64: 2.3 s per epoch in one process, 3.7 s with two workers)
        default = min(os.cpu_count() or 1, 4) if self.batch_size >= 512 else 1
        workers = self.workers if self.workers is not None else default
        return _Config(
            self.max_iter,
            self.batch_size,
            self.tol,
            float(self.learning_rate),
            self.optimizer,
            float(self.alpha),
            self.key_bits,
            self.insecure,
            workers,
            self.random_state,
        )

    def _fit_role(
        self,
        fed: Federation,
        frame: pd.DataFrame | None,
        labels: np.ndarray[Any, Any] | None,
        label_party: str,
        frames: dict[str, Any],
    ) -> PartyModel | None:
        cfg = self._config()
        me = fed.name
        data_parties = list(frames)
        passives = [p for p in data_parties if p != label_party]
        decryptor = self.coordinator if self.protocol == "coordinator" else None
        if frame is None:  # the coordinator
            _serve_coordinator(fed, label_party, passives, cfg)
            return None
        previous = getattr(self, "parts_", {}).get(me) if self.warm_start else None
        part = _prepare_part(me, frame, self.standardize, previous, me == label_party)
        x = part.design(frame)
        if me == label_party:
            x = np.column_stack([x, np.ones(len(x))])
        _check_batch_size(me, len(x), x.shape[1], cfg.batch_size)
        w0 = np.append(part.coef, part.intercept) if me == label_party else part.coef.copy()
        if me == label_party:
            assert labels is not None
            w, curve = _active_role(fed, x, labels, w0, passives, decryptor, cfg)
            self.epoch_seconds_ = list(cfg.epoch_seconds)
            self.setup_seconds_ = cfg.setup_seconds
            self._last_loss_curve = curve
            self._last_n_iter = len(curve)
            part.coef, part.intercept = w[:-1], float(w[-1])
        else:
            part.coef, self._last_n_iter = _passive_role(
                fed, x, w0, label_party, passives, decryptor, cfg
            )
        return part

    def _predict_role(self, fed: Federation, frame: pd.DataFrame | None) -> Any:
        me = fed.name
        active = self.label_party_
        cfg = self._config()
        if frame is None:  # the coordinator: a fresh key pair, then decrypt the masked sums
            public_key, private_key = _keypair(cfg)
            fed.broadcast("score-key", _public_key_payload(public_key))
            _answer(fed, active, "score", private_key)
            return None
        part = self.parts_.get(me)
        if part is None:
            raise ValueError(f"party {me!r} has no fitted part: fit or load it first")
        u = part.design(frame) @ part.coef + (part.intercept if me == active else 0.0)
        others = [p for p in fed.peers if p != self.coordinator]
        if self.protocol == "coordinator":
            public_key = _public_key_from(
                fed.recv(self.coordinator, "score-key"), self.coordinator, cfg
            )
            if me == active:
                total: Any = u
                for p in others:
                    total = _vector_from(public_key, fed.recv(p, "score"), p) + total
                return _masked_decrypt(fed, self.coordinator, total, SCORE_BOUND * 4, "score")
            fed.send(active, "score", public_key.encrypt(u, workers=cfg.workers).to_wire())
            return None
        # two_party: the passive encrypts under its own key, the active masks, the passive
        # decrypts the masked sum
        if me == active:
            other = others[0]
            public_key = _public_key_from(fed.recv(other, "score-key"), other, cfg)
            total = _vector_from(public_key, fed.recv(other, "score"), other) + u
            return _masked_decrypt(fed, other, total, SCORE_BOUND * 4, "score")
        public_key, private_key = _keypair(cfg)
        fed.send(active, "score-key", _public_key_payload(public_key))
        fed.send(active, "score", public_key.encrypt(u, workers=cfg.workers).to_wire())
        _answer(fed, active, "score", private_key)
        return None

    def _check_fitted(self) -> None:
        if not getattr(self, "parts_", None):
            raise ValueError("this VerticalLogisticRegression is not fitted yet: call fit first")


# -- input checks -----------------------------------------------------------------------------


def _check_parts(parts: Any, label_party: str) -> dict[str, pd.DataFrame]:
    if not isinstance(parts, dict) or not parts:
        raise TypeError("parts must be a non-empty dict {party name: DataFrame}")
    if label_party not in parts:
        raise ValueError(
            f"label party {label_party!r} is not among the parties {sorted(parts)}; "
            "pass label_party= one of them"
        )
    index = None
    for name, frame in parts.items():
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"party {name!r}: expected a DataFrame, got {type(frame).__name__}")
        if frame.shape[1] == 0:
            raise ValueError(f"party {name!r} has no columns")
        if len(frame) == 0:
            raise ValueError(f"party {name!r} has no rows")
        if not frame.index.is_unique:
            raise ValueError(f"party {name!r}: the index has repeated labels")
        if index is None:
            index = frame.index
        elif not frame.index.equals(index):
            raise ValueError(
                f"party {name!r}: rows do not align with the others (same index labels in the "
                "same order needed); align the parties first (vfl.align or linkage)"
            )
    return dict(parts)


def _check_data_parties(parties: list[str], label_party: str) -> None:
    if label_party not in parties or len(set(parties)) < 2 or len(set(parties)) != len(parties):
        raise ValueError(
            f"vertical training needs the label party {label_party!r} and at least one other "
            f"data party, each named once; got {parties} (for one party alone, use "
            "scikit-learn's LogisticRegression)"
        )


def _check_labels(y: Any, index: pd.Index, party: str) -> np.ndarray[Any, Any]:
    if isinstance(y, pd.Series):
        if not y.index.equals(index):
            try:
                y = y.loc[index]
            except KeyError:
                raise ValueError(
                    f"labels of party {party!r}: their index does not cover the rows"
                ) from None
        values = y.to_numpy()
    else:
        values = np.asarray(y)
    if values.ndim != 1 or len(values) != len(index):
        raise ValueError(
            f"labels of party {party!r}: expected {len(index)} values, got shape {values.shape}"
        )
    if pd.isna(values).any():
        raise ValueError(f"labels of party {party!r} contain missing values")
    classes = set(np.unique(values).tolist())
    if not classes <= {0, 1}:
        raise ValueError(
            f"labels of party {party!r} must be binary 0/1, got values {sorted(classes)[:5]}"
        )
    if len(classes) < 2:
        raise ValueError(f"labels of party {party!r} hold one class only")
    out: np.ndarray[Any, Any] = values.astype(float)
    return out


def _numeric(frame: pd.DataFrame, party: str, columns: list[str]) -> np.ndarray[Any, Any]:
    missing = [c for c in columns if c not in frame.columns]
    extra = [c for c in frame.columns if c not in columns]
    if missing or extra:
        raise ValueError(
            f"party {party!r}: the columns differ from those fitted: missing {missing}, "
            f"unexpected {extra}"
        )
    for column in columns:
        if not pd.api.types.is_numeric_dtype(frame[column]) or pd.api.types.is_bool_dtype(
            frame[column]
        ):
            raise ValueError(
                f"party {party!r}: column {column!r} is not numeric ({frame[column].dtype}); "
                "encode it as numbers first"
            )
    values = frame[columns].to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(
            f"party {party!r}: column {columns[col]!r} has NaN or inf (e.g. row "
            f"{frame.index[row]!r}); impute or drop them first"
        )
    out: np.ndarray[Any, Any] = values
    return out


def _prepare_part(
    party: str,
    frame: pd.DataFrame,
    standardize: bool,
    previous: PartyModel | None,
    active: bool,
) -> PartyModel:
    columns = [str(c) for c in frame.columns]
    if previous is not None:
        if previous.columns != columns:
            raise ValueError(f"party {party!r}: warm start with other columns than fitted")
        return PartyModel(
            party,
            previous.role,
            columns,
            previous.mean,
            previous.scale,
            previous.coef.copy(),
            previous.intercept,
        )
    values = _numeric(frame, party, list(frame.columns))
    std = values.std(axis=0)
    constant = [c for c, s in zip(columns, std, strict=True) if s == 0]
    if constant:
        raise ValueError(
            f"party {party!r}: columns {constant} are constant; they carry no information, "
            "drop them"
        )
    mean = values.mean(axis=0) if standardize else np.zeros(len(columns))
    scale = std if standardize else np.ones(len(columns))
    return PartyModel(
        party, "active" if active else "passive", columns, mean, scale, np.zeros(len(columns))
    )


def _quantize(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    peak = float(np.max(np.abs(values))) if values.size else 0.0
    if peak >= 2.0**40:
        raise ValueError("features beyond 2**40 in magnitude: standardise them")
    out: np.ndarray[Any, Any] = np.round(values * 2.0**FEATURE_BITS) / 2.0**FEATURE_BITS
    return out


def _feature_bits(x: np.ndarray[Any, Any]) -> int:
    peak = float(np.max(np.abs(x))) if x.size else 1.0
    return max(1, math.frexp(peak)[1]) + FEATURE_BITS


# -- keys and wire helpers ----------------------------------------------------------------------


def _keypair(cfg: _Config) -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    return generate_paillier_keypair(cfg.key_bits, insecure=cfg.insecure)


def _public_key_payload(key: PaillierPublicKey) -> dict[str, Any]:
    return {"n": int(key.n).to_bytes((key.n_length + 7) // 8, "big")}


def _public_key_from(payload: Any, sender: str, cfg: _Config) -> PaillierPublicKey:
    if not isinstance(payload, dict) or not isinstance(payload.get("n"), bytes):
        raise ValueError(f"party {sender!r} sent a malformed public key")
    n = int.from_bytes(payload["n"], "big")
    if n.bit_length() > 8192:
        raise ValueError(f"party {sender!r} sent a {n.bit_length()}-bit public key (at most 8192)")
    if n.bit_length() < 2048 and not cfg.insecure:
        raise ValueError(
            f"party {sender!r} sent a {n.bit_length()}-bit public key; at least 2048 bits are "
            "needed (insecure=True allows smaller keys for tests)"
        )
    try:
        return PaillierPublicKey(n, insecure=n.bit_length() < 2048)
    except ValueError as exc:
        raise ValueError(f"party {sender!r} sent an unusable public key: {exc}") from None


def _vector_from(key: PaillierPublicKey, payload: Any, sender: str) -> EncryptedVector:
    try:
        return key.vector_from_wire(payload)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"party {sender!r} sent an unusable ciphertext message: {exc}") from None


def _masked_decrypt(
    fed: Federation,
    holder: str,
    vector: EncryptedVector,
    bound: float,
    tag: str,
    *,
    exact: bool = False,
) -> Any:
    """Have ``holder`` (the key owner) decrypt ``vector`` under masks only we know: floats, or
    with ``exact`` the signed fixed-point integers at ``vector.exponent``."""
    packed, masks = pack_masked(vector, bound=bound, kappa=KAPPA)
    fed.send(holder, f"{tag}-req", {"data": packed.to_wire(), "layout": masks.layout.to_dict()})
    slots = _slots(fed.recv(holder, f"{tag}-plain"), holder)
    return masks.unmask_integers(slots) if exact else masks.unmask(slots)


def _slots(payload: Any, holder: str) -> list[int]:
    if not isinstance(payload, list) or not all(isinstance(s, int) for s in payload):
        raise ValueError(f"party {holder!r} answered a decryption request with a malformed message")
    return payload


def _answer(fed: Federation, requester: str, tag: str, private_key: PaillierPrivateKey) -> None:
    """The key owner's side of :func:`_masked_decrypt`: decrypt masked, packed values."""
    request = fed.recv(requester, f"{tag}-req")
    if not isinstance(request, dict) or "data" not in request or "layout" not in request:
        raise ValueError(f"party {requester!r} sent a malformed decryption request")
    vector = _vector_from(private_key.public_key, request["data"], requester)
    try:
        slots = private_key.decrypt_packed(vector, request["layout"])
    except ValueError as exc:
        raise ValueError(f"party {requester!r} sent a bad decryption request: {exc}") from None
    fed.send(requester, f"{tag}-plain", [int(v) for v in slots])


# -- training roles -----------------------------------------------------------------------------


class _Optimizer:
    def __init__(self, cfg: _Config, size: int) -> None:
        self.cfg = cfg
        self.m = np.zeros(size)
        self.v = np.zeros(size)
        self.t = 0

    def step(self, w: np.ndarray[Any, Any], grad: np.ndarray[Any, Any], epoch: int) -> Any:
        self.t += 1
        if self.cfg.optimizer == "sgd":
            return w - self.cfg.learning_rate / (1.0 + epoch) * grad
        b1, b2 = 0.9, 0.999
        self.m = b1 * self.m + (1 - b1) * grad
        self.v = b2 * self.v + (1 - b2) * grad**2
        m_hat = self.m / (1 - b1**self.t)
        v_hat = self.v / (1 - b2**self.t)
        return w - self.cfg.learning_rate * m_hat / (np.sqrt(v_hat) + 1e-8)


def _penalty(w: np.ndarray[Any, Any], alpha: float, has_intercept: bool) -> Any:
    g = alpha * w
    if has_intercept:
        g[-1] = 0.0
    return g


def _batches(order: np.ndarray[Any, Any], batch_size: int) -> list[np.ndarray[Any, Any]]:
    """Mini-batches of an epoch's row order; a last batch smaller than half a batch joins the
    one before, so that every batch has at least ``batch_size // 2`` rows (or all of them)."""
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    if len(batches) > 1 and len(batches[-1]) < batch_size // 2:
        last = batches.pop()
        batches[-1] = np.concatenate([batches[-1], last])
    return batches


def _check_batch_size(party: str, n_rows: int, n_columns: int, batch_size: int) -> None:
    """Each batch's gradient is an aggregate that the key holder's partner learns; it must
    cover more rows than the party has columns, or one batch could be solved for per-row
    values (partial scores, residuals, labels)."""
    smallest = min(len(b) for b in _batches(np.arange(n_rows), batch_size))
    if smallest <= n_columns + 1:
        raise ValueError(
            f"party {party!r}: mini-batches of {smallest} rows would reveal per-row values "
            f"through the gradient of its {n_columns} columns; use batch_size of at least "
            f"{2 * (n_columns + 2)} (and at least that many rows)"
        )


def _epochs(fed: Federation, targets: list[str], n: int, cfg: _Config) -> Any:
    """The active party's epoch loop: yields (epoch, batches) after telling ``targets``."""
    rng = np.random.default_rng(cfg.seed)
    for epoch in range(cfg.max_iter):
        order = rng.permutation(n).astype(np.int64)
        fed.broadcast("epoch", {"stop": False, "order": order}, to=targets)
        yield epoch, _batches(order, cfg.batch_size)
    fed.broadcast("epoch", {"stop": True}, to=targets)


def _check_scores(u: np.ndarray[Any, Any], party: str) -> None:
    if u.size and float(np.max(np.abs(u))) > SCORE_BOUND:
        raise FloatingPointError(
            f"party {party!r}: partial scores beyond {SCORE_BOUND:g}; training diverged "
            "(lower learning_rate, raise alpha, or standardize the features)"
        )


def _converged(curve: list[float], tol: float | None) -> bool:
    return tol is not None and len(curve) >= 2 and curve[-2] - curve[-1] < tol


def _run_epochs(
    fed: Federation, targets: list[str], n: int, cfg: _Config, step: Any, epoch_loss: Any
) -> list[float]:
    """The active party's epoch loop, shared by both protocols.

    ``step(epoch, rows)`` trains on one batch; ``epoch_loss()`` returns the epoch's securely
    computed ``8 * sum(loss)``. Stops when the loss settles within ``tol`` and tells
    ``targets``; returns the loss curve."""
    curve: list[float] = []
    epochs = _epochs(fed, targets, n, cfg)
    cfg.epoch_seconds.clear()
    for epoch, batches in epochs:
        began = time.perf_counter()
        for rows in batches:
            step(epoch, rows)
        curve.append(epoch_loss() / 8.0 / n)
        cfg.epoch_seconds.append(time.perf_counter() - began)
        logger.info("epoch %d: training loss %.6f", epoch + 1, curve[-1])
        if _converged(curve, cfg.tol):
            epochs.close()
            fed.broadcast("epoch", {"stop": True}, to=targets)
            return curve
    if cfg.tol is not None:
        warnings.warn(
            f"stopped after max_iter={cfg.max_iter} epochs before the loss settled within "
            f"tol={cfg.tol}; raise max_iter",
            ConvergenceWarning,
            stacklevel=3,
        )
    return curve


def _passive_epochs(
    fed: Federation,
    active: str,
    n: int,
    cfg: _Config,
    step: Any,
    after_epoch: Any,
) -> int:
    """A passive party's loop, shared by both protocols: follow the active party's epochs,
    calling ``step(epoch, rows)`` per batch and ``after_epoch()``; returns the epochs run."""
    epoch = 0
    while True:
        control = _control(fed.recv(active, "epoch"), active)
        if control.get("stop"):
            return epoch
        for rows in _batches(_order(control, n, active), cfg.batch_size):
            step(epoch, rows)
        after_epoch()
        epoch += 1


def _control(payload: Any, sender: str) -> dict[str, Any]:
    if not isinstance(payload, dict) or not isinstance(
        payload.get("order", []), (np.ndarray, list)
    ):
        raise ValueError(f"party {sender!r} sent a malformed epoch message")
    return payload


def _order(control: Any, n: int, sender: str) -> np.ndarray[Any, Any]:
    order = control.get("order") if isinstance(control, dict) else None
    if (
        not isinstance(order, np.ndarray)
        or order.shape != (n,)
        or order.dtype.kind not in "iu"
        or not np.array_equal(np.sort(order), np.arange(n))
    ):
        raise ValueError(f"party {sender!r} sent an epoch order that is not a permutation of {n}")
    return order


# -- the gradient exchange: packed encrypted feature rows ------------------------------------


@dataclass(frozen=True)
class _RowPacking:
    """How a party packs its feature rows into ciphertexts: ``per_ct`` columns per ciphertext,
    each in a signed slot of ``slot_bits`` bits (public; sent with the rows)."""

    columns: int
    slot_bits: int
    per_ct: int

    @property
    def groups(self) -> int:
        return -(-self.columns // self.per_ct)

    def group(self, g: int) -> range:
        return range(g * self.per_ct, min(self.columns, (g + 1) * self.per_ct))

    @classmethod
    def plan(
        cls,
        x_bits: int,
        columns: int,
        rows: int,
        contributors: int,
        key_bits: int,
        masked: bool,
    ) -> _RowPacking:
        """Slots wide enough for ``sum`` over ``contributors`` parties and ``rows`` rows
        of ``|x| < 2**x_bits`` times ``|z| < 2**Z_BITS`` (plus the masks when ``masked``)."""
        value_bits = x_bits + Z_BITS + max(1, rows - 1).bit_length() + contributors.bit_length()
        slot_bits = value_bits + 2 + (KAPPA + 1 if masked else 0)
        per_ct = (key_bits - 2) // slot_bits
        if per_ct < 1:
            raise ValueError(f"a {key_bits}-bit key cannot hold a {slot_bits}-bit slot")
        return cls(columns, slot_bits, per_ct)

    def value_bits(self, masked: bool) -> int:
        return self.slot_bits - 2 - (KAPPA + 1 if masked else 0)

    def to_dict(self) -> dict[str, int]:
        return {"columns": self.columns, "slot_bits": self.slot_bits, "per_ct": self.per_ct}

    @classmethod
    def from_dict(cls, data: Any, sender: str, key_bits: int) -> _RowPacking:
        try:
            packing = cls(int(data["columns"]), int(data["slot_bits"]), int(data["per_ct"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"party {sender!r} sent a malformed row packing") from None
        if (
            packing.columns < 1
            or packing.slot_bits < Z_BITS
            or packing.per_ct < 1
            or packing.per_ct * packing.slot_bits > key_bits - 2
        ):
            raise ValueError(f"party {sender!r} sent an impossible row packing {data!r}")
        return packing


def _pack_rows(x_int: np.ndarray[Any, Any], packing: _RowPacking, n: int) -> list[list[int]]:
    """Per group of columns, one plaintext per row: ``sum_j x[i, j] * 2**(slot_bits * j)``
    (signed slots, taken modulo ``n``)."""
    out = []
    for g in range(packing.groups):
        cols = packing.group(g)
        shifts = [packing.slot_bits * j for j in range(len(cols))]
        plain = []
        for row in x_int[:, cols.start : cols.stop].tolist():
            acc = 0
            for value, shift in zip(row, shifts, strict=True):
                acc += value << shift
            plain.append(acc % n)
        out.append(plain)
    return out


def _unpack_signed(
    value: int, packing: _RowPacking, g: int, holder: str, value_bits: int
) -> list[int]:
    """The signed slots of one group's exact (signed) plaintext integer, each checked to lie
    within ``2**value_bits`` (beyond it a slot may have borrowed from its neighbour, or, under
    masks, lost its statistical hiding)."""
    bits = packing.slot_bits
    full, half, limit = 1 << bits, 1 << (bits - 1), 1 << value_bits
    out = []
    for _ in packing.group(g):
        slot = value & (full - 1)
        if slot >= half:
            slot -= full
        out.append(slot)
        value = (value - slot) >> bits
    if value or any(abs(s) >= limit for s in out):
        raise OverflowError(
            f"a gradient decrypted via {holder!r} overflowed its packing; standardise the "
            "features or lower learning_rate"
        )
    return out


class _PeerRows:
    """Another party's packed, encrypted feature rows, kept for the whole fit."""

    def __init__(self, key: PaillierPublicKey, groups: list[list[Any]], packing: _RowPacking):
        self.key, self.groups, self.packing = key, groups, packing
        self._inverses: list[list[Any] | None] = [None] * len(groups)

    @classmethod
    def exchange(
        cls,
        fed: Federation,
        own: tuple[Any, _RowPacking, list[list[Any]]],
        keys: dict[str, PaillierPublicKey],
        n_rows: int,
        batch_size: int,
    ) -> dict[str, _PeerRows]:
        """Send our encrypted rows (``own``: key, packing, ciphertexts per column group) to
        every peer in ``keys`` and receive theirs: a header, then parts of at most
        ``ROWS_MESSAGE_BYTES``, sent and received in step (part k out, then every peer's part
        k in), so that no receive queue ever holds more than about two parts."""
        key, packing, groups = own
        per_part = max(1, ROWS_MESSAGE_BYTES // (packing.groups * key.ciphertext_bytes))
        starts = list(range(0, n_rows, per_part))
        peers = list(keys)
        fed.broadcast("rows", {"packing": packing.to_dict(), "parts": len(starts)}, to=peers)
        headers = {}
        for p in peers:
            header = fed.recv(p, "rows")
            parts = header.get("parts") if isinstance(header, dict) else None
            if not isinstance(parts, int) or not 1 <= parts <= n_rows:
                raise ValueError(f"party {p!r} sent a malformed header of encrypted rows")
            headers[p] = header
        received: dict[str, list[Any]] = {p: [] for p in peers}
        for k in range(max([len(starts), *(h["parts"] for h in headers.values())])):
            if k < len(starts):
                blocks = [
                    EncryptedVector(key, cts[starts[k] : starts[k] + per_part], 0, fresh=True)
                    for cts in groups
                ]
                fed.broadcast(f"rows/{k}", [b.to_wire() for b in blocks], to=peers)
            for p in peers:
                if k < headers[p]["parts"]:
                    received[p].append(fed.recv(p, f"rows/{k}"))
        return {
            p: cls.from_parts(keys[p], headers[p], received[p], p, n_rows, batch_size)
            for p in peers
        }

    @classmethod
    def from_parts(
        cls,
        key: PaillierPublicKey,
        header: dict[str, Any],
        parts: list[Any],
        sender: str,
        n_rows: int,
        batch_size: int,
    ) -> _PeerRows:
        """Check and join received parts (each a list of one block per column group)."""
        packing = _RowPacking.from_dict(header.get("packing"), sender, key.n_length)
        # the shares we compute on these rows reveal X^T z to their owner: as many columns as
        # a batch has rows would let it solve for our z (checked by us, not only by it)
        _check_batch_size(sender, n_rows, packing.columns, batch_size)
        groups: list[list[Any]] = [[] for _ in range(packing.groups)]
        for part in parts:
            if not isinstance(part, list) or len(part) != packing.groups:
                raise ValueError(f"party {sender!r} sent malformed encrypted rows")
            vectors = [_vector_from(key, block, sender) for block in part]
            if any(v.ndim != 1 or v.exponent != 0 or len(v) != len(vectors[0]) for v in vectors):
                raise ValueError(f"party {sender!r} sent malformed encrypted rows")
            for g, vector in enumerate(vectors):
                groups[g] += vector.ciphertexts
        if any(len(g) != n_rows for g in groups):
            raise ValueError(
                f"party {sender!r} sent encrypted rows of the wrong shape (expected "
                f"{packing.groups} groups of {n_rows} rows)"
            )
        return cls(key, groups, packing)

    def combine(
        self, rows: np.ndarray[Any, Any], z_int: np.ndarray[Any, Any], *, to_key_owner: bool
    ) -> EncryptedVector:
        """``[[X[rows]^T z]]`` packed (one ciphertext per group), re-randomised: one Pippenger
        multi-exponentiation per group; negative ``z`` use the rows' inverses (computed once).

        The owner of the rows knows their randomness and could otherwise test guesses of
        ``z`` against the product. A share going to the key's owner (``to_key_owner``) gets a
        uniform ``r**n``: the owner knows the factorisation and could read residue characters
        of a DJN obfuscator ``h**a`` (whose ``h`` is fixed), so only full randomness hides the
        product's randomness from it; otherwise the DJN obfuscator suffices."""
        nsq = self.key.nsquare
        negative = (z_int < 0).tolist()
        magnitudes = np.abs(z_int)
        out = []
        for g, cts in enumerate(self.groups):
            if any(negative) and self._inverses[g] is None:
                self._inverses[g] = batch_invert(cts, nsq)
            inverses = self._inverses[g]
            bases = [
                inverses[i] if neg else cts[i]  # type: ignore[index]
                for i, neg in zip(rows.tolist(), negative, strict=True)
            ]
            out.append(multiexp(bases, magnitudes, nsq))
        if not to_key_owner:
            return EncryptedVector(self.key, out, 0).obfuscate()
        return EncryptedVector(self.key, _uniform_rerandomise(self.key, out), 0, fresh=True)


def _uniform_rerandomise(key: PaillierPublicKey, ciphertexts: list[Any]) -> list[Any]:
    """Multiply each ciphertext by ``r**n mod n**2`` for uniform ``r`` in ``Z_n*`` (OS
    randomness): hides how it was made even from the owner of the private key."""
    n, nsq = key.n, key.nsquare
    out = []
    for c in ciphertexts:
        while True:
            r = secrets.randbelow(int(n) - 2) + 2
            if math.gcd(r, int(n)) == 1:
                break
        out.append(c * gmpy2.powmod(r, n, nsq) % nsq)
    return out


class _Exchange:
    """One data party's side of the gradient exchange, for both protocols.

    Setup (once per fit): the party packs its fixed-point feature rows (several columns per
    plaintext) and encrypts them -- under its own key (``two_party``) or the coordinator's --
    and sends them to every other data party. Per batch, every party ``p`` turns its vector
    ``z_p`` (the active party's ``u_A - 2y'``, a passive party's partial scores ``u_p``) into
    ``[[X_t^T z_p]]`` for every other party ``t`` by one multi-exponentiation over ``t``'s
    encrypted rows, re-randomised; ``t`` adds what it receives, has the sum decrypted (by
    itself, or masked by the coordinator) and adds ``X_t^T z_t`` of its own: the batch's
    ``X_t^T 4d``. Per-row encryption happens only at setup.
    """

    def __init__(
        self,
        fed: Federation,
        x: np.ndarray[Any, Any],
        data_parties: list[str],
        cfg: _Config,
        coordinator: str | None,
    ) -> None:
        self.fed, self.x, self.cfg, self.coordinator = fed, x, cfg, coordinator
        me = fed.name
        self.others = [p for p in data_parties if p != me]
        self.secret: PaillierPrivateKey | None
        if coordinator is not None:
            self.key = _public_key_from(fed.recv(coordinator, "key"), coordinator, cfg)
            self.secret = None
            self.keys = {p: self.key for p in self.others}
        else:
            self.key, self.secret = _keypair(cfg)
            fed.broadcast("key", _public_key_payload(self.key), to=self.others)
            self.keys = {p: _public_key_from(fed.recv(p, "key"), p, cfg) for p in self.others}
        self.packing = _RowPacking.plan(
            _feature_bits(x),
            x.shape[1],
            min(len(x), 2 * cfg.batch_size),
            len(self.others),
            self.key.n_length,
            masked=coordinator is not None,
        )
        x_int = np.round(x * 2.0**FEATURE_BITS).astype(np.int64)
        encrypt = (self.secret or self.key).raw_encrypt
        groups = [
            encrypt(plain, workers=cfg.workers)
            for plain in _pack_rows(x_int, self.packing, int(self.key.n))
        ]
        if coordinator is not None:  # it decrypts only requests of this size
            fed.send(coordinator, "groups", self.packing.groups)
        self.peers = _PeerRows.exchange(
            fed, (self.key, self.packing, groups), self.keys, len(x), cfg.batch_size
        )

    def remote(self, rows: np.ndarray[Any, Any], z: np.ndarray[Any, Any]) -> Any:
        """Send this party's contributions for ``z`` and return the decrypted sum of the
        others': ``X[rows]^T (sum of the other parties' z)``. With ``X^T z`` of its own added,
        that is the party's ``X^T 4d`` for the batch."""
        z_int = np.round(z * 2.0**SCORE_BITS).astype(np.int64)
        owner = self.coordinator is None  # two_party: the shares go to the key's owner
        for p, peer in self.peers.items():
            self.fed.send(p, "g", peer.combine(rows, z_int, to_key_owner=owner).to_wire())
        total: EncryptedVector | None = None
        for p in self.others:
            part = _vector_from(self.key, self.fed.recv(p, "g"), p)
            if part.shape != (self.packing.groups,) or part.exponent != 0:
                raise ValueError(f"party {p!r} sent a gradient share of the wrong shape")
            total = part if total is None else total + part
        assert total is not None
        holder = self.coordinator or self.fed.name
        bits = self.packing.value_bits(masked=self.coordinator is not None)
        remote = np.array(
            [
                math.ldexp(s, -(FEATURE_BITS + SCORE_BITS))
                for g, value in enumerate(self._open(total))
                for s in _unpack_signed(value, self.packing, g, holder, bits)
            ]
        )
        return remote

    def _open(self, total: EncryptedVector) -> list[int]:
        """The exact signed plaintexts of ``total``: decrypted by this party's own key, or by
        the coordinator under slot masks of ``KAPPA`` bits of statistical hiding."""
        n = int(self.key.n)
        if self.secret is not None:
            plain = self.secret.raw_decrypt(total.ciphertexts)
            return [int(v) - n if v > n // 2 else int(v) for v in plain]
        assert self.coordinator is not None
        value_bits = self.packing.value_bits(masked=True)
        masks = []
        for g in range(self.packing.groups):
            mask = 0
            for j in range(len(self.packing.group(g))):
                slot = (1 << value_bits) + secrets.randbits(value_bits + KAPPA)
                mask += slot << (self.packing.slot_bits * j)
            masks.append(mask)
        # the coordinator knows the factorisation, so it could compute discrete logarithms of
        # the masked sum's randomness modulo small factors of the group order: all of it lies
        # in the group of the key's DJN base h (rows and masks alike), and the mask's fresh
        # uniform exponent, far longer than any such factor, makes each of those residues
        # uniform. (A share going to the key's owner has no such mask: see combine.)
        encrypted_masks = self.key.raw_encrypt(masks)
        masked = EncryptedVector(
            self.key,
            [
                c * m % self.key.nsquare
                for c, m in zip(total.ciphertexts, encrypted_masks, strict=True)
            ],
            0,
        )
        self.fed.send(self.coordinator, "grad-req", {"data": masked.to_wire(be_secure=False)})
        plain = _slots(self.fed.recv(self.coordinator, "grad-plain"), self.coordinator)
        if len(plain) != len(masks):
            raise ValueError(f"party {self.coordinator!r} answered with the wrong count")
        return [v - m for v, m in zip(plain, masks, strict=True)]


def _answer_raw(
    fed: Federation, requester: str, private_key: PaillierPrivateKey, expected: int
) -> None:
    """The coordinator's side of :meth:`_Exchange._open`: decrypt one masked, packed share
    sum per batch of ``expected`` ciphertexts (the requester's column groups). It cannot tell
    a share from anything else under its key: a party that deviates from the protocol could
    ask it to decrypt another party's encrypted rows (malicious parties are out of scope;
    the size check bounds such a request to one row per batch)."""
    request = fed.recv(requester, "grad-req")
    if not isinstance(request, dict) or "data" not in request:
        raise ValueError(f"party {requester!r} sent a malformed decryption request")
    vector = _vector_from(private_key.public_key, request["data"], requester)
    if vector.size != expected:
        raise ValueError(
            f"party {requester!r} asked for {vector.size} decryptions; a batch's gradient "
            f"share has {expected}"
        )
    fed.send(requester, "grad-plain", [int(v) for v in private_key.raw_decrypt(vector.ciphertexts)])


# -- training roles -----------------------------------------------------------------------------


def _active_role(
    fed: Federation,
    x: np.ndarray[Any, Any],
    y: np.ndarray[Any, Any],
    w: np.ndarray[Any, Any],
    passives: list[str],
    coordinator: str | None,
    cfg: _Config,
) -> tuple[np.ndarray[Any, Any], list[float]]:
    """The label party: drives the epochs, computes ``z = u_A - 2y'`` and learns the loss.

    The batch loss ``8 * sum(log 2 - y'u/2 + u^2/8)`` splits into what it knows,
    ``8 n log 2 + |u_A|^2 - 4 y'.u_A``, the passive parties' pieces (see
    :func:`_passive_role`) and, with two or more passives, their cross terms ``-2 u_k.u_l``,
    computed under the coordinator's key; everything but its own part arrives encrypted and is
    decrypted (masked, by the coordinator) once per epoch."""
    began = time.perf_counter()
    exchange = _Exchange(fed, x, [fed.name, *passives], cfg, coordinator)
    cfg.setup_seconds = time.perf_counter() - began
    y2 = 2.0 * y - 1.0
    opt = _Optimizer(cfg, len(w))
    own = 0.0
    cross: EncryptedVector | None = None

    def step(epoch: int, rows: np.ndarray[Any, Any]) -> None:
        nonlocal w, own, cross
        u_a = x[rows] @ w
        _check_scores(u_a, fed.name)
        yb = y2[rows]
        z = u_a - 2.0 * yb
        grad = x[rows].T @ z + exchange.remote(rows, z)
        own += float(8 * len(rows) * math.log(2) + u_a @ u_a - 4 * (yb @ u_a))
        shares = {q: _vector_from(exchange.key, fed.recv(q, "u"), q) for q in passives[:-1]}
        for q, share in shares.items():
            if share.shape != (len(rows),):
                raise ValueError(f"party {q!r} sent {share.shape} scores for {len(rows)} rows")
        for k, p in enumerate(passives[1:], start=1):  # cross terms between passive parties
            fed.send(p, "cross", [shares[q].to_wire() for q in passives[:k]])
            total = _vector_from(exchange.key, fed.recv(p, "cross-sum"), p) * -2
            if total.size != 1:
                raise ValueError(f"party {p!r} sent a malformed cross term")
            cross = total if cross is None else cross + total
        w = opt.step(w, grad / (4.0 * len(rows)) + _penalty(w, cfg.alpha, True), epoch)

    def epoch_loss() -> float:
        nonlocal own, cross
        pieces = [_vector_from(exchange.key, fed.recv(p, "loss8"), p) for p in passives]
        for p, piece in zip(passives, pieces, strict=True):
            if piece.size != 1:
                raise ValueError(f"party {p!r} sent a malformed loss piece")
        total = pieces[0] + own
        for piece in [*pieces[1:], *([cross] if cross is not None else [])]:
            total = total + piece
        own, cross = 0.0, None
        if exchange.secret is not None:
            return float(exchange.secret.decrypt(total))
        assert coordinator is not None
        return float(_masked_decrypt(fed, coordinator, total, 2.0**70, "loss")[0])

    targets = [*passives, *([coordinator] if coordinator else [])]
    curve = _run_epochs(fed, targets, len(x), cfg, step, epoch_loss)
    return w, curve


def _passive_role(
    fed: Federation,
    x: np.ndarray[Any, Any],
    w: np.ndarray[Any, Any],
    active: str,
    passives: list[str],
    coordinator: str | None,
    cfg: _Config,
) -> tuple[np.ndarray[Any, Any], int]:
    """A passive party: ``z = u_k``, its partial scores. Its piece of the batch loss is
    ``2 w^T G + |u_k|^2``, ``G`` being the decrypted sum of the others' contributions
    (``X^T (u_A - 2y' + sum of the other passives' u)``), so ``w^T G`` is the inner product of
    its scores with theirs; it sends the epoch's sum encrypted to the label party."""
    exchange = _Exchange(fed, x, [active, *passives], cfg, coordinator)
    position = passives.index(fed.name)
    opt = _Optimizer(cfg, len(w))
    loss8 = 0.0

    def step(epoch: int, rows: np.ndarray[Any, Any]) -> None:
        nonlocal w, loss8
        u = x[rows] @ w
        _check_scores(u, fed.name)
        if position < len(passives) - 1:  # for the cross terms of the later passives
            fed.send(active, "u", exchange.key.encrypt(u, precision=2.0**-SCORE_BITS).to_wire())
        remote = exchange.remote(rows, u)
        grad = x[rows].T @ u + remote
        loss8 += float(2 * (w @ remote) + u @ u)
        if position:  # cross terms with the passives listed before this one
            received = fed.recv(active, "cross")
            if not isinstance(received, list) or len(received) != position:
                raise ValueError(f"party {active!r} sent malformed cross-term scores")
            others = [_vector_from(exchange.key, c, active) for c in received]
            if any(o.shape != (len(rows),) for o in others):
                raise ValueError(f"party {active!r} sent cross-term scores of the wrong length")
            sums = [matvec(u[None, :], o, precision_bits=32)[0] for o in others]
            total = sums[0]
            for s in sums[1:]:
                total = total + s
            fed.send(active, "cross-sum", total.to_wire())
        w = opt.step(w, grad / (4.0 * len(rows)) + _penalty(w, cfg.alpha, False), epoch)

    def after_epoch() -> None:
        nonlocal loss8
        key = exchange.keys[active]
        fed.send(active, "loss8", key.encrypt(np.array(loss8)).to_wire())
        loss8 = 0.0

    epochs = _passive_epochs(fed, active, len(x), cfg, step, after_epoch)
    return w, epochs


def _serve_coordinator(fed: Federation, active: str, passives: list[str], cfg: _Config) -> None:
    public_key, private_key = _keypair(cfg)
    fed.broadcast("key", _public_key_payload(public_key), to=[active, *passives])
    groups = {}
    for p in [active, *passives]:
        count = fed.recv(p, "groups")
        if not isinstance(count, int) or not 1 <= count <= 4096:
            raise ValueError(f"party {p!r} sent a malformed packing size")
        groups[p] = count
    while True:
        control = _control(fed.recv(active, "epoch"), active)
        if control.get("stop"):
            return
        order = _order(control, len(control.get("order", [])), active)
        for _ in _batches(order, cfg.batch_size):
            for p in [active, *passives]:
                _answer_raw(fed, p, private_key, groups[p])
        _answer(fed, active, "loss", private_key)


def plaintext_reference(
    estimator: VerticalLogisticRegression,
    parts: dict[str, pd.DataFrame],
    y: Any,
    *,
    label_party: str,
) -> tuple[dict[str, np.ndarray[Any, Any]], list[float]]:
    """The same training in plaintext float64 (same batches, rounding and optimizer), for
    tests: each party's weights (the label party's intercept last) and the loss curve."""
    cfg = estimator._config()
    frames = _check_parts(parts, label_party)
    labels = _check_labels(y, frames[label_party].index, label_party)
    xs, ws, opts = {}, {}, {}
    for name, frame in frames.items():
        part = _prepare_part(name, frame, estimator.standardize, None, name == label_party)
        x = part.design(frame)
        if name == label_party:
            x = np.column_stack([x, np.ones(len(x))])
        xs[name], ws[name], opts[name] = x, np.zeros(x.shape[1]), _Optimizer(cfg, x.shape[1])
    y2 = 2.0 * labels - 1.0
    n = len(labels)
    rng = np.random.default_rng(cfg.seed)
    curve: list[float] = []
    for epoch in range(cfg.max_iter):
        order = rng.permutation(n)
        total = 0.0
        for rows in _batches(order, cfg.batch_size):
            u = sum(xs[p][rows] @ ws[p] for p in xs)
            d4 = u - 2.0 * y2[rows]
            total += float(np.sum(8 * math.log(2) - 4 * y2[rows] * u + u * u))
            for p in xs:
                grad = xs[p][rows].T @ d4 / (4.0 * len(rows))
                ws[p] = opts[p].step(
                    ws[p], grad + _penalty(ws[p], cfg.alpha, p == label_party), epoch
                )
        curve.append(total / 8.0 / n)
        if _converged(curve, cfg.tol):
            break
    return ws, curve
