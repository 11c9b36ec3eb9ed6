"""Differential privacy for every vflink protocol: mechanisms, accounting and the ledger.

* :mod:`vfl.privacy.mechanisms` -- Laplace, Gaussian (classic and analytic calibration) and
  exponential mechanisms, and L2 clipping, as pure numpy functions with OS randomness;
* :mod:`vfl.privacy.accounting` -- dp-accounting events for those mechanisms and the epsilon
  they spend under the ``"rdp"`` or ``"pld"`` accountant;
* :mod:`vfl.privacy.ledger` -- :class:`PrivacyLedger`, where every mechanism records its
  spend, composed per data holder; :mod:`vfl.privacy.entry` -- one recorded spend.

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
)
from vfl.privacy.entry import MECHANISMS, LedgerEntry, Mechanism
from vfl.privacy.ledger import PrivacyLedger, record_blip
from vfl.privacy.mechanisms import (
    CALIBRATIONS,
    clip_l2,
    exponential,
    gaussian,
    gaussian_noise,
    gaussian_sigma,
    laplace,
    laplace_scale,
)

__all__ = [
    "ACCOUNTANTS",
    "CALIBRATIONS",
    "MECHANISMS",
    "Accountant",
    "LedgerEntry",
    "Mechanism",
    "PrivacyLedger",
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
    "randomized_response_event",
    "record_blip",
]
