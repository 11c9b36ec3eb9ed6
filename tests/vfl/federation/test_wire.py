"""Wire format: round trips for every payload type, and a rejection for every malformed input."""

from __future__ import annotations

import contextlib
import math
import struct
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vfl.federation import wire
from vfl.federation.wire import CiphertextBlock, WireFormatError, decode, encode

DTYPES = [
    "?",
    "<i1",
    "<i2",
    "<i4",
    "<i8",
    "<u1",
    "<u2",
    "<u4",
    "<u8",
    "<f2",
    "<f4",
    "<f8",
    "<c8",
    "<c16",
]


def same(a: Any, b: Any) -> bool:
    """Structural equality that tells types apart and compares floats bit for bit."""
    if isinstance(a, CiphertextBlock):
        return (
            isinstance(b, CiphertextBlock)
            and a.key_fingerprint == b.key_fingerprint
            and a.shape == b.shape
            and a.width == b.width
            and a.data == b.data
            and same(a.exponents, b.exponents)
        )
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, float):
        return isinstance(b, float) and struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary()
arrays = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.arrays(
        np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)
    )
)


@st.composite
def ciphertext_blocks(draw: st.DrawFn) -> CiphertextBlock:
    width = draw(st.integers(1, 64))
    count = draw(st.integers(0, 12))
    values = draw(st.lists(st.integers(0, 256**width - 1), min_size=count, max_size=count))
    shared = draw(st.booleans())
    exps = draw(
        st.lists(
            st.integers(-(2**63), 2**63 - 1),
            min_size=1 if shared else count,
            max_size=1 if shared else count,
        )
        if (shared or count)
        else st.just([0])
    )
    fingerprint = draw(st.binary(min_size=32, max_size=32))
    return CiphertextBlock.from_integers(fingerprint, values, exps, width=width)


