"""Input checks shared by every vertical estimator: ``{party: DataFrame}``, labels, columns.

Every error names the party, the column or row and the fix (STYLE.md item 3). The checks run
at the door, before any party starts, so a bad input never surfaces as a failure deep inside a
protocol.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "LabelWarning",
    "VerticalFrames",
    "check_class_labels",
    "check_data_parties",
    "check_numeric",
    "check_parts",
    "check_targets",
    "warn_odd_classes",
]


class VerticalFrames:
    """Every party's columns of the same rows, ``{party: DataFrame}``, indexable by row as one
    table, so that scikit-learn's model selection can split it.

    ``cross_val_score``, ``GridSearchCV`` and ``train_test_split`` index ``X`` by row
    positions and need ``len`` and ``shape``. This container gives each party's frame the
    same rows and carries the label party, so a vertical estimator's ``fit(X, y)`` needs no
    further argument::

        X = VerticalFrames({"lab": lab, "imaging": imaging}, label_party="imaging")
        cross_val_score(VerticalLogisticRegression(), X, y, cv=3)

    In simulation only: it holds every party's data in this process.
    """

    def __init__(self, parts: dict[str, pd.DataFrame], *, label_party: str) -> None:
        self.parts = check_parts(parts, label_party)
        self.label_party = label_party

    def __len__(self) -> int:
        return len(next(iter(self.parts.values())))

    @property
    def shape(self) -> tuple[int, int]:
        return len(self), sum(frame.shape[1] for frame in self.parts.values())

    def __getitem__(self, rows: Any) -> VerticalFrames:
        """The rows at positions ``rows`` (an integer array, a slice or a boolean mask), at
        every party; ``frames[rows, ...]`` as scikit-learn writes it, too."""
        if isinstance(rows, tuple):
            if len(rows) != 2 or not (rows[1] is Ellipsis or rows[1] == slice(None)):
                raise IndexError("VerticalFrames are indexed by rows only")
            rows = rows[0]
        key = np.asarray(rows) if not isinstance(rows, slice) else rows
        return VerticalFrames(
            {name: frame.iloc[key] for name, frame in self.parts.items()},
            label_party=self.label_party,
        )

    def __repr__(self) -> str:
        columns = ", ".join(f"{n}: {f.shape[1]}" for n, f in self.parts.items())
        return (
            f"VerticalFrames({len(self)} rows; columns {columns}; label party {self.label_party!r})"
        )


def label_party_of(parts: Any, label_party: str | None) -> str:
    """The label party named, or the one a :class:`VerticalFrames` carries."""
    if label_party is not None:
        return label_party
    if isinstance(parts, VerticalFrames):
        return parts.label_party
    raise TypeError("pass label_party= (or the data as VerticalFrames(parts, label_party=...))")


def check_parts(parts: Any, label_party: str) -> dict[str, pd.DataFrame]:
    """``parts`` as a dict of non-empty DataFrames with one shared, unique index, among which
    ``label_party`` is one (a :class:`VerticalFrames` gives its dict)."""
    if isinstance(parts, VerticalFrames):
        parts = parts.parts
    if not isinstance(parts, dict) or not parts:
        raise TypeError("parts must be a non-empty dict {party name: DataFrame}")
    if label_party not in parts:
        raise ValueError(
            f"label party {label_party!r} is not among the parties {sorted(parts)}; "
            "pass label_party= one of them"
        )
    index = None
    for name, frame in parts.items():
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"party {name!r}: expected a DataFrame, got {type(frame).__name__}")
        if frame.shape[1] == 0:
            raise ValueError(f"party {name!r} has no columns")
        if len(frame) == 0:
            raise ValueError(f"party {name!r} has no rows")
        if not frame.index.is_unique:
            raise ValueError(f"party {name!r}: the index has repeated labels")
        if index is None:
            index = frame.index
        elif not frame.index.equals(index):
            raise ValueError(
                f"party {name!r}: rows do not align with the others (same index labels in the "
                "same order needed); align the parties first (vfl.align or linkage)"
            )
    return dict(parts)


def check_data_parties(parties: list[str], label_party: str) -> None:
    """The label party and at least one other data party, each named once."""
    if label_party not in parties or len(set(parties)) < 2 or len(set(parties)) != len(parties):
        raise ValueError(
            f"vertical training needs the label party {label_party!r} and at least one other "
            f"data party, each named once; got {parties} (for one party alone, use "
            "scikit-learn)"
        )


def _label_values(y: Any, index: pd.Index, party: str) -> np.ndarray[Any, Any]:
    if isinstance(y, pd.DataFrame):
        if y.shape[1] != 1:
            raise ValueError(
                f"labels of party {party!r}: expected one column, got {list(y.columns)}"
            )
        y = y.iloc[:, 0]
    if isinstance(y, pd.Series):
        if not y.index.equals(index):
            try:
                y = y.loc[index]
            except KeyError:
                raise ValueError(
                    f"labels of party {party!r}: their index does not cover the rows"
                ) from None
        values: np.ndarray[Any, Any] = y.to_numpy()
    else:
        values = np.asarray(y)
    if values.ndim != 1 or len(values) != len(index):
        raise ValueError(
            f"labels of party {party!r}: expected {len(index)} values, got shape {values.shape}"
        )
    if pd.isna(values).any():
        row = index[int(np.flatnonzero(pd.isna(values))[0])]
        raise ValueError(
            f"labels of party {party!r} contain missing values (e.g. row {row!r}); drop those "
            "rows first"
        )
    return values


def check_class_labels(
    y: Any, index: pd.Index, party: str, *, max_classes: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Any two to ``max_classes`` distinct labels (strings, -1/1, 0..K-1), as scikit-learn
    takes them: ``(classes, codes)`` with ``classes`` sorted and ``codes[i]`` the class index
    of row i. Continuous values are refused (a regressor is what they need)."""
    from sklearn.utils.multiclass import type_of_target

    values = _label_values(y, index, party)
    try:
        classes, codes = np.unique(values, return_inverse=True)
    except TypeError:
        raise ValueError(
            f"labels of party {party!r} mix types that cannot be sorted; use one type"
        ) from None
    if type_of_target(values) in ("continuous", "continuous-multioutput"):
        raise ValueError(
            f"labels of party {party!r} are continuous (e.g. {values[0]!r}); a classifier "
            "needs classes: use VerticalLinearRegression for a numeric target"
        )
    if len(classes) < 2:
        raise ValueError(f"labels of party {party!r} hold one class only ({classes[0]!r})")
    if len(classes) > max_classes:
        raise ValueError(
            f"labels of party {party!r} hold {len(classes)} classes, more than the "
            f"{max_classes} one-vs-rest models trained at once; group rare classes first"
        )
    warn_odd_classes(classes, np.bincount(codes, minlength=len(classes)), party)
    return classes, codes.astype(np.int64)


