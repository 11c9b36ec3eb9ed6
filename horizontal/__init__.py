"""The horizontal setting for comparison: FedAvg, FedProx, differential privacy, secure
aggregation, robust aggregation and compression, built on :mod:`vfl`'s runtime.

* :mod:`horizontal.estimator` -- :class:`FederatedClassifier` and :class:`FederatedRegressor`
  (a torch module trained by a strategy over the federation runtime);
* :mod:`horizontal.strategies` -- FedSGD, FedAvg, FedProx, FedAvgM, FedAdam, Scaffold, FedLBFGS
  (:mod:`horizontal.lbfgs`), over the pure kernels of :mod:`horizontal.aggregate`;
  :mod:`horizontal.training` -- their roles, :mod:`horizontal.local` -- a client's round,
  :mod:`horizontal.stopping` -- early stopping; :mod:`horizontal.baseline` -- the pooled twin
  the defaults are measured against;
* :mod:`horizontal.privacy` -- client-level DP (central :class:`ClientDP`, local
  :class:`LocalDP`) and record-level DP-SGD (:class:`RecordDP`), spends in the ledger;
  :mod:`horizontal.scaling` -- standardisation under DP (:class:`DPScaling`);
* :mod:`horizontal.partition` -- splitting a data set among simulated clients (IID, Dirichlet
  label skew, quantity skew) and measuring the skew (total variation, earth mover's distance);
* :mod:`horizontal.secagg` -- secure aggregation that survives dropouts (Bonawitz et al.
  2017, SecAgg+'s sparse graph as an option), :class:`SecAggConfig` for the estimators'
  ``protocol=``;
* :mod:`horizontal.robust` -- robust aggregation kernels (median, trimmed mean, Krum,
  Multi-Krum, norm bounding, a cosine filter); :mod:`horizontal.compression` -- b-bit
  stochastic quantisation and top-k sparsification with error feedback (``compression=``);
  :mod:`horizontal.attacks` -- the attacks as audits; :mod:`horizontal.participation` -- the
  sampled mean's error, cross-silo against cross-device;
* :mod:`horizontal.lasso` -- :class:`FederatedLasso`: the Lasso and the elastic net by
  proximal gradient, with secure aggregation and central or local DP;
* :mod:`horizontal.flower` -- the same training on Flower's engine (a ServerApp and a
  ClientApp), :mod:`horizontal.flower_local` -- a SuperLink and a SuperNode per client on
  this machine, what ``fit(engine="flower")`` runs on.

Names are exported lazily (as in :mod:`vfl`): ``import horizontal`` loads neither pandas nor
SciPy until a name that needs them is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linkage.lazy import lazy_exports

_EXPORTS = {
    "FederatedClassifier": "horizontal.estimator",
    "FederatedRegressor": "horizontal.estimator",
    "FedAdam": "horizontal.strategies",
    "FedAvg": "horizontal.strategies",
    "FedAvgM": "horizontal.strategies",
    "FedLBFGS": "horizontal.strategies",
    "FedProx": "horizontal.strategies",
    "FedSGD": "horizontal.strategies",
    "Scaffold": "horizontal.strategies",
    "Strategy": "horizontal.strategies",
    "SecAggConfig": "horizontal.secagg",
    "FederatedLasso": "horizontal.lasso",
    "LassoDP": "horizontal.lasso",
    "ClientDP": "horizontal.privacy",
    "LocalDP": "horizontal.privacy",
    "RecordDP": "horizontal.privacy",
    "DPScaling": "horizontal.scaling",
    "pooled_twin": "horizontal.baseline",
    "pretrain_encoder": "horizontal.pretrain",
    "dirichlet_label_split": "horizontal.partition",
    "earth_movers": "horizontal.partition",
    "iid_split": "horizontal.partition",
    "label_distributions": "horizontal.partition",
    "quantity_skew_split": "horizontal.partition",
    "skew_report": "horizontal.partition",
    "total_variation": "horizontal.partition",
}

__all__ = [
    "ClientDP",
    "DPScaling",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedLBFGS",
    "FedProx",
    "FedSGD",
    "FederatedClassifier",
    "FederatedLasso",
    "FederatedRegressor",
    "LassoDP",
    "LocalDP",
    "RecordDP",
    "Scaffold",
    "SecAggConfig",
    "Strategy",
    "dirichlet_label_split",
    "earth_movers",
    "iid_split",
    "label_distributions",
    "pooled_twin",
    "pretrain_encoder",
    "quantity_skew_split",
    "skew_report",
    "total_variation",
]

if TYPE_CHECKING:
    from horizontal.baseline import pooled_twin
    from horizontal.estimator import FederatedClassifier, FederatedRegressor
    from horizontal.lasso import FederatedLasso, LassoDP
    from horizontal.partition import (
        dirichlet_label_split,
        earth_movers,
        iid_split,
        label_distributions,
        quantity_skew_split,
        skew_report,
        total_variation,
    )
    from horizontal.pretrain import pretrain_encoder
    from horizontal.privacy import ClientDP, LocalDP, RecordDP
    from horizontal.scaling import DPScaling
    from horizontal.secagg import SecAggConfig
    from horizontal.strategies import (
        FedAdam,
        FedAvg,
        FedAvgM,
        FedLBFGS,
        FedProx,
        FedSGD,
        Scaffold,
        Strategy,
    )

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
