"""Vertical gradient boosting (SecureBoost), being built for issue #32.

So far: each party's bins (:mod:`vfl.boost.bins`), XGBoost's split gain with a learned side
for missing values (:mod:`vfl.boost.splits`), level-wise trees from every party's histograms
with sibling subtraction and thresholds kept by their owner (:mod:`vfl.boost.tree`), the
losses (:mod:`vfl.boost.objectives`) and the plaintext twin (:mod:`vfl.boost.twin`), tested
against an exact reference split for split. Not yet: the encrypted protocol, the estimators,
``vflink party`` and the audits.
"""
