"""Private set intersection: correctness on random sets, unbalanced sizes, IDs, refusals."""

from __future__ import annotations

import secrets

import numpy as np
import pandas as pd
import pytest

from linkage import EcdhPsiParty, hmac_tokens, intersect, normalize_ids, psi_intersection


def random_sets(
    n_a: int, n_b: int, overlap: float, seed: int
) -> tuple[pd.Series, pd.Series, set[str]]:
    rng = np.random.default_rng(seed)
    n_common = round(overlap * min(n_a, n_b))
    pool = [f"P{v}" for v in rng.choice(10**9, size=n_a + n_b - n_common, replace=False)]
    common = pool[:n_common]
    ids_a = common + pool[n_common:n_a]
    ids_b = common + pool[n_a:]
    rng.shuffle(ids_a)
    rng.shuffle(ids_b)
    a = pd.Series(ids_a, index=[f"a{i}" for i in range(n_a)])
    b = pd.Series(ids_b, index=[f"b{i}" for i in range(n_b)])
    return a, b, set(common)


@pytest.mark.parametrize("method", ["ecdh", "hmac"])
@pytest.mark.parametrize("overlap", [0.0, 0.5, 1.0])
def test_intersection_is_exact(method: str, overlap: float) -> None:
    a, b, common = random_sets(300, 200, overlap, seed=int(overlap * 10))
    pairs = psi_intersection(a, b, method=method)
    assert list(pairs.columns) == ["a", "b"]
    assert len(pairs) == len(common)
    assert set(a[pairs["a"]]) == common
    assert (a[pairs["a"]].to_numpy() == b[pairs["b"]].to_numpy()).all()  # aligned pairs


@pytest.mark.parametrize("method", ["ecdh", "hmac"])
def test_unbalanced_sizes(method: str) -> None:
    a, b, common = random_sets(50, 5000, 0.8, seed=3)
    pairs = psi_intersection(a, b, method=method)
    assert set(a[pairs["a"]]) == common
    assert (a[pairs["a"]].to_numpy() == b[pairs["b"]].to_numpy()).all()


def test_both_parties_agree_on_the_common_order() -> None:
    ids_a = normalize_ids(["x1", "x2", "x3", "x4"])
    ids_b = normalize_ids(["x4", "x9", "x2", "x1"])
    pa, pb = EcdhPsiParty(), EcdhPsiParty()
    sent_a, sent_b = pa.blind(ids_a), pb.blind(ids_b)
    double_a, double_b = pb.reblind(sent_a), pa.reblind(sent_b)
    seen_by_a = intersect(double_a, double_b)  # computed by a
    seen_by_b = intersect(double_b, double_a)  # computed by b on the same values
    rows_a = pa.own_rows(i for i, _ in seen_by_a)
    rows_b = pb.own_rows(i for i, _ in seen_by_b)
    assert [ids_a[r] for r in rows_a] == [ids_b[r] for r in rows_b]
    assert sorted(ids_a[r] for r in rows_a) == ["X1", "X2", "X4"]


def test_blinding_hides_ids_and_never_repeats() -> None:
    ids = normalize_ids([f"id{i}" for i in range(50)])
    p1, p2 = EcdhPsiParty(), EcdhPsiParty()
    first, second = p1.blind(ids), p2.blind(ids)
    assert not set(first) & set(second)  # different secrets: unrelated points
    assert all(len(p) == 32 for p in first)
    assert p1.own_rows(range(50)) != list(range(50))  # sent in a secret random order (50! orders)


def test_normalisation_and_its_errors() -> None:
    assert normalize_ids([" p-0012.34 ", "P/99 1", 7]) == ["P001234", "P991", "7"]
    with pytest.raises(ValueError, match="position 1 is missing"):
        normalize_ids(["a", None])
    with pytest.raises(ValueError, match=r"position 0 .* is empty"):
        normalize_ids([" - "])
    with pytest.raises(ValueError, match=r"positions 0 and 2 are the same .*deduplicate"):
        normalize_ids(["ab-1", "c", "AB1"])
    with pytest.raises(ValueError, match="party b's ids: the ID at position 0 is missing"):
        psi_intersection(["a"], [float("nan")])


def test_bad_messages_and_parameters_are_refused() -> None:
    party = EcdhPsiParty()
    with pytest.raises(ValueError, match="position 1 is not 32 bytes"):
        party.reblind([party.blind(["X"])[0], b"short"])
    with pytest.raises(ValueError, match="low-order point"):
        party.reblind([bytes(32)])  # u = 0 is a low-order point
    with pytest.raises(ValueError, match="at least 16 random bytes"):
        hmac_tokens(["A"], b"short")
    with pytest.raises(ValueError, match=r"unknown PSI method 'rsa'.*'ecdh' or 'hmac'"):
        psi_intersection(["a"], ["a"], method="rsa")


def test_hmac_tokens_depend_on_the_key() -> None:
    key1, key2 = secrets.token_bytes(32), secrets.token_bytes(32)
    assert hmac_tokens(["A1"], key1) == hmac_tokens(["A1"], key1)
    assert hmac_tokens(["A1"], key1) != hmac_tokens(["A1"], key2)


def test_worker_processes_give_the_same_intersection(monkeypatch: pytest.MonkeyPatch) -> None:
    import linkage.workers

    monkeypatch.setattr(linkage.workers, "PARALLEL_MIN_POINTS", 10)
    a, b, common = random_sets(300, 250, 0.5, seed=9)
    pairs = psi_intersection(a, b, method="ecdh", workers=2)
    assert set(a[pairs["a"]]) == common
    assert (a[pairs["a"]].to_numpy() == b[pairs["b"]].to_numpy()).all()
    party = EcdhPsiParty(workers=2)
    points = party.blind([f"ID{i}" for i in range(40)])
    with pytest.raises(ValueError, match="position 33 is a low-order point"):
        party.reblind([*points[:33], bytes(32), *points[34:]])


def test_points_lie_on_the_curve_not_its_twist() -> None:
    """Hashed IDs that fell on the twist would stay there after blinding: one bit of H(id)
    per point for a dictionary attacker. Every point sent must be on Curve25519."""
    import gmpy2

    p, a = 2**255 - 19, 486662
    party, other = EcdhPsiParty(workers=1), EcdhPsiParty(workers=1)
    points = party.blind([f"ID{i}" for i in range(500)])
    for point in points + other.reblind(points):
        u = int.from_bytes(point, "little")
        assert gmpy2.legendre(u * (u * (u + a) + 1) % p, p) == 1


def test_float_ids_match_their_integer_twins() -> None:
    assert normalize_ids([1234.0, 17]) == normalize_ids([1234, 17.0]) == ["1234", "17"]
    with pytest.raises(ValueError, match=r"position 1 \(2.5\) is a fraction"):
        normalize_ids([1, 2.5])
    pairs = psi_intersection(pd.Series([1234.0, 99.0]), pd.Series([5, 1234]), method="hmac")
    assert pairs.values.tolist() == [[0, 1]]
