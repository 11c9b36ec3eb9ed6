"""The wire format: the closed set of payload types that may cross a party boundary.

Every message a party sends to another process is encoded here to bytes and decoded here on
arrival. Within one process, the in-process federation hands the receiver :func:`replica` of the
payload instead -- exactly what decoding the encoded bytes would give -- and counts the bytes
the encoding would have (``record_payloads=True`` passes the real bytes), so transcripts count
the same bytes either way. Nothing is ever unpickled: decoding reads a small
self-describing binary format and can only build these types:

=================  ===================================================================
payload            decoded as
=================  ===================================================================
``None``           ``None``
``bool``           ``bool`` (``numpy.bool_`` is encoded as ``bool``)
``int``            ``int`` of any size (``numpy`` integer scalars are encoded as ``int``)
``float``          ``float`` (IEEE 754 binary64; ``numpy`` float scalars widen to it)
``str``            ``str`` (UTF-8)
``bytes``          ``bytes`` (``bytearray`` and ``memoryview`` are encoded as bytes)
``list``/``tuple`` ``list``
``dict``           ``dict`` with ``str`` or ``int`` keys
``numpy.ndarray``  ``numpy.ndarray`` of a numeric dtype (bool, int8-64, uint8-64,
                   float16-64, complex64/128), any shape, a fresh writable C-ordered copy
CiphertextBlock    :class:`CiphertextBlock`: Paillier ciphertexts as fixed-width big-endian
                   integers, their fixed-point exponents and the public key's fingerprint
=================  ===================================================================

Layout: the 3-byte magic ``b"VFW"``, a version byte, then one value. A value is a type byte
followed by its body; lengths and counts are little-endian unsigned integers. Decoding checks
every length against the bytes that remain before allocating anything, checks dtype codes,
shapes and nesting depth, refuses trailing bytes and messages above a size limit, and raises
:class:`WireFormatError` (a ``ValueError``) that says what was wrong and at which offset.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FINGERPRINT_BYTES",
    "MAX_DEPTH",
    "CiphertextBlock",
    "Payload",
    "WireFormatError",
    "decode",
    "encode",
    "payload_kind",
]

MAGIC = b"VFW"
VERSION = 1
DEFAULT_MAX_BYTES = 256 * 2**20
"""Largest message, in bytes, that :func:`encode` produces and :func:`decode` accepts by default."""
MAX_DEPTH = 32
"""Deepest nesting of lists and dicts that :func:`decode` accepts."""
MAX_NDIM = 32
MAX_ITEMS = 2**22
"""Most values (scalars, strings, containers, arrays) one message may decode to, which bounds the
memory of Python objects a small message could ask for; bulk data travels as numpy arrays."""
FINGERPRINT_BYTES = 32
_MAX_ELEMENTS = 2**56  # no shape, even one with a zero, may overflow numpy's byte count

Payload: TypeAlias = Any
"""A value of the closed set of types in the module docstring."""

_NONE, _FALSE, _TRUE, _INT, _FLOAT, _STR, _BYTES, _LIST, _DICT, _ARRAY, _CIPHER = range(11)

_DTYPES: dict[int, np.dtype[Any]] = {
    1: np.dtype("?"),
    2: np.dtype("<i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<u1"),
    7: np.dtype("<u2"),
    8: np.dtype("<u4"),
    9: np.dtype("<u8"),
    10: np.dtype("<f2"),
    11: np.dtype("<f4"),
    12: np.dtype("<f8"),
    13: np.dtype("<c8"),
    14: np.dtype("<c16"),
}
_DTYPE_CODES = {(dt.kind, dt.itemsize): code for code, dt in _DTYPES.items()}

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")
_FLOAT_TAG, _STR_TAG = _U8.pack(_FLOAT), _U8.pack(_STR)


class WireFormatError(ValueError):
    """A message is malformed, truncated, oversized or of a type outside the wire format."""


@dataclass(frozen=True, eq=False)
class CiphertextBlock:
    """Paillier ciphertexts as they travel: fixed-width integers plus what is needed to use them.

    Parameters
    ----------
    key_fingerprint : bytes
        The 32-byte fingerprint of the public key the ciphertexts were made under; the
        receiving side refuses ciphertexts that claim a key it does not expect.
    shape : tuple of int
        Shape of the encrypted array; ``math.prod(shape)`` ciphertexts.
    exponents : numpy.ndarray
        int64 fixed-point exponents, either one shared by all values (shape ``(1,)``) or one
        per value (shape ``(count,)``).
    width : int
        Bytes per ciphertext (the byte length of n squared).
    data : bytes
        ``count * width`` bytes, each ciphertext big-endian in ``width`` bytes.
    """

    key_fingerprint: bytes
    shape: tuple[int, ...]
    exponents: np.ndarray[Any, np.dtype[np.int64]]
    width: int
    data: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.key_fingerprint, bytes) or len(self.key_fingerprint) != (
            FINGERPRINT_BYTES
        ):
            raise WireFormatError(
                f"CiphertextBlock.key_fingerprint must be {FINGERPRINT_BYTES} bytes, "
                f"got {self.key_fingerprint!r:.60}"
            )
        if not isinstance(self.width, int) or not 1 <= self.width <= 2**16:
            raise WireFormatError(
                f"CiphertextBlock.width must be 1..65536 bytes, got {self.width!r}"
            )
        if len(self.shape) > MAX_NDIM or any(not isinstance(d, int) or d < 0 for d in self.shape):
            raise WireFormatError(
                f"CiphertextBlock.shape must be at most {MAX_NDIM} non-negative ints: {self.shape}"
            )
        if len(self.data) != self.count * self.width:
            raise WireFormatError(
                f"CiphertextBlock holds {len(self.data)} bytes of ciphertext but its shape "
                f"{self.shape} x width {self.width} needs {self.count * self.width}"
            )
        exps = self.exponents
        if not isinstance(exps, np.ndarray) or exps.dtype != np.int64 or exps.ndim != 1:
            raise WireFormatError("CiphertextBlock.exponents must be a 1-d int64 array")
        if exps.shape[0] not in (1, self.count):
            raise WireFormatError(
                f"CiphertextBlock has {exps.shape[0]} exponents for {self.count} ciphertexts; "
                "give one shared exponent or one per ciphertext"
            )

    @property
    def count(self) -> int:
        """Number of ciphertexts."""
        return math.prod(self.shape)

    @classmethod
    def from_integers(
        cls,
        key_fingerprint: bytes,
        ciphertexts: Sequence[int],
        exponents: Sequence[int] | np.ndarray[Any, Any] | int,
        *,
        width: int,
        shape: tuple[int, ...] | None = None,
    ) -> CiphertextBlock:
        """Pack ciphertext integers (``0 <= c < 256**width``) into a block."""
        try:
            data = b"".join(int(c).to_bytes(width, "big") for c in ciphertexts)
        except OverflowError as exc:
            raise WireFormatError(
                f"a ciphertext does not fit in {width} bytes (or is negative)"
            ) from exc
        exps = np.atleast_1d(np.asarray(exponents, dtype=np.int64))
        return cls(
            key_fingerprint=key_fingerprint,
            shape=(len(ciphertexts),) if shape is None else tuple(shape),
            exponents=exps,
            width=width,
            data=data,
        )

    def integers(self) -> list[int]:
        """The ciphertexts as Python integers, in C order."""
        w = self.width
        data = self.data
        return [int.from_bytes(data[i : i + w], "big") for i in range(0, len(data), w)]


# --------------------------------------------------------------------------------------------
# encoding


def encode(payload: Payload, *, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """Encode ``payload`` to bytes.

    Parameters
    ----------
    payload
        A value of the closed set of types in the module docstring.
    max_bytes : int
        Refuse to produce a message larger than this many bytes.

    Raises
    ------
    TypeError
        A value outside the wire format (a set, a DataFrame, an object array, ...); the
        message gives its path inside the payload, e.g. ``payload['grads'][3]``.
    ValueError
        The encoded message would exceed ``max_bytes``.
    """
    parts: list[bytes] = [MAGIC, _U8.pack(VERSION)]
    _encode_into(parts, payload, "payload", 0)
    size = sum(map(len, parts))
    if size > max_bytes:
        raise ValueError(
            f"the encoded message is {size} bytes, above the limit of {max_bytes} bytes; "
            "send it in smaller pieces or raise max_message_bytes on the federation"
        )
    return b"".join(parts)


def _encode_into(parts: list[bytes], obj: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise TypeError(f"{path}: nesting deeper than {MAX_DEPTH} levels is not in the wire format")
    kind = type(obj)
    if kind is float:  # the commonest scalars first: a message's fields are mostly these
        parts += [_FLOAT_TAG, _F64.pack(obj)]
        return
    if kind is str and obj.isascii():
        parts += [_STR_TAG, _u32(len(obj), path), obj.encode("ascii")]
        return
    if obj is None:
        parts.append(_U8.pack(_NONE))
    elif isinstance(obj, (bool, np.bool_)):
        parts.append(_U8.pack(_TRUE if obj else _FALSE))
    elif isinstance(obj, (int, np.integer)):
        value = int(obj)
        body = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
        parts += [_U8.pack(_INT), _u32(len(body), path), body]
    elif isinstance(obj, (float, np.floating)):
        parts += [_U8.pack(_FLOAT), _F64.pack(float(obj))]
    elif isinstance(obj, str):
        try:
            body = obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TypeError(f"{path}: string is not valid Unicode text ({exc})") from None
        parts += [_U8.pack(_STR), _u32(len(body), path), body]
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        body = bytes(obj)
        parts += [_U8.pack(_BYTES), _U64.pack(len(body)), body]
    elif isinstance(obj, (list, tuple)):
        parts += [_U8.pack(_LIST), _u32(len(obj), path)]
        for i, item in enumerate(obj):
            _encode_into(parts, item, f"{path}[{i}]", depth + 1)
    elif isinstance(obj, dict):
        parts += [_U8.pack(_DICT), _u32(len(obj), path)]
        for key, value in obj.items():
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise TypeError(
                    f"{path}: dict key {key!r} of type {type(key).__name__} is not in the wire "
                    "format; use str or int keys"
                )
            _encode_into(parts, key, path, depth + 1)
            _encode_into(parts, value, f"{path}[{key!r}]", depth + 1)
    elif isinstance(obj, np.ndarray):
        _encode_array(parts, obj, path)
    elif isinstance(obj, CiphertextBlock):
        parts += [
            _U8.pack(_CIPHER),
            obj.key_fingerprint,
            _U8.pack(len(obj.shape)),
            *(_U64.pack(d) for d in obj.shape),
            _U32.pack(obj.width),
        ]
        _encode_array(parts, obj.exponents, f"{path}.exponents")
        parts.append(obj.data)
    else:
        hint = ""
        if hasattr(obj, "to_numpy"):
            hint = " (convert it with .to_numpy() and send the column names as a list of str)"
        raise TypeError(
            f"{path}: type {type(obj).__module__}.{type(obj).__qualname__} is not in the wire "
            "format; allowed are None, bool, int, float, str, bytes, list, dict, numeric numpy "
            f"arrays and CiphertextBlock{hint}"
        )


def _u32(value: int, path: str) -> bytes:
    if value >= 2**32:
        raise ValueError(f"{path}: {value} elements or bytes exceed the wire format's 2**32 limit")
    return _U32.pack(value)


def _array_code(arr: np.ndarray[Any, Any], path: str) -> int:
    """The wire's dtype code for ``arr``; a TypeError for what does not travel."""
    code = _DTYPE_CODES.get((arr.dtype.kind, arr.dtype.itemsize))
    if code is None or arr.dtype.fields is not None:
        raise TypeError(
            f"{path}: a numpy array of dtype {arr.dtype} is not in the wire format; only "
            "numeric dtypes (bool, int, uint, float, complex) travel; convert it first, "
            "e.g. with .astype(np.float64)"
        )
    if arr.ndim > MAX_NDIM:
        raise TypeError(f"{path}: arrays of more than {MAX_NDIM} dimensions are not supported")
    return code


