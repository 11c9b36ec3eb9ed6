"""What identity fields a linkage uses and how each is turned into tokens.

A :class:`Schema` is shared by the data holders (it is not secret); the secret key they also
share decides where each token lands in the Bloom filter. Each :class:`Field` names a column and
its kind, which sets good defaults for normalisation, q-gram size and weight:

==============  =================================================================  ===  ======
kind            tokens                                                              q    weight
==============  =================================================================  ===  ======
``name``        q-grams of the letters (accents and case folded, spaces, hyphens    2    20
                and apostrophes removed), padded with ``_`` at both ends; a
                repeated q-gram counts again (``44`` then ``44#2``)
``text``        q-grams of the letters and digits, padded, repeats counted          2    10
``date``        year, month and day as three tokens (parsed with ``date_format``)   --   15
``categorical`` the folded value as one token                                      --   10
``number``      the value rounded to ``decimals`` as one token                      --   10
``id``          the normalised ID (upper case, no spaces, dashes, dots or slashes)  --   10
                as one token: identifiers compare whole, so ``11`` never matches
                ``111`` (q-gram sets would make them identical)
==============  =================================================================  ===  ======

``weight`` is the number of bit positions each token sets (hash functions per token); a
missing value contributes no tokens (``missing="skip"``, the default) or raises
(``missing="error"``).

**Dirty values never stop a linkage.** A ``date`` or ``number`` value that does not parse is
handled by the field's ``on_invalid``:

* ``"text"`` (the default) -- encoded anyway, so that a typo still finds its partner. A date
  whose characters still fit the ``date_format`` pattern (``19450493`` under ``%Y%m%d``: day
  93) gives the tokens of its parts as written (``y1945``, ``m04``, ``d93``), so it shares the
  year and month with ``19450413``; any other value (and an unparsable number) gives the
  q-grams of its letters and digits, which match the same dirty value on the other side only;
* ``"missing"`` -- treated as missing (no tokens);
* ``"raise"`` -- a ``ValueError`` naming the column, a row and the value.

Either way the values are counted: :func:`linkage.encode` warns once per column
(:class:`~linkage.encoding.InvalidValueWarning`) and the counts travel with the encodings
(``Encodings.invalid``) into ``match``'s ``attrs["invalid_values"]``. ``name``, ``text``,
``categorical`` and ``id`` values are never invalid.

A schema also names the **hardening** applied to every filter (all off by default; each is
part of the schema, so both data holders must agree on it) and the **blocking keys** sent
beside the filters (see :class:`Schema`). Parts of a record used for salting and blocking are
written ``"column"`` or ``"column:transform"``, with the transforms

* ``year``, ``month``, ``day`` -- of a ``date`` field;
* ``soundex`` -- the Soundex code of a ``name`` or ``text`` field;
* ``prefix1`` ... ``prefix9`` -- the first characters of a normalised value.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["KINDS", "ON_INVALID", "SCHEMA_VERSION", "TRANSFORMS", "Field", "Schema"]

SCHEMA_VERSION = 1
TRANSFORMS = ("year", "month", "day", "soundex", *(f"prefix{n}" for n in range(1, 10)))
KINDS = ("name", "text", "date", "categorical", "number", "id")
ON_INVALID = ("text", "missing", "raise")
_DEFAULT_Q = {"name": 2, "text": 2}
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
        q-gram size for ``name`` and ``text`` fields.
    weight : int, optional
        Bit positions set per token (hash functions per token).
    date_format : str
        ``strptime`` format of ``date`` fields (default ``%Y%m%d``).
    decimals : int
        Rounding of ``number`` fields.
    missing : {"skip", "error"}
        What a missing value does.
    hash_group : str, optional
        Fields with the same group hash their tokens under the same key, so that a value moved
        between them (given name and surname swapped) still sets the same bits. Fields of
        different groups, or without one, use keys of their own.
    on_invalid : {"text", "missing", "raise"}
        What a ``date`` or ``number`` value that does not parse does (see the module
        docstring): encoded from its characters (default), treated as missing, or an error.
    """

    name: str
    kind: str = "text"
    q: int | None = None
    weight: int | None = None
    date_format: str = "%Y%m%d"
    decimals: int = 0
    missing: str = "skip"
    hash_group: str | None = None
    on_invalid: str = "text"

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
        if self.hash_group is not None and not (
            isinstance(self.hash_group, str) and self.hash_group
        ):
            out.append(f"field {self.name!r}: hash_group must be a non-empty string or None")
        if self.on_invalid not in ON_INVALID:
            out.append(
                f"field {self.name!r}: on_invalid must be one of {list(ON_INVALID)}, "
                f"got {self.on_invalid!r}"
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
    def key_purpose(self) -> str:
        """What this field's hashing key is derived for (shared within a ``hash_group``)."""
        return f"group/{self.hash_group}" if self.hash_group else f"field/{self.name}"

    @property
    def hash_count(self) -> int:
        """The weight in use."""
        return self.weight if self.weight is not None else _DEFAULT_WEIGHT[self.kind]


@dataclass(frozen=True)
class Schema:
    """Fields, Bloom-filter size, hardening and blocking keys of an encoding; JSON round trip.

    Parameters
    ----------
    fields : list of Field
        The identity columns.
    bits : int
        Bloom-filter length, a multiple of 64 (default 1024).
    salt : str, optional
        A stable part of the record (``"date_of_birth:year"``) mixed into every token's hash,
        so that the same name sets different bits for people born in different years. Makes
        frequency attacks much harder (a name's bit pattern splits into one pattern per salt
        value); costs recall where the salt itself has a typo, since those records then share
        almost nothing. Records without a salt value are salted with the empty string.
    balance : bool
        Append each filter's complement and shuffle the ``2 * bits`` positions by a permutation
        keyed by the secret (Schnell 2016): every filter then has exactly ``bits`` ones, so
        the number of set bits no longer hints at the length of names. Doubles the filter
        length (and comparison time) and makes the length filter useless.
    xor_fold : bool
        Fold each filter in half by XOR of its halves (Schnell, Borgs and Encarnação 2016):
        half the length, and a set bit no longer points to one token; similarity gets noisier.
        ``bits`` must then be a multiple of 128.
    blip_epsilon : float, optional
        Randomised response (BLIP; Alaggan et al. 2012, Schnell and Borgs 2016): each bit is
        flipped independently with probability ``1 / (1 + exp(blip_epsilon))``, drawn from OS
        randomness, so each single bit is ``blip_epsilon``-differentially private (a token
        sets up to ``weight`` bits, so a token is ``weight * blip_epsilon``-DP). Smaller
        epsilon, more noise, lower similarity between true pairs.
    blocking_keys : list of list of str
        Each inner list names the parts (``"surname:soundex"``, ``"date_of_birth:year"``)
        whose combination is one blocking key; :func:`linkage.encode` sends a keyed hash of
        each key beside the filter, and records that share a key become candidates
        (:func:`linkage.block`). A record missing a part has no value for that key.

    Raises
    ------
    ValueError
        Listing every problem at once (unknown kinds, duplicate names, bad sizes, unknown
        parts).
    """

    fields: tuple[Field, ...]
    bits: int = 1024
    salt: str | None = None
    balance: bool = False
    xor_fold: bool = False
    blip_epsilon: float | None = None
    blocking_keys: tuple[tuple[str, ...], ...] = ()
    version: int = field(default=SCHEMA_VERSION)

    def __init__(
        self,
        fields: Any,
        bits: int = 1024,
        *,
        salt: str | None = None,
        balance: bool = False,
        xor_fold: bool = False,
        blip_epsilon: float | None = None,
        blocking_keys: Any = (),
        version: int = SCHEMA_VERSION,
    ) -> None:
        object.__setattr__(self, "fields", tuple(fields))
        object.__setattr__(self, "bits", bits)
        object.__setattr__(self, "salt", salt)
        object.__setattr__(self, "balance", balance)
        object.__setattr__(self, "xor_fold", xor_fold)
        object.__setattr__(self, "blip_epsilon", blip_epsilon)
        keys: Any = blocking_keys
        if isinstance(keys, (list, tuple)):
            keys = tuple((k,) if isinstance(k, str) else tuple(k) for k in keys)
        object.__setattr__(self, "blocking_keys", keys)
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
        elif xor_fold and bits % 128:
            problems.append(f"xor_fold needs bits to be a multiple of 128, got {bits}")
        if salt is not None:
            problems += self._part_problems(salt, "salt")
        flags: tuple[tuple[Any, str], ...] = ((balance, "balance"), (xor_fold, "xor_fold"))
        for flag, name in flags:
            if not isinstance(flag, bool):
                problems.append(f"{name} must be True or False, got {flag!r}")
        if blip_epsilon is not None and not (
            isinstance(blip_epsilon, (int, float)) and 0 < blip_epsilon <= 20
        ):
            problems.append(f"blip_epsilon must be a number in (0, 20], got {blip_epsilon!r}")
        if not isinstance(keys, tuple):
            problems.append(f"blocking_keys must be a list of lists of parts, got {keys!r}")
        else:
            for key in keys:
                if not key:
                    problems.append("a blocking key needs at least one part")
                for part in key:
                    problems += self._part_problems(part, "blocking key")
        if version != SCHEMA_VERSION:
            problems.append(f"schema version {version} is not supported (this is {SCHEMA_VERSION})")
        if problems:
            raise ValueError("invalid linkage schema:\n  " + "\n  ".join(problems))

    def _part_problems(self, part: Any, role: str) -> list[str]:
        if not isinstance(part, str):
            return [f"{role} part {part!r} must be a string like 'surname' or 'surname:soundex'"]
        name, _, transform = part.partition(":")
        kinds = {f.name: f.kind for f in self.fields if isinstance(f, Field)}
        if name not in kinds:
            return [f"{role} part {part!r}: {name!r} is not a field of the schema"]
        if not transform:
            return []
        if transform not in TRANSFORMS:
            return [f"{role} part {part!r}: unknown transform; valid: {list(TRANSFORMS)}"]
        if transform in ("year", "month", "day") and kinds[name] != "date":
            return [f"{role} part {part!r}: {transform!r} needs a date field"]
        if transform == "soundex" and kinds[name] not in ("name", "text"):
            return [f"{role} part {part!r}: soundex needs a name or text field"]
        return []

    @property
    def encoded_bits(self) -> int:
        """Length of the encodings after hardening (``balance`` doubles, ``xor_fold`` halves)."""
        return self.bits * (2 if self.balance else 1) // (2 if self.xor_fold else 1)

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
                "salt": self.salt,
                "balance": self.balance,
                "xor_fold": self.xor_fold,
                "blip_epsilon": self.blip_epsilon,
                "blocking_keys": [list(k) for k in self.blocking_keys],
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
            options = {
                k: data[k]
                for k in ("salt", "balance", "xor_fold", "blip_epsilon", "blocking_keys")
                if k in data
            }
            return cls(fields, bits=data["bits"], version=data["version"], **options)
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a linkage schema in JSON: {exc}") from None

    def fingerprint(self, key: bytes) -> bytes:
        """A keyed check value of schema and secret: equal only for the same schema and secret,
        and revealing neither (HMAC-SHA256 under a key derived from the secret)."""
        return hmac.new(
            key, b"vflink/linkage/schema/" + self.to_json().encode(), hashlib.sha256
        ).digest()
