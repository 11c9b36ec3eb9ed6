"""Paillier keys: generation, phe interoperability, encryption and decryption of whole vectors.

The scheme is Paillier's (1999) with ``g = n + 1``, as in python-paillier (``phe``), so keys and
ciphertexts convert both ways. What differs is speed, from known techniques that keep phe's
security:

* **Obfuscation** (Damgård, Jurik and Nielsen 2010, section 4.1; as SecretFlow HEU): instead of
  ``r**n mod n**2`` with a random ``r`` (a 2048-bit exponentiation), ``h_s**a`` with
  ``h_s = (-x**2)**n mod n**2`` for a random ``x`` and a random ``a`` of ``obfuscation_bits``
  bits (default ``n_length // 2``), computed with a precomputed fixed-base table
  (:class:`~vfl.crypto.kernels.FixedBaseTable`). Its security rests on the decisional
  composite residuosity assumption, as phe's; ``h_s`` is derived from ``n`` alone, so any
  holder of a public key makes its own.
* **CRT** for the key owner: decryption modulo ``p**2`` and ``q**2`` (as phe), and encryption by
  the owner computed modulo ``p**2`` and ``q**2`` with their own tables, then combined.
* **Batches**: every call takes a whole vector, with no per-number Python objects.

.. warning::
   ``obfuscation_bits`` below ``n_length // 2`` is faster but rests on a short-exponent
   assumption (that ``h_s**a`` with a short ``a`` is indistinguishable from a random n-th
   residue); a :class:`SecurityWarning` says so. Keys below 2048 bits need ``insecure=True``
   and also warn.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import secrets
import threading
import warnings
import weakref
from collections import deque
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from vfl.crypto import fixedpoint, parallel
from vfl.crypto.kernels import FixedBaseTable, crt_combine
from vfl.crypto.packing import PackingLayout, unpack_slots
from vfl.crypto.vector import EncryptedVector

__all__ = [
    "MIN_SECURE_BITS",
    "PaillierPrivateKey",
    "PaillierPublicKey",
    "SecurityWarning",
    "generate_paillier_keypair",
]

MIN_SECURE_BITS = 2048
"""Smallest modulus, in bits, accepted without ``insecure=True``."""
FULL_EXPONENT_BITS = 64
"""Bits by which a full-length obfuscator's exponent exceeds the modulus (statistical
distance from uniform on the base's group below ``2**-64``)."""

_PARALLEL_MIN = 64  # fewer values than this stay in the calling process
PROGRESS_MIN_VALUES = 5000  # encryptions from which a progress bar is shown (a few seconds)


class SecurityWarning(UserWarning):
    """A cryptographic parameter below the library's secure default was chosen explicitly."""


def _check_key_size(n_length: int, insecure: bool) -> None:
    if n_length < MIN_SECURE_BITS:
        if not insecure:
            raise ValueError(
                f"a {n_length}-bit Paillier key is too short: use at least {MIN_SECURE_BITS} bits, "
                "or pass insecure=True for tests and experiments"
            )
        warnings.warn(
            f"{n_length}-bit Paillier key: below {MIN_SECURE_BITS} bits it offers no real "
            "protection; use it only for tests",
            SecurityWarning,
            stacklevel=3,
        )


_ALL_OBFUSCATORS: weakref.WeakSet[_Obfuscator] = weakref.WeakSet()


def _forget_pools_in_child() -> None:
    """A forked child must never reuse its parent's pooled obfuscators (equal obfuscators in
    two ciphertexts reveal the difference of their plaintexts)."""
    for obfuscator in list(_ALL_OBFUSCATORS):
        obfuscator._pool = deque()
        obfuscator._pool_target = 0
        obfuscator._filler = None
        obfuscator._pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)


def _warn_short_exponent(bits: int, default_bits: int, *, stacklevel: int) -> None:
    warnings.warn(
        f"obfuscation_bits={bits} is below n_length/2={default_bits}: encryption is faster but "
        "its security rests on a short-exponent assumption",
        SecurityWarning,
        stacklevel=stacklevel,
    )


