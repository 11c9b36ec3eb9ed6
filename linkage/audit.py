"""Frequency attacks on Bloom-filter encodings: how many records an outsider re-identifies.

:func:`frequency_attack` plays an attacker who holds the encodings (a linkage unit, or whoever
obtains them) and a public table of how often each value occurs in the population (given
names with counts, as census offices publish them), but **not** the secret. It never receives
the secret and reads nothing of the encodings but their bits (``encodings.words``). The
schema is not secret (both data holders and the linkage unit hold it), so the attacker may
know it: the tokenisation (``field``: q-gram size, padding), the positions per token
(``weight``) and the filter length and hardening (``schema``).

Two attacks from the literature:

* ``"alignment"`` (the default) -- **frequency alignment** of identical encodings, in the
  spirit of Kuzu, Kantarcioglu, Durham and Malin (2011): records whose filters are
  bit-for-bit identical are grouped, and the groups (of at least ``min_group_size``) are
  aligned with the values of the public table: by rank (largest group = most frequent value)
  or, when ``schema`` says the filters encode this one field unbalanced, by the one-to-one
  assignment that best fits both the group sizes and the number of set bits a value of that
  many q-grams sets (Kuzu et al.'s length constraint; it separates values of about the same
  frequency). It needs values to repeat as identical filters, so it works on filters that
  encode one field and on any *deterministic* hardening of them: **balancing and XOR-folding
  do not protect against it** (the same name still gives the same filter). Balancing does not
  hide the length either: every filter has the same number of set bits, but the complement's
  columns are those set in more than half of the filters, and the others count the filter's
  own bits. Salting splits each value's group into one group per salt value; BLIP noise makes
  identical values give different filters; several fields in one filter make nearly every
  filter unique.
* ``"pattern"`` -- **pattern mining**, a simplified version of Christen, Ranbaduge, Vatsalan
  and Schnell (2018), "Precise and fast cryptanalysis for Bloom filter based privacy-preserving
  record linkage": the q-grams of the public values are taken in order of frequency; for each,
  a set of up to ``weight`` bit positions that are set together in about the fraction of the
  filters that the q-gram's frequency predicts is mined (a greedy clique of columns that
  pairwise co-occur often enough, kept when no more than about ``weight`` columns are set in
  all the filters it selects); filters and public values are split by whether they hold the
  q-gram and the search goes on in each part. The patterns are then labelled with q-grams all
  at once, by the one-to-one labelling whose frequencies and pairwise co-occurrences in the
  public table best fit those in the filters, and each filter is decoded as the public value
  whose mapped q-grams are all set in it and which explains the most of the mapped q-grams it
  holds (ties: the more frequent value). It needs no identical filters. On balanced filters
  (every filter half set) the columns set in most filters, the complements, are set aside
  first. Unlike the paper, it does not recover q-grams outside the public values nor decode
  values absent from the table, and it tolerates little noise (``min_fraction_set``).
* ``"combined"`` -- the alignment guess where there is one, else the pattern-mining guess.

Re-identification is scored against ``truth`` (the real values, used only to score); without
it the result holds the guesses alone. The figures are a lower bound on what an attacker
learns: better attacks exist (graph matching, Vidanage et al. 2019; attacks on several fields
at once with a table of whole records), and an attacker with a better public table does
better. Measured figures per hardening option: ``benchmarks/linkage.py`` and the README.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment

from linkage.encoding import field_tokens, normalise_values, unpack_bits
from linkage.schema import Field, Schema

__all__ = ["METHODS", "FrequencyAttackResult", "frequency_attack"]

logger = logging.getLogger(__name__)

METHODS = ("alignment", "pattern", "combined")
"""The attacks :func:`frequency_attack` runs."""
_MAX_COST = 50.0  # alignment leaves a group unguessed when its best fit is this bad
_GIVE_UP = 60  # pattern mining stops after this many failed searches in a row


@dataclass(frozen=True)
class FrequencyAttackResult:
    """What :func:`frequency_attack` found.

    Attributes
    ----------
    method : str
        The attack run (one of :data:`METHODS`).
    guesses : numpy.ndarray
        One entry per record, in the order of the encodings: the guessed value (normalised as
        the field's kind normalises it), or ``None`` where the attack makes no guess.
    n_records, n_guesses : int
        Records attacked, and records with a guess.
    reidentified : float or None
        Fraction of all records whose guess equals their true value (``None`` without
        ``truth``).
    reidentified_top_k : float or None
        The same among the records whose true value is one of the ``top_k`` most frequent
        values of the public table (``None`` without ``truth`` or when there are none).
    precision : float or None
        Fraction of the guesses that are right (``None`` without ``truth`` or guesses).
    top_k : int
        The ``k`` of ``reidentified_top_k``.
    qgram_positions : dict
        Pattern mining's map from q-gram to the bit positions it was found to set (empty for
        ``"alignment"``).
    n_reidentified : int or None
        Records whose guess equals their true value (``None`` without ``truth``).
    chance : float or None
        Fraction of records the best guess without the encodings re-identifies: every record
        guessed as the public table's most frequent value (``None`` without ``truth``).
    """

    method: str
    guesses: np.ndarray[Any, Any]
    n_records: int
    n_guesses: int
    reidentified: float | None
    reidentified_top_k: float | None
    precision: float | None
    top_k: int
    qgram_positions: dict[str, tuple[int, ...]] = field(default_factory=dict)
    n_reidentified: int | None = None
    chance: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The summary figures (not the guesses) as a plain dict."""
        return {
            "method": self.method,
            "n_records": self.n_records,
            "n_guesses": self.n_guesses,
            "reidentified": self.reidentified,
            "reidentified_top_k": self.reidentified_top_k,
            "precision": self.precision,
            "top_k": self.top_k,
            "qgrams_mapped": len(self.qgram_positions),
            "n_reidentified": self.n_reidentified,
            "chance": self.chance,
        }


