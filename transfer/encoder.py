"""Shared-encoder transfer without overlapping patients: pretrain an encoder where the labels
are, ship it as a file, fine-tune a head where they are scarce.

* :func:`pretrain_encoder` trains ``encoder -> Linear(dim, 2)`` on one source's labelled rows
  or federated over several sources (the horizontal FedAvg path,
  :class:`horizontal.FederatedClassifier`; with ``privacy=RecordDP(...)`` DP-SGD with its
  epsilon in the ledger) and returns the encoder alone as an :class:`EncoderArtifact`;
* :class:`EncoderArtifact` is vflink's model format (:mod:`vfl.persistence`: numbers and JSON,
  never pickle) plus a SHA-256 digest of its contents: a file changed after saving, or of
  another kind, is refused;
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

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from vfl import persistence
from vfl.training.modules import mlp, output_width, seeded
from vfl.validation import check_numeric

__all__ = [
    "ARTIFACT_VERSION",
    "EncoderArtifact",
    "EncoderTransferClassifier",
    "build_encoder",
    "pretrain_encoder",
]

KIND = "transfer.EncoderArtifact"
ARTIFACT_VERSION = 1
"""Version of the artefact's layout (refused when newer than this vflink reads)."""


def build_encoder(inputs: int, dim: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """The default encoder: an MLP from ``inputs`` to ``dim`` with ``hidden`` layers, then
    ``tanh`` (bounded representations)."""
    return nn.Sequential(mlp(inputs, dim, hidden), nn.Tanh())


@dataclass
class EncoderArtifact:
    """A shipped encoder: its input columns and their scaling, its architecture and weights,
    and what it was trained on."""

    columns: list[str]
    mean: np.ndarray[Any, Any]
    scale: np.ndarray[Any, Any]
    dim: int
    hidden: list[int]
    state: dict[str, np.ndarray[Any, Any]]
    info: dict[str, Any] = field(default_factory=dict)  # sources, rows, epsilon, delta

    def module(self) -> nn.Module:
        """The encoder with its weights (a fresh module each call)."""
        encoder = build_encoder(len(self.columns), self.dim, tuple(self.hidden))
        encoder.load_state_dict(persistence.arrays_to_state_dict(self.state))
        return encoder

    def _content(self) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
        meta = {
            "artifact_version": ARTIFACT_VERSION,
            "columns": self.columns,
            "dim": self.dim,
            "hidden": list(self.hidden),
            "info": self.info,
        }
        arrays = {"mean": np.asarray(self.mean, float), "scale": np.asarray(self.scale, float)}
        arrays.update({f"state.{k}": v for k, v in self.state.items()})
        return meta, arrays

    @staticmethod
    def _digest(meta: dict[str, Any], arrays: dict[str, np.ndarray[Any, Any]]) -> str:
        h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
        for name in sorted(arrays):
            value = np.ascontiguousarray(arrays[name])
            h.update(f"{name}:{value.dtype.str}:{value.shape}".encode())
            h.update(value.tobytes())
        return h.hexdigest()

    def save(self, path: str | Path) -> Path:
        """Write the artefact (atomically; with its digest)."""
        meta, arrays = self._content()
        meta["digest"] = self._digest(meta, arrays)
        return persistence.save_model(path, KIND, meta, arrays)

    @classmethod
    def load(cls, path: str | Path) -> EncoderArtifact:
        """Read an artefact, refusing another kind of file, a newer layout, or contents that
        do not match their digest (changed after saving)."""
        meta, arrays = persistence.load_model(path, kind=KIND)
        meta = dict(meta)
        digest = meta.pop("digest", None)
        version = meta.get("artifact_version")
        if not isinstance(version, int) or version > ARTIFACT_VERSION:
            raise ValueError(
                f"{path}: encoder artefact version {version!r}; this vflink reads up to "
                f"{ARTIFACT_VERSION}: upgrade vflink"
            )
        if digest != cls._digest(meta, arrays):
            raise ValueError(
                f"{path}: the encoder's contents do not match their digest: the file was "
                "changed after it was saved; ask its sender for the original"
            )
        try:
            artifact = cls(
                columns=[str(c) for c in meta["columns"]],
                mean=arrays["mean"],
                scale=arrays["scale"],
                dim=int(meta["dim"]),
                hidden=[int(h) for h in meta["hidden"]],
                state={k[6:]: v for k, v in arrays.items() if k.startswith("state.")},
                info=dict(meta.get("info", {})),
            )
            artifact.module()
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{path} is not a usable encoder artefact: {exc}") from None
        return artifact


def pretrain_encoder(
    sources: dict[str, tuple[pd.DataFrame, Any]],
    *,
    columns: list[str] | None = None,
    dim: int = 8,
    hidden: tuple[int, ...] = (32,),
    rounds: int = 30,
    local_epochs: int = 1,
    batch_size: int = 32,
    learning_rate: float = 0.05,
    privacy: Any = None,
    random_state: int = 0,
    ledger: Any = None,
) -> EncoderArtifact:
    """Pretrain an encoder on ``sources`` (``{name: (frame, labels)}``: one source, or several
    federated by FedAvg) over ``columns`` (default: all, the same at every source).

    The network is ``encoder -> Linear(dim, 2)`` (binary labels) trained by
    :class:`horizontal.FederatedClassifier` (one source: its local training, alone), with
    ``privacy`` (e.g. ``horizontal.RecordDP(noise_multiplier=1.0)``) as there; the artefact
    records the sources, their rows and the largest epsilon spent. With ``privacy`` the
    columns are not standardised (pooled statistics would escape the DP guarantee): pass them
    on a known scale, and the artefact's scaling is the identity."""
    from horizontal import FederatedClassifier

    if not isinstance(sources, dict) or not sources:
        raise ValueError("sources must be {name: (frame, labels)} with at least one source")
    first = next(iter(sources.values()))[0]
    chosen = [str(c) for c in (columns if columns is not None else first.columns)]
    data = {}
    for name, (frame, labels) in sources.items():
        missing = [c for c in chosen if c not in frame.columns]
        if missing:
            raise ValueError(f"source {name!r} lacks the encoder's columns {missing}")
        data[name] = (frame[chosen], labels)
    with seeded(random_state):
        network = nn.Sequential(build_encoder(len(chosen), dim, hidden), nn.Linear(dim, 2))
    private: dict[str, Any] = {}
    if privacy is not None:  # DP covers the updates, not pooled statistics: none are pooled
        labels = sorted({v for _, y in sources.values() for v in np.unique(np.asarray(y))})
        private = {"standardize": False, "classes": labels}
    model = FederatedClassifier(
        module=network,
        rounds=rounds,
        strategy="fedavg",  # local SGD at this step, the pretraining this was tuned with
        local_epochs=local_epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        privacy=privacy,
        random_state=random_state,
        **private,
    )
    model.fit(data, ledger=ledger)
    if len(model.classes_) != 2:
        raise ValueError(
            f"pretraining is binary here; the labels hold {len(model.classes_)} classes"
        )
    info: dict[str, Any] = {
        "sources": sorted(sources),
        "rows": int(sum(len(f) for f, _ in sources.values())),
    }
    if privacy is not None:
        info["epsilon"] = float(model.epsilon_ or 0.0)
        info["delta"] = float(getattr(privacy, "delta", 0.0))
    encoder = next(iter(model.module_.children()))
    return EncoderArtifact(
        columns=chosen,
        mean=np.asarray(model.mean_, float),
        scale=np.asarray(model.scale_, float),
        dim=dim,
        hidden=list(hidden),
        state=persistence.state_dict_to_arrays(encoder.state_dict()),
        info=info,
    )


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


class EncoderTransferClassifier(BinaryScores):
    """Fine-tune a head on a shipped encoder (see the module docstring).

    Parameters
    ----------
    artifact : EncoderArtifact or path
        The encoder (its columns must be among the target's).
    freeze : {"all", "last", "none"}
        Which of the encoder's parameters stay fixed: all of them, all but its last linear
        layer, or none.
    hidden : tuple of int
        The head's hidden layers (``()``: logistic regression on the encoder's output and the
        target's own columns).
    own_columns : bool
        Whether the target's columns outside the encoder's join its output.
    max_iter, learning_rate, weight_decay
        Full-batch Adam on the target's rows.
    random_state : int
        Initialises the head.
    """

    def __init__(
        self,
        artifact: EncoderArtifact | str | Path,
        *,
        freeze: str = "all",
        hidden: tuple[int, ...] = (),
        own_columns: bool = True,
        max_iter: int = 300,
        learning_rate: float = 0.01,
        weight_decay: float = 1e-3,
        random_state: int = 0,
    ) -> None:
        self.artifact = artifact
        self.freeze = freeze
        self.hidden = hidden
        self.own_columns = own_columns
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.random_state = random_state

    def _artifact(self) -> EncoderArtifact:
        art = self.artifact
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
            self.own_mean_ = own.mean(axis=0)
            std = own.std(axis=0)
            self.own_scale_ = np.where(std > 0, std, 1.0)
        z_own = (own - self.own_mean_) / self.own_scale_
        return (
            torch.as_tensor(z_shared, dtype=torch.float32),
            torch.as_tensor(z_own, dtype=torch.float32),
        )

    def fit(self, target: pd.DataFrame, labels: Any) -> EncoderTransferClassifier:
        """Train the head (and the unfrozen encoder layers) on the target's labelled rows."""
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
            self.head_ = mlp(self.artifact_.dim + own.shape[1], 1, self.hidden)
        params = list(self.head_.parameters()) + trainable
        optimizer = torch.optim.Adam(params, lr=self.learning_rate, weight_decay=self.weight_decay)
        target_t = torch.as_tensor(y == self.classes_[1], dtype=torch.float32)
        loss_fn = nn.BCEWithLogitsLoss()
        for _ in range(self.max_iter):
            optimizer.zero_grad()
            loss = loss_fn(self._logits(shared, own), target_t)
            loss.backward()
            optimizer.step()
        self.encoder_.eval()
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
        shared, own = self._inputs(target, fitting=False)
        with torch.no_grad():
            out: np.ndarray[Any, Any] = self._logits(shared, own).double().numpy()
        return out