def _encode_array(parts: list[bytes], arr: np.ndarray[Any, Any], path: str) -> None:
    code = _array_code(arr, path)
    data = np.ascontiguousarray(arr, dtype=_DTYPES[code]).tobytes()
    parts += [_U8.pack(_ARRAY), _U8.pack(code), _U8.pack(arr.ndim)]
    parts += [_U64.pack(d) for d in arr.shape]
    parts.append(data)


def replica(payload: Payload, *, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[Payload, int]:
    """``(decode(encode(payload)), len(encode(payload)))`` without making the bytes: what a
    receiver of ``payload`` would decode -- lists for tuples, Python scalars for numpy ones,
    ``bytes`` for byte buffers, every array a C-ordered copy in the wire's dtype -- and the
    encoded size. An in-process transport hands the receiver this replica (nothing it shares
    with the sender can change under it) and records the size (the transcript's bytes are the
    encoded ones). It refuses what :func:`encode` refuses, with the same errors.

    Raises
    ------
    TypeError, ValueError
        As :func:`encode`.
    WireFormatError
        The payload holds more than :data:`MAX_ITEMS` values, which :func:`decode` would
        refuse at the receiver (an encoding transport then shows the receiver's error).
    """
    counter = [0]
    out, size = _replica(payload, "payload", 0, counter)
    size += len(MAGIC) + 1
    if size > max_bytes:
        raise ValueError(
            f"the encoded message is {size} bytes, above the limit of {max_bytes} bytes; "
            "send it in smaller pieces or raise max_message_bytes on the federation"
        )
    if counter[0] > MAX_ITEMS:
        raise WireFormatError(f"more than {MAX_ITEMS} values in one message")
    return out, size


def _replica(obj: Any, path: str, depth: int, counter: list[int]) -> tuple[Any, int]:
    """:func:`replica` of ``obj`` at ``path``: ``(value, encoded bytes)``; mirrors
    :func:`_encode_into` and the reader's :meth:`_Reader.value`, rule for rule."""
    if depth > MAX_DEPTH:
        raise TypeError(f"{path}: nesting deeper than {MAX_DEPTH} levels is not in the wire format")
    counter[0] += 1
    kind = type(obj)
    if kind is float:  # the commonest values of a message's fields first
        return obj, 9
    if kind is str and obj.isascii():
        _u32(len(obj), path)
        return obj, 5 + len(obj)
    if kind is int:
        return obj, 5 + (obj.bit_length() + 8) // 8
    if obj is None:
        return None, 1
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj), 1
    if isinstance(obj, (int, np.integer)):
        value = int(obj)
        length = (value.bit_length() + 8) // 8
        _u32(length, path)
        return value, 5 + length
    if isinstance(obj, (float, np.floating)):
        return float(obj), 9
    if isinstance(obj, str):
        try:
            body = obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TypeError(f"{path}: string is not valid Unicode text ({exc})") from None
        _u32(len(body), path)
        return (obj if kind is str else str(body, "utf-8")), 5 + len(body)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        blob = bytes(obj)  # the object itself when it is bytes already
        return blob, 9 + len(blob)
    if isinstance(obj, (list, tuple)):
        _u32(len(obj), path)
        if depth < MAX_DEPTH and obj:  # a list of one leaf type: the same rules, in bulk
            leaves = set(map(type, obj))
            if leaves == {bytes} or (leaves == {str} and all(map(str.isascii, obj))):
                if max(map(len, obj)) <= 0xFFFFFFFF:
                    counter[0] += len(obj)
                    head = 9 if leaves == {bytes} else 5  # a length of 8 bytes, or of 4
                    return list(obj), 5 + head * len(obj) + sum(map(len, obj))
            elif leaves == {float}:
                counter[0] += len(obj)
                return list(obj), 5 + 9 * len(obj)
        items, size = [], 5
        for i, item in enumerate(obj):
            value, n = _replica(item, f"{path}[{i}]", depth + 1, counter)
            items.append(value)
            size += n
        return items, size
    if isinstance(obj, dict):
        _u32(len(obj), path)
        out: dict[Any, Any] = {}
        size = 5
        inline = depth < MAX_DEPTH  # a message's fields: ASCII keys, floats and arrays inline
        for key, item in obj.items():
            if inline and type(key) is str and key.isascii():
                counter[0] += 1
                copied_key, n_key = key, 5 + len(key)
            else:
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    raise TypeError(
                        f"{path}: dict key {key!r} of type {type(key).__name__} is not in the "
                        "wire format; use str or int keys"
                    )
                copied_key, n_key = _replica(key, path, depth + 1, counter)
            kind = type(item)
            copied: Any
            if inline and kind is float:
                counter[0] += 1
                copied, n = item, 9
            elif inline and kind is np.ndarray and (code := _native_code(item)) is not None:
                counter[0] += 1
                copied, n = _array_copy(item, code)
            else:
                copied, n = _replica(item, f"{path}[{key!r}]", depth + 1, counter)
            out[copied_key] = copied
            size += n_key + n
        return out, size
    if isinstance(obj, np.ndarray):
        return _array_replica(obj, path)
    if isinstance(obj, CiphertextBlock):
        exponents, n = _array_replica(obj.exponents, f"{path}.exponents")
        block = CiphertextBlock(
            obj.key_fingerprint, tuple(obj.shape), exponents, obj.width, obj.data
        )
        return block, 1 + FINGERPRINT_BYTES + 1 + 8 * len(obj.shape) + 4 + n + len(obj.data)
    _encode_into([], obj, path, depth)  # raises encode's TypeError for this type
    raise AssertionError("unreachable")  # pragma: no cover


