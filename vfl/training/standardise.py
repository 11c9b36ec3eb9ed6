"""The standardiser every family shares: a party's columns centred on their own means and
divided by their own standard deviations, learnt from its own rows only (nothing crosses).

The split network (:mod:`vfl.split`), the vertical transfer estimator and the encoder transfer
head (:mod:`transfer`) and the pooled horizontal baseline all scale this way; the vertical
linear models keep their own (:mod:`vfl.linear.model`: they refuse constant columns and can
clip to fences first), and the horizontal path agrees its scaling between clients
(:mod:`horizontal.scaling`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["Standardiser"]


class Standardiser:
    """Centre columns on their means and divide by their population standard deviations
    (``ddof=0``); a constant column is divided by 1, so it becomes zeros rather than NaN.

    scikit-learn's ``StandardScaler`` on a party's numpy array, with nothing to configure, and
    saved as two named arrays of vflink's model format (:meth:`to_arrays`,
    :meth:`from_arrays`), so that a fitted part keeps the file layout it always had.

    Attributes
    ----------
    mean_ : ndarray of shape (n_columns,)
        The columns' means.
    scale_ : ndarray of shape (n_columns,)
        Their standard deviations, 1 where a column is constant.
    """

    mean_: np.ndarray[Any, Any]
    scale_: np.ndarray[Any, Any]

    def fit(self, values: Any) -> Standardiser:
        """Learn the means and scales of ``values`` (rows, columns).

        Raises
        ------
        ValueError
            ``values`` is not a table of rows and columns.
        """
        values = np.asarray(values)
        if values.ndim != 2:
            raise ValueError(
                f"a standardiser fits on a table of (rows, columns), got shape {values.shape}"
            )
        std = values.std(axis=0)
        self.mean_ = values.mean(axis=0)
        self.scale_ = np.where(std > 0, std, 1.0)
        return self

    def transform(self, values: Any) -> np.ndarray[Any, Any]:
        """``(values - mean_) / scale_``.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit` (or :meth:`from_arrays`).
        ValueError
            ``values`` has another number of columns than the fit.
        """
        if not hasattr(self, "mean_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(
                "This Standardiser instance is not fitted yet. Call 'fit' with appropriate "
                "arguments before using this estimator."
            )
        values = np.asarray(values)
        if values.ndim != 2 or values.shape[1] != len(self.mean_):
            raise ValueError(
                f"the standardiser was fitted on {len(self.mean_)} columns, got values of shape "
                f"{values.shape}: pass the columns it was fitted on"
            )
        out: np.ndarray[Any, Any] = (values - self.mean_) / self.scale_
        return out

    def fit_transform(self, values: Any) -> np.ndarray[Any, Any]:
        """:meth:`fit`, then :meth:`transform` the same ``values``."""
        return self.fit(values).transform(values)

    def to_arrays(self, prefix: str = "") -> dict[str, np.ndarray[Any, Any]]:
        """``{prefix + "mean": mean_, prefix + "scale": scale_}`` as float arrays, for
        :func:`vfl.persistence.save_model`."""
        return {
            f"{prefix}mean": np.asarray(self.mean_, dtype=float),
            f"{prefix}scale": np.asarray(self.scale_, dtype=float),
        }

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, np.ndarray[Any, Any]], prefix: str = ""
    ) -> Standardiser:
        """The standardiser :meth:`to_arrays` wrote (``prefix + "mean"``, ``prefix +
        "scale"``).

        Raises
        ------
        ValueError
            An array is missing, or the two are not of one shape ``(n_columns,)``.
        """
        names = (f"{prefix}mean", f"{prefix}scale")
        missing = [name for name in names if name not in arrays]
        if missing:
            raise ValueError(f"the saved scaling lacks the arrays {missing}")
        mean, scale = (np.asarray(arrays[name], dtype=float) for name in names)
        if mean.ndim != 1 or scale.shape != mean.shape:
            raise ValueError(
                f"the saved scaling's {names[0]} has shape {mean.shape} and its {names[1]} "
                f"{scale.shape}: one value per column expected in each"
            )
        out = cls()
        out.mean_, out.scale_ = mean, scale
        return out

    def __repr__(self) -> str:
        fitted = f"{len(self.mean_)} columns" if hasattr(self, "mean_") else "not fitted"
        return f"Standardiser({fitted})"
