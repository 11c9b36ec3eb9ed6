"""Bloom-filter encodings of identities (cryptographic long-term keys, Schnell et al. 2011).

Each record's identity fields are normalised and cut into tokens (:mod:`linkage.schema`); each
token sets ``weight`` bit positions of one record-level Bloom filter (default 1024 bits),
chosen by keyed BLAKE2b under a key derived for its field from the shared secret (HKDF-SHA256).
The positions of a token are independent outputs of a keyed pseudo-random function, not the
double-hashing construction ``h1 + i*h2`` that Kroll and Steinmetzer (2015) exploited.

Vectorised: each column is factorised first, so that every distinct raw value is normalised
once, every distinct normalised value tokenised once and every distinct token hashed once
(names and dates repeat a lot); the filters of the distinct values are set in one boolean
matrix and packed, and a record's filter is the OR of its values' filters, in ``uint64`` words.
The per-record work is a handful of numpy gathers, so encoding runs in one process: on two
cores, shipping a frame to a second process costs more than it saves.

Hardening (:class:`~linkage.schema.Schema`'s ``salt``, ``balance``, ``xor_fold``,
``blip_epsilon``) and keyed blocking keys (``blocking_keys``) are applied here; their costs in
linkage quality are measured by ``benchmarks/linkage.py``.

.. warning::
   Bloom-filter encodings are not encryption. Someone who holds encodings and knows the
   frequency of names in the population can re-identify frequent values by frequency analysis
   of bit patterns (Kuzu et al. 2011; Christen et al. 2018), more easily with fewer fields per
   filter; keyed hashing (not double hashing) stops the attacks that need the hash functions,
   not those that need only frequencies. Salting with a stable attribute, balancing,
   XOR-folding and BLIP noise each make pattern mining harder at some cost in linkage quality;
   none makes an encoding safe to publish. Blocking keys reveal which records share a key (and
   how many do), which is itself frequency information. The linkage unit that compares
   encodings must not also hold the secret or the plaintexts, and encodings should be deleted
   after linkage. :func:`linkage.audit.frequency_attack` measures how many records such an
   attacker re-identifies from your encodings and a public frequency table.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import re
import unicodedata
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import linkage.workers
from linkage.executors import Workers
from linkage.kernels import pack_bits, unpack_bits
from linkage.progress import Stage
from linkage.schema import Field, Schema
from linkage.workers import map_chunks

__all__ = [
    "PROGRESS_MIN_RECORDS",
    "CollisionWarning",
    "Encodings",
    "InvalidValueWarning",
    "derive_key",
    "encode",
    "field_tokens",
    "normalise_values",
    "pack_bits",
    "soundex",
    "token_positions",
    "unpack_bits",
]

logger = logging.getLogger(__name__)

PROGRESS_MIN_RECORDS = 500_000
"""Records from which :func:`encode` shows a progress bar (VFLINK_PROGRESS=0 hides it)."""
_CHUNK_ROWS = 16_384


def derive_key(secret: bytes | str, purpose: str) -> bytes:
    """A 32-byte key for ``purpose`` derived from the shared secret (HKDF-SHA256)."""
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    if not isinstance(secret, bytes) or len(secret) < 16:
        raise ValueError(
            "the linkage secret must be at least 16 bytes (e.g. secrets.token_bytes(32)), shared "
            "by the data holders and never by the linkage unit"
        )
    hkdf = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"vflink/linkage/v1", info=purpose.encode()
    )
    return hkdf.derive(secret)


@dataclass(frozen=True, eq=False)
class Encodings:
    """Bloom-filter encodings of a frame's records.

    Attributes
    ----------
    index : pandas.Index
        The frame's row labels, in the order of ``words``.
    words : numpy.ndarray
        ``(n_records, bits // 64)`` uint64: the filters, bit ``i`` in word ``i // 64``.
    fingerprint : bytes
        Keyed check value of the schema and secret (:meth:`Schema.fingerprint`); matching
        refuses encodings whose fingerprints differ.
    block_keys : numpy.ndarray
        ``(n_records, n_keys)`` uint64: a keyed 64-bit hash of each of the schema's blocking
        keys, 0 where the record lacks a part of the key.
    invalid : dict
        Column name to the number of rows whose value did not parse (``Field.on_invalid``);
        only columns with some. Stays with the data holder: it is not part of the filters
        sent to a linkage unit.
    """

    index: pd.Index
    words: np.ndarray[Any, np.dtype[np.uint64]]
    fingerprint: bytes
    block_keys: np.ndarray[Any, np.dtype[np.uint64]] = field(
        default_factory=lambda: np.zeros((0, 0), dtype=np.uint64)
    )
    invalid: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.block_keys.shape[0] != len(self.index):
            object.__setattr__(self, "block_keys", np.zeros((len(self.index), 0), dtype=np.uint64))

    def __len__(self) -> int:
        return len(self.index)

    @property
    def bits(self) -> int:
        """Filter length in bits."""
        return int(self.words.shape[1] * 64)

    def check_compatible(self, other: Encodings) -> None:
        """Raise unless ``other`` was made with the same schema and secret (and length)."""
        if self.fingerprint != other.fingerprint:
            raise ValueError(
                "the two encodings were made with different schemas or secrets (their "
                "fingerprints differ); encode both sides with the same Schema and shared secret"
            )
        if self.bits != other.bits:
            raise ValueError(f"filters of {self.bits} and {other.bits} bits cannot be compared")

    def popcounts(self) -> np.ndarray[Any, Any]:
        """Bits set per record."""
        counts: np.ndarray[Any, Any] = np.bitwise_count(self.words).sum(axis=1).astype(np.int64)
        return counts

    def bit_matrix(self) -> np.ndarray[Any, Any]:
        """The filters as an ``(n, bits)`` uint8 matrix of 0/1 (bit ``i`` in column ``i``)."""
        return unpack_bits(self.words)


def encode(
    frame: pd.DataFrame, schema: Schema, *, secret: bytes | str, workers: Workers = 1
) -> Encodings:
    """Encode the schema's columns of ``frame`` into Bloom filters indexed like ``frame``.

    The same frame, schema and secret give the same bits (unless ``schema.blip_epsilon`` adds
    fresh noise each time); another secret gives unrelated bits.

    ``workers`` (default 1: this process) may be a count of this machine's processes or the
    party's own executor (a Dask client of its cluster, :mod:`linkage.workers`): a frame of
    :data:`linkage.workers.PARALLEL_MIN_POINTS` rows or more is then encoded in chunks of rows
    there (its identity columns only), with the same bits as here. The chunks carry the secret
    to the party's own workers. Keep the default on one machine: each chunk repeats the work
    on the distinct values the chunks share (their q-grams and filters), and the rows cross
    to the workers and back. Here, the cohort's 300,000 records took 0.57 s whole and 0.92 s
    in 8 chunks in one process; in two other runs 0.38-0.40 s in this process and 0.59-0.60 s
    on two worker processes once started (``benchmarks/scale.py`` measures it). The work per
    row, which does split, outweighs that only with many workers and millions of rows.

    Dates and numbers that do not parse are encoded from their characters, or treated as
    missing, as each field's ``on_invalid`` says, with one :class:`InvalidValueWarning` per
    column and the counts in :attr:`Encodings.invalid`.

    Raises
    ------
    ValueError
        An empty frame, a non-unique index, columns missing from the frame (named), an
        unparseable date or number in a field with ``on_invalid="raise"`` (row label and
        value), a missing value in a field with ``missing="error"``, or rows whose identity
        fields are all missing (their labels; drop them first).
    """
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"encode needs a pandas DataFrame, got {type(frame).__name__}")
    if frame.empty:
        raise ValueError("cannot encode an empty frame")
    if not frame.index.is_unique:
        duplicated = frame.index[frame.index.duplicated()].unique()[:5].tolist()
        raise ValueError(
            "the frame's index must be unique (row labels identify records); "
            f"repeated: {duplicated}"
        )
    missing_columns = [c for c in schema.columns if c not in frame.columns]
    if missing_columns:
        raise ValueError(
            f"columns {missing_columns} of the schema are not in the frame; "
            f"it has {list(frame.columns)}"
        )
    if workers != 1 and len(frame) >= linkage.workers.PARALLEL_MIN_POINTS:
        return _encode_in_chunks(frame, schema, secret, workers)
    return _encode(frame, schema, secret, warn=True)


def _encode(frame: pd.DataFrame, schema: Schema, secret: bytes | str, *, warn: bool) -> Encodings:
    """:func:`encode` of a checked frame; ``warn=False`` (a chunk in a worker) gives no
    warning and touches no warning filter, which other threads share: the caller warns once
    per column from :attr:`Encodings.invalid`."""
    desc = f"encoding {len(frame):,} records, fields"
    show = len(frame) >= PROGRESS_MIN_RECORDS
    with Stage(desc, total=len(schema.fields) + 1, show=show) as steps:
        return _encode_fields(frame, schema, secret, warn, steps)


def _encode_fields(
    frame: pd.DataFrame, schema: Schema, secret: bytes | str, warn: bool, steps: Stage
) -> Encodings:
    """:func:`_encode`'s work, one step of ``steps`` per field and one for the end."""
    values: dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}
    invalid: dict[str, int] = {}
    for spec in schema.fields:
        codes, uniques, count, notice = _normalised_codes(frame, spec)
        values[spec.name] = (codes, uniques)
        if count:
            invalid[spec.name] = count
            if warn:
                warnings.warn(notice, InvalidValueWarning, stacklevel=4)
    if schema.salt is not None:
        salt_codes, salt_values = _part(values, schema, schema.salt)
    else:
        salt_codes, salt_values = np.full(len(frame), -1, dtype=np.int64), np.array([""])
    words = np.zeros((len(frame), schema.bits // 64), dtype=np.uint64)
    any_value = np.zeros(len(frame), dtype=bool)
    for spec in schema.fields:
        codes, uniques = values[spec.name]
        present = codes >= 0
        if spec.missing == "error" and not present.all():
            rows = frame.index[~present][:5].tolist()
            raise ValueError(
                f"column {spec.name!r} has missing values (rows {rows}) and its field says "
                "missing='error'"
            )
        # one filter per distinct (salt, value) combination present
        combo = (salt_codes[present] + 1) * len(uniques) + codes[present]
        combo_codes, combos = pd.factorize(combo)
        salts = np.append(salt_values, "")[combos // len(uniques) - 1]
        token_lists = [
            [salt + "\x1f" + token for token in field_tokens(str(uniques[v]), spec)]
            for salt, v in zip(salts.tolist(), (combos % len(uniques)).tolist(), strict=True)
        ]
        if warn:
            _warn_collisions(spec, uniques)
        key = derive_key(secret, spec.key_purpose)
        filters = _filters(token_lists, key, spec.hash_count, schema.bits)
        words[present] |= filters[combo_codes]
        any_value |= present
        steps.advance()
    if not any_value.all():
        rows = frame.index[~any_value][:10].tolist()
        raise ValueError(
            f"{int((~any_value).sum())} rows have every identity field missing (e.g. {rows}); "
            "they cannot be linked: drop them before encoding"
        )
    words = _harden(words, schema, secret)
    block_keys = np.zeros((len(frame), len(schema.blocking_keys)), dtype=np.uint64)
    block_secret = derive_key(secret, "blocking-keys")
    for k, parts in enumerate(schema.blocking_keys):
        block_keys[:, k] = _blocking_key(values, schema, parts, block_secret, k)
    steps.advance()
    return Encodings(
        frame.index.copy(),
        words,
        schema.fingerprint(derive_key(secret, "fingerprint")),
        block_keys,
        invalid,
    )


def _encode_chunk(secret: bytes | str, chunk: pd.DataFrame, offset: int, schema: Schema) -> Any:
    """In a worker: one chunk's encodings, without warnings (the caller gives them once per
    column, from the counts)."""
    return _encode(chunk, schema, secret, warn=False)


def _encode_in_chunks(
    frame: pd.DataFrame, schema: Schema, secret: bytes | str, workers: Workers
) -> Encodings:
    # only the identity columns go to the workers (a quarter of the cohort's bytes: pickling
    # the whole lab frame cost more than encoding it)
    identities = frame[list(schema.columns)]
    parts: list[Encodings] = map_chunks(_encode_chunk, secret, identities, workers, schema)
    invalid: dict[str, int] = {}
    for part in parts:
        for column, count in part.invalid.items():
            invalid[column] = invalid.get(column, 0) + count
    for column, count in invalid.items():
        warnings.warn(
            f"{count} values of column {column!r} did not parse as its field's kind; encoded "
            "as the field's on_invalid says",
            InvalidValueWarning,
            stacklevel=3,
        )
    return Encodings(
        frame.index.copy(),
        np.vstack([p.words for p in parts]),
        parts[0].fingerprint,
        np.vstack([p.block_keys for p in parts]),
        invalid,
    )


def _normalised_codes(
    frame: pd.DataFrame, spec: Field
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int, str]:
    """Each row's code into the distinct normalised values of a column (-1: missing), those
    values, how many rows held a value that did not parse (see ``Field.on_invalid``), and the
    warning to give about them (empty if none)."""
    column = frame[spec.name]
    raw_codes, raw_uniques = pd.factorize(column, use_na_sentinel=True)
    raw = pd.Series(raw_uniques, dtype=object)
    normalised, bad = normalise_values(raw, spec)
    invalid_rows = 0
    notice = ""
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        row = frame.index[int(np.argmax(raw_codes == first))]
        what = f"do not parse as {spec.date_format!r}" if spec.kind == "date" else "are not numbers"
        if spec.on_invalid == "raise":
            fix = "set the field's date_format" if spec.kind == "date" else "clean the column"
            raise ValueError(
                f"column {spec.name!r}: {int(bad.sum())} distinct values {what}, "
                f"e.g. row {row!r}: {column[row]!r}; fix them, {fix}, or set the field's "
                "on_invalid='text' (encode them from their characters) or 'missing'"
            )
        invalid_rows = int(np.isin(raw_codes, np.flatnonzero(bad)).sum())
        values = np.array([None if pd.isna(v) else v for v in normalised], dtype=object)
        if spec.on_invalid == "text":
            as_text = raw[bad].map(
                lambda v: _date_text(v, spec.date_format) if spec.kind == "date" else v
            )
            values[bad] = [_dirty(str(v), spec) for v in as_text]
            handled = (
                "encoded from their characters (on_invalid='text'; placeholders without "
                "enough digits count as missing)"
            )
        else:
            values[bad] = None
            handled = "treated as missing (on_invalid='missing')"
        normalised = pd.Series(values, dtype="string")
        notice = (
            f"column {spec.name!r}: {invalid_rows} rows ({int(bad.sum())} distinct values) "
            f"{what}, e.g. row {row!r}: {column[row]!r}; {handled}"
        )
    norm_codes, uniques = pd.factorize(normalised, use_na_sentinel=True)
    codes = np.where(raw_codes >= 0, np.append(norm_codes, -1)[raw_codes], -1).astype(np.int64)
    return codes, np.asarray(uniques, dtype=object), invalid_rows, notice


_DATE_PARTS = {"%Y": r"(?P<Y>\d{4})", "%y": r"(?P<y>\d{2})", "%m": r"(?P<m>\d{1,2})"}
_DATE_PARTS["%d"] = r"(?P<d>\d{1,2})"


def _lenient_date(format: str) -> re.Pattern[str] | None:
    """A pattern with the parts of a ``strptime`` format that does not check their ranges
    (None when the format has directives other than ``%Y %y %m %d``)."""
    pieces, rest = [], format
    while rest:
        if rest.startswith("%"):
            if rest[:2] not in _DATE_PARTS:
                return None
            pieces.append(_DATE_PARTS[rest[:2]])
            rest = rest[2:]
        else:
            pieces.append(re.escape(rest[0]))
            rest = rest[1:]
    return re.compile("".join(pieces))


def _dirty(raw: str, spec: Field) -> str | None:
    """The normalised form of a value that does not parse: a date's parts as written where
    they fit the format (``1945-04-93``), else ``?`` and its folded letters and digits, which
    :func:`field_tokens` cuts into q-grams. A placeholder is missing (None) rather than a value
    every record holding it would share: fewer than 4 digits in a date (not even a year),
    no digit in a number, or one character repeated (``00000000``, ``99999999``)."""
    text = raw.strip()
    alnum = re.sub(r"[^a-z0-9]", "", _fold(text))
    digits = sum(ch.isdigit() for ch in alnum)
    if digits < (4 if spec.kind == "date" else 1) or len(set(alnum)) <= 1:
        return None
    if spec.kind == "date":
        pattern = _lenient_date(spec.date_format)
        found = pattern.fullmatch(text) if pattern is not None else None
        if found is not None:
            parts = found.groupdict()
            if "y" in parts:
                short = int(parts["y"])
                year = f"{2000 + short if short < 69 else 1900 + short}"
            else:
                year = parts.get("Y", "")
            month, day = parts.get("m", ""), parts.get("d", "")
            if year and month and day:
                return f"{year}-{int(month):02d}-{int(day):02d}"
    return "?" + alnum


def normalise_values(values: pd.Series, spec: Field) -> tuple[pd.Series, np.ndarray[Any, Any]]:
    """Raw values of a field normalised as :func:`encode` does before tokenising.

    Parameters
    ----------
    values : pandas.Series
        Raw values of the column ``spec`` describes.
    spec : Field
        The field: its ``kind`` decides the normalisation (case and accents folded for names,
        separators dropped from identifiers, dates in ISO form, numbers rounded to
        ``decimals``).

    Returns
    -------
    (pandas.Series, numpy.ndarray)
        The normalised values (string dtype, NA where empty) and a boolean mask of those that
        did not parse as a ``date`` or ``number``.
    """
    text = values.astype("string")
    bad = np.zeros(len(values), dtype=bool)
    if spec.kind in ("name", "text"):
        folded = text.map(_fold, na_action="ignore").astype("string")
        pattern = r"[^a-z]" if spec.kind == "name" else r"[^a-z0-9]"
        out = folded.str.replace(pattern, "", regex=True)
    elif spec.kind == "id":
        out = text.str.upper().str.replace(r"[\s\-./]", "", regex=True)
    elif spec.kind == "categorical":
        out = text.str.strip().str.casefold()
    elif spec.kind == "date":
        stripped = values.map(lambda v: _date_text(v, spec.date_format)).astype("string")
        stripped = stripped.str.strip()
        parsed = pd.to_datetime(stripped, format=spec.date_format, errors="coerce")
        bad = (stripped.notna() & (stripped != "") & parsed.isna()).to_numpy(dtype=bool)
        out = parsed.dt.strftime("%Y-%m-%d").astype("string")
    else:  # number
        blank = text.str.strip().fillna("") == ""
        given = values.mask(blank.to_numpy(dtype=bool))  # blanks are missing, not invalid
        numbers = pd.to_numeric(given, errors="coerce")
        bad = (given.notna() & numbers.isna()).to_numpy(dtype=bool)
        # canonical text, so that 45 from an integer column and 45.0 from a float one agree
        out = numbers.map(
            lambda v: f"{round(float(v), spec.decimals):.{spec.decimals}f}", na_action="ignore"
        ).astype("string")
    return out.mask(out == ""), bad


def _date_text(value: Any, date_format: str) -> Any:
    """A date cell as text in the field's format: dates and timestamps are written in it, and
    whole numbers lose the ``.0`` a float column gives them (``19450413.0``)."""
    if isinstance(value, (datetime.date, np.datetime64)):
        return pd.Timestamp(value).strftime(date_format)
    if isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        return str(int(value))
    return value


class CollisionWarning(UserWarning):
    """Distinct values of a field get identical tokens, hence identical encodings."""


class InvalidValueWarning(UserWarning):
    """Values of a ``date`` or ``number`` field did not parse (``Field.on_invalid``)."""


def _warn_collisions(spec: Field, uniques: Any) -> None:
    """Warn when distinct values of a q-gram field still get the same tokens (repeated
    q-grams are counted, so this takes values whose q-gram multisets agree): their encodings
    cannot tell them apart, which for an identifier means silently linking the wrong
    records."""
    if spec.kind not in ("name", "text"):
        return
    seen: dict[frozenset[str], str] = {}
    pairs: list[tuple[str, str]] = []
    for value in map(str, uniques):
        tokens = frozenset(field_tokens(value, spec))
        if tokens in seen:
            pairs.append((seen[tokens], value))
        else:
            seen[tokens] = value
    if pairs:
        first, second = pairs[0]
        warnings.warn(
            f"field {spec.name!r}: {len(pairs)} distinct values have the same q-grams as "
            f"another (e.g. {first!r} and {second!r}) and get identical encodings in this "
            "field; if it is an identifier, declare it kind='id' (compared whole)",
            CollisionWarning,
            stacklevel=4,
        )


def _fold(value: str) -> str:
    decomposed = unicodedata.normalize("NFKD", value.casefold())
    return (
        "".join(ch for ch in decomposed if not unicodedata.combining(ch))
        .replace("ø", "o")
        .replace("ł", "l")
    )


def field_tokens(value: str, spec: Field) -> list[str]:
    """The tokens a normalised value (:func:`normalise_values`) sets in its filter: padded
    q-grams for names and text (a repeated q-gram counted apart), the whole value for an
    identifier, year, month and day for a date, the value itself otherwise."""
    if spec.kind == "id":  # identifiers compare whole: 11 and 111 must never look alike
        return ["=" + value]
    if spec.kind in ("name", "text"):
        return _qgrams(value, spec.q_size)
    if spec.kind in ("date", "number") and value.startswith("?"):  # did not parse: q-grams
        return ["~" + gram for gram in _qgrams(value[1:], 2)]
    if spec.kind == "date":
        year, month, day = value.split("-")
        return [f"y{year}", f"m{month}", f"d{day}"]
    return [value]


def _qgrams(value: str, q: int) -> list[str]:
    """The multiset of padded q-grams: a repeated q-gram is a token of its own (``44`` and
    ``44#2``), so that 11 and 111, or 44499 and 44999, are not the same set."""
    padded = "_" * (q - 1) + value + "_" * (q - 1)
    seen: dict[str, int] = {}
    tokens = []
    for i in range(len(padded) - q + 1):
        gram = padded[i : i + q]
        seen[gram] = seen.get(gram, 0) + 1
        tokens.append(gram if seen[gram] == 1 else f"{gram}\x1e{seen[gram]}")
    return tokens


def _filters(token_lists: list[list[str]], key: bytes, k: int, bits: int) -> np.ndarray[Any, Any]:
    """One filter per token list: ``k`` keyed-BLAKE2b positions per distinct token, each token
    hashed once however many lists hold it."""
    token_ids: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for row, tokens in enumerate(token_lists):
        for token in dict.fromkeys(tokens):
            rows.append(row)
            cols.append(token_ids.setdefault(token, len(token_ids)))
    positions = token_positions(list(token_ids), key=key, hash_count=k, bits=bits)
    row_of, col_of = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    out = np.zeros((len(token_lists), bits // 64), dtype=np.uint64)
    for start in range(0, len(token_lists), _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, len(token_lists))
        lo, hi = np.searchsorted(row_of, [start, stop])
        matrix = np.zeros((stop - start, bits), dtype=bool)
        matrix[np.repeat(row_of[lo:hi] - start, k), positions[col_of[lo:hi]].ravel()] = True
        out[start:stop] = pack_bits(matrix)
    return out


def token_positions(
    tokens: list[str], *, key: bytes, hash_count: int, bits: int
) -> np.ndarray[Any, Any]:
    """The filter positions each token sets: independent outputs of keyed BLAKE2b.

    Parameters
    ----------
    tokens : list of str
        Tokens as :func:`field_tokens` gives them, each prefixed by its salt and ``"\\x1f"``
        (the empty salt when the schema has none).
    key : bytes
        The field's key, :func:`derive_key` of the secret and ``Field.key_purpose``.
    hash_count : int
        Positions per token (``Field.hash_count``).
    bits : int
        The filter length (``Schema.bits``).

    Returns
    -------
    numpy.ndarray
        ``(len(tokens), hash_count)`` positions in ``0 .. bits - 1``.
    """
    k = hash_count
    digests = []
    for token in tokens:
        data = token.encode("utf-8")
        digest = hashlib.blake2b(data, key=key, digest_size=min(64, 4 * k)).digest()
        while len(digest) < 4 * k:  # more than 16 positions: extend with a counter
            digest += hashlib.blake2b(
                data + len(digest).to_bytes(4, "big"), key=key, digest_size=64
            ).digest()
        digests.append(digest[: 4 * k])
    raw = np.frombuffer(b"".join(digests), dtype="<u4").reshape(len(tokens), k)
    return (raw % bits).astype(np.intp)


def _harden(words: np.ndarray[Any, Any], schema: Schema, secret: bytes | str) -> Any:
    """Balancing, XOR-folding and BLIP noise, in this order, as the schema asks."""
    if schema.balance:
        balance_key = derive_key(secret, "balance")
        scores = [
            hashlib.blake2b(i.to_bytes(4, "big"), key=balance_key, digest_size=8).digest()
            for i in range(2 * schema.bits)
        ]
        permutation = np.argsort(np.array(scores, dtype="S8"), kind="stable")
        balanced = np.empty((len(words), words.shape[1] * 2), dtype=np.uint64)
        for start in range(0, len(words), _CHUNK_ROWS):
            bits = unpack_bits(words[start : start + _CHUNK_ROWS])
            both = np.concatenate([bits, 1 - bits], axis=1)
            balanced[start : start + _CHUNK_ROWS] = pack_bits(both[:, permutation])
        words = balanced
    if schema.xor_fold:
        half = words.shape[1] // 2
        words = words[:, :half] ^ words[:, half:]
    if schema.blip_epsilon is not None:
        flip = 1.0 / (1.0 + np.exp(schema.blip_epsilon))
        cut = np.uint32(round(flip * 2**32))
        length = words.shape[1] * 64
        for start in range(0, len(words), _CHUNK_ROWS):
            rows = len(words[start : start + _CHUNK_ROWS])
            draws = np.frombuffer(os.urandom(rows * length * 4), dtype="<u4").reshape(rows, length)
            words[start : start + _CHUNK_ROWS] ^= pack_bits(draws < cut)
    return words


def _part(
    values: dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    schema: Schema,
    part: str,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Each row's code into the distinct values of a part (``"column:transform"``), and those."""
    name, _, transform = part.partition(":")
    codes, uniques = values[name]
    if not transform:
        return codes, uniques
    kind = next(f.kind for f in schema.fields if f.name == name)
    texts = [str(v) for v in uniques]
    if transform in ("year", "month", "day"):
        position = ("year", "month", "day").index(transform)
        # a date that did not parse into parts ("?...") has no year, month or day
        out = ["" if t.startswith("?") else t.split("-")[position] for t in texts]
    elif transform == "soundex":
        out = [
            soundex(t) if kind == "name" else soundex("".join(filter(str.isalpha, t)))
            for t in texts
        ]
    else:  # prefixN
        out = [t[: int(transform[len("prefix") :])] for t in texts]
    part_codes, part_uniques = pd.factorize(np.array(out, dtype=object))
    mapped = np.append(part_codes, -1)[codes]
    empty = np.flatnonzero(np.asarray(part_uniques) == "")  # no soundex, year, ...: missing
    if len(empty):
        mapped[mapped == empty[0]] = -1
    return mapped.astype(np.int64), np.asarray(part_uniques, dtype=object)


def _blocking_key(
    values: dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    schema: Schema,
    parts: tuple[str, ...],
    secret: bytes,
    number: int,
) -> np.ndarray[Any, Any]:
    """A keyed 64-bit hash of the parts' combined values per row (0 where a part is missing)."""
    combined = np.zeros(len(next(iter(values.values()))[0]), dtype=np.int64)
    texts: list[np.ndarray[Any, Any]] = []
    missing = np.zeros(len(combined), dtype=bool)
    for part in parts:
        codes, uniques = _part(values, schema, part)
        missing |= codes < 0
        combined = pd.factorize(combined * (len(uniques) + 1) + codes + 1)[0].astype(np.int64)
        texts.append(np.append(uniques, "")[codes])
    first_row = np.unique(combined, return_index=True)[1]
    hashes = np.empty(len(first_row), dtype=np.uint64)
    for code, row in enumerate(first_row.tolist()):
        message = "\x1f".join([str(number), *(str(t[row]) for t in texts)]).encode("utf-8")
        digest = hashlib.blake2b(message, key=secret, digest_size=8).digest()
        hashes[code] = max(int.from_bytes(digest, "little"), 1)
    out = hashes[combined]
    out[missing] = 0
    return out


def soundex(name: str) -> str:
    """American Soundex of a normalised name (``"robert"`` -> ``"R163"``); ``""`` if no letter."""
    letters = [c for c in name.lower() if "a" <= c <= "z"]
    if not letters:
        return ""
    codes = {
        c: str(d)
        for d, group in enumerate(["aeiouyhw", "bfpv", "cgjkqsxz", "dt", "l", "mn", "r"])
        for c in group
    }
    out, last = letters[0].upper(), codes[letters[0]]
    for c in letters[1:]:
        code = codes[c]
        if code != "0" and code != last:
            out += code
        if c not in "hw":
            last = code
    return (out + "000")[:4]
