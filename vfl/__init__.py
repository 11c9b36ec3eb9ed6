"""vflink's centre: parties, the channels they talk over, and vertical federated models.

Sub-packages:

* :mod:`vfl.federation` -- the :class:`~vfl.federation.Federation` interface every protocol is
  written against, the in-process :class:`~vfl.federation.LocalFederation`, and the wire format;
* :mod:`vfl.crypto` -- Paillier encryption on whole numpy vectors, compatible with phe;
* :mod:`vfl.datasets` -- synthetic cohorts (the lab network + imaging centre scenario);
* :mod:`vfl.align` -- aligning parties' rows to their common patients over a federation;
* :mod:`vfl.logistic` -- :class:`VerticalLogisticRegression` under Paillier encryption.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vflink")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

from vfl.align import align, align_party
from vfl.logistic import VerticalLogisticRegression

__all__ = ["VerticalLogisticRegression", "__version__", "align", "align_party"]
