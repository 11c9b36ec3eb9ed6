"""Fixed-point encoding of real numbers as Paillier plaintexts (pure functions, no keys).

A real ``x`` is stored as the integer ``round(x * 2**-exponent)`` with one *shared* base-2
exponent per vector, so vectors add elementwise without per-element rescaling (python-paillier
keeps an exponent per number, base 16). Signed integers live in ``Z_n`` as ``m mod n``: the
lower third ``[0, max_int]`` holds non-negative values, the upper third ``[n - max_int, n)``
negative ones, and a decrypted value in the middle third is an overflow, reported as an error
instead of a silently wrapped number (python-paillier's convention, ``max_int = n // 3 - 1``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_PRECISION",
    "DEFAULT_PRECISION_BITS",
    "FixedPointOverflowError",
    "decode",
    "encode",
    "exponent_for",
    "ints_to_floats",
    "scale_to_int64",
    "scale_to_ints",
    "to_signed",
]

DEFAULT_PRECISION = 2.0**-32
"""Absolute precision of encrypted floats when the caller gives none (exponent -32)."""

DEFAULT_PRECISION_BITS = 24
"""Significant bits kept of plaintext multipliers, relative to their largest magnitude."""


class FixedPointOverflowError(OverflowError):
    """A value does not fit the plaintext space, or a decrypted value lies in the overflow band."""


def as_real_array(values: Any, what: str) -> np.ndarray[Any, Any]:
    """``values`` as a finite float64 or int64 numpy array, or a clear error."""
    arr = np.asarray(values)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"{what} must be numeric (bool, int or float), got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))
        if bad.size:
            raise ValueError(
                f"{what} holds a non-finite value ({arr.ravel()[bad[0]]}) at flat index {bad[0]}; "
                "impute or drop NaN/inf before encrypting"
            )
        return arr.astype(np.float64, copy=False)
    if arr.dtype.kind == "u" and arr.size and arr.max() >= 2**63:
        return arr.astype(np.float64)  # beyond int64: encoded as floats, never wrapped
    return arr.astype(np.int64)


def exponent_for(values: np.ndarray[Any, Any], bits: int) -> int:
    """The exponent that keeps ``bits`` significant bits of ``max |values|`` (0 for small ints).

    Integer arrays whose magnitudes fit in ``bits`` bits are encoded exactly (exponent 0).
    """
    if values.size == 0:
        return 0
    peak = float(np.max(np.abs(values)))
    if values.dtype.kind in "biu" and peak < 2.0**bits:
        return 0
    if peak == 0.0:
        return 0
    return math.frexp(peak)[1] - bits


def scale_to_ints(values: np.ndarray[Any, Any], exponent: int, what: str = "value") -> list[int]:
    """``round(values * 2**-exponent)`` as signed Python integers (exact for integer input)."""
    flat = values.ravel()
    if flat.dtype.kind != "f":
        if exponent <= 0:
            return [int(v) << -exponent for v in flat.tolist()]
        half = 1 << (exponent - 1)
        return [(int(v) + half) >> exponent for v in flat.tolist()]  # round half up
    with np.errstate(over="ignore"):
        scaled = np.rint(np.ldexp(flat, -exponent))
    if not np.all(np.isfinite(scaled)):
        at = int(np.flatnonzero(~np.isfinite(scaled))[0])
        raise FixedPointOverflowError(
            f"{what} {flat[at]!r} at index {at} does not fit the plaintext space at exponent "
            f"{exponent}"
        )
    if np.all(np.abs(scaled) < 2.0**62):
        ints: list[int] = scaled.astype(np.int64).tolist()
        return ints
    return [int(v) for v in scaled.tolist()]


def scale_to_int64(values: np.ndarray[Any, Any], exponent: int) -> np.ndarray[Any, Any]:
    """:func:`scale_to_ints` as an int64 array, for exponents chosen by :func:`exponent_for`
    with at most 62 bits."""
    if values.dtype.kind == "f":
        scaled: np.ndarray[Any, Any] = np.rint(np.ldexp(values, -exponent)).astype(np.int64)
        return scaled
    ints = values.astype(np.int64)
    if exponent <= 0:
        return ints << -exponent
    return (ints + (1 << (exponent - 1))) >> exponent  # round half up


def encode(
    values: np.ndarray[Any, Any], exponent: int, n: int, max_int: int, what: str = "value"
) -> list[int]:
    """``round(values * 2**-exponent)`` as integers modulo ``n`` (negatives as ``n - |m|``).

    Raises
    ------
    FixedPointOverflowError
        A value's encoding exceeds ``max_int`` in magnitude.
    """
    ints = scale_to_ints(values, exponent, what)
    for i, m in enumerate(ints):
        if abs(m) > max_int:
            raise FixedPointOverflowError(
                f"{what} {values.ravel()[i]!r} at index {i} does not fit the plaintext space: its "
                f"fixed-point encoding needs {abs(m).bit_length()} bits, the key allows "
                f"{max_int.bit_length()}"
            )
    return [m % n for m in ints]


def decode(plaintexts: list[int], exponent: int, n: int, max_int: int) -> np.ndarray[Any, Any]:
    """Signed reals from decrypted integers in ``[0, n)`` (see :func:`to_signed`)."""
    return ints_to_floats(to_signed(plaintexts, n, max_int), exponent)


def to_signed(plaintexts: list[int], n: int, max_int: int) -> list[int]:
    """Signed integers from decrypted integers in ``[0, n)``.

    Raises
    ------
    FixedPointOverflowError
        A plaintext lies in the overflow band ``(max_int, n - max_int)``: the computation
        wrapped around the plaintext space.
    """
    signed = []
    for i, m in enumerate(plaintexts):
        if m <= max_int:
            signed.append(int(m))
        elif m >= n - max_int:
            signed.append(int(m) - n)
        else:
            raise FixedPointOverflowError(
                f"decrypted value at index {i} lies in the overflow band: a homomorphic "
                "computation exceeded the plaintext space (use a smaller precision or scale "
                "the inputs down)"
            )
    return signed


def ints_to_floats(ints: list[int], exponent: int) -> np.ndarray[Any, Any]:
    """``ints * 2**exponent`` as float64 (exact up to float rounding, for any size of int)."""
    if all(-(2**62) < m < 2**62 for m in ints):
        return np.ldexp(np.asarray(ints, dtype=np.float64), exponent)
    out = np.empty(len(ints))
    for i, m in enumerate(ints):
        shift = max(0, abs(m).bit_length() - 60)
        out[i] = (
            math.ldexp(float(m >> shift), exponent + shift) if shift else math.ldexp(m, exponent)
        )
    return out
