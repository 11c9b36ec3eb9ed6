"""Federated transfer learning, built on :mod:`vfl`'s runtime.

* :mod:`transfer.ftl` and :class:`FederatedTransferClassifier` -- secure federated transfer
  learning with a few overlapping patients (Liu et al. 2020): each party an encoder into a
  common space, the cross-party terms under Paillier with masks;
* :mod:`transfer.encoder` -- shared-encoder transfer without overlap: an encoder pretrained
  at one or several sources (:func:`pretrain_encoder`), shipped as a checked file
  (:class:`EncoderArtifact`), a head fine-tuned at the target (:class:`EncoderTransferClassifier`);
* :mod:`transfer.audit` -- what the target infers about the patients it shares with the source;
* :mod:`transfer.party` -- ``vflink party`` with ``model = "transfer"``: each party its own
  process.
"""

from __future__ import annotations

from transfer.encoder import EncoderArtifact, EncoderTransferClassifier, pretrain_encoder
from transfer.estimator import FederatedTransferClassifier, overlap_pairs

__all__ = [
    "EncoderArtifact",
    "EncoderTransferClassifier",
    "FederatedTransferClassifier",
    "overlap_pairs",
    "pretrain_encoder",
]