def frequency_attack(
    encodings: Any,
    public_frequencies: Mapping[str, float] | pd.Series,
    *,
    truth: Sequence[Any] | pd.Series | np.ndarray[Any, Any] | None = None,
    method: str = "alignment",
    top_k: int = 10,
    field: Field | None = None,
    schema: Schema | None = None,
    weight: int | None = None,
    min_group_size: int = 2,
    min_fraction_set: float = 0.9,
    max_qgrams: int = 200,
    random_state: int | np.random.Generator | None = 0,
) -> FrequencyAttackResult:
    """Re-identify encoded values from their frequencies, without the secret.

    Parameters
    ----------
    encodings : Encodings or numpy.ndarray
        The filters attacked: an :class:`~linkage.Encodings` (only its ``words`` are read) or
        a ``(n_records, n_words)`` uint64 array of the same layout.
    public_frequencies : mapping or pandas.Series
        The attacker's public table: value -> count (or relative frequency) in the
        population. Values are normalised as ``field`` normalises them (``"Chloé"`` counts
        as ``"chloe"``), and counts of values that normalise alike are added.
    truth : sequence, optional
        The real value of each record, in the order of the encodings, used only to score
        the guesses (missing values count as not re-identified).
    method : {"alignment", "pattern", "combined"}
        Which attack (see the module docstring).
    top_k : int
        The ``reidentified_top_k`` figure counts the records whose true value is among the
        ``top_k`` most frequent values of the table.
    field : Field, optional
        The attacked field as the (public) schema declares it; its kind and q-gram size
        decide normalisation and tokens. Default: ``Field("value", "name")``.
    schema : Schema, optional
        The (public) schema the encodings were made with. When it encodes this one field,
        frequency alignment also checks that a group's number of set bits fits the value's
        number of q-grams (the length constraint of Kuzu et al.), which separates values of
        about the same frequency; without it groups are aligned by rank alone.
    weight : int, optional
        Bit positions per token (pattern mining looks for up to this many per q-gram);
        default the field's weight.
    min_group_size : int
        Frequency alignment aligns only groups of at least this many identical filters.
    min_fraction_set : float
        Pattern mining decodes a q-gram as present in a filter when at least this fraction
        of its positions is set (below 1 tolerates a little noise).
    max_qgrams : int
        Pattern mining stops after mapping this many q-grams.
    random_state : int, numpy.random.Generator or None
        Seeds the tie-breaking between equally frequent groups or values (not cryptographic).

    Returns
    -------
    FrequencyAttackResult

    Raises
    ------
    ValueError
        An empty table, a negative, non-finite or all-zero count, ``truth`` of another
        length than the encodings, an unknown method or bad numeric options.
    TypeError
        ``encodings`` without ``uint64`` words, or a ``field`` or ``schema`` of another type.

    Examples
    --------
    >>> result = frequency_attack(encodings, census_counts, truth=frame["given_name"],
    ...                           schema=schema, field=schema.fields[0])  # doctest: +SKIP
    >>> result.reidentified, result.precision  # doctest: +SKIP
    """
    words = _words(encodings)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid methods are {list(METHODS)}")
    spec = field if field is not None else Field("value", "name")
    if not isinstance(spec, Field):
        raise TypeError(f"field must be a linkage.Field, got {type(spec).__name__}")
    k = weight if weight is not None else spec.hash_count
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"weight must be a positive integer, got {weight!r}")
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    if not isinstance(min_group_size, int) or min_group_size < 1:
        raise ValueError(f"min_group_size must be a positive integer, got {min_group_size!r}")
    if schema is not None and not isinstance(schema, Schema):
        raise TypeError(f"schema must be a linkage.Schema, got {type(schema).__name__}")
    if not 0.0 < float(min_fraction_set) <= 1.0:
        raise ValueError(f"min_fraction_set must be in (0, 1], got {min_fraction_set!r}")
    values, counts = _public_table(public_frequencies, spec)
    truth_values = None if truth is None else _truth(truth, len(words), spec)
    rng = np.random.default_rng(random_state)

    guesses = np.full(len(words), None, dtype=object)
    positions: dict[str, tuple[int, ...]] = {}
    if method in ("alignment", "combined"):
        expected = _expected_popcounts(values, spec, k, schema)
        guesses = _alignment(words, values, counts, min_group_size, rng, expected)
    if method in ("pattern", "combined"):
        mined, positions = _pattern_mining(
            words, values, counts, spec, k, min_fraction_set, max_qgrams
        )
        empty = np.array([g is None for g in guesses], dtype=bool)
        guesses[empty] = mined[empty]

    made = np.array([g is not None for g in guesses], dtype=bool)
    n_guesses = int(made.sum())
    reidentified = reidentified_top = precision = chance = None
    n_reidentified = None
    if truth_values is not None:
        right = made & np.array(
            [g is not None and g == t for g, t in zip(guesses, truth_values, strict=True)]
        )
        reidentified = float(right.mean())
        n_reidentified = int(right.sum())
        precision = float(right.sum() / n_guesses) if n_guesses else None
        ranked = values[np.argsort(-counts, kind="stable")]
        chance = float(np.mean([t == ranked[0] for t in truth_values]))
        top = set(ranked[:top_k].tolist())
        in_top = np.array([t in top for t in truth_values])
        reidentified_top = float(right[in_top].mean()) if in_top.any() else None
    logger.info(
        "frequency attack %s: %d of %d records guessed, %s re-identified",
        method,
        n_guesses,
        len(words),
        "?" if reidentified is None else f"{reidentified:.3f}",
    )
    return FrequencyAttackResult(
        method=method,
        guesses=guesses,
        n_records=len(words),
        n_guesses=n_guesses,
        reidentified=reidentified,
        reidentified_top_k=reidentified_top,
        precision=precision,
        top_k=top_k,
        qgram_positions=positions,
        n_reidentified=n_reidentified,
        chance=chance,
    )


