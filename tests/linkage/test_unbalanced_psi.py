"""Unbalanced PSI (2HashDH OPRF over P-256): the same answer as balanced PSI, an offline set
reused across queries and restarts, refusals, and what the server sees."""

from __future__ import annotations

import json
from pathlib import Path

import gmpy2
import numpy as np
import pandas as pd
import pytest

from linkage import (
    OfflineSet,
    QueryLimitError,
    UnbalancedPsiClient,
    UnbalancedPsiServer,
    normalize_ids,
    psi_intersection,
    unbalanced_psi,
)
from linkage.unbalanced import hash_to_curve

# P-256's field prime and curve coefficient b (FIPS 186-4, D.1.2.3), from the standard
P256_P = 2**256 - 2**224 + 2**192 + 2**96 - 1
P256_B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B


def random_sets(
    n_small: int, n_large: int, n_common: int, seed: int
) -> tuple[pd.Series, pd.Series, set[str]]:
    rng = np.random.default_rng(seed)
    pool = [f"P{v}" for v in rng.choice(10**9, size=n_small + n_large - n_common, replace=False)]
    common = pool[:n_common]
    small = common + pool[n_common:n_small]
    large = common + pool[n_small:]
    rng.shuffle(small)
    rng.shuffle(large)
    return (
        pd.Series(small, index=[f"s{i}" for i in range(n_small)]),
        pd.Series(large, index=[f"l{i}" for i in range(n_large)]),
        set(common),
    )


def one_query(server: UnbalancedPsiServer, offline: OfflineSet, ids: list[str]) -> list[str]:
    client = UnbalancedPsiClient(workers=1)
    client.unblind(server.evaluate(client.blind(ids)), key_id=server.key_id)
    return sorted(ids[r] for r in client.intersect(offline))


def test_same_intersection_as_balanced_psi() -> None:
    small, large, common = random_sets(1_000, 3_000, 400, seed=1)
    unbalanced = unbalanced_psi(small, large, workers=1)
    balanced = psi_intersection(small, large, workers=1)
    assert list(unbalanced.columns) == ["a", "b"]
    assert len(unbalanced) == len(common)
    assert set(small[unbalanced["a"]]) == common
    assert (small[unbalanced["a"]].to_numpy() == large[unbalanced["b"]].to_numpy()).all()
    as_pairs = {tuple(row) for row in unbalanced.itertuples(index=False)}
    assert as_pairs == {tuple(row) for row in balanced.itertuples(index=False)}


def test_ids_that_need_normalisation_still_match() -> None:
    small = [" p-0012.34 ", "x/9", 1234.0, "absent", "q 7"]
    large = ["P001234", "X9", 1234, "Q7", *[f"R{i}" for i in range(300)]]
    pairs = unbalanced_psi(small, large, workers=1)
    assert sorted(map(tuple, pairs.to_numpy().tolist())) == [(0, 0), (1, 1), (2, 2), (4, 3)]
    balanced = psi_intersection(small, large, workers=1)
    assert sorted(map(tuple, balanced.to_numpy().tolist())) == [(0, 0), (1, 1), (2, 2), (4, 3)]
    server, client = UnbalancedPsiServer(workers=1), UnbalancedPsiClient(workers=1)
    offline = server.prepare(large)  # normalised by default, on both sides
    client.unblind(server.evaluate(client.blind(small)), key_id=server.key_id)
    assert client.intersect(offline).tolist() == [0, 1, 2, 4]


def test_one_offline_set_serves_many_queries_and_refuses_stale_sets(tmp_path: Path) -> None:
    large = [f"ID{i}" for i in range(2_000)]
    server = UnbalancedPsiServer(workers=1)
    offline = server.prepare(large)
    assert len(offline) == 2_000 and offline.digest_bytes == 12 and offline.nbytes == 24_000
    assert offline.digests.dtype == np.dtype("S12")
    assert bool((offline.digests[1:] > offline.digests[:-1]).all())  # sorted, no repeats
    offline.save(tmp_path / "registry.set")
    downloaded = OfflineSet.load(tmp_path / "registry.set")
    assert downloaded.key_id == server.key_id
    assert np.array_equal(downloaded.digests, offline.digests)
    first = ["ID5", "ID1999", "nobody", "ID77"]
    second = ["ID0", "x1", "x2", "ID1000", "ID5"]
    assert one_query(server, downloaded, first) == ["ID1999", "ID5", "ID77"]
    assert one_query(server, downloaded, second) == ["ID0", "ID1000", "ID5"]

    other = UnbalancedPsiServer(workers=1)  # e.g. a rotated key: the old set is stale
    client = UnbalancedPsiClient(workers=1)
    client.unblind(other.evaluate(client.blind(first)), key_id=other.key_id)
    with pytest.raises(ValueError, match=r"made with server key .* the set is stale"):
        client.intersect(downloaded)
    with pytest.raises(ValueError, match="no answers yet"):
        UnbalancedPsiClient().intersect(downloaded)


