"""Splitting a data set among simulated clients, and the skew measures (horizontal.partition)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import linprog
from scipy.stats import wasserstein_distance

import horizontal
from horizontal.partition import (
    Positions,
    dirichlet_label_split,
    earth_movers,
    iid_split,
    label_distributions,
    quantity_skew_split,
    skew_report,
    total_variation,
)


def labels(n: int = 3000, n_classes: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_classes, size=n)


def plain_tv(y: np.ndarray, part: np.ndarray) -> float:
    """TV of one client's labels from all labels, by counting."""
    classes = np.unique(y)
    own = np.array([(y[part] == c).mean() for c in classes])
    pooled = np.array([(y == c).mean() for c in classes])
    return float(0.5 * np.abs(own - pooled).sum())


SPLITS: dict[str, Callable[[np.ndarray, int, int], list[Positions]]] = {
    "iid": lambda y, k, seed: iid_split(y, k, random_state=seed),
    "dirichlet_0.05": lambda y, k, seed: dirichlet_label_split(y, k, 0.05, random_state=seed),
    "dirichlet_1": lambda y, k, seed: dirichlet_label_split(y, k, 1.0, random_state=seed),
    "dirichlet_1000": lambda y, k, seed: dirichlet_label_split(y, k, 1000, random_state=seed),
    "quantity_0.3": lambda y, k, seed: quantity_skew_split(y, k, 0.3, random_state=seed),
    "quantity_100": lambda y, k, seed: quantity_skew_split(len(y), k, 100, random_state=seed),
}


# -- splits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize(("n", "n_clients"), [(3000, 10), (101, 7), (5, 5), (40, 1)])
def test_parts_are_disjoint_sorted_and_cover_every_row(split: str, n: int, n_clients: int) -> None:
    y = labels(n, n_classes=4, seed=n)
    parts = SPLITS[split](y, n_clients, 3)
    assert len(parts) == n_clients
    assert all(len(part) >= 1 for part in parts)
    assert all(np.issubdtype(part.dtype, np.integer) for part in parts)
    assert all((np.diff(part) > 0).all() for part in parts)  # sorted, no repeats
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def test_iid_sizes_differ_by_at_most_one() -> None:
    sizes = [len(part) for part in iid_split(1003, 10, random_state=0)]
    assert sum(sizes) == 1003
    assert max(sizes) - min(sizes) == 1


@pytest.mark.parametrize("split", SPLITS)
def test_same_seed_same_split_and_another_seed_differs(split: str) -> None:
    y = labels()
    one, two, three = (SPLITS[split](y, 8, seed) for seed in (5, 5, 6))
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(
        len(a) != len(c) or not np.array_equal(a, c) for a, c in zip(one, three, strict=True)
    )


def test_a_generator_is_accepted_as_random_state() -> None:
    y = labels()
    a = dirichlet_label_split(y, 4, 0.5, random_state=np.random.default_rng(9))
    b = dirichlet_label_split(y, 4, 0.5, random_state=np.random.default_rng(9))
    for x, z in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, z)


def mean_tv(y: np.ndarray, alpha: float, n_clients: int = 10, seeds: int = 5) -> float:
    return float(
        np.mean(
            [
                np.mean(
                    [
                        plain_tv(y, p)
                        for p in dirichlet_label_split(y, n_clients, alpha, random_state=s)
                    ]
                )
                for s in range(seeds)
            ]
        )
    )


def test_smaller_alpha_gives_more_label_skew() -> None:
    y = labels(5000)
    tv = {alpha: mean_tv(y, alpha) for alpha in (0.1, 1.0, 100.0)}
    assert tv[0.1] > tv[1.0] + 0.15
    assert tv[1.0] > tv[100.0] + 0.15
    assert tv[0.1] > 0.6  # most of each client's mass on a few of the ten classes


def test_large_alpha_is_close_to_iid() -> None:
    y = labels(5000)
    iid = np.mean(
        [np.mean([plain_tv(y, p) for p in iid_split(y, 10, random_state=s)]) for s in range(5)]
    )
    assert mean_tv(y, 10_000.0) < 0.05
    assert mean_tv(y, 10_000.0) < 2 * iid  # sampling noise of an IID split, not skew


