"""Keys: generation, security checks, phe interoperability, CRT, randomness, workers."""

from __future__ import annotations

import os
import random
import time
import warnings

import gmpy2
import numpy as np
import pytest
from phe import paillier

from vfl.crypto import (
    EncryptedVector,
    FixedPointOverflowError,
    PaillierPrivateKey,
    PaillierPublicKey,
    SecurityWarning,
    generate_paillier_keypair,
    matvec,
)

Keys = tuple[PaillierPublicKey, PaillierPrivateKey]
pytestmark = pytest.mark.filterwarnings("ignore::vfl.crypto.keys.SecurityWarning")


def test_default_key_is_2048_bits_and_works(keypair_2048: Keys) -> None:
    public, private = keypair_2048
    assert public.n_length == 2048
    assert public.obfuscation_bits == 1024
    assert gmpy2.is_prime(private.p) and gmpy2.is_prime(private.q)
    x = np.array([0.5, -1.25, 1e6, 0.0])
    np.testing.assert_allclose(private.decrypt(public.encrypt(x)), x, atol=1e-9)
    np.testing.assert_allclose(private.decrypt(private.encrypt(x)), x, atol=1e-9)


def test_short_keys_need_the_insecure_flag() -> None:
    with pytest.raises(ValueError, match=r"1024-bit Paillier key is too short.*insecure=True"):
        generate_paillier_keypair(1024)
    with pytest.warns(SecurityWarning, match="1024-bit"):
        public, _ = generate_paillier_keypair(1024, insecure=True)
    with pytest.raises(ValueError, match="too short"):
        PaillierPublicKey(int(public.n))
    with pytest.raises(ValueError, match="too short"):
        PaillierPublicKey.from_phe(public.to_phe())


def test_short_obfuscation_exponent_warns(keypair_2048: Keys) -> None:
    public, private = keypair_2048
    with pytest.warns(SecurityWarning, match="short-exponent assumption"):
        short = PaillierPublicKey(int(public.n), obfuscation_bits=448)
    x = np.array([3.0, -4.5])
    np.testing.assert_allclose(private.decrypt(short.encrypt(x)), x)
    with pytest.raises(ValueError, match="obfuscation_bits must be between 128"):
        PaillierPublicKey(int(public.n), obfuscation_bits=64)


def test_phe_ciphertexts_decrypt_with_vflink_and_back(keypair: Keys) -> None:
    public, private = keypair
    phe_public = public.to_phe()
    numbers = [phe_public.encrypt(v) for v in (1.5, -2.75, 1e-3, 42)]
    vec = EncryptedVector.from_phe(numbers, public)
    np.testing.assert_allclose(private.decrypt(vec), [1.5, -2.75, 1e-3, 42], rtol=1e-12)
    # the reverse: vflink ciphertexts (any exponent) decrypt with phe's key
    x = np.array([0.125, -7.0, 3.3])
    phe_private = private.to_phe()
    for v in (public.encrypt(x), public.encrypt(x, precision=2**-30), public.encrypt(x) * 3):
        np.testing.assert_allclose([phe_private.decrypt(c) for c in v.to_phe()], private.decrypt(v))
    # keys convert both ways
    assert PaillierPrivateKey.from_phe(phe_private, insecure=True) == private
    assert PaillierPublicKey.from_phe(phe_public, insecure=True) == public


def test_phe_private_key_decrypts_after_conversion() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        _, phe_private = paillier.generate_paillier_keypair(n_length=1024)
        private = PaillierPrivateKey.from_phe(phe_private, insecure=True)
    vec = private.public_key.encrypt(np.array([2.5, -1.0]))
    assert [phe_private.decrypt(c) for c in vec.to_phe()] == [2.5, -1.0]


