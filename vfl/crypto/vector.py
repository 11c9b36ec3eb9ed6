"""EncryptedVector: a 1-d numpy-like array of Paillier ciphertexts with one fixed-point exponent.

Supported, with results that decrypt to what numpy computes on the plaintexts (up to the
fixed-point precision):

=============================  ==================================================================
``u + v``, ``u - v``, ``-u``   elementwise; exponents are aligned first (``c**(2**k)``)
``u + x``, ``x - u``           ``x`` a plaintext array or scalar, rounded to ``u``'s precision
``u * x``, ``x * u``, ``u/x``  ``x`` a plaintext array or scalar, encoded with a shared exponent
                               keeping :data:`~vfl.crypto.fixedpoint.DEFAULT_PRECISION_BITS`
``u.sum()``                    a 0-d vector
``u[i]``, ``u[a:b]``, ``u[mask]``, ``u[idx]``, :func:`concatenate`
``A @ u``, ``u @ A``           ``A`` a plaintext matrix: one Pippenger multi-exponentiation per
                               output (the gradient kernel ``X.T @ [[d]]``)
=============================  ==================================================================

numpy defers to this type (``__array_ufunc__ = None``), so ``X.T @ vec`` and ``ndarray * vec``
call it rather than building object arrays.

Negative plaintext multipliers cost no modular inversion per term: inverses are computed in one
batch by Montgomery's trick (one inversion per call): of the ciphertexts that meet a negative
entry in ``A @ u``, of the products with negative multipliers in ``u * x``.

Results of homomorphic operations are deterministic functions of their inputs (a product with
zero is the ciphertext 1); :meth:`EncryptedVector.to_wire` re-randomises such vectors before
they leave the party, as phe does with ``ciphertext(be_secure=True)``.

Overflow: encoding checks every value against the plaintext space, and decryption raises on a
value in the overflow band (the middle third of the plaintext space) instead of returning a
wrapped number. Bounds are not tracked through computations, so a result that overflows far
enough to wrap back into the valid range is not detected: keep results far below the capacity
(about ``n_length - 2`` bits; vflink's protocols stay hundreds of bits below).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from vfl.crypto import fixedpoint, parallel
from vfl.crypto.kernels import batch_invert, multiexp_rows
from vfl.federation.wire import CiphertextBlock

if TYPE_CHECKING:  # keys import this module to build vectors; vectors only hold a key
    from vfl.crypto.keys import PaillierPublicKey

__all__ = ["EncryptedVector", "concatenate", "matvec"]

PROGRESS_MIN_TERMS = 100_000
"""``matrix @ vector`` products from which a progress bar is shown (a few seconds)."""


class EncryptedVector:
    """Paillier ciphertexts of a 1-d (or 0-d) real vector, with one shared base-2 exponent.

    Made by :meth:`PaillierPublicKey.encrypt`, by arithmetic on other vectors, or from the wire
    with :meth:`PaillierPublicKey.vector_from_wire`; decrypted by
    :meth:`PaillierPrivateKey.decrypt`.
    """

    __array_ufunc__ = None  # numpy operators return NotImplemented: our reflected ops run

    def __init__(
        self,
        public_key: PaillierPublicKey,
        ciphertexts: list[Any],
        exponent: int,
        *,
        shape: tuple[int, ...] | None = None,
        fresh: bool = False,
    ) -> None:
        self.public_key = public_key
        self.ciphertexts = ciphertexts
        self.exponent = int(exponent)
        if abs(self.exponent) > 4 * public_key.n_length:
            raise ValueError(
                f"fixed-point exponent {self.exponent} is out of range for a "
                f"{public_key.n_length}-bit key (|exponent| <= {4 * public_key.n_length})"
            )
        self.shape = (len(ciphertexts),) if shape is None else tuple(shape)
        if len(self.shape) > 1 or int(np.prod(self.shape)) != len(ciphertexts):
            raise ValueError(f"an EncryptedVector is 0-d or 1-d; got shape {self.shape}")
        self.fresh = fresh

    # -- basics ----------------------------------------------------------------------------------

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d EncryptedVector")
        return self.shape[0]

    @property
    def size(self) -> int:
        """Number of ciphertexts."""
        return len(self.ciphertexts)

    @property
    def ndim(self) -> int:
        """0 or 1."""
        return len(self.shape)

    def __repr__(self) -> str:
        return (
            f"EncryptedVector(shape={self.shape}, exponent={self.exponent}, "
            f"key={self.public_key.fingerprint[:6].hex()})"
        )

    def _new(
        self, ciphertexts: list[Any], exponent: int, shape: tuple[int, ...] | None = None
    ) -> EncryptedVector:
        return EncryptedVector(self.public_key, ciphertexts, exponent, shape=shape)

    def _same_key(self, other: EncryptedVector) -> None:
        if other.public_key.fingerprint != self.public_key.fingerprint:
            raise ValueError("cannot combine vectors encrypted under different public keys")

    # -- exponents -------------------------------------------------------------------------------

    def rescale(self, exponent: int) -> EncryptedVector:
        """The same values at a lower (finer) ``exponent``: each ciphertext raised to ``2**k``."""
        shift = self.exponent - int(exponent)
        if shift > self.public_key.n_length:
            raise ValueError(
                f"rescaling by 2**{shift} would exceed the plaintext space of a "
                f"{self.public_key.n_length}-bit key"
            )
        if shift < 0:
            raise ValueError(
                f"can only lower the exponent ({self.exponent} -> {exponent}); rounding an "
                "encrypted value to a coarser precision needs the key holder"
            )
        if shift == 0:
            return self
        factor = mpz(1) << shift
        out = gmpy2.powmod_base_list(self.ciphertexts, factor, self.public_key.nsquare)
        return self._new(list(out), exponent, self.shape)

    # -- addition --------------------------------------------------------------------------------

    def __add__(self, other: Any) -> EncryptedVector:
        if isinstance(other, EncryptedVector):
            self._same_key(other)
            a, b = _align(self, other)
            shape = _broadcast_shape(a.shape, b.shape)
            ca, cb = (
                _broadcast_list(a.ciphertexts, a.shape, shape),
                _broadcast_list(b.ciphertexts, b.shape, shape),
            )
            nsq = self.public_key.nsquare
            return self._new([x * y % nsq for x, y in zip(ca, cb, strict=True)], a.exponent, shape)
        arr = _plain(other, "the plaintext added")
        shape = _broadcast_shape(self.shape, arr.shape)
        pk = self.public_key
        encoded = fixedpoint.encode(
            np.broadcast_to(arr, shape),
            self.exponent,
            int(pk.n),
            int(pk.max_int),
            "plaintext addend",
        )
        cs = _broadcast_list(self.ciphertexts, self.shape, shape)
        n, nsq = pk.n, pk.nsquare
        return self._new(
            [c * (1 + n * m) % nsq for c, m in zip(cs, encoded, strict=True)], self.exponent, shape
        )

    __radd__ = __add__

    def __neg__(self) -> EncryptedVector:
        return self._new(
            batch_invert(self.ciphertexts, self.public_key.nsquare), self.exponent, self.shape
        )

    def __sub__(self, other: Any) -> EncryptedVector:
        if isinstance(other, EncryptedVector):
            return self + (-other)
        return self + (-_plain(other, "the plaintext subtracted"))

    def __rsub__(self, other: Any) -> EncryptedVector:
        return (-self).__add__(other)

    # -- multiplication by plaintexts ------------------------------------------------------------

    def __mul__(self, other: Any) -> EncryptedVector:
        return self.multiply(other)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> EncryptedVector:
        arr = _plain(other, "the divisor").astype(np.float64)
        if np.any(arr == 0):
            raise ZeroDivisionError("division of an EncryptedVector by zero")
        return self.multiply(1.0 / arr)

    def multiply(
        self, other: Any, *, precision_bits: int = fixedpoint.DEFAULT_PRECISION_BITS
    ) -> EncryptedVector:
        """Elementwise product with a plaintext array or scalar.

        The plaintext is encoded with one exponent keeping ``precision_bits`` significant bits of
        its largest magnitude (integers that fit are exact); the result's exponent is the sum.
        """
        if isinstance(other, EncryptedVector):
            raise TypeError(
                "Paillier cannot multiply two ciphertexts; one factor must be plaintext"
            )
        arr = _plain(other, "the plaintext multiplier")
        shape = _broadcast_shape(self.shape, arr.shape)
        if not 1 <= precision_bits <= 62:
            raise ValueError(f"precision_bits must be between 1 and 62, got {precision_bits}")
        exp = fixedpoint.exponent_for(arr, precision_bits)
        signed = fixedpoint.scale_to_int64(np.broadcast_to(arr, shape), exp).ravel().tolist()
        cs = _broadcast_list(self.ciphertexts, self.shape, shape)
        nsq = self.public_key.nsquare
        if arr.size == 1:
            value = signed[0] if signed else 0
            out = list(gmpy2.powmod_base_list(cs, abs(value), nsq)) if cs else []
            if value < 0:
                out = batch_invert(out, nsq)
        else:
            out = [gmpy2.powmod(c, abs(m), nsq) for c, m in zip(cs, signed, strict=True)]
            negative = [i for i, m in enumerate(signed) if m < 0]
            if negative:
                for i, inv in zip(
                    negative, batch_invert([out[i] for i in negative], nsq), strict=True
                ):
                    out[i] = inv
        return self._new(out, self.exponent + exp, shape)

    # -- reductions and products -----------------------------------------------------------------

    def sum(self) -> EncryptedVector:
        """The encrypted sum of all elements, as a 0-d vector."""
        nsq = self.public_key.nsquare
        acc = mpz(1)
        for c in self.ciphertexts:
            acc = acc * c % nsq
        return self._new([acc], self.exponent, ())

    def __rmatmul__(self, matrix: Any) -> EncryptedVector:
        return matvec(matrix, self)

    def __matmul__(self, matrix: Any) -> EncryptedVector:
        arr = _plain(matrix, "the plaintext matrix")
        if arr.ndim != 2:
            raise ValueError(f"vector @ matrix needs a 2-d matrix, got shape {arr.shape}")
        return matvec(arr.T, self)

    # -- indexing --------------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> EncryptedVector:
        if not self.shape:
            raise IndexError("a 0-d EncryptedVector cannot be indexed")
        if isinstance(key, (int, np.integer)):
            i = int(key)
            if not -len(self) <= i < len(self):
                raise IndexError(
                    f"index {i} is out of bounds for an EncryptedVector of length {len(self)}"
                )
            return self._new([self.ciphertexts[i]], self.exponent, ())
        if isinstance(key, slice):
            picked = self.ciphertexts[key]
            return self._new(picked, self.exponent, (len(picked),))
        idx = np.arange(len(self))[np.asarray(key)]
        if idx.ndim != 1:
            raise IndexError("EncryptedVector supports 1-d indexing only")
        cs = self.ciphertexts
        return self._new([cs[i] for i in idx.tolist()], self.exponent, (len(idx),))

    # -- randomness, wire, phe -------------------------------------------------------------------

    def obfuscate(self, *, workers: parallel.Workers = None) -> EncryptedVector:
        """Re-randomise every ciphertext (same plaintexts, fresh randomness); ``workers``
        processes share the obfuscators' exponentiations for long vectors."""
        nsq = self.public_key.nsquare
        rs = self.public_key.obfuscators(self.size, workers=workers)
        out = self._new(
            [c * r % nsq for c, r in zip(self.ciphertexts, rs, strict=True)],
            self.exponent,
            self.shape,
        )
        out.fresh = True
        return out

    def to_wire(self, *, be_secure: bool = True) -> CiphertextBlock:
        """The vector as a :class:`~vfl.federation.CiphertextBlock` for sending.

        With ``be_secure`` (default) a vector that came out of homomorphic operations is
        re-randomised first, so that the ciphertexts reveal nothing about how they were made.
        """
        vec = self if (self.fresh or not be_secure) else self.obfuscate()
        return CiphertextBlock.from_integers(
            self.public_key.fingerprint,
            vec.ciphertexts,
            [self.exponent],
            width=self.public_key.ciphertext_bytes,
            shape=self.shape,
        )

    @classmethod
    def from_wire(cls, public_key: PaillierPublicKey, block: Any) -> EncryptedVector:
        """Inverse of :meth:`to_wire`; refuses blocks that claim another key."""
        if not isinstance(block, CiphertextBlock):
            raise TypeError(f"expected a CiphertextBlock, got {type(block).__name__}")
        if block.key_fingerprint != public_key.fingerprint:
            raise ValueError(
                f"the ciphertexts claim public key {block.key_fingerprint[:6].hex()}, but this "
                "party "
                f"expects key {public_key.fingerprint[:6].hex()}; refusing them"
            )
        if len(block.shape) > 1:
            raise ValueError(f"an EncryptedVector is 0-d or 1-d; the block has shape {block.shape}")
        if block.exponents.shape != (1,):
            raise ValueError(
                "an EncryptedVector has one shared exponent; the block has one per value"
            )
        ints = block.integers()
        nsq = public_key.nsquare
        if any(c <= 0 or c >= nsq or gmpy2.gcd(c, public_key.n) != 1 for c in ints):
            raise ValueError("the block holds values that are not valid ciphertexts for this key")
        return cls(public_key, [mpz(c) for c in ints], int(block.exponents[0]), shape=block.shape)

    def to_phe(self) -> list[Any]:
        """The vector as a list of ``phe.EncryptedNumber`` (phe's base-16 exponents)."""
        from phe import paillier

        vec = self.rescale(self.exponent - self.exponent % 4) if self.exponent % 4 else self
        phe_key = self.public_key.to_phe()
        return [
            paillier.EncryptedNumber(phe_key, int(c), vec.exponent // 4) for c in vec.ciphertexts
        ]

    @classmethod
    def from_phe(cls, numbers: Sequence[Any], public_key: PaillierPublicKey) -> EncryptedVector:
        """A vector from ``phe.EncryptedNumber`` objects under ``public_key`` (exponents
        aligned to the smallest); ``PaillierPublicKey.from_phe`` converts phe's key."""
        if not numbers:
            raise ValueError("from_phe needs at least one EncryptedNumber")
        if any(int(x.public_key.n) != int(public_key.n) for x in numbers):
            raise ValueError("the EncryptedNumbers are not all under this public key")
        exponent = 4 * min(int(x.exponent) for x in numbers)
        if 4 * max(int(x.exponent) for x in numbers) - exponent > public_key.n_length:
            raise ValueError("the EncryptedNumbers' exponents are too far apart to align")
        nsq = public_key.nsquare
        cs = [
            gmpy2.powmod(
                mpz(x.ciphertext(be_secure=False)), mpz(1) << (4 * int(x.exponent) - exponent), nsq
            )
            for x in numbers
        ]
        return cls(public_key, cs, exponent)


def matvec(
    matrix: Any,
    vector: EncryptedVector,
    *,
    precision_bits: int = fixedpoint.DEFAULT_PRECISION_BITS,
    workers: parallel.Workers = None,
) -> EncryptedVector:
    """``matrix @ vector`` for a plaintext ``(m, n)`` matrix and an encrypted length-``n`` vector.

    Each row is encoded with its own exponent keeping ``precision_bits`` significant bits of the
    row's largest magnitude; each output is one Pippenger multi-exponentiation in which negative
    entries use the inverses of the ciphertexts (all inverted at once by Montgomery's trick, one
    inversion per call); outputs are then aligned to a shared exponent. With 2 or more
    ``workers`` the rows are shared among worker processes.
    """
    arr = _plain(matrix, "the plaintext matrix")
    if arr.ndim != 2 or vector.ndim != 1 or arr.shape[1] != len(vector):
        raise ValueError(
            f"matrix @ vector needs a (m, {vector.shape[0] if vector.shape else '?'}) matrix and a "
            f"1-d vector; got {arr.shape} @ {vector.shape}"
        )
    if precision_bits > 62:
        raise ValueError("precision_bits above 62 is not supported by the multi-exponentiation")
    nsq = vector.public_key.nsquare
    exps, signed_rows = [], []
    for row in arr:
        exp = fixedpoint.exponent_for(row, precision_bits)
        ints = fixedpoint.scale_to_int64(row, exp)
        signed_rows.append(ints)
        exps.append(exp)
    n_workers = parallel.check_workers(workers)
    if n_workers > 1 and arr.size >= 4096:
        args = [
            (vector.ciphertexts, chunk, nsq) for chunk in parallel.split(signed_rows, n_workers)
        ]
        parts = parallel.map_processes(
            parallel.multiexp_rows_worker,
            args,
            workers if parallel.is_executor(workers) else n_workers,
        )
        products = [c for part in parts for c in part]
    else:
        products = multiexp_rows(
            vector.ciphertexts, signed_rows, nsq, show_progress=arr.size >= PROGRESS_MIN_TERMS
        )
    target = min(exps, default=0)
    out = []
    for c, exp in zip(products, exps, strict=True):
        if exp > target:
            c = gmpy2.powmod(c, mpz(1) << (exp - target), nsq)
        out.append(c)
    return EncryptedVector(vector.public_key, out, vector.exponent + target, shape=(len(out),))


def concatenate(vectors: Sequence[EncryptedVector]) -> EncryptedVector:
    """Join 1-d (or 0-d) vectors under one key; exponents are aligned to the smallest."""
    if not vectors:
        raise ValueError("concatenate needs at least one EncryptedVector")
    first = vectors[0]
    for v in vectors[1:]:
        first._same_key(v)
    exponent = min(v.exponent for v in vectors)
    cs: list[Any] = []
    for v in vectors:
        cs += v.rescale(exponent).ciphertexts
    return EncryptedVector(first.public_key, cs, exponent, shape=(len(cs),))


# -- helpers ----------------------------------------------------------------------------------


def _plain(values: Any, what: str) -> np.ndarray[Any, Any]:
    if isinstance(values, EncryptedVector):
        raise TypeError(f"{what} must be plaintext")
    return fixedpoint.as_real_array(values, what)


def _align(a: EncryptedVector, b: EncryptedVector) -> tuple[EncryptedVector, EncryptedVector]:
    exponent = min(a.exponent, b.exponent)
    return a.rescale(exponent), b.rescale(exponent)


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    try:
        shape = np.broadcast_shapes(a, b)
    except ValueError:
        raise ValueError(f"shapes {a} and {b} do not match (and do not broadcast)") from None
    if len(shape) > 1:
        raise ValueError(f"the result would have shape {shape}; EncryptedVector is 1-d")
    return tuple(shape)


def _broadcast_list(items: list[Any], shape: tuple[int, ...], target: tuple[int, ...]) -> list[Any]:
    if shape == target:
        return items
    count = int(np.prod(target))
    if len(items) == 1:
        return items * count
    raise ValueError(f"cannot broadcast shape {shape} to {target}")
