"""Blocking: LSH recall and its model, keyed blocking keys against a plaintext join, the join,
matching on candidates (greedy and optimal), the score plot."""

from __future__ import annotations

import itertools
import unicodedata
from concurrent.futures import ThreadPoolExecutor

import matplotlib
import numpy as np
import pandas as pd
import pytest

from linkage import (
    Encodings,
    KeyBlocking,
    LshBlocking,
    Schema,
    block,
    dice_scores,
    encode,
    evaluate,
    match,
    plot_scores,
)
from linkage.blocking import join_keys
from linkage.encoding import soundex
from linkage.matching import optimal_assignment
from linkage.threshold import greedy as greedy_assignment
from vfl.datasets import identity_schema, make_lab_imaging_cohort

matplotlib.use("Agg")

SECRET = b"a shared secret of 32 bytes, ok!"
KEYS = [["surname:soundex", "date_of_birth:year"], ["given_name:prefix2", "date_of_birth"]]
SCHEMA = Schema(identity_schema().fields, blocking_keys=KEYS)


@pytest.fixture(scope="module")
def cohort() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, object, object]:
    lab, imaging, truth = make_lab_imaging_cohort(4000, overlap=0.6, typo_rate=0.2, random_state=7)
    return (
        lab,
        imaging,
        truth,
        encode(lab, SCHEMA, secret=SECRET),
        encode(imaging, SCHEMA, secret=SECRET),
    )


def true_positions(a, b, truth):  # type: ignore[no-untyped-def]
    return a.index.get_indexer(truth["lab"]), b.index.get_indexer(truth["imaging"])


def test_lsh_keeps_the_true_pairs_and_drops_most_others(cohort) -> None:  # type: ignore[no-untyped-def]
    _, _, truth, a, b = cohort
    candidates = LshBlocking().candidates(a, b)
    assert candidates.pair_completeness(a, b, truth) >= 0.99
    assert candidates.reduction_ratio > 0.95
    flat = candidates.ia * len(b) + candidates.ib
    assert np.all(np.diff(flat) > 0)  # unique and sorted
    assert candidates.ia.max() < len(a) and candidates.ib.max() < len(b)


def test_lsh_recall_meets_its_model(cohort) -> None:  # type: ignore[no-untyped-def]
    _, _, truth, a, b = cohort
    blocking = LshBlocking(band_bits=24, bands=12, random_state=1)
    plan = blocking.plan(a, b)
    candidates = blocking.candidates(a, b)
    pa, pb = true_positions(a, b, truth)
    scores = dice_scores(a, b, pa, pb)
    found = np.isin(pa * len(b) + pb, candidates.ia * len(b) + candidates.ib)
    for score, predicted in plan["recall_at"].items():
        near = np.abs(scores - score) < 0.025  # pairs scoring about this much
        if near.sum() >= 50:
            observed = found[near].mean()
            tolerance = 3 * np.sqrt(predicted * (1 - predicted) / near.sum()) + 0.05
            assert observed >= predicted - tolerance, (score, observed, predicted)
    exact = scores == 1.0
    assert found[exact].all()  # identical filters agree on every band
    more = LshBlocking(band_bits=24, bands=40, random_state=1).candidates(a, b)
    assert set((candidates.ia * len(b) + candidates.ib).tolist()) <= set(
        (more.ia * len(b) + more.ib).tolist()
    )  # more bands of the same rounds only add candidates


def test_lsh_plan_follows_the_target(cohort) -> None:  # type: ignore[no-untyped-def]
    _, _, _, a, b = cohort
    loose = LshBlocking(target_recall=0.5).plan(a, b)
    tight = LshBlocking(target_recall=0.99).plan(a, b)
    assert loose["recall"] >= 0.5 and tight["recall"] >= 0.99
    assert tight["recall_at"][0.9] >= tight["recall"]
    with pytest.raises(ValueError, match="target_recall"):
        LshBlocking(target_recall=1.0)
    with pytest.raises(ValueError, match="both band_bits and bands"):
        LshBlocking(band_bits=20)


