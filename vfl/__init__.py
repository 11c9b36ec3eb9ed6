"""vflink's centre: parties, the channels they talk over, and vertical federated models.

Sub-packages and modules (see the README's folder map):

* :mod:`vfl.federation` -- the runtime every protocol is written against (in-process and gRPC),
  the wire format and typed messages;
* :mod:`vfl.crypto` -- Paillier on whole numpy vectors, packing, the one masked decryption;
* :mod:`vfl.privacy` -- differential-privacy mechanisms, the accountant and the privacy ledger;
* :mod:`vfl.training` -- batch schedules from an agreed seed, optimisers, convergence;
* :mod:`vfl.estimator`, :mod:`vfl.validation`, :mod:`vfl.persistence` -- the role runner, input
  checks and the model format every estimator shares;
* :mod:`vfl.linear` -- vertical linear models (logistic, multiclass, linear regression);
* :mod:`vfl.split` -- split neural networks (:class:`vfl.SplitNNClassifier`), their defences;
* :mod:`vfl.boost` -- gradient-boosted trees, SecureBoost (:class:`vfl.SecureBoostClassifier`);
* :mod:`vfl.preprocessing` (:class:`vfl.PartyPreprocessor`) -- each party's own imputation,
  one-hot encoding and scaling, fitted on its own rows;
* :mod:`vfl.alignment` (:func:`vfl.align`) -- aligning parties' rows to their common
  patients over a federation;
* :mod:`vfl.jobs` -- the jobs ``vflink party`` can run; :mod:`vfl.audit` -- privacy attacks;
* :mod:`vfl.datasets` -- synthetic cohorts.

Names are exported lazily: ``import vfl`` (and ``import vfl.federation`` or ``vfl.crypto``)
loads neither pandas, scikit-learn nor linkage until a name that needs them is used.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from linkage.lazy import lazy_exports

try:
    __version__ = version("vflink")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

_EXPORTS = {
    "align": "vfl.alignment",
    "align_party": "vfl.alignment",
    "VerticalLogisticRegression": "vfl.linear",
    "VerticalLinearRegression": "vfl.linear",
    "VerticalPoissonRegression": "vfl.linear",
    "PartyPreprocessor": "vfl.preprocessing",
    "PrivacyLedger": "vfl.privacy",
    "VerticalFrames": "vfl.validation",
    "SplitNNClassifier": "vfl.split",
    "SplitNNRegressor": "vfl.split",
    "SecureBoostClassifier": "vfl.boost",
    "SecureBoostRegressor": "vfl.boost",
}

__all__ = [
    "PartyPreprocessor",
    "PrivacyLedger",
    "SecureBoostClassifier",
    "SecureBoostRegressor",
    "SplitNNClassifier",
    "SplitNNRegressor",
    "VerticalFrames",
    "VerticalLinearRegression",
    "VerticalLogisticRegression",
    "VerticalPoissonRegression",
    "__version__",
    "align",
    "align_party",
]

if TYPE_CHECKING:
    from vfl.alignment import align, align_party
    from vfl.boost import SecureBoostClassifier, SecureBoostRegressor
    from vfl.linear import (
        VerticalLinearRegression,
        VerticalLogisticRegression,
        VerticalPoissonRegression,
    )
    from vfl.preprocessing import PartyPreprocessor
    from vfl.privacy import PrivacyLedger
    from vfl.split import SplitNNClassifier, SplitNNRegressor
    from vfl.validation import VerticalFrames


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
