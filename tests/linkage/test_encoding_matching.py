"""Bloom-filter encodings, Dice similarity, one-to-one matching, the automatic threshold."""

from __future__ import annotations

import dataclasses
import secrets

import numpy as np
import pandas as pd
import pytest

from linkage.encoding import CollisionWarning, Encodings, encode
from linkage.matching import dice_pairs, evaluate, match
from linkage.schema import Field, Schema
from vfl.datasets import identity_schema, make_lab_imaging_cohort

SCHEMA = identity_schema()
SECRET = b"a shared secret of 32 bytes, ok!"


def people() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "given_name": ["Anna", "José", "Lukas", None],
            "surname": ["Smith", "García", "Krüger", "Nowak"],
            "date_of_birth": ["19800101", "19751231", None, "20000229"],
            "sex": ["F", "M", "M", "F"],
            "postcode": ["10115", "20095", "80331", "50667"],
        },
        index=["r1", "r2", "r3", "r4"],
    )


def test_known_answer_same_input_and_secret_same_bits() -> None:
    one, two = encode(people(), SCHEMA, secret=SECRET), encode(people(), SCHEMA, secret=SECRET)
    np.testing.assert_array_equal(one.words, two.words)
    assert one.fingerprint == two.fingerprint
    assert list(one.index) == ["r1", "r2", "r3", "r4"]
    assert one.words.shape == (4, 16) and one.words.dtype == np.uint64
    other = encode(people(), SCHEMA, secret=secrets.token_bytes(32))
    assert other.fingerprint != one.fingerprint
    shared = np.bitwise_count(one.words & other.words).sum(axis=1)
    expected = one.popcounts() * other.popcounts() / 1024  # unrelated filters: chance overlap
    assert np.all(np.abs(shared - expected) < 6 * np.sqrt(expected) + 5)


def test_normalisation_makes_accents_case_and_spacing_irrelevant() -> None:
    variant = people().assign(
        given_name=["ANNA", "Jose", "lukas", None],
        surname=[" smith", "Garcia", "Kruger", "NOWAK"],
        postcode=["10115 ", "20095", "80331", "50667"],
    )
    a = encode(people(), SCHEMA, secret=SECRET)
    b = encode(variant, SCHEMA, secret=SECRET)
    np.testing.assert_array_equal(a.words, b.words)


def naive_dice(x: np.ndarray, y: np.ndarray) -> float:
    inter = sum(bin(int(u) & int(v)).count("1") for u, v in zip(x, y, strict=True))
    total = sum(bin(int(u)).count("1") for u in x) + sum(bin(int(v)).count("1") for v in y)
    return 2 * inter / total


def test_dice_matches_a_naive_reference_and_the_length_filter_drops_nothing_it_should_keep() -> (
    None
):
    lab, imaging, _ = make_lab_imaging_cohort(300, overlap=0.5, typo_rate=0.3, random_state=4)
    a, b = encode(lab, SCHEMA, secret=SECRET), encode(imaging, SCHEMA, secret=SECRET)
    ia, ib, scores, best = dice_pairs(a, b, floor=0.0, chunk=64)
    full = np.zeros((len(a), len(b)))
    full[ia, ib] = scores
    rng = np.random.default_rng(0)
    for i, j in zip(rng.integers(0, len(a), 200), rng.integers(0, len(b), 200), strict=True):
        assert full[i, j] == pytest.approx(naive_dice(a.words[i], b.words[j]), abs=1e-12)
    np.testing.assert_allclose(best[:, 0], full.max(axis=1))
    for floor in (0.6, 0.8):
        fa, fb, fs, _ = dice_pairs(a, b, floor=floor, chunk=64)
        expected = {(i, j) for i, j in zip(*np.nonzero(full >= floor), strict=True)}
        assert set(zip(fa.tolist(), fb.tolist(), strict=True)) == expected
        assert np.all(fs >= floor)


def test_matching_is_one_to_one_and_finds_the_true_pairs() -> None:
    lab, imaging, truth = make_lab_imaging_cohort(1500, overlap=0.6, typo_rate=0.2, random_state=5)
    a, b = encode(lab, SCHEMA, secret=SECRET), encode(imaging, SCHEMA, secret=SECRET)
    links = match(a, b, threshold=0.8)
    assert links["a"].is_unique and links["b"].is_unique
    assert links["score"].is_monotonic_decreasing and (links["score"] >= 0.8).all()
    quality = evaluate(links.rename(columns={"a": "lab", "b": "imaging"}), truth)
    assert quality["precision"] > 0.97 and quality["recall"] > 0.9


@pytest.mark.slow
@pytest.mark.parametrize("typo_rate", [0.1, 0.2])
def test_the_automatic_threshold_is_close_to_the_best(typo_rate: float) -> None:
    lab, imaging, truth = make_lab_imaging_cohort(
        6000, overlap=0.6, typo_rate=typo_rate, random_state=6
    )
    a, b = encode(lab, SCHEMA, secret=SECRET), encode(imaging, SCHEMA, secret=SECRET)
    auto = match(a, b)
    f1_auto = evaluate(auto, truth)["f1"]
    # greedy linking takes the best-scoring pair first, so the links at a threshold t are the
    # links at 0.7 that score at least t: one matching gives every threshold's F1 (checked at one)
    low = match(a, b, threshold=0.7)
    at_085 = match(a, b, threshold=0.85)
    kept = low[low["score"] >= 0.85]
    assert set(zip(kept["a"], kept["b"], strict=True)) == set(
        zip(at_085["a"], at_085["b"], strict=True)
    )
    f1_best = max(evaluate(low[low["score"] >= t], truth)["f1"] for t in np.arange(0.7, 0.98, 0.01))
    assert 0.5 < auto.attrs["threshold"] < 1.0
    assert f1_auto >= f1_best - 0.01