def test_quantity_skew_sizes_vary_more_with_small_alpha_and_keep_labels_mixed() -> None:
    def size_cv(alpha: float) -> float:
        cvs = []
        for seed in range(5):
            sizes = np.array(
                [len(p) for p in quantity_skew_split(5000, 10, alpha, random_state=seed)]
            )
            cvs.append(sizes.std() / sizes.mean())
        return float(np.mean(cvs))

    assert size_cv(0.5) > size_cv(5.0) + 0.3
    assert size_cv(5.0) > size_cv(1000.0) + 0.1
    assert size_cv(1000.0) < 0.1
    y = labels(5000, n_classes=3)
    parts = quantity_skew_split(y, 5, 1.0, min_size=300, random_state=1)
    assert max(plain_tv(y, p) for p in parts) < 0.1  # only sizes are skewed


def test_rounding_favours_no_client() -> None:
    """With nearly equal proportions, a class of one row goes to each client equally often
    (rounding fixed block ends in a fixed client order would always pick the middle client)."""
    y = np.arange(5)  # five classes of one row each
    owner_of_row_0 = Counter(
        next(
            c
            for c, part in enumerate(dirichlet_label_split(y, 5, 1e6, random_state=s))
            if 0 in part
        )
        for s in range(500)
    )
    assert sorted(owner_of_row_0) == [0, 1, 2, 3, 4]
    assert max(owner_of_row_0.values()) < 140  # 100 expected per client
    sizes = Counter(
        tuple(len(p) for p in quantity_skew_split(7, 5, 1e6, random_state=s)) for s in range(300)
    )
    assert len(sizes) > 3  # which clients get the two extra rows varies


def test_min_size_is_respected() -> None:
    y = labels(2000)
    for seed in range(5):
        for parts in (
            dirichlet_label_split(y, 10, 0.3, min_size=60, random_state=seed),
            quantity_skew_split(y, 10, 2.0, min_size=60, random_state=seed),
        ):
            assert min(len(p) for p in parts) >= 60


def test_min_size_zero_allows_empty_clients() -> None:
    y = np.zeros(20, dtype=int)  # one class: every client's share comes from one draw
    parts = dirichlet_label_split(y, 10, 0.01, min_size=0, random_state=0)
    assert sum(len(p) == 0 for p in parts) > 0
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(20))


def test_string_labels_and_their_distributions() -> None:
    rng = np.random.default_rng(2)
    y = pd.Series(rng.choice(["flu", "covid", "rsv"], size=600, p=[0.5, 0.3, 0.2]))
    parts = dirichlet_label_split(y, 4, 0.3, random_state=2)
    dist = label_distributions(y, parts)
    assert list(dist.columns) == ["covid", "flu", "rsv"]  # sorted
    assert dist.index.name == "client" and list(dist.index) == [0, 1, 2, 3]
    np.testing.assert_allclose(dist.sum(axis=1), 1.0)
    for client, part in enumerate(parts):
        counts = Counter(y.iloc[part])
        for label in dist.columns:
            assert dist.loc[client, label] == pytest.approx(counts[label] / len(part))


def test_label_distributions_with_given_classes_and_named_clients() -> None:
    y = np.array([2, 2, 0, 0, 0, 1])
    dist = label_distributions(y, {"a": [0, 1, 2], "b": [3, 4, 5]}, classes=[2, 1, 0, 7])
    expected = pd.DataFrame(
        [[2 / 3, 0, 1 / 3, 0], [0, 1 / 3, 2 / 3, 0]],
        index=pd.Index(["a", "b"], name="client"),
        columns=pd.Index([2, 1, 0, 7], name="class"),
    )
    pd.testing.assert_frame_equal(dist, expected, check_dtype=False)


# -- distances -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "q", "support", "tv", "emd"),
    [
        ([1, 0, 0], [0, 0, 1], None, 1.0, 2.0),
        ([1, 0, 0], [0, 0, 1], [0, 1, 10], 1.0, 10.0),
        ([0.5, 0.5, 0], [0, 0.5, 0.5], None, 0.5, 1.0),
        ([0.2, 0.3, 0.5], [0.2, 0.3, 0.5], None, 0.0, 0.0),
        ([0.25, 0.75], [0.75, 0.25], [1.0, 3.0], 0.5, 1.0),
    ],
)
def test_distances_against_hand_computed_values(
    p: list[float], q: list[float], support: list[float] | None, tv: float, emd: float
) -> None:
    assert total_variation(p, q) == pytest.approx(tv)
    assert earth_movers(p, q, support=support) == pytest.approx(emd)
    assert earth_movers(q, p, support=support) == pytest.approx(emd)


