"""Federated transfer learning, built on :mod:`vfl`'s runtime.

* :mod:`transfer.ftl` and :class:`FederatedTransferClassifier` -- secure federated transfer
  learning with a few overlapping patients (Liu et al. 2020): each party an encoder into a
  common space, the cross-party terms under Paillier with masks.
"""

from __future__ import annotations

from transfer.estimator import FederatedTransferClassifier, overlap_pairs

__all__ = ["FederatedTransferClassifier", "overlap_pairs"]