def test_key_round_trip_keeps_the_offline_set(tmp_path: Path) -> None:
    ids = [f"ID{i}" for i in range(300)]
    server = UnbalancedPsiServer(workers=1)
    offline = server.prepare(ids)
    server.save_key(tmp_path / "key.pem", password="correct horse")
    pem = (tmp_path / "key.pem").read_bytes()
    assert pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert (tmp_path / "key.pem").stat().st_mode & 0o077 == 0  # owner only
    restarted = UnbalancedPsiServer.load_key(
        tmp_path / "key.pem", password="correct horse", workers=1
    )
    assert restarted.key_id == server.key_id
    assert np.array_equal(restarted.prepare(ids).digests, offline.digests)
    assert one_query(restarted, offline, ["ID3", "ID299", "no"]) == ["ID299", "ID3"]
    plain = UnbalancedPsiServer.from_pem(server.key_pem())  # unencrypted PEM also works
    assert plain.key_id == server.key_id
    with pytest.raises(ValueError, match="check the file and the password"):
        UnbalancedPsiServer.load_key(tmp_path / "key.pem", password="wrong")
    with pytest.raises(ValueError, match="check the file and the password"):
        UnbalancedPsiServer.from_pem(b"not a key")
    # fresh servers draw fresh keys: unrelated sets
    fresh = [UnbalancedPsiServer(workers=1) for _ in range(2)]
    assert fresh[0].key_id != fresh[1].key_id
    sets = [s.prepare(ids).digests for s in fresh]
    assert not set(sets[0].tolist()) & set(sets[1].tolist())
    assert not set(sets[0].tolist()) & set(offline.digests.tolist())
    assert "key=" not in repr(server).replace("key_id=", "")


def test_malformed_points_are_refused_with_their_position() -> None:
    server = UnbalancedPsiServer(workers=1)
    client = UnbalancedPsiClient(workers=1)
    points = client.blind([f"ID{i}" for i in range(10)])
    with pytest.raises(ValueError, match="position 3 is not 32 bytes"):
        server.evaluate([*points[:3], b"short", *points[4:]])
    with pytest.raises(ValueError, match="position 1 is not 32 bytes"):
        server.evaluate([points[0], "a string, not bytes" * 2])  # type: ignore[list-item]
    off_curve = next(  # an x with no y: x^3 - 3x + b is not a square mod p
        x.to_bytes(32, "big")
        for x in range(1, 100)
        if gmpy2.legendre(x**3 - 3 * x + P256_B, P256_P) != 1
    )
    with pytest.raises(ValueError, match=r"position 7 is not the x-coordinate of a P-256 point"):
        server.evaluate([*points[:7], off_curve, *points[8:]])
    with pytest.raises(ValueError, match="position 0 is not the x-coordinate"):
        server.evaluate([b"\xff" * 32])  # x >= p
    answers = server.evaluate(points)
    with pytest.raises(ValueError, match="answered 9 points to the 10 sent"):
        client.unblind(answers[:9], key_id=server.key_id)
    with pytest.raises(ValueError, match="the server's answer: the point at position 2"):
        client.unblind([*answers[:2], off_curve, *answers[3:]], key_id=server.key_id)
    client.unblind(answers, key_id=server.key_id)
    with pytest.raises(ValueError, match="no query pending"):
        client.unblind(answers, key_id=server.key_id)  # the scalar is gone after one use


