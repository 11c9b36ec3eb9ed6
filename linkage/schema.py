"""What identity fields a linkage uses and how each is turned into tokens.

A :class:`Schema` is shared by the data holders (it is not secret); the secret key they also
share decides where each token lands in the Bloom filter. Each :class:`Field` names a column and
its kind, which sets good defaults for normalisation, q-gram size and weight:

==============  =================================================================  ===  ======
kind            tokens                                                              q    weight
==============  =================================================================  ===  ======
``name``        q-grams of the letters (accents and case folded, spaces, hyphens    2    20
                and apostrophes removed), padded with ``_`` at both ends
``text``        q-grams of the letters and digits, padded                           2    10
``date``        year, month and day as three tokens (parsed with ``date_format``)   --   15
``categorical`` the folded value as one token                                      --   10
``number``      the value rounded to ``decimals`` as one token                      --   10
``id``          q-grams of the normalised ID (upper case, no spaces or dashes)      2    10
==============  =================================================================  ===  ======

``weight`` is the number of bit positions each token sets (hash functions per token); a
missing value contributes no tokens (``missing="skip"``, the default) or raises
(``missing="error"``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["KINDS", "SCHEMA_VERSION", "Field", "Schema"]

SCHEMA_VERSION = 1
KINDS = ("name", "text", "date", "categorical", "number", "id")
_DEFAULT_Q = {"name": 2, "text": 2, "id": 2}
_DEFAULT_WEIGHT = {"name": 20, "text": 10, "date": 15, "categorical": 10, "number": 10, "id": 10}


@dataclass(frozen=True)
class Field:
    """One identity column of a :class:`Schema` (see the module docstring for the defaults).

    Parameters
    ----------
    name : str
        Column name in the data holders' frames.
    kind : str
        One of :data:`KINDS`.
    q : int, optional
        q-gram size for ``name``, ``text`` and ``id`` fields.
    weight : int, optional
        Bit positions set per token (hash functions per token).
    date_format : str
        ``strptime`` format of ``date`` fields (default ``%Y%m%d``).
    decimals : int
        Rounding of ``number`` fields.
    missing : {"skip", "error"}
        What a missing value does.
    """

    name: str
    kind: str = "text"
    q: int | None = None
    weight: int | None = None
    date_format: str = "%Y%m%d"
    decimals: int = 0
    missing: str = "skip"

    def problems(self) -> list[str]:
        """Everything wrong with this field (empty when it is valid)."""
        out = []
        if not isinstance(self.name, str) or not self.name:
            out.append(f"field name {self.name!r} must be a non-empty string")
        if self.kind not in KINDS:
            out.append(
                f"field {self.name!r}: unknown kind {self.kind!r}; valid kinds are {list(KINDS)}"
            )
        if self.q is not None and not (isinstance(self.q, int) and 1 <= self.q <= 5):
            out.append(f"field {self.name!r}: q must be 1..5, got {self.q!r}")
        if self.weight is not None and not (
            isinstance(self.weight, int) and 1 <= self.weight <= 200
        ):
            out.append(
                f"field {self.name!r}: weight must be 1..200 hash functions, got {self.weight!r}"
            )
        if self.missing not in ("skip", "error"):
            out.append(
                f"field {self.name!r}: missing must be 'skip' or 'error', got {self.missing!r}"
            )
        return out

    @property
    def q_size(self) -> int:
        """The q-gram size in use."""
        return self.q if self.q is not None else _DEFAULT_Q.get(self.kind, 2)

    @property
    def hash_count(self) -> int:
        """The weight in use."""
        return self.weight if self.weight is not None else _DEFAULT_WEIGHT[self.kind]


@dataclass(frozen=True)
class Schema:
    """Fields and Bloom-filter size of an encoding; JSON round trip with a version.

    Parameters
    ----------
    fields : list of Field
        The identity columns.
    bits : int
        Bloom-filter length, a multiple of 64 (default 1024).

    Raises
    ------
    ValueError
        Listing every problem at once (unknown kinds, duplicate names, bad sizes).
    """

    fields: tuple[Field, ...]
    bits: int = 1024
    version: int = field(default=SCHEMA_VERSION)

    def __init__(self, fields: Any, bits: int = 1024, version: int = SCHEMA_VERSION) -> None:
        object.__setattr__(self, "fields", tuple(fields))
        object.__setattr__(self, "bits", bits)
        object.__setattr__(self, "version", version)
        problems: list[str] = []
        if not self.fields:
            problems.append("a schema needs at least one field")
        given: tuple[Any, ...] = tuple(fields)
        for f in given:
            if not isinstance(f, Field):
                problems.append(f"{f!r} is not a linkage.Field")
                continue
            problems += f.problems()
        names = [f.name for f in self.fields if isinstance(f, Field)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            problems.append(f"duplicate field names {duplicates}")
        if not isinstance(bits, int) or bits < 64 or bits % 64 or bits > 2**16:
            problems.append(f"bits must be a multiple of 64 between 64 and 65536, got {bits!r}")
        if version != SCHEMA_VERSION:
            problems.append(f"schema version {version} is not supported (this is {SCHEMA_VERSION})")
        if problems:
            raise ValueError("invalid linkage schema:\n  " + "\n  ".join(problems))

    @property
    def columns(self) -> list[str]:
        """The column names the schema reads."""
        return [f.name for f in self.fields]

    def to_json(self) -> str:
        """Canonical JSON (sorted keys): equal schemas give equal text."""
        return json.dumps(
            {
                "version": self.version,
                "bits": self.bits,
                "fields": [asdict(f) for f in self.fields],
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> Schema:
        """Inverse of :meth:`to_json`."""
        try:
            data = json.loads(text)
            fields = [Field(**f) for f in data["fields"]]
            return cls(fields, bits=data["bits"], version=data["version"])
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a linkage schema in JSON: {exc}") from None

    def fingerprint(self, key: bytes) -> bytes:
        """A keyed check value of schema and secret: equal only for the same schema and secret,
        and revealing neither (HMAC-SHA256 under a key derived from the secret)."""
        return hmac.new(
            key, b"vflink/linkage/schema/" + self.to_json().encode(), hashlib.sha256
        ).digest()
