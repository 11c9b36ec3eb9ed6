"""Split learning: each data party a bottom network on its own columns, the label party a top
network on their embeddings (:mod:`vfl.split.protocol`), with its defences
(:mod:`vfl.split.defences`, and the protected layer of :mod:`vfl.split.interactive`); the
attacks that measure it are in :mod:`vfl.audit.split`."""

from __future__ import annotations

from vfl.split.defences import EmbeddingNoise, Quantizer
from vfl.split.estimator import SplitNNClassifier, SplitNNRegressor
from vfl.split.interactive import ProtectedLayer

__all__ = [
    "EmbeddingNoise",
    "ProtectedLayer",
    "Quantizer",
    "SplitNNClassifier",
    "SplitNNRegressor",
]
