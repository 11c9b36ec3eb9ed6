"""Each party's bins: its columns cut into at most ``max_bin`` ranges, the cuts kept at home.

Gradient boosting on histograms (XGBoost's ``hist``, LightGBM, scikit-learn's
``HistGradientBoosting*``, SecureBoost) looks at a column only through the bin each value
falls in. :class:`BinMapper` finds the cuts of each column of one party's table and turns the
table into bin codes; a split is then "bin ``<= b``" of a column, and the value it stands for,
``cuts[column][b]``, never leaves the party (the owner's lookup table).

The cuts are scikit-learn's (``HistGradientBoosting``'s ``_find_binning_thresholds``): with no
more distinct values than ``max_bin``, the midpoints between consecutive distinct values;
otherwise the column's percentiles at ``max_bin`` equal steps, interpolated, duplicates
dropped. A value ``x`` lands in bin ``searchsorted(cuts, x, side="left")``: bin ``b`` holds
``cuts[b - 1] < x <= cuts[b]``. Missing values (NaN) get the code ``max_bin``, a bin of their
own, which the split search sends left or right, whichever gains more (XGBoost's learned
default direction). Codes are ``uint8`` up to 255 bins, else ``uint16``.

Choices: no hessian-weighted sketch (XGBoost's ``approx``): the cuts depend on the party's own
values only, so binning needs no message and leaks nothing. Infinite values are refused, naming
the party and the column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["MAX_BIN_LIMIT", "BinMapper"]

MAX_BIN_LIMIT = 1024
"""The most bins a column may have (``max_bin``)."""


@dataclass
class BinMapper:
    """The cuts of one party's columns.

    Parameters
    ----------
    max_bin : int
        Bins per column for the values present (2 to :data:`MAX_BIN_LIMIT`); missing values
        have a bin of their own beside them.
    party : str
        The party the columns belong to (named in errors).
    """

    max_bin: int = 32
    party: str = "this party"

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_bin, bool)
            or not isinstance(self.max_bin, (int, np.integer))
            or not 2 <= self.max_bin <= MAX_BIN_LIMIT
        ):
            raise ValueError(
                f"max_bin must be an integer in 2..{MAX_BIN_LIMIT}, got {self.max_bin!r}"
            )
        self.cuts_: list[np.ndarray[Any, Any]] | None = None
        self.columns_: list[str] = []

    @property
    def missing_bin(self) -> int:
        """The code of a missing value."""
        return int(self.max_bin)

    def fit(self, frame: pd.DataFrame) -> BinMapper:
        """Find every column's cuts from its non-missing values."""
        values = self._values(frame)
        self.columns_ = [str(c) for c in frame.columns]
        cuts = []
        for j, name in enumerate(self.columns_):
            col = values[:, j]
            col = col[~np.isnan(col)]
            distinct = np.unique(col)
            if len(distinct) <= self.max_bin:
                cut = (distinct[:-1] + distinct[1:]) / 2.0
            else:
                steps = np.linspace(0, 100, self.max_bin + 1)[1:-1]
                cut = np.unique(np.percentile(col, steps, method="linear"))
            if not np.all(np.isfinite(cut)):
                raise ValueError(f"party {self.party!r}: column {name!r} has no finite cuts")
            cuts.append(cut.astype(np.float64))
        self.cuts_ = cuts
        return self

    def transform(self, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        """Bin codes, ``(rows, columns)``: ``0..len(cuts)`` for values, ``max_bin`` for NaN."""
        if self.cuts_ is None:
            raise RuntimeError(f"party {self.party!r}: the BinMapper is not fitted yet")
        if [str(c) for c in frame.columns] != self.columns_:
            raise ValueError(
                f"party {self.party!r}: columns {list(frame.columns)} differ from the fitted "
                f"{self.columns_}"
            )
        values = self._values(frame)
        dtype = np.uint8 if self.max_bin < 255 else np.uint16
        codes = np.empty(values.shape, dtype=dtype)
        for j, cut in enumerate(self.cuts_):
            col = values[:, j]
            out = np.searchsorted(cut, col, side="left")
            out[np.isnan(col)] = self.missing_bin
            codes[:, j] = out
        return codes

    def fit_transform(self, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        return self.fit(frame).transform(frame)

    def n_bins(self) -> np.ndarray[Any, Any]:
        """Bins in use per column (``len(cuts) + 1``), without the missing bin."""
        if self.cuts_ is None:
            raise RuntimeError(f"party {self.party!r}: the BinMapper is not fitted yet")
        return np.array([len(c) + 1 for c in self.cuts_], dtype=np.int64)

    def threshold(self, column: int, bin_: int) -> float:
        """The value a split "bin ``<= bin_``" of ``column`` stands for: ``x <= threshold``."""
        if self.cuts_ is None:
            raise RuntimeError(f"party {self.party!r}: the BinMapper is not fitted yet")
        return float(self.cuts_[column][bin_])

    def _values(self, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(
                f"party {self.party!r}: expected a DataFrame, got {type(frame).__name__}"
            )
        bad = [str(c) for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
        if bad:
            raise ValueError(
                f"party {self.party!r}: columns {bad} are not numeric; encode them first "
                "(e.g. one-hot or ordinal codes)"
            )
        values = frame.to_numpy(dtype=np.float64, na_value=np.nan)
        infinite = np.isinf(values)
        if infinite.any():
            row, col = np.argwhere(infinite)[0]
            raise ValueError(
                f"party {self.party!r}: column {frame.columns[col]!r} is infinite at row "
                f"{frame.index[row]!r}; replace it with a finite value or NaN (missing)"
            )
        return values