payloads = st.recursive(
    scalars | arrays | ciphertext_blocks(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(payloads)
@settings(max_examples=300, deadline=None)
def test_every_payload_round_trips(payload: Any) -> None:
    assert same(payload, decode(encode(payload)))


@given(payloads)
@settings(max_examples=300, deadline=None)
def test_a_replica_is_what_the_receiver_decodes_and_its_size_the_encoded_size(
    payload: Any,
) -> None:
    encoded = encode(payload)
    copy, size = wire.replica(payload)
    assert size == len(encoded)
    assert same(decode(encoded), copy)


def _mutables(value: Any) -> list[Any]:
    """Every list, dict and array inside ``value`` (a block's exponents included)."""
    if isinstance(value, list):
        return [value, *(m for item in value for m in _mutables(item))]
    if isinstance(value, dict):
        return [value, *(m for item in value.values() for m in _mutables(item))]
    if isinstance(value, CiphertextBlock):
        return [value.exponents]
    return [value] if isinstance(value, np.ndarray) else []


@given(payloads | ciphertext_blocks())
@settings(max_examples=200, deadline=None)
def test_a_recopy_equals_the_replica_and_shares_nothing_mutable_with_it(payload: Any) -> None:
    copy, _ = wire.replica(payload)
    again = wire.recopy(copy)
    assert same(copy, again)
    for old, new in zip(_mutables(copy), _mutables(again), strict=True):
        assert old is not new and type(old) is type(new)
        if isinstance(old, np.ndarray):
            assert not np.shares_memory(old, new) and new.flags.writeable
    with pytest.raises(TypeError, match="not a replica's value: tuple"):
        wire.recopy((1, 2))


def test_a_replica_converts_as_the_wire_does_and_shares_nothing_with_the_sender() -> None:
    strided = np.arange(12, dtype=">f8").reshape(3, 4)[:, ::2]  # big-endian, not contiguous
    payload = {
        "t": (1, np.int16(-3), np.float32(0.5), np.bool_(True)),
        "raw": bytearray(b"ab"),
        "view": memoryview(b"cd"),
        "a": strided,
        "zero-d": np.array(7, dtype=np.uint8),
        7: [None, "\u00e9"],
    }
    copy, size = wire.replica(payload)
    assert size == len(encode(payload))
    assert same(decode(encode(payload)), copy)
    assert type(copy["t"]) is list and type(copy["raw"]) is bytes and copy["view"] == b"cd"
    assert copy["a"].dtype == np.dtype("<f8") and copy["a"].flags.c_contiguous
    strided[0, 0] = 99.0  # the sender's later change does not reach the receiver's copy
    assert copy["a"][0, 0] == 0.0 and copy["a"].flags.writeable
    block = CiphertextBlock.from_integers(b"k" * 32, [5, 6], [0, 1], width=2)
    got, n = wire.replica(block)
    assert n == len(encode(block)) and got.integers() == [5, 6]
    assert not np.shares_memory(got.exponents, block.exponents)
    with pytest.raises(ValueError, match="above the limit of 100 bytes"):
        wire.replica(np.zeros(100), max_bytes=100)


@given(arrays)
@settings(max_examples=200, deadline=None)
def test_arrays_keep_dtype_shape_and_bits(arr: np.ndarray) -> None:
    out = decode(encode(arr))
    assert out.dtype == arr.dtype and out.shape == arr.shape
    assert out.tobytes() == arr.tobytes()
    assert out.flags.writeable and out.flags.c_contiguous


@given(ciphertext_blocks())
@settings(max_examples=100, deadline=None)
def test_ciphertext_integers_round_trip(block: CiphertextBlock) -> None:
    out = decode(encode(block))
    assert isinstance(out, CiphertextBlock)
    assert out.integers() == block.integers()
    assert out.key_fingerprint == block.key_fingerprint


def test_conversions_that_are_documented() -> None:
    assert decode(encode((1, 2.5, "x"))) == [1, 2.5, "x"]
    assert type(decode(encode(np.int64(7)))) is int
    assert type(decode(encode(np.float32(0.5)))) is float
    assert decode(encode(np.bool_(True))) is True
    assert decode(encode(bytearray(b"ab"))) == b"ab"
    big_endian = np.arange(6, dtype=">i4").reshape(2, 3)
    np.testing.assert_array_equal(decode(encode(big_endian)), big_endian)
    strided = np.arange(20.0).reshape(4, 5)[:, ::2]
    np.testing.assert_array_equal(decode(encode(strided)), strided)
    assert decode(encode(2**300 + 1)) == 2**300 + 1
    assert decode(encode(-(2**200))) == -(2**200)


# -- rejections on decode -----------------------------------------------------------------


def header() -> bytes:
    return wire.MAGIC + bytes([wire.VERSION])


def test_every_truncation_is_refused() -> None:
    block = CiphertextBlock.from_integers(b"k" * 32, [5, 6], [0], width=8)
    message = encode({"a": [1, 2.0, "three", b"four", np.arange(3.0)], "c": block, 5: None})
    for cut in range(len(message)):
        with pytest.raises(WireFormatError):
            decode(message[:cut])


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(WireFormatError, match="trailing bytes"):
        decode(encode([1, 2]) + b"\x00")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x80\x05\x95\x00", "not a vflink message"),  # a pickle stream is never unpickled
        (b"VFW\x09\x00", "unsupported wire format version"),
        (header() + b"\xee", "unknown type tag 238"),
        (header() + bytes([9, 99, 1]) + struct.pack("<Q", 1) + b"\x00", "unknown dtype code 99"),
        (header() + bytes([9, 12, 1]) + struct.pack("<Q", 4) + b"\x00" * 8, "claims shape"),
        (header() + bytes([9, 12, 1]) + struct.pack("<Q", 2**62) + b"\x00" * 8, "impossible shape"),
        (header() + bytes([9, 12, 1]) + struct.pack("<Q", 1) + b"\x00" * 16, "trailing bytes"),
        (header() + bytes([9, 12, 40]), "claims 40 dimensions"),
        (header() + bytes([9, 1, 2]) + struct.pack("<QQ", 0, 2**63), "impossible shape"),
        (
            header() + bytes([9, 1, 1]) + struct.pack("<Q", 2) + b"\x01\x02",
            "bytes other than 0 and 1",
        ),
        (header() + bytes([7]) + struct.pack("<I", 1000) + b"\x00", "claims 1000 elements"),
        (header() + bytes([8]) + struct.pack("<I", 2**31) + b"\x00", "claims"),
        (header() + bytes([5]) + struct.pack("<I", 10) + b"abc", "truncated"),
        (header() + bytes([5]) + struct.pack("<I", 2) + b"\xff\xfe", "invalid UTF-8"),
        (header() + bytes([6]) + struct.pack("<Q", 2**60) + b"ab", "truncated"),
        (header() + bytes([3]) + struct.pack("<I", 2**31), "truncated"),
        (
            header()
            + bytes([8])
            + struct.pack("<I", 1)
            + bytes([4])
            + struct.pack("<d", 1.0)
            + b"\x00",
            "only str and int keys",
        ),
        (
            header()
            + bytes([8])
            + struct.pack("<I", 2)
            + (bytes([5, 1, 0, 0, 0]) + b"k" + b"\x00") * 2,
            "duplicate dict key 'k'",
        ),
        (header() + (bytes([7]) + struct.pack("<I", 1)) * 40 + b"\x00", "nesting deeper"),
    ],
    ids=[
        "pickle",
        "version",
        "type-tag",
        "dtype-code",
        "shape-larger-than-data",
        "shape-overflow",
        "shape-smaller-than-data",
        "ndim",
        "zero-size-huge-dim",
        "bool-values",
        "list-count",
        "dict-count",
        "str-length",
        "utf8",
        "bytes-length",
        "int-length",
        "float-key",
        "duplicate-key",
        "depth",
    ],
)
def test_malformed_messages_are_refused(data: bytes, match: str) -> None:
    with pytest.raises(WireFormatError, match=match):
        decode(data)


