"""One tree, grown level by level from the histograms of every party's columns.

The label party drives the growth (:func:`grow`). It holds each row's gradient and hessian in
fixed point (``FG`` fractional bits: sums of them are exact, so an encrypted histogram and its
plaintext twin hold the same integers) and the rows of every node. Level by level it asks each
party's :class:`HistogramSource` for the histograms of the level's nodes, picks each node's
best split across all parties' columns (:func:`vfl.boost.splits.best_split`), and has the
owner of the winning column split the node's rows. The owner keeps the split (the column and
the threshold) in its own table and answers with an id; the label party's tree holds only the
owner's name and that id (:class:`Tree`), so no threshold leaves its party.

Histogram subtraction: of two siblings, only the one with fewer rows is built; the other is
its parent's histogram minus it (XGBoost, LightGBM, FATE). A node becomes a leaf at
``max_depth``, with fewer than two rows, or when no split of any party gains; its weight is
``-G / (H + lambda)`` times the learning rate.

A source here is in-process (:class:`LocalSource`: a party's bin codes); the federated
protocol puts the same calls behind messages (encrypted gradients in, encrypted histograms
out) and its trees equal these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from vfl.boost.splits import Candidate, SplitRule, best_split, leaf_weight

__all__ = ["FG", "HistogramSource", "LocalSource", "SplitTable", "Tree", "grow", "to_fixed"]

FG = 24
"""Fractional bits of the gradients and hessians. Their sums are exact in float64 while below
``2**53``: ``2**29`` rows of values below 1 (logistic and softmax), ``2**23`` of values up to
64 (clipped regression and noised gradients; the estimators refuse more rows)."""


def to_fixed(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Gradients or hessians rounded to ``2**-FG`` (int64)."""
    out: np.ndarray[Any, Any] = np.rint(np.asarray(values, dtype=np.float64) * 2.0**FG).astype(
        np.int64
    )
    return out


class HistogramSource(Protocol):
    """What the grower needs of a party: histograms of node rows, and splitting a node."""

    def histograms(
        self, nodes: list[np.ndarray[Any, Any]], g: np.ndarray[Any, Any], h: np.ndarray[Any, Any]
    ) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
        """Per node (its row positions), the ``(G, H)`` histograms ``(columns, bins + 1,
        outputs)`` of the fixed-point ``g`` and ``h`` (``(rows, outputs)``)."""
        ...

    def split(
        self, rows: np.ndarray[Any, Any], candidate: Candidate
    ) -> tuple[int, np.ndarray[Any, Any]]:
        """Record ``candidate`` in the owner's table; its id and which of ``rows`` go left."""
        ...


@dataclass
class SplitTable:
    """A party's splits: per id, the column, the bin (codes ``<= bin`` go left) and where the
    missing values go. Held by the owner only."""

    feature: list[int] = field(default_factory=list)
    bin: list[int] = field(default_factory=list)
    missing_left: list[bool] = field(default_factory=list)

    def add(self, candidate: Candidate) -> int:
        self.feature.append(candidate.feature)
        self.bin.append(candidate.bin)
        self.missing_left.append(candidate.missing_left)
        return len(self.feature) - 1

    def goes_left(self, split: int, codes: np.ndarray[Any, Any], missing: int) -> Any:
        """Which rows of bin ``codes`` (``(rows, columns)``) split ``split`` sends left."""
        col = codes[:, self.feature[split]]
        left = col <= self.bin[split]
        is_missing = col == missing
        return np.where(is_missing, self.missing_left[split], left)


class LocalSource:
    """A party's columns in this process: its bin codes ``(rows, columns)`` and its table."""

    def __init__(self, codes: np.ndarray[Any, Any], missing: int, rule: SplitRule) -> None:
        self.codes, self.missing, self.rule = codes, int(missing), rule
        self.table = SplitTable()
        self.width = int(missing) + 1
        self.columns = np.arange(codes.shape[1])
        """The columns this tree may split on (column subsampling; all by default)."""

    def histograms(
        self, nodes: list[np.ndarray[Any, Any]], g: np.ndarray[Any, Any], h: np.ndarray[Any, Any]
    ) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
        codes = self.codes[:, self.columns]
        return [histogram(codes[rows], g[rows], h[rows], self.width) for rows in nodes]

    def split(
        self, rows: np.ndarray[Any, Any], candidate: Candidate
    ) -> tuple[int, np.ndarray[Any, Any]]:
        candidate = replace(candidate, feature=int(self.columns[candidate.feature]))
        split = self.table.add(candidate)
        return split, self.table.goes_left(split, self.codes[rows], self.missing)


