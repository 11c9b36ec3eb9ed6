"""EncryptedVector arithmetic against numpy on the plaintexts, wire encoding, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vfl.crypto import (
    EncryptedVector,
    FixedPointOverflowError,
    PaillierPrivateKey,
    PaillierPublicKey,
    concatenate,
    matvec,
)
from vfl.federation import CiphertextBlock, wire

Keys = tuple[PaillierPublicKey, PaillierPrivateKey]
pytestmark = pytest.mark.filterwarnings("ignore::vfl.crypto.keys.SecurityWarning")
EPS = 2.0**-32  # default absolute precision of encrypted floats

reals = st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([0.0, -0.0, 1e-9, -3.5, 1e6])
vectors = st.integers(1, 6).flatmap(lambda n: hnp.arrays(np.float64, n, elements=reals))
SETTINGS = settings(max_examples=25, deadline=None)


@given(vectors)
@SETTINGS
def test_encrypt_decrypt(keypair: Keys, x: np.ndarray) -> None:
    public, private = keypair
    np.testing.assert_allclose(private.decrypt(public.encrypt(x)), x, rtol=0, atol=EPS)
    ints = np.rint(x).astype(np.int64)
    np.testing.assert_array_equal(private.decrypt(public.encrypt(ints)), ints)  # integers exact


@given(vectors, st.data())
@SETTINGS
def test_add_and_subtract(keypair: Keys, x: np.ndarray, data: st.DataObject) -> None:
    public, private = keypair
    y = data.draw(hnp.arrays(np.float64, x.shape, elements=reals))
    u, v = public.encrypt(x), public.encrypt(y, precision=2**-20)  # mixed scales
    tol = 2 * EPS + 2**-20
    np.testing.assert_allclose(private.decrypt(u + v), x + y, rtol=0, atol=tol)
    np.testing.assert_allclose(private.decrypt(u - v), x - y, rtol=0, atol=tol)
    np.testing.assert_allclose(private.decrypt(u + y), x + y, rtol=0, atol=tol)
    np.testing.assert_allclose(private.decrypt(y + u), x + y, rtol=0, atol=tol)
    np.testing.assert_allclose(private.decrypt(y - u), y - x, rtol=0, atol=tol)
    np.testing.assert_allclose(private.decrypt(u + 2.5), x + 2.5, rtol=0, atol=tol)
    np.testing.assert_allclose(private.decrypt(-u), -x, rtol=0, atol=tol)


@given(vectors, st.data())
@SETTINGS
def test_multiply_by_plaintext(keypair: Keys, x: np.ndarray, data: st.DataObject) -> None:
    public, private = keypair
    k = data.draw(hnp.arrays(np.float64, x.shape, elements=reals))
    u = public.encrypt(x)
    # k is encoded keeping 24 significant bits of max |k|
    tol = np.abs(x) * np.max(np.abs(k)) * 2.0**-23 + np.abs(k) * EPS + 1e-9
    np.testing.assert_array_less(np.abs(private.decrypt(u * k) - x * k), tol + 1e-12)
    np.testing.assert_array_less(np.abs(private.decrypt(k * u) - x * k), tol + 1e-12)
    for scalar in (0, 3, -7, 0.3, -1e3):
        got = private.decrypt(u * scalar)
        np.testing.assert_allclose(got, x * scalar, rtol=2.0**-22, atol=abs(scalar) * EPS + 1e-9)
    ints = np.array([2, -3, 0, 5, -1, 4])[: len(x)]
    exact = public.encrypt(np.rint(x).astype(np.int64))
    np.testing.assert_array_equal(private.decrypt(exact * ints), np.rint(x) * ints)  # exact
    np.testing.assert_allclose(private.decrypt(u / 4.0), x / 4.0, atol=EPS)


@given(vectors)
@SETTINGS
def test_sum_indexing_concatenate(keypair: Keys, x: np.ndarray) -> None:
    public, private = keypair
    u = public.encrypt(x)
    total = u.sum()
    assert total.shape == ()
    np.testing.assert_allclose(private.decrypt(total), x.sum(), atol=len(x) * EPS)
    np.testing.assert_allclose(private.decrypt(u[1:]), x[1:], atol=EPS)
    np.testing.assert_allclose(private.decrypt(u[-1]), x[-1], atol=EPS)
    np.testing.assert_allclose(private.decrypt(u[x > 0]), x[x > 0], atol=EPS)
    np.testing.assert_allclose(private.decrypt(u[[0, 0]]), x[[0, 0]], atol=EPS)
    joined = concatenate([u, public.encrypt(x[:2], precision=2**-40), u[:1]])
    np.testing.assert_allclose(private.decrypt(joined), np.concatenate([x, x[:2], x[:1]]), atol=EPS)


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (7, 3), (300, 5)])
def test_matrix_times_encrypted_vector(keypair: Keys, rows: int, cols: int) -> None:
    public, private = keypair
    rng = np.random.default_rng(rows)
    X = rng.standard_normal((rows, cols)) * rng.choice([1e-3, 1.0, 1e3], size=cols)  # mixed scales
    X[:, 0] = 0.0 if cols > 1 else X[:, 0]  # an all-zero column
    d = rng.standard_normal(rows)
    vec = public.encrypt(d)
    expected = X.T @ d
    tol = np.abs(X).max(axis=0) * np.abs(d).sum() * 2.0**-23 + 1e-6
    for got in (X.T @ vec, vec @ X, matvec(X.T, vec)):
        assert isinstance(got, EncryptedVector)
        np.testing.assert_array_less(np.abs(private.decrypt(got) - expected), tol)
    ints = rng.integers(-50, 50, size=(rows, cols))
    exact = public.encrypt(np.arange(rows) - rows // 2)
    np.testing.assert_array_equal(
        private.decrypt(ints.T @ exact), ints.T @ (np.arange(rows) - rows // 2)
    )


def test_numpy_defers_to_the_vector(keypair: Keys) -> None:
    public, private = keypair
    u = public.encrypt(np.array([1.0, 2.0]))
    for result in (np.array([2.0, 3.0]) * u, np.array([2.0, 3.0]) + u, np.eye(2) @ u):
        assert isinstance(result, EncryptedVector)
    np.testing.assert_allclose(private.decrypt(np.array([2.0, 3.0]) * u), [2.0, 6.0])


def test_wire_round_trip_and_rerandomisation(keypair: Keys) -> None:
    public, private = keypair
    u = public.encrypt(np.array([1.5, -2.0, 0.0]))
    fresh = u.to_wire()
    assert fresh.integers() == [int(c) for c in u.ciphertexts]  # fresh: sent as is
    derived = u * 2.0
    block = derived.to_wire()
    assert block.integers() != [int(c) for c in derived.ciphertexts]  # re-randomised
    back = public.vector_from_wire(wire.decode(wire.encode(block)))
    np.testing.assert_allclose(private.decrypt(back), [3.0, -4.0, 0.0])
    zero = public.encrypt(np.array([5.0])) * 0
    assert zero.ciphertexts == [1]  # deterministic: must never travel as is
    assert zero.to_wire().integers() != [1]


def test_wire_refuses_other_keys_and_non_ciphertexts(keypair: Keys, other_keypair: Keys) -> None:
    public, _ = keypair
    block = other_keypair[0].encrypt(np.ones(2)).to_wire()
    with pytest.raises(ValueError, match=r"claim public key .* but this party expects key"):
        public.vector_from_wire(block)
    width = public.ciphertext_bytes
    for bad in ([0], [int(public.nsquare)], [int(public.n)]):
        forged = CiphertextBlock.from_integers(public.fingerprint, bad, [0], width=width + 1)
        with pytest.raises(ValueError, match="not valid ciphertexts"):
            public.vector_from_wire(forged)
    per_value = CiphertextBlock.from_integers(public.fingerprint, [2, 3], [0, 1], width=width)
    with pytest.raises(ValueError, match="one shared exponent"):
        public.vector_from_wire(per_value)
    with pytest.raises(TypeError, match="expected a CiphertextBlock"):
        public.vector_from_wire(b"raw")


def test_bad_operations_give_clear_errors(keypair: Keys, other_keypair: Keys) -> None:
    public, _ = keypair
    u = public.encrypt(np.ones(3))
    with pytest.raises(TypeError, match="cannot multiply two ciphertexts"):
        u * u
    with pytest.raises(ValueError, match="different public keys"):
        u + other_keypair[0].encrypt(np.ones(3))
    with pytest.raises(ValueError, match=r"shapes \(3,\) and \(2,\) do not match"):
        u + np.ones(2)
    with pytest.raises(ValueError, match="needs a"):
        np.ones((2, 2)) @ u
    with pytest.raises(ValueError, match="non-finite value"):
        public.encrypt(np.array([1.0, np.nan]))
    with pytest.raises(TypeError, match="must be numeric"):
        public.encrypt(np.array(["a"]))
    with pytest.raises(ValueError, match="1-d vector"):
        public.encrypt(np.ones((2, 2)))
    with pytest.raises(FixedPointOverflowError, match="does not fit the plaintext space"):
        public.encrypt(np.array([0.0, 1e300]))
    with pytest.raises(ZeroDivisionError):
        u / 0
    with pytest.raises(IndexError, match="out of bounds"):
        u[5]
    with pytest.raises(ValueError, match="can only lower the exponent"):
        u.rescale(u.exponent + 1)


def test_hostile_exponents_are_refused(keypair: Keys) -> None:
    public, _ = keypair
    u = public.encrypt(np.ones(2))
    block = u.to_wire()
    for exponent in (-(2**62), 2**40, -5000):
        forged = CiphertextBlock(
            block.key_fingerprint, block.shape, np.array([exponent]), block.width, block.data
        )
        with pytest.raises(ValueError, match="out of range"):
            public.vector_from_wire(forged)
    deep = EncryptedVector(public, u.ciphertexts, -4000)
    with pytest.raises(ValueError, match="exceed the plaintext space"):
        u + deep


def test_huge_unsigned_multipliers_keep_their_sign(keypair: Keys) -> None:
    public, private = keypair
    u = public.encrypt(np.array([1.0, 2.0]))
    k = np.array([2**63 + 2**40, 5], dtype=np.uint64)
    got = private.decrypt(u * k)  # 24 significant bits of max |k|: the 5 is below resolution
    assert got[0] == pytest.approx(float(2**63 + 2**40), rel=1e-6)
    assert got[1] >= 0
    np.testing.assert_array_equal(private.decrypt(public.encrypt(np.array([7, 9])) * 3), [21, 27])