def _array_replica(arr: np.ndarray[Any, Any], path: str) -> tuple[np.ndarray[Any, Any], int]:
    return _array_copy(arr, _array_code(arr, path))


def _array_copy(arr: np.ndarray[Any, Any], code: int) -> tuple[np.ndarray[Any, Any], int]:
    """The receiver's C-ordered copy of ``arr`` in the wire's dtype ``code``, and its size."""
    copy: np.ndarray[Any, Any] = np.array(arr, dtype=_DTYPES[code], order="C", copy=True)
    return copy, 3 + 8 * arr.ndim + copy.nbytes


def _native_code(arr: np.ndarray[Any, Any]) -> int | None:
    """The wire's dtype code of ``arr`` when it travels as it is (a native-order dtype of the
    wire's, few dimensions), else None (:func:`_array_code` then names what is wrong)."""
    dtype = arr.dtype
    code = _DTYPE_CODES.get((dtype.kind, dtype.itemsize))
    return code if code is not None and _DTYPES[code] == dtype and arr.ndim <= MAX_NDIM else None


def recopy(value: Payload) -> Payload:
    """Another receiver's copy of a :func:`replica`'s value: its lists, dicts, arrays and
    ciphertext blocks' exponents copied, its immutable leaves (``None``, ``bool``, ``int``,
    ``float``, ``str``, ``bytes``) shared. A broadcast in one process makes the replica once
    (checked and sized once) and hands each further receiver a recopy, so that no receiver's
    change reaches another -- without walking the rules of the wire again per receiver."""
    kind = type(value)
    if kind is list:
        return [item if type(item) in _IMMUTABLE else recopy(item) for item in value]
    if kind is dict:
        return {
            key: item if type(item) in _IMMUTABLE else recopy(item) for key, item in value.items()
        }
    if kind is np.ndarray:
        return value.copy()
    if kind is CiphertextBlock:
        return CiphertextBlock(
            value.key_fingerprint, value.shape, value.exponents.copy(), value.width, value.data
        )
    if kind in _IMMUTABLE:
        return value
    raise TypeError(f"not a replica's value: {kind.__name__}")