def _cipher_message(width: int, shape: int, exps: np.ndarray, data: bytes) -> bytes:
    exp_part = (
        bytes([9, 5 if exps.dtype == np.int64 else 12, 1])
        + struct.pack("<Q", len(exps))
        + exps.tobytes()
    )
    return (
        header()
        + bytes([10])
        + b"f" * 32
        + bytes([1])
        + struct.pack("<Q", shape)
        + struct.pack("<I", width)
        + exp_part
        + data
    )


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (_cipher_message(0, 1, np.zeros(1, np.int64), b""), "width 0"),
        (_cipher_message(4, 2, np.zeros(1, np.float64), b"\x00" * 8), "must be 1-d int64"),
        (
            _cipher_message(4, 3, np.zeros(2, np.int64), b"\x00" * 12),
            "2 exponents for 3 ciphertexts",
        ),
        (_cipher_message(4, 3, np.zeros(1, np.int64), b"\x00" * 8), "claim shape"),
    ],
    ids=["width", "exponent-dtype", "exponent-count", "data-length"],
)
def test_malformed_ciphertexts_are_refused(message: bytes, match: str) -> None:
    with pytest.raises(WireFormatError, match=match):
        decode(message)


def test_size_limit_on_both_sides() -> None:
    payload = np.zeros(1000)
    message = encode(payload)
    with pytest.raises(WireFormatError, match="exceeds the size limit of 100 bytes"):
        decode(message, max_bytes=100)
    with pytest.raises(ValueError, match="above the limit of 100 bytes"):
        encode(payload, max_bytes=100)


def test_decode_needs_bytes() -> None:
    with pytest.raises(WireFormatError, match="expected bytes"):
        decode("VFW")  # type: ignore[arg-type]


@given(st.binary(max_size=200))
@settings(max_examples=500, deadline=None)
def test_random_bytes_never_raise_anything_but_wire_errors(data: bytes) -> None:
    for candidate in (data, header() + data):
        with contextlib.suppress(WireFormatError):
            decode(candidate)


