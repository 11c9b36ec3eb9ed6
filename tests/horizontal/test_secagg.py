"""Secure aggregation: the unmasked sum is the plain sum for every dropout pattern down to the
threshold, below it the round aborts, a masked vector looks uniform, Shamir's threshold holds,
and altered or replayed shares are refused naming their sender."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from scipy import stats

from horizontal.secagg import (
    PRIME,
    SECAGG,
    Boxes,
    ChannelKey,
    Ring,
    SecAggConfig,
    client_round,
    prg,
    server_round,
    shamir_combine,
    shamir_split,
)
from vfl.federation.base import PartyFailedError
from vfl.federation.local import LocalFederation
from vfl.federation.messages import MessageError


def _run(
    vectors: dict[str, np.ndarray], config: SecAggConfig, drops: dict[str, str], **server: Any
) -> Any:
    size = len(next(iter(vectors.values())))
    roles: dict[str, Any] = {
        name: (
            lambda fed, name=name: client_round(
                fed,
                "server",
                vectors[name],
                config,
                clients=len(vectors),
                drop_after=drops.get(name),
            )
        )
        for name in vectors
    }
    roles["server"] = lambda fed: server_round(fed, list(vectors), size, config, **server)
    return LocalFederation(timeout=30).run(roles)


def _vectors(n: int, size: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"c{i}": rng.normal(size=size) * 10 for i in range(n)}


def test_the_sum_is_exact_for_every_dropout_pattern_down_to_the_threshold() -> None:
    n, t = 5, 3
    vectors = _vectors(n, 64)
    ring = Ring()
    stages = [None, "keys", "shares", "masked"]
    checked = 0
    for pattern in itertools.product(stages, repeat=2):  # two clients drop, at any step
        drops = {name: stage for name, stage in zip(["c1", "c3"], pattern, strict=True) if stage}
        total, survivors = _run(vectors, SecAggConfig(threshold=t), drops)["server"]
        expected_survivors = [c for c in vectors if drops.get(c) not in ("keys", "shares")]
        assert survivors == expected_survivors
        exact = ring.decode(sum(ring.encode(vectors[c], n) for c in survivors))
        np.testing.assert_array_equal(total, exact)  # exact in the ring
        np.testing.assert_allclose(total, sum(vectors[c] for c in survivors), atol=1e-6)
        checked += 1
    assert checked == 16


def test_below_the_threshold_the_round_aborts_everywhere() -> None:
    vectors = _vectors(4, 16)
    drops = {"c0": "keys", "c1": "shares"}  # 2 left of 4, threshold 3
    with pytest.raises(PartyFailedError, match="fewer than the threshold 3; nothing was revealed"):
        _run(vectors, SecAggConfig(threshold=3), drops)
    with pytest.raises(ValueError, match="threshold must be between 2"):
        SecAggConfig(threshold=5).check(4)


def test_a_masked_vector_is_uniform_in_the_ring() -> None:
    size = 40_000
    seen: dict[str, Any] = {}
    vectors = {f"c{i}": np.full(size, 0.5) for i in range(3)}  # a constant: masks or nothing
    config = SecAggConfig(threshold=2)
    roles: dict[str, Any] = {
        name: (lambda fed, name=name: client_round(fed, "server", vectors[name], config, clients=3))
        for name in vectors
    }

    def server(fed: Any) -> Any:
        out = server_round(fed, list(vectors), size, config)
        return out

    federation = LocalFederation(timeout=30, record_payloads=True)
    federation.run({**roles, "server": server})
    for record in federation.transcript.records:
        if record.tag.startswith("secagg/masked") and record.sender == "c1":
            seen["masked"] = record.payload()["values"]
    masked = np.asarray(seen["masked"], dtype=np.uint64)
    # every byte of the 64-bit words, chi-square against uniform; false failure below 1e-6
    limit = stats.chi2.ppf(1 - 1e-7, 255)
    for shift in range(0, 64, 8):
        counts = np.bincount(
            ((masked >> np.uint64(shift)) & np.uint64(255)).astype(int), minlength=256
        )
        assert stats.chisquare(counts).statistic < limit
    plain = Ring().encode(vectors["c1"], 3)  # the test has the power to see an unmasked input
    counts = np.bincount(((plain >> np.uint64(56)) & np.uint64(255)).astype(int), minlength=256)
    assert stats.chisquare(counts).statistic > limit


def test_shamir_rebuilds_from_any_t_shares_and_t_minus_1_fit_every_secret() -> None:
    secret = int.from_bytes(bytes(range(32)), "big")
    xs = [1, 2, 3, 4, 5, 6]
    shares = shamir_split(secret, xs, threshold=4)
    for subset in itertools.combinations(xs, 4):
        assert shamir_combine({x: shares[x] for x in subset}, 4) == secret
    known = {x: shares[x] for x in xs[:3]}  # t - 1 shares
    for candidate in (0, 1, secret + 1, PRIME - 1):
        # the polynomial through (0, candidate) and the 3 known shares has degree 3: the
        # known shares are those of `candidate` as much as of `secret`
        points = {0: candidate, **known}
        rebuilt = shamir_combine(points, 4)
        assert rebuilt == candidate
    with pytest.raises(ValueError, match="cannot rebuild"):
        shamir_combine(known, 4)


@pytest.mark.parametrize("kept", [False, True], ids=["fresh-c-keys", "kept-c-keys"])
def test_altered_or_replayed_shares_are_refused_naming_the_sender(kept: bool) -> None:
    """An altered share, one recorded in another round, and one recorded in an earlier run of
    the *same* round number: each is refused by its receiver, naming the sender -- with ``c``
    keys drawn per round, and with ``c`` keys kept across rounds (:class:`ChannelKey`), where
    the share keys stay the same and only the associated data (the run's fresh ``s`` keys)
    tells the runs apart."""
    vectors = _vectors(3, 8)
    config = SecAggConfig(threshold=2)
    recorded: dict[str, Any] = {}
    channels = {name: ChannelKey() for name in vectors} if kept else {}

    def tampering_server(fed: Any, *, round_: int, replay: bool) -> None:
        """Runs the first two steps honestly, then forwards to c0 either an altered share or
        the one recorded in the first run."""
        keys = fed.gather(list(vectors), SECAGG.tag("keys", round_))
        from horizontal.secagg import Keys, Roster

        names = sorted(keys)
        parsed = {n: Keys.from_payload(keys[n], n) for n in names}
        roster = Roster(
            names,
            [parsed[n].c_pk for n in names],
            [parsed[n].s_pk for n in names],
            [parsed[n].sig_pk for n in names],
            [parsed[n].signature for n in names],
        )
        for name in names:
            SECAGG.send(fed, name, "roster", roster, round_)
        shares = {
            n: Boxes.from_payload(p, n)
            for n, p in fed.gather(names, SECAGG.tag("shares", round_)).items()
        }
        box = shares["c1"].boxes[shares["c1"].peers.index("c0")]
        if replay:
            box = recorded["box"]
        else:
            recorded["box"] = box
            box = box[:-1] + bytes([box[-1] ^ 1])
        SECAGG.send(fed, "c0", "inbox", Boxes(peers=["c1"], boxes=[box]), round_)

    def client(name: str, round_: int) -> Any:
        drop = None if name == "c0" else "shares"
        return lambda fed: client_round(
            fed,
            "server",
            vectors[name],
            config,
            round_,
            clients=3,
            drop_after=drop,
            channel=channels.get(name),
        )

    # altered in round 0; replayed into round 1; replayed into a second run of round 0
    for round_, replay in ((0, False), (1, True), (0, True)):
        roles: dict[str, Any] = {name: client(name, round_) for name in vectors}
        roles["server"] = lambda fed, r=round_, p=replay: tampering_server(fed, round_=r, replay=p)
        with pytest.raises(PartyFailedError) as caught:
            LocalFederation(timeout=30).run(roles)
        assert "the shares from 'c1' do not decrypt" in str(caught.value)
        assert isinstance(caught.value.__cause__, MessageError) or "MessageError" in str(
            caught.value
        )
    if kept:  # the same share keys served all three runs: c0 agreed with c1 and c2 once
        assert channels["c0"].exchanges == 2


def test_a_roster_replayed_from_an_earlier_run_of_the_round_is_refused() -> None:
    """The attack kept ``c`` keys invite: the server runs round 7 honestly (recording the
    roster, every share box and c0's masked input, and learning c0's self-mask seed), then
    runs round 7 again, sends c1 and c2 the *old* roster, forwards c0's old boxes and says c0
    dropped -- so that they reveal shares of c0's mask key, and c0's input is unmasked. Every
    client checks that the roster lists its own keys as it sent them; its ``s`` key is fresh,
    so an old roster is refused before anything is shared. Without the check the replayed
    run goes through (c0's old boxes open, the tags agree, c1 and c2 reveal their shares of
    c0's mask key) and this test fails."""
    from horizontal.secagg import Keys, Masked, Reveal, Roster, Survivors, Tags

    names, round_ = ["c0", "c1", "c2"], 7
    vectors = {name: np.random.default_rng(i).normal(size=8) for i, name in enumerate(names)}
    config = SecAggConfig(threshold=2)
    channels = {name: ChannelKey() for name in names}
    recorded: dict[str, Any] = {}

    def server(fed: Any, replay: bool) -> Any:
        def gather(who: list[str], step: str, cls: Any) -> dict[str, Any]:
            got = fed.gather(who, SECAGG.tag(step, round_))
            return {p: cls.from_payload(v, p) for p, v in got.items()}

        who = ["c1", "c2"] if replay else names
        keys = gather(who, "keys", Keys)
        if replay:
            roster = recorded["roster"]
        else:
            roster = Roster(
                names,
                [keys[n].c_pk for n in names],
                [keys[n].s_pk for n in names],
                *[[b""] * 3] * 2,
            )
            recorded["roster"] = roster
        for name in who:
            SECAGG.send(fed, name, "roster", roster, round_)
        shares = gather(who, "shares", Boxes)
        if not replay:
            recorded["c0"] = shares["c0"]
        for r in who:
            peers = [n for n in names if n != r]
            source = {n: recorded["c0"] if n == "c0" else shares[n] for n in peers}
            inbox = [source[n].boxes[source[n].peers.index(r)] for n in peers]
            SECAGG.send(fed, r, "inbox", Boxes(peers, inbox), round_)
        gather(who, "masked", Masked)
        for name in who:
            SECAGG.send(fed, name, "survivors", Survivors(who, ["c0"] if replay else []), round_)
        tags = gather(who, "tags", Tags)
        for r in who:
            peers = [n for n in who if n != r]
            forwarded = [dict(zip(tags[n].peers, tags[n].tags, strict=True))[r] for n in peers]
            SECAGG.send(fed, r, "tag-inbox", Tags(peers, forwarded), round_)
        return gather(who, "reveal", Reveal)

    def run(replay: bool) -> Any:
        who = ["c1", "c2"] if replay else names
        roles: dict[str, Any] = {
            name: (
                lambda fed, name=name: client_round(
                    fed, "server", vectors[name], config, round_, clients=3, channel=channels[name]
                )
            )
            for name in who
        }
        roles["server"] = lambda fed: server(fed, replay)
        return LocalFederation(timeout=30, record_payloads=True).run(roles)["server"]

    revealed = run(replay=False)
    assert all(r.kinds == ["b", "b", "b"] for r in revealed.values())  # the honest run
    with pytest.raises(PartyFailedError, match=r"lists other keys for this client than it sent"):
        run(replay=True)


def test_kept_c_keys_agree_each_pair_once_per_fit_and_every_sum_stays_exact() -> None:
    """Four rounds with each client's ``c`` key kept (:class:`ChannelKey`): c4 not sampled in
    round 1 and back in round 2, c3's key replaced before round 3. Every sum equals the plain
    one, each client advertised the same ``c`` key and a fresh ``s`` key in every round it
    took part in (the transcript), and each pair's X25519 agreement was made once -- again
    only with the client whose key changed, not with the one that sat a round out."""
    vectors = _vectors(5, 32)
    everyone = sorted(vectors)
    config = SecAggConfig(threshold=3)
    ring = Ring()
    channels = {name: ChannelKey() for name in everyone}
    adverts: dict[str, list[tuple[bytes, bytes]]] = {name: [] for name in everyone}
    for round_ in range(4):
        names = [n for n in everyone if n != "c4"] if round_ == 1 else everyone
        size = len(names)
        if round_ == 3:
            channels["c3"] = ChannelKey()
        roles: dict[str, Any] = {
            name: (
                lambda fed, name=name, r=round_, n=size: client_round(
                    fed, "server", vectors[name], config, r, clients=n, channel=channels[name]
                )
            )
            for name in names
        }
        roles["server"] = lambda fed, r=round_, n=names: server_round(fed, n, 32, config, r)
        federation = LocalFederation(timeout=30, record_payloads=True)
        total, survivors = federation.run(roles)["server"]
        assert survivors == names
        exact = ring.decode(sum(ring.encode(vectors[c], len(names)) for c in names))
        np.testing.assert_array_equal(total, exact)
        for record in federation.transcript.records:
            if record.tag.startswith("secagg/keys/"):
                payload = record.payload()
                adverts[record.sender].append((payload["c_pk"], payload["s_pk"]))
        expected = 4 if round_ < 3 else 5  # the others met c3's new key in round 3
        others = [n for n in everyone if n != "c3"]
        assert {n: channels[n].exchanges for n in others} == dict.fromkeys(others, expected)
        assert channels["c3"].exchanges == 4
    for name, seen in adverts.items():
        c_pks, s_pks = [c for c, _ in seen], [s for _, s in seen]
        rounds = 3 if name == "c4" else 4
        assert len(seen) == rounds and len(set(s_pks)) == rounds
        assert len(set(c_pks)) == (2 if name == "c3" else 1)
        assert c_pks[-1] == channels[name].private.public_key().public_bytes_raw()


def test_the_ring_refuses_what_would_overflow_the_sum() -> None:
    ring = Ring(fraction_bits=24, bound=2.0**20)
    with pytest.raises(ValueError, match="overflow the 64-bit ring"):
        ring.encode(np.zeros(3), clients=1 << 20)
    with pytest.raises(ValueError, match="exceeds the ring's bound"):
        ring.encode(np.array([2.0**21]), clients=2)
    with pytest.raises(ValueError, match="finite"):
        ring.encode(np.array([np.nan]), clients=2)


def test_federated_training_under_secure_aggregation_is_fedavg_without_any_update_seen() -> None:
    from horizontal import ClientDP, FederatedClassifier
    from vfl.datasets import make_hospital_cohort

    hospitals = make_hospital_cohort(5, 1500, random_state=0)
    clients = {k: (v.drop(columns=["diagnosis"]), v["diagnosis"]) for k, v in hospitals.items()}
    for strategy in ("fedavg", "scaffold"):
        plain = FederatedClassifier(max_iter=3, random_state=0, strategy=strategy).fit(clients)
        secure = FederatedClassifier(
            max_iter=3, random_state=0, strategy=strategy, protocol=SecAggConfig(threshold=3)
        ).fit(clients, keep_payloads=True)
        np.testing.assert_allclose(secure.weights_, plain.weights_, atol=1e-6)
        steps = {r.tag.split("/")[1] for r in secure.transcript_.records if r.sender != "server"}
        assert "update" not in steps and {"keys", "masked", "reveal"} <= steps
        assert [r.replied for r in secure.rounds_] == [5, 5, 5]
    with pytest.raises(ValueError, match="adaptive clipping needs the server to count"):
        FederatedClassifier(
            protocol=SecAggConfig(threshold=3),
            privacy=ClientDP(noise_multiplier=0.2, adaptive=True),
            standardize=False,
            classes=[0, 1],
        ).fit(clients)


def test_client_level_dp_under_secure_aggregation_distributes_its_noise() -> None:
    from types import SimpleNamespace

    from horizontal import ClientDP, FederatedClassifier
    from vfl.datasets import make_hospital_cohort

    privacy = ClientDP(noise_multiplier=1.5, clip=0.5)
    spec = SimpleNamespace(
        client_fraction=1.0,
        clients=("a", "b", "c", "d", "e"),
        rounds=3,
        secure_aggregation=SecAggConfig(threshold=4),
    )
    share = privacy.noise_share(200_000, None, spec)
    # each client's share carries 1/t of the variance: t of them the whole (1.5 * 0.5)^2
    assert float(np.std(share)) == pytest.approx(1.5 * 0.5 / 2, rel=0.01)
    hospitals = make_hospital_cohort(5, 1500, random_state=0)
    clients = {
        k: (v.drop(columns=["diagnosis"]).to_numpy(), v["diagnosis"]) for k, v in hospitals.items()
    }
    options: dict[str, Any] = dict(
        max_iter=3, standardize=False, classes=[0, 1], random_state=0, privacy=privacy
    )
    central = FederatedClassifier(**options).fit(clients)
    secure = FederatedClassifier(**options, protocol=SecAggConfig(threshold=4)).fit(
        clients, keep_payloads=True
    )
    assert secure.epsilon_ == pytest.approx(central.epsilon_, rel=1e-9)  # the same account
    entries = secure.privacy_ledger_.to_json()
    assert "distributed noise under secure aggregation" in entries
    assert not any(r.tag.startswith("fed/update") for r in secure.transcript_.records)


def test_secagg_plus_neighbourhoods_give_the_exact_sum_with_dropouts() -> None:
    from horizontal.secagg import neighbourhoods

    vectors = _vectors(10, 32, seed=3)
    config = SecAggConfig(threshold=3, neighbours=4)
    graph = neighbourhoods(sorted(vectors), 4, 0)
    assert all(len(peers) == 4 for peers in graph.values())
    assert all(a in graph[b] for a in graph for b in graph[a])  # symmetric
    drops = {"c2": "shares", "c7": "masked"}
    total, survivors = _run(vectors, config, drops)["server"]
    ring = Ring()
    exact = ring.decode(sum(ring.encode(vectors[c], 10) for c in survivors))
    np.testing.assert_array_equal(total, exact)
    assert "c2" not in survivors and "c7" in survivors
    with pytest.raises(ValueError, match="neighbours must be an even number"):
        SecAggConfig(threshold=6, neighbours=4).check(10)


def test_every_client_hears_an_abort_and_none_hangs_or_sends_unmasked_input() -> None:
    vectors = _vectors(4, 16)
    with pytest.raises(PartyFailedError) as caught:
        _run(vectors, SecAggConfig(threshold=3), {"c0": "keys", "c1": "keys"})
    text = str(caught.value)
    assert "PeerGoneError" not in text and "SecAggAbortedError" in text


def test_secagg_plus_refuses_survivors_that_fall_apart_into_separate_pieces() -> None:
    from horizontal.secagg import is_connected, neighbourhoods

    vectors = _vectors(10, 8, seed=4)
    config = SecAggConfig(threshold=3, neighbours=4)
    names = sorted(vectors)
    graph = neighbourhoods(names, 4, 0)
    # four clients whose dropping (after sharing) cuts the survivors into separate pieces
    cut = next(
        set(group)
        for group in itertools.combinations(names, 4)
        if not is_connected(set(names) - set(group), graph)
    )
    with pytest.raises(PartyFailedError, match="fall apart into separate"):
        _run(vectors, config, dict.fromkeys(cut, "shares"))


def test_the_mask_prg_is_aes_ctr_and_a_reused_buffer_changes_nothing() -> None:
    """The masks' PRG: AES-128-CTR's keystream under the 32-byte seed's first 16 bytes, from
    the counter block its last 16 give, whether written into a fresh array or into a round's
    reused buffer; uniform bytes; a seed of another length refused."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    seeds = [bytes([i]) * 16 + bytes([i + 1]) * 16 for i in range(3)] + [bytes(16) + b"\xff" * 16]
    reference = [
        np.frombuffer(
            Cipher(algorithms.AES(s[:16]), modes.CTR(s[16:])).encryptor().update(bytes(8 * 1001)),
            np.uint64,
        )
        for s in seeds
    ]
    buffer = np.empty(2000, dtype=np.uint64)
    for seed, expected in zip(seeds, reference, strict=True):
        np.testing.assert_array_equal(prg(seed, 1001), expected)
        np.testing.assert_array_equal(prg(seed, 1001, buffer=buffer), expected)
        np.testing.assert_array_equal(prg(seed, 7), expected[:7])
    assert not np.array_equal(reference[0], reference[1])
    counts = np.bincount(reference[2].view(np.uint8), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4  # 8,008 bytes, about 31 of each value
    with pytest.raises(ValueError, match="32 bytes"):
        prg(b"k" * 16, 8)