COUNT_CLASSES = 6
"""Integer labels 0, 1, 2, ... with at least this many values look like counts."""
FEW_ROWS = 5
"""A class with fewer training rows than this gets a warning."""


class LabelWarning(UserWarning):
    """The labels a classifier was given look like something else (counts), or a class has
    too few rows to learn from."""


def warn_odd_classes(
    classes: np.ndarray[Any, Any], counts: np.ndarray[Any, Any], party: str
) -> None:
    """Warn (:class:`LabelWarning`) when the classes are consecutive non-negative integers
    from 0 or 1, at least :data:`COUNT_CLASSES` of them, most frequent at 0 or 1 and thinning
    out towards the largest -- counts, which one model of their
    expected value fits far better than K one-vs-rest models (FATE's dvisits, doctor visits
    0-9, became 9 classes) -- or when a class has fewer than :data:`FEW_ROWS` rows."""
    import warnings

    numeric = np.issubdtype(classes.dtype, np.number) and classes.dtype.kind != "b"
    if numeric and len(classes) >= COUNT_CLASSES:
        values = classes.astype(float)
        whole = bool(np.all(values == np.round(values)))
        consecutive = values[0] in (0.0, 1.0) and bool(np.all(np.diff(values) == 1))
        # counts thin out towards the large values (digit labels 0-9 do not)
        thinning = counts[-1] * 4 <= counts[0] and int(np.argmax(counts)) <= 1
        if whole and consecutive and thinning:
            warnings.warn(
                f"labels of party {party!r} are the integers {values[0]:g}..{values[-1]:g}: "
                f"they look like counts, which {len(classes)} one-vs-rest classes fit poorly; "
                "use VerticalPoissonRegression for counts (or VerticalLinearRegression for an "
                "ordered score)",
                LabelWarning,
                stacklevel=4,
            )
    rare = [(c, int(n)) for c, n in zip(classes.tolist(), counts, strict=True) if n < FEW_ROWS]
    if rare:
        listed = ", ".join(f"{c!r} ({n} rows)" for c, n in rare[:5])
        warnings.warn(
            f"labels of party {party!r}: classes with fewer than {FEW_ROWS} rows: {listed}; a "
            "model learns little from them and the other parties learn they exist. Group them "
            "with a neighbouring class, or drop those rows",
            LabelWarning,
            stacklevel=4,
        )