@given(payloads, st.data())
@settings(max_examples=200, deadline=None)
def test_corrupted_messages_decode_or_raise_wire_errors(payload: Any, data: st.DataObject) -> None:
    message = bytearray(encode(payload))
    at = data.draw(st.integers(0, len(message) - 1))
    message[at] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(WireFormatError):
        decode(bytes(message))


# -- rejections on encode -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({1, 2}, r"payload: type builtins.set is not in the wire format"),
        ({"x": [1, object()]}, r"payload\['x'\]\[1\]: type builtins.object"),
        (pd.DataFrame({"a": [1]}), r"\.to_numpy\(\)"),
        (np.array(["a", "b"]), "dtype <U1 is not in the wire format"),
        (np.array([1, None], dtype=object), "dtype object"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "dtype datetime64"),
        (np.zeros(2, dtype=[("a", "<f8")]), "is not in the wire format"),
        ({True: 1}, "dict key True of type bool"),
        ({1.5: 1}, "dict key 1.5 of type float"),
        ("\ud800", "not valid Unicode"),
    ],
    ids=[
        "set",
        "nested-object",
        "dataframe",
        "str-array",
        "object-array",
        "datetime",
        "structured",
        "bool-key",
        "float-key",
        "surrogate",
    ],
)
def test_values_outside_the_format_are_refused(payload: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        encode(payload)
    with pytest.raises(TypeError, match=match):  # an in-process transport refuses the same
        wire.replica(payload)


def test_deep_nesting_is_refused_on_encode() -> None:
    deep: Any = 0
    for _ in range(wire.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(TypeError, match="nesting deeper"):
        encode(deep)
    with pytest.raises(TypeError, match="nesting deeper"):
        wire.replica(deep)


def test_ciphertext_block_checks_itself() -> None:
    with pytest.raises(WireFormatError, match="32 bytes"):
        CiphertextBlock.from_integers(b"short", [1], [0], width=4)
    with pytest.raises(WireFormatError, match="does not fit in 2 bytes"):
        CiphertextBlock.from_integers(b"k" * 32, [2**16], [0], width=2)
    with pytest.raises(WireFormatError, match="does not fit"):
        CiphertextBlock.from_integers(b"k" * 32, [-1], [0], width=2)
    with pytest.raises(WireFormatError, match="2 exponents for 3"):
        CiphertextBlock.from_integers(b"k" * 32, [1, 2, 3], [0, 0], width=2)
    block = CiphertextBlock.from_integers(b"k" * 32, [1, 2, 3, 4], [7], width=2, shape=(2, 2))
    assert block.count == 4 and block.integers() == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        (None, "none"),
        (3, "int"),
        (np.zeros(2, np.float32), "ndarray<float32>"),
        ({"a": 1, "b": np.zeros(1)}, "dict[int,ndarray<float64>]"),
        (
            [CiphertextBlock.from_integers(b"k" * 32, [1], [0], width=1), 1.0],
            "list[ciphertexts,float]",
        ),
    ],
)
def test_payload_kind(payload: Any, kind: str) -> None:
    assert wire.payload_kind(payload) == kind


def test_size_accounting_is_exact() -> None:
    arr = np.zeros((10, 3))
    # magic (3) + version (1) + tag (1) + dtype (1) + ndim (1) + 2 dims (16) + data
    assert len(encode(arr)) == 3 + 1 + 1 + 1 + 1 + 16 + arr.nbytes
    assert math.isnan(decode(encode(float("nan"))))


def test_encode_side_limits_are_value_errors() -> None:
    with pytest.raises(WireFormatError, match="at most 32"):
        CiphertextBlock(b"k" * 32, (1,) * 33, np.zeros(1, np.int64), 1, b"\x01")
    with pytest.raises(WireFormatError, match="cannot read the message"):
        decode(memoryview(encode([1, 2]) * 2)[::2])


def test_message_item_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "MAX_ITEMS", 100)
    assert decode(encode([None] * 99)) == [None] * 99
    with pytest.raises(WireFormatError, match="more than 100 values"):
        decode(encode([None] * 100))
