"""Packed ciphertext stores and signed multi-exponentiation (vfl.crypto.store)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from vfl.crypto import generate_paillier_keypair
from vfl.crypto.store import (
    CiphertextStore,
    signed_multiexp,
    signed_multiexp_chunks,
)


@pytest.fixture(scope="module")
def keys():  # type: ignore[no-untyped-def]
    return generate_paillier_keypair(1024, insecure=True)


def test_a_store_gives_back_exactly_what_went_in_at_512_bytes_a_ciphertext(keys) -> None:  # type: ignore[no-untyped-def]
    public, _ = keys
    cts = public.raw_encrypt(list(range(50)))
    store = CiphertextStore(public, 50)
    store.extend(cts[:20])
    block = public.vector_from_wire(
        type(public.encrypt(np.zeros(1)))(public, cts[20:], 0, fresh=True).to_wire()
    )
    store.extend(block.ciphertexts)
    assert len(store) == 50 and store.nbytes == 50 * public.ciphertext_bytes
    rows = np.array([49, 0, 7, 7, 23])
    assert [int(c) for c in store.take(rows)] == [int(cts[i]) for i in rows]
    with pytest.raises(ValueError, match="51 ciphertexts for a store of 50"):
        store.extend(cts[:1])


def test_signed_products_decrypt_to_the_plaintext_dot_product(keys) -> None:  # type: ignore[no-untyped-def]
    public, secret = keys
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**20, size=9000)
    z = rng.integers(-(2**40), 2**40, size=(6000, 2))  # per batch row
    store = CiphertextStore.of(public, public.raw_encrypt([int(v) for v in x]))
    rows = rng.permutation(9000)[:6000]  # a batch: any rows, in any order
    n = int(public.n)
    expected = [int(x[rows].astype(object) @ z[:, k].astype(object)) for k in range(2)]
    one = signed_multiexp_chunks(store, rows, z[:6000], public.nsquare, 1)
    assert [int(secret.raw_decrypt([c])[0]) for c in one] == [e % n for e in expected]
    assert int(one[0]) == int(signed_multiexp(store.take(rows), z[:6000, 0], public.nsquare))
    # in chunks on this machine's processes or an executor: the same ciphertexts
    assert signed_multiexp_chunks(store, rows, z[:6000], public.nsquare, 2) == one
    with ThreadPoolExecutor(3) as pool:
        assert signed_multiexp_chunks(store, rows, z[:6000], public.nsquare, pool) == one


def test_a_base_without_an_inverse_is_refused(keys) -> None:  # type: ignore[no-untyped-def]
    public, _ = keys
    bad = [public.raw_encrypt([1])[0], public.n]  # n shares a factor with n**2
    with pytest.raises(ZeroDivisionError, match="no inverse"):
        signed_multiexp(bad, np.array([1, -1]), public.nsquare)
