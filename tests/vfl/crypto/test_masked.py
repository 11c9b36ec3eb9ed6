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
