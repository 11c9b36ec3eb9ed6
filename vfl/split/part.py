"""One party's fitted part of a split network, in vflink's model format: its columns, their
standardisation, its bottom module's parameters (and, at the label party, the top's, the
classes or the target's scaling) -- nothing of another party. The modules' architecture is
rebuilt from the estimator's hyperparameters (a user-given module must be given again)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vfl import persistence

__all__ = ["KIND", "SplitPart"]

KIND = "vfl.split.SplitPart"


@dataclass
class SplitPart(persistence.SavedPart):
    """A party's part: ``bottom`` and ``top`` are parameter arrays by name (``state_dict``)."""

    KIND = KIND

    party: str
    role: str
    columns: list[str]
    mean: np.ndarray[Any, Any]
    scale: np.ndarray[Any, Any]
    bottom: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    top: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def input_columns(self) -> list[str]:
        """The columns its design reads."""
        return list(self.columns)

    def _fields(self) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
        meta = {
            "party": self.party,
            "role": self.role,
            "columns": self.columns,
            "extra": self.extra,
        }
        arrays = {"mean": self.mean, "scale": self.scale}
        arrays.update({f"bottom.{k}": v for k, v in self.bottom.items()})
        arrays.update({f"top.{k}": v for k, v in self.top.items()})
        return meta, arrays

    @classmethod
    def load(cls, path: str | Path) -> SplitPart:
        meta, arrays = persistence.load_model(path, kind=KIND)
        try:
            part = cls(
                party=str(meta["party"]),
                role=str(meta["role"]),
                columns=[str(c) for c in meta["columns"]],
                mean=arrays["mean"].astype(float),
                scale=arrays["scale"].astype(float),
                bottom={k[7:]: v for k, v in arrays.items() if k.startswith("bottom.")},
                top={k[4:]: v for k, v in arrays.items() if k.startswith("top.")},
                extra=dict(meta.get("extra", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path} is not a saved split-network part: {exc}") from None
        if part.mean.shape != (len(part.columns),) or part.scale.shape != part.mean.shape:
            raise ValueError(f"{path}: the scaling does not match its {len(part.columns)} columns")
        return part
