"""Differential privacy for every vflink protocol: mechanisms, accounting and the ledger.

* :mod:`vfl.privacy.mechanisms` -- Laplace, Gaussian (classic and analytic calibration),
  exponential and randomised-response mechanisms, and L2 clipping, as pure numpy functions
  with OS randomness;
* :mod:`vfl.privacy.accounting` -- dp-accounting events for those mechanisms, the epsilon
  they spend under the ``"rdp"`` or ``"pld"`` accountant, and the noise multiplier that
  spends a target epsilon (:func:`resolve_noise_multiplier`);
* :mod:`vfl.privacy.ledger` -- :class:`PrivacyLedger`, where every mechanism records its
  spend, composed per data holder; :mod:`vfl.privacy.entry` -- one recorded spend;
* :mod:`vfl.privacy.checks` -- the parameter checks every privacy setting shares;
* :mod:`vfl.privacy.options` -- the ``privacy=`` objects of the vertical estimators
  (:class:`GaussianLabelDP`, :class:`GaussianGradientDP`, :class:`RandomizedResponse`), each
  named after its mechanism.

Importing this package loads numpy only; dp-accounting (about a second to import), scipy and
pandas are imported when first needed.
"""

from vfl.privacy.accounting import (
    ACCOUNTANTS,
    Accountant,
    compose,
    gaussian_event,
    get_accountant,
    laplace_event,
    noise_multiplier_for,
    randomized_response_event,
    resolve_noise_multiplier,
)
from vfl.privacy.entry import MECHANISMS, LedgerEntry, Mechanism
from vfl.privacy.ledger import PrivacyLedger, record_blip, record_randomized_response
from vfl.privacy.mechanisms import (
    CALIBRATIONS,
    clip_l2,
    exponential,
    gaussian,
    gaussian_noise,
    gaussian_sigma,
    laplace,
    laplace_scale,
    randomized_response,
)
from vfl.privacy.options import GaussianGradientDP, GaussianLabelDP, RandomizedResponse

__all__ = [
    "ACCOUNTANTS",
    "CALIBRATIONS",
    "MECHANISMS",
    "Accountant",
    "GaussianGradientDP",
    "GaussianLabelDP",
    "LedgerEntry",
    "Mechanism",
    "PrivacyLedger",
    "RandomizedResponse",
    "clip_l2",
    "compose",
    "exponential",
    "gaussian",
    "gaussian_event",
    "gaussian_noise",
    "gaussian_sigma",
    "get_accountant",
    "laplace",
    "laplace_event",
    "laplace_scale",
    "noise_multiplier_for",
    "randomized_response",
    "randomized_response_event",
    "record_blip",
    "record_randomized_response",
    "resolve_noise_multiplier",
]
