"""One party's fitted part of a vertical linear model, and how it reads its own columns."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vfl import persistence
from vfl.preprocessing import PartyPreprocessor
from vfl.validation import check_numeric

__all__ = [
    "FEATURE_BITS",
    "FENCE_QUANTILE",
    "FENCE_WIDTH",
    "KIND",
    "PartyModel",
    "check_feature_bound",
    "clip_rows",
    "feature_bits",
    "fences",
    "public_feature_bits",
    "quantize",
]

FENCE_QUANTILE = 0.01
FENCE_WIDTH = 3.0
"""A column is clipped to ``[q_1% - 3 s, q_99% + 3 s]`` (:func:`fences`)."""

FEATURE_BITS = 20
"""Features are rounded to multiples of ``2**-FEATURE_BITS`` before training."""
KIND = "vfl.linear.PartyModel"


def quantize(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Round to multiples of ``2**-FEATURE_BITS`` (so encrypted sums are exact integers)."""
    peak = float(np.max(np.abs(values))) if values.size else 0.0
    if peak >= 2.0**40:
        raise ValueError("features beyond 2**40 in magnitude: standardise them")
    out: np.ndarray[Any, Any] = np.round(values * 2.0**FEATURE_BITS) / 2.0**FEATURE_BITS
    return out


def clip_rows(values: np.ndarray[Any, Any], clip: float) -> np.ndarray[Any, Any]:
    """Rows scaled to an L2 norm of at most ``clip``, then rounded (:func:`quantize`); the
    rounding's slack (at most ``sqrt(columns) * 2**-21``) is taken off the bound first, so the
    rounded rows stay within ``clip``."""
    bound = clip - np.sqrt(values.shape[1]) * 2.0**-FEATURE_BITS
    norms = np.linalg.norm(values, axis=1, keepdims=True)
    return quantize(values * np.minimum(1.0, bound / np.maximum(norms, 1e-300)))