class _Obfuscator:
    """Draws ``h_s**a mod M`` for random ``a`` of ``bits`` bits, optionally from a refilled pool."""

    def __init__(self, h_s: Any, modulus: Any, bits: int) -> None:
        self.h_s, self.modulus, self.bits = h_s, modulus, bits
        self._table: FixedBaseTable | None = None
        self._lock = threading.Lock()
        self._pool_lock = threading.Lock()
        self._pool: deque[Any] = deque()
        self._pool_target = 0
        self._filler: threading.Thread | None = None
        _ALL_OBFUSCATORS.add(self)

    @property
    def table(self) -> FixedBaseTable:
        with self._lock:
            if self._table is None:
                self._table = FixedBaseTable(self.h_s, self.modulus, self.bits)
            return self._table

    def draw(self, count: int, workers: parallel.Workers = 1) -> list[Any]:
        out: list[Any] = []
        while self._pool and len(out) < count:
            try:
                out.append(self._pool.popleft())
            except IndexError:  # emptied by another thread
                break
        missing = count - len(out)
        slots = parallel.check_workers(workers)
        if missing >= _PARALLEL_MIN and slots > 1:
            chunks = parallel.split(range(missing), slots)
            args = [(self.h_s, self.modulus, self.bits, len(c)) for c in chunks]
            for part in parallel.map_processes(parallel.random_powers_worker, args, workers):
                out += part
        elif missing > 0:
            out += self.table.random_powers(missing, show_progress=missing >= PROGRESS_MIN_VALUES)
        return out

    def start_pool(self, size: int) -> None:
        with self._pool_lock:
            self._pool_target = int(size)
            if self._filler is None:
                self._filler = threading.Thread(
                    target=self._fill, name="vflink-obfuscators", daemon=True
                )
                self._filler.start()

    def stop_pool(self) -> None:
        with self._pool_lock:
            self._pool_target = 0
            self._pool.clear()

    def pool_size(self) -> int:
        return len(self._pool)

    def _fill(self) -> None:
        table = self.table
        while True:
            batch = table.random_powers(16)
            with self._pool_lock:
                room = self._pool_target - len(self._pool)
                if room <= 0:
                    self._filler = None  # decided under the lock: start_pool makes a new one
                    return
                self._pool.extend(batch[:room])


