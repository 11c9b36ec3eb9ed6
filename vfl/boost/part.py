"""A party's saved part of a SecureBoost model: only what that party holds.

A host's part: its columns' cuts and its split table (column, bin, missing side per split
id): the thresholds of its splits, which never leave it. The label party's part: the same of
its own columns, and the trees (per node: owner, split id, children, leaf weights), the
starting score and the targets' classes or scale. Written with :mod:`vfl.persistence` (an
``.npz`` of numbers and a JSON header; never unpickled).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vfl import persistence
from vfl.boost.bins import BinMapper
from vfl.boost.tree import SplitTable, Tree

__all__ = ["KIND", "BoostPart"]

KIND = "vertical-secureboost"


@dataclass
class BoostPart(persistence.SavedPart):
    """``role``: ``"active"`` (the label party: ``trees`` and ``start`` set) or
    ``"passive"``; ``extra``: the hyperparameters and targets' description (JSON)."""

    KIND = KIND

    party: str
    role: str
    mapper: BinMapper
    table: SplitTable
    trees: list[Tree] = field(default_factory=list)
    start: np.ndarray[Any, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def _fields(self) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
        cuts = self.mapper.cuts_ or []
        meta = {
            "party": self.party,
            "role": self.role,
            "columns": list(self.mapper.columns_),
            "max_bin": int(self.mapper.max_bin),
            "parties": self.trees[0].parties if self.trees else [],
            "extra": self.extra,
        }
        arrays: dict[str, np.ndarray[Any, Any]] = {
            "cuts": np.concatenate([np.asarray(c, dtype=np.float64) for c in cuts])
            if cuts
            else np.zeros(0),
            "cut_counts": np.array([len(c) for c in cuts], dtype=np.int64),
            "split_feature": np.asarray(self.table.feature, dtype=np.int64),
            "split_bin": np.asarray(self.table.bin, dtype=np.int64),
            "split_missing_left": np.asarray(self.table.missing_left, dtype=np.int8),
        }
        if self.role == "active" and self.start is not None:
            nodes = [len(t.owner) for t in self.trees]
            outputs = len(self.start)
            arrays.update(
                {
                    "start": np.asarray(self.start, dtype=np.float64),
                    "tree_nodes": np.asarray(nodes, dtype=np.int64),
                    "owner": np.asarray([o for t in self.trees for o in t.owner], dtype=np.int64),
                    "split": np.asarray([s for t in self.trees for s in t.split], dtype=np.int64),
                    "left": np.asarray([v for t in self.trees for v in t.left], dtype=np.int64),
                    "right": np.asarray([v for t in self.trees for v in t.right], dtype=np.int64),
                    "value": np.asarray(
                        [v for t in self.trees for v in t.value], dtype=np.float64
                    ).reshape(-1, outputs),
                }
            )
        return meta, arrays

    @property
    def input_columns(self) -> list[str]:
        """The columns its bins read."""
        return list(self.mapper.columns_)

    @classmethod
    def load(cls, path: str | Path) -> BoostPart:
        meta, arrays = persistence.load_model(path, kind=KIND)
        try:
            mapper = BinMapper(int(meta["max_bin"]), party=str(meta["party"]))
            counts = arrays["cut_counts"].astype(np.int64)
            mapper.cuts_ = np.split(arrays["cuts"].astype(np.float64), np.cumsum(counts)[:-1])
            if len(counts) == 0:
                mapper.cuts_ = []
            mapper.columns_ = [str(c) for c in meta["columns"]]
            table = SplitTable(
                [int(v) for v in arrays["split_feature"]],
                [int(v) for v in arrays["split_bin"]],
                [bool(v) for v in arrays["split_missing_left"]],
            )
            part = cls(
                str(meta["party"]), str(meta["role"]), mapper, table, extra=dict(meta["extra"])
            )
            if part.role == "active":
                part.start = arrays["start"].astype(np.float64)
                parties = [str(p) for p in meta["parties"]]
                bounds = np.concatenate([[0], np.cumsum(arrays["tree_nodes"])]).astype(int)
                for a, b in itertools.pairwise(bounds):
                    tree = Tree(parties)
                    tree.owner = [int(v) for v in arrays["owner"][a:b]]
                    tree.split = [int(v) for v in arrays["split"][a:b]]
                    tree.left = [int(v) for v in arrays["left"][a:b]]
                    tree.right = [int(v) for v in arrays["right"][a:b]]
                    tree.value = [np.array(v, dtype=np.float64) for v in arrays["value"][a:b]]
                    part.trees.append(tree)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path} is not a SecureBoost part: {exc}") from None
        if len(mapper.cuts_) != len(mapper.columns_):
            raise ValueError(f"{path} is not a SecureBoost part: its cuts and columns differ")
        return part