def test_distances_against_plain_formulas_and_scipy() -> None:
    rng = np.random.default_rng(4)
    for _ in range(50):
        k = int(rng.integers(2, 12))
        p, q = rng.dirichlet(np.ones(k)), rng.dirichlet(np.full(k, 0.3))
        support = np.sort(rng.normal(size=k) * 5)
        assert total_variation(p, q) == pytest.approx(0.5 * np.abs(p - q).sum())
        assert total_variation(p, q) == pytest.approx(np.maximum(p - q, 0).sum())  # same thing
        # 1-D W1 is the area between the two CDFs
        area = np.sum(np.abs(np.cumsum(p) - np.cumsum(q))[:-1] * np.diff(support))
        assert earth_movers(p, q, support=support) == pytest.approx(area)
        assert earth_movers(p, q, support=support) == pytest.approx(
            wasserstein_distance(support, support, p, q)
        )


def transport_cost_01(p: np.ndarray, q: np.ndarray) -> float:
    """Optimal transport between p and q with the 0/1 ground metric, as a linear programme."""
    k = len(p)
    cost = 1.0 - np.eye(k)
    rows = np.kron(np.eye(k), np.ones(k))  # sum_j plan[i, j] = p[i]
    cols = np.kron(np.ones(k), np.eye(k))  # sum_i plan[i, j] = q[j]
    result = linprog(
        cost.ravel(), A_eq=np.vstack([rows, cols]), b_eq=np.concatenate([p, q]), bounds=(0, None)
    )
    assert result.status == 0
    return float(result.fun)


def test_earth_movers_with_the_01_metric_is_total_variation() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        k = int(rng.integers(2, 8))
        p, q = rng.dirichlet(np.ones(k)), rng.dirichlet(np.full(k, 0.5))
        assert transport_cost_01(p, q) == pytest.approx(total_variation(p, q), abs=1e-7)
    # on a line, the two agree for two classes one unit apart (there the line metric is 0/1) ...
    assert earth_movers([0.9, 0.1], [0.3, 0.7]) == pytest.approx(
        total_variation([0.9, 0.1], [0.3, 0.7])
    )
    # ... and not beyond: moving mass two classes along costs twice
    assert earth_movers([1, 0, 0], [0, 0, 1]) == pytest.approx(
        2 * total_variation([1, 0, 0], [0, 0, 1])
    )


def test_skew_report_for_numeric_labels_matches_counting_and_scipy() -> None:
    rng = np.random.default_rng(6)
    y = rng.choice([1, 2, 5], size=900)
    parts = dirichlet_label_split(y, 6, 0.5, random_state=6)
    report = skew_report(y, parts)
    assert list(report.columns) == ["size", "total_variation", "earth_movers"]
    assert report["size"].tolist() == [len(p) for p in parts]
    for client, part in enumerate(parts):
        assert report.loc[client, "total_variation"] == pytest.approx(plain_tv(y, part))
        # the classes sit at their values: W1 between the client's labels and all labels
        assert report.loc[client, "earth_movers"] == pytest.approx(wasserstein_distance(y[part], y))


def test_skew_report_for_unordered_labels_uses_the_01_metric() -> None:
    y = np.array(["a"] * 30 + ["b"] * 50 + ["c"] * 20)
    parts = {"north": np.arange(0, 40), "south": np.arange(40, 100)}
    report = skew_report(y, parts)
    assert list(report.index) == ["north", "south"]
    # north: a 30/40, b 10/40; pooled a .3, b .5, c .2 -> TV = 0.5 * (.45 + .25 + .2)
    assert report.loc["north", "total_variation"] == pytest.approx(0.45)
    np.testing.assert_allclose(report["earth_movers"], report["total_variation"])


