"""Hardening options and blocking-key parts: each does what it says, and linkage still works."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from linkage import Field, Schema, encode, evaluate, match
from linkage.encoding import soundex
from vfl.datasets import identity_schema, make_lab_imaging_cohort

SECRET = b"a shared secret of 32 bytes, ok!"
BASE = identity_schema()


def dice(x: np.ndarray, y: np.ndarray) -> float:
    inter = np.bitwise_count(x & y).sum()
    return float(2 * inter / (np.bitwise_count(x).sum() + np.bitwise_count(y).sum()))


def twins() -> pd.DataFrame:
    """The same person twice, but born in another year the second time."""
    return pd.DataFrame(
        {
            "given_name": ["Maria", "Maria"],
            "surname": ["Schmidt", "Schmidt"],
            "date_of_birth": ["19800101", "19810101"],
            "sex": ["F", "F"],
            "postcode": ["10115", "10115"],
        },
        index=["x", "y"],
    )


def test_salting_splits_a_value_by_the_salt() -> None:
    plain = encode(twins(), BASE, secret=SECRET).words
    salted = encode(twins(), Schema(BASE.fields, salt="date_of_birth:year"), secret=SECRET).words
    assert dice(plain[0], plain[1]) > 0.9  # one date digit apart
    assert dice(salted[0], salted[1]) < 0.6  # the names now set unrelated bits
    again = encode(twins(), Schema(BASE.fields, salt="date_of_birth:year"), secret=SECRET).words
    np.testing.assert_array_equal(salted, again)


def test_balancing_gives_every_filter_the_same_weight() -> None:
    lab, _, _ = make_lab_imaging_cohort(300, random_state=1)
    plain = encode(lab, BASE, secret=SECRET)
    balanced = encode(lab, Schema(BASE.fields, balance=True), secret=SECRET)
    assert balanced.bits == 2 * plain.bits
    assert np.all(balanced.popcounts() == plain.bits)
    assert len(set(plain.popcounts().tolist())) > 10  # the plain ones vary
    # a keyed permutation of (filter, complement): the multiset of bits per position is fixed
    bits_p, bits_b = plain.bit_matrix(), balanced.bit_matrix()
    both = np.concatenate([bits_p, 1 - bits_p], axis=1)
    assert sorted(map(tuple, both.T.tolist())) == sorted(map(tuple, bits_b.T.tolist()))


def test_xor_folding_xors_the_halves() -> None:
    lab, _, _ = make_lab_imaging_cohort(200, random_state=2)
    plain = encode(lab, BASE, secret=SECRET).words
    folded = encode(lab, Schema(BASE.fields, xor_fold=True), secret=SECRET).words
    np.testing.assert_array_equal(folded, plain[:, :8] ^ plain[:, 8:])
    with pytest.raises(ValueError, match="multiple of 128"):
        Schema(BASE.fields, bits=192, xor_fold=True)


@pytest.mark.parametrize("epsilon", [1.0, 3.0])
def test_blip_flips_bits_at_its_rate_with_fresh_noise(epsilon: float) -> None:
    lab, _, _ = make_lab_imaging_cohort(500, random_state=3)
    plain = encode(lab, BASE, secret=SECRET).bit_matrix()
    schema = Schema(BASE.fields, blip_epsilon=epsilon)
    noisy = encode(lab, schema, secret=SECRET).bit_matrix()
    rate = float(np.mean(plain != noisy))
    expected = 1 / (1 + np.exp(epsilon))
    n = plain.size
    assert abs(rate - expected) < 5 * np.sqrt(expected * (1 - expected) / n)
    assert not np.array_equal(noisy, encode(lab, schema, secret=SECRET).bit_matrix())


@pytest.mark.parametrize(
    "option",
    [
        {"salt": "date_of_birth:year"},
        {"balance": True},
        {"xor_fold": True},
        {"blip_epsilon": 4.0},
    ],
)
def test_hardened_encodings_still_link(option: dict) -> None:  # type: ignore[type-arg]
    lab, imaging, truth = make_lab_imaging_cohort(1500, typo_rate=0.2, random_state=4)
    schema = Schema(BASE.fields, **option)
    a, b = encode(lab, schema, secret=SECRET), encode(imaging, schema, secret=SECRET)
    quality = evaluate(match(a, b), truth)
    assert quality["f1"] > 0.95


def test_schema_options_round_trip_and_refuse_bad_parts() -> None:
    schema = Schema(
        [*BASE.fields, Field("id", "id")],
        salt="date_of_birth:year",
        balance=True,
        blip_epsilon=3.0,
        blocking_keys=[["surname:soundex", "date_of_birth:month"], "postcode"],
    )
    assert Schema.from_json(schema.to_json()) == schema
    assert schema.blocking_keys == (("surname:soundex", "date_of_birth:month"), ("postcode",))
    assert schema.fingerprint(b"k" * 32) != Schema(BASE.fields).fingerprint(b"k" * 32)
    with pytest.raises(ValueError, match="invalid linkage schema") as info:
        Schema(
            BASE.fields,
            salt="age",
            blip_epsilon=-1,
            blocking_keys=[["surname:year"], ["sex:soundex"], ["postcode:upper"], []],
        )
    message = str(info.value)
    for problem in (
        "'age' is not a field",
        "blip_epsilon must be",
        "'year' needs a date field",
        "soundex needs a name or text field",
        "unknown transform",
        "at least one part",
    ):
        assert problem in message


def test_soundex_known_answers() -> None:
    assert [soundex(n) for n in ("robert", "rupert", "ashcraft", "tymczak", "pfister")] == [
        "R163",
        "R163",
        "A261",
        "T522",
        "P236",
    ]
    assert soundex("") == ""


def test_swapped_names_match_within_a_hash_group() -> None:
    people = twins().iloc[:1]
    swapped = people.assign(given_name=["Schmidt"], surname=["Maria"]).set_axis(["z"])
    grouped = encode(pd.concat([people, swapped]), BASE, secret=SECRET).words
    own_keys = Schema([Field(f.name, f.kind) for f in BASE.fields])
    separate = encode(pd.concat([people, swapped]), own_keys, secret=SECRET).words
    assert dice(grouped[0], grouped[1]) == 1.0
    assert dice(separate[0], separate[1]) < 0.8


def test_numbers_encode_alike_from_integer_and_float_columns() -> None:
    schema = Schema([Field("age", "number")])
    ints = encode(pd.DataFrame({"age": [45, 46]}), schema, secret=SECRET).words
    floats = encode(pd.DataFrame({"age": [45.0, 46.0]}), schema, secret=SECRET).words
    np.testing.assert_array_equal(ints, floats)