_IMMUTABLE = frozenset({type(None), bool, int, float, str, bytes})


# --------------------------------------------------------------------------------------------
# decoding


def decode(data: bytes | bytearray | memoryview, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Payload:
    """Decode bytes made by :func:`encode`.

    Raises
    ------
    WireFormatError
        The message is larger than ``max_bytes``, truncated, has trailing bytes, an unknown
        magic, version, type or dtype code, a length or shape that disagrees with its bytes,
        invalid UTF-8, non-0/1 booleans, duplicate dict keys, nesting deeper than
        :data:`MAX_DEPTH`, or more than :data:`MAX_ITEMS` values.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireFormatError(f"expected bytes to decode, got {type(data).__name__}")
    try:
        view = memoryview(data).cast("B")
    except TypeError as exc:  # e.g. a non-contiguous memoryview
        raise WireFormatError(f"cannot read the message as bytes: {exc}") from None
    if len(view) > max_bytes:
        raise WireFormatError(
            f"message of {len(view)} bytes exceeds the size limit of {max_bytes} bytes"
        )
    reader = _Reader(view)
    magic = bytes(reader.take(len(MAGIC), "magic"))
    if magic != MAGIC:
        raise WireFormatError(f"not a vflink message: magic {magic!r}, expected {MAGIC!r}")
    version = reader.u8("version")
    if version != VERSION:
        raise WireFormatError(f"unsupported wire format version {version}; this is {VERSION}")
    value = reader.value(0)
    if reader.pos != len(view):
        raise WireFormatError(
            f"{len(view) - reader.pos} trailing bytes after the payload at offset {reader.pos}"
        )
    return value


class _Reader:
    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.pos = 0
        self.items = 0

    def take(self, n: int, what: str) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.view):
            raise WireFormatError(
                f"truncated message: {what} needs {n} bytes at offset {self.pos}, "
                f"only {len(self.view) - self.pos} remain"
            )
        chunk = self.view[self.pos : end]
        self.pos = end
        return chunk

    def remaining(self) -> int:
        return len(self.view) - self.pos

    def u8(self, what: str) -> int:
        pos = self.pos
        if pos >= len(self.view):
            self.take(1, what)  # raises, naming what is truncated
        self.pos = pos + 1
        return int(self.view[pos])

    def u32(self, what: str) -> int:
        value: int = _U32.unpack(self.take(4, what))[0]
        return value

    def u64(self, what: str) -> int:
        value: int = _U64.unpack(self.take(8, what))[0]
        return value

    def value(self, depth: int) -> Payload:
        if depth > MAX_DEPTH:
            raise WireFormatError(f"nesting deeper than {MAX_DEPTH} levels at offset {self.pos}")
        start = self.pos
        tag = self.u8("type tag")
        self.items += 1
        if self.items > MAX_ITEMS:
            raise WireFormatError(
                f"more than {MAX_ITEMS} values in one message (at offset {start})"
            )
        if tag == _NONE:
            return None
        if tag == _FALSE:
            return False
        if tag == _TRUE:
            return True
        if tag == _INT:
            n = self.u32("int length")
            return int.from_bytes(self.take(n, "int"), "little", signed=True)
        if tag == _FLOAT:
            value: float = _F64.unpack(self.take(8, "float"))[0]
            return value
        if tag == _STR:
            n = self.u32("str length")
            raw = self.take(n, "str")
            try:
                return str(raw, "utf-8")
            except UnicodeDecodeError as exc:
                raise WireFormatError(f"invalid UTF-8 in str at offset {start}: {exc}") from None
        if tag == _BYTES:
            n = self.u64("bytes length")
            return bytes(self.take(n, "bytes"))
        if tag == _LIST:
            n = self.count("list", start)
            return [self.value(depth + 1) for _ in range(n)]
        if tag == _DICT:
            n = self.count("dict", start)
            out: dict[Any, Any] = {}
            for _ in range(n):
                key_at = self.pos
                key = self.value(depth + 1)
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    raise WireFormatError(
                        f"dict key at offset {key_at} is a {type(key).__name__}; only str and "
                        "int keys are allowed"
                    )
                if key in out:
                    raise WireFormatError(f"duplicate dict key {key!r} at offset {key_at}")
                out[key] = self.value(depth + 1)
            return out
        if tag == _ARRAY:
            return self.array(start)
        if tag == _CIPHER:
            return self.ciphertexts(start)
        raise WireFormatError(f"unknown type tag {tag} at offset {start}")

    def count(self, what: str, start: int) -> int:
        n = self.u32(f"{what} length")
        if n > self.remaining():  # every element takes at least one byte
            raise WireFormatError(
                f"{what} at offset {start} claims {n} elements but only "
                f"{self.remaining()} bytes remain"
            )
        return n

    def shape(self, start: int) -> tuple[int, ...]:
        ndim = self.u8("ndim")
        if ndim > MAX_NDIM:
            raise WireFormatError(f"array at offset {start} claims {ndim} dimensions")
        shape: tuple[int, ...] = _shape_format(ndim).unpack(self.take(8 * ndim, "shape"))
        if math.prod([max(d, 1) for d in shape]) > _MAX_ELEMENTS:
            raise WireFormatError(f"array at offset {start} claims an impossible shape {shape}")
        return shape

    def array(self, start: int) -> np.ndarray[Any, Any]:
        code = self.u8("dtype code")
        dtype = _DTYPES.get(code)
        if dtype is None:
            raise WireFormatError(f"unknown dtype code {code} for the array at offset {start}")
        shape = self.shape(start)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > self.remaining():
            raise WireFormatError(
                f"array at offset {start} claims shape {shape} of {dtype} ({nbytes} bytes) but "
                f"only {self.remaining()} bytes remain"
            )
        raw = self.take(nbytes, "array data")
        try:
            arr: np.ndarray[Any, Any] = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        except ValueError as exc:  # defence in depth: numpy refusing a shape
            raise WireFormatError(f"array at offset {start}: {exc}") from None
        if dtype.kind == "b" and arr.size and arr.view(np.uint8).max() > 1:
            raise WireFormatError(f"bool array at offset {start} holds bytes other than 0 and 1")
        return arr

    def ciphertexts(self, start: int) -> CiphertextBlock:
        fingerprint = bytes(self.take(FINGERPRINT_BYTES, "key fingerprint"))
        shape = self.shape(start)
        width = self.u32("ciphertext width")
        if not 1 <= width <= 2**16:
            raise WireFormatError(f"ciphertext width {width} at offset {start} is out of range")
        exp_at = self.pos
        if self.u8("exponent array tag") != _ARRAY:
            raise WireFormatError(f"ciphertext exponents at offset {exp_at} are not an array")
        exponents = self.array(exp_at)
        if exponents.dtype != np.int64 or exponents.ndim != 1:
            raise WireFormatError(
                f"ciphertext exponents at offset {exp_at} must be 1-d int64, "
                f"got {exponents.dtype} of shape {exponents.shape}"
            )
        nbytes = math.prod(shape) * width
        if nbytes > self.remaining():
            raise WireFormatError(
                f"ciphertexts at offset {start} claim shape {shape} x {width} bytes but only "
                f"{self.remaining()} bytes remain"
            )
        data = bytes(self.take(nbytes, "ciphertexts"))
        return CiphertextBlock(fingerprint, shape, exponents, width, data)


# --------------------------------------------------------------------------------------------


def payload_kind(payload: Payload) -> str:
    """A short description of a payload's type for transcripts, e.g. ``"dict[ciphertexts,int]"``.

    Containers list the kinds of their direct elements (sorted, distinct).
    """
    if type(payload) is dict:  # a message's fields: the commonest payload
        return _container_kind("dict", frozenset(map(_scalar_kind, payload.values())))
    kind = _scalar_kind(payload)
    if isinstance(payload, Mapping):
        return _container_kind(kind, frozenset(map(_scalar_kind, payload.values())))
    if isinstance(payload, (list, tuple)):
        return _container_kind(kind, frozenset(map(_scalar_kind, payload)))
    return kind


@functools.lru_cache(maxsize=1024)
def _container_kind(kind: str, inner: frozenset[str]) -> str:
    return f"{kind}[{','.join(sorted(inner))}]"


@functools.cache
def _shape_format(ndim: int) -> struct.Struct:
    return struct.Struct(f"<{ndim}Q")


_EXACT_KINDS: dict[type, str] = {
    type(None): "none",
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    bytes: "bytes",
    list: "list",
    tuple: "list",
    dict: "dict",
}


@functools.cache
def _array_kind(dtype: np.dtype[Any]) -> str:
    return f"ndarray<{dtype}>"


def _scalar_kind(obj: Any) -> str:
    kind = _EXACT_KINDS.get(type(obj))
    if kind is not None:
        return kind
    if type(obj) is np.ndarray:
        return _array_kind(obj.dtype)
    if obj is None:
        return "none"
    if isinstance(obj, (bool, np.bool_)):
        return "bool"
    if isinstance(obj, (int, np.integer)):
        return "int"
    if isinstance(obj, (float, np.floating)):
        return "float"
    if isinstance(obj, str):
        return "str"
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(obj, (list, tuple)):
        return "list"
    if isinstance(obj, Mapping):
        return "dict"
    if isinstance(obj, np.ndarray):
        return f"ndarray<{obj.dtype}>"
    if isinstance(obj, CiphertextBlock):
        return "ciphertexts"
    return type(obj).__name__
