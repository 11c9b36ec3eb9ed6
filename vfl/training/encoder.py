"""The shipped encoder of encoder transfer: the artefact a source pretrains
(:func:`horizontal.pretrain_encoder`) and a target fine-tunes on
(:class:`transfer.EncoderTransferClassifier`).

It lives in the toolkit because both families use it and neither imports the other.
:class:`EncoderArtifact` is vflink's model format (:mod:`vfl.persistence`: numbers and JSON,
never pickle) plus a SHA-256 digest of its contents: a file changed after saving, or of
another kind, is refused.

.. warning::
   What crosses is the encoder's weights and the source's column means and scales. Weights
   trained on records can leak them (membership inference, reconstruction of rare records);
   DP-SGD bounds that, and the artefact carries the epsilon it was trained under.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl import persistence
from vfl.extras import optional, require
from vfl.training.modules import mlp

if TYPE_CHECKING:
    from torch import nn
else:
    nn = optional("torch.nn", for_=__name__)

__all__ = ["ARTIFACT_VERSION", "KIND", "EncoderArtifact", "build_encoder"]

KIND = "transfer.EncoderArtifact"
"""The artefact's kind in its file (kept from when it lived in :mod:`transfer`, so files saved
then still load)."""
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
        require("torch", for_=cls.__name__)
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
