"""Parameter checks shared by the privacy modules; each error names the parameter and value."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

__all__ = ["check_positive_finite", "check_positive_int", "check_probability"]


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def check_positive_finite(name: str, value: Any, *, unit: str = "") -> float:
    """Return ``value`` as a float if it is a finite number > 0, else raise ``ValueError``."""
    if not _is_real(value) or not math.isfinite(value) or value <= 0:
        what = f" ({unit})" if unit else ""
        raise ValueError(f"{name}{what} must be a positive finite number, got {value!r}")
    return float(value)


def check_probability(name: str, value: Any, *, allow_one: bool = False) -> float:
    """Return ``value`` as a float if it lies in ``(0, 1)`` (or ``(0, 1]``), else raise."""
    in_range = _is_real(value) and math.isfinite(value) and value > 0
    if not in_range or not (value <= 1 if allow_one else value < 1):
        interval = "(0, 1]" if allow_one else "(0, 1)"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return float(value)


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int if it is an integer >= 1, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
