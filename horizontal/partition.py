"""Splitting one data set among simulated clients, and measuring how unlike they are.

Horizontal federated learning is studied on one pooled data set cut into clients. How it is cut
decides how hard federated training is, so the cut is a parameter of every experiment:

* :func:`iid_split` -- every client a uniform random sample (the easy baseline);
* :func:`dirichlet_label_split` -- *label skew*: each class's rows are shared among the clients
  in proportions drawn from a symmetric Dirichlet(alpha) (Hsu, Qi & Brown 2019, "Measuring the
  effects of non-identical data distribution for federated visual classification"; the
  partition of Li et al. 2022, "Federated learning on non-IID data silos: an experimental
  study"). Small ``alpha`` gives clients dominated by one or two classes; large ``alpha``
  approaches an IID split;
* :func:`quantity_skew_split` -- *quantity skew*: client sizes proportional to one
  Dirichlet(alpha) draw, rows otherwise random.

and to measure the result:

* :func:`label_distributions` -- each client's label distribution (clients x classes);
* :func:`total_variation` and :func:`earth_movers` -- distances between two label
  distributions;
* :func:`skew_report` -- per client, its size and both distances from the pooled distribution.

Every split returns a list of sorted row *positions* (0-based, as for ``frame.iloc[part]``),
one array per client; together they are disjoint and cover every row. Randomness is simulation
randomness: ``random_state`` (an int, a :class:`numpy.random.Generator` or None) seeds
:func:`numpy.random.default_rng`, and the same seed gives the same split.

The functions are pure (numpy, pandas and SciPy only); nothing here talks to a federation.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.stats import wasserstein_distance

__all__ = [
    "dirichlet_label_split",
    "earth_movers",
    "iid_split",
    "label_distributions",
    "quantity_skew_split",
    "skew_report",
    "total_variation",
]

logger = logging.getLogger(__name__)

Positions: TypeAlias = npt.NDArray[np.intp]
"""Sorted 0-based row positions of one client."""

RandomState: TypeAlias = int | np.random.Generator | None

Parts: TypeAlias = Sequence[npt.ArrayLike] | Mapping[Hashable, npt.ArrayLike]
"""One array of row positions per client: a list (clients named 0, 1, ...) or a mapping from
client name to positions."""

_SUM_TOLERANCE = 1e-6


# -- splits ----------------------------------------------------------------------------------


def iid_split(
    n_or_y: int | npt.ArrayLike, n_clients: int, *, random_state: RandomState = None
) -> list[Positions]:
    """Split rows uniformly at random into ``n_clients`` parts of (almost) equal size.

    Parameters
    ----------
    n_or_y : int or array-like
        The number of rows, or any sequence whose length is the number of rows (labels, a
        DataFrame).
    n_clients : int
        Number of clients, between 1 and the number of rows.
    random_state : int, numpy.random.Generator or None
        Seed of the split (simulation randomness, not cryptography).

    Returns
    -------
    list of numpy.ndarray
        One sorted array of row positions per client; disjoint, covering every row, sizes
        differing by at most one (the first clients get the extra rows).

    Raises
    ------
    ValueError
        If there are no rows or ``n_clients`` is not between 1 and the number of rows.
    """
    n = _n_rows(n_or_y)
    n_clients = _check_n_clients(n_clients, n)
    rng = np.random.default_rng(random_state)
    order = rng.permutation(n)
    return [np.sort(part).astype(np.intp) for part in np.array_split(order, n_clients)]


def dirichlet_label_split(
    y: npt.ArrayLike,
    n_clients: int,
    alpha: float,
    *,
    min_size: int = 1,
    max_tries: int = 1000,
    random_state: RandomState = None,
) -> list[Positions]:
    """Label-skewed split: each class's rows are shared among the clients in proportions drawn
    from Dirichlet(alpha, ..., alpha).

    For every class independently, its rows are shuffled, a proportion vector over the clients is
    drawn from a symmetric Dirichlet(``alpha``) and the rows are cut into consecutive blocks of
    those proportions (block ends rounded to whole rows, the clients' blocks in a random order
    so that rounding favours no client). If some client gets fewer than
    ``min_size`` rows in total, all proportions are drawn again, at most ``max_tries`` times.

    Parameters
    ----------
    y : array-like
        One label per row; any hashable values (integers, strings, booleans), no missing ones.
    n_clients : int
        Number of clients, between 1 and the number of rows.
    alpha : float
        Dirichlet concentration, > 0. Small values (0.1) give clients dominated by a few
        classes; large values (100) give nearly the pooled label distribution at every client.
    min_size : int
        Fewest rows any client may get (default 1: no empty client).
    max_tries : int
        How many proportion draws to try before giving up.
    random_state : int, numpy.random.Generator or None
        Seed of the split (simulation randomness, not cryptography).

    Returns
    -------
    list of numpy.ndarray
        One sorted array of row positions per client; disjoint, covering every row.

    Raises
    ------
    ValueError
        On empty or missing labels, a bad ``n_clients``, ``alpha``, ``min_size`` or
        ``max_tries``, or when no draw in ``max_tries`` gives every client ``min_size`` rows (the
        message suggests a larger ``alpha``, fewer clients or a smaller ``min_size``).

    References
    ----------
    Hsu, Qi & Brown (2019), arXiv:1909.06335; Li, Diao, Chen & He (2022), ICDE, arXiv:2102.02079.
    """
    codes, classes = _encode_labels(y)
    n = len(codes)
    n_clients = _check_n_clients(n_clients, n)
    alpha = _check_alpha(alpha)
    min_size = _check_min_size(min_size, n_clients, n)
    max_tries = _check_positive_int(max_tries, "max_tries")
    rng = np.random.default_rng(random_state)
    by_class = [rng.permutation(np.flatnonzero(codes == k)) for k in range(len(classes))]
    class_sizes = np.array([len(rows) for rows in by_class])
    for attempt in range(1, max_tries + 1):
        proportions = rng.dirichlet(np.full(n_clients, alpha), size=len(classes))
        counts = np.stack(
            [_block_sizes(p, m, rng) for p, m in zip(proportions, class_sizes, strict=True)]
        )
        if counts.sum(axis=0).min() >= min_size:
            logger.debug("dirichlet_label_split: accepted draw %d", attempt)
            break
    else:
        raise ValueError(
            f"dirichlet_label_split: in {max_tries} draws of Dirichlet(alpha={alpha}) some "
            f"client always had fewer than min_size={min_size} rows ({n} rows, "
            f"{len(classes)} classes, {n_clients} clients); pass a larger alpha, fewer "
            "clients or a smaller min_size"
        )
    client_rows: list[list[npt.NDArray[np.int64]]] = [[] for _ in range(n_clients)]
    for rows, sizes in zip(by_class, counts, strict=True):
        for client, block in enumerate(np.split(rows, np.cumsum(sizes)[:-1])):
            client_rows[client].append(block)
    return [np.sort(np.concatenate(blocks)).astype(np.intp) for blocks in client_rows]


def quantity_skew_split(
    n_or_y: int | npt.ArrayLike,
    n_clients: int,
    alpha: float,
    *,
    min_size: int = 1,
    max_tries: int = 1000,
    random_state: RandomState = None,
) -> list[Positions]:
    """Quantity-skewed split: client sizes proportional to one Dirichlet(alpha) draw, rows
    otherwise uniformly random (so every client's label distribution is close to the pooled one).

    Sizes are the proportions times the number of rows, block ends rounded to whole rows. If a
    client gets fewer than ``min_size`` rows the proportions are drawn again, at most
    ``max_tries`` times.

    Parameters
    ----------
    n_or_y : int or array-like
        The number of rows, or any sequence whose length is the number of rows.
    n_clients : int
        Number of clients, between 1 and the number of rows.
    alpha : float
        Dirichlet concentration, > 0: small values give a few large clients and many small
        ones, large values nearly equal sizes.
    min_size : int
        Fewest rows any client may get (default 1: no empty client).
    max_tries : int
        How many proportion draws to try before giving up.
    random_state : int, numpy.random.Generator or None
        Seed of the split (simulation randomness, not cryptography).

    Returns
    -------
    list of numpy.ndarray
        One sorted array of row positions per client; disjoint, covering every row.

    Raises
    ------
    ValueError
        On no rows, a bad ``n_clients``, ``alpha``, ``min_size`` or ``max_tries``, or when no
        draw in ``max_tries`` gives every client ``min_size`` rows.

    References
    ----------
    Li, Diao, Chen & He (2022), "Federated learning on non-IID data silos: an experimental
    study", ICDE, arXiv:2102.02079 (quantity skew).
    """
    n = _n_rows(n_or_y)
    n_clients = _check_n_clients(n_clients, n)
    alpha = _check_alpha(alpha)
    min_size = _check_min_size(min_size, n_clients, n)
    max_tries = _check_positive_int(max_tries, "max_tries")
    rng = np.random.default_rng(random_state)
    order = rng.permutation(n)
    for attempt in range(1, max_tries + 1):
        sizes = _block_sizes(rng.dirichlet(np.full(n_clients, alpha)), n, rng)
        if sizes.min() >= min_size:
            logger.debug("quantity_skew_split: accepted draw %d", attempt)
            break
    else:
        raise ValueError(
            f"quantity_skew_split: in {max_tries} draws of Dirichlet(alpha={alpha}) some client "
            f"always had fewer than min_size={min_size} rows ({n} rows, {n_clients} clients); "
            "pass a larger alpha, fewer clients or a smaller min_size"
        )
    return [np.sort(part).astype(np.intp) for part in np.split(order, np.cumsum(sizes)[:-1])]


# -- measuring skew --------------------------------------------------------------------------


def label_distributions(
    y: npt.ArrayLike, parts: Parts, classes: Sequence[Hashable] | None = None
) -> pd.DataFrame:
    """Each client's label distribution.

    Parameters
    ----------
    y : array-like
        One label per row (no missing labels).
    parts : list or mapping of array-like
        Row positions per client, as the splits return them (or a ``{client: positions}``
        mapping). Every client needs at least one row.
    classes : sequence, optional
        The classes, in the order of the columns; labels outside it are an error. Default: the
        labels present, sorted (in order of first appearance if they cannot be sorted).

    Returns
    -------
    pandas.DataFrame
        Clients x classes (index named ``client``: 0, 1, ... for a list, the keys for a
        mapping; columns named ``class``); each row sums to 1.

    Raises
    ------
    ValueError
        On missing labels, labels not in ``classes``, a client without rows, or positions that
        are not integers within ``0 .. len(y) - 1``.
    """
    counts = _class_counts(y, parts, classes)
    shares: pd.DataFrame = counts.div(counts.sum(axis=1), axis=0)
    return shares


def total_variation(p: npt.ArrayLike, q: npt.ArrayLike) -> float:
    """Total-variation distance ``0.5 * sum(|p - q|)`` between two distributions over the same
    classes (0 for equal distributions, 1 for disjoint supports).

    Parameters
    ----------
    p, q : array-like
        Probability vectors of the same length (non-negative, summing to 1), e.g. two rows of
        :func:`label_distributions`. Two pandas Series must have the same index.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If either is not a probability vector, or their lengths (or Series indexes) differ.
    """
    p_arr, q_arr = _distribution_pair(p, q)
    return float(0.5 * np.abs(p_arr - q_arr).sum())


def earth_movers(
    p: npt.ArrayLike, q: npt.ArrayLike, *, support: npt.ArrayLike | None = None
) -> float:
    """Earth mover's (1-D Wasserstein-1) distance between two distributions over ordered
    classes: the least mass x distance needed to turn ``p`` into ``q`` when class ``i`` sits at
    ``support[i]`` on the line (computed by :func:`scipy.stats.wasserstein_distance`).

    For *unordered* categorical labels the natural ground metric is 0/1 (any two different
    classes at distance 1); under it the earth mover's distance equals :func:`total_variation`,
    which is what to use there. On a line the two agree only for two classes one unit apart.

    Parameters
    ----------
    p, q : array-like
        Probability vectors of the same length (non-negative, summing to 1).
    support : array-like, optional
        The position of each class on the line (finite numbers, e.g. grades or counts); default
        ``0, 1, ..., len(p) - 1`` (consecutive classes one unit apart).

    Returns
    -------
    float
        In the units of ``support``.

    Raises
    ------
    ValueError
        If either is not a probability vector, their lengths differ, or ``support`` is not a
        finite numeric vector of the same length.
    """
    p_arr, q_arr = _distribution_pair(p, q)
    if support is None:
        positions = np.arange(len(p_arr), dtype=float)
    else:
        try:
            positions = np.asarray(support, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(
                f"support must be numbers (one position per class), got {support!r}"
            ) from None
        if positions.shape != p_arr.shape or not np.isfinite(positions).all():
            raise ValueError(
                f"support must be {len(p_arr)} finite numbers (one position per class of p), "
                f"got shape {positions.shape}"
            )
    return float(wasserstein_distance(positions, positions, p_arr, q_arr))


def skew_report(y: npt.ArrayLike, parts: Parts) -> pd.DataFrame:
    """Per client: its size and how far its label distribution is from the pooled one.

    The pooled distribution is that of all the clients' rows together (what centralised
    training on their union would see).

    Parameters
    ----------
    y : array-like
        One label per row (no missing labels).
    parts : list or mapping of array-like
        Row positions per client, as the splits return them.

    Returns
    -------
    pandas.DataFrame
        Index ``client``; columns ``size`` (rows), ``total_variation`` and ``earth_movers``
        (each from the pooled label distribution). For numeric labels the earth mover's
        distance places each class at its value (so it is in label units); other labels are
        taken as unordered, with the 0/1 ground metric, where it equals the total variation.

    Raises
    ------
    ValueError
        As :func:`label_distributions`.
    """
    counts = _class_counts(y, parts, None)
    sizes = counts.sum(axis=1)
    pooled = (counts.sum(axis=0) / sizes.sum()).to_numpy()
    dists = counts.div(sizes, axis=0).to_numpy()
    classes = counts.columns
    ordered = pd.api.types.is_numeric_dtype(classes.dtype)
    support = np.asarray(classes, dtype=float) if ordered else None
    tv = [total_variation(row, pooled) for row in dists]
    emd = [
        earth_movers(row, pooled, support=support) if ordered else t
        for row, t in zip(dists, tv, strict=True)
    ]
    report: pd.DataFrame = pd.DataFrame(
        {"size": sizes.to_numpy(), "total_variation": tv, "earth_movers": emd},
        index=counts.index,
    )
    return report


# -- helpers ---------------------------------------------------------------------------------


def _block_sizes(
    proportions: npt.NDArray[np.float64], total: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Whole-row block sizes summing to ``total``, near ``proportions * total``.

    The blocks are laid out in a random order of the clients and their ends rounded from the
    cumulative proportions; the random order keeps the rounding from always favouring the same
    client (with nearly equal proportions, a class of one row would otherwise always go to the
    client in the middle).
    """
    order = rng.permutation(len(proportions))
    ends = np.rint(np.cumsum(proportions[order]) * total).astype(np.int64)
    ends[-1] = total
    sizes = np.empty(len(proportions), dtype=np.int64)
    sizes[order] = np.diff(ends, prepend=0)
    return sizes


