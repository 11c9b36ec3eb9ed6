"""Pure big-integer kernels of the Paillier engine (gmpy2), free of keys and protocol logic.

Every function takes and returns plain integers (``gmpy2.mpz``) and lists of them; the vector
type and the keys call these. The costs below are in modular multiplications ("mulmods") of
numbers of the modulus' size, the unit that dominates Paillier arithmetic.

* :class:`FixedBaseTable` -- ``g**a mod M`` for a fixed ``g`` with a precomputed window table:
  ``ceil(bits / w)`` mulmods and no squarings (Brickell-Gordon-McCurley-Wilson style windowing).
* :func:`multiexp` -- ``prod_i c_i**e_i mod M`` by Pippenger's bucket method for many bases
  (about ``bits/w * (N + 2**(w+1))`` mulmods instead of ``N * 1.2 * bits``), plainly for few.
* :func:`batch_invert` -- Montgomery's trick: ``k`` modular inverses for one inversion and
  ``3(k-1)`` mulmods.

Modulo large numbers (:data:`RELEASE_GIL_BITS` and up: ``n**2`` of 2048-bit keys), the
kernels let gmpy2 release the interpreter lock during their arithmetic (:func:`releasing_gil`;
gmpy2 holds it by default). gmpy2 releases it only inside its ``powmod`` family, though, not
in a product or remainder of its numbers (gmpy2 2.3.2, 4096-bit moduli, two threads against
one: ``powmod`` 1.94x, ``a * b % m`` 1.07x). So threads of one process share the cores in
decryptions and ``powmod`` chains, while the kernels built from products (Pippenger,
Straus, the window tables, the fixed-base powers) take turns: work that should use every
core goes to worker processes (:mod:`vfl.crypto.parallel`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import secrets
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

import gmpy2
import numpy as np
from gmpy2 import mpz

from vfl.progress import progress, stage

__all__ = [
    "FixedBaseTable",
    "batch_invert",
    "bin_products",
    "crt_combine",
    "horner_pack",
    "multiexp",
    "multiexp_big",
    "multiexp_rows",
    "multiexp_straus",
    "pippenger_window",
    "releasing_gil",
]

Int = Any  # gmpy2.mpz or int
P = ParamSpec("P")
R = TypeVar("R")

RELEASE_GIL_BITS = 3072
"""Moduli from this size on get their arithmetic run without the interpreter lock. Releasing
and taking it back costs about 0.05 us per operation: 1% of a 4096-bit product, 10% of a
1024-bit one (the small test keys', where it slowed the test suite and gained nothing)."""


def releasing_gil(modulus: Int) -> contextlib.AbstractContextManager[Any]:
    """A block in which gmpy2 releases the interpreter lock during its arithmetic, when
    ``modulus`` has :data:`RELEASE_GIL_BITS` bits or more (gmpy2's switch is per thread: this
    sets it for the block, in the calling thread)."""
    if int(modulus).bit_length() >= RELEASE_GIL_BITS and not gmpy2.get_context().allow_release_gil:
        return gmpy2.context(gmpy2.get_context(), allow_release_gil=True)  # type: ignore[no-any-return]
    return contextlib.nullcontext()


def _releasing_for_its_modulus(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run inside :func:`releasing_gil` of its ``modulus`` argument."""
    position = list(inspect.signature(fn).parameters).index("modulus")

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        modulus = kwargs["modulus"] if "modulus" in kwargs else args[position]
        with releasing_gil(modulus):
            return fn(*args, **kwargs)

    return wrapper


class FixedBaseTable:
    """Precomputed powers of a fixed base for fast ``base**a mod modulus`` with random ``a``.

    Row ``i`` holds ``base**(j * 2**(w*i))`` for ``j = 0..2**w - 1``; an exponent written in
    base ``2**w`` picks one entry per row, so a power costs ``rows = ceil(bits / w)`` mulmods and
    no squarings. Random exponents are drawn directly as ``rows`` uniform ``w``-bit digits from
    the OS (:func:`secrets.token_bytes`), i.e. uniform on ``[0, 2**(rows*w))``.

    Memory: ``rows * 2**w`` numbers of the modulus' size: 54 MiB for ``bits=1024, w=10``
    modulo a 4096-bit ``n**2``; building it costs as many mulmods (about half a second).
    """

    def __init__(self, base: Int, modulus: Int, bits: int, window: int = 10) -> None:
        if not 1 <= window <= 16:
            raise ValueError(f"window must be 1..16 bits, got {window}")
        self.modulus = mpz(modulus)
        self.bits = int(bits)
        self.window = int(window)
        self.n_rows = -(-self.bits // self.window)
        size = 1 << self.window
        rows: list[list[Any]] = []
        row_base = mpz(base) % self.modulus
        with releasing_gil(self.modulus):
            for _ in range(self.n_rows):
                row = [mpz(1), row_base]
                for _ in range(2, size):
                    row.append(row[-1] * row_base % self.modulus)
                rows.append(row)
                row_base = row[-1] * row_base % self.modulus  # base ** (2**(w*(i+1)))
        self.rows = rows

    def pow_digits(self, digits: Sequence[int]) -> Any:
        """``base**a`` for ``a = sum(digits[i] * 2**(w*i))`` (one digit per row)."""
        modulus, rows = self.modulus, self.rows
        acc = rows[0][digits[0]]
        for i in range(1, self.n_rows):
            acc = acc * rows[i][digits[i]] % modulus
        return acc

    def pow(self, exponent: int) -> Any:
        """``base**exponent mod modulus`` for ``0 <= exponent < 2**(rows*w)``."""
        mask = (1 << self.window) - 1
        return self.pow_digits([(exponent >> (self.window * i)) & mask for i in range(self.n_rows)])

    def random_digits(self, count: int) -> list[list[int]]:
        """``count`` uniformly random exponents as digit rows, from OS randomness."""
        raw = np.frombuffer(secrets.token_bytes(2 * self.n_rows * count), dtype="<u2")
        digits = (raw & ((1 << self.window) - 1)).reshape(count, self.n_rows)
        out: list[list[int]] = digits.tolist()
        return out

    def random_powers(self, count: int, *, show_progress: bool = False) -> list[Any]:
        """``base**a`` for ``count`` independent uniformly random ``a`` of ``rows*w`` bits."""
        out: list[Any] = []
        with (
            releasing_gil(self.modulus),
            stage("encrypting values", total=count, show=show_progress) as shown,
        ):
            for start in range(0, count, 1024):  # bounded temporary memory for the digits
                size = min(1024, count - start)
                out += [self.pow_digits(d) for d in self.random_digits(size)]
                shown.advance(size)
        return out


def batch_invert(values: Sequence[Int], modulus: Int) -> list[Any]:
    """Inverses of all ``values`` modulo ``modulus`` with one inversion (Montgomery's trick).

    Raises
    ------
    ZeroDivisionError
        Some value is not invertible.
    """
    if not values:
        return []
    prefix = [mpz(values[0]) % modulus]
    for v in values[1:]:
        prefix.append(prefix[-1] * v % modulus)
    inv = gmpy2.invert(prefix[-1], modulus)
    if inv == 0:
        raise ZeroDivisionError("a value has no inverse modulo the modulus")
    out: list[Any] = [None] * len(values)
    for i in range(len(values) - 1, 0, -1):
        out[i] = inv * prefix[i - 1] % modulus
        inv = inv * values[i] % modulus
    out[0] = inv
    return out


def pippenger_window(n_terms: int, bits: int) -> int:
    """Bucket width minimising ``ceil(bits/w) * (n_terms + 2**(w+1))`` mulmods."""
    best_w, best_cost = 1, math.inf
    for w in range(1, 17):
        cost = math.ceil(bits / w) * (n_terms + 2 ** (w + 1))
        if cost < best_cost:
            best_w, best_cost = w, cost
    return best_w


@_releasing_for_its_modulus
def multiexp(bases: Sequence[Int], exponents: np.ndarray[Any, Any], modulus: Int) -> Any:
    """``prod_i bases[i] ** exponents[i] mod modulus`` for non-negative int64 exponents.

    Pippenger's bucket method: for each ``w``-bit window of the exponents, multiply each base
    into the bucket of its digit, then sum the buckets with two running products (digit-weighted
    without any exponentiation), and shift the result by ``w`` squarings between windows.
    Few terms go through ``gmpy2.powmod`` one by one instead.
    """
    exps = np.asarray(exponents, dtype=np.int64)
    if exps.size and exps.min() < 0:
        raise ValueError("multiexp needs non-negative exponents")
    nonzero = np.flatnonzero(exps)
    if nonzero.size == 0:
        return mpz(1)
    bits = int(exps.max()).bit_length()
    if nonzero.size * bits < 512:  # tiny: plain square-and-multiply in C
        acc = mpz(1)
        for i in nonzero.tolist():
            acc = acc * gmpy2.powmod(bases[i], int(exps[i]), modulus) % modulus
        return acc
    w = pippenger_window(int(nonzero.size), bits)
    mask = (1 << w) - 1
    live_bases = [bases[i] for i in nonzero.tolist()]
    live_exps = exps[nonzero]
    result = None
    for shift in range(w * ((bits - 1) // w), -1, -w):
        if result is not None:
            result = gmpy2.powmod(result, 1 << w, modulus)
        digits = ((live_exps >> shift) & mask).tolist()
        buckets: list[Any] = [None] * (mask + 1)
        for base, digit in zip(live_bases, digits, strict=True):
            if digit:
                held = buckets[digit]
                buckets[digit] = base if held is None else held * base % modulus
        running = acc_w = None
        for digit in range(mask, 0, -1):  # acc_w = prod_d bucket[d] ** d
            held = buckets[digit]
            if held is not None:
                running = held if running is None else running * held % modulus
            if running is not None:
                acc_w = running if acc_w is None else acc_w * running % modulus
        if acc_w is not None:
            result = acc_w if result is None else result * acc_w % modulus
    return mpz(1) if result is None else result


_LIMB = 62


def _straus_cost(n_terms: int, bits: int, w: int) -> int:
    """Mulmods of :func:`multiexp_straus` with ``w``-bit windows."""
    return n_terms * (1 << (w - 1)) + bits + n_terms * bits // (w + 1)


@_releasing_for_its_modulus
def multiexp_straus(bases: Sequence[Int], exponents: Sequence[int], modulus: Int) -> Any:
    """``prod_i bases[i] ** exponents[i] mod modulus`` for non-negative integers of any size,
    by interleaved sliding windows (Straus; Moeller 2001). Each base gets its odd powers
    below ``2**w``, then one shared chain of squarings. It costs about
    ``N * 2**(w-1) + bits + N * bits / (w + 1)`` mulmods, which beats Pippenger's buckets for
    few bases with long exponents (the secret-shared protocol's products: about 30 bases,
    90-bit exponents)."""
    live = [(mpz(b), int(e)) for b, e in zip(bases, exponents, strict=True) if int(e)]
    if not live:
        return mpz(1)
    bits = max(e.bit_length() for _, e in live)
    w = min(range(1, 8), key=lambda k: _straus_cost(len(live), bits, k))
    tables = []
    for base, _ in live:  # base ** (2k + 1) for k < 2**(w-1)
        square = base * base % modulus
        odd = [base]
        for _ in range((1 << (w - 1)) - 1):
            odd.append(odd[-1] * square % modulus)
        tables.append(odd)
    # where each window ends (its lowest set bit) and its odd value, per term
    starts: dict[int, list[tuple[int, int]]] = {}
    for t, (_, e) in enumerate(live):
        i = e.bit_length() - 1
        while i >= 0:
            if not (e >> i) & 1:
                i -= 1
                continue
            low = max(i - w + 1, 0)
            window = (e >> low) & ((1 << (i - low + 1)) - 1)
            while not window & 1:
                window >>= 1
                low += 1
            starts.setdefault(low, []).append((t, window >> 1))
            i = low - 1
    acc = mpz(1)
    for position in range(bits - 1, -1, -1):
        if acc != 1:
            acc = acc * acc % modulus
        for t, k in starts.get(position, ()):
            acc = acc * tables[t][k] % modulus
    return acc


@_releasing_for_its_modulus
def multiexp_big(bases: Sequence[Int], exponents: Sequence[int], modulus: Int) -> Any:
    """``prod_i bases[i] ** exponents[i] mod modulus`` for non-negative integers of any size.

    Few bases (where :func:`multiexp_straus` costs less by its cost model) go through Straus.
    Otherwise it runs one :func:`multiexp` per limb: as few limbs of at most 62 bits as the
    largest exponent needs, equally wide, joined by Horner's rule
    (``acc**(2**width) * part``), about what one long Pippenger pass would cost."""
    values = [int(e) for e in exponents]
    if any(e < 0 for e in values):
        raise ValueError("multiexp_big needs non-negative exponents")
    top = max((e.bit_length() for e in values), default=0)
    if top == 0:
        return mpz(1)
    terms = sum(1 for e in values if e)
    straus = min(_straus_cost(terms, top, k) for k in range(1, 8))
    window = pippenger_window(terms, min(top, _LIMB))
    pippenger = -(-top // window) * (terms + 2 ** (window + 1)) + top
    if straus <= pippenger:
        return multiexp_straus(bases, values, modulus)
    limbs = -(-top // _LIMB)
    width = -(-top // limbs)
    mask = (1 << width) - 1
    result = None
    for limb in range(limbs - 1, -1, -1):
        shift = width * limb
        digits = np.array([(e >> shift) & mask for e in values], np.int64)
        part = multiexp(bases, digits, modulus)
        if result is None:
            result = part
        else:
            result = gmpy2.powmod(result, 1 << width, modulus) * part % modulus
    return result


def multiexp_rows(
    bases: Sequence[Int],
    rows: Sequence[np.ndarray[Any, Any]],
    modulus: Int,
    *,
    show_progress: bool = False,
) -> list[Any]:
    """``prod_i bases[i] ** rows[k][i] mod modulus`` for each row of signed int64 exponents.

    Two ways, whichever its cost model finds cheaper for the whole call:

    * **shared windows** (few bases, many rows: the protected layer's products, 16 to 64
      bases of about 37-bit exponents): each base's powers below ``2**w`` (and its inverse's,
      where an exponent is negative) computed once for every row, then per row one chain of
      squarings with a multiplication per nonzero ``w``-bit digit of each exponent
      (:func:`_rows_by_shared_windows`); about ``N * 2**w`` mulmods once and
      ``ceil(bits/w) * (N + w)`` per row;
    * **Pippenger per row** (many bases: ``X.T @ ciphertexts`` over thousands of rows):
      negative exponents use the inverses of the bases, computed once for all rows by
      :func:`batch_invert` (one inversion in all), so each row is a single :func:`multiexp`.
    """
    rows = [np.asarray(row, dtype=np.int64) for row in rows]
    if any(row.size and row.min() == _INT64_MIN for row in rows):
        raise ValueError("multiexp_rows needs exponents above -2**63 (whose magnitude fits)")
    shared = _shared_window(len(bases), rows)
    if shared is not None:
        return _rows_by_shared_windows(bases, rows, modulus, shared, show_progress)
    inverses: list[Any] | None = None
    out = []
    for exps in progress(
        rows, total=len(rows), desc="matrix @ ciphertexts, rows", show=show_progress
    ):
        negative = exps < 0
        if negative.any():
            if inverses is None:
                inverses = batch_invert(bases, modulus)
            chosen = [
                inverses[i] if neg else b
                for i, (b, neg) in enumerate(zip(bases, negative.tolist(), strict=True))
            ]
            out.append(multiexp(chosen, np.abs(exps), modulus))
        else:
            out.append(multiexp(bases, exps, modulus))
    return out


_INT64_MIN = -(2**63)

SHARED_TABLE_ENTRIES = 1 << 15
"""The most numbers the shared-window tables may hold (16 MiB modulo a 4096-bit ``n**2``)."""


def _shared_window(n_bases: int, rows: Sequence[np.ndarray[Any, Any]]) -> int | None:
    """The window of the shared-window way when its mulmods (tables once, for the bases some
    row uses, then each row's nonzero digits) are fewer than Pippenger's on each row's nonzero
    terms, within :data:`SHARED_TABLE_ENTRIES`; None otherwise."""
    if not rows or n_bases == 0:
        return None
    row_bits = [int(np.abs(r).max()).bit_length() if r.size else 0 for r in rows]
    bits = max(row_bits)
    if bits == 0:
        return None
    used = np.zeros(n_bases, dtype=bool)
    negative = np.zeros(n_bases, dtype=bool)
    for r in rows:
        used |= r > 0
        negative |= r < 0
    tabled = int(used.sum()) + int(negative.sum())  # a table per base, one per inverse
    terms = [int(np.count_nonzero(r)) for r in rows]
    pippenger = 0
    for live, own in zip(terms, row_bits, strict=True):  # multiexp's own cost, row by row:
        if live * own < 512:  # plain powers when tiny
            pippenger += 2 * live * own
        else:
            w_p = pippenger_window(live, own)
            pippenger += math.ceil(own / w_p) * (live + 2 ** (w_p + 1) + w_p)

    def cost(w: int) -> int:
        return tabled * ((1 << w) - 2) + sum(math.ceil(bits / w) * (t + w) for t in terms)

    fitting = [w for w in range(1, 9) if tabled << w <= SHARED_TABLE_ENTRIES]
    if not fitting:
        return None
    best = min(fitting, key=cost)
    return best if cost(best) < pippenger else None


@_releasing_for_its_modulus
def _rows_by_shared_windows(
    bases: Sequence[Int],
    rows: Sequence[np.ndarray[Any, Any]],
    modulus: Int,
    w: int,
    show_progress: bool = False,
) -> list[Any]:
    """:func:`multiexp_rows` by ``w``-bit windows over tables of powers shared by the rows:
    ``table[i][d] = bases[i] ** d`` (``d < 2**w``; of the inverse for negative exponents)."""
    size = 1 << w

    def powers(base: Any) -> list[Any]:
        table = [mpz(1), mpz(base) % modulus]
        for _ in range(2, size):
            table.append(table[-1] * table[1] % modulus)
        return table

    used = np.zeros(len(bases), dtype=bool)
    negative = np.zeros(len(bases), dtype=bool)
    for exps in rows:
        used |= exps > 0
        negative |= exps < 0
    tables = {i: powers(bases[i]) for i in np.flatnonzero(used).tolist()}
    inverse_tables: dict[int, list[Any]] = {}
    if negative.any():
        where = np.flatnonzero(negative).tolist()
        inverses = batch_invert([bases[i] for i in where], modulus)
        inverse_tables = {i: powers(v) for i, v in zip(where, inverses, strict=True)}
    out = []
    mask = size - 1
    for exps in progress(
        rows, total=len(rows), desc="matrix @ ciphertexts, rows", show=show_progress
    ):
        live = np.flatnonzero(exps)
        if live.size == 0:
            out.append(mpz(1))
            continue
        magnitudes = np.abs(exps[live])
        windows = -(-int(magnitudes.max()).bit_length() // w)
        shifts = np.arange(windows - 1, -1, -1, dtype=np.int64) * w
        digits = ((magnitudes[:, None] >> shifts[None, :]) & mask).T.tolist()  # top window first
        chosen = [
            inverse_tables[i] if e < 0 else tables[i]
            for i, e in zip(live.tolist(), exps[live].tolist(), strict=True)
        ]
        acc = None
        for window in digits:
            if acc is not None:
                acc = gmpy2.powmod(acc, size, modulus)
            for table, digit in zip(chosen, window, strict=True):
                if digit:
                    acc = table[digit] if acc is None else acc * table[digit] % modulus
        out.append(mpz(1) if acc is None else acc)
    return out


@_releasing_for_its_modulus
def bin_products(
    ciphertexts: Sequence[Int], codes: np.ndarray[Any, Any], width: int, modulus: Int
) -> list[list[Any]]:
    """Per column of ``codes`` (``(rows, columns)`` bin codes below ``width``), the product
    modulo ``modulus`` of the ciphertexts of each bin's rows (1 for an empty bin): the
    encrypted sums of a histogram (SecureBoost's hosts)."""
    one = gmpy2.mpz(1)
    out = []
    for col in range(codes.shape[1]):
        sums = [one] * width
        for c, b in zip(ciphertexts, codes[:, col].tolist(), strict=True):
            sums[b] = sums[b] * c % modulus
        out.append(sums)
    return out


def horner_pack(ciphertexts: Sequence[Int], shift: Int, modulus: Int) -> Any:
    """One ciphertext of ``ciphertexts`` packed by Horner's rule: the first in the low slot,
    each next one ``shift`` (a power of two) higher: ``prod_i c_i ** (shift ** i)``."""
    acc = ciphertexts[-1]
    for c in reversed(ciphertexts[:-1]):
        acc = gmpy2.powmod(acc, shift, modulus) * c % modulus
    return acc


def crt_combine(xp: Int, xq: Int, p: Int, q: Int, q_inv_mod_p: Int) -> Any:
    """The ``x mod p*q`` with ``x = xp mod p`` and ``x = xq mod q`` (Garner's formula)."""
    return xq + q * ((xp - xq) * q_inv_mod_p % p)
