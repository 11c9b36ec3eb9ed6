"""Secure aggregation that survives dropouts (Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017): the server learns the sum of the surviving
clients' vectors and nothing else about any one of them.

One round, four steps, every message between clients relayed (encrypted) by the server:

1. **keys** -- each client draws two X25519 key pairs (``c`` to encrypt shares to a peer,
   ``s`` to agree pairwise masks) and a 32-byte self-mask seed ``b``, and sends the two public
   keys and a SHA-256 commitment to ``b``; the server sends everyone the roster ``U1`` of
   those who did;
2. **shares** -- each client splits ``b`` and its ``s`` private key by Shamir's scheme (threshold
   ``t`` over the prime field ``2**521 - 1``) and sends each peer its two shares, encrypted and
   authenticated with ChaCha20-Poly1305 under a key agreed from the ``c`` keys; the
   associated data names the round, the sender and the receiver, so a share replayed from
   another round or pair, or altered, is refused naming its sender;
3. **masked input** -- each client in ``U1`` sends ``y = x + PRG(b) + sum_{v > u} PRG(s_uv) -
   sum_{v < u} PRG(s_uv)`` in the ring ``Z_{2**64}`` (``x`` its vector in fixed point,
   :class:`Ring`; ``s_uv`` agreed from the ``s`` keys; PRG: the ChaCha20 keystream); the
   server's ``U2`` are those whose masked input arrived;
4. **unmasking** -- the server sends ``U2``; each client still there reveals, for each peer of
   ``U1``, its share of ``b`` (peer in ``U2``) or of ``s`` (peer dropped before step 3), never
   both. With ``t`` such answers the server rebuilds the survivors' ``b`` (checked against
   their commitments) and the dropped clients' ``s`` (checked against their public keys),
   removes every mask and decodes the sum.

With fewer than ``t`` clients at any step the round aborts: the server tells the clients and
raises :class:`SecAggAbortedError`, having learnt nothing but who answered.

**SecAgg+** (Bell et al., CCS 2020; ``SecAggConfig(neighbours=k)``): each client shares keys
and masks with ``k`` neighbours on a public pseudo-random ring instead of everyone, so its
cost grows with ``k`` (``O(log n)`` suffices in the paper) rather than ``n``; the threshold
then applies within each neighbourhood (every survivor's and dropped client's secret needs
``t`` of its neighbours), and the security holds against fewer colluders per neighbourhood.
A round whose survivors fall apart into separate pieces of the graph aborts (the server
refuses to ask, and each client refuses to reveal): each piece's own sum would be unmasked.

Threat model: an honest-but-curious server and up to ``t - 1`` colluding clients learn
nothing about an honest client's vector beyond the sum (the masks are uniform in the ring; a
single masked vector is uniform: the tests check it). A *malicious* server could claim a
client dropped after receiving its masked input and so learn its vector (Bonawitz et al.'s
consistency round and signatures against this are not implemented), and could drop clients
until one honest vector is isolated in a sum of one; clients should refuse rounds whose
``U2`` is smaller than they accept (``min_survivors``). Sums are exact in the ring; values
are quantised to ``2**-fraction_bits`` and must leave headroom for the sum (checked).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from vfl.federation.base import Federation
from vfl.federation.messages import Message, MessageError, Namespace

__all__ = [
    "PRIME",
    "Ring",
    "SecAggAbortedError",
    "SecAggConfig",
    "client_round",
    "is_connected",
    "neighbourhoods",
    "server_round",
    "shamir_combine",
    "shamir_split",
]

SECAGG = Namespace("secagg")
"""Tags: ``secagg/keys/<round>``, ``secagg/roster/<round>``, ..."""

PRIME = (1 << 521) - 1
"""The Shamir field: a Mersenne prime above every 32-byte secret."""

_SHARE_BYTES = 66  # 521 bits


class SecAggAbortedError(RuntimeError):
    """Too few clients to go on: the round ends with nothing revealed."""


# -- Shamir's secret sharing -------------------------------------------------------------------


def shamir_split(secret: int, xs: Sequence[int], threshold: int) -> dict[int, int]:
    """Shares ``{x: f(x)}`` of ``secret`` for the points ``xs`` (distinct, non-zero), ``f`` a
    random polynomial of degree ``threshold - 1`` with ``f(0) = secret`` over :data:`PRIME`
    (coefficients from the OS)."""
    if not 0 <= secret < PRIME:
        raise ValueError("a secret must be an integer in [0, PRIME)")
    if not 1 <= threshold <= len(xs):
        raise ValueError(f"threshold {threshold} must be between 1 and the {len(xs)} shares")
    if len(set(xs)) != len(xs) or any(not 0 < x < PRIME for x in xs):
        raise ValueError("share points must be distinct and non-zero")
    coefficients = [secret] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    out = {}
    for x in xs:
        acc = 0
        for c in reversed(coefficients):  # Horner
            acc = (acc * x + c) % PRIME
        out[x] = acc
    return out


def _lagrange_at_zero(xs: Sequence[int]) -> list[int]:
    coefficients = []
    for i, xi in enumerate(xs):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if i != j:
                num = num * (-xj) % PRIME
                den = den * (xi - xj) % PRIME
        coefficients.append(num * pow(den, -1, PRIME) % PRIME)
    return coefficients


def shamir_combine(shares: dict[int, int], threshold: int) -> int:
    """The secret from any ``threshold`` of its shares (the first ``threshold`` given)."""
    if len(shares) < threshold:
        raise ValueError(f"{len(shares)} shares cannot rebuild a secret of threshold {threshold}")
    xs = list(shares)[:threshold]
    weights = _lagrange_at_zero(xs)
    return sum(w * shares[x] for w, x in zip(weights, xs, strict=True)) % PRIME


# -- fixed point in the ring -------------------------------------------------------------------


@dataclass(frozen=True)
class Ring:
    """Vectors as ``round(v * 2**fraction_bits)`` in ``Z_{2**64}`` (numpy ``uint64`` wraps);
    a sum of ``clients`` values each below ``bound`` in magnitude must stay below ``2**63``."""

    fraction_bits: int = 24
    bound: float = 2.0**20

    def encode(self, vector: Any, clients: int) -> np.ndarray[Any, Any]:
        values = np.asarray(vector, dtype=np.float64)
        if values.ndim != 1 or not np.all(np.isfinite(values)):
            raise ValueError("secure aggregation sums flat vectors of finite numbers")
        if clients * self.bound * 2.0**self.fraction_bits >= 2.0**63:
            raise ValueError(
                f"{clients} clients x bound {self.bound:g} at 2**-{self.fraction_bits} overflow "
                "the 64-bit ring: lower fraction_bits or bound"
            )
        worst = float(np.max(np.abs(values))) if values.size else 0.0
        if worst > self.bound:
            raise ValueError(
                f"a value of magnitude {worst:.3g} exceeds the ring's bound {self.bound:g}: clip "
                "the update first or raise bound"
            )
        ints = np.rint(values * 2.0**self.fraction_bits).astype(np.int64)
        out: np.ndarray[Any, Any] = ints.view(np.uint64)
        return out

    def decode(self, total: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = total.view(np.int64).astype(np.float64)
        return out * 2.0**-self.fraction_bits


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
    """

    threshold: int
    ring: Ring = Ring()
    min_survivors: int | None = None
    neighbours: int | None = None

    def check(self, clients: int) -> None:
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