def test_encodings_from_another_schema_or_secret_are_refused() -> None:
    a = encode(people(), SCHEMA, secret=SECRET)
    b = encode(people(), SCHEMA, secret=b"another secret of 32 bytes......")
    with pytest.raises(ValueError, match="different schemas or secrets"):
        match(a, b, threshold=0.8)
    c = encode(people(), Schema([*SCHEMA.fields[:4]]), secret=SECRET)
    with pytest.raises(ValueError, match="different schemas or secrets"):
        dice_pairs(a, c)


def test_bad_input_gets_clear_errors() -> None:
    frame = people()
    with pytest.raises(ValueError, match=r"columns \['sex'\] of the schema are not in the frame"):
        encode(frame.drop(columns="sex"), SCHEMA, secret=SECRET)
    strict = Schema(
        [
            dataclasses.replace(f, on_invalid="raise") if f.kind == "date" else f
            for f in SCHEMA.fields
        ]
    )
    with pytest.raises(ValueError, match=r"do not parse as '%Y%m%d', e.g. row 'r2': '31/12/1975'"):
        encode(
            frame.assign(date_of_birth=["19800101", "31/12/1975", None, None]),
            strict,
            secret=SECRET,
        )
    with pytest.raises(
        ValueError, match=r"1 rows have every identity field missing \(e.g. \['r4'\]\)"
    ):
        encode(
            frame.assign(**{c: [*frame[c][:3], None] for c in SCHEMA.columns}),
            SCHEMA,
            secret=SECRET,
        )
    with pytest.raises(ValueError, match="empty frame"):
        encode(frame.iloc[:0], SCHEMA, secret=SECRET)
    with pytest.raises(ValueError, match="index must be unique"):
        encode(frame.set_axis(["r1", "r1", "r2", "r3"]), SCHEMA, secret=SECRET)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        encode(frame, SCHEMA, secret=b"short")
    with pytest.raises(ValueError, match=r"missing values .* missing='error'"):
        encode(frame, Schema([Field("given_name", "name", missing="error")]), secret=SECRET)


def test_schema_checks_and_json_round_trip() -> None:
    assert Schema.from_json(SCHEMA.to_json()) == SCHEMA
    with pytest.raises(ValueError, match="invalid linkage schema") as info:
        Schema([Field("a", "colour"), Field("a", "name", q=9), Field("b", weight=0)], bits=1000)
    message = str(info.value)
    for problem in (
        "unknown kind 'colour'",
        "q must be 1..5",
        "weight must be 1..200",
        "duplicate field names ['a']",
        "multiple of 64",
    ):
        assert problem in message  # every problem at once
    with pytest.raises(ValueError, match="not a linkage schema"):
        Schema.from_json("{}")
    assert isinstance(encode(people(), SCHEMA, secret=SECRET), Encodings)


def test_exact_identifiers_link_exactly_and_q_gram_collisions_warn() -> None:
    # FATE breast's ids 0..568, shuffled at one party: 11/111, 22/222 ... have the same
    # q-gram sets; compared whole, as kind="id", they cannot collide
    rng = np.random.default_rng(3)
    ids = np.arange(569)
    left = pd.DataFrame({"id": ids}, index=[f"l{i}" for i in ids])
    shuffled = rng.permutation(ids)
    right = pd.DataFrame({"id": shuffled}, index=[f"r{i}" for i in shuffled])
    exact = Schema([Field("id", "id")])
    pairs = match(encode(left, exact, secret=SECRET), encode(right, exact, secret=SECRET))
    assert len(pairs) == 569
    assert (pairs["a"].str[1:] == pairs["b"].str[1:]).all()  # every row with its own id
    as_text = Schema([Field("id", "text")])  # repeated q-grams counted: 11 and 111 differ
    text_pairs = match(encode(left, as_text, secret=SECRET), encode(right, as_text, secret=SECRET))
    assert (text_pairs["a"].str[1:] == text_pairs["b"].str[1:]).all()
    # values with the same q-gram multiset still collide, and say so
    same = pd.DataFrame({"code": ["aaba", "abaa"]}, index=["x", "y"])  # _a aa ab ba a_
    with pytest.warns(CollisionWarning, match=r"field 'code': 1 distinct values .*kind='id'"):
        encode(same, Schema([Field("code", "text")]), secret=SECRET)


def test_a_link_decided_by_a_tie_is_reported() -> None:
    a = people()
    b = pd.concat([people(), people().iloc[[1]].set_axis(["r2-again"])])  # José twice in b
    links = match(encode(a, SCHEMA, secret=SECRET), encode(b, SCHEMA, secret=SECRET), threshold=0.9)
    assert links.attrs["ambiguous"] == 1
    tied = links.iloc[links.attrs["ambiguous_links"]]
    assert tied["a"].tolist() == ["r2"] and tied["b"].iloc[0] in ("r2", "r2-again")
    clean = match(
        encode(a, SCHEMA, secret=SECRET), encode(people(), SCHEMA, secret=SECRET), threshold=0.9
    )
    assert clean.attrs["ambiguous"] == 0 and len(clean) == 4
