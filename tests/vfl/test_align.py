"""Aligning parties over a federation: PSI on exact IDs and Bloom-filter linkage through a
linkage unit that never sees the secret and returns only each party's own rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vfl import align
from vfl.alignment import align_party
from vfl.datasets import identity_schema, make_lab_imaging_cohort
from vfl.federation import LocalFederation
from vfl.federation.wire import payload_kind

SECRET = b"a shared secret of 32 bytes, ok!"


@pytest.fixture(scope="module")
def cohort() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return make_lab_imaging_cohort(600, overlap=0.5, typo_rate=0.2, random_state=3)


def test_psi_alignment_gives_both_parties_the_common_patients_in_one_order(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, imaging, truth = cohort
    aligned = align({"lab": lab, "imaging": imaging}, method="psi", id_column="patient_id")
    a, b = aligned["lab"], aligned["imaging"]
    assert len(a) == len(b) == len(truth)
    assert (a["patient_id"].to_numpy() == b["patient_id"].to_numpy()).all()
    assert a.index.equals(pd.RangeIndex(len(truth), name="common_row"))
    assert set(a.attrs["source_rows"]) == set(truth["lab"])


def test_the_common_order_is_a_function_of_the_records_and_the_key(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, imaging, _ = cohort
    frames = {"lab": lab, "imaging": imaging}
    runs = [align(frames, method="psi", id_column="patient_id") for _ in range(2)]
    # the same inputs and key: the same rows in the same order (and index), run after run
    for name in frames:
        assert runs[0][name].attrs["source_rows"] == runs[1][name].attrs["source_rows"]
        pd.testing.assert_frame_equal(runs[0][name], runs[1][name])
    # shuffling a party's table does not change the common order
    shuffled = {"lab": lab.sample(frac=1, random_state=5), "imaging": imaging}
    again = align(shuffled, method="psi", id_column="patient_id")
    pd.testing.assert_frame_equal(again["imaging"], runs[0]["imaging"])
    # another key: the same patients in an unrelated order
    keyed = align(frames, method="psi", id_column="patient_id", order_key="project 7")
    ids, other = runs[0]["lab"]["patient_id"], keyed["lab"]["patient_id"]
    assert set(ids) == set(other) and (ids.to_numpy() != other.to_numpy()).mean() > 0.9
    assert (keyed["lab"]["patient_id"].to_numpy() == keyed["imaging"]["patient_id"]).all()


def test_bloom_linkage_orders_by_the_linkage_units_key(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, imaging, _ = cohort
    frames = {"lab": lab, "imaging": imaging}

    def run(order_key: str | None) -> list:  # type: ignore[type-arg]
        return align(
            frames, method="bloom", schema=identity_schema(), secret=SECRET, order_key=order_key
        )["imaging"].attrs["source_rows"]

    assert run("unit key") == run("unit key")  # reproducible with the unit's key
    assert run(None) != run(None)  # a fresh random order without one


def bloom_roles(frames: dict, secrets_of: dict) -> dict:  # type: ignore[type-arg]
    parties = list(frames)
    roles = {
        name: (
            lambda fed, name=name: align_party(
                fed,
                frames[name],
                method="bloom",
                schema=identity_schema(),
                secret=secrets_of[name],
                parties=parties,
            )
        )
        for name in parties
    }
    roles["coordinator"] = lambda fed: align_party(fed, None, method="bloom", parties=parties)
    return roles


def test_bloom_alignment_through_a_linkage_unit(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, imaging, truth = cohort
    frames = {"lab": lab, "imaging": imaging}
    federation = LocalFederation(record_payloads=True)
    results = federation.run(bloom_roles(frames, {"lab": SECRET, "imaging": SECRET}))
    a, b = results["lab"], results["imaging"]
    assert len(a) == len(b) > 0.9 * len(truth)
    pairs = set(zip(a.attrs["source_rows"], b.attrs["source_rows"], strict=True))
    true = set(zip(truth["lab"], truth["imaging"], strict=True))
    assert len(pairs & true) / len(pairs) > 0.97  # precision of the alignment
    for record in federation.transcript.records:
        payload = record.payload()
        if record.sender == "coordinator":
            # only row positions go back, one array per party, no scores: and the count of
            # ties, the same for every party
            assert record.tag == "align/rows" and set(payload) == {"rows", "ambiguous"}
            assert payload["ambiguous"] == 0
            assert payload["rows"].dtype == np.int64
        else:
            assert record.receiver == "coordinator" and record.tag == "align/encodings"
            assert set(payload) == {"words", "fingerprint"}  # no row labels, no identities
    assert all(payload_kind(r.payload()) for r in federation.transcript.records)


def test_bloom_alignment_needs_the_same_secret(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, imaging, _ = cohort
    frames = {"lab": lab, "imaging": imaging}
    secrets_of = {"lab": SECRET, "imaging": b"another secret of 32 bytes......"}
    with pytest.raises(Exception, match="different schemas or secrets"):
        LocalFederation().run(bloom_roles(frames, secrets_of))


def test_alignment_refusals(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, imaging, _ = cohort
    with pytest.raises(ValueError, match="method must be 'psi' or 'bloom'"):
        align({"lab": lab, "imaging": imaging}, method="soundex")
    with pytest.raises(ValueError, match="at least two"):
        align({"lab": lab})
    with pytest.raises(ValueError, match="needs its frame and its id_column"):
        align({"lab": lab, "imaging": imaging}, method="psi", id_column="nhs_number")


def test_the_linkage_unit_may_not_be_a_data_party(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, imaging, _ = cohort
    with pytest.raises(ValueError, match="both a data party and the linkage unit"):
        align(
            {"lab": lab, "imaging": imaging},
            method="bloom",
            schema=identity_schema(),
            secret=SECRET,
            linkage_unit="lab",
        )


def test_blip_hardened_encodings_record_their_privacy_in_the_ledger(cohort) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from vfl.privacy import PrivacyLedger, randomized_response_event
    from vfl.privacy.accounting import epsilon

    lab, imaging, _ = cohort
    schema = replace(identity_schema(), blip_epsilon=3.0)
    ledger = PrivacyLedger(delta=1e-6, accountant="pld")
    aligned = align(
        {"lab": lab, "imaging": imaging},
        method="bloom",
        schema=schema,
        secret=SECRET,
        ledger=ledger,
    )
    assert len(aligned["lab"]) > 0
    assert set(ledger.holders()) == {"lab", "imaging"}
    expected = epsilon(
        [randomized_response_event(epsilon=3.0, steps=schema.encoded_bits)],
        delta=1e-6,
        accountant="pld",
    )
    assert ledger.epsilon(holder="lab") == pytest.approx(expected, rel=1e-9)
    assert "lab" in ledger.table() and "randomized" in ledger.table().lower()
    plain = PrivacyLedger()
    align(
        {"lab": lab, "imaging": imaging},
        method="bloom",
        schema=identity_schema(),
        secret=SECRET,
        ledger=plain,
    )
    assert plain.holders() == []  # no BLIP, no DP claimed


def _three_sets() -> dict[str, pd.DataFrame]:
    """Three parties whose pairwise intersections are larger than the triple one."""
    rng = np.random.default_rng(5)
    ids = np.arange(300)
    held = {"a": ids[:200], "b": ids[60:260], "c": np.r_[ids[40:120], ids[180:300]]}
    return {
        name: pd.DataFrame({"pid": rng.permutation(own), name: rng.normal(size=len(own))})
        for name, own in held.items()
    }


def test_three_party_psi_gives_each_party_the_triple_intersection_only(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import linkage
    from vfl.federation.wire import decode

    frames = _three_sets()
    sets = {name: set(frame["pid"].tolist()) for name, frame in frames.items()}
    triple = sets["a"] & sets["b"] & sets["c"]
    assert all(len(sets[p] & sets[q]) > len(triple) for p, q in (("a", "b"), ("b", "c")))

    # the test's god view: every party's scalar, to compute any blinding of any party's IDs
    made: list[linkage.EcdhPsiParty] = []

    class Recorded(linkage.EcdhPsiParty):
        def __init__(self, *, workers: object = None) -> None:
            super().__init__(workers=1)
            self.blind_input: list[str] = []
            made.append(self)

        def blind(self, ids):  # type: ignore[no-untyped-def]
            self.blind_input = sorted(ids)
            return super().blind(ids)

    monkeypatch.setattr(linkage, "EcdhPsiParty", Recorded)
    parties = list(frames)
    roles = {
        name: (
            lambda fed, name=name: align_party(
                fed, frames[name], method="psi", id_column="pid", parties=parties
            )
        )
        for name in parties
    }
    roles["coordinator"] = lambda fed: align_party(fed, None, method="psi", parties=parties)
    federation = LocalFederation(record_payloads=True)
    aligned = federation.run(roles)

    # every party: the triple intersection, in one order
    for name in parties:
        assert aligned[name]["pid"].tolist() == aligned["a"]["pid"].tolist()
        assert set(aligned[name]["pid"]) == triple

    # the attack: a party holds its IDs, its scalar and what it received; a pairwise leak would
    # be a received point that it can match with one of its own IDs, blinded by its scalar or
    # not, after re-blinding it with its scalar or not. There is none (with two parties the
    # same match finds the intersection: that is how two-party PSI works).
    secret_of = {
        name: next(p._secret for p in made if p.blind_input == sorted(ids))  # the god view
        for name, ids in ((n, linkage.normalize_ids(frames[n]["pid"])) for n in parties)
    }
    from itertools import combinations

    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

    def blinded(points: list[bytes], keys: tuple) -> set[bytes]:  # type: ignore[type-arg]
        for key in keys:
            points = [key.exchange(X25519PublicKey.from_public_bytes(p)) for p in points]
        return set(points)

    def hashed(ids: list[str]) -> list[bytes]:
        return [linkage.psi._hash_to_point(i) for i in ids]

    received: dict[str, list[bytes]] = {name: [] for name in [*parties, "coordinator"]}
    for record in federation.transcript:
        payload = decode(record.data)
        if isinstance(payload, dict) and isinstance(payload.get("points"), bytes):
            raw = payload["points"]
            received[record.receiver] += [raw[k : k + 32] for k in range(0, len(raw), 32)]
        elif record.receiver in parties:  # the helper's answer: the triple count, no more
            assert record.tag == "align/rows"
            assert len(payload["rows"]) == len(triple)
    for name in parties:
        mine = (secret_of[name],)
        own = hashed(linkage.normalize_ids(frames[name]["pid"]))
        for theirs in (set(received[name]), blinded(received[name], mine)):
            assert not theirs & (set(own) | blinded(own, mine)), name
    # the helper sees only fully blinded points: none is an ID's point or a partial blinding
    scalars = list(secret_of.values())
    everyone = hashed(linkage.normalize_ids(sorted(set().union(*sets.values()))))
    for size in range(3):
        for keys in combinations(scalars, size):
            assert not set(received["coordinator"]) & blinded(everyone, keys)
    assert set(received["coordinator"]) & blinded(everyone, tuple(scalars))
    # and with them, it could count the pairwise intersections (the module docstring says so)


def test_three_party_psi_in_simulation_needs_a_helper_that_is_not_a_data_party() -> None:
    frames = _three_sets()
    aligned = align(frames, method="psi", id_column="pid", order_key="k")
    assert len(aligned["c"]) == len(set.intersection(*(set(f["pid"]) for f in frames.values())))
    again = align(frames, method="psi", id_column="pid", order_key="k")
    assert aligned["b"]["pid"].tolist() == again["b"]["pid"].tolist()  # reproducible order
    with pytest.raises(ValueError, match="both a data party and the linkage unit"):
        align(frames, method="psi", id_column="pid", linkage_unit="a")


def test_ties_in_bloom_linkage_are_counted_and_refused_past_a_fraction(cohort) -> None:  # type: ignore[no-untyped-def]
    lab, imaging, truth = cohort
    # one identity entered twice at the lab: its imaging record has two candidates of exactly
    # the same score, and which one gets linked is a coin toss
    twice = lab[lab.index.isin(truth["lab"])].iloc[:12]
    doubled = pd.concat([lab, twice.set_axis(twice.index + "-dup")])
    frames = {"lab": doubled, "imaging": imaging}
    options = {"method": "bloom", "schema": identity_schema(), "secret": SECRET}
    with pytest.raises(Exception, match=r"\d+ of the \d+ common patients .* linked by a tie"):
        align(frames, **options)
    aligned = align(frames, **options, max_ambiguous=0.05)
    # the 12 doubled identities, and possibly a couple of distinct records whose scores tie
    assert 12 <= aligned["lab"].attrs["ambiguous_links"] <= 15
    assert aligned["imaging"].attrs["ambiguous_links"] == aligned["lab"].attrs["ambiguous_links"]
    clean = align({"lab": lab, "imaging": imaging}, **options)
    assert clean["lab"].attrs["ambiguous_links"] == 0
    with pytest.raises(ValueError, match="max_ambiguous must be a fraction"):
        align(frames, **options, max_ambiguous=2)
