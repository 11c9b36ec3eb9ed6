"""Secure aggregation that survives dropouts (Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017): the server learns the sum of the surviving
clients' vectors and nothing else about any one of them.

One round, five steps, every message between clients relayed (encrypted or authenticated) by
the server:

1. **keys** -- each client draws an X25519 key pair ``s`` (to agree pairwise masks) and a
   32-byte self-mask seed ``b``, and holds a second pair ``c`` (to agree with each peer the
   keys of its shares and its consistency tags: drawn for the round, or kept across the
   rounds of a fit by a :class:`ChannelKey`, as the estimators do, so that each pair's
   agreement is made once per fit); it sends the two public keys and a SHA-256 commitment to
   ``b``; the server sends everyone the roster ``U1`` of those who did;
2. **shares** -- each client splits ``b`` and its ``s`` private key by Shamir's scheme (threshold
   ``t`` over the prime field ``2**521 - 1``) and sends each peer its two shares, encrypted and
   authenticated with ChaCha20-Poly1305 under a key agreed from the ``c`` keys; the
   associated data names the round, the sender and the receiver and carries their ``s``
   keys (fresh in every run of a round; each client first checks that the roster lists its
   own keys as it sent them, so not even a whole roster replayed from an earlier run brings
   the old keys back), so a share replayed from another round, another run of the same round
   or another pair, or altered, is refused naming its sender;
3. **masked input** -- each client in ``U1`` sends ``y = x + PRG(b) + sum_{v > u} PRG(s_uv) -
   sum_{v < u} PRG(s_uv)`` in the ring ``Z_{2**64}`` (``x`` its vector in fixed point,
   :class:`Ring`; ``s_uv`` agreed from the ``s`` keys; PRG: the AES-128-CTR keystream); the
   server's ``U2`` (the paper's ``U3``) are those whose masked input arrived;
4. **consistency** (the paper's ConsistencyCheck; ``SecAggConfig(consistency=True)``, the
   default) -- the server sends ``U2`` and the dropped clients whose mask keys it needs; each
   client checks ``U2`` (at least ``min_survivors``, inside the roster, itself in it) and
   vouches for it: to every other member ``v`` of ``U2`` it sends a tag, keyed BLAKE2s (RFC
   7693's MAC mode) under a key agreed from its and ``v``'s ``c`` keys, over the direction,
   the round, the roster with all its keys, and ``U2``; the server forwards to each client the
   tags addressed to it; each
   checks that with itself at least ``q = max(t, n // 2 + 1)`` (:func:`required_agreement`;
   ``n`` the larger of the clients the round was opened for and the roster) distinct members
   of ``U2`` vouched and that
   *every* tag matches the roster and ``U2`` that *it* was sent. Otherwise it aborts with
   :class:`SecAggConsistencyError`, naming the server and the sender or the count, before
   revealing anything. The paper has each client sign ``U2`` and verify every other
   signature; a tag does the same work between two clients -- only they hold its key, so the
   server can neither forge it nor replay it to another client or the other way -- for two
   MACs of half a microsecond instead of one Ed25519 verification (about 100 us here; HMAC-
   SHA256 took 1.3 us a tag); under SecAgg+ a client also
   agrees a key with each survivor outside its neighbourhood (one X25519 exchange, 30 us).
   What a tag cannot do is convince a third party: the server can no longer filter out a bad
   tag, so a client that sends a wrong one makes its peers abort (as a share that does not
   decrypt already does);
5. **unmasking** -- each client that vouched reveals, for each peer it holds shares of, its
   share of ``b`` (peer in ``U2``) or of ``s`` (peer among the dropped the server asked
   about), never both: asked for both of one peer, it refuses
   (:class:`SecAggConsistencyError`) and reveals nothing. It answers one such request per
   round. With ``t`` answers the server rebuilds the survivors' ``b`` (checked against their
   commitments) and the dropped clients' ``s`` (checked against their public keys), removes
   every mask and decodes the sum.

With fewer than ``t`` clients at any step (``q`` at step 4) the round aborts: the server tells
the clients and raises :class:`SecAggAbortedError`, having learnt nothing but who answered.

**SecAgg+** (Bell et al., CCS 2020; ``SecAggConfig(neighbours=k)``): each client shares keys
and masks with ``k`` neighbours on a public pseudo-random ring instead of everyone, so its
cost grows with ``k`` (``O(log n)`` suffices in the paper) rather than ``n``; the threshold
then applies within each neighbourhood (every survivor's and dropped client's secret needs
``t`` of its neighbours), and the security holds against fewer colluders per neighbourhood.
A round whose survivors fall apart into separate pieces of the graph aborts (the server
refuses to ask, and each client refuses to reveal): each piece's own sum would be unmasked.
The consistency round stays global: each client tags for, and checks a tag from, every other
survivor (32 bytes and two MACs each), which needs its ``c`` agreement with clients outside
its neighbourhood as well (one X25519 exchange each, about 26 us: 85 at 100 clients and
``k = 14``, 2.2 ms of a client's round when ``c`` is drawn every round; with a kept
:class:`ChannelKey`, only in the fit's first round).

Threat model. An honest-but-curious server and up to ``t - 1`` colluding clients learn
nothing about an honest client's vector beyond the sum (the masks are uniform in the ring; a
single masked vector is uniform: the tests check it). Against a server that *deviates* --
above all one that equivocates about the survivors, telling some clients that ``u`` dropped
(so they reveal ``u``'s mask-key shares) and others that ``u`` survived (so they reveal its
self-mask shares), which would unmask ``u``'s own masked input -- the consistency round
guarantees, given authentic keys (see the warning), that every honest client that reveals a
share saw the same roster and the same ``U2`` as every other: an honest client vouches for
one view per round, so two different views would each need ``q`` clients vouching, which
``c`` clients colluding with the server can supply only if ``2 q <= n + c``. Since each
honest client reveals one kind of share per peer, decided by that common ``U2``, the server
gets the self-mask seeds of ``U2`` and the mask keys of clients outside it, never both for
one client, and learns the
sum over ``U2`` (at least ``q`` clients) and nothing more. With no colluding client the
majority floor of ``q`` suffices; against ``c`` colluders choose ``threshold > (n + c) / 2``
(Bonawitz et al. take ``t > 2n/3`` against fewer than ``n/3``). Without the round, the
one-kind-per-peer rule alone already protects a client when ``2 t > n + c``; the round extends
this to every threshold, makes the honest revealers agree on one survivor set (what the
paper's proof needs), and turns an equivocation into an abort that names the server.
Sums are exact in the ring; values are quantised to ``2**-fraction_bits`` and must leave
headroom for the sum (checked).

.. warning::
   The guarantee against a deviating server rests on each client holding its peers' true
   public keys. Bonawitz et al. assume a PKI. By default every key is drawn for the round and
   reaches the other clients in the roster, *relayed by the server*: we then assume that the
   key step is relayed faithfully (the server is honest in step 1, or the roster is checked
   out of band). A server that substitutes keys there can read the shares and forge the
   consistency tags, and the scheme is only secure against an honest-but-curious server. For
   the PKI, give ``SecAggConfig(identities={name: Ed25519 public key})`` -- long-term keys
   distributed authentically out of band, e.g. issued with the federation's mTLS
   certificates -- and each client its ``identity=`` private key: each client then signs its
   round keys with it, and every client checks the roster against ``identities`` (so the
   keys of the shares and of the tags, agreed from those round keys, are authentic too). The
   estimators do not pass identity keys yet.

.. warning::
   A deviating server can still drop honest clients at will: the sum it learns covers at
   least ``q`` clients (``min_survivors`` can ask for more), so ``q - 1`` colluding clients
   together with the server learn the one honest input in a sum of ``q``. Choose ``threshold``
   and ``min_survivors`` for the collusion you fear.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from horizontal.secagg_primitives import (
    OS_DRAWS,
    PRIME,
    ChannelKey,
    Draws,
    PairKeys,
    Ring,
    is_connected,
    neighbourhoods,
    pair_seed,
    prg,
    shamir_combine,
    shamir_split,
)
from vfl.crypto.keys import SecurityWarning
from vfl.federation.base import Federation
from vfl.federation.messages import Message, MessageError, Namespace

__all__ = [
    "PRIME",
    "ChannelKey",
    "Draws",
    "Ring",
    "SecAggAbortedError",
    "SecAggConfig",
    "SecAggConsistencyError",
    "client_round",
    "is_connected",
    "neighbourhoods",
    "required_agreement",
    "server_round",
    "shamir_combine",
    "shamir_split",
]

SECAGG = Namespace("secagg")
"""Tags: ``secagg/keys/<round>``, ``secagg/roster/<round>``, ..."""

_SHARE_BYTES = 66  # 521 bits


class SecAggAbortedError(RuntimeError):
    """Too few clients to go on: the round ends with nothing revealed."""


class SecAggConsistencyError(SecAggAbortedError):
    """A client caught the server out (the consistency round, or a request to reveal both
    shares of one peer): the text names the server, the round and what did not agree; the
    client reveals nothing."""


@dataclass(frozen=True)
class SecAggConfig:
    """What the server and every client agree on for one aggregation.

    Parameters
    ----------
    threshold : int
        Shamir threshold ``t``: the fewest clients that must survive every step (and the
        collusion the scheme resists: ``t - 1`` clients with the server learn nothing).
    ring : Ring
        The fixed-point encoding.
    min_survivors : int, optional
        A client refuses to help unmask a round whose surviving set is smaller (default
        ``threshold``): the server cannot shrink the sum to a few clients.
    neighbours : int, optional
        SecAgg+'s neighbourhood size ``k`` (even); None: every client with every other.
    consistency : bool
        Bonawitz et al.'s consistency round (default True): the clients vouch for the survivor
        set, each with a tag to every other survivor, and reveal shares only once
        :func:`required_agreement` clients vouched for the same set (see the module docstring
        for what it guarantees). False skips it (one round trip of 32-byte tags less) with a
        :class:`~vfl.crypto.keys.SecurityWarning`: a server that equivocates about the
        survivors is then no longer caught.
    identities : mapping of str to bytes, optional
        The PKI: each client's long-term Ed25519 public key (32 raw bytes), distributed
        authentically out of band. With it, each client signs its key advertisement with its
        long-term key (``client_round(identity=...)``) and checks every roster entry against
        this mapping, so the server can neither substitute keys nor read or forge what is sent
        under them (the shares, the consistency tags). A signature covers the round number,
        the name and the keys, not the fit: a server can replay a client's signed keys from
        an earlier run of the same round number, which makes that client a dropout of this
        run (its boxes open nowhere; each client refuses a roster that lists other keys for
        itself). None (default): keys drawn per round and relayed by the server, assumed
        relayed faithfully (the module's warning).
    """

    threshold: int
    ring: Ring = field(default_factory=Ring)
    min_survivors: int | None = None
    neighbours: int | None = None
    consistency: bool = True
    identities: Mapping[str, bytes] | None = field(default=None, hash=False)

    def check(self, clients: int) -> None:
        """Refuse parameters that cannot run over ``clients`` clients; warn when the
        consistency round is off."""
        if not 2 <= self.threshold <= clients:
            raise ValueError(
                f"threshold must be between 2 and the {clients} clients, got {self.threshold}"
            )
        k = self.neighbours
        if k is not None and not (self.threshold <= k + 1 and k >= 2 and k % 2 == 0):
            raise ValueError(
                f"neighbours must be an even number >= 2 with threshold <= neighbours + 1; got "
                f"neighbours={k}, threshold={self.threshold}"
            )
        if self.identities is not None:
            bad = sorted(n for n, key in self.identities.items() if len(key) != 32)
            if bad:
                raise ValueError(
                    f"identities of {bad[:3]} are not 32-byte raw Ed25519 public keys: give "
                    "public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)"
                )
        if not self.consistency:
            warnings.warn(
                "SecAggConfig(consistency=False): without the consistency round a server that "
                "tells clients different survivor sets is not caught; keep it on outside "
                "measurements",
                SecurityWarning,
                stacklevel=3,
            )


def required_agreement(config: SecAggConfig, clients: int) -> int:
    """How many clients (itself included) must vouch for one survivor set before a client
    reveals a share: ``max(threshold, clients // 2 + 1)`` for a round opened for ``clients``
    clients.

    A strict majority of the round means two different survivor sets cannot both collect
    enough clients that each vouch once, whatever the threshold (with ``c`` clients colluding
    with the server, a threshold above ``(clients + c) / 2`` is needed).
    Under the estimators a client learns ``clients`` from the server's task (the clients
    sampled), which a deviating server could understate; the threshold, from the config,
    bounds the count from below whatever it says."""
    return max(config.threshold, clients // 2 + 1)


# -- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Keys(Message):
    """A client's public keys for the round (``sig_pk``, its long-term identity key, and
    ``signature``, that key's signature over the round keys: both empty without identities)."""

    KIND = "secure aggregation keys"
    c_pk: bytes
    s_pk: bytes
    commitment: bytes
    sig_pk: bytes
    signature: bytes


@dataclass(frozen=True)
class Roster(Message):
    """The server's list of the clients at a step (``abort``: too few, the round ends)."""

    KIND = "secure aggregation roster"
    names: list[str]
    c_pks: list[bytes]
    s_pks: list[bytes]
    sig_pks: list[bytes]
    signatures: list[bytes]
    abort: bool = False


@dataclass(frozen=True)
class Boxes(Message):
    """Encrypted shares: to each named peer (client to server), or from each (server to
    client)."""

    KIND = "secure aggregation shares"
    peers: list[str]
    boxes: list[bytes]
    abort: bool = False


@dataclass(frozen=True)
class Masked(Message):
    KIND = "masked input"
    values: np.ndarray


@dataclass(frozen=True)
class Survivors(Message):
    """``names``: the clients whose masked input arrived (``U2``); ``dropped``: those whose
    mask-key shares the server asks for."""

    KIND = "secure aggregation survivors"
    names: list[str]
    dropped: list[str]
    abort: bool = False


@dataclass(frozen=True)
class Tags(Message):
    """Consistency tags (step 4): a client's tag for each other survivor on the round, the
    roster and the survivors it was sent (client to server), or each survivor's tag for this
    client, forwarded (server to client; ``abort``: too few, the round ends)."""

    KIND = "consistency tags"
    peers: list[str]
    tags: list[bytes]
    abort: bool = False


@dataclass(frozen=True)
class Reveal(Message):
    """A client's shares for unmasking: per peer it holds shares of, of ``b`` or of ``s``."""

    KIND = "unmasking shares"
    peers: list[str]
    kinds: list[str]
    shares: list[bytes]


# -- primitives --------------------------------------------------------------------------------


def _raw(public: X25519PublicKey | Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _private_raw(private: X25519PrivateKey) -> bytes:
    return private.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )


def _tags(
    pairs: PairKeys,
    server: str,
    round_: int,
    me: str,
    peers: Sequence[str],
    statement: bytes,
    *,
    sent: bool,
) -> list[bytes]:
    """The consistency tags between ``me`` and each of ``peers`` over the 32-byte
    ``statement``: those ``me`` sends them (``sent``), or those it expects from them. A tag is
    keyed BLAKE2s (32 bytes) under the pair's tag key over the round, the direction and the
    statement (a tag is never valid the other way round, so the server cannot reflect a
    client's own tag back to it)."""
    head, mine = f"vflink/secagg/tag/{int(round_)}/", _named(me)
    tags = []
    made = pairs.tag_keys(peers, lambda peer: _agreed(pairs.tag_key, peer, server))
    for peer, key in zip(peers, made, strict=True):
        names = f"{mine}/{_named(peer)}" if sent else f"{_named(peer)}/{mine}"
        tags.append(hashlib.blake2s((head + names).encode() + statement, key=key).digest())
    return tags


def _aad(round_: int, sender: str, receiver: str, s_pks: Mapping[str, bytes]) -> bytes:
    """A share's associated data: the round, its sender and its receiver, and their ``s``
    keys (drawn for this run of the round: a box from another run does not open, even under a
    :class:`ChannelKey` kept across rounds)."""
    keys = f"/{s_pks[sender].hex()}/{s_pks[receiver].hex()}"
    return _pair_label("share", round_, sender, receiver) + keys.encode()


def _pair_label(kind: str, round_: int, sender: str, receiver: str) -> bytes:
    """What binds a share or a tag to its round and direction: each name after its length, so
    that no pair of names reads as another (``"a"`` to ``"a->a"`` is not ``"a->a"`` to
    ``"a"``)."""
    return f"vflink/secagg/{kind}/{int(round_)}/{_named(sender)}/{_named(receiver)}".encode()


def _named(name: str) -> str:
    return f"{len(name)}:{name}"


def _hexes(keys: Sequence[bytes]) -> list[str]:
    return [key.hex() for key in keys]


def _advert(round_: int, name: str, c_pk: bytes, s_pk: bytes) -> bytes:
    """What a client's long-term key signs in step 1 (with identities): its round keys."""
    return json.dumps(["vflink/secagg/keys", round_, name, c_pk.hex(), s_pk.hex()]).encode()


def _statement(round_: int, roster: Roster, survivors: Sequence[str]) -> bytes:
    """What each client vouches for in the consistency round: the round, the whole roster with
    its keys (fresh each aggregation, so a tag cannot be replayed into another, and two
    clients sent different rosters disagree) and the survivor set."""
    body = [
        "vflink/secagg/consistency",
        round_,
        list(roster.names),
        _hexes(roster.c_pks),
        _hexes(roster.s_pks),
        _hexes(roster.sig_pks),
        sorted(survivors),
    ]
    return hashlib.sha256(json.dumps(body).encode()).digest()


def _usable(probe: X25519PrivateKey, public: bytes) -> bool:
    """Whether ``public`` is 32 bytes that X25519 agrees a secret with (not a low-order
    point, which would make every agreement with it zero)."""
    try:
        probe.exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:
        return False
    return True


def _verifies(public: bytes, signature: bytes, data: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def _int(data: bytes) -> int:
    return int.from_bytes(data, "big")


def _bytes(value: int, length: int = _SHARE_BYTES) -> bytes:
    return value.to_bytes(length, "big")


# -- the client --------------------------------------------------------------------------------


def client_round(
    fed: Federation,
    server: str,
    vector: Any,
    config: SecAggConfig,
    round_: int = 0,
    *,
    clients: int,
    identity: Ed25519PrivateKey | None = None,
    drop_after: str | None = None,
    draws: Draws | None = None,
    channel: ChannelKey | None = None,
) -> None:
    """This client's side of one secure aggregation of ``vector``.

    Parameters
    ----------
    fed, server
        This client's federation and the server's name.
    vector : array-like
        The flat vector to add to the sum.
    config : SecAggConfig
        The round's parameters (the same at every party).
    round_ : int
        The round, in every message tag, share's associated data and consistency tag.
    clients : int
        How many clients the round was opened for: the ring's headroom, and ``n`` in
        :func:`required_agreement`.
    identity : Ed25519PrivateKey, optional
        This client's long-term signing key, required when ``config.identities`` is set (its
        public key must be the one listed there).
    drop_after : str, optional
        Tests: stop after the named step, ``"keys"``, ``"shares"``, ``"masked"`` or
        ``"tags"`` (vouched for the survivor set, then gone before unmasking).
    draws : Draws, optional
        Where its secrets come from: the OS by default; :meth:`Draws.resumable` for a round
        run again from the start in each of several processes (each run then sends the same
        messages, so a runner can send only what is new: :mod:`horizontal.flower`).
    channel : ChannelKey, optional
        This client's ``c`` key kept across the rounds of a fit, with its agreements (each
        pair's exchange made once per fit); None: a ``c`` key drawn for this round.

    Raises
    ------
    SecAggConsistencyError
        The server equivocated or cheated: a forwarded consistency tag that does not match the
        roster and survivor set this client was sent, fewer tags than
        :func:`required_agreement`, a roster whose keys the identities did not sign, a roster
        that lists other keys for this client than it sent (one replayed from another run),
        or a request for both shares of one peer. Nothing is revealed.
    SecAggAbortedError
        The server ended the round (too few clients), or too few survived to unmask.
    MessageError
        A share that does not decrypt (altered, replayed, or from elsewhere), naming its sender.
    """
    if drop_after not in (None, "keys", "shares", "masked", "tags"):
        raise ValueError(
            f"drop_after must be 'keys', 'shares', 'masked' or 'tags', not {drop_after!r}"
        )
    me = fed.name
    x = config.ring.encode(vector, clients)
    draws = draws or OS_DRAWS
    identity = _identity_key(config, me, identity)
    c_key = channel.private if channel is not None else draws.x25519()
    s_key = draws.x25519()
    seed = draws.token(32)
    c_pk, s_pk = _raw(c_key.public_key()), _raw(s_key.public_key())
    SECAGG.send(
        fed,
        server,
        "keys",
        Keys(
            c_pk=c_pk,
            s_pk=s_pk,
            commitment=hashlib.sha256(seed).digest(),
            sig_pk=b"" if identity is None else _raw(identity.public_key()),
            signature=(
                identity.sign(_advert(round_, me, c_pk, s_pk)) if identity is not None else b""
            ),
        ),
        round_,
    )
    if drop_after == "keys":
        return
    roster = SECAGG.recv(fed, server, "roster", Roster, round_)
    if roster.abort:
        raise SecAggAbortedError(f"party {me!r}: the server ended round {round_}: too few clients")
    names = list(roster.names)
    if me not in names or len(set(names)) != len(names):
        Roster.refuse(server, "names", "does not list this client once")
    if len(names) < config.threshold:
        raise SecAggAbortedError(f"party {me!r}: {len(names)} clients, fewer than the threshold")
    signing = identity is not None
    for field_name in ("c_pks", "s_pks") + (("sig_pks", "signatures") if signing else ()):
        if len(getattr(roster, field_name)) != len(names):
            Roster.refuse(server, field_name, f"does not have one entry per name ({len(names)})")
    c_pks = dict(zip(names, roster.c_pks, strict=True))
    s_pks = dict(zip(names, roster.s_pks, strict=True))
    if c_pks[me] != c_pk or s_pks[me] != s_pk:  # binds this run: our s key is fresh
        raise SecAggConsistencyError(
            f"party {me!r}: the roster the server {server!r} sent in round {round_} lists "
            "other keys for this client than it sent (a roster of another run of the round, or "
            "substituted keys); refusing to share"
        )
    if config.identities is not None:
        _check_identities(me, server, roster, config.identities, round_)
    pairs = channel.pairs(c_pks) if channel is not None else PairKeys(c_key, c_pks)
    points = {name: i + 1 for i, name in enumerate(names)}
    graph = neighbourhoods(names, config.neighbours, round_)
    peers = sorted(graph[me])
    ours = [points[n] for n in [me, *peers]]
    b_shares = shamir_split(_int(seed), ours, config.threshold, draws=draws)
    s_shares = shamir_split(_int(_private_raw(s_key)), ours, config.threshold, draws=draws)
    boxes = []
    for peer in peers:
        nonce = draws.token(12)
        plain = _bytes(b_shares[points[peer]]) + _bytes(s_shares[points[peer]])
        aead = ChaCha20Poly1305(_agreed(pairs.share_key, peer, server))
        boxes.append(nonce + aead.encrypt(nonce, plain, _aad(round_, me, peer, s_pks)))
    SECAGG.send(fed, server, "shares", Boxes(peers=peers, boxes=boxes), round_)
    if drop_after == "shares":
        return
    inbox = SECAGG.recv(fed, server, "inbox", Boxes, round_)
    if inbox.abort:
        raise SecAggAbortedError(f"party {me!r}: the server ended round {round_}: too few shares")
    held: dict[str, tuple[int, int]] = {me: (b_shares[points[me]], s_shares[points[me]])}
    for sender, box in zip(inbox.peers, inbox.boxes, strict=True):
        if sender not in graph[me]:
            Boxes.refuse(server, "peers", f"names {sender!r}, not a peer of this round")
        try:
            aead = ChaCha20Poly1305(pairs.share_key(sender))
            plain = aead.decrypt(box[:12], box[12:], _aad(round_, sender, me, s_pks))
        except (InvalidTag, ValueError):
            raise MessageError(
                f"party {me!r}: the shares from {sender!r} do not decrypt for this round and "
                "pair (altered, replayed or misdirected); refusing them"
            ) from None
        held[sender] = (_int(plain[:_SHARE_BYTES]), _int(plain[_SHARE_BYTES:]))
    u1 = set(held)  # the peers whose shares reached us, and us
    if len(u1) < config.threshold:  # (within our neighbourhood under SecAgg+)
        raise SecAggAbortedError(
            f"party {me!r}: shares from {len(u1) - 1} peers reached it in round {round_}, fewer "
            f"than the threshold {config.threshold} needs; refusing to send its input"
        )
    scratch = np.empty(len(x) + 2, dtype=np.uint64)  # one keystream buffer for every mask
    masked = x  # masked in place: x is not needed again
    np.add(masked, prg(seed, len(x), buffer=scratch), out=masked)
    for peer in sorted(u1 - {me}):
        mask = prg(pair_seed(s_key, s_pks[peer], round_), len(x), buffer=scratch)
        (np.add if me < peer else np.subtract)(masked, mask, out=masked)
    SECAGG.send(fed, server, "masked", Masked(values=masked), round_)
    if drop_after == "masked":
        return
    survivors = SECAGG.recv(fed, server, "survivors", Survivors, round_)
    least = config.min_survivors or config.threshold
    if survivors.abort or len(survivors.names) < least:
        raise SecAggAbortedError(
            f"party {me!r}: {len(survivors.names)} clients survived round {round_}, fewer "
            f"than the {least} it helps unmask"
        )
    alive, dropped = set(survivors.names), set(survivors.dropped)
    if not alive <= set(names) or me not in alive or len(alive) != len(survivors.names):
        Survivors.refuse(server, "names", "lists clients outside the roster, twice, or not us")
    if not dropped <= set(names):
        Survivors.refuse(server, "dropped", "lists clients outside the roster")
    if alive & dropped:  # the one rule that keeps b and s of a client apart, checked here
        raise SecAggConsistencyError(
            f"party {me!r}: the server {server!r} asked in round {round_} for both the "
            f"self-mask share and the mask-key share of {sorted(alive & dropped)}, which "
            "together unmask an individual input; refusing to reveal any share"
        )
    if not is_connected(alive, graph):
        raise SecAggAbortedError(
            f"party {me!r}: the survivors of round {round_} fall apart into separate "
            "neighbourhoods, whose sums would each be unmasked; refusing to help"
        )
    if config.consistency:
        statement = _statement(round_, roster, survivors.names)
        others = sorted(alive - {me})
        tags = _tags(pairs, server, round_, me, others, statement, sent=True)
        SECAGG.send(fed, server, "tags", Tags(peers=others, tags=tags), round_)
        if drop_after == "tags":
            return
        tagged = SECAGG.recv(fed, server, "tag-inbox", Tags, round_)
        # q from the round's size as the roster shows it, never below what it was opened for:
        # a server that understates ``clients`` (on Flower its task says it) cannot lower q,
        # and every client that vouches was sent this roster (it is in the statement)
        needed = required_agreement(config, max(clients, len(names)))
        _check_tags(me, server, tagged, alive, pairs, statement, needed, round_)
    reveal_peers, kinds, shares = [], [], []
    for peer in sorted(u1 & (alive | dropped)):
        b_share, s_share = held[peer]
        reveal_peers.append(peer)
        kinds.append("b" if peer in alive else "s")
        shares.append(_bytes(b_share if peer in alive else s_share))
    SECAGG.send(
        fed, server, "reveal", Reveal(peers=reveal_peers, kinds=kinds, shares=shares), round_
    )


def _identity_key(
    config: SecAggConfig, me: str, identity: Ed25519PrivateKey | None
) -> Ed25519PrivateKey | None:
    """The long-term key this client signs its round keys with (with ``config.identities``),
    else none."""
    if config.identities is None:
        return None
    if identity is None:
        raise ValueError(
            f"party {me!r}: SecAggConfig.identities lists the clients' long-term keys, but "
            "this client was given none: pass its Ed25519 private key as identity="
        )
    if config.identities.get(me) != _raw(identity.public_key()):
        raise ValueError(
            f"party {me!r}: its identity key is not the one SecAggConfig.identities lists for "
            "it (missing or different): give the key whose public half was distributed"
        )
    return identity


def _check_identities(
    me: str, server: str, roster: Roster, identities: Mapping[str, bytes], round_: int
) -> None:
    """Every roster entry is a known client whose long-term key signed its round keys (the
    PKI): else the server substituted or invented keys, and this client shares nothing."""
    for name, c_pk, s_pk, sig_pk, signature in zip(
        roster.names, roster.c_pks, roster.s_pks, roster.sig_pks, roster.signatures, strict=True
    ):
        known = identities.get(name)
        if known is None or sig_pk != known:
            what = "has no identity in the config" if known is None else "has another key"
            raise SecAggConsistencyError(
                f"party {me!r}: the roster the server {server!r} sent in round {round_} lists "
                f"{name!r}, who {what}: a substituted or invented client; refusing to share"
            )
        if not _verifies(known, signature, _advert(round_, name, c_pk, s_pk)):
            raise SecAggConsistencyError(
                f"party {me!r}: the keys the server {server!r} relayed for {name!r} in round "
                f"{round_} are not signed by {name!r}'s identity key (substituted or altered "
                "on the way); refusing to share"
            )


def _agreed(make: Callable[[str], bytes], peer: str, server: str) -> bytes:
    """A key agreed with ``peer`` (``make``: a :class:`PairKeys` method); a roster key that
    X25519 does not accept is refused naming the server that relayed it (the server refuses
    such keys from a client at step 1, so only a server that changed the roster sends one)."""
    try:
        return make(peer)
    except ValueError:  # not a point X25519 accepts
        Roster.refuse(server, "c_pks", f"holds no valid X25519 key for {peer!r}")


def _check_tags(
    me: str,
    server: str,
    inbox: Tags,
    alive: set[str],
    pairs: PairKeys,
    statement: bytes,
    needed: int,
    round_: int,
) -> None:
    """The consistency check: tags from distinct other survivors, every one on the roster and
    survivor set this client was sent, enough that with this client ``needed`` agree."""
    if inbox.abort:
        raise SecAggAbortedError(
            f"party {me!r}: the server ended round {round_}: too few vouched for the survivors"
        )
    senders = list(inbox.peers)
    if len(senders) != len(inbox.tags):
        Tags.refuse(server, "tags", "does not have one per peer")
    strangers = sorted(set(senders) - (alive - {me}))
    if strangers or len(set(senders)) != len(senders):
        raise SecAggConsistencyError(
            f"party {me!r}: the server {server!r} forwarded in round {round_} consistency tags "
            f"from {strangers[:3] or 'one client twice'}, not once each from the other "
            "survivors it was sent; refusing to reveal any share"
        )
    expected = _tags(pairs, server, round_, me, senders, statement, sent=False)
    for sender, tag, wanted in zip(senders, inbox.tags, expected, strict=True):
        if not hmac.compare_digest(wanted, tag):
            raise SecAggConsistencyError(
                f"party {me!r}: the consistency tag of {sender!r} that the server {server!r} "
                f"forwarded in round {round_} does not match the roster and survivor set "
                f"{me!r} was sent: the server showed clients different survivors or rosters "
                f"(equivocation), or the tag was forged or altered (by the server, or sent so "
                f"by {sender!r}); refusing to reveal any share"
            )
    if len(senders) + 1 < needed:
        raise SecAggConsistencyError(
            f"party {me!r}: only {len(senders) + 1} clients (itself included) vouched for the "
            f"survivor set the server {server!r} sent in round {round_}, fewer than the "
            f"{needed} needed before any share is revealed (the server may be showing others "
            "a different set); refusing"
        )


# -- the server --------------------------------------------------------------------------------


def server_round(
    fed: Federation,
    clients: Sequence[str],
    size: int,
    config: SecAggConfig,
    round_: int = 0,
    *,
    timeout: float | None = None,
) -> tuple[np.ndarray[Any, Any], list[str]]:
    """The server's side: the sum of the surviving clients' vectors (decoded floats, length
    ``size``) and the survivors' names.

    Raises
    ------
    SecAggAbortedError
        Fewer than ``threshold`` clients at some step, or fewer than
        :func:`required_agreement` vouching for the survivors (the clients are told; nothing
        is revealed).
    MessageError
        A client's message is malformed or dishonest: keys its identity did not sign,
        consistency tags not one for each other survivor, a share of the wrong kind.
    """
    config.check(len(clients))
    t = config.threshold

    def gather(peers: Sequence[str], step: str, cls: type[Any]) -> dict[str, Any]:
        got = fed.gather(peers, SECAGG.tag(step, round_), timeout=timeout, min_count=0)
        return {p: cls.from_payload(v, p) for p, v in got.items()}

    def abort(
        peers: Sequence[str], step: str, count: int, stage: str, message: Message, least: str = ""
    ) -> None:
        for peer in peers:
            SECAGG.send(fed, peer, step, message, round_)
        raise SecAggAbortedError(
            f"secure aggregation round {round_}: {count} clients at the {stage} step, fewer "
            f"than {least or f'the threshold {t}'}; nothing was revealed"
        )

    keys = gather(clients, "keys", Keys)
    probe = X25519PrivateKey.generate()  # a client's unusable key is refused here, by name
    for name, advert in keys.items():
        for field_name in ("c_pk", "s_pk"):
            if not _usable(probe, getattr(advert, field_name)):
                Keys.refuse(name, field_name, "is not an X25519 public key that agrees a secret")
    u1 = sorted(keys)
    if len(u1) < t:
        abort(u1, "roster", len(u1), "keys", Roster([], [], [], [], [], abort=True))
    if config.identities is not None:
        for name in u1:
            advert = _advert(round_, name, keys[name].c_pk, keys[name].s_pk)
            known = config.identities.get(name, b"")
            if keys[name].sig_pk != known or not _verifies(known, keys[name].signature, advert):
                Keys.refuse(name, "signature", "is not by the identity the config lists for it")
    roster = Roster(
        names=u1,
        c_pks=[keys[n].c_pk for n in u1],
        s_pks=[keys[n].s_pk for n in u1],
        sig_pks=[keys[n].sig_pk for n in u1],
        signatures=[keys[n].signature for n in u1],
    )
    SECAGG.broadcast(fed, "roster", roster, round_, to=u1)  # encoded once, sent to each
    shared = gather(u1, "shares", Boxes)
    u1b = [n for n in u1 if n in shared]  # those whose shares reached the others
    if len(u1b) < t:
        abort(u1b, "inbox", len(u1b), "shares", Boxes([], [], abort=True))
    graph = neighbourhoods(u1, config.neighbours, round_)
    for receiver in u1b:
        senders, boxes = [], []
        for sender in sorted(graph[receiver].intersection(shared)):  # u1b's order
            message = shared[sender]
            try:
                boxes.append(message.boxes[message.peers.index(receiver)])
            except ValueError:
                Boxes.refuse(sender, "peers", f"has no share for {receiver!r}")
            senders.append(sender)
        SECAGG.send(fed, receiver, "inbox", Boxes(peers=senders, boxes=boxes), round_)
    masked = gather(u1b, "masked", Masked)
    u2 = [n for n in u1b if n in masked]
    for name, message in masked.items():
        values = message.values
        if values.shape != (size,) or values.dtype != np.uint64:
            Masked.refuse(name, "values", f"is {values.dtype}{values.shape}, not uint64 ({size},)")
    if len(u2) < t:
        abort(u2, "survivors", len(u2), "masked input", Survivors([], [], abort=True))
    if not is_connected(set(u2), graph):
        for name in u2:
            SECAGG.send(fed, name, "survivors", Survivors([], [], abort=True), round_)
        raise SecAggAbortedError(
            f"secure aggregation round {round_}: the survivors fall apart into separate "
            "neighbourhoods (SecAgg+), whose sums would each be unmasked; nothing was revealed"
        )
    alive = set(u2)
    needed = [n for n in u1b if n in alive or graph[n] & alive]  # a lone dropout masks nobody
    dropped = [n for n in needed if n not in u2]
    SECAGG.broadcast(fed, "survivors", Survivors(names=u2, dropped=dropped), round_, to=u2)
    helpers = u2
    if config.consistency:
        helpers = _consistency(fed, gather, abort, config, u2, len(clients), round_)
    reveals = gather(helpers, "reveal", Reveal)
    if len(reveals) < t:
        raise SecAggAbortedError(
            f"secure aggregation round {round_}: {len(reveals)} clients answered the unmasking, "
            f"fewer than the threshold {t}; the sum stays masked"
        )
    points = {name: i + 1 for i, name in enumerate(u1)}
    shares: dict[str, dict[int, int]] = {n: {} for n in needed}
    for helper, reveal in reveals.items():
        for peer, kind, share in zip(reveal.peers, reveal.kinds, reveal.shares, strict=True):
            expected = "b" if peer in u2 else "s"
            if peer not in shares or kind != expected or peer not in graph[helper] | {helper}:
                Reveal.refuse(helper, "kinds", f"reveals {kind!r} of {peer!r}")
            shares[peer][points[helper]] = _int(share)
    short = [n for n in needed if len(shares[n]) < t]
    if short:
        raise SecAggAbortedError(
            f"secure aggregation round {round_}: fewer than {t} of the neighbours of {short[:3]} "
            "answered the unmasking; the sum stays masked"
        )
    total = np.zeros(size, dtype=np.uint64)
    for name in u2:
        np.add(total, masked[name].values, out=total)
    scratch = np.empty(size + 2, dtype=np.uint64)  # one keystream buffer for every mask
    for name in u2:  # remove the survivors' self-masks
        seed = _bytes(shamir_combine(shares[name], t), 32)
        if hashlib.sha256(seed).digest() != keys[name].commitment:
            raise MessageError(
                f"the shares of {name!r}'s self-mask do not rebuild the seed it committed to: "
                f"a helper among {sorted(reveals)} sent a wrong share"
            )
        np.subtract(total, prg(seed, size, buffer=scratch), out=total)
    for name in dropped:  # remove their pairwise masks
        raw = _bytes(shamir_combine(shares[name], t), 32)
        private = X25519PrivateKey.from_private_bytes(raw)
        if _raw(private.public_key()) != keys[name].s_pk:
            raise MessageError(
                f"the shares of {name!r}'s mask key do not rebuild its public key: a helper "
                f"among {sorted(reveals)} sent a wrong share"
            )
        for peer in u2:
            if peer not in graph[name]:
                continue
            mask = prg(pair_seed(private, keys[peer].s_pk, round_), size, buffer=scratch)
            (np.subtract if peer < name else np.add)(total, mask, out=total)
    return config.ring.decode(total), u2


def _consistency(
    fed: Federation,
    gather: Callable[[Sequence[str], str, type[Any]], dict[str, Any]],
    abort: Callable[..., None],
    config: SecAggConfig,
    survivors: list[str],
    clients: int,
    round_: int,
) -> list[str]:
    """The server's consistency round: collect each survivor's tags (one for every other
    survivor, 32 bytes each: a client that sends another shape is refused by name) and forward
    to each survivor that sent them the tags addressed to it; the senders, who will unmask.
    The server cannot check a tag (only the pair it is between holds its key)."""
    tagged: dict[str, Tags] = gather(survivors, "tags", Tags)
    by_sender: dict[str, dict[str, bytes]] = {}
    for name, message in tagged.items():
        others = sorted(set(survivors) - {name})
        if sorted(message.peers) != others or len(message.tags) != len(others):
            Tags.refuse(name, "peers", "does not hold one tag for each other survivor")
        if any(len(tag) != 32 for tag in message.tags):
            Tags.refuse(name, "tags", "holds a tag that is not 32 bytes")
        by_sender[name] = dict(zip(message.peers, message.tags, strict=True))
    senders = [n for n in survivors if n in tagged]
    needed = required_agreement(config, clients)
    if len(senders) < needed:
        least = f"the {needed} needed to vouch for the survivors"
        abort(senders, "tag-inbox", len(senders), "consistency", Tags([], [], abort=True), least)
    for receiver in senders:
        peers = [n for n in senders if n != receiver]
        tags = [by_sender[n][receiver] for n in peers]
        SECAGG.send(fed, receiver, "tag-inbox", Tags(peers=peers, tags=tags), round_)
    return senders