def fences(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Per column, the ``(lower, upper)`` bounds a party clips its own values to before
    standardising, shape ``(2, columns)``: ``q - FENCE_WIDTH * s`` below the 1% quantile and
    above the 99% one, where ``s`` is the deviation of the column clipped to those quantiles
    (its whole deviation when that is 0, as for a rare binary flag).

    Why: a few values hundreds of deviations out (data-entry codes such as 98 in a count of
    late payments, a debt ratio of 300,000) make a mini-batch's curvature hundreds of times
    the table's, which diverges any fixed step, and squash every other row into a sliver of
    the standardised scale. Gaussian columns are untouched (the fences sit at about 5.1
    deviations); a binary column stays binary (clipping is monotone); heavy tails are
    winsorised. Each party computes its fences from its own rows and keeps them in its part.
    """
    if len(values) == 0:
        return np.vstack([np.full(values.shape[1], -np.inf), np.full(values.shape[1], np.inf)])
    low, high = np.quantile(values, [FENCE_QUANTILE, 1 - FENCE_QUANTILE], axis=0)
    spread = np.clip(values, low, high).std(axis=0)
    spread = np.where(spread > 0, spread, values.std(axis=0))
    out: np.ndarray[Any, Any] = np.vstack([low - FENCE_WIDTH * spread, high + FENCE_WIDTH * spread])
    return out


def feature_bits(x: np.ndarray[Any, Any]) -> int:
    """Bits of the largest ``|x| * 2**FEATURE_BITS`` of ``x`` itself. Data-dependent, so no
    protocol sends it: the packings are sized by :func:`public_feature_bits`."""
    peak = float(np.max(np.abs(x))) if x.size else 1.0
    return max(1, math.frexp(peak)[1]) + FEATURE_BITS


MIN_FEATURE_BOUND_BITS = 4
"""The public feature bound is at least ``2**4 = 16``."""


def public_feature_bits(rows: int) -> int:
    """Bits of the public bound on ``|x| * 2**FEATURE_BITS`` for a design of ``rows`` rows:
    ``FEATURE_BITS`` plus ``k``, the smallest exponent with ``2**k > sqrt(rows)`` (and at least
    :data:`MIN_FEATURE_BOUND_BITS`).

    Why ``sqrt(rows)``: a column standardised by its own mean and (population) deviation over
    ``rows`` rows has no z-score beyond ``sqrt(rows - 1)`` (Samuelson's inequality), whatever
    the data. So the bound depends only on the row count, which every party already knows; the
    packing of every encrypted exchange is sized from it, and nothing in a setup message says
    how extreme a party's values are. The price: slots a few bits wider than the data needs
    (a table whose largest z-score is 5 would fit 3 bits; 1,000 rows give 5)."""
    if rows < 1:
        raise ValueError(f"a design needs at least one row, got {rows}")
    k = max(MIN_FEATURE_BOUND_BITS, math.isqrt(rows).bit_length())
    return k + FEATURE_BITS


def check_feature_bound(party: str, x: np.ndarray[Any, Any], rows: int) -> None:
    """Refuse a design with a value at or beyond the public bound
    ``2**(public_feature_bits(rows) - FEATURE_BITS)``, naming the party, the column and the
    fix. Standardised columns never reach it; unstandardised ones (``standardize=False``) or a
    warm start's older standardisation on new rows may."""
    bound = 2.0 ** (public_feature_bits(rows) - FEATURE_BITS)
    if not x.size:
        return
    peaks = np.max(np.abs(x), axis=0)
    beyond = np.flatnonzero(~(peaks < bound))
    if beyond.size:
        column = int(beyond[0])
        raise ValueError(
            f"party {party!r}: design column {column} holds {float(peaks[column]):.4g}, at or "
            f"beyond the public feature bound {bound:g} for {rows} rows (the smallest power of "
            "two above sqrt(rows), which a standardised column never reaches); keep "
            "standardize=True (the default) or rescale the column, or refit instead of a warm "
            "start on these rows"
        )


@dataclass
class PartyModel:
    """One party's fitted part: its columns, standardisation and weights (nothing else).

    ``coef`` has shape ``(columns,)`` for one output (binary or regression) and
    ``(columns, K)`` for K one-vs-rest outputs; ``intercept`` likewise a float or ``(K,)``
    (nonzero at the label party only). ``target_mean``/``target_scale`` are the label party's
    own target standardisation (regression), never sent.
    """

    party: str
    role: str
    columns: list[str]
    mean: np.ndarray[Any, Any]
    scale: np.ndarray[Any, Any]
    coef: np.ndarray[Any, Any]
    intercept: Any = 0.0
    target_mean: float = 0.0
    target_scale: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def fresh(
        cls,
        party: str,
        frame: pd.DataFrame,
        *,
        standardize: bool,
        active: bool,
        outputs: int,
        clip: bool = False,
    ) -> PartyModel:
        """An unfitted part for ``frame``'s columns (zero weights; the party's own means and
        deviations when ``standardize``, of its values clipped to its own :func:`fences` when
        ``clip``, which the part keeps and applies to every frame it reads); refuses constant
        columns."""
        columns = [str(c) for c in frame.columns]
        values = check_numeric(frame, party, list(frame.columns))
        std = values.std(axis=0)
        constant = [c for c, s in zip(columns, std, strict=True) if s == 0]
        if constant:
            raise ValueError(
                f"party {party!r}: columns {constant} are constant; they carry no information, "
                "drop them"
            )
        extra: dict[str, Any] = {}
        if clip:
            bounds = fences(values)
            extra["clip"] = bounds.tolist()
            values = np.clip(values, bounds[0], bounds[1])
            std = values.std(axis=0)
        mean = values.mean(axis=0) if standardize else np.zeros(len(columns))
        scale = std if standardize else np.ones(len(columns))
        coef = np.zeros(len(columns)) if outputs == 1 else np.zeros((len(columns), outputs))
        intercept: Any = 0.0 if outputs == 1 else np.zeros(outputs)
        role = "active" if active else "passive"
        return cls(party, role, columns, mean, scale, coef, intercept, extra=extra)

    def with_outputs(self, outputs: int) -> PartyModel:
        """The same part with zero weights for ``outputs`` outputs."""
        d = len(self.columns)
        coef = np.zeros(d) if outputs == 1 else np.zeros((d, outputs))
        intercept: Any = 0.0 if outputs == 1 else np.zeros(outputs)
        return PartyModel(
            self.party,
            self.role,
            self.columns,
            self.mean,
            self.scale,
            coef,
            intercept,
            extra=dict(self.extra),  # its preprocessing, row clipping, parties stay
        )

    @property
    def input_columns(self) -> list[str]:
        """The raw columns :meth:`design` reads: those the preprocessing was fitted on
        (``extra["preprocess"]``), else :attr:`columns`."""
        state = self.extra.get("preprocess")
        if state is None:
            return list(self.columns)
        return [str(c["name"]) for c in state["columns"]]

    @property
    def outputs(self) -> int:
        return 1 if self.coef.ndim == 1 else int(self.coef.shape[1])

    def weights(self, *, with_intercept: bool) -> np.ndarray[Any, Any]:
        """``(columns [+1], K)``: the coefficients, and the intercept as the last row."""
        w = self.coef.reshape(len(self.columns), self.outputs)
        if with_intercept:
            w = np.vstack([w, np.reshape(self.intercept, (1, self.outputs))])
        return np.array(w, dtype=float)

    def set_weights(self, w: np.ndarray[Any, Any], *, with_intercept: bool) -> None:
        """Store ``(columns [+1], K)`` weights in this part's shapes."""
        coef = w[:-1] if with_intercept else w
        single = self.outputs == 1
        self.coef = coef[:, 0].copy() if single else coef.copy()
        if with_intercept:
            self.intercept = float(w[-1, 0]) if single else w[-1].copy()

    def design(self, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        """This party's standardised, rounded feature matrix of ``frame`` (checked); ``frame``
        holds its raw columns when the part keeps a preprocessing (``extra["preprocess"]``,
        :class:`~vfl.preprocessing.PartyPreprocessor` state), which is applied first."""
        state = self.extra.get("preprocess")
        if state is not None:
            frame = PartyPreprocessor.from_dict(state).transform(frame)
        values = check_numeric(frame, self.party, self.columns)
        bounds = self.extra.get("clip")
        if bounds is not None:  # the fences fitted on this party's training rows
            values = np.clip(values, bounds[0], bounds[1])
        values = (values - self.mean) / self.scale
        huge = np.abs(values) >= 2.0**40
        if huge.any():
            columns = [self.columns[j] for j in np.flatnonzero(huge.any(axis=0))]
            row = frame.index[int(np.flatnonzero(huge.any(axis=1))[0])]
            raise ValueError(
                f"party {self.party!r}: column(s) {columns} reach 2**40 in magnitude (first at "
                f"row {row!r}), beyond the fixed point encryption works in; train with "
                "standardize=True, or rescale them"
            )
        clip = self.extra.get("row_clip")
        if clip is not None:  # label DP trained on rows of bounded norm: predict on them too
            return clip_rows(values, float(clip))
        return quantize(values)

    # -- persistence ------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The part in vflink's model format (:mod:`vfl.persistence`)."""
        meta, arrays = self._fields()
        return persistence.dump_model(KIND, meta, arrays)

    def save(self, path: str | Path) -> Path:
        meta, arrays = self._fields()
        return persistence.save_model(path, KIND, meta, arrays)

    def _fields(self) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
        meta = {
            "party": self.party,
            "role": self.role,
            "columns": self.columns,
            "target_mean": self.target_mean,
            "target_scale": self.target_scale,
            "extra": self.extra,
        }
        arrays = {
            "mean": self.mean,
            "scale": self.scale,
            "coef": self.coef,
            "intercept": np.asarray(self.intercept, dtype=float),
        }
        return meta, arrays

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "the model") -> PartyModel:
        meta, arrays = persistence.parse_model(data, kind=KIND, source=source)
        return cls._from_fields(meta, arrays, source)

    @classmethod
    def load(cls, path: str | Path) -> PartyModel:
        """Read a part written by :meth:`save` (or the JSON of vflink 0.1's
        ``VerticalLogisticRegression.save``, which it converts)."""
        try:
            content = Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read the model file {path}: {exc}") from None
        if content[:1] == b"{":
            return cls._from_legacy_json(content, str(path))
        return cls.from_bytes(content, str(path))

    @classmethod
    def _from_legacy_json(cls, content: bytes, path: str) -> PartyModel:
        try:
            data = json.loads(content)
            if data.get("format") != "vflink.VerticalLogisticRegression.part/1":
                raise ValueError("an unknown JSON format")
            meta = {k: data[k] for k in ("party", "role", "columns")}
            meta.update(target_mean=0.0, target_scale=1.0, extra={"classes": [0, 1]})
            arrays = {k: np.asarray(data[k], dtype=float) for k in ("mean", "scale", "coef")}
            arrays["intercept"] = np.asarray(float(data["intercept"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path} is not a saved vflink model: {exc}") from None
        return cls._from_fields(meta, arrays, path)

    @classmethod
    def _from_fields(
        cls, meta: dict[str, Any], arrays: dict[str, np.ndarray[Any, Any]], source: str
    ) -> PartyModel:
        try:
            intercept = arrays["intercept"]
            part = cls(
                party=str(meta["party"]),
                role=str(meta["role"]),
                columns=[str(c) for c in meta["columns"]],
                mean=arrays["mean"].astype(float),
                scale=arrays["scale"].astype(float),
                coef=arrays["coef"].astype(float),
                intercept=float(intercept) if intercept.ndim == 0 else intercept.astype(float),
                target_mean=float(meta["target_mean"]),
                target_scale=float(meta["target_scale"]),
                extra=dict(meta.get("extra", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source} is not a saved vertical linear part: {exc}") from None
        state = part.extra.get("preprocess")
        if state is not None:
            try:
                PartyPreprocessor.from_dict(state)
            except ValueError as exc:
                raise ValueError(f"{source}: its preprocessing is malformed: {exc}") from None
        d = len(part.columns)
        if part.mean.shape != (d,) or part.scale.shape != (d,) or part.coef.shape[:1] != (d,):
            raise ValueError(f"{source}: the arrays do not match its {d} columns")
        bounds = part.extra.get("clip")
        if bounds is not None:
            try:
                shape = np.asarray(bounds, dtype=float).shape
            except (TypeError, ValueError):
                shape = ()
            if shape != (2, d):
                raise ValueError(f"{source}: its clipping fences do not match its {d} columns")
        return part