def test_randomness_is_not_seedable(keypair: Keys) -> None:
    public, private = keypair
    x = np.array([1.0, 2.0, 3.0])
    outputs = []
    for _ in range(2):
        random.seed(0)
        np.random.seed(0)  # noqa: NPY002 - proving global seeds have no effect
        outputs.append((public.encrypt(x).ciphertexts, private.encrypt(x).ciphertexts))
    assert outputs[0][0] != outputs[1][0]
    assert outputs[0][1] != outputs[1][1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        random.seed(0)
        a = generate_paillier_keypair(512, insecure=True)[0]
        random.seed(0)
        b = generate_paillier_keypair(512, insecure=True)[0]
    assert a.n != b.n
    assert len(set(public.encrypt(np.zeros(50)).ciphertexts)) == 50


def test_decrypting_under_the_wrong_key_is_refused(keypair: Keys, other_keypair: Keys) -> None:
    vec = keypair[0].encrypt(np.ones(2))
    with pytest.raises(ValueError, match="encrypted under another public key"):
        other_keypair[1].decrypt(vec)


def test_overflow_band_is_reported_not_wrapped(keypair: Keys) -> None:
    public, private = keypair
    middle = EncryptedVector(public, public.raw_encrypt([int(public.n) // 2]), 0)
    with pytest.raises(FixedPointOverflowError, match="overflow band"):
        private.decrypt(middle)
    with pytest.raises(FixedPointOverflowError, match="overflow band"):
        private.decrypt_integers(middle)


def test_key_checks(keypair: Keys) -> None:
    public, private = keypair
    with pytest.raises(ValueError, match="odd integer"):
        PaillierPublicKey(10, insecure=True)
    with pytest.raises(ValueError, match="not the two distinct factors"):
        PaillierPrivateKey(public, int(private.p), int(private.p))
    assert public != keypair[0].to_phe()
    assert "PaillierPublicKey(n_length=1024" in repr(public)


def test_obfuscator_pool_is_used_and_stays_random(keypair: Keys) -> None:
    public, private = keypair
    public.start_obfuscator_pool(64)
    filler = public._obfuscator._filler
    assert filler is not None
    filler.join(timeout=30)
    assert public.obfuscator_pool_size() == 64
    x = np.arange(10.0)
    vec = public.encrypt(x)
    assert public.obfuscator_pool_size() == 54
    np.testing.assert_allclose(private.decrypt(vec), x)
    public.stop_obfuscator_pool()
    assert public.obfuscator_pool_size() == 0


@pytest.mark.slow
def test_two_workers_give_the_same_results(keypair: Keys) -> None:
    public, private = keypair
    x = np.random.default_rng(0).standard_normal(300)
    for vec in (public.encrypt(x, workers=2), private.encrypt(x, workers=2)):
        np.testing.assert_allclose(private.decrypt(vec, workers=2), x, atol=1e-9)
    X = np.random.default_rng(1).standard_normal((300, 20))
    vec = public.encrypt(x)
    np.testing.assert_array_equal(
        private.decrypt(X.T @ vec), private.decrypt(matvec(X.T, vec, workers=2))
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_forgets_the_pooled_obfuscators(keypair: Keys) -> None:
    public, _ = keypair
    public.start_obfuscator_pool(8)
    deadline = time.monotonic() + 30
    while public.obfuscator_pool_size() < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert public.obfuscator_pool_size() == 8
    read, write = os.pipe()
    with warnings.catch_warnings():  # forking a process that has threads: this child execs none
        warnings.simplefilter("ignore", DeprecationWarning)
        child = os.fork()
    if child == 0:  # the child: report its pool size, then leave without pytest's teardown
        os.close(read)
        os.write(write, str(public.obfuscator_pool_size()).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        seen_in_child = pipe.read()
    os.waitpid(child, 0)
    assert seen_in_child == "0"  # the at-fork hook emptied the child's copy ...
    assert public.obfuscator_pool_size() == 8  # ... and left the parent's alone
    public.stop_obfuscator_pool()


@pytest.mark.slow
def test_a_process_started_by_multiprocessing_exits_after_using_the_worker_pool(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression: a party run as a multiprocessing child that encrypted with workers hung at
    exit (multiprocessing joined the pool's workers after closing their queues)."""
    import subprocess
    import sys

    script = tmp_path / "child.py"
    script.write_text(
        "import multiprocessing, warnings\n"
        "def child():\n"
        "    warnings.simplefilter('ignore')\n"
        "    from vfl.crypto import generate_paillier_keypair\n"
        "    public, _ = generate_paillier_keypair(1024, insecure=True)\n"
        "    assert len(public.raw_encrypt([1] * 300, workers=2)) == 300\n"
        "if __name__ == '__main__':\n"
        "    ctx = multiprocessing.get_context('spawn')\n"
        "    codes = []\n"
        "    for _ in range(3):\n"
        "        p = ctx.Process(target=child)\n"
        "        p.start()\n"
        "        p.join(60)\n"
        "        codes.append(p.exitcode)\n"
        "        if p.exitcode is None:\n"
        "            p.kill()\n"
        "    print(codes)\n"
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert result.stdout.strip() == "[0, 0, 0]", result.stderr[-2000:]


def test_the_owner_encrypts_in_another_holders_base_and_that_holder_rerandomises_in_it(
    keypair: Keys,
) -> None:
    from vfl.crypto.rerandomize import rerandomize

    public, private = keypair
    holder = PaillierPublicKey(int(public.n), insecure=True)  # another party's key object
    assert holder.h_s != public.h_s  # each holder draws its own base
    owner = private.for_base(holder.base_bytes())
    plain = [0, 1, 12345, int(public.n) - 1]
    cts = owner.raw_encrypt(plain)
    assert [int(v) for v in private.raw_decrypt(cts)] == plain
    vector = EncryptedVector(holder, cts, 0)
    fresh = rerandomize(vector, for_key_owner="base")
    assert fresh.fresh and fresh.ciphertexts != vector.ciphertexts
    assert [int(v) for v in private.raw_decrypt(fresh.ciphertexts)] == plain
    with pytest.raises(ValueError, match="not an n-th residue"):
        private.for_base(int(public.n + 2).to_bytes(public.ciphertext_bytes, "big"))
