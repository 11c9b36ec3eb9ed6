"""Big-integer kernels against plain gmpy2 arithmetic."""

from __future__ import annotations

import secrets

import gmpy2
import numpy as np
import pytest
from gmpy2 import mpz
from hypothesis import given, settings
from hypothesis import strategies as st

from vfl.crypto.kernels import (
    SHARED_TABLE_ENTRIES,
    FixedBaseTable,
    _shared_window,
    batch_invert,
    crt_combine,
    multiexp,
    multiexp_big,
    multiexp_rows,
    multiexp_straus,
    pippenger_window,
)

MODULUS = mpz(gmpy2.next_prime(2**255)) * mpz(gmpy2.next_prime(2**256 + 2**100))  # odd, composite
MODULUS_SQ = MODULUS * MODULUS


def naive(bases: list[mpz], exps: list[int]) -> mpz:
    acc = mpz(1)
    for b, e in zip(bases, exps, strict=True):
        acc = acc * gmpy2.powmod(b, e, MODULUS_SQ) % MODULUS_SQ  # gmpy2 inverts for e < 0
    return acc


def pippenger_rows(bases: list[mpz], rows: list[np.ndarray]) -> list[mpz]:
    """The rows as multiexp_rows computed them before the shared windows: one Pippenger
    product per row over the bases, or their inverses where an exponent is negative."""
    inverses = batch_invert(bases, MODULUS_SQ)
    return [
        multiexp(
            [inv if e < 0 else b for b, inv, e in zip(bases, inverses, row.tolist(), strict=True)],
            np.abs(row),
            MODULUS_SQ,
        )
        for row in rows
    ]


@given(
    st.integers(1, 300).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(1, 2**62), min_size=n, max_size=n),
            st.lists(st.integers(0, 2**62 - 1) | st.just(0), min_size=n, max_size=n),
        )
    )
)
@settings(max_examples=40, deadline=None)
def test_multiexp_equals_naive_product(data: tuple[list[int], list[int]]) -> None:
    base_seeds, exps = data
    bases = [gmpy2.powmod(mpz(s), 7, MODULUS_SQ) for s in base_seeds]
    assert multiexp(bases, np.array(exps, dtype=np.int64), MODULUS_SQ) == naive(bases, exps)


def test_multiexp_pippenger_path_and_edge_cases() -> None:
    bases = [mpz(secrets.randbelow(int(MODULUS_SQ))) for _ in range(2000)]
    exps = np.random.default_rng(1).integers(0, 2**40, size=2000)
    assert multiexp(bases, exps, MODULUS_SQ) == naive(bases, exps.tolist())
    assert multiexp(bases, np.zeros(2000, dtype=np.int64), MODULUS_SQ) == 1
    assert multiexp([], np.zeros(0, dtype=np.int64), MODULUS_SQ) == 1
    with pytest.raises(ValueError, match="non-negative"):
        multiexp(bases[:2], np.array([1, -1]), MODULUS_SQ)


@given(
    st.integers(0, 80).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(1, 2**62), min_size=n, max_size=n),
            st.lists(st.integers(0, 2**300) | st.just(0) | st.just(1), min_size=n, max_size=n),
        )
    )
)
@settings(max_examples=40, deadline=None)
def test_long_exponents_by_straus_and_by_limbs_equal_the_naive_product(
    data: tuple[list[int], list[int]],
) -> None:
    base_seeds, exps = data
    bases = [gmpy2.powmod(mpz(s), 7, MODULUS_SQ) for s in base_seeds]
    expected = naive(bases, exps)
    assert multiexp_straus(bases, exps, MODULUS_SQ) == expected
    assert multiexp_big(bases, exps, MODULUS_SQ) == expected  # whichever path it picks


def test_multiexp_big_takes_the_limb_path_for_many_bases() -> None:
    bases = [mpz(secrets.randbelow(int(MODULUS_SQ))) for _ in range(600)]
    exps = [secrets.randbits(130) for _ in range(600)]
    assert multiexp_big(bases, exps, MODULUS_SQ) == naive(bases, exps)
    with pytest.raises(ValueError, match="non-negative"):
        multiexp_big(bases[:2], [1, -1], MODULUS_SQ)