def neighbourhoods(names: Sequence[str], k: int | None, round_: int) -> dict[str, set[str]]:
    """Who shares keys and masks with whom: everyone (``k`` None), or SecAgg+'s sparse graph
    (Bell et al. 2020): the clients on a ring in an order drawn from the round and the roster
    (public: every party computes it), each linked to the ``k / 2`` on either side."""
    ordered = sorted(names)
    if k is None or k + 1 >= len(ordered):
        return {n: set(ordered) - {n} for n in ordered}
    roster = "|".join(ordered)

    def rank(name: str) -> bytes:  # a public, library-version-independent shuffle
        return hashlib.sha256(f"vflink/secagg+/{round_}/{roster}/{name}".encode()).digest()

    ring = sorted(ordered, key=rank)
    out: dict[str, set[str]] = {}
    for i, name in enumerate(ring):
        out[name] = {ring[(i + j) % len(ring)] for j in range(-(k // 2), k // 2 + 1) if j}
    return out


def is_connected(nodes: set[str], graph: dict[str, set[str]]) -> bool:
    """Whether ``nodes`` form one connected piece of ``graph`` (SecAgg+: survivors in
    separate pieces would each have their own sum unmasked)."""
    if not nodes:
        return True
    start = next(iter(nodes))
    seen, frontier = {start}, [start]
    while frontier:
        for peer in graph[frontier.pop()] & nodes:
            if peer not in seen:
                seen.add(peer)
                frontier.append(peer)
    return seen == nodes


# -- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Keys(Message):
    KIND = "secure aggregation keys"
    c_pk: bytes
    s_pk: bytes
    commitment: bytes


@dataclass(frozen=True)
class Roster(Message):
    """The server's list of the clients at a step (``abort``: too few, the round ends)."""

    KIND = "secure aggregation roster"
    names: list[str]
    c_pks: list[bytes]
    s_pks: list[bytes]
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
    KIND = "secure aggregation survivors"
    names: list[str]
    abort: bool = False


@dataclass(frozen=True)
class Reveal(Message):
    """A client's shares for unmasking: per peer of ``U1``, of ``b`` or of ``s``."""

    KIND = "unmasking shares"
    peers: list[str]
    kinds: list[str]
    shares: list[bytes]


# -- primitives --------------------------------------------------------------------------------


def _raw(public: X25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _private_raw(private: X25519PrivateKey) -> bytes:
    return private.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )


def _derive(secret: bytes, info: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info.encode()).derive(secret)


def prg(seed: bytes, size: int) -> np.ndarray[Any, Any]:
    """``size`` uniform ``uint64`` from a 32-byte seed (the ChaCha20 keystream)."""
    cipher = Cipher(algorithms.ChaCha20(seed, b"\0" * 16), mode=None).encryptor()
    out: np.ndarray[Any, Any] = np.frombuffer(cipher.update(b"\0" * (8 * size)), np.uint64).copy()
    return out


def _pair_seed(private: X25519PrivateKey, peer_public: bytes, round_: int) -> bytes:
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    return _derive(shared, f"vflink/secagg/mask/{round_}")


def _share_key(private: X25519PrivateKey, peer_public: bytes) -> bytes:
    return _derive(
        private.exchange(X25519PublicKey.from_public_bytes(peer_public)), "vflink/secagg/share"
    )


def _aad(round_: int, sender: str, receiver: str) -> bytes:
    return f"vflink/secagg/{round_}/{sender}->{receiver}".encode()


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
    drop_after: str | None = None,
) -> None:
    """This client's side of one secure aggregation of ``vector`` (``clients``: how many the
    round was opened for, for the ring's headroom). ``drop_after`` (tests) stops after the
    named step: ``"keys"``, ``"shares"`` or ``"masked"``.

    Raises
    ------
    SecAggAbortedError
        The server ended the round (too few clients), or too few survived to unmask.
    MessageError
        A share that does not decrypt (altered, replayed, or from elsewhere), naming its sender.
    """
    me = fed.name
    x = config.ring.encode(vector, clients)
    c_key, s_key = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    seed = secrets.token_bytes(32)
    SECAGG.send(
        fed,
        server,
        "keys",
        Keys(
            c_pk=_raw(c_key.public_key()),
            s_pk=_raw(s_key.public_key()),
            commitment=hashlib.sha256(seed).digest(),
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
    c_pks = dict(zip(names, roster.c_pks, strict=True))
    s_pks = dict(zip(names, roster.s_pks, strict=True))
    points = {name: i + 1 for i, name in enumerate(names)}
    graph = neighbourhoods(names, config.neighbours, round_)
    peers = sorted(graph[me])
    ours = [points[n] for n in [me, *peers]]
    b_shares = shamir_split(_int(seed), ours, config.threshold)
    s_shares = shamir_split(_int(_private_raw(s_key)), ours, config.threshold)
    boxes = []
    for peer in peers:
        nonce = secrets.token_bytes(12)
        plain = _bytes(b_shares[points[peer]]) + _bytes(s_shares[points[peer]])
        aead = ChaCha20Poly1305(_share_key(c_key, c_pks[peer]))
        boxes.append(nonce + aead.encrypt(nonce, plain, _aad(round_, me, peer)))
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
            aead = ChaCha20Poly1305(_share_key(c_key, c_pks[sender]))
            plain = aead.decrypt(box[:12], box[12:], _aad(round_, sender, me))
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
    masked = x + prg(seed, len(x))
    for peer in u1 - {me}:
        mask = prg(_pair_seed(s_key, s_pks[peer], round_), len(x))
        masked = masked + mask if me < peer else masked - mask
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
    alive = set(survivors.names)
    if not alive <= set(names) or me not in alive:
        Survivors.refuse(server, "names", "lists clients outside the roster, or not us")
    if not is_connected(alive, graph):
        raise SecAggAbortedError(
            f"party {me!r}: the survivors of round {round_} fall apart into separate "
            "neighbourhoods, whose sums would each be unmasked; refusing to help"
        )
    reveal_peers, kinds, shares = [], [], []
    for peer in sorted(u1):
        b_share, s_share = held[peer]
        reveal_peers.append(peer)
        if peer in alive:
            kinds.append("b")
            shares.append(_bytes(b_share))
        else:
            kinds.append("s")
            shares.append(_bytes(s_share))
    SECAGG.send(
        fed, server, "reveal", Reveal(peers=reveal_peers, kinds=kinds, shares=shares), round_
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
        Fewer than ``threshold`` clients at some step (the clients are told; nothing is
        revealed).
    """
    config.check(len(clients))
    t = config.threshold

    def gather(peers: Sequence[str], step: str, cls: type[Any]) -> dict[str, Any]:
        got = fed.gather(peers, SECAGG.tag(step, round_), timeout=timeout, min_count=0)
        return {p: cls.from_payload(v, p) for p, v in got.items()}

    def abort(peers: Sequence[str], step: str, count: int, stage: str, message: Message) -> None:
        for peer in peers:
            SECAGG.send(fed, peer, step, message, round_)
        raise SecAggAbortedError(
            f"secure aggregation round {round_}: {count} clients at the {stage} step, fewer "
            f"than the threshold {t}; nothing was revealed"
        )

    keys = gather(clients, "keys", Keys)
    u1 = sorted(keys)
    if len(u1) < t:
        abort(u1, "roster", len(u1), "keys", Roster([], [], [], abort=True))
    roster = Roster(names=u1, c_pks=[keys[n].c_pk for n in u1], s_pks=[keys[n].s_pk for n in u1])
    for name in u1:
        SECAGG.send(fed, name, "roster", roster, round_)
    shared = gather(u1, "shares", Boxes)
    u1b = [n for n in u1 if n in shared]  # those whose shares reached the others
    if len(u1b) < t:
        abort(u1b, "inbox", len(u1b), "shares", Boxes([], [], abort=True))
    graph = neighbourhoods(u1, config.neighbours, round_)
    for receiver in u1b:
        senders, boxes = [], []
        for sender in u1b:
            if sender not in graph[receiver]:
                continue
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
        abort(u2, "survivors", len(u2), "masked input", Survivors([], abort=True))
    if not is_connected(set(u2), graph):
        for name in u2:
            SECAGG.send(fed, name, "survivors", Survivors([], abort=True), round_)
        raise SecAggAbortedError(
            f"secure aggregation round {round_}: the survivors fall apart into separate "
            "neighbourhoods (SecAgg+), whose sums would each be unmasked; nothing was revealed"
        )
    for name in u2:
        SECAGG.send(fed, name, "survivors", Survivors(names=u2), round_)
    reveals = gather(u2, "reveal", Reveal)
    if len(reveals) < t:
        raise SecAggAbortedError(
            f"secure aggregation round {round_}: {len(reveals)} clients answered the unmasking, "
            f"fewer than the threshold {t}; the sum stays masked"
        )
    points = {name: i + 1 for i, name in enumerate(u1)}
    shares: dict[str, dict[int, int]] = {n: {} for n in u1b}
    for helper, reveal in reveals.items():
        for peer, kind, share in zip(reveal.peers, reveal.kinds, reveal.shares, strict=True):
            expected = "b" if peer in u2 else "s"
            if peer not in shares or kind != expected or peer not in graph[helper] | {helper}:
                Reveal.refuse(helper, "kinds", f"reveals {kind!r} of {peer!r}")
            shares[peer][points[helper]] = _int(share)
    needed = [n for n in shares if n in u2 or graph[n] & set(u2)]  # a lone dropout masks nobody
    short = [n for n in needed if len(shares[n]) < t]
    if short:
        raise SecAggAbortedError(
            f"secure aggregation round {round_}: fewer than {t} of the neighbours of {short[:3]} "
            "answered the unmasking; the sum stays masked"
        )
    total = np.zeros(size, dtype=np.uint64)
    for name in u2:
        total = total + masked[name].values
    for name in u2:  # remove the survivors' self-masks
        seed = _bytes(shamir_combine(shares[name], t), 32)
        if hashlib.sha256(seed).digest() != keys[name].commitment:
            raise MessageError(
                f"the shares of {name!r}'s self-mask do not rebuild the seed it committed to: "
                f"a helper among {sorted(reveals)} sent a wrong share"
            )
        total = total - prg(seed, size)
    for dropped in sorted((set(u1b) - set(u2)) & set(needed)):  # remove their pairwise masks
        raw = _bytes(shamir_combine(shares[dropped], t), 32)
        private = X25519PrivateKey.from_private_bytes(raw)
        if _raw(private.public_key()) != keys[dropped].s_pk:
            raise MessageError(
                f"the shares of {dropped!r}'s mask key do not rebuild its public key: a helper "
                f"among {sorted(reveals)} sent a wrong share"
            )
        for name in u2:
            if name not in graph[dropped]:
                continue
            mask = prg(_pair_seed(private, keys[name].s_pk, round_), size)
            total = total - mask if name < dropped else total + mask
    return config.ring.decode(total), u2
