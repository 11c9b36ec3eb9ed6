"""The arithmetic of vertical Poisson regression: the loss, the public bounds, the fixed point
and the masked layouts the key holder pins. Pure functions, no protocol
(:mod:`vfl.linear.poisson_protocol` runs them).

The model: ``y ~ Poisson(mu)`` with ``mu = e * exp(u)``, ``u = u_A + u_B`` the sum of the
label party's partial score (with the intercept) and the passive party's, ``e`` the exposure.
The objective is half the mean Poisson deviance plus the penalty,

    ``L = (1/n) sum_i [mu_i - y_i - y_i log(mu_i) + y_i log(y_i)] + alpha/2 |w|^2``

(``0 log 0 = 0``; the intercept not penalised), whose gradient in ``u_i`` is the residual
``r_i = mu_i - y_i``: a party's gradient is ``X_p^T r / n + alpha w_p``. That is the objective
of scikit-learn's ``PoissonRegressor(alpha=alpha)``, ``sum(deviance) / (2 n) + alpha/2
|w|^2``.

Under encryption, per batch (fixed exponents, public, so that no ciphertext's exponent tells
anything about a value):

* the passive party encrypts ``round(exp(u_B) * 2**EXP_BITS)`` (exponent ``-EXP_BITS``);
* the label party raises each to ``round(e exp(u_A) * 2**RATE_BITS)`` and subtracts
  ``y``: ``[[r]]`` at exponent ``-(EXP_BITS + RATE_BITS)``;
* each party multiplies its features, ``round(x * 2**FEATURE_BITS)``, into ``[[r]]``: its
  gradient numerator at exponent :data:`GRADIENT_EXPONENT`.

Every bound below is public and follows from the checks each party makes on its own values
(:func:`check_partial_scores`, :func:`check_counts`, :func:`check_exposure`): a party that
passes them cannot overflow a slot, and the key holder sizes and pins every masked request from
them and the row count (:func:`masked_layout`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import xlogy

from vfl.crypto.packing import MIN_KAPPA, PackingLayout
from vfl.linear.model import FEATURE_BITS

__all__ = [
    "EXP_BITS",
    "GRADIENT_EXPONENT",
    "LABEL_BITS",
    "LOSS_EXPONENT",
    "MAX_COUNT",
    "MAX_EXPOSURE",
    "MIN_EXPOSURE",
    "PENALTY_LIMIT",
    "PIECE_EXPONENT",
    "RATE_BITS",
    "RESIDUAL_EXPONENT",
    "SCORE_BITS",
    "SCORE_LIMIT",
    "check_counts",
    "check_exposure",
    "check_partial_scores",
    "gradient_bound",
    "half_deviance",
    "loss_bound",
    "masked_layout",
    "penalty_value",
    "start_intercept",
    "to_fixed",
]

SCORE_LIMIT = 30.0
"""Public bound on each party's partial score ``|u_p|`` (``exp(30)`` is about ``1.1e13``)."""
MAX_EXPOSURE = 2.0**20
MIN_EXPOSURE = 2.0**-20
"""Exposures lie in ``[MIN_EXPOSURE, MAX_EXPOSURE]`` (about ``1e-6`` to ``1e6``)."""
MAX_COUNT = 2.0**32
"""Largest target (count) accepted."""
EXP_BITS = 40
"""``exp(u_B)`` is encrypted as a multiple of ``2**-EXP_BITS``."""
RATE_BITS = 40
"""The label party's factor ``e exp(u_A)`` is rounded to a multiple of ``2**-RATE_BITS``."""
LABEL_BITS = 32
"""Targets are encrypted (once, for the loss) as multiples of ``2**-LABEL_BITS``."""
SCORE_BITS = 32
"""The passive party's scores multiply the encrypted targets as multiples of
``2**-SCORE_BITS``."""
RESIDUAL_EXPONENT = -(EXP_BITS + RATE_BITS)
GRADIENT_EXPONENT = RESIDUAL_EXPONENT - FEATURE_BITS
PIECE_EXPONENT = -(LABEL_BITS + SCORE_BITS)
"""The exponent of the passive party's loss piece ``[[sum y u_B]]``."""
LOSS_EXPONENT = min(RESIDUAL_EXPONENT, PIECE_EXPONENT)
FEATURE_LIMIT = 2.0**40
"""Standardised features beyond this are refused by :meth:`PartyModel.design`."""
RESIDUAL_BOUND = MAX_EXPOSURE * math.exp(2 * SCORE_LIMIT) + MAX_COUNT
"""``|mu - y|`` of any row that passed the checks."""
PENALTY_LIMIT = 2.0**60
"""Public bound on each party's penalty ``alpha/2 |w_p|^2`` (a party beyond it diverged)."""


def to_fixed(values: np.ndarray[Any, Any], bits: int) -> list[int]:
    """``round(values * 2**bits)`` as Python integers (exact beyond int64)."""
    scaled = np.rint(np.ldexp(np.asarray(values, dtype=float), bits))
    return [int(v) for v in scaled.tolist()]


def gradient_bound(rows: int) -> float:
    """A public bound on a party's batch gradient numerator ``|X^T r|`` (per column), for a
    table of ``rows`` rows (a batch has at most that many)."""
    return float(rows) * FEATURE_LIMIT * RESIDUAL_BOUND