def test_pippenger_window_grows_with_terms() -> None:
    assert pippenger_window(10, 32) < pippenger_window(10_000, 32)
    assert 1 <= pippenger_window(1, 8) <= 16


@given(st.lists(st.integers(1, 2**200), min_size=0, max_size=30))
@settings(max_examples=50, deadline=None)
def test_batch_invert_matches_invert(values: list[int]) -> None:
    values = [v for v in values if gmpy2.gcd(v, MODULUS) == 1]
    inverses = batch_invert([mpz(v) for v in values], MODULUS)
    assert inverses == [gmpy2.invert(v, MODULUS) for v in values]


def test_batch_invert_refuses_non_invertible() -> None:
    with pytest.raises(ZeroDivisionError):
        batch_invert([mpz(3), gmpy2.next_prime(2**255)], MODULUS)


@pytest.mark.parametrize("window", [1, 4, 10])
def test_fixed_base_table_matches_powmod(window: int) -> None:
    base = mpz(secrets.randbelow(int(MODULUS_SQ)))
    table = FixedBaseTable(base, MODULUS_SQ, 96, window=window)
    for exponent in [0, 1, 2**96 - 1, *(secrets.randbits(96) for _ in range(20))]:
        if exponent < 2 ** (table.n_rows * window):
            assert table.pow(exponent) == gmpy2.powmod(base, exponent, MODULUS_SQ)


def test_fixed_base_random_powers_are_uniform_digit_exponents() -> None:
    table = FixedBaseTable(mpz(5), MODULUS_SQ, 40, window=10)
    digits = table.random_digits(2000)
    flat = np.array(digits)
    assert flat.shape == (2000, 4)
    assert flat.min() >= 0 and flat.max() < 1024
    assert abs(flat.mean() - 511.5) < 15  # uniform on 0..1023
    exponents = [sum(d << (10 * i) for i, d in enumerate(row)) for row in digits[:20]]
    assert [table.pow_digits(row) for row in digits[:20]] == [
        gmpy2.powmod(5, e, MODULUS_SQ) for e in exponents
    ]
    assert len(set(map(tuple, digits))) == 2000  # never repeats: OS randomness


def test_crt_combine() -> None:
    p, q = mpz(gmpy2.next_prime(2**61)), mpz(gmpy2.next_prime(2**62))
    for x in (0, 1, 12345, int(p * q - 1)):
        assert crt_combine(x % p, x % q, p, q, gmpy2.invert(q, p)) == x


def test_large_moduli_run_without_the_interpreter_lock_small_ones_keep_it() -> None:
    """gmpy2 holds the interpreter lock by default, per thread; the kernels release it modulo
    ``n**2`` of 2048-bit keys and up (so that parties in threads compute on every core), not
    below (where releasing costs more than it gains), and leave the caller's setting as it
    was; the arithmetic is the same either way."""
    from vfl.crypto import kernels

    seen: list[bool] = []

    @kernels._releasing_for_its_modulus
    def probe(bases: list[int], modulus: int) -> int:
        seen.append(gmpy2.get_context().allow_release_gil)
        return len(bases)

    before = gmpy2.get_context().allow_release_gil
    large, small = (1 << 4095) + 1, (1 << 2047) + 1
    assert probe([1], large) == 1 and probe([1], modulus=small) == 1
    assert seen == [True, False]
    assert gmpy2.get_context().allow_release_gil == before
    rng = np.random.default_rng(5)
    for modulus in (mpz(secrets.randbits(4096)) | 1, mpz(secrets.randbits(1024)) | 1):
        bases = [mpz(secrets.randbelow(int(modulus))) for _ in range(6)]
        exps = rng.integers(0, 2**40, 6)
        expected = 1
        for b, e in zip(bases, exps.tolist(), strict=True):
            expected = expected * pow(int(b), e, int(modulus)) % int(modulus)
        assert int(multiexp(bases, exps, modulus)) == expected
        table = FixedBaseTable(bases[0], modulus, 32, window=4)
        assert int(table.pow(12345)) == pow(int(bases[0]), 12345, int(modulus))