def _words(encodings: Any) -> np.ndarray[Any, Any]:
    """The filters' words: ``encodings.words`` (the only attribute read) or the array given."""
    words = encodings if isinstance(encodings, np.ndarray) else getattr(encodings, "words", None)
    if not isinstance(words, np.ndarray) or words.dtype != np.uint64 or words.ndim != 2:
        raise TypeError(
            "frequency_attack needs linkage.Encodings or a 2-D uint64 array of filter words, "
            f"got {type(encodings).__name__}"
        )
    if len(words) == 0 or words.shape[1] == 0:
        raise ValueError("there are no encodings to attack")
    return words


def _public_table(
    table: Mapping[str, float] | pd.Series, spec: Field
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Distinct normalised values of the public table and their counts (float)."""
    series = table if isinstance(table, pd.Series) else pd.Series(dict(table), dtype=object)
    if len(series) == 0:
        raise ValueError("the public frequency table is empty")
    counts = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
    if not np.all(np.isfinite(counts)):
        bad = series.index[~np.isfinite(counts)][:5].tolist()
        raise ValueError(f"public frequencies must be finite numbers; not for {bad}")
    if np.any(counts < 0):
        bad = series.index[counts < 0][:5].tolist()
        raise ValueError(f"public frequencies must not be negative; negative for {bad}")
    if not counts.sum() > 0:
        raise ValueError("the public frequencies are all zero")
    keys, _ = normalise_values(pd.Series(series.index.astype(str), dtype=object), spec)
    frame = pd.DataFrame({"value": keys.to_numpy(dtype=object), "count": counts})
    frame = frame[frame["value"].notna() & (frame["count"] > 0)]
    if frame.empty:
        raise ValueError("no value of the public table is left after normalisation")
    grouped = frame.groupby("value", sort=True)["count"].sum()
    return np.asarray(grouped.index, dtype=object), grouped.to_numpy(dtype=float)


def _truth(truth: Any, n: int, spec: Field) -> np.ndarray[Any, Any]:
    values = pd.Series(list(truth) if not isinstance(truth, pd.Series) else truth.to_list())
    if len(values) != n:
        raise ValueError(
            f"truth has {len(values)} values but there are {n} encodings; give one real value "
            "per record, in the order of the encodings"
        )
    normalised, _ = normalise_values(values.astype(object), spec)
    return np.array([v if isinstance(v, str) else None for v in normalised], dtype=object)


def _expected_popcounts(
    values: np.ndarray[Any, Any], spec: Field, k: int, schema: Schema | None
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
    """Mean and variance of the set bits of each value's filter (of its first half when
    balanced), when the schema lets the attacker predict them (one field), else None."""
    if schema is None or len(schema.fields) != 1:
        return None
    if schema.balance and (schema.xor_fold or schema.blip_epsilon is not None):
        return None  # not modelled
    m = schema.bits
    draws = k * np.array([len(set(field_tokens(str(v), spec))) for v in values], dtype=float)
    rho = 1.0 - (1.0 - 1.0 / m) ** draws  # chance that a position is set
    lam = draws / m
    variance = m * np.exp(-lam) * (1.0 - (1.0 + lam) * np.exp(-lam))  # occupancy variance
    if schema.xor_fold:
        m //= 2
        rho = 2.0 * rho * (1.0 - rho)
        variance = m * rho * (1.0 - rho)
    if schema.blip_epsilon is not None:
        flip = 1.0 / (1.0 + np.exp(schema.blip_epsilon))
        rho = rho * (1.0 - flip) + (1.0 - rho) * flip
        variance = variance + m * flip * (1.0 - flip)
    return m * rho, variance + 1.0


def _alignment(
    words: np.ndarray[Any, Any],
    values: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
    min_group_size: int,
    rng: np.random.Generator,
    expected: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None,
) -> np.ndarray[Any, Any]:
    """Guess per record by aligning groups of identical filters, by size, with the table's
    values, by count (ties broken at random); with ``expected`` popcounts, by the assignment
    that best fits both sizes and popcounts."""
    groups, inverse, sizes = np.unique(words, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    tie = rng.permutation(len(sizes))
    group_order = tie[np.argsort(-sizes[tie], kind="stable")]
    group_order = group_order[sizes[group_order] >= min_group_size]
    guess_of_group = np.full(len(sizes), None, dtype=object)
    if expected is None:
        tie = rng.permutation(len(values))
        value_order = tie[np.argsort(-counts[tie], kind="stable")]
        n_aligned = min(len(group_order), len(value_order))
        guess_of_group[group_order[:n_aligned]] = values[value_order[:n_aligned]]
    elif len(group_order):
        mean, variance = expected
        share = counts / counts.sum()
        size = sizes[group_order].astype(float)[:, None]
        wanted = len(words) * share[None, :]
        chosen_words = groups[group_order]
        if np.all(np.bitwise_count(words).sum(axis=1) * 2 == words.shape[1] * 64):
            # balanced: the filter's own bits are the columns set in fewer than half of the
            # filters (the complement's are set in more), so its length still shows
            rare = unpack_bits(words).mean(axis=0) <= 0.5
            counted = unpack_bits(chosen_words)[:, rare].sum(axis=1)
        else:
            counted = np.bitwise_count(chosen_words).sum(axis=1)
        popcount = counted.astype(float)[:, None]
        cost = (size - wanted) ** 2 / (wanted + 1.0) + (popcount - mean) ** 2 / variance
        cost += rng.random(cost.shape) * 1e-9  # random ties
        chosen_groups, chosen_values = linear_sum_assignment(cost)
        plausible = cost[chosen_groups, chosen_values] <= _MAX_COST
        guess_of_group[group_order[chosen_groups[plausible]]] = values[chosen_values[plausible]]
    out: np.ndarray[Any, Any] = guess_of_group[inverse]
    return out


def _pattern_mining(
    words: np.ndarray[Any, Any],
    values: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
    spec: Field,
    k: int,
    min_fraction_set: float,
    max_qgrams: int,
) -> tuple[np.ndarray[Any, Any], dict[str, tuple[int, ...]]]:
    """Map frequent q-grams to bit positions by frequent-pattern mining, then decode."""
    bits = unpack_bits(words).astype(bool)
    n, m = bits.shape
    balanced = bool(np.all(bits.sum(axis=1) * 2 == m))
    if balanced:  # every filter half set: a balanced filter and its keyed-shuffled complement
        # the complement's columns are the ones set in most filters; set them aside
        bits[:, bits.mean(axis=0) > 0.5] = False
    token_sets = [set(field_tokens(str(v), spec)) for v in values]
    vocabulary = sorted(set().union(*token_sets))
    incidence = np.zeros((len(values), len(vocabulary)), dtype=bool)
    column = {g: i for i, g in enumerate(vocabulary)}
    for j, tokens in enumerate(token_sets):
        incidence[j, [column[g] for g in tokens]] = True
    min_rows = max(5, n // 500)
    min_columns = max(2, k // 2)
    mapped: dict[int, np.ndarray[Any, Any]] = {}
    # a part: its filters, the public values it may hold, the columns known set in all of
    # them (q-grams it holds), and the q-grams whose search already failed there
    parts: deque[tuple[Any, Any, Any, frozenset[int]]] = deque(
        [(np.ones(n, bool), np.ones(len(values), bool), np.zeros(m, bool), frozenset())]
    )
    steps = failures = 0
    while parts and len(mapped) < max_qgrams and steps < 4 * max_qgrams and failures < _GIVE_UP:
        steps += 1
        rows, possible, known, failed = parts.popleft()
        n_rows = int(rows.sum())
        weights = counts * possible
        if n_rows < min_rows or weights.sum() <= 0:
            continue
        share = (weights @ incidence) / weights.sum()
        share[list(mapped)] = 0.0
        share[list(failed)] = 0.0
        g = int(np.argmax(share))
        f = float(share[g])
        if f * n_rows < min_rows:
            continue
        found = _find_pattern(bits[rows], f, k, known, min_columns)
        if found is not None and any(
            len(np.intersect1d(found, cols)) * 2 > len(found) for cols in mapped.values()
        ):
            found = None  # a q-gram mapped already, found again in this part
        if found is None:
            failures += 1
            parts.appendleft((rows, possible, known, failed | {g}))
            continue
        failures = 0
        held = rows & (bits[:, found].mean(axis=1) >= min_fraction_set)
        mapped[g] = found
        now_known = known.copy()
        now_known[found] = True
        parts.append((held, possible & incidence[:, g], now_known, frozenset()))
        parts.append((rows & ~held, possible & ~incidence[:, g], known, frozenset()))
    guesses = np.full(n, None, dtype=object)
    if not mapped:
        return guesses, {}
    patterns = list(mapped.values())
    present = np.stack([bits[:, cols].mean(axis=1) >= min_fraction_set for cols in patterns], 1)
    order = _relabel(present, list(mapped), incidence, counts)
    positions = {
        vocabulary[g]: tuple(int(p) for p in cols) for g, cols in zip(order, patterns, strict=True)
    }
    holds = incidence[:, order]  # (values, mapped q-grams)
    usable = holds.any(axis=1)
    missing = (~present).astype(np.int32) @ holds.T.astype(np.int32)  # (n, values)
    explained = present.astype(np.int32) @ holds.T.astype(np.int32)
    # consistent values (every mapped q-gram set), the one explaining the most set q-grams,
    # then the more frequent
    score = np.where((missing == 0) & usable, explained * 1e9 + counts, -1.0)
    best = np.argmax(score, axis=1)
    decided = score[np.arange(n), best] >= 0
    guesses[decided] = values[best[decided]]
    return guesses, positions


def _relabel(
    present: np.ndarray[Any, Any],
    labels: list[int],
    incidence: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
    rounds: int = 20,
) -> list[int]:
    """Which q-gram each mined pattern is, all at once: the one-to-one labelling whose
    frequencies and pairwise co-occurrences in the public table best fit those of the
    patterns in the filters (iterated conditional modes, each round an optimal assignment
    given the other patterns' labels)."""
    n, t = present.shape
    share = counts / counts.sum()
    joint = (incidence.T * share) @ incidence  # (q-grams, q-grams): share of values with both
    as_float = present.astype(np.float64)
    seen = as_float.T @ as_float / n  # (patterns, patterns); the diagonal: each one's support
    current = np.array(labels)
    for _ in range(rounds):
        cost = np.zeros((t, joint.shape[0]))
        for i in range(t):
            wanted = joint[:, current].copy()  # (q-grams, patterns): if pattern i were q-gram h
            wanted[:, i] = np.diag(joint)
            cost[i] = (((seen[i][None, :] - wanted) ** 2) / (wanted + 1.0 / n)).sum(axis=1)
        _, chosen = linear_sum_assignment(cost)
        if np.array_equal(chosen, current):
            break
        current = chosen
    return [int(g) for g in current]


def _find_pattern(
    sub: np.ndarray[Any, Any], f: float, k: int, known: np.ndarray[Any, Any], min_columns: int
) -> np.ndarray[Any, Any] | None:
    """The columns set together in about a fraction ``f`` of the rows of ``sub``, as one
    q-gram's ``k`` positions would be: from each seed column not yet in a pattern, a greedy
    clique of columns that pairwise co-occur in enough rows, kept
    when the columns set in *all* the rows it selects number at most ``k`` and a few (values
    that share no q-gram have many more or fewer columns in common by chance), the one whose
    support is closest to ``f``."""
    n_rows = len(sub)
    spread = 2.0 * np.sqrt(f * (1 - f) * n_rows) + 0.1 * f * n_rows
    floor = f * n_rows - spread
    support = sub.sum(axis=0)
    candidates = np.flatnonzero((support >= floor) & ~known)
    if len(candidates) < min_columns:
        return None
    dense = sub[:, candidates].astype(np.float32)
    together = dense.T @ dense  # rows in which two columns are both set
    covered = np.zeros(len(candidates), dtype=bool)
    best: np.ndarray[Any, Any] | None = None
    best_gap = np.inf
    for seed in np.argsort(-support[candidates], kind="stable").tolist():
        if covered[seed]:  # already in a pattern found from another seed
            continue
        # greedy clique: add the column whose least co-occurrence with the chosen ones is
        # highest, while that stays above the floor
        chosen = [seed]
        least = together[seed].copy()
        least[seed] = -1.0
        while len(chosen) < k:
            nxt = int(np.argmax(least))
            if least[nxt] < floor:
                break
            chosen.append(nxt)
            least = np.minimum(least, together[nxt])
            least[chosen] = -1.0
        if len(chosen) < min_columns:
            continue
        rows = sub[:, candidates[chosen]].all(axis=1)
        gap = abs(float(rows.sum()) - f * n_rows)
        if gap > spread:
            continue
        covered[chosen] = True
        closure = np.flatnonzero(sub[rows].all(axis=0) & ~known)
        if len(closure) <= k + max(2, k // 4) and gap < best_gap:
            best, best_gap = closure, gap
    return best
