"""Three-party linkage: clusters of one record per party, and vfl.align over three parties."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from linkage import Encodings, encode, match, match_many
from vfl import align
from vfl.datasets import identity_schema, make_multiparty_identities

SECRET = b"a shared secret of 32 bytes, ok!"


def _clusters(frame: pd.DataFrame, parties: list[str]) -> set[tuple[tuple[str, str], ...]]:
    return {
        tuple((p, x) for p, x in zip(parties, row, strict=True) if isinstance(x, str))
        for row in frame[parties].itertuples(index=False)
    }


@pytest.fixture(scope="module")
def three() -> tuple[dict[str, pd.DataFrame], pd.DataFrame, dict[str, Encodings]]:
    frames, truth = make_multiparty_identities(2000, typo_rate=0.3, random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        encodings = {p: encode(f, identity_schema(), secret=SECRET) for p, f in frames.items()}
    return frames, truth, encodings


def test_three_party_clusters_equal_the_truth(three) -> None:  # type: ignore[no-untyped-def]
    frames, truth, encodings = three
    parties = list(frames)
    clusters = match_many(encodings)
    got, want = _clusters(clusters, parties), _clusters(truth, parties)
    exact = len(got & want)
    precision, recall = exact / len(got), exact / len(want)
    assert 2 * precision * recall / (precision + recall) > 0.95  # whole clusters, exactly right
    # never two records of one party in a cluster, and every record in at most one cluster
    for p in parties:
        held = clusters[p].dropna()
        assert held.is_unique
    assert (clusters["size"] == clusters[parties].notna().sum(axis=1)).all()
    assert set(clusters.attrs["pairs"]) == {
        ("lab", "imaging"),
        ("lab", "genomics"),
        ("imaging", "genomics"),
    }


def test_clusters_beat_a_star_on_the_patients_held_by_all(three) -> None:  # type: ignore[no-untyped-def]
    frames, truth, encodings = three
    parties = list(frames)
    full = truth.dropna()
    want = _clusters(full, parties)
    clusters = match_many(encodings, min_size=3)
    assert (clusters["size"] == 3).all()
    got = _clusters(clusters, parties)
    # a star: everything linked to the lab, kept where both links exist
    lab_imaging = match(encodings["lab"], encodings["imaging"]).set_index("a")["b"]
    lab_genomics = match(encodings["lab"], encodings["genomics"]).set_index("a")["b"]
    both = lab_imaging.index.intersection(lab_genomics.index)
    star = {(("lab", a), ("imaging", lab_imaging[a]), ("genomics", lab_genomics[a])) for a in both}
    assert len(got & want) >= len(star & want)
    assert len(got & want) / len(want) > 0.93


def test_bad_calls_are_refused(three) -> None:  # type: ignore[no-untyped-def]
    _, _, encodings = three
    with pytest.raises(ValueError, match="two or more parties"):
        match_many({"lab": encodings["lab"]})
    with pytest.raises(ValueError, match="min_size must be between 2 and 3"):
        match_many(encodings, min_size=4)


def test_align_over_three_parties_gives_each_its_own_rows(three) -> None:  # type: ignore[no-untyped-def]
    frames, truth, _ = three
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = align(
            {p: f.drop(columns="patient_id") for p, f in frames.items()},
            method="bloom",
            schema=identity_schema(),
            secret=SECRET,
        )
    parties = list(frames)
    rows = pd.DataFrame({p: out[p].attrs["source_rows"] for p in parties})
    assert all(len(out[p]) == len(rows) for p in parties)
    # each party got only its own rows (its own record ids), in one common order
    for p in parties:
        assert set(rows[p]) <= set(frames[p].index)
        assert list(out[p].columns) == [c for c in frames[p].columns if c != "patient_id"]
    got = _clusters(rows, parties)
    want = _clusters(truth.dropna(), parties)
    assert len(got & want) / len(want) > 0.93
    assert len(got & want) / len(got) > 0.94
    # the same patient on every row: the exact IDs (dropped before linking) agree
    ids = pd.DataFrame({p: frames[p].loc[rows[p], "patient_id"].to_numpy() for p in parties})
    assert np.mean(ids.nunique(axis=1) == 1) > 0.94


def test_thresholds_per_pair_in_either_order_and_integer_labels_kept(three) -> None:  # type: ignore[no-untyped-def]
    _, _, encodings = three
    renumbered = {
        p: Encodings(pd.RangeIndex(len(e)), e.words, e.fingerprint) for p, e in encodings.items()
    }
    clusters = match_many(renumbered, threshold={("imaging", "lab"): 0.99})
    assert clusters.attrs["pairs"][("lab", "imaging")]["threshold"] == 0.99
    assert clusters.attrs["pairs"][("lab", "genomics")]["threshold"] < 0.99  # automatic
    held = clusters["lab"].dropna()
    assert all(isinstance(x, (int, np.integer)) for x in held)
    with pytest.raises(ValueError, match="not pairs of the parties"):
        match_many(renumbered, threshold={("lab", "registry"): 0.9})


def test_three_party_linkage_unit_sends_each_party_only_its_own_positions(three) -> None:  # type: ignore[no-untyped-def]
    from vfl.alignment import align_party
    from vfl.federation import LocalFederation

    frames, _, _ = three
    parties = list(frames)
    roles = {
        name: (
            lambda fed, name=name: align_party(
                fed,
                frames[name].drop(columns="patient_id"),
                method="bloom",
                schema=identity_schema(),
                secret=SECRET,
                parties=parties,
            )
        )
        for name in parties
    }
    roles["coordinator"] = lambda fed: align_party(fed, None, method="bloom", parties=parties)
    federation = LocalFederation(record_payloads=True)
    results = federation.run(roles)
    sent = [r for r in federation.transcript.records if r.sender == "coordinator"]
    assert sorted(r.receiver for r in sent) == sorted(parties)  # one message each
    for record in sent:
        payload = record.payload()
        assert record.tag == "align/rows" and set(payload) == {"rows", "ambiguous"}
        rows = payload["rows"]
        # positions into the receiver's own (shuffled) encodings, nothing else: no scores,
        # no other party's rows
        assert rows.dtype == np.int64 and len(rows) == len(results[record.receiver])
        assert rows.min() >= 0 and rows.max() < len(frames[record.receiver])
    for record in federation.transcript.records:
        if record.sender != "coordinator":
            assert record.receiver == "coordinator" and record.tag == "align/encodings"
            assert set(record.payload()) == {"words", "fingerprint"}  # no labels, no identities
