"""Masked packing: round trips, the number of decryptions, hiding, bounds and layouts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vfl.crypto import FixedPointOverflowError, PaillierPrivateKey, PaillierPublicKey
from vfl.crypto.masked import pack_masked
from vfl.crypto.packing import MIN_KAPPA, PackingLayout, unpack_slots

Keys = tuple[PaillierPublicKey, PaillierPrivateKey]
pytestmark = pytest.mark.filterwarnings("ignore::vfl.crypto.keys.SecurityWarning")


@given(
    st.integers(1, 40).flatmap(
        lambda n: hnp.arrays(np.float64, n, elements=st.floats(-1000, 1000, allow_nan=False))
    )
)
@settings(max_examples=20, deadline=None)
def test_pack_decrypt_unmask_round_trip(keypair: Keys, x: np.ndarray) -> None:
    public, private = keypair
    vec = public.encrypt(x, precision=2**-20)
    packed, masks = pack_masked(vec, bound=1000.0)
    layout = masks.layout
    assert packed.size == layout.n_ciphertexts == -(-len(x) // layout.slots)
    slots = private.decrypt_packed(packed, layout.to_dict())
    np.testing.assert_allclose(masks.unmask(slots), x, rtol=0, atol=2**-20)


def test_2048_bit_keys_pack_twenty_or_more_values(keypair_2048: Keys) -> None:
    public, private = keypair_2048
    grads = np.random.default_rng(0).standard_normal(200) * 10
    vec = public.encrypt(grads, precision=2**-30)
    packed, masks = pack_masked(vec, bound=100.0)  # 38-bit values + 40-bit masks
    assert masks.layout.slots >= 20
    assert masks.layout.n_ciphertexts * 20 <= 200  # at least 20x fewer decryptions
    np.testing.assert_allclose(
        masks.unmask(private.decrypt_packed(packed, masks.layout)), grads, atol=2**-30
    )


def test_the_key_holder_sees_only_masked_values(keypair: Keys) -> None:
    public, private = keypair
    x = np.array([0.0, 0.0, 1.0, -1.0])
    vec = public.encrypt(x, precision=2**-10)
    _, masks_a = pack_masked(vec, bound=2.0)
    packed, masks = pack_masked(vec, bound=2.0)
    slots = private.decrypt_packed(packed, masks.layout)
    plain = [int(v) for v in private.decrypt_integers(vec)]
    offset = 1 << (masks.layout.value_bits - 1)
    for slot, value in zip(slots, plain, strict=True):
        # what the key holder sees spans value_bits + kappa bits, not the value's few bits (a
        # uniform mask is 30 bits shorter with probability 2**-30: no flaky failures)
        assert slot - value - offset >= 0
        assert slot.bit_length() > masks.layout.value_bits + MIN_KAPPA - 30
    assert masks_a.masks != masks.masks  # fresh masks from the OS each time
    assert slots[0] != slots[1]  # equal values look different


def test_a_value_beyond_the_bound_is_detected(keypair: Keys) -> None:
    public, private = keypair
    vec = public.encrypt(np.array([1.0, 5000.0, 2.0]), precision=2**-10)
    packed, masks = pack_masked(vec, bound=10.0)
    with pytest.raises(FixedPointOverflowError, match="exceeded the bound"):
        masks.unmask(private.decrypt_packed(packed, masks.layout))


def test_layouts_and_parameters_are_checked(keypair: Keys) -> None:
    public, private = keypair
    vec = public.encrypt(np.ones(5))
    with pytest.raises(ValueError, match="kappa must be at least 40"):
        pack_masked(vec, bound=1.0, kappa=20)
    with pytest.raises(ValueError, match="bound must be a positive finite number"):
        pack_masked(vec, bound=float("inf"))
    _, masks = pack_masked(vec, bound=1.0)
    with pytest.raises(ValueError, match="does not fit a 1024-bit key"):
        PackingLayout.from_dict({**masks.layout.to_dict(), "slots": 100}, n_bits=1024)
    with pytest.raises(ValueError, match="malformed packing layout"):
        PackingLayout.from_dict({"count": 1}, n_bits=1024)
    with pytest.raises(ValueError, match="invalid packing layout"):
        PackingLayout.from_dict({**masks.layout.to_dict(), "kappa": 8}, n_bits=1024)
    with pytest.raises(ValueError, match="expected 5 slots"):
        masks.unmask([1, 2])
    with pytest.raises(ValueError, match="packed plaintexts"):
        unpack_slots([1, 2, 3], masks.layout)
    with pytest.raises(ValueError, match="larger than its layout allows"):
        private.decrypt_packed(public.encrypt(np.array([-1])), masks.layout)
