"""The one masked decryption on packed rows: masks, both re-randomisations, the holder's
checks, and the slots back as rows (:mod:`vfl.crypto.masked`, :mod:`vfl.crypto.slots`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vfl.crypto import EncryptedVector, PaillierPrivateKey, PaillierPublicKey, slots
from vfl.crypto.masked import mask_slots, request_decryption, request_slots, serve_decryption
from vfl.crypto.packing import MIN_KAPPA, RowPacking
from vfl.federation import LocalFederation, PartyFailedError
from vfl.federation.base import Federation
from vfl.federation.messages import Namespace

Keys = tuple[PaillierPublicKey, PaillierPrivateKey]
pytestmark = pytest.mark.filterwarnings("ignore::vfl.crypto.keys.SecurityWarning")

TAGS = Namespace("test-masked")


def _rows(seed: int, rows: int, columns: int, bits: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-(2**bits) + 1, 2**bits, size=(rows, columns)).astype(object)


@given(st.integers(1, 4), st.integers(1, 30), st.booleans(), st.integers(0, 2**16))
@settings(max_examples=12, deadline=None)
def test_masked_rows_decrypt_to_value_plus_mask(
    keypair: Keys, rows: int, columns: int, owner: bool, seed: int
) -> None:
    public, private = keypair
    packing = slots.packing(30, columns, public, masked=True)
    values = _rows(seed, rows, columns, 30)
    cts = EncryptedVector(public, slots.encrypt_rows(public, values, packing), 0)
    layout = packing.masked_layout(rows)
    assert layout.count == rows * packing.groups * packing.per_ct
    assert layout.n_ciphertexts == rows * packing.groups
    masked, masks = mask_slots(cts, layout, for_key_owner=owner)
    assert masked.fresh and masked.size == layout.n_ciphertexts
    got = private.decrypt_packed(masked, layout)
    # the holder's view: every slot is value + mask, the mask kappa bits beyond the value
    sums = slots.from_slots(got, rows, packing)
    mask_rows = slots.from_slots(masks.masks, rows, packing)
    np.testing.assert_array_equal(sums - mask_rows, values)
    assert all(m.bit_length() > layout.value_bits + MIN_KAPPA - 30 for m in masks.masks[:1])
    np.testing.assert_array_equal(
        slots.from_slots(masks.unmask_integers(got), rows, packing, value_bits=30), values
    )


def test_rows_from_slots_refuse_overflow_and_padding() -> None:
    packing = RowPacking(columns=3, slot_bits=80, per_ct=2)  # two groups, one padding slot
    assert packing.masked_layout(2).count == 8
    good = [1, -2, 3, 0, 4, 5, -6, 0]
    np.testing.assert_array_equal(
        slots.from_slots(good, 2, packing, value_bits=4), [[1, -2, 3], [4, 5, -6]]
    )
    with pytest.raises(OverflowError, match="the share overflowed its fixed-point slots"):
        slots.from_slots([1, -2, 3, 1, 4, 5, -6, 0], 2, packing, value_bits=4, what="the share")
    with pytest.raises(OverflowError, match="overflowed"):
        slots.from_slots([16, -2, 3, 0, 4, 5, -6, 0], 2, packing, value_bits=4)
    with pytest.raises(ValueError, match="expected 8 slots of 2 rows, got 7"):
        slots.from_slots(good[:7], 2, packing)


def test_request_and_serve_over_a_federation(keypair: Keys) -> None:
    public, private = keypair
    packing = slots.packing(20, 5, public, masked=True)
    values = _rows(3, 2, 5, 20)
    layout = packing.masked_layout(2)

    def requester(fed: Federation) -> tuple[list[int], list[int]]:
        cts = EncryptedVector(public, slots.encrypt_rows(public, values, packing), 0)
        masked, masks = mask_slots(cts, layout)
        exact = request_decryption(fed, "holder", TAGS.child("a"), masked, masks)
        # a share forwarded as it is: the slots come back with their masks
        again, masks2 = mask_slots(cts, layout)
        raw = request_slots(fed, "holder", TAGS.child("b"), again, layout)
        return exact, [s - m for s, m in zip(raw, masks2.masks, strict=True)]

    def holder(fed: Federation) -> None:
        for tag in ("a", "b"):
            serve_decryption(
                fed,
                "requester",
                TAGS.child(tag),
                private,
                expected=layout.n_ciphertexts,
                layout=layout,
            )

    out = LocalFederation().run({"requester": requester, "holder": holder})["requester"]
    for got in out:
        np.testing.assert_array_equal(slots.from_slots(got, 2, packing, value_bits=20), values)


def test_the_holder_refuses_a_request_of_another_layout(keypair: Keys) -> None:
    public, private = keypair
    packing = slots.packing(20, 5, public, masked=True)
    values = _rows(4, 2, 5, 20)

    def requester(fed: Federation) -> None:
        cts = EncryptedVector(public, slots.encrypt_rows(public, values, packing), 0)
        masked, masks = mask_slots(cts, packing.masked_layout(2))
        request_decryption(fed, "holder", TAGS, masked, masks)

    def holder(fed: Federation) -> None:
        serve_decryption(fed, "requester", TAGS, private, layout=packing.masked_layout(1))

    with pytest.raises(PartyFailedError, match=r"party 'requester' sent .*'layout'"):
        LocalFederation(timeout=20).run({"requester": requester, "holder": holder})


def test_the_owner_cannot_check_a_guess_of_how_a_masked_product_was_computed(
    keypair: Keys,
) -> None:
    """The attack the base power answers (``mask_slots(for_key_owner=True)``, the path the
    secret-shared linear models take between two parties). The key owner encrypted the inputs
    ``x_j`` itself, so it knows each one's randomness ``rho_j = c_j (1+n)^(-x_j)``; the holder
    raises them to its secret ``e_j`` and masks the sum. From the decrypted result the owner
    recovers the result's randomness and tests a guess of ``e``: it matches ``prod rho_j^e_j``
    for the true ``e``. With the masks added as plaintexts alone, the true guess is confirmed
    every time and a wrong one never; under the base power neither ever is (20 draws each)."""
    import gmpy2
    from gmpy2 import mpz

    public, private = keypair
    holder = PaillierPublicKey(int(public.n), insecure=True)  # the holder's own key object
    owner = private.for_base(holder.base_bytes())  # the owner encrypts in the holder's base
    n, nsq = mpz(public.n), mpz(public.nsquare)
    layout = slots.packing(60, 1, public, masked=True).masked_layout(1)
    rng = np.random.default_rng(7)

    def randomness(c: mpz, plain: int) -> mpz:  # c (1+n)^(-m) mod n^2: the owner's view
        return c * (1 - mpz(plain) * n) % nsq

    def check(c: mpz, rhos: list[mpz], guess: list[int]) -> bool:
        plain = int(private.raw_decrypt([c])[0])
        expected = mpz(1)
        for rho, e in zip(rhos, guess, strict=True):
            expected = expected * gmpy2.powmod(rho, e, nsq) % nsq
        return randomness(c, plain) == expected

    plain_hits, plain_wrong, base_hits, base_wrong = 0, 0, 0, 0
    for _ in range(20):
        xs = [int(v) for v in rng.integers(1, 2**20, 3)]
        cts = [mpz(c) for c in owner.raw_encrypt(xs)]
        rhos = [randomness(c, x) for c, x in zip(cts, xs, strict=True)]
        secret = [int(v) for v in rng.integers(1, 2**16, 3)]
        wrong = [e + 1 for e in secret]
        product = mpz(1)
        for c, e in zip(cts, secret, strict=True):
            product = product * gmpy2.powmod(c, e, nsq) % nsq
        mask = int(rng.integers(1, 2**40))
        masks_only = product * (1 + n * mask) % nsq  # no re-randomisation at all
        plain_hits += check(masks_only, rhos, secret)
        plain_wrong += check(masks_only, rhos, wrong)
        masked, _ = mask_slots(EncryptedVector(holder, [product], 0), layout, for_key_owner=True)
        base_hits += check(masked.ciphertexts[0], rhos, secret)
        base_wrong += check(masked.ciphertexts[0], rhos, wrong)
    assert (plain_hits, plain_wrong) == (20, 0)  # the attack works on an unhidden product
    assert (base_hits, base_wrong) == (0, 0)  # and tells the owner nothing under the power
