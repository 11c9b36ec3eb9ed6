"""Vertical gradient boosting: SecureBoost on the Paillier engine.

* :class:`SecureBoostClassifier`, :class:`SecureBoostRegressor` (:mod:`vfl.boost.estimator`):
  the estimators;
* :mod:`vfl.boost.protocol`: the roles (the label party grows the trees; every other party
  builds encrypted histograms of its own columns and keeps its splits' thresholds);
* :mod:`vfl.boost.bins` (each party's cuts), :mod:`vfl.boost.splits` (XGBoost's gain, a
  learned side for missing values), :mod:`vfl.boost.tree` (level-wise trees from every
  party's histograms, sibling subtraction), :mod:`vfl.boost.objectives`,
  :mod:`vfl.boost.part` (a party's saved part), :mod:`vfl.boost.twin` (the plaintext twin,
  for tests).

What a host learns is measured by :class:`vfl.audit.InstanceSpaceAudit`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linkage.lazy import lazy_exports

_EXPORTS = {
    "SecureBoostClassifier": "vfl.boost.estimator",
    "SecureBoostRegressor": "vfl.boost.estimator",
}

__all__ = ["SecureBoostClassifier", "SecureBoostRegressor"]

if TYPE_CHECKING:
    from vfl.boost.estimator import SecureBoostClassifier, SecureBoostRegressor

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