def test_key_blocking_equals_a_plaintext_join(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, imaging, _, a, b = cohort

    def letters(name: object) -> str:
        if not isinstance(name, str):
            return ""
        decomposed = unicodedata.normalize("NFKD", name.lower())
        return "".join(c for c in decomposed if "a" <= c <= "z")

    def plain_keys(frame: pd.DataFrame) -> list[set[str]]:
        out = []
        for given, surname, dob in zip(
            frame["given_name"], frame["surname"], frame["date_of_birth"], strict=True
        ):
            keys = set()
            if letters(surname) and isinstance(dob, str):
                keys.add(f"0|{soundex(letters(surname))}|{dob[:4]}")
            if letters(given) and isinstance(dob, str):
                keys.add(f"1|{letters(given)[:2]}|{dob}")
            out.append(keys)
        return out

    keys_a, keys_b = plain_keys(lab), plain_keys(imaging)
    index: dict[str, list[int]] = {}
    for j, keys in enumerate(keys_b):
        for key in keys:
            index.setdefault(key, []).append(j)
    expected = {(i, j) for i, keys in enumerate(keys_a) for key in keys for j in index.get(key, [])}
    candidates = block(a, b, "keys")
    assert set(zip(candidates.ia.tolist(), candidates.ib.tolist(), strict=True)) == expected
    only_first = KeyBlocking(keys=(0,)).candidates(a, b)
    assert len(only_first) < len(candidates)


def test_join_against_a_naive_join() -> None:
    rng = np.random.default_rng(3)
    keys_a = rng.integers(0, 6, size=(3, 40)).astype(np.uint64)
    keys_b = rng.integers(0, 6, size=(3, 30)).astype(np.uint64)  # 0: no key
    ia, ib = join_keys(keys_a, keys_b, 30)
    expected = {
        (i, j)
        for k in range(3)
        for i in range(40)
        for j in range(30)
        if keys_a[k, i] == keys_b[k, j] != 0
    }
    assert set(zip(ia.tolist(), ib.tolist(), strict=True)) == expected
    assert len(ia) == len(expected)


def test_blocking_refusals(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, _, _, a, _ = cohort
    plain = encode(lab, identity_schema(), secret=SECRET)
    with pytest.raises(ValueError, match="different schemas or secrets"):
        block(a, plain)
    with pytest.raises(ValueError, match="carry no blocking keys"):
        block(plain, plain, "keys")
    with pytest.raises(ValueError, match="unknown blocking 'sorted'"):
        block(a, a, "sorted")
    with pytest.raises(ValueError, match="blocking key 5 does not exist"):
        KeyBlocking(keys=(5,)).candidates(a, a)


def test_blocked_matching_is_one_to_one_and_as_good(cohort) -> None:  # type: ignore[no-untyped-def]
    _, _, truth, a, b = cohort
    truth = truth.set_axis(["a", "b"], axis=1)
    full = match(a, b, blocking=None)
    blocked = match(a, b, blocking=LshBlocking(random_state=0))
    for links in (full, blocked):
        assert links["a"].is_unique and links["b"].is_unique
    assert blocked.attrs["reduction_ratio"] > 0.95 and full.attrs["reduction_ratio"] == 0.0
    assert evaluate(blocked, truth)["f1"] >= evaluate(full, truth)["f1"] - 0.005
    keyed = match(a, b, blocking="keys", threshold=0.8)
    assert evaluate(keyed, truth)["precision"] > 0.97


def brute_force_best_total(ia, ib, scores) -> float:  # type: ignore[no-untyped-def]
    best = 0.0
    pairs = list(range(len(ia)))
    for size in range(len(pairs) + 1):
        for subset in itertools.combinations(pairs, size):
            rows = [ia[k] for k in subset]
            cols = [ib[k] for k in subset]
            if len(set(rows)) == size and len(set(cols)) == size:
                best = max(best, float(sum(scores[k] for k in subset)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_optimal_assignment_maximises_the_total_score(seed: int) -> None:
    rng = np.random.default_rng(seed)
    flat = rng.choice(5 * 5, size=9, replace=False)
    ia, ib = flat // 5, flat % 5
    scores = rng.uniform(0.8, 1.0, size=9)
    chosen = optimal_assignment(ia, ib, scores)
    assert len(set(ia[chosen])) == len(chosen) == len(set(ib[chosen]))
    assert scores[chosen].sum() == pytest.approx(brute_force_best_total(ia, ib, scores))
    greedy = greedy_assignment(ia, ib, scores)
    assert scores[greedy].sum() <= scores[chosen].sum() + 1e-12


def test_optimal_beats_greedy_where_greedy_is_myopic() -> None:
    ia, ib = np.array([0, 0, 1]), np.array([0, 1, 0])
    scores = np.array([0.9, 0.85, 0.85])
    assert sorted(greedy_assignment(ia, ib, scores).tolist()) == [0]
    assert sorted(optimal_assignment(ia, ib, scores).tolist()) == [1, 2]


def test_score_plot_marks_the_threshold(cohort) -> None:  # type: ignore[no-untyped-def]
    _, _, _, a, b = cohort
    links = match(a, b, threshold=0.83)
    ax = plot_scores(links)
    assert any(
        np.allclose(line.get_xdata(), [0.83, 0.83]) for line in ax.get_lines()
    )  # the threshold line
    heights = sum(patch.get_height() for patch in ax.patches)
    assert heights == (links.attrs["best_scores"] > 0).sum()
    with pytest.raises(ValueError, match="no best_scores"):
        plot_scores(pd.DataFrame({"a": [1]}))


def test_best_and_second_best_scores_against_a_naive_reference() -> None:
    from linkage.matching import top_two_scores

    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(1, 40))
        ia, scores = rng.integers(0, 10, n), np.round(rng.random(n), 1)  # ties included
        got = top_two_scores(ia, scores, 10)
        for row in range(10):
            expected = [*sorted(scores[ia == row], reverse=True), 0.0, 0.0]
            assert got[row].tolist() == expected[:2]


def test_lsh_keep_best_keeps_each_records_best_candidates(cohort) -> None:  # type: ignore[no-untyped-def]
    from linkage.matching import dice_scores
    from linkage.threshold import top_k_pairs

    _, _, truth, a, b = cohort
    options = {"random_state": 3, "band_bits": 16, "bands": 20}
    full = block(a, b, LshBlocking(**options))
    kept = block(a, b, LshBlocking(**options, keep_best=3))
    as_set = lambda c: set(zip(c.ia.tolist(), c.ib.tolist(), strict=True))  # noqa: E731
    assert as_set(kept) <= as_set(full)
    assert len(kept) < 0.5 * len(full)  # most candidates are pruned
    # exactly the pairs among the 3 best of one of their records in the full set (ties
    # broken by position), however the bands were grouped and pruned
    best = top_k_pairs(full.ia, full.ib, dice_scores(a, b, full.ia, full.ib), 3)
    np.testing.assert_array_equal(kept.ia, full.ia[best])
    np.testing.assert_array_equal(kept.ib, full.ib[best])
    assert kept.pair_completeness(a, b, truth) >= full.pair_completeness(a, b, truth) - 0.002
    with pytest.raises(ValueError, match=r"keep_best must be 1\.\.1000"):
        LshBlocking(keep_best=0)


def test_lsh_gives_the_same_candidates_on_threads_and_executors(cohort, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import linkage.bands

    _, _, _, a, b = cohort
    # small prunes, so that bars rise between bands and groups while they run
    monkeypatch.setattr(linkage.bands, "PRUNE_PAIRS", 2000)
    twin = a.words.copy()
    twin[:40] = b.words[:40]  # identical filters: ties in every record's ranking
    a = Encodings(a.index, twin, a.fingerprint)
    for options in ({}, {"keep_best": 2}, {"keep_best": 5}):
        lsh = LshBlocking(random_state=4, band_bits=16, bands=24, **options)
        here = lsh.candidates(a, b, workers=1)
        assert len(here) > 0
        with ThreadPoolExecutor(3) as pool:  # groups of bands, pruned on the executor
            for workers in (2, pool):
                there = block(a, b, lsh, workers=workers)
                np.testing.assert_array_equal(there.ia, here.ia)
                np.testing.assert_array_equal(there.ib, here.ib)
    with pytest.raises(ValueError, match="workers must be a positive integer or an executor"):
        block(a, b, "keys", workers=0)


def test_a_forecast_from_a_sample_predicts_the_collisions_of_the_whole(cohort) -> None:  # type: ignore[no-untyped-def]
    from linkage.blocking import band_keys, band_positions

    _, _, _, a, b = cohort
    rng = np.random.default_rng(5)
    pick_a, pick_b = rng.permutation(len(a))[:1000], rng.permutation(len(b))[:1000]
    sample_a = Encodings(a.index[pick_a], a.words[pick_a], a.fingerprint)
    sample_b = Encodings(b.index[pick_b], b.words[pick_b], b.fingerprint)
    for keep_best in (None, 5):
        lsh = LshBlocking(random_state=6, band_bits=12, bands=30, keep_best=keep_best)
        got = lsh.forecast(sample_a, sample_b, (len(a), len(b)), workers=1, sample_bands=6)
        assert (got["band_bits"], got["bands"]) == (12, 30) and got["slots"] == 1
        # the same first bands on the whole: the collisions a band really has there (bar
        # identical filters, which LSH joins once, not per band)
        positions = band_positions(6, 12, a.bits // 8, np.random.default_rng(6))
        ids: dict[bytes, int] = {}
        id_a, id_b = ([ids.setdefault(w.tobytes(), len(ids)) for w in e.words] for e in (a, b))
        identical = np.array(id_a)[:, None] == np.array(id_b)[None, :]
        actual = [
            int(((ka[:, None] == kb[None, :]) & ~identical).sum())
            for ka, kb in zip(
                band_keys(a.words, positions, 12), band_keys(b.words, positions, 12), strict=True
            )
        ]
        ratio = got["collisions_per_band"] / np.mean(actual)
        assert 0.8 < ratio < 1.25, ratio  # 0.97-1.06 over ten draws of the sample
        assert got["seconds_per_collision"] >= 0 and got["seconds_per_record"] >= 0
        assert got["seconds"] == pytest.approx(30 * got["band_seconds"])
        assert len(got["measured"]) == 12  # each band on the sample and on its halves
    with pytest.raises(ValueError, match="must be at least the sample's size"):
        LshBlocking().forecast(sample_a, sample_b, (10, 10))
    with pytest.raises(ValueError, match="samples are empty"):
        LshBlocking().forecast(sample_a, Encodings(b.index[:0], b.words[:0], b.fingerprint), (9, 9))


def test_candidates_found_once_can_be_solved_again(cohort) -> None:  # type: ignore[no-untyped-def]
    _, _, _, a, b = cohort
    lsh = LshBlocking(random_state=1)
    candidates = block(a, b, lsh)
    again = match(a, b, blocking=candidates, threshold=0.8)
    fresh = match(a, b, blocking=lsh, threshold=0.8)
    pd.testing.assert_frame_equal(again, fresh)
    assert again.attrs["compared"] == len(candidates)
    with pytest.raises(ValueError, match=r"candidates are for 3200 x 3200 records, not 3200 x 10"):
        block(a, Encodings(b.index[:10], b.words[:10], b.fingerprint), candidates)
