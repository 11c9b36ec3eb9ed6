"""Update compression kernels (horizontal.compression): stochastic quantisation (unbiased,
with the expected squared error of the module docstring), top-k with error feedback, and the
bytes each representation takes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from horizontal.compression import (
    TopK,
    dense_bytes,
    dequantize,
    pack_codes,
    quantize,
    quantized_bytes,
    topk_bytes,
    unpack_codes,
)
from horizontal.secagg import SecAggConfig

# -- stochastic quantisation -----------------------------------------------------------------


def test_quantize_by_hand() -> None:
    # 2 bits: levels 0, 1/3, 2/3, 1; 0.25 sits at grid position 0.75, so code 1 w.p. 0.75
    v = np.array([0.0, 0.25, 1.0])
    seen = set()
    for seed in range(200):
        codes, low, scale = quantize(v, 2, rng=np.random.default_rng(seed))
        assert codes.dtype == np.uint8
        assert (low, scale) == (0.0, 1 / 3)
        assert codes[0] == 0 and codes[2] == 3  # the minimum and maximum are exact
        seen.add(int(codes[1]))
        assert dequantize(codes, low, scale)[[0, 2]].tolist() == [0.0, 1.0]
    assert seen == {0, 1}


def test_quantize_is_its_definition() -> None:
    v = np.random.default_rng(0).normal(size=50)
    codes, low, scale = quantize(v, 3, rng=np.random.default_rng(7))
    uniform = np.random.default_rng(7).random(50)
    assert low == v.min() and scale == pytest.approx((v.max() - v.min()) / 7)
    np.testing.assert_array_equal(codes, np.floor((v - low) / scale + uniform))


def test_constant_vector_is_exact() -> None:
    codes, low, scale = quantize(np.full(5, -2.5), 4)
    assert (codes.tolist(), low, scale) == ([0] * 5, -2.5, 0.0)
    assert dequantize(codes, low, scale).tolist() == [-2.5] * 5


@pytest.mark.parametrize(
    ("bits", "dtype"),
    [(1, np.uint8), (8, np.uint8), (9, np.uint16), (16, np.uint16), (32, np.uint32)],
)
def test_code_types_and_range(bits: int, dtype: type) -> None:
    v = np.random.default_rng(bits).normal(size=1000)
    codes, low, scale = quantize(v, bits)  # the OS's randomness
    assert codes.dtype == dtype
    assert codes.min() == 0 and int(codes.max()) == 2**bits - 1
    assert np.abs(dequantize(codes, low, scale) - v).max() <= scale * (1 + 1e-9)


def grid_vector(d: int, bits: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """A vector over [0, 1] whose interior coordinates sit at grid fractions p in [0.1, 0.9]
    (where the normal approximation of the sample mean is good), with p and delta."""
    draw = np.random.default_rng(seed)
    levels = 2**bits - 1
    delta = 1 / levels
    p = np.r_[0.0, draw.uniform(0.1, 0.9, size=d - 2), 0.0]
    cell = np.r_[0, draw.integers(0, levels, size=d - 2), levels]
    return (cell + p) * delta, p, delta


@pytest.mark.parametrize("bits", [1, 2, 5])
def test_quantize_is_unbiased(bits: int) -> None:
    v, p, delta = grid_vector(64, bits, seed=bits)
    draws = 3000
    rng = np.random.default_rng(100 + bits)
    total = np.zeros_like(v)
    for _ in range(draws):
        total += dequantize(*quantize(v, bits, rng=rng))
    mean = total / draws
    # per coordinate, the mean of the draws has variance delta^2 p (1 - p) / draws
    sd = np.sqrt(delta**2 * p * (1 - p) / draws)
    assert np.all(np.abs(mean - v) <= 5 * sd + 1e-12)
    assert np.abs(mean - v)[[0, -1]].tolist() == [0.0, 0.0]
    # and the deviations do look like noise of that size (not identically 0)
    z = (mean - v)[1:-1] / sd[1:-1]
    assert 0.5 < np.mean(z**2) < 1.5


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_expected_squared_error_is_the_formula(bits: int) -> None:
    """E ||Q(v) - v||^2 = delta^2 sum_i p_i (1 - p_i) (the module docstring), for a vector
    of arbitrary grid positions."""
    v = np.random.default_rng(bits).standard_t(3, size=2000)
    draws = 200
    rng = np.random.default_rng(200 + bits)
    errors = [np.sum((dequantize(*quantize(v, bits, rng=rng)) - v) ** 2) for _ in range(draws)]
    levels = 2**bits - 1
    delta = (v.max() - v.min()) / levels
    position = (v - v.min()) / delta
    p = position - np.floor(position)
    expected = delta**2 * np.sum(p * (1 - p))
    # one coordinate's squared error is delta^2 (1-p)^2 w.p. p, delta^2 p^2 w.p. 1 - p
    var_one = delta**4 * (p * (1 - p) ** 4 + (1 - p) * p**4 - (p * (1 - p)) ** 2)
    tolerance = 5 * math.sqrt(var_one.sum() / draws)
    assert abs(np.mean(errors) - expected) <= tolerance
    assert tolerance < 0.05 * expected  # the check is sharp
    assert expected <= len(v) * delta**2 / 4


def test_uniform_positions_give_d_s2_over_6_l2() -> None:
    """With grid positions uniform within cells the error is d s^2 / (6 L^2), a quarter of the
    2 d s^2 / (3 L^2) that is sometimes quoted (an upper bound, not the value)."""
    d, bits, draws = 20_000, 3, 20
    v = np.random.default_rng(0).uniform(-1.0, 3.0, size=d)
    s, levels = float(v.max() - v.min()), 2**bits - 1
    rng = np.random.default_rng(1)
    mse = np.mean(
        [np.sum((dequantize(*quantize(v, bits, rng=rng)) - v) ** 2) for _ in range(draws)]
    )
    uniform = d * s**2 / (6 * levels**2)
    # the relative sd of the estimate is about 0.004 (d coordinates, 20 draws each)
    assert mse == pytest.approx(uniform, rel=0.02)
    assert mse < 2 * d * s**2 / (3 * levels**2) / 3.5


def test_quantize_refuses_bad_input() -> None:
    for bits in (0, 33, -1, 2.0, True):
        with pytest.raises(ValueError, match="bits must be an integer from 1 to 32"):
            quantize(np.ones(3), bits)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"non-empty flat vector, got shape \(0,\)"):
        quantize(np.array([]), 4)
    with pytest.raises(ValueError, match=r"non-empty flat vector, got shape \(2, 2\)"):
        quantize(np.ones((2, 2)), 4)
    with pytest.raises(
        ValueError, match=r"must be finite; NaN or infinity at 2 position\(s\), first \[1, 3\]"
    ):
        quantize(np.array([0.0, np.nan, 1.0, -np.inf]), 4)
    with pytest.raises(ValueError, match="non-negative integers"):
        dequantize(np.array([0.5, 1.0]), 0.0, 1.0)
    with pytest.raises(ValueError, match="low and scale must be finite"):
        dequantize(np.array([0, 1]), np.nan, 1.0)
    with pytest.raises(ValueError, match="scale >= 0"):
        dequantize(np.array([0, 1]), 0.0, -1.0)


# -- packing and bytes -----------------------------------------------------------------------


@pytest.mark.parametrize("bits", [1, 3, 8, 12, 32])
@pytest.mark.parametrize("size", [1, 7, 1000])
def test_pack_codes_round_trips_in_the_counted_bytes(bits: int, size: int) -> None:
    codes, _, _ = quantize(np.random.default_rng(size).normal(size=size), bits)
    packed = pack_codes(codes, bits)
    assert len(packed) == math.ceil(size * bits / 8) == quantized_bytes(size, bits) - 16
    back = unpack_codes(packed, bits, size)
    assert back.dtype == codes.dtype
    np.testing.assert_array_equal(back, codes)


def test_pack_codes_by_hand() -> None:
    # 3-bit codes 5, 0, 7 are 101 000 111 -> 10100011 1(0000000)
    assert pack_codes(np.array([5, 0, 7]), 3) == bytes([0b10100011, 0b10000000])
    assert unpack_codes(bytes([0b10100011, 0b10000000]), 3, 3).tolist() == [5, 0, 7]
    with pytest.raises(ValueError, match=r"from 0 to 2\^3 - 1"):
        pack_codes(np.array([8]), 3)
    with pytest.raises(ValueError, match="3 codes of 3 bits take 2 bytes, got 1 bytes"):
        unpack_codes(b"\x00", 3, 3)


def test_bytes_saved() -> None:
    d = 10_000
    assert dense_bytes(d) == 80_000
    assert quantized_bytes(d, 8) == 10_016  # about 8x smaller
    assert quantized_bytes(d, 1) == 1_266
    assert topk_bytes(TopK(fraction=0.01).kept(d)) == 1_200
    with pytest.raises(ValueError, match="bits must be"):
        quantized_bytes(d, 0)


# -- top-k with error feedback ---------------------------------------------------------------


def test_topk_by_hand() -> None:
    topk = TopK(2)
    assert topk.residual is None
    indices, values = topk.compress(np.array([1.0, -5.0, 3.0, 0.5]))
    assert (indices.dtype, indices.tolist(), values.tolist()) == (np.uint32, [1, 2], [-5.0, 3.0])
    assert topk.residual.tolist() == [1.0, 0.0, 0.0, 0.5]  # type: ignore[union-attr]
    indices, values = topk.compress(np.array([0.0, 0.0, 0.0, 1.0]))  # + residual: [1, 0, 0, 1.5]
    assert (indices.tolist(), values.tolist()) == ([0, 3], [1.0, 1.5])
    assert topk.residual.tolist() == [0.0] * 4  # type: ignore[union-attr]
    assert TopK.decompress(indices, values, 4).tolist() == [1.0, 0.0, 0.0, 1.5]
    topk.reset()
    assert topk.residual is None


def test_topk_fraction() -> None:
    assert [TopK(fraction=0.25).kept(n) for n in (1, 4, 10)] == [1, 1, 3]
    assert TopK(fraction=0.07).kept(100) == 7  # 0.07 * 100 is 7.000000000000001
    assert TopK(fraction=1.0).kept(9) == 9 and TopK(50).kept(9) == 9
    indices, values = TopK(50).compress(np.arange(3.0))
    assert (indices.tolist(), values.tolist()) == ([0, 1, 2], [0.0, 1.0, 2.0])


def test_error_feedback_tracks_the_sum_of_updates() -> None:
    d, k, rounds = 200, 10, 300
    draw = np.random.default_rng(0)
    drift = 0.1 * draw.normal(size=d)
    topk = TopK(k)
    true_sum, sent_sum, no_feedback_sum = np.zeros(d), np.zeros(d), np.zeros(d)
    contraction = math.sqrt(1 - k / d)
    largest = 0.0
    for _ in range(rounds):
        update = drift + draw.normal(size=d)
        largest = max(largest, float(np.linalg.norm(update)))
        true_sum += update
        sent_sum += TopK.decompress(*topk.compress(update), d)
        no_feedback_sum += TopK.decompress(*TopK(k).compress(update), d)
        residual = topk.residual
        assert residual is not None
        # nothing is lost, only delayed; and what is delayed stays bounded
        np.testing.assert_allclose(sent_sum + residual, true_sum, atol=1e-9)
        assert np.linalg.norm(residual) <= contraction / (1 - contraction) * largest
    relative = np.linalg.norm(sent_sum - true_sum) / np.linalg.norm(true_sum)
    without = np.linalg.norm(no_feedback_sum - true_sum) / np.linalg.norm(true_sum)
    assert relative < 0.1 < 0.5 < without


def test_topk_refuses_bad_input() -> None:
    for args, kwargs in (((), {}), ((3,), {"fraction": 0.1})):
        with pytest.raises(ValueError, match="exactly one of k="):
            TopK(*args, **kwargs)
    for k in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            TopK(k)  # type: ignore[arg-type]
    for fraction in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\]"):
            TopK(fraction=fraction)
    emptied = TopK(1)
    emptied.k = None  # both attributes unset after construction
    with pytest.raises(ValueError, match="set k= or fraction="):
        emptied.kept(5)
    topk = TopK(1)
    with pytest.raises(ValueError, match="must be finite"):
        topk.compress(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="non-empty flat vector"):
        topk.compress(np.array([]))
    topk.compress(np.ones(3))
    with pytest.raises(ValueError, match="the update has 4 entries but the residual 3"):
        topk.compress(np.ones(4))
    with pytest.raises(ValueError, match="one length"):
        TopK.decompress(np.array([0, 1]), np.array([1.0]), 3)
    with pytest.raises(ValueError, match=r"indices must be in \[0, 3\), got 1 to 3"):
        TopK.decompress(np.array([1, 3]), np.array([1.0, 2.0]), 3)
    with pytest.raises(ValueError, match="must not repeat"):
        TopK.decompress(np.array([1, 1]), np.array([1.0, 2.0]), 3)
    with pytest.raises(ValueError, match="indices must be integers"):
        TopK.decompress(np.array([1.0]), np.array([1.0]), 3)


def test_compressed_training_sends_fewer_bytes_at_little_cost() -> None:
    from sklearn.metrics import roc_auc_score

    from horizontal import FederatedClassifier
    from vfl.datasets import make_hospital_cohort

    hospitals = make_hospital_cohort(5, 3000, random_state=0)
    clients = {
        k: (v.iloc[:500].drop(columns=["diagnosis"]), v.iloc[:500]["diagnosis"])
        for k, v in hospitals.items()
    }
    x_test = np.vstack(
        [v.iloc[500:].drop(columns=["diagnosis"]).to_numpy() for v in hospitals.values()]
    )
    y_test = np.concatenate([v.iloc[500:]["diagnosis"].to_numpy() for v in hospitals.values()])
    found = {}
    for chosen in (None, 8, 0.1):
        model = FederatedClassifier(max_iter=10, random_state=0, compression=chosen)
        model.fit(clients, keep_payloads=True)
        sent = sum(r.nbytes for r in model.transcript_.records if r.tag.startswith("fed/update"))
        found[chosen] = (sent, roc_auc_score(y_test, model.predict_proba(x_test)[:, 1]))
    assert found[8][0] < 0.3 * found[None][0] and found[0.1][0] < 0.3 * found[None][0]
    assert abs(found[8][1] - found[None][1]) < 0.005
    assert abs(found[0.1][1] - found[None][1]) < 0.005
    with pytest.raises(ValueError, match='choose protocol="secagg" or compression'):
        FederatedClassifier(compression=8, protocol=SecAggConfig(threshold=3)).fit(clients)
    with pytest.raises(ValueError, match="compression must be a bit count"):
        FederatedClassifier(compression=0).fit(clients)