def loss_bound(rows: int) -> float:
    """A public bound on the objective summed over ``rows`` rows (half deviance and both
    parties' penalties)."""
    per_row = RESIDUAL_BOUND + MAX_COUNT * (
        2 * SCORE_LIMIT + abs(math.log(MIN_EXPOSURE)) + math.log(MAX_COUNT)
    )
    return float(rows) * (per_row + 2 * PENALTY_LIMIT)


def penalty_value(w: np.ndarray[Any, Any], alpha: float, party: str, *, intercept: bool) -> float:
    """``alpha/2 |w|^2`` of a party's weights (its intercept, last, excluded), refused beyond
    :data:`PENALTY_LIMIT`, naming the party."""
    coef = w[:-1] if intercept else w
    value = 0.5 * alpha * float(coef @ coef)
    if not value <= PENALTY_LIMIT:
        raise FloatingPointError(
            f"party {party!r}: its penalty alpha/2 |w|^2 reached {value:.4g}, beyond the public "
            f"bound {PENALTY_LIMIT:g}; the training diverged (lower learning_rate)"
        )
    return value


def masked_layout(
    count: int, bound: float, exponent: int, key_bits: int, kappa: int = MIN_KAPPA
) -> PackingLayout:
    """The layout :func:`vfl.crypto.masked.pack_masked` gives ``count`` values within
    ``bound`` at ``exponent`` under a ``key_bits``-bit key: what the key holder derives from
    public numbers and pins each request to."""
    value_bits = max(1, math.ceil(math.log2(bound) - exponent) + 1) + 1
    slot_bits = value_bits + kappa + 1
    return PackingLayout(
        count=count, value_bits=value_bits, kappa=kappa, slots=(key_bits - 2) // slot_bits
    )


def half_deviance(y: np.ndarray[Any, Any], mu: np.ndarray[Any, Any]) -> float:
    """``sum_i [mu_i - y_i - y_i log(mu_i / y_i)]``: half the Poisson deviance, summed."""
    return float(np.sum(mu - y - xlogy(y, mu) + xlogy(y, y)))


def check_partial_scores(u: np.ndarray[Any, Any], party: str) -> None:
    """Refuse a partial score beyond :data:`SCORE_LIMIT` (whose ``exp`` would leave the
    public bounds the encryption is sized for), naming the party."""
    if u.size and not float(np.max(np.abs(u))) <= SCORE_LIMIT:
        raise FloatingPointError(
            f"party {party!r}: partial scores reach {float(np.max(np.abs(u))):.4g}, beyond the "
            f"public bound {SCORE_LIMIT:g} within which exp(score) is encrypted; the training "
            "diverged or the features are far outside the training range (lower "
            "learning_rate, raise alpha, or standardise the features)"
        )


def check_counts(values: np.ndarray[Any, Any], index: pd.Index, party: str) -> None:
    """Poisson targets: non-negative, at most :data:`MAX_COUNT`, not all zero."""
    negative = np.flatnonzero(values < 0)
    if negative.size:
        row = index[int(negative[0])]
        raise ValueError(
            f"targets of party {party!r} must be non-negative counts for a Poisson model; row "
            f"{row!r} has {values[negative[0]]:g} ({negative.size} negative in all); fix or "
            "drop those rows"
        )
    if float(np.max(values)) > MAX_COUNT:
        raise ValueError(
            f"targets of party {party!r} reach {float(np.max(values)):g}, beyond {MAX_COUNT:g}; "
            "model them in larger units (with exposure) or rescale them"
        )
    if not float(np.sum(values)) > 0:
        raise ValueError(
            f"targets of party {party!r} are all 0: a Poisson model has nothing to learn"
        )


def check_exposure(
    values: np.ndarray[Any, Any], index: pd.Index, party: str, column: str | None
) -> None:
    """Exposures: finite, within ``[MIN_EXPOSURE, MAX_EXPOSURE]`` (positive), naming the label
    party, the column (when it is one) and a row."""
    where = f"column {column!r} of party {party!r}" if column else f"party {party!r}"
    bad = np.flatnonzero(~np.isfinite(values) | (values <= 0))
    if bad.size:
        row = index[int(bad[0])]
        raise ValueError(
            f"exposure ({where}) must be positive and finite: row {row!r} has "
            f"{values[bad[0]]!r} ({bad.size} such rows); drop those rows or fix the exposure"
        )
    out = np.flatnonzero((values < MIN_EXPOSURE) | (values > MAX_EXPOSURE))
    if out.size:
        row = index[int(out[0])]
        raise ValueError(
            f"exposure ({where}) must lie within [{MIN_EXPOSURE:g}, {MAX_EXPOSURE:g}]: row "
            f"{row!r} has {values[out[0]]:g}; express it in other units"
        )


def start_intercept(y: np.ndarray[Any, Any], exposure: np.ndarray[Any, Any]) -> float:
    """The label party's starting intercept: ``log(sum y / sum e)``, the best constant model
    (scikit-learn's ``PoissonRegressor`` starts there too)."""
    return float(math.log(float(np.sum(y)) / float(np.sum(exposure))))