def histogram(
    codes: np.ndarray[Any, Any], g: np.ndarray[Any, Any], h: np.ndarray[Any, Any], width: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(G, H)``, each ``(columns, width, outputs)``: sums of ``g`` and ``h`` (``(rows,
    outputs)``, exact integers below ``2**53``) per column and bin code."""
    columns = codes.shape[1]
    outputs = g.shape[1]
    index = (codes.astype(np.int64) + np.arange(columns, dtype=np.int64) * width).ravel()
    size = columns * width
    out_g = np.empty((columns, width, outputs))
    out_h = np.empty((columns, width, outputs))
    for k in range(outputs):
        weights_g = np.repeat(g[:, k].astype(np.float64), columns)
        weights_h = np.repeat(h[:, k].astype(np.float64), columns)
        out_g[:, :, k] = np.bincount(index, weights_g, size).reshape(columns, width)
        out_h[:, :, k] = np.bincount(index, weights_h, size).reshape(columns, width)
    return out_g, out_h


@dataclass
class Tree:
    """A tree as the label party holds it: per node, its owner (an index into ``parties``;
    -1 for a leaf), the owner's split id, its children, and a leaf's weights (``(nodes,
    outputs)``, zero elsewhere)."""

    parties: list[str]
    owner: list[int] = field(default_factory=list)
    split: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    value: list[np.ndarray[Any, Any]] = field(default_factory=list)
    train_leaf: np.ndarray[Any, Any] | None = field(default=None, repr=False)
    """The leaf of each row the tree was grown on or routed with it (the validation rows; -1
    for the others): the grower knows it without asking anyone again."""

    def add(self, outputs: int) -> int:
        self.owner.append(-1)
        self.split.append(-1)
        self.left.append(-1)
        self.right.append(-1)
        self.value.append(np.zeros(outputs))
        return len(self.owner) - 1

    @property
    def n_leaves(self) -> int:
        return sum(1 for o in self.owner if o < 0)

    def predict(self, goes_left: dict[str, Any], rows: int) -> np.ndarray[Any, Any]:
        """Leaf weights of ``rows`` rows, where ``goes_left[party](split_id)`` says which rows
        that party's split sends left."""
        node = np.zeros(rows, dtype=np.int64)
        done = np.zeros(rows, dtype=bool)
        while True:
            owners = np.asarray(self.owner)[node]
            active = (owners >= 0) & ~done
            if not active.any():
                break
            for n in np.unique(node[active]):
                here = node == n
                party = self.parties[self.owner[n]]
                left = np.asarray(goes_left[party](self.split[n]), dtype=bool)
                node[here & left] = self.left[n]
                node[here & ~left] = self.right[n]
            done = np.asarray(self.owner)[node] < 0
        return np.stack(self.value)[node]


def grow(
    sources: Mapping[str, HistogramSource],
    g: np.ndarray[Any, Any],
    h: np.ndarray[Any, Any],
    rule: SplitRule,
    *,
    max_depth: int,
    learning_rate: float,
    rows: np.ndarray[Any, Any] | None = None,
    extra: np.ndarray[Any, Any] | None = None,
    parties: list[str] | None = None,
) -> Tree:
    """One tree on the rows ``rows`` (all by default) from the fixed-point ``g`` and ``h``
    (``(rows, outputs)`` int64, :func:`to_fixed`), level by level; ``sources`` in the order
    ties go (the label party's own columns first, by convention). ``extra`` rows (the
    validation rows) are routed with the node they reach but grow nothing: their leaves
    land in ``tree.train_leaf`` too. ``parties``: the tree's list of owners, where ``sources``
    is a part of them (by default, the sources)."""
    outputs = g.shape[1]
    scale = 2.0**-FG
    tree = Tree(list(parties) if parties is not None else list(sources))
    all_rows = np.arange(len(g)) if rows is None else np.asarray(rows, dtype=np.int64)
    root = tree.add(outputs)
    tree.train_leaf = np.full(len(g), -1, dtype=np.int64)
    no_rows = np.zeros(0, dtype=np.int64)
    held = no_rows if extra is None else np.asarray(extra, dtype=np.int64)
    level: list[tuple[int, np.ndarray[Any, Any], np.ndarray[Any, Any]]] = [(root, all_rows, held)]
    parent_hists: dict[int, dict[str, tuple[Any, Any]]] = {}
    siblings: dict[int, tuple[int, int]] = {}  # node: (its parent, its sibling)
    for depth in range(max_depth + 1):
        splittable = [(n, r) for n, r, _ in level if depth < max_depth and len(r) >= 2]
        hists = _level_histograms(sources, splittable, parent_hists, siblings, g, h)
        parent_hists = {}
        following: list[tuple[int, np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        for node, node_rows, node_extra in level:
            total_g = g[node_rows].sum(axis=0).astype(np.float64) * scale
            total_h = h[node_rows].sum(axis=0).astype(np.float64) * scale
            best: tuple[str, Candidate] | None = None
            for party, (hg, hh) in hists.get(node, {}).items():
                found = best_split(hg * scale, hh * scale, total_g, total_h, rule)
                if found is not None and (best is None or found.gain > best[1].gain):
                    best = (party, found)
            if best is None:
                tree.value[node] = leaf_weight(total_g, total_h, rule.reg_lambda) * learning_rate
                tree.train_leaf[node_rows] = node
                tree.train_leaf[node_extra] = node
                continue
            party, candidate = best
            both = np.concatenate([node_rows, node_extra])
            split, goes = sources[party].split(both, candidate)
            goes = np.asarray(goes, dtype=bool)
            left, left_extra = goes[: len(node_rows)], goes[len(node_rows) :]
            tree.owner[node], tree.split[node] = tree.parties.index(party), int(split)
            tree.left[node], tree.right[node] = tree.add(outputs), tree.add(outputs)
            following += [
                (tree.left[node], node_rows[left], node_extra[left_extra]),
                (tree.right[node], node_rows[~left], node_extra[~left_extra]),
            ]
            parent_hists[node] = hists[node]
            siblings[tree.left[node]] = (node, tree.right[node])
            siblings[tree.right[node]] = (node, tree.left[node])
        level = following
        if not level:
            break
    return tree


def _level_histograms(
    sources: Mapping[str, HistogramSource],
    nodes: list[tuple[int, np.ndarray[Any, Any]]],
    parents: dict[int, dict[str, tuple[Any, Any]]],
    siblings: dict[int, tuple[int, int]],
    g: np.ndarray[Any, Any],
    h: np.ndarray[Any, Any],
) -> dict[int, dict[str, tuple[Any, Any]]]:
    """The histograms of ``nodes`` (one level): where both children of a parent are in the
    level, only the one with fewer rows is built and the other is the parent's minus it."""
    rows_of = dict(nodes)
    built: list[tuple[int, np.ndarray[Any, Any]]] = []
    derived: list[tuple[int, int, int]] = []  # (node, parent, built sibling)
    for node, rows in nodes:
        parent, sibling = siblings.get(node, (-1, -1))
        if parent in parents and sibling in rows_of:
            smaller = len(rows) < len(rows_of[sibling]) or (
                len(rows) == len(rows_of[sibling]) and node < sibling
            )
            if not smaller:
                derived.append((node, parent, sibling))
                continue
        built.append((node, rows))
    out: dict[int, dict[str, tuple[Any, Any]]] = {n: {} for n, _ in nodes}
    for party, source in sources.items():
        for (node, _), hist in zip(
            built, source.histograms([r for _, r in built], g, h), strict=True
        ):
            out[node][party] = hist
    for node, parent, sibling in derived:
        for party, (pg, ph) in parents[parent].items():
            sg, sh = out[sibling][party]
            out[node][party] = (pg - sg, ph - sh)
    return out
