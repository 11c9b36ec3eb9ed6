"""Shared-encoder transfer without overlapping patients: an encoder pretrained where the
labels are, shipped as a file, a head fine-tuned where they are scarce.

* :func:`horizontal.pretrain_encoder` trains ``encoder -> Linear(dim, 2)`` on one source's
  labelled rows or federated over several sources (the horizontal FedAvg path; with
  ``privacy=RecordDP(...)`` DP-SGD with its epsilon in the ledger) and returns the encoder
  alone as an :class:`EncoderArtifact`;
* :class:`EncoderArtifact` (:mod:`vfl.training.encoder`, shared by both families) is vflink's
  model format (:mod:`vfl.persistence`: numbers and JSON, never pickle) plus a SHA-256 digest
  of its contents: a file changed after saving, or of another kind, is refused;
* :class:`EncoderTransferClassifier` fits at the target: the encoder runs on the columns it was
  trained on (they must be among the target's), the target's other columns join its output,
  and a head (logistic regression by default, or an MLP) is trained on the target's labels,
  with the encoder frozen (``freeze="all"``), its last layer trainable (``"last"``) or all of
  it (``"none"``).

What crosses: the artefact (the encoder's weights and the source's column means and scales).
Weights trained on records can leak them (membership inference, reconstruction of rare
records); DP-SGD bounds that, and the artefact carries the epsilon it was trained under.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from vfl import persistence
from vfl.estimator import renamed_parameters
from vfl.extras import optional, require
from vfl.privacy import PrivacyLedger
from vfl.progress import EpochProgress
from vfl.training.encoder import ARTIFACT_VERSION, EncoderArtifact, build_encoder
from vfl.training.modules import mlp, output_width, seeded
from vfl.training.standardise import Standardiser
from vfl.training.torch_loop import torch_optimizer, train_step
from vfl.validation import check_numeric

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

KIND = "transfer.EncoderTransferClassifier"

__all__ = [
    "ARTIFACT_VERSION",
    "BinaryScores",
    "EncoderArtifact",
    "EncoderTransferClassifier",
    "build_encoder",
]


class BinaryScores:
    """``predict_proba`` and ``predict`` from a binary ``decision_function`` (log-odds of
    ``classes_[1]``), shared by the transfer classifiers."""

    classes_: np.ndarray[Any, Any]

    def decision_function(self, target: pd.DataFrame) -> np.ndarray[Any, Any]:
        raise NotImplementedError

    def predict_proba(self, target: pd.DataFrame) -> np.ndarray[Any, Any]:
        """``[1 - p, p]`` per target row, ``p`` the sigmoid of the decision function."""
        from scipy.special import expit

        p = expit(self.decision_function(target))
        return np.column_stack([1 - p, p])

    def predict(self, target: pd.DataFrame) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = self.classes_[(self.decision_function(target) > 0).astype(int)]
        return out


class EncoderTransferClassifier(BinaryScores, BaseEstimator):  # type: ignore[misc]
    """Fine-tune a head on a shipped encoder (see the module docstring).

    It runs at the target alone (no federation, so no ``timeout`` or ``protocol``); its
    parameters and fitted attributes are named as every vflink estimator's
    (:mod:`vfl.estimator`).

    Parameters
    ----------
    artifact : EncoderArtifact or path
        The encoder (its columns must be among the target's); needed by :meth:`fit`, not by
        :meth:`load`.
    freeze : {"all", "last", "none"}
        Which of the encoder's parameters stay fixed: all of them, all but its last linear
        layer, or none.
    hidden_layer_sizes : tuple of int
        The head's hidden layers (``()``: logistic regression on the encoder's output and the
        target's own columns). Replaces the deprecated ``hidden``.
    own_columns : bool
        Whether the target's columns outside the encoder's join its output.
    max_iter, learning_rate, weight_decay
        Full-batch Adam on the target's rows (``max_iter`` steps).
    random_state : int, optional
        Initialises the head (None, the default: torch's own generator).
    verbose : int
        0 (default): nothing shown (the steps still go to the ``vflink.progress`` logger at
        INFO); 1: each step's loss live (:class:`vfl.progress.EpochProgress`).

    Attributes
    ----------
    encoder_, head_, classes_, artifact_
        The (fine-tuned) encoder, the head, the two classes, the artefact fitted from.
    own_columns_, own_standardiser_
        The target's own columns the head reads beside the encoder's output, and their scaling
        (:class:`~vfl.training.Standardiser`).
    n_iter_ : int
        Steps made.
    history_ : list of dict
        One record per step: ``epoch`` (1-based), ``loss`` (the training loss before it) and
        ``seconds``.
    privacy_ledger_ : PrivacyLedger
        Empty: fine-tuning spends nothing (the artefact's own epsilon is in its ``info``).
    """

    @renamed_parameters(
        {"hidden": "hidden_layer_sizes"}, lambda old: {"hidden_layer_sizes": old["hidden"]}
    )
    def __init__(
        self,
        artifact: EncoderArtifact | str | Path | None = None,
        *,
        freeze: str = "all",
        hidden_layer_sizes: tuple[int, ...] = (),
        own_columns: bool = True,
        max_iter: int = 300,
        learning_rate: float = 0.01,
        weight_decay: float = 1e-3,
        random_state: int | None = None,
        verbose: int = 0,
    ) -> None:
        self.artifact = artifact
        self.freeze = freeze
        self.hidden_layer_sizes = hidden_layer_sizes
        self.own_columns = own_columns
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.random_state = random_state
        self.verbose = verbose

    def _artifact(self) -> EncoderArtifact:
        art = self.artifact
        if art is None:
            raise ValueError(
                "EncoderTransferClassifier needs artifact= (an EncoderArtifact or its file) to fit"
            )
        return art if isinstance(art, EncoderArtifact) else EncoderArtifact.load(art)

    def _inputs(self, frame: pd.DataFrame, fitting: bool) -> tuple[torch.Tensor, torch.Tensor]:
        art = self.artifact_
        missing = [c for c in art.columns if c not in frame.columns]
        if missing:
            raise ValueError(
                f"the target's frame lacks the encoder's columns {missing}: the encoder runs on "
                f"{art.columns}"
            )
        shared = check_numeric(frame[art.columns], "target", art.columns)
        z_shared = (shared - art.mean) / np.where(art.scale > 0, art.scale, 1.0)
        own_cols = [str(c) for c in frame.columns if str(c) not in art.columns]
        if fitting:
            self.own_columns_ = own_cols if self.own_columns else []
        own = (
            check_numeric(frame[self.own_columns_], "target", self.own_columns_)
            if self.own_columns_
            else np.zeros((len(frame), 0))
        )
        if fitting:
            self.own_standardiser_ = Standardiser().fit(own)
        z_own = self.own_standardiser_.transform(own)
        return (
            torch.as_tensor(z_shared, dtype=torch.float32),
            torch.as_tensor(z_own, dtype=torch.float32),
        )

    def fit(self, target: pd.DataFrame, labels: Any) -> EncoderTransferClassifier:
        """Train the head (and the unfrozen encoder layers) on the target's labelled rows."""
        require("torch", for_=type(self).__name__)
        if self.freeze not in ("all", "last", "none"):
            raise ValueError(f'freeze must be "all", "last" or "none", got {self.freeze!r}')
        self.artifact_ = self._artifact()
        y = np.asarray(labels)
        if len(y) != len(target):
            raise ValueError(f"labels has {len(y)} values for {len(target)} target rows")
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise ValueError(f"the target's labels hold {len(self.classes_)} classes; 2 needed")
        shared, own = self._inputs(target, fitting=True)
        self.encoder_ = self.artifact_.module()
        output_width(self.encoder_, len(self.artifact_.columns), "the shipped encoder")
        trainable = self._unfreeze(self.encoder_)
        with seeded(self.random_state):
            self.head_ = mlp(self.artifact_.dim + own.shape[1], 1, self.hidden_layer_sizes)
        params = list(self.head_.parameters()) + trainable
        optimizer = torch_optimizer(
            "adam", params, learning_rate=self.learning_rate, weight_decay=self.weight_decay
        )
        target_t = torch.as_tensor(y == self.classes_[1], dtype=torch.float32)
        loss_fn = nn.BCEWithLogitsLoss()
        self.history_: list[dict[str, Any]] = []
        with EpochProgress("target", self.max_iter, self.verbose, desc="step") as shown:
            for step in range(self.max_iter):
                began = time.perf_counter()
                loss = loss_fn(self._logits(shared, own), target_t)
                train_step(optimizer, loss)
                seconds = time.perf_counter() - began
                self.history_.append({"epoch": step + 1, "loss": float(loss), "seconds": seconds})
                shown.update(step + 1, loss=float(loss))
        self.n_iter_ = self.max_iter
        self.privacy_ledger_ = PrivacyLedger()
        self.encoder_.eval()
        return self

    def save(self, path: str | Path) -> Path:
        """Write the fitted model to the file ``path`` (vflink's model format: the fine-tuned
        encoder with its columns and scaling, the head, the own columns' scaling, the
        classes). Returns the path; :meth:`load` reads it back."""
        if not hasattr(self, "head_"):
            raise NotFittedError(
                "This EncoderTransferClassifier instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this estimator."
            )
        art = self.artifact_
        meta = {
            "columns": art.columns,
            "dim": art.dim,
            "hidden": list(art.hidden),
            "info": art.info,
            "own_columns": self.own_columns_,
            "hidden_layer_sizes": list(self.hidden_layer_sizes),
            "classes": [c.item() if isinstance(c, np.generic) else c for c in self.classes_],
        }
        arrays = {
            "mean": np.asarray(art.mean, dtype=float),
            "scale": np.asarray(art.scale, dtype=float),
            **self.own_standardiser_.to_arrays("own_"),
            **persistence.state_dict_to_arrays(self.encoder_.state_dict(), "encoder."),
            **persistence.state_dict_to_arrays(self.head_.state_dict(), "head."),
        }
        return persistence.save_model(path, KIND, meta, arrays)

    def load(self, path: str | Path) -> EncoderTransferClassifier:
        """Read a model written by :meth:`save` into this estimator (its ``artifact`` is not
        needed: the fine-tuned encoder is in the file)."""
        require("torch", for_=type(self).__name__)
        meta, arrays = persistence.load_model(path, kind=KIND)
        state = {k[len("encoder.") :]: v for k, v in arrays.items() if k.startswith("encoder.")}
        self.artifact_ = EncoderArtifact(
            columns=[str(c) for c in meta["columns"]],
            mean=arrays["mean"],
            scale=arrays["scale"],
            dim=int(meta["dim"]),
            hidden=[int(h) for h in meta["hidden"]],
            state=state,
            info=dict(meta["info"]),
        )
        self.encoder_ = self.artifact_.module()
        self.encoder_.eval()
        self.own_columns_ = [str(c) for c in meta["own_columns"]]
        self.own_standardiser_ = Standardiser.from_arrays(arrays, "own_")
        hidden = tuple(int(h) for h in meta["hidden_layer_sizes"])
        self.head_ = mlp(self.artifact_.dim + len(self.own_columns_), 1, hidden)
        self.head_.load_state_dict(persistence.arrays_to_state_dict(arrays, "head."))
        self.classes_ = np.array(meta["classes"])
        self.privacy_ledger_ = PrivacyLedger()
        return self

    def _unfreeze(self, encoder: nn.Module) -> list[nn.Parameter]:
        for p in encoder.parameters():
            p.requires_grad_(self.freeze == "none")
        if self.freeze == "last":
            last = [m for m in encoder.modules() if isinstance(m, nn.Linear)][-1]
            for p in last.parameters():
                p.requires_grad_(True)
        return [p for p in encoder.parameters() if p.requires_grad]

    def _logits(self, shared: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        joined = torch.cat([self.encoder_(shared), own], dim=1)
        out: torch.Tensor = self.head_(joined)[:, 0]
        return out

    def decision_function(self, target: pd.DataFrame) -> np.ndarray[Any, Any]:
        """The log-odds of ``classes_[1]`` for each of the target's rows."""
        if not hasattr(self, "head_"):
            raise NotFittedError(
                "This EncoderTransferClassifier instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this estimator."
            )
        shared, own = self._inputs(target, fitting=False)
        with torch.no_grad():
            out: np.ndarray[Any, Any] = self._logits(shared, own).double().numpy()
        return out
