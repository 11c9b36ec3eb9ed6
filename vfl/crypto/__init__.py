"""Paillier homomorphic encryption on whole numpy vectors, compatible with python-paillier.

>>> from vfl.crypto import generate_paillier_keypair
>>> public_key, private_key = generate_paillier_keypair()      # 2048 bits   # doctest: +SKIP
>>> enc = public_key.encrypt(residuals)                                      # doctest: +SKIP
>>> gradient = X.T @ enc           # plaintext matrix times ciphertexts     # doctest: +SKIP
>>> private_key.decrypt(gradient)                                            # doctest: +SKIP

Modules: :mod:`~vfl.crypto.keys` (keys, encryption, decryption), :mod:`~vfl.crypto.vector`
(the encrypted vector and its arithmetic), :mod:`~vfl.crypto.fixedpoint` (encoding),
:mod:`~vfl.crypto.kernels` (the big-integer kernels), :mod:`~vfl.crypto.packing` (masked
packing of many values per ciphertext).
"""

from vfl.crypto.fixedpoint import FixedPointOverflowError
from vfl.crypto.keys import (
    PaillierPrivateKey,
    PaillierPublicKey,
    SecurityWarning,
    generate_paillier_keypair,
)
from vfl.crypto.vector import EncryptedVector, concatenate, matvec

__all__ = [
    "EncryptedVector",
    "FixedPointOverflowError",
    "PaillierPrivateKey",
    "PaillierPublicKey",
    "SecurityWarning",
    "concatenate",
    "generate_paillier_keypair",
    "matvec",
]