def _as_int(value: object) -> int | None:
    """``value`` as an int if it is an integer (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        return None
    return int(value)


def _n_rows(n_or_y: object) -> int:
    n = _as_int(n_or_y)
    if n is None:
        if isinstance(n_or_y, (bool, numbers.Number, str, bytes)) or not hasattr(n_or_y, "__len__"):
            raise ValueError(
                f"n_or_y must be the number of rows (an int) or a sequence of rows, got {n_or_y!r}"
            )
        n = len(n_or_y)
    if n < 1:
        raise ValueError(f"there are no rows to split (n_or_y gives {n}); pass at least one row")
    return n


def _check_n_clients(n_clients: object, n_rows: int) -> int:
    value = _as_int(n_clients)
    if value is None:
        raise ValueError(f"n_clients must be an integer, got {n_clients!r}")
    if not 1 <= value <= n_rows:
        raise ValueError(
            f"n_clients must be between 1 and the number of rows ({n_rows}) so that every "
            f"client can get a row, got {value}"
        )
    return value


def _check_alpha(alpha: object) -> float:
    ok = isinstance(alpha, (numbers.Real, np.floating, np.integer)) and not isinstance(alpha, bool)
    value = float(alpha) if ok else float("nan")  # type: ignore[arg-type]
    if not np.isfinite(value) or value <= 0:
        raise ValueError(
            "alpha must be a finite number > 0 (the Dirichlet concentration: small = strong "
            f"skew, large = nearly IID), got {alpha!r}"
        )
    return value


def _check_positive_int(value: object, name: str) -> int:
    number = _as_int(value)
    if number is None or number < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return number


def _check_min_size(min_size: object, n_clients: int, n_rows: int) -> int:
    value = _as_int(min_size)
    if value is None or value < 0:
        raise ValueError(f"min_size must be an integer >= 0, got {min_size!r}")
    if value * n_clients > n_rows:
        raise ValueError(
            f"min_size={value} rows for each of {n_clients} clients needs "
            f"{value * n_clients} rows but there are {n_rows}; pass a smaller min_size or "
            "fewer clients"
        )
    return value


def _distribution_pair(
    p: npt.ArrayLike, q: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    if isinstance(p, pd.Series) and isinstance(q, pd.Series) and not p.index.equals(q.index):
        raise ValueError(
            f"p and q are Series over different classes ({p.index.tolist()} vs "
            f"{q.index.tolist()}); align them first, e.g. q.reindex(p.index, fill_value=0)"
        )
    p_arr, q_arr = _distribution(p, "p"), _distribution(q, "q")
    if p_arr.shape != q_arr.shape:
        raise ValueError(
            f"p and q must be over the same classes, got lengths {len(p_arr)} and {len(q_arr)}"
        )
    return p_arr, q_arr


def _distribution(values: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a vector of probabilities, got {values!r}") from None
    if arr.ndim != 1 or len(arr) == 0:
        raise ValueError(
            f"{name} must be a non-empty one-dimensional probability vector, got shape {arr.shape}"
        )
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{name} must hold finite, non-negative probabilities, got {arr}")
    total = arr.sum()
    if abs(total - 1.0) > _SUM_TOLERANCE:
        raise ValueError(
            f"{name} sums to {total:g}, not 1; pass a probability vector, e.g. "
            "counts / counts.sum()"
        )
    return arr


def _label_values(y: npt.ArrayLike) -> npt.NDArray[Any]:
    if isinstance(y, pd.DataFrame):
        raise ValueError(
            f"y must be one label per row, got a DataFrame with columns {list(y.columns)}; "
            "pass one column, e.g. frame['diagnosis']"
        )
    values = y.to_numpy() if isinstance(y, (pd.Series, pd.Index)) else np.asarray(y)
    if values.ndim != 1:
        raise ValueError(f"y must be one-dimensional (one label per row), got shape {values.shape}")
    if len(values) == 0:
        raise ValueError("y is empty; pass at least one labelled row")
    missing = np.flatnonzero(pd.isna(values))
    if len(missing):
        raise ValueError(
            f"y has {len(missing)} missing label(s) (NaN/None), the first at row position "
            f"{missing[0]}; drop or label those rows before splitting"
        )
    return values


def _encode_labels(
    y: npt.ArrayLike, classes: Sequence[Hashable] | None = None
) -> tuple[npt.NDArray[np.intp], pd.Index]:
    """Class codes per row and the classes (given, or present sorted / first-seen)."""
    values = _label_values(y)
    if classes is None:
        present = list(pd.unique(values))
        try:
            index = pd.Index(sorted(present))
        except TypeError:  # labels of mixed types: keep the order of first appearance
            index = pd.Index(present)
    else:
        index = pd.Index(list(classes))
        if not index.is_unique:
            repeated = index[index.duplicated()].unique().tolist()
            raise ValueError(f"classes must be distinct, got {repeated} more than once")
    codes = index.get_indexer(values)
    if (codes < 0).any():
        unknown = pd.unique(values[codes < 0]).tolist()
        raise ValueError(
            f"y has labels {unknown[:10]} that are not in classes={index.tolist()}; add them to "
            "classes or leave classes out"
        )
    return codes.astype(np.intp), index


def _class_counts(
    y: npt.ArrayLike, parts: Parts, classes: Sequence[Hashable] | None
) -> pd.DataFrame:
    """Clients x classes table of label counts (validating ``parts``)."""
    codes, index = _encode_labels(y, classes)
    if isinstance(parts, Mapping):
        names: list[Hashable] = list(parts.keys())
        raw = list(parts.values())
    else:
        raw = list(parts)
        names = list(range(len(raw)))
    if not raw:
        raise ValueError("parts is empty; pass one array of row positions per client")
    counts = np.zeros((len(raw), len(index)), dtype=np.int64)
    for row, (name, part) in enumerate(zip(names, raw, strict=True)):
        positions = np.asarray(part)
        if positions.ndim != 1 or len(positions) == 0:
            raise ValueError(
                f"client {name!r} has no rows (or its positions are not a flat array); every "
                "client needs at least one row position"
            )
        if not np.issubdtype(positions.dtype, np.integer):
            raise ValueError(
                f"client {name!r}: row positions must be integers (as the splits return them), "
                f"got dtype {positions.dtype}"
            )
        bad = (positions < 0) | (positions >= len(codes))
        if bad.any():
            raise ValueError(
                f"client {name!r}: row position {positions[bad][0]} is outside 0..{len(codes) - 1}"
                " (positions index rows of y, as in frame.iloc)"
            )
        counts[row] = np.bincount(codes[positions], minlength=len(index))
    table: pd.DataFrame = pd.DataFrame(
        counts,
        index=pd.Index(names, name="client"),
        columns=index.rename("class"),
    )
    return table