def test_the_server_limits_queries_and_items() -> None:
    server = UnbalancedPsiServer(max_queries=2, max_items=5, workers=1)
    client = UnbalancedPsiClient(workers=1)
    with pytest.raises(QueryLimitError, match="6 points, more than this server's max_items=5"):
        server.evaluate(client.blind([f"ID{i}" for i in range(6)]))
    for _ in range(2):
        server.evaluate(client.blind(["ID1", "ID2"]))
    assert (server.queries_answered, server.items_answered) == (2, 4)
    with pytest.raises(QueryLimitError, match="answered its max_queries=2 queries"):
        server.evaluate(client.blind(["ID1"]))
    with pytest.raises(ValueError, match="max_items must be a positive integer"):
        UnbalancedPsiServer(max_items=0)
    with pytest.raises(ValueError, match="digest_bytes must be 8 to 32"):
        UnbalancedPsiServer(digest_bytes=4)


def test_the_server_sees_neither_hashes_nor_repeats() -> None:
    ids = normalize_ids([f"ID{i}" for i in range(200)])
    hashed = {hash_to_curve(i) for i in ids}
    client = UnbalancedPsiClient(workers=1)
    first = client.blind(ids, normalize=False)
    order_first = client._order.copy()
    second = client.blind(ids, normalize=False)
    assert all(len(p) == 32 for p in first)
    assert not hashed & set(first) and not hashed & set(second)
    assert not set(first) & set(second)  # a fresh scalar per query: the same ID looks new
    assert order_first.tolist() != list(range(200))  # sent in a secret random order
    again = UnbalancedPsiClient(workers=1)
    assert not set(again.blind(["ID7"])) & set(first)


def test_damaged_or_foreign_files_are_refused(tmp_path: Path) -> None:
    server = UnbalancedPsiServer(workers=1)
    offline = server.prepare(["A", "B", "C"])
    np.save(tmp_path / "plain.npy", offline.digests)
    with pytest.raises(ValueError, match="not an offline set"):
        OfflineSet.load(tmp_path / "plain.npy")
    with pytest.raises(ValueError, match="not sorted"):
        OfflineSet(digests=offline.digests[::-1].copy(), key_id=server.key_id)
    empty = UnbalancedPsiServer(workers=1).prepare([])
    assert len(empty) == 0
    client = UnbalancedPsiClient(workers=1)
    client.unblind(server.evaluate(client.blind(["A"])), key_id=server.key_id)
    assert client.intersect(offline).tolist() == [0]


def test_worker_processes_give_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    import linkage.workers

    monkeypatch.setattr(linkage.workers, "PARALLEL_MIN_POINTS", 10)
    small, large, common = random_sets(60, 400, 25, seed=4)
    pairs = unbalanced_psi(small, large, workers=2)
    assert set(small[pairs["a"]]) == common
    assert (small[pairs["a"]].to_numpy() == large[pairs["b"]].to_numpy()).all()
    server = UnbalancedPsiServer(workers=2)
    serial = UnbalancedPsiServer(server._key, workers=1)
    assert np.array_equal(server.prepare(large).digests, serial.prepare(large).digests)
    points = UnbalancedPsiClient(workers=2).blind([f"ID{i}" for i in range(40)])
    with pytest.raises(ValueError, match="position 33 is not the x-coordinate"):
        server.evaluate([*points[:33], b"\xff" * 32, *points[34:]])


def test_altered_headers_and_foreign_keys_are_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    server = UnbalancedPsiServer(workers=1)
    offline = server.prepare([f"ID{i}" for i in range(20)])
    meta = {"format": "vflink-unbalanced-psi-offline-set", "version": 1, "curve": "P-256"}
    meta |= {"key_id": server.key_id, "digest_bytes": 12, "size": 21}  # one row missing
    header = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with open(tmp_path / "cut.npz", "wb") as file:
        np.savez(file, digests=offline.digests, meta=header)
    with pytest.raises(ValueError, match="does not match the values stored"):
        OfflineSet.load(tmp_path / "cut.npz")
    other_curve = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ValueError, match="not a P-256"):
        UnbalancedPsiServer.from_pem(other_curve)