class PaillierPublicKey:
    """A Paillier public key (``g = n + 1``) that encrypts whole numpy vectors.

    Parameters
    ----------
    n : int
        The modulus.
    obfuscation_bits : int, optional
        Bit length of the random exponent ``a`` of the obfuscator ``h_s**a`` (default
        ``n_length // 2``). Shorter is faster and warns (see the module's warning).
    insecure : bool
        Accept a modulus shorter than 2048 bits (warns).
    """

    def __init__(
        self, n: int, *, obfuscation_bits: int | None = None, insecure: bool = False
    ) -> None:
        n = int(n)
        if n < 3 or n % 2 == 0:
            raise ValueError("a Paillier modulus must be an odd integer > 2")
        _check_key_size(n.bit_length(), insecure)
        self.n = mpz(n)
        self.nsquare = self.n * self.n
        self.max_int = self.n // 3 - 1  # as python-paillier
        self.insecure = insecure
        default_bits = (n.bit_length() + 1) // 2
        bits = default_bits if obfuscation_bits is None else int(obfuscation_bits)
        if not 128 <= bits <= n.bit_length():
            raise ValueError(
                f"obfuscation_bits must be between 128 and {n.bit_length()}, got {bits}"
            )
        if bits < default_bits:
            _warn_short_exponent(bits, default_bits, stacklevel=3)
        self.obfuscation_bits = bits
        self.fingerprint = hashlib.sha256(
            b"vflink/paillier/public-key/v1:" + int(n).to_bytes((n.bit_length() + 7) // 8, "big")
        ).digest()
        self.ciphertext_bytes = (int(self.nsquare).bit_length() + 7) // 8
        x = mpz(secrets.randbelow(n - 2) + 2)
        h = (-x * x) % self.n
        self.h_s = gmpy2.powmod(h, self.n, self.nsquare)
        self._obfuscator = _Obfuscator(self.h_s, self.nsquare, bits)
        self._full_table: FixedBaseTable | None = None
        self._full_lock = threading.Lock()

    @property
    def n_length(self) -> int:
        """Bit length of the modulus."""
        return int(self.n.bit_length())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaillierPublicKey) and self.n == other.n

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return (
            f"PaillierPublicKey(n_length={self.n_length}, fingerprint={self.fingerprint[:6].hex()})"
        )

    # -- encryption ------------------------------------------------------------------------

    def encrypt(
        self, values: Any, *, precision: float | None = None, workers: parallel.Workers = None
    ) -> EncryptedVector:
        """Encrypt a numpy array (or anything ``np.asarray`` takes) into an EncryptedVector.

        Parameters
        ----------
        values : array_like of real numbers
            1-d (or 0-d) numeric values, all finite.
        precision : float, optional
            Absolute precision of float values (default ``2**-32``); integer arrays are exact
            when no precision is given.
        workers : int, optional
            Processes to share the work (default :func:`vfl.crypto.parallel.default_workers`).

        Raises
        ------
        ValueError / TypeError
            Non-finite or non-numeric values, with the index of the first offender.
        OverflowError
            A value does not fit the plaintext space.
        """
        arr, exponent = self._prepare(values, precision)
        plain = fixedpoint.encode(arr, exponent, int(self.n), int(self.max_int), "value")
        return self._wrap(self.raw_encrypt(plain, workers=workers), exponent, arr.shape)

    def _prepare(self, values: Any, precision: float | None) -> tuple[np.ndarray[Any, Any], int]:
        arr = fixedpoint.as_real_array(values, "values to encrypt")
        if arr.ndim > 1:
            raise ValueError(f"encrypt takes a 1-d vector, got shape {arr.shape}; ravel it first")
        if arr.dtype.kind in "iu" and precision is None:
            return arr, 0
        prec = fixedpoint.DEFAULT_PRECISION if precision is None else float(precision)
        if not 0 < prec < 1e300:
            raise ValueError(f"precision must be a positive number, got {precision!r}")
        return arr.astype(np.float64), int(np.floor(np.log2(prec)))

    def _wrap(
        self, ciphertexts: list[Any], exponent: int, shape: tuple[int, ...]
    ) -> EncryptedVector:
        return EncryptedVector(self, ciphertexts, exponent, shape=shape, fresh=True)

    def raw_encrypt(self, plaintexts: list[int], *, workers: parallel.Workers = None) -> list[Any]:
        """Ciphertexts of integers in ``[0, n)``: ``(1 + m n) * h_s**a mod n**2``."""
        n, nsquare = self.n, self.nsquare
        parallel.check_workers(workers)  # a bad argument fails here, before any work
        obfuscators = self._obfuscator.draw(len(plaintexts), workers)
        return [(1 + n * m) * r % nsquare for m, r in zip(plaintexts, obfuscators, strict=True)]

    def obfuscators(self, count: int, *, workers: parallel.Workers = None) -> list[Any]:
        """``count`` fresh random obfuscators ``h_s**a mod n**2`` (from the pool when filled;
        ``workers`` processes share the rest)."""
        parallel.check_workers(workers)
        return self._obfuscator.draw(count, workers)

    def full_obfuscators(self, count: int, *, workers: parallel.Workers = None) -> list[Any]:
        """``count`` values ``h_s**a`` with ``a`` uniform on ``FULL_EXPONENT_BITS`` more bits
        than ``n`` has: statistically uniform on the group ``h_s`` generates, whatever its
        order (a fixed-base table of 7-bit windows, about 20 MiB for a 2048-bit key, built on
        first use). See :func:`vfl.crypto.rerandomize.rerandomize` for what this hides.

        With 2 or more ``workers`` (and at least 32 values), worker processes draw them, each
        caching its own table of the base."""
        bits = self.n_length + FULL_EXPONENT_BITS
        processes = parallel.check_workers(workers)
        if (processes > 1 or parallel.is_executor(workers)) and count >= 32:
            sizes = [len(part) for part in parallel.split(range(count), processes)]
            tasks = [(int(self.h_s), int(self.nsquare), bits, size) for size in sizes]
            done = parallel.map_processes(parallel.random_powers_worker, tasks, workers)
            return [r for part in done for r in part]
        with self._full_lock:
            if self._full_table is None:
                self._full_table = FixedBaseTable(self.h_s, self.nsquare, bits, window=7)
        return self._full_table.random_powers(count)

    def base_bytes(self) -> bytes:
        """This holder's ``h_s``, for the key's owner to encrypt with
        (:meth:`PaillierPrivateKey.for_base`)."""
        return int(self.h_s).to_bytes(self.ciphertext_bytes, "big")

    def start_obfuscator_pool(self, size: int = 1024) -> None:
        """Precompute up to ``size`` obfuscators in a background thread.

        The thread competes with the caller for the interpreter lock, so the pool pays off
        when the party is otherwise idle (e.g. waiting for a peer's message); encryptions then
        cost one multiplication each while the pool lasts.
        """
        self._obfuscator.start_pool(size)

    def stop_obfuscator_pool(self) -> None:
        """Stop refilling and discard the pooled obfuscators."""
        self._obfuscator.stop_pool()

    def obfuscator_pool_size(self) -> int:
        """How many pooled obfuscators are ready."""
        return self._obfuscator.pool_size()

    # -- interoperability ---------------------------------------------------------------------

    def to_phe(self) -> Any:
        """The equivalent ``phe.PaillierPublicKey``."""
        from phe import paillier

        return paillier.PaillierPublicKey(int(self.n))

    @classmethod
    def from_phe(cls, key: Any, *, insecure: bool = False) -> PaillierPublicKey:
        """Wrap a ``phe.PaillierPublicKey`` (its ``g`` must be ``n + 1``, as phe makes them)."""
        if int(key.g) != int(key.n) + 1:
            raise ValueError("only Paillier keys with g = n + 1 are supported (as phe makes them)")
        return cls(int(key.n), insecure=insecure)

    def vector_from_wire(self, block: Any) -> EncryptedVector:
        """An EncryptedVector from a received :class:`~vfl.federation.CiphertextBlock`.

        Raises
        ------
        ValueError
            The block claims another public key, or holds values that are not ciphertexts.
        """
        return EncryptedVector.from_wire(self, block)