def check_targets(y: Any, index: pd.Index, party: str) -> np.ndarray[Any, Any]:
    """Finite numeric regression targets (float64) of the rows ``index``."""
    values = _label_values(y, index, party)
    if not (np.issubdtype(values.dtype, np.number) and values.dtype.kind != "b"):
        raise ValueError(f"targets of party {party!r} must be numbers, got dtype {values.dtype}")
    out: np.ndarray[Any, Any] = values.astype(float)
    if not np.isfinite(out).all():
        row = index[int(np.flatnonzero(~np.isfinite(out))[0])]
        raise ValueError(
            f"targets of party {party!r} have inf (e.g. row {row!r}); drop or cap those rows"
        )
    return out


def check_numeric(frame: pd.DataFrame, party: str, columns: list[str]) -> np.ndarray[Any, Any]:
    """``frame[columns]`` as float64, refusing missing/unexpected columns (listed), non-numeric
    columns and NaN/inf (naming the column and a row)."""
    # compared by name as text: a part stores its columns as text, and pd.DataFrame(array)
    # names them 0, 1, ...
    present = {str(c): c for c in frame.columns}
    wanted = {str(c) for c in columns}
    missing = [c for c in columns if str(c) not in present]
    extra = [c for c in frame.columns if str(c) not in wanted]
    if missing or extra:
        raise ValueError(
            f"party {party!r}: the columns differ from those fitted: missing {missing}, "
            f"unexpected {extra}"
        )
    frame = frame[[present[str(c)] for c in columns]].set_axis([str(c) for c in columns], axis=1)
    columns = [str(c) for c in columns]
    for column in columns:
        if not pd.api.types.is_numeric_dtype(frame[column]) or pd.api.types.is_bool_dtype(
            frame[column]
        ):
            raise ValueError(
                f"party {party!r}: column {column!r} is not numeric ({frame[column].dtype}); "
                "encode it as numbers first, or fit with preprocess=True (one-hot encoding, "
                "vfl.preprocessing)"
            )
    values = frame[columns].to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(
            f"party {party!r}: column {columns[col]!r} has NaN or inf (e.g. row "
            f"{frame.index[row]!r}); impute or drop them first (preprocess=True imputes "
            "each party's medians; preprocess=PartyPreprocessor(impute='zero') reads an "
            "empty cell as 0, as in LIBSVM-style sparse files)"
        )
    out: np.ndarray[Any, Any] = values
    return out