def test_caps_are_counted_per_client_and_name_it() -> None:
    server = UnbalancedPsiServer(max_evaluations=5, max_queries=3, workers=1)
    client = UnbalancedPsiClient(workers=1)
    server.evaluate(client.blind(["A", "B", "C"]), client="clinic")
    with pytest.raises(
        QueryLimitError,
        match=r"client 'clinic' asked for 3 OPRF evaluations, with 3 answered before: more "
        r"than its cap max_evaluations=5 \(2 left\)",
    ):
        server.evaluate(client.blind(["D", "E", "F"]), client="clinic")
    # a refused query is not charged; another client has its own budget
    assert server.answered("clinic") == (1, 3)
    server.evaluate(client.blind(["D", "E", "F", "G", "H"]), client="hospital")
    assert server.answered("hospital") == (1, 5) and server.answered("nobody") == (0, 0)
    assert (server.queries_answered, server.items_answered) == (2, 8)
    with pytest.raises(QueryLimitError, match="client 'clinic': the query has 6 points"):
        UnbalancedPsiServer(max_items=5, workers=1).evaluate(
            client.blind(list("ABCDEF")), client="clinic"
        )
    with pytest.raises(ValueError, match="client 'clinic''s query: the point at position 1"):
        server.evaluate([client.blind(["A"])[0], b"\xff" * 32], client="clinic")
    with pytest.raises(ValueError, match="max_evaluations must be a positive integer"):
        UnbalancedPsiServer(max_evaluations=True)


def test_a_ledger_keeps_each_clients_caps_across_servers_and_restarts(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    client = UnbalancedPsiClient(workers=1)
    first = UnbalancedPsiServer(max_evaluations=4, ledger=ledger, workers=1)
    first.evaluate(client.blind(["A", "B", "C"]), client="clinic")
    assert json.loads(ledger.read_text())["clients"] == {"clinic": {"queries": 1, "evaluations": 3}}
    assert ledger.stat().st_mode & 0o777 == 0o600
    # another process, another key: the same client's budget goes on
    restarted = UnbalancedPsiServer(max_evaluations=4, ledger=ledger, workers=1)
    assert restarted.answered("clinic") == (1, 3)
    with pytest.raises(QueryLimitError, match=r"client 'clinic' asked for 2 .* 3 answered"):
        restarted.evaluate(client.blind(["D", "E"]), client="clinic")
    restarted.evaluate(client.blind(["D"]), client="clinic")
    assert first.answered("clinic") == (2, 4)  # both objects read the one ledger
    ledger.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a query ledger written by UnbalancedPsiServer"):
        UnbalancedPsiServer(ledger=ledger)
    ledger.write_text("{not json")
    with pytest.raises(ValueError, match=r"ledger\.json: not a query ledger"):
        UnbalancedPsiServer(ledger=ledger)


def test_probes_check_the_answers_against_the_servers_public_key() -> None:
    from linkage.unbalanced import OprfCheckError, key_id_of

    server = UnbalancedPsiServer(workers=1)
    offline = server.prepare([f"ID{i}" for i in range(30)])
    assert key_id_of(server.public_key) == server.key_id and len(server.public_key) == 33
    ids = [f"ID{i}" for i in range(20, 40)]
    client = UnbalancedPsiClient(workers=1)
    points = client.blind(ids, probes=8)
    assert len(points) == 28 and len(set(points)) == 28
    client.unblind(server.evaluate(points), public_key=server.public_key)
    assert sorted(ids[r] for r in client.intersect(offline)) == sorted(ids[:10])
    # a server that answers with another key than the one it committed to
    other = UnbalancedPsiServer(workers=1)
    points = client.blind(ids, probes=8)
    with pytest.raises(OprfCheckError, match="answered 8 of the 8 probe points with another"):
        client.unblind(other.evaluate(points), public_key=server.public_key)
    # ... or with another key on a few points only: each probe among them is caught (the
    # server cannot tell probes from IDs; here the test forges exactly three probes' answers)
    points = client.blind(ids, probes=8)
    mixed, forged = server.evaluate(points), other.evaluate(points)
    for slot in client._probe_slots[:3]:
        mixed[slot] = forged[slot]
    with pytest.raises(OprfCheckError, match="answered 3 of the 8 probe points"):
        client.unblind(mixed, public_key=server.public_key)
    points = client.blind(ids, probes=2)
    with pytest.raises(ValueError, match="carries probe points: pass the server's public_key"):
        client.unblind(server.evaluate(points), key_id=server.key_id)
    with pytest.raises(ValueError, match="is not the fingerprint of the public key"):
        client.unblind(server.evaluate(points), key_id=other.key_id, public_key=server.public_key)
    with pytest.raises(ValueError, match="not a compressed P-256 point"):
        key_id_of(b"\x02" + b"\xff" * 32)
    with pytest.raises(ValueError, match="probes must be a non-negative integer"):
        client.blind(ids, probes=-1)