class PaillierPrivateKey:
    """The Paillier private key ``(p, q)``: decrypts vectors, and encrypts faster by CRT.

    Parameters
    ----------
    public_key : PaillierPublicKey
        The matching public key.
    p, q : int
        The prime factors of ``public_key.n``.
    """

    def __init__(self, public_key: PaillierPublicKey, p: int, q: int) -> None:
        p, q = mpz(min(p, q)), mpz(max(p, q))
        if p * q != public_key.n or p == q:
            raise ValueError("p and q are not the two distinct factors of the public key's n")
        self.public_key = public_key
        self.p, self.q = p, q
        self.psquare, self.qsquare = p * p, q * q
        self.hp = self._h(p, self.psquare)
        self.hq = self._h(q, self.qsquare)
        self.q_inv_mod_p = gmpy2.invert(q, p)
        self.qsquare_inv_mod_psquare = gmpy2.invert(self.qsquare, self.psquare)
        bits = public_key.obfuscation_bits
        self._obf_p = _Obfuscator(public_key.h_s % self.psquare, self.psquare, bits)
        self._obf_q = _Obfuscator(public_key.h_s % self.qsquare, self.qsquare, bits)

    def for_base(self, base: bytes) -> PaillierPrivateKey:
        """This key, encrypting with obfuscators ``h_s**a`` of another holder's ``h_s``
        (:meth:`PaillierPublicKey.base_bytes`), by CRT. Every ciphertext it makes then lies in
        the group ``h_s`` generates, which that holder's full-length re-randomisation
        (:meth:`PaillierPublicKey.full_obfuscators`) covers uniformly.

        Raises
        ------
        ValueError
            ``base`` is not an n-th residue modulo ``n**2`` (checked with the factors).
        """
        h_s = mpz(int.from_bytes(base, "big"))
        nsq = self.public_key.nsquare
        carmichael = (self.p - 1) * (self.q - 1) // math.gcd(int(self.p - 1), int(self.q - 1))
        if not 1 < h_s < nsq or gmpy2.powmod(h_s, carmichael, nsq) != 1:
            raise ValueError("the base is not an n-th residue modulo n**2 of this key")
        clone = copy.copy(self)
        bits = self.public_key.obfuscation_bits
        clone._obf_p = _Obfuscator(h_s % self.psquare, self.psquare, bits)
        clone._obf_q = _Obfuscator(h_s % self.qsquare, self.qsquare, bits)
        return clone

    def _h(self, prime: Any, prime_square: Any) -> Any:
        g = self.public_key.n + 1
        lx = (gmpy2.powmod(g, prime - 1, prime_square) - 1) // prime
        return gmpy2.invert(lx, prime)

    def __repr__(self) -> str:
        return f"PaillierPrivateKey(public_key={self.public_key!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaillierPrivateKey) and (self.p, self.q) == (other.p, other.q)

    def __hash__(self) -> int:
        return hash((self.p, self.q))

    # -- decryption -----------------------------------------------------------------------------

    def raw_decrypt(self, ciphertexts: list[Any], *, workers: parallel.Workers = None) -> list[Any]:
        """Plaintext integers in ``[0, n)`` of raw ciphertexts (CRT, batched in C).

        With 2 or more workers the ``p`` and ``q`` halves run in two threads (gmpy2 releases
        the interpreter lock in ``powmod_base_list``).
        """
        p, q, psq, qsq = self.p, self.q, self.psquare, self.qsquare
        n_workers = 2 if parallel.local_workers(workers) > 1 and len(ciphertexts) > 1 else 1
        xp, xq = parallel.map_threads(
            gmpy2.powmod_base_list,
            [
                ([c % psq for c in ciphertexts], p - 1, psq),
                ([c % qsq for c in ciphertexts], q - 1, qsq),
            ],
            n_workers,
        )
        hp, hq, qinv = self.hp, self.hq, self.q_inv_mod_p
        return [
            crt_combine((a - 1) // p * hp % p, (b - 1) // q * hq % q, p, q, qinv)
            for a, b in zip(xp, xq, strict=True)
        ]

    def decrypt(
        self, vector: EncryptedVector, *, workers: parallel.Workers = None
    ) -> np.ndarray[Any, Any]:
        """Decrypt an EncryptedVector to a float64 array of its shape.

        Raises
        ------
        ValueError
            The vector was encrypted under another public key.
        OverflowError
            A value wrapped around the plaintext space.
        """
        self._check_vector(vector)
        plain = self.raw_decrypt(vector.ciphertexts, workers=workers)
        pk = self.public_key
        out = fixedpoint.decode(plain, vector.exponent, int(pk.n), int(pk.max_int))
        return out.reshape(vector.shape)

    def decrypt_integers(self, vector: EncryptedVector) -> list[int]:
        """The signed fixed-point integers of a vector, exactly (scaled by ``vector.exponent``)."""
        self._check_vector(vector)
        pk = self.public_key
        return fixedpoint.to_signed(
            self.raw_decrypt(vector.ciphertexts), int(pk.n), int(pk.max_int)
        )

    def decrypt_packed(
        self, vector: EncryptedVector, layout: Any, *, workers: parallel.Workers = None
    ) -> list[int]:
        """Decrypt packed ciphertexts (see :mod:`vfl.crypto.packing`) into their masked slots.

        ``layout`` is a :class:`~vfl.crypto.packing.PackingLayout` or its dict from the wire.
        The key holder learns only ``value + offset + mask`` per slot.
        """
        self._check_vector(vector)
        if not isinstance(layout, PackingLayout):
            layout = PackingLayout.from_dict(layout, n_bits=self.public_key.n_length)
        plain = self.raw_decrypt(vector.ciphertexts, workers=workers)
        limit = 1 << (layout.slots * layout.slot_bits)
        if any(m >= limit for m in plain):
            raise ValueError(
                "a packed plaintext is larger than its layout allows: not packed this way"
            )
        slots = unpack_slots(plain, layout)
        # a value |v| < 2**(value_bits - 1) plus its offset and mask stays below this
        width = (1 << (layout.value_bits + layout.kappa)) + (1 << layout.value_bits)
        if any(v >= width for v in slots):
            raise ValueError(
                "a slot is wider than its value and mask can be: these ciphertexts were not "
                "computed as the step says"
            )
        return slots

    def _check_vector(self, vector: EncryptedVector) -> None:
        if vector.public_key.fingerprint != self.public_key.fingerprint:
            raise ValueError(
                "this vector was encrypted under another public key "
                f"({vector.public_key.fingerprint[:6].hex()}, this key is "
                f"{self.public_key.fingerprint[:6].hex()})"
            )

    # -- encryption by the owner (CRT) ------------------------------------------------------------

    def encrypt(
        self, values: Any, *, precision: float | None = None, workers: parallel.Workers = None
    ) -> EncryptedVector:
        """Encrypt like :meth:`PaillierPublicKey.encrypt`, computed modulo ``p**2`` and ``q**2``."""
        pk = self.public_key
        arr, exponent = pk._prepare(values, precision)
        plain = fixedpoint.encode(arr, exponent, int(pk.n), int(pk.max_int), "value")
        return pk._wrap(self.raw_encrypt(plain, workers=workers), exponent, arr.shape)

    def raw_encrypt(self, plaintexts: list[int], *, workers: parallel.Workers = None) -> list[Any]:
        """Ciphertexts of integers in ``[0, n)``, computed by CRT.

        With 2 or more workers the ``p**2`` and ``q**2`` halves run in two processes.
        """
        n, psq, qsq = self.public_key.n, self.psquare, self.qsquare
        inv = self.qsquare_inv_mod_psquare
        count = len(plaintexts)
        if parallel.local_workers(workers) > 1 and count >= _PARALLEL_MIN:
            rp, rq = parallel.map_processes(
                parallel.random_powers_worker,
                [(o.h_s, o.modulus, o.bits, count) for o in (self._obf_p, self._obf_q)],
                2,
            )
        else:
            rp, rq = self._obf_p.draw(count), self._obf_q.draw(count)
        out = []
        for m, a, b in zip(plaintexts, rp, rq, strict=True):
            g_m = 1 + n * m
            out.append(crt_combine(g_m * a % psq, g_m * b % qsq, psq, qsq, inv))
        return out

    # -- interoperability -------------------------------------------------------------------------

    def to_phe(self) -> Any:
        """The equivalent ``phe.PaillierPrivateKey``."""
        from phe import paillier

        return paillier.PaillierPrivateKey(self.public_key.to_phe(), int(self.p), int(self.q))

    @classmethod
    def from_phe(cls, key: Any, *, insecure: bool = False) -> PaillierPrivateKey:
        """Wrap a ``phe.PaillierPrivateKey``."""
        public = PaillierPublicKey.from_phe(key.public_key, insecure=insecure)
        return cls(public, int(key.p), int(key.q))


def _random_prime(bits: int) -> Any:
    """A random prime of exactly ``bits`` bits with its two top bits set (OS randomness)."""
    while True:
        candidate = mpz(secrets.randbits(bits)) | (mpz(3) << (bits - 2)) | 1
        prime = gmpy2.next_prime(candidate)
        if prime.bit_length() == bits:
            return prime


def generate_paillier_keypair(
    n_length: int = 2048, *, obfuscation_bits: int | None = None, insecure: bool = False
) -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    """Generate a Paillier key pair from OS randomness (never seedable).

    Parameters
    ----------
    n_length : int
        Bits of the modulus ``n`` (default 2048; shorter only with ``insecure=True``).
    obfuscation_bits : int, optional
        See :class:`PaillierPublicKey`.
    insecure : bool
        Allow ``n_length < 2048`` (warns).

    Returns
    -------
    (PaillierPublicKey, PaillierPrivateKey)
    """
    _check_key_size(int(n_length), insecure)
    if n_length % 2 or n_length < 64:
        raise ValueError(f"n_length must be an even number of bits >= 64, got {n_length}")
    half = n_length // 2
    while True:
        p, q = _random_prime(half), _random_prime(half)
        if p != q and (p * q).bit_length() == n_length:
            break
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # warned here, at the caller's line
        public = PaillierPublicKey(int(p * q), obfuscation_bits=obfuscation_bits, insecure=insecure)
    if public.obfuscation_bits < half:
        _warn_short_exponent(public.obfuscation_bits, half, stacklevel=3)
    return public, PaillierPrivateKey(public, int(p), int(q))
