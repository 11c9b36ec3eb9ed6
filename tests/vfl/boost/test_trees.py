"""Histogram trees against an exact reference: the same splits, node for node, as a brute
force over every party's columns, thresholds and missing sides computed from the rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from vfl.boost.bins import BinMapper
from vfl.boost.splits import SplitRule, leaf_weight, score
from vfl.boost.tree import FG, LocalSource, grow, to_fixed


def _table(seed: int, rows: int = 300) -> tuple[dict[str, pd.DataFrame], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5))
    x[rng.random(x.shape) < 0.1] = np.nan  # missing values
    y = (np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 3]) * np.nan_to_num(x[:, 4]) > 0).astype(float)
    frame = pd.DataFrame(x, columns=[f"c{j}" for j in range(5)])
    return {"label": frame.iloc[:, :2], "host": frame.iloc[:, 2:]}, y


def _reference(
    codes: dict[str, Any],
    g: Any,
    h: Any,
    rows: Any,
    depth: int,
    rule: SplitRule,
    max_depth: int,
    missing: int,
    out: list[Any],
) -> None:
    """Depth-first brute force from the rows: every party, column, bin and missing side."""
    scale = 2.0**-FG
    tg, th = g[rows].sum(axis=0) * scale, h[rows].sum(axis=0) * scale
    best = None
    if depth < max_depth and len(rows) >= 2:
        parent = score(tg, th, rule.reg_lambda)
        for party, c in codes.items():
            for col in range(c.shape[1]):
                values = c[rows, col]
                for b in range(missing - 1):
                    for missing_left in (False, True):
                        left = np.where(values == missing, missing_left, values <= b)
                        lg, lh = (
                            g[rows][left].sum(axis=0) * scale,
                            h[rows][left].sum(axis=0) * scale,
                        )
                        rg, rh = tg - lg, th - lh
                        if not (
                            lh.sum() > 0
                            and rh.sum() > 0
                            and lh.sum() >= rule.min_child_weight
                            and rh.sum() >= rule.min_child_weight
                        ):
                            continue
                        gain = (
                            score(lg, lh, rule.reg_lambda) + score(rg, rh, rule.reg_lambda) - parent
                        ) / 2
                        key = (gain, party, col, b, missing_left, left)
                        if gain > 0 and (best is None or gain > best[0] + 1e-12):
                            best = key
    if best is None:
        out.append(("leaf", np.round(leaf_weight(tg, th, rule.reg_lambda), 9)))
        return
    _, party, col, b, missing_left, left = best
    out.append((party, col, b, missing_left))
    _reference(codes, g, h, rows[left], depth + 1, rule, max_depth, missing, out)
    _reference(codes, g, h, rows[~left], depth + 1, rule, max_depth, missing, out)


def _walk(tree: Any, sources: Any, node: int, out: list[Any]) -> None:
    if tree.owner[node] < 0:
        out.append(("leaf", np.round(tree.value[node], 9)))
        return
    party = tree.parties[tree.owner[node]]
    table, split = sources[party].table, tree.split[node]
    out.append((party, table.feature[split], table.bin[split], table.missing_left[split]))
    _walk(tree, sources, tree.left[node], out)
    _walk(tree, sources, tree.right[node], out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_trees_are_the_exact_references_split_for_split(seed: int) -> None:
    parts, y = _table(seed)
    rule = SplitRule(reg_lambda=1.0, min_child_weight=0.5)
    mappers = {p: BinMapper(max_bin=8, party=p) for p in parts}
    codes = {p: mappers[p].fit_transform(f) for p, f in parts.items()}
    p = np.full(len(y), y.mean())
    g, h = to_fixed((p - y)[:, None]), to_fixed((p * (1 - p))[:, None])
    sources = {name: LocalSource(c, 8, rule) for name, c in codes.items()}
    tree = grow(sources, g, h, rule, max_depth=3, learning_rate=1.0)
    got: list[Any] = []
    _walk(tree, sources, 0, got)
    want: list[Any] = []
    _reference(codes, g, h, np.arange(len(y)), 0, rule, 3, 8, want)
    assert len(got) == len(want) > 7  # splits happened
    for a, b in zip(got, want, strict=True):
        if a[0] == "leaf":
            np.testing.assert_allclose(a[1], b[1], atol=1e-9)
        else:
            assert a == b


def test_bins_put_missing_values_apart_and_name_bad_columns() -> None:
    frame = pd.DataFrame({"a": [1.0, 2.0, np.nan, 4.0, 2.0], "b": [0.0, 0.0, 1.0, 1.0, 1.0]})
    mapper = BinMapper(max_bin=4, party="lab")
    codes = mapper.fit_transform(frame)
    assert codes[2, 0] == mapper.missing_bin == 4
    assert list(codes[:, 0]) == [0, 1, 4, 2, 1] and list(codes[:, 1]) == [0, 0, 1, 1, 1]
    assert mapper.threshold(0, 0) == 1.5  # a split "bin <= 0" is "a <= 1.5"
    with pytest.raises(ValueError, match="party 'lab': column 'a' is infinite at row 1"):
        mapper.transform(frame.assign(a=[1.0, np.inf, 2.0, 3.0, 4.0]))
    with pytest.raises(ValueError, match=r"party 'lab': columns \['c'\] are not numeric"):
        BinMapper(party="lab").fit(pd.DataFrame({"c": ["x", "y"]}))
    with pytest.raises(ValueError, match=r"max_bin must be an integer in 2\.\.1024"):
        BinMapper(max_bin=1)


def test_the_twin_learns_as_scikit_learns_histogram_boosting() -> None:
    """On breast cancer split 12/18 between two parties, the twin's test AUC is within 0.01
    of scikit-learn's HistGradientBoostingClassifier with the same trees, depth, rate and
    bins (no early stopping, no leaf limit)."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split

    from vfl.boost.objectives import Logistic
    from vfl.boost.twin import boost_twin

    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    split = {"imaging": list(x.columns[12:]), "lab": list(x.columns[:12])}
    mappers = {p: BinMapper(max_bin=32, party=p).fit(xtr[c]) for p, c in split.items()}
    train = {p: mappers[p].transform(xtr[c]) for p, c in split.items()}
    test = {p: mappers[p].transform(xte[c]) for p, c in split.items()}
    model = boost_twin(
        train,
        32,
        ytr.to_numpy().astype(float),
        Logistic(),
        n_estimators=30,
        max_depth=3,
        learning_rate=0.3,
        rule=SplitRule(reg_lambda=1.0, min_child_weight=1.0),
    )
    # the loss falls
    assert all(
        a > b for a, b in zip(model.losses, model.losses[1:], strict=False)
    )  # the loss falls
    ours = roc_auc_score(yte, model.raw(test)[:, 0])
    theirs = HistGradientBoostingClassifier(
        max_iter=30,
        max_depth=3,
        learning_rate=0.3,
        max_bins=32,
        max_leaf_nodes=None,
        early_stopping=False,
        l2_regularization=1.0,
        min_samples_leaf=1,
        random_state=0,
    ).fit(xtr, ytr)
    reference = roc_auc_score(yte, theirs.decision_function(xte))
    assert ours > 0.97 and abs(ours - reference) < 0.01, (ours, reference)
