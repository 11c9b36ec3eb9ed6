"""Re-randomising ciphertexts before they leave a party: the one helper every protocol uses.

A ciphertext computed homomorphically carries randomness derived from its inputs; whoever
knows those inputs' randomness (the party that encrypted them) could test guesses of how it was
made. Two strengths:

* **DJN** (:meth:`EncryptedVector.obfuscate`, the default of ``to_wire()``): multiply by a
  fresh ``h**a``; enough against everyone but the owner of the private key;
* **uniform** (``for_key_owner=True``): multiply by ``r**n`` for uniform ``r`` in ``Z_n*``. The
  owner of the private key knows the factorisation and could read residue characters of a DJN
  obfuscator ``h**a`` (``h`` is fixed), so only full randomness hides a product's randomness
  from it. It costs a full-length exponentiation per ciphertext;
* **in the base's group** (``for_key_owner="base"``): multiply by ``h_s**a`` with ``a``
  uniform on 64 bits more than ``n`` (:meth:`PaillierPublicKey.full_obfuscators`), about a
  tenth of the cost. This hides the product's randomness from the key's owner on one
  condition: every ciphertext it was computed from has its randomness in the group of
  *this* holder's ``h_s``. That holds when the owner encrypted its inputs with this holder's
  base (:meth:`PaillierPrivateKey.for_base`) and everything else came from this holder's
  key object. Then the result's randomness is ``h_s**(known + a)``, statistically uniform on
  that group whatever the exponents were. The secret-shared protocol
  (:mod:`vfl.linear.shared`) is built this way.
"""

from __future__ import annotations

import math
import secrets
from typing import Any, Literal

import gmpy2

from vfl.crypto.vector import EncryptedVector

__all__ = ["rerandomize", "uniform_obfuscators"]


def uniform_obfuscators(n: Any, count: int) -> list[Any]:
    """``count`` values ``r**n mod n**2`` for uniform ``r`` in ``Z_n*`` (OS randomness)."""
    n_int = int(n)
    nsq = gmpy2.mpz(n_int) ** 2
    out = []
    for _ in range(count):
        while True:
            r = secrets.randbelow(n_int - 2) + 2
            if math.gcd(r, n_int) == 1:
                break
        out.append(gmpy2.powmod(r, n_int, nsq))
    return out


def rerandomize(
    vector: EncryptedVector,
    *,
    for_key_owner: bool | Literal["base"] = False,
    workers: Any = None,
) -> EncryptedVector:
    """The same plaintexts under fresh randomness (see the module docstring for the three
    strengths); the result is marked fresh, so ``to_wire()`` sends it as it is."""
    if not for_key_owner:
        return vector.obfuscate(workers=workers)
    key = vector.public_key
    nsq = key.nsquare
    if for_key_owner == "base":
        rs = key.full_obfuscators(vector.size, workers=workers)
    else:
        rs = uniform_obfuscators(key.n, vector.size)
    out = [c * r % nsq for c, r in zip(vector.ciphertexts, rs, strict=True)]
    return EncryptedVector(key, out, vector.exponent, shape=vector.shape, fresh=True)
