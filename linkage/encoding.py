"""Bloom-filter encodings of identities (cryptographic long-term keys, Schnell et al. 2011).

Each record's identity fields are normalised and cut into tokens (:mod:`linkage.schema`); each
token sets ``weight`` bit positions of one record-level Bloom filter (default 1024 bits),
chosen by keyed BLAKE2b under a key derived for its field from the shared secret (HKDF-SHA256).
The positions of a token are independent outputs of a keyed pseudo-random function, not the
double-hashing construction ``h1 + i*h2`` that Kroll and Steinmetzer (2015) exploited.

Vectorised: normalisation runs on whole columns, every distinct value of a field is tokenised
and hashed once (names repeat a lot), and a record's filter is the OR of its values' filters,
packed in ``uint64`` words.

.. warning::
   Bloom-filter encodings are not encryption. Someone who holds encodings and knows the
   frequency of names in the population can re-identify frequent values by frequency analysis
   of bit patterns (Kuzu et al. 2011; Christen et al. 2018), more easily with fewer fields per
   filter. The linkage unit that compares them must not also hold the secret or the plaintexts,
   and encodings should be deleted after linkage.
"""

from __future__ import annotations

import hashlib
import logging
import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from linkage.schema import Field, Schema

__all__ = ["Encodings", "derive_key", "encode"]

logger = logging.getLogger(__name__)


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
    """

    index: pd.Index
    words: np.ndarray[Any, np.dtype[np.uint64]]
    fingerprint: bytes

    def __len__(self) -> int:
        return len(self.index)

    @property
    def bits(self) -> int:
        """Filter length in bits."""
        return int(self.words.shape[1] * 64)

    def popcounts(self) -> np.ndarray[Any, Any]:
        """Bits set per record."""
        counts: np.ndarray[Any, Any] = np.bitwise_count(self.words).sum(axis=1).astype(np.int64)
        return counts

    def bit_matrix(self) -> np.ndarray[Any, Any]:
        """The filters as an ``(n, bits)`` uint8 matrix of 0/1 (bit ``i`` in column ``i``)."""
        as_bytes = self.words.astype("<u8").view(np.uint8)
        return np.unpackbits(as_bytes, axis=1, bitorder="little")


def encode(frame: pd.DataFrame, schema: Schema, *, secret: bytes | str) -> Encodings:
    """Encode the schema's columns of ``frame`` into Bloom filters indexed like ``frame``.

    Raises
    ------
    ValueError
        An empty frame, a non-unique index, columns missing from the frame (named), an
        unparseable date or number (row label and value), a missing value in a field with
        ``missing="error"``, or rows whose identity fields are all missing (their labels; drop
        them first).
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
    n_words = schema.bits // 64
    words = np.zeros((len(frame), n_words), dtype=np.uint64)
    any_value = np.zeros(len(frame), dtype=bool)
    for spec in schema.fields:
        values = _normalise(frame[spec.name], spec)
        present = values.notna().to_numpy()
        if spec.missing == "error" and not present.all():
            rows = frame.index[~present][:5].tolist()
            raise ValueError(
                f"column {spec.name!r} has missing values (rows {rows}) and its field says "
                "missing='error'"
            )
        codes, uniques = pd.factorize(values)
        key = derive_key(secret, f"field/{spec.name}")
        filters = np.zeros((len(uniques) + 1, n_words), dtype=np.uint64)  # last row: missing
        for u, value in enumerate(uniques):
            filters[u] = _token_filter(_tokens(str(value), spec), key, spec.hash_count, schema.bits)
        words |= filters[np.where(codes >= 0, codes, len(uniques))]
        any_value |= present
    if not any_value.all():
        rows = frame.index[~any_value][:10].tolist()
        raise ValueError(
            f"{int((~any_value).sum())} rows have every identity field missing (e.g. {rows}); "
            "they cannot be linked: drop them before encoding"
        )
    return Encodings(
        frame.index.copy(), words, schema.fingerprint(derive_key(secret, "fingerprint"))
    )


def _normalise(column: pd.Series, spec: Field) -> pd.Series:
    """The column's values normalised for tokenising; missing values as NA."""
    text = column.astype("string")
    if spec.kind in ("name", "text"):
        folded = text.map(_fold, na_action="ignore").astype("string")
        pattern = r"[^a-z]" if spec.kind == "name" else r"[^a-z0-9]"
        out = folded.str.replace(pattern, "", regex=True)
    elif spec.kind == "id":
        out = text.str.upper().str.replace(r"[\s\-./]", "", regex=True)
    elif spec.kind == "categorical":
        out = text.str.strip().str.casefold()
    elif spec.kind == "date":
        stripped = text.str.strip()
        parsed = pd.to_datetime(stripped, format=spec.date_format, errors="coerce")
        bad = stripped.notna() & (stripped != "") & parsed.isna()
        if bad.any():
            row = column.index[bad.to_numpy()][0]
            raise ValueError(
                f"column {spec.name!r}: {int(bad.sum())} values do not parse as "
                f"{spec.date_format!r}, "
                f"e.g. row {row!r}: {column[row]!r}; fix them, or set the field's date_format"
            )
        out = parsed.dt.strftime("%Y-%m-%d").astype("string")
    else:  # number
        numbers = pd.to_numeric(column, errors="coerce")
        bad = column.notna() & numbers.isna()
        if bad.any():
            row = column.index[bad.to_numpy()][0]
            raise ValueError(
                f"column {spec.name!r}: row {row!r} holds {column[row]!r}, not a number"
            )
        out = numbers.round(spec.decimals).astype("string")
    return out.mask(out == "")


def _fold(value: str) -> str:
    decomposed = unicodedata.normalize("NFKD", value.casefold())
    return (
        "".join(ch for ch in decomposed if not unicodedata.combining(ch))
        .replace("ø", "o")
        .replace("ł", "l")
    )


def _tokens(value: str, spec: Field) -> list[str]:
    if spec.kind in ("name", "text", "id"):
        q = spec.q_size
        padded = "_" * (q - 1) + value + "_" * (q - 1)
        return [padded[i : i + q] for i in range(len(padded) - q + 1)]
    if spec.kind == "date":
        year, month, day = value.split("-")
        return [f"y{year}", f"m{month}", f"d{day}"]
    return [value]


def _token_filter(tokens: list[str], key: bytes, k: int, bits: int) -> np.ndarray[Any, Any]:
    """The filter bits a value's tokens set: ``k`` keyed-BLAKE2b positions per token."""
    positions = []
    for token in dict.fromkeys(tokens):
        digest = hashlib.blake2b(
            token.encode("utf-8"), key=key, digest_size=min(64, 4 * k)
        ).digest()
        while len(digest) < 4 * k:  # more than 16 positions: extend with a counter
            digest += hashlib.blake2b(
                token.encode("utf-8") + len(digest).to_bytes(4, "big"), key=key, digest_size=64
            ).digest()
        positions.append(np.frombuffer(digest[: 4 * k], dtype="<u4") % bits)
    filt = np.zeros(bits // 64, dtype=np.uint64)
    if positions:
        pos = np.concatenate(positions).astype(np.uint64)
        np.bitwise_or.at(
            filt,
            (pos >> np.uint64(6)).astype(np.intp),
            np.left_shift(np.uint64(1), pos & np.uint64(63)),
        )
    return filt