@given(
    st.tuples(st.integers(1, 40), st.integers(0, 24), st.integers(1, 62), st.booleans()),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=40, deadline=None)
def test_multiexp_rows_equals_the_per_row_pippenger_products(
    shape: tuple[int, int, int, bool], seed: int
) -> None:
    """Whichever way multiexp_rows takes (shared windows for few bases and many rows, else
    Pippenger per row), each row equals the old per-row product and the naive one: signed
    exponents, zero rows and columns, exponents up to 62 bits."""
    n_bases, n_rows, bits, signed = shape
    rng = np.random.default_rng(seed)
    bases = [gmpy2.powmod(mpz(int(v)), 7, MODULUS_SQ) for v in rng.integers(2, 2**62, n_bases)]
    low = -(2 ** (bits - 1)) if signed else 0
    rows = [rng.integers(low, 2 ** (bits - 1), n_bases, dtype=np.int64) for _ in range(n_rows)]
    for row in rows[::3]:  # sparse rows as well
        row[rng.random(n_bases) < 0.7] = 0
    if n_rows > 2:
        rows[1][:] = 0  # a row of zeros
        rows[2][0] = -(2 ** (bits - 1)) if signed else 0
    got = multiexp_rows(bases, rows, MODULUS_SQ)
    assert got == pippenger_rows(bases, rows)
    assert got == [naive(bases, row.tolist()) for row in rows]


def test_multiexp_rows_shares_windows_only_where_they_cost_less() -> None:
    """The protected layer's shapes take the shared windows; X.T @ ciphertexts over many
    rows keeps Pippenger; sparse rows table only the bases they use (measured at 4096 bits,
    300 rows of 5 terms among 1,500 bases: 0.12 s shared, 0.16 s Pippenger per row); no
    table exceeds its cap; an exponent of -2**63 is refused; every way gives the old
    products."""
    rng = np.random.default_rng(5)
    layer = [rng.integers(-(2**36), 2**36, 16, dtype=np.int64) for _ in range(64)]
    assert _shared_window(16, layer) is not None
    many = [rng.integers(-(2**36), 2**36, 3000, dtype=np.int64) for _ in range(3)]
    assert _shared_window(3000, many) is None
    sparse = [np.zeros(1500, dtype=np.int64) for _ in range(300)]  # one-hot-like rows
    for row in sparse:
        row[rng.choice(1500, 5, replace=False)] = rng.integers(1, 2**20, 5)
    used = int(np.count_nonzero(np.any(np.array(sparse) != 0, axis=0)))
    w = _shared_window(1500, sparse)  # tables only for the bases a row uses, within the cap
    assert w is not None and used << w <= SHARED_TABLE_ENTRIES
    wide = [rng.integers(-(2**36), 2**36, 2048, dtype=np.int64) for _ in range(2000)]
    w = _shared_window(2048, wide)  # a table and an inverse's per base: within the cap
    assert w is None or 2 * 2048 << w <= SHARED_TABLE_ENTRIES
    with pytest.raises(ValueError, match="above -2"):
        multiexp_rows([mpz(3)], [np.array([-(2**63)], dtype=np.int64)], MODULUS_SQ)
    for n, rows in ((16, layer), (3000, many), (1500, sparse[:4])):
        bases = [mpz(secrets.randbelow(int(MODULUS_SQ) - 2) + 2) for _ in range(n)]
        bases = [b for b in bases if gmpy2.gcd(b, MODULUS_SQ) == 1]
        rows = [row[: len(bases)] for row in rows]
        assert multiexp_rows(bases, rows, MODULUS_SQ) == pippenger_rows(bases, rows)
