"""Paillier homomorphic encryption on whole numpy vectors, compatible with python-paillier.

>>> from vfl.crypto import generate_paillier_keypair
>>> public_key, private_key = generate_paillier_keypair()      # 2048 bits   # doctest: +SKIP
>>> enc = public_key.encrypt(residuals)                                      # doctest: +SKIP
>>> gradient = X.T @ enc           # plaintext matrix times ciphertexts     # doctest: +SKIP
>>> private_key.decrypt(gradient)                                            # doctest: +SKIP

Modules: :mod:`~vfl.crypto.keys` (keys, encryption, decryption), :mod:`~vfl.crypto.vector`
(the encrypted vector and its arithmetic), :mod:`~vfl.crypto.fixedpoint` (encoding),
:mod:`~vfl.crypto.kernels` (the big-integer kernels), :mod:`~vfl.crypto.packing` (slot
layouts and row packing: pure integers, the leaf), :mod:`~vfl.crypto.masked` (the one masked
decryption every protocol uses), :mod:`~vfl.crypto.rerandomize` (fresh randomness before a
ciphertext leaves a party), :mod:`~vfl.crypto.policy` (key sizes, the public-key message).
Imports go one way: keys build vectors, vectors only hold a key.
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