def test_pooled_distribution_is_that_of_the_clients_rows() -> None:
    y = np.array([0, 0, 1, 1, 1, 1])
    report = skew_report(y, [[0, 2], [1, 3]])  # rows 4 and 5 are at no client
    np.testing.assert_allclose(report["total_variation"], [0.0, 0.0])


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: iid_split(10, 0), r"n_clients must be between 1 and the number of rows \(10\)"),
        (lambda: iid_split(10, 11), r"n_clients must be between 1 and the number of rows \(10\)"),
        (lambda: iid_split(10, 2.0), "n_clients must be an integer"),
        (lambda: iid_split(0, 1), "no rows to split"),
        (lambda: iid_split([], 1), "no rows to split"),
        (lambda: iid_split(True, 1), "n_or_y must be the number of rows"),
        (lambda: iid_split(3.5, 1), "n_or_y must be the number of rows"),
        (lambda: dirichlet_label_split([0, 1], 2, 0.0), "alpha must be a finite number > 0"),
        (lambda: dirichlet_label_split([0, 1], 2, -1), "alpha must be a finite number > 0"),
        (lambda: dirichlet_label_split([0, 1], 2, np.nan), "alpha must be a finite number > 0"),
        (lambda: quantity_skew_split(5, 2, np.inf), "alpha must be a finite number > 0"),
        (lambda: quantity_skew_split(5, 2, "1"), "alpha must be a finite number > 0"),
        (lambda: dirichlet_label_split([], 1, 1.0), "y is empty"),
        (lambda: dirichlet_label_split([0, np.nan, 1], 2, 1.0), "1 missing label.*position 1"),
        (lambda: dirichlet_label_split(["a", None], 1, 1.0), "missing label.*position 1"),
        (lambda: dirichlet_label_split(np.zeros((3, 2)), 1, 1.0), "one-dimensional"),
        (
            lambda: dirichlet_label_split(pd.DataFrame({"dx": [0, 1]}), 1, 1.0),
            r"got a DataFrame with columns \['dx'\]; pass one column",
        ),
        (
            lambda: dirichlet_label_split([0, 1, 0], 2, 1.0, min_size=2),
            "needs 4 rows but there are 3",
        ),
        (lambda: quantity_skew_split(9, 3, 1.0, min_size=-1), "min_size must be an integer >= 0"),
        (lambda: quantity_skew_split(9, 3, 1.0, max_tries=0), "max_tries must be an integer >= 1"),
        (
            lambda: dirichlet_label_split(labels(500), 50, 0.001, min_size=5, random_state=0),
            "some client always had fewer than min_size=5 rows.*pass a larger alpha, fewer clients",
        ),
        (
            lambda: quantity_skew_split(500, 50, 0.001, min_size=5, max_tries=20, random_state=0),
            "in 20 draws.*pass a larger alpha, fewer clients",
        ),
    ],
)
def test_split_errors(call: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: label_distributions([0, 1], [[0], []]), "client 1 has no rows"),
        (
            lambda: label_distributions([0, 1], {"x": [0, 2]}),
            "client 'x': row position 2 is outside 0..1",
        ),
        (lambda: label_distributions([0, 1], [[0.0, 1.0]]), "row positions must be integers"),
        (lambda: label_distributions([0, 1], []), "parts is empty"),
        (
            lambda: label_distributions([0, 1, 3], [[0, 1, 2]], classes=[0, 1]),
            r"labels \[3\] that are not in classes",
        ),
        (
            lambda: label_distributions([0, 1], [[0, 1]], classes=[0, 1, 0]),
            "classes must be distinct",
        ),
        (lambda: skew_report([0, None], [[0, 1]]), "missing label"),
        (lambda: total_variation([0.5, 0.5], [1.0]), "same classes, got lengths 2 and 1"),
        (lambda: total_variation([2, 3], [0.5, 0.5]), "p sums to 5, not 1.*counts / counts.sum"),
        (lambda: total_variation([0.5, 0.5], [1.5, -0.5]), "q must hold finite, non-negative"),
        (lambda: total_variation([0.5, np.nan], [0.5, 0.5]), "p must hold finite"),
        (lambda: total_variation(["a"], [1.0]), "p must be a vector of probabilities"),
        (lambda: total_variation([], []), "non-empty one-dimensional"),
        (
            lambda: total_variation(pd.Series([1.0], index=["a"]), pd.Series([1.0], index=["b"])),
            r"different classes.*q.reindex\(p.index, fill_value=0\)",
        ),
        (
            lambda: earth_movers([0.5, 0.5], [1, 0], support=[0, 1, 2]),
            "support must be 2 finite numbers",
        ),
        (
            lambda: earth_movers([0.5, 0.5], [1, 0], support=[0, np.inf]),
            "support must be 2 finite numbers",
        ),
        (lambda: earth_movers([0.5, 0.5], [1, 0], support=["a", "b"]), "support must be numbers"),
    ],
)
def test_measure_errors(call: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


# -- package ---------------------------------------------------------------------------------


def test_the_package_exports_the_functions_lazily() -> None:
    assert horizontal.dirichlet_label_split is dirichlet_label_split
    assert set(horizontal.__all__) >= {
        "iid_split",
        "skew_report",
        "total_variation",
        "earth_movers",
    }
    code = "import sys, horizontal; print([m for m in ('pandas', 'scipy') if m in sys.modules])"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
