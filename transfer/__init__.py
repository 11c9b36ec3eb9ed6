"""Federated transfer learning, built on :mod:`vfl`'s runtime.

* :mod:`transfer.ftl` and :class:`FederatedTransferClassifier` -- secure federated transfer
  learning with a few overlapping patients (Liu et al. 2020): each party an encoder into a
  common space, the cross-party terms under Paillier with masks;
* :mod:`transfer.encoder` -- shared-encoder transfer without overlap: an encoder pretrained
  at one or several sources (:func:`horizontal.pretrain_encoder`), shipped as a checked file
  (:class:`EncoderArtifact`), a head fine-tuned at the target (:class:`EncoderTransferClassifier`);
* :mod:`transfer.audit` -- what the target infers about the patients it shares with the source;
* :mod:`transfer.jobs` -- what ``vflink party`` and ``vflink compare`` run of this family
  (``model = "transfer"``, each party its own process; :mod:`transfer.comparison`'s rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linkage.lazy import lazy_exports

# lazy (as in vfl and horizontal): finding the family (transfer.jobs) loads no torch
_EXPORTS = {
    "EncoderArtifact": "transfer.encoder",
    "EncoderTransferClassifier": "transfer.encoder",
    "FederatedTransferClassifier": "transfer.estimator",
    "overlap_pairs": "transfer.estimator",
}

__all__ = [
    "EncoderArtifact",
    "EncoderTransferClassifier",
    "FederatedTransferClassifier",
    "overlap_pairs",
]

if TYPE_CHECKING:
    from transfer.encoder import EncoderArtifact, EncoderTransferClassifier
    from transfer.estimator import FederatedTransferClassifier, overlap_pairs

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
