"""Keys shared by the crypto tests: 1024-bit (explicitly insecure, for speed) and one 2048-bit."""

from __future__ import annotations

import warnings

import pytest

from vfl.crypto import (
    PaillierPrivateKey,
    PaillierPublicKey,
    SecurityWarning,
    generate_paillier_keypair,
)


@pytest.fixture(scope="session")
def keypair() -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        return generate_paillier_keypair(1024, insecure=True)


@pytest.fixture(scope="session")
def other_keypair() -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        return generate_paillier_keypair(1024, insecure=True)


@pytest.fixture(scope="session")
def keypair_2048() -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    return generate_paillier_keypair()
