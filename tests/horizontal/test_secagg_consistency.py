"""Secure aggregation's consistency round (Bonawitz et al. 2017, the malicious-server variant):
a server that tells clients different survivor sets unmasks one client's update when the round
is off, and is caught -- every client aborts naming it, no share that would unmask anyone is
revealed -- when it is on; honest rounds with dropouts at every step still give the exact sum;
forged, altered or reflected consistency tags, requests for both shares of one client and
substituted keys (with identities) are refused."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

# the attack needs the pairwise-mask derivation, which the module keeps private
from horizontal.secagg import (
    SECAGG,
    Boxes,
    Keys,
    Masked,
    Reveal,
    Ring,
    Roster,
    SecAggConfig,
    Survivors,
    Tags,
    client_round,
    pair_seed,
    prg,
    required_agreement,
    server_round,
    shamir_combine,
)
from vfl.crypto.keys import SecurityWarning
from vfl.federation.base import PartyFailedError
from vfl.federation.local import LocalFederation

NAMES = ["c0", "c1", "c2", "c3", "c4"]
TARGET = "c4"  # the client the server tries to unmask
FOOLED = {"c0", "c1"}  # told that TARGET dropped; the others are told it survived


def _vectors(names: list[str], size: int = 16, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.normal(size=size) * 10 for name in names}


def _clients(
    vectors: dict[str, np.ndarray], config: SecAggConfig, **options: Any
) -> dict[str, Any]:
    def role(name: str) -> Any:
        extra = {k: v[name] for k, v in options.items() if name in v}
        return lambda fed: client_round(
            fed, "server", vectors[name], config, clients=len(vectors), **extra
        )

    return {name: role(name) for name in vectors}


class Proxy:
    """A party's channel with its outgoing messages rewritten by ``rewrite(to, tag,
    payload)`` (the test's way to make one role deviate while running the library's code)."""

    def __init__(self, fed: Any, rewrite: Any) -> None:
        self.fed, self.rewrite = fed, rewrite

    def send(self, to: str, tag: str, payload: Any) -> None:
        self.fed.send(to, tag, self.rewrite(to, tag, payload))

    def broadcast(self, tag: str, payload: Any, *, to: Any = None) -> None:
        for peer in self.fed.peers if to is None else to:  # each copy rewritten on its own
            self.send(peer, tag, payload)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fed, name)


def equivocating_server(
    fed: Any, config: SecAggConfig, size: int, *, forward: str, round_: int = 0
) -> np.ndarray:
    """Honest up to the masked inputs; then tells FOOLED that TARGET dropped (asking for its
    mask-key shares) and the others that it survived (their shares of its self-mask), and
    forwards either every tag (``"all"``) or each group only its own (``"own"``);
    ``"both"`` asks FOOLED for both shares of TARGET at once. Returns TARGET's input as
    rebuilt from what the clients revealed."""
    keys = {
        n: Keys.from_payload(p, n) for n, p in fed.gather(NAMES, SECAGG.tag("keys", round_)).items()
    }
    roster = Roster(
        NAMES,
        [keys[n].c_pk for n in NAMES],
        [keys[n].s_pk for n in NAMES],
        [keys[n].sig_pk for n in NAMES],
        [keys[n].signature for n in NAMES],
    )
    for name in NAMES:
        SECAGG.send(fed, name, "roster", roster, round_)
    shares = {
        n: Boxes.from_payload(p, n)
        for n, p in fed.gather(NAMES, SECAGG.tag("shares", round_)).items()
    }
    for receiver in NAMES:
        senders = [n for n in NAMES if n != receiver]
        boxes = [shares[n].boxes[shares[n].peers.index(receiver)] for n in senders]
        SECAGG.send(fed, receiver, "inbox", Boxes(senders, boxes), round_)
    masked = {
        n: Masked.from_payload(p, n)
        for n, p in fed.gather(NAMES, SECAGG.tag("masked", round_)).items()
    }
    for name in NAMES:
        if name not in FOOLED:
            told = Survivors(NAMES, [])
        elif forward == "both":
            told = Survivors(NAMES, [TARGET])
        else:
            told = Survivors([n for n in NAMES if n != TARGET], [TARGET])
        SECAGG.send(fed, name, "survivors", told, round_)
    if config.consistency:
        tagged = {
            n: Tags.from_payload(p, n)
            for n, p in fed.gather(NAMES, SECAGG.tag("tags", round_)).items()
        }
        for name in NAMES:
            group = FOOLED if name in FOOLED else set(NAMES) - FOOLED
            chosen = [  # every tag there is for the client (the fooled made none for TARGET)
                n for n in NAMES if name in tagged[n].peers and (forward == "all" or n in group)
            ]
            tags = [tagged[n].tags[tagged[n].peers.index(name)] for n in chosen]
            SECAGG.send(fed, name, "tag-inbox", Tags(chosen, tags), round_)
    revealed = {
        n: Reveal.from_payload(p, n)
        for n, p in fed.gather(NAMES, SECAGG.tag("reveal", round_)).items()
    }
    points = {name: i + 1 for i, name in enumerate(NAMES)}
    b_shares, s_shares = {}, {}
    for helper, reveal in revealed.items():
        for peer, kind, share in zip(reveal.peers, reveal.kinds, reveal.shares, strict=True):
            if peer == TARGET:
                (b_shares if kind == "b" else s_shares)[points[helper]] = int.from_bytes(
                    share, "big"
                )
    t = config.threshold
    seed = shamir_combine(b_shares, t).to_bytes(32, "big")
    s_key = X25519PrivateKey.from_private_bytes(shamir_combine(s_shares, t).to_bytes(32, "big"))
    y = masked[TARGET].values - prg(seed, size)
    for peer in NAMES:
        if peer != TARGET:
            mask = prg(pair_seed(s_key, keys[peer].s_pk, round_), size)
            y = y - mask if peer > TARGET else y + mask
    return Ring().decode(y)


def _revealed(federation: LocalFederation) -> dict[str, list[tuple[str, str]]]:
    """``{client: [(peer, kind), ...]}``: every share each client revealed in the run."""
    out: dict[str, list[tuple[str, str]]] = {}
    for record in federation.transcript.records:
        if record.tag.startswith("secagg/reveal"):
            payload = record.payload()
            out[record.sender] = list(zip(payload["peers"], payload["kinds"], strict=True))
    return out


def test_without_the_round_an_equivocating_server_unmasks_one_clients_update() -> None:
    # threshold 2 of 5: two clients' mask-key shares and three self-mask shares both suffice
    vectors = _vectors(NAMES)
    config = SecAggConfig(threshold=2, consistency=False)
    with pytest.warns(SecurityWarning, match="consistency round"):
        config.check(len(NAMES))
    roles = _clients(vectors, config)
    roles["server"] = lambda fed: equivocating_server(fed, config, 16, forward="all")
    stolen = LocalFederation(timeout=30).run(roles)["server"]
    exact = Ring().decode(Ring().encode(vectors[TARGET], len(NAMES)))
    np.testing.assert_array_equal(stolen, exact)  # one client's update, in the clear


@pytest.mark.parametrize(
    ("forward", "reason"),
    [
        # each client sees tags on another set, or (fooled) from a client "dropped"
        ("all", r"does not match the roster and survivor set|tags from \['c4'\]"),
        ("own", r"fewer than the 3 needed before any share is revealed"),
    ],
)
def test_an_equivocating_server_is_caught_and_learns_no_update(forward: str, reason: str) -> None:
    vectors = _vectors(NAMES)
    config = SecAggConfig(threshold=2)  # consistency on by default
    assert required_agreement(config, len(NAMES)) == 3  # a majority, above the threshold
    roles = _clients(vectors, config)
    roles["server"] = lambda fed: equivocating_server(fed, config, 16, forward=forward)
    federation = LocalFederation(timeout=30, record_payloads=True)
    with pytest.raises(PartyFailedError) as caught:
        federation.run(roles)
    text = str(caught.value)
    assert "SecAggConsistencyError" in text and "the server 'server'" in text
    assert re.search(reason, text)
    revealed = _revealed(federation)
    assert not FOOLED & set(revealed)  # the fooled clients revealed nothing
    kinds = {kind for shares in revealed.values() for peer, kind in shares if peer == TARGET}
    assert "s" not in kinds  # no share of TARGET's mask key left any client: it stays masked


def test_a_server_that_understates_the_clients_cannot_lower_the_agreement_needed() -> None:
    # the server tells every client the round was opened for 2 clients (on Flower the task
    # says so): q would fall to the threshold 2, and the two fooled clients alone would agree
    vectors = _vectors(NAMES)
    config = SecAggConfig(threshold=2)
    roles = {
        name: (lambda fed, name=name: client_round(fed, "server", vectors[name], config, clients=2))
        for name in NAMES
    }
    roles["server"] = lambda fed: equivocating_server(fed, config, 16, forward="own")
    federation = LocalFederation(timeout=30, record_payloads=True)
    with pytest.raises(PartyFailedError, match="fewer than the 3 needed"):  # the roster's 5
        federation.run(roles)
    assert not FOOLED & set(_revealed(federation))


@pytest.mark.parametrize("consistency", [True, False])
def test_a_client_never_reveals_both_shares_of_one_client(consistency: bool) -> None:
    vectors = _vectors(NAMES)
    config = SecAggConfig(threshold=2, consistency=consistency)
    roles = _clients(vectors, config)
    roles["server"] = lambda fed: equivocating_server(fed, config, 16, forward="both")
    federation = LocalFederation(timeout=30, record_payloads=True)
    with pytest.raises(PartyFailedError, match=r"asked in round 0 for both the self-mask share"):
        federation.run(roles)
    assert not FOOLED & set(_revealed(federation))


def _honest(
    vectors: dict[str, np.ndarray], config: SecAggConfig, drops: dict[str, str]
) -> tuple[np.ndarray, list[str]]:
    roles = _clients(vectors, config, drop_after=drops)
    roles["server"] = lambda fed: server_round(fed, list(vectors), 16, config)
    out: tuple[np.ndarray, list[str]] = LocalFederation(timeout=30).run(roles)["server"]
    return out


def test_an_honest_round_with_dropouts_at_every_step_gives_the_exact_sum() -> None:
    names = [f"c{i}" for i in range(8)]
    vectors = _vectors(names, seed=1)
    ring = Ring()
    config = SecAggConfig(threshold=3)
    assert required_agreement(config, len(names)) == 5
    # gone after: keys, shares, the masked input (before vouching), and (c1, c2) after it
    drops = {"c7": "keys", "c6": "shares", "c5": "masked", "c1": "tags", "c2": "tags"}
    total, survivors = _honest(vectors, config, drops)
    assert survivors == ["c0", "c1", "c2", "c3", "c4", "c5"]  # whose masked input arrived
    exact = ring.decode(sum(ring.encode(vectors[c], len(names)) for c in survivors))
    np.testing.assert_array_equal(total, exact)
    np.testing.assert_allclose(total, sum(vectors[c] for c in survivors), atol=1e-6)
    # a majority of the 8 must sign: 4 survivors meet the threshold, not the round's floor
    drops = dict.fromkeys(["c4", "c5", "c6", "c7"], "shares")
    with pytest.raises(PartyFailedError, match="fewer than the 5 needed to vouch"):
        _honest(vectors, config, drops)


def _tamper_tag(prefix: str, change: Any) -> Any:
    return lambda to, tag, payload: change(to, payload) if tag.startswith(prefix) else payload


def test_a_clients_malformed_or_wrong_tags_are_refused() -> None:
    vectors = _vectors(NAMES)
    config = SecAggConfig(threshold=3)

    # tags missing a survivor: the honest server refuses the message, naming the client
    roles = _clients(vectors, config)
    short = roles["c2"]
    drop_one = lambda to, p: {"peers": p["peers"][1:], "tags": p["tags"][1:]}  # noqa: E731
    roles["c2"] = lambda fed: short(Proxy(fed, _tamper_tag("secagg/tags/", drop_one)))
    roles["server"] = lambda fed: server_round(fed, NAMES, 16, config)
    with pytest.raises(PartyFailedError) as caught:
        LocalFederation(timeout=30).run(roles)
    assert "party 'c2' sent a malformed consistency tags message" in str(caught.value)

    # a tag of the wrong length: refused by the server, naming the client
    cut = lambda to, p: {**p, "tags": [p["tags"][0][:31], *p["tags"][1:]]}  # noqa: E731
    roles["c2"] = lambda fed: short(Proxy(fed, _tamper_tag("secagg/tags/", cut)))
    with pytest.raises(PartyFailedError, match=r"'c2' .* holds a tag that is not 32 bytes"):
        LocalFederation(timeout=30).run(roles)

    # a wrong tag for one peer: the server cannot tell (only c2 and c0 hold the key); c0
    # aborts naming both the server and c2, before revealing anything
    def flip(to: str, payload: dict[str, Any]) -> dict[str, Any]:
        tags = list(payload["tags"])
        i = payload["peers"].index("c0")
        tags[i] = tags[i][:-1] + bytes([tags[i][-1] ^ 1])
        return {**payload, "tags": tags}

    roles = _clients(vectors, config)
    roles["c2"] = lambda fed: short(Proxy(fed, _tamper_tag("secagg/tags/", flip)))
    roles["server"] = lambda fed: server_round(fed, NAMES, 16, config)
    federation = LocalFederation(timeout=30, record_payloads=True)
    with pytest.raises(PartyFailedError, match=r"party 'c0': the consistency tag of 'c2'"):
        federation.run(roles)
    assert "c0" not in _revealed(federation)


@pytest.mark.parametrize(
    "deviation",
    [
        "forged",  # c3's tag replaced by bytes of the server's choosing
        "reflected",  # the receiver's own tag for c3 handed back as c3's tag for it
        "redirected",  # c3's tag for another client handed to this one
        "replayed",  # c3's tag for this client from an earlier aggregation
    ],
)
def test_a_server_that_forges_or_moves_tags_is_refused_by_every_client(deviation: str) -> None:
    vectors = _vectors(NAMES)
    config = SecAggConfig(threshold=3)
    sent: dict[str, dict[str, bytes]] = {}  # each client's tags, by the peer they are for

    def record(name: str) -> Any:
        def rewrite(to: str, payload: dict[str, Any]) -> dict[str, Any]:
            sent[name] = dict(zip(payload["peers"], payload["tags"], strict=True))
            return payload

        return rewrite

    def move(to: str, payload: dict[str, Any]) -> dict[str, Any]:
        victim = "c3" if to != "c3" else "c2"  # the sender whose tag is replaced
        tags = list(payload["tags"])
        i = payload["peers"].index(victim)
        if deviation == "forged":
            tags[i] = bytes(32)
        elif deviation == "reflected":
            tags[i] = sent[to][victim]
        else:  # the same sender's tag for another receiver
            tags[i] = sent[victim]["c1" if to != "c1" else "c0"]
        return {**payload, "tags": tags}

    if deviation == "replayed":  # a whole honest aggregation first, its tags kept
        roles = _clients(vectors, config)
        for name in NAMES:
            honest = roles[name]
            roles[name] = lambda fed, h=honest, n=name: h(
                Proxy(fed, _tamper_tag("secagg/tags/", record(n)))
            )
        roles["server"] = lambda fed: server_round(fed, NAMES, 16, config)
        LocalFederation(timeout=30).run(roles)
        earlier = {n: dict(t) for n, t in sent.items()}

        def replay(to: str, payload: dict[str, Any]) -> dict[str, Any]:
            victim = "c3" if to != "c3" else "c2"
            tags = list(payload["tags"])
            tags[payload["peers"].index(victim)] = earlier[victim][to]
            return {**payload, "tags": tags}

        move = replay
    roles = _clients(vectors, config)
    for name in NAMES:
        honest = roles[name]
        roles[name] = lambda fed, h=honest, n=name: h(
            Proxy(fed, _tamper_tag("secagg/tags/", record(n)))
        )
    roles["server"] = lambda fed: server_round(
        Proxy(fed, _tamper_tag("secagg/tag-inbox/", move)), NAMES, 16, config
    )
    federation = LocalFederation(timeout=30, record_payloads=True)
    with pytest.raises(PartyFailedError, match=r"the consistency tag of 'c[23]' that the server"):
        federation.run(roles)
    assert not _revealed(federation)


@pytest.mark.parametrize("twice", ["c1", "c0"])  # another client's tag twice; its own tag
def test_an_inbox_with_one_sender_twice_or_the_receiver_itself_is_refused(twice: str) -> None:
    vectors = _vectors(NAMES)
    config = SecAggConfig(threshold=3)

    def repeat(to: str, payload: dict[str, Any]) -> dict[str, Any]:
        if to != "c0":
            return payload
        peers, tags = list(payload["peers"]), list(payload["tags"])
        return {**payload, "peers": [*peers, twice], "tags": [*tags, tags[0]]}

    roles = _clients(vectors, config)
    roles["server"] = lambda fed: server_round(
        Proxy(fed, _tamper_tag("secagg/tag-inbox/", repeat)), NAMES, 16, config
    )
    federation = LocalFederation(timeout=30, record_payloads=True)
    with pytest.raises(PartyFailedError, match=r"party 'c0'.*not once each from the other"):
        federation.run(roles)
    assert "c0" not in _revealed(federation)


def test_a_clients_unusable_key_is_refused_at_the_key_step_naming_it() -> None:
    vectors = _vectors(NAMES)
    config = SecAggConfig(threshold=3)
    roles = _clients(vectors, config)
    honest = roles["c3"]
    zero = lambda to, p: {**p, "c_pk": bytes(32)}  # noqa: E731 -- a low-order point
    roles["c3"] = lambda fed: honest(Proxy(fed, _tamper_tag("secagg/keys/", zero)))
    roles["server"] = lambda fed: server_round(fed, NAMES, 16, config)
    with pytest.raises(PartyFailedError, match=r"party 'c3' sent a malformed .* field 'c_pk'"):
        LocalFederation(timeout=30).run(roles)
    with pytest.raises(ValueError, match="drop_after must be"):
        client_round(None, "server", vectors["c0"], config, clients=5, drop_after="signature")  # type: ignore[arg-type]


def _identities(names: list[str]) -> tuple[dict[str, Ed25519PrivateKey], dict[str, bytes]]:
    private = {name: Ed25519PrivateKey.generate() for name in names}
    public = {
        name: key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        for name, key in private.items()
    }
    return private, public


def test_with_identities_a_server_cannot_substitute_keys() -> None:
    vectors = _vectors(NAMES)
    private, public = _identities(NAMES)
    config = SecAggConfig(threshold=3, identities=public)
    roles = _clients(vectors, config, identity=private)
    roles["server"] = lambda fed: server_round(fed, NAMES, 16, config)
    total, _ = LocalFederation(timeout=30).run(roles)["server"]
    np.testing.assert_allclose(total, sum(vectors.values()), atol=1e-6)

    def substitute(to: str, payload: dict[str, Any]) -> dict[str, Any]:
        c_pks = list(payload["c_pks"])  # the server's own share key in place of c1's
        c_pks[1] = (
            X25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        )
        return {**payload, "c_pks": c_pks}

    roles["server"] = lambda fed: server_round(
        Proxy(fed, _tamper_tag("secagg/roster/", substitute)), NAMES, 16, config
    )
    with pytest.raises(PartyFailedError, match=r"relayed for 'c1' in round 0 are not signed"):
        LocalFederation(timeout=30).run(roles)

    roles = _clients(vectors, config)  # no identity key given to the clients
    roles["server"] = lambda fed: server_round(fed, NAMES, 16, config)
    with pytest.raises(PartyFailedError, match="pass its Ed25519 private key as identity="):
        LocalFederation(timeout=30).run(roles)
    other, _ = _identities(["c0"])
    with pytest.raises(ValueError, match="32-byte raw Ed25519"):
        SecAggConfig(threshold=3, identities={"c0": b"short"}).check(5)
    roles = _clients(vectors, config, identity={**private, "c0": other["c0"]})
    roles["server"] = lambda fed: server_round(fed, NAMES, 16, config)
    with pytest.raises(PartyFailedError, match=r"not the one SecAggConfig\.identities lists"):
        LocalFederation(timeout=30).run(roles)
