"""The building blocks of secure aggregation (:mod:`horizontal.secagg`), apart from its
messages and parties: Shamir's sharing over ``2**521 - 1``, the fixed-point ring, the draws of
a round's secrets and the masks' PRG, SecAgg+'s neighbourhood graph, and each pair's keys."""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "KEPT_AGREEMENTS",
    "OS_DRAWS",
    "PRIME",
    "ChannelKey",
    "Draws",
    "PairKeys",
    "Ring",
    "is_connected",
    "neighbourhoods",
    "pair_seed",
    "prg",
    "shamir_combine",
    "shamir_split",
]

PRIME = (1 << 521) - 1
"""The Shamir field: a Mersenne prime above every 32-byte secret."""


# -- keys and the masks' PRG ---------------------------------------------------------------------


def _derive(secret: bytes, info: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info.encode()).derive(secret)


_PRG_NONCE = b"\0" * 16
_zeros = b""


def _zero_bytes(count: int) -> memoryview:
    """``count`` zero bytes, the keystream's plaintext, from one shared buffer (grown as
    needed; bytes are immutable, so threads can share it)."""
    global _zeros
    if len(_zeros) < count:
        _zeros = bytes(max(count, 2 * len(_zeros)))
    return memoryview(_zeros)[:count]


def prg(
    seed: bytes, size: int, *, buffer: np.ndarray[Any, Any] | None = None
) -> np.ndarray[Any, Any]:
    """``size`` uniform ``uint64`` from a 32-byte seed: the AES-128-CTR keystream (AES-NI)
    keyed by the seed's first 16 bytes from the counter block its last 16 bytes give, written
    straight into the array (into ``buffer``, at least ``size + 2`` long, when given: the
    masks of a round reuse one).

    Every seed keys one stream (a fresh self-mask seed, or a pairwise seed derived per round),
    so no counter block repeats under a key. The starting block comes from the seed, not a
    constant, so that the streams of a deployment (clients x pairs x rounds) do not all begin
    with the encryption of one known block, which would invite a multi-target search for
    128-bit keys. 128-bit keys match the rest of the round (the pairwise seeds come from
    X25519, about 128-bit secure), and AES-128 streams a quarter faster than AES-256 (9.8
    against 7.9 GB/s here: 0.3 ms of a SecAgg+ client's round at 100,000 parameters)."""
    room = size + 2  # update_into wants a block's worth of spare room after the output
    if buffer is None or len(buffer) < room or buffer.dtype != np.uint64:
        buffer = np.empty(room, dtype=np.uint64)
    if len(seed) != 32:
        raise ValueError(f"a mask seed is 32 bytes, got {len(seed)}")
    stream = Cipher(algorithms.AES(seed[:16]), modes.CTR(seed[16:])).encryptor()
    stream.update_into(_zero_bytes(8 * size), buffer.view(np.uint8).data)
    out: np.ndarray[Any, Any] = buffer[:size]
    return out


def pair_seed(private: X25519PrivateKey, peer_public: bytes, round_: int) -> bytes:
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    return _derive(shared, f"vflink/secagg/mask/{round_}")


_TAG_LABEL = "vflink/secagg/consistency"

KEPT_AGREEMENTS = 4096
"""The most peer keys whose agreements a :class:`ChannelKey` keeps (about 2 MiB)."""


class ChannelKey:
    """A client's ``c`` key pair kept across the rounds of one fit, with its agreements: each
    pair's X25519 exchange (and the keys derived from it) is made once per fit instead of once
    per round, while the mask key ``s`` and the self-mask seed ``b`` stay fresh every round.

    The estimators keep one per client (``client_round(channel=...)``); a round without one
    draws its ``c`` key fresh. A kept ``c`` never leaves its client (only ``s`` is ever
    rebuilt, for a dropped client), and everything sent under a pair's keys is bound to one
    run of one round: a share's associated data carries the sender's and receiver's fresh
    ``s`` keys, a tag's statement the whole roster, and a client refuses a roster that does
    not list its own keys as it sent them (:func:`horizontal.secagg.client_round`), so a box
    or tag from another round, or from an earlier run of the same round number -- even with
    that run's whole roster replayed -- does not verify. The cost: a client whose
    ``c`` key is stolen later exposes the shares it held in the fit's earlier rounds, as if
    it had colluded then (below the threshold, nothing). The agreements with every peer key
    met are kept, so a peer not sampled for some rounds is not agreed anew (a peer whose key
    changed is; beyond :data:`KEPT_AGREEMENTS` keys the longest unused go). On Flower each
    message is handled by a new process that runs the round again from its start
    (:mod:`horizontal.flower`), so there ``c`` is drawn for the round."""

    def __init__(self, private: X25519PrivateKey | None = None) -> None:
        self.private = private if private is not None else X25519PrivateKey.generate()
        self.exchanges = 0
        """The X25519 agreements made so far: one per peer key met, whatever the rounds (a
        key met again after its agreement was dropped, beyond :data:`KEPT_AGREEMENTS`,
        counts again)."""
        self._kept: dict[bytes, dict[str, bytes]] = {}

    def pairs(self, publics: Mapping[str, bytes]) -> PairKeys:
        """This round's agreements with ``publics`` (name: ``c`` public key), reusing those
        made before; what this round agrees is kept for the next."""
        kept = self._kept
        for public in publics.values():  # this round's peers count as used last
            if public in kept:
                kept[public] = kept.pop(public)
        while len(kept) > max(KEPT_AGREEMENTS, 2 * len(publics)):
            del kept[next(iter(kept))]
        return PairKeys(self.private, publics, kept, channel=self)


class PairKeys:
    """A client's agreements on its ``c`` key with each peer's: one X25519 exchange per peer
    (kept across rounds by a :class:`ChannelKey`), from which both the key of the shares it
    sends and receives (ChaCha20-Poly1305) and the key of its consistency tags with that peer
    (keyed BLAKE2s) derive, each under its own label."""

    def __init__(
        self,
        private: X25519PrivateKey,
        publics: Mapping[str, bytes],
        kept: dict[bytes, dict[str, bytes]] | None = None,
        *,
        channel: ChannelKey | None = None,
    ) -> None:
        self._private, self._publics, self._channel = private, publics, channel
        self.agreed: dict[bytes, dict[str, bytes]] = {} if kept is None else kept
        """Per peer public key: the secret agreed (under ``""``) and the keys derived (a
        :class:`ChannelKey`'s store, shared with its other rounds)."""

    def share_key(self, peer: str) -> bytes:
        return self._key(peer, "vflink/secagg/share")

    def tag_key(self, peer: str) -> bytes:
        return self._key(peer, _TAG_LABEL)

    def tag_keys(self, peers: Sequence[str], make: Callable[[str], bytes]) -> list[bytes]:
        """The tag keys with ``peers``, in order: those already derived looked up at once,
        the others made by ``make`` (:meth:`tag_key`, with the caller's refusal of a key
        X25519 does not accept)."""
        label, publics, agreed = _TAG_LABEL, self._publics, self.agreed
        keys = []
        for peer in peers:
            known = agreed.get(publics[peer])
            key = known.get(label) if known is not None else None
            keys.append(key if key is not None else make(peer))
        return keys

    def _key(self, peer: str, label: str) -> bytes:
        """The key under ``label`` agreed with ``peer``, derived once (a share key serves the
        shares sent and those received; a tag key the tag made and the one checked)."""
        public = self._publics[peer]
        keys = self.agreed.get(public)
        if keys is None:
            agreed = self._private.exchange(X25519PublicKey.from_public_bytes(public))
            keys = self.agreed[public] = {"": agreed}
            if self._channel is not None:
                self._channel.exchanges += 1
        key = keys.get(label)
        if key is None:
            key = keys[label] = _derive(keys[""], label)
        return key


# -- where a client's secrets come from ---------------------------------------------------------


class Draws:
    """The source of a client round's secrets (its key pairs, self-mask seed, share
    polynomials, nonces): the OS (``secrets``) by default. :meth:`resumable` gives a stream
    that a client running its round as several processes (on Flower, a process per message)
    draws again identically in each: the AES-256-CTR keystream under a 32-byte key drawn from
    the OS once per round and kept only in that client's own state -- what a CSPRNG is, its
    seed never fixed, never sent."""

    def __init__(self, key: bytes | None = None) -> None:
        if key is not None and len(key) != 32:
            raise ValueError("a resumable draw stream is keyed by 32 bytes")
        self._stream = (
            None if key is None else Cipher(algorithms.AES(key), modes.CTR(_PRG_NONCE)).encryptor()
        )

    @classmethod
    def resumable(cls, key: bytes) -> Draws:
        """The stream keyed by ``key`` (draw it with ``secrets.token_bytes(32)``)."""
        return cls(key)

    def token(self, n: int) -> bytes:
        """``n`` uniform bytes."""
        if self._stream is None:
            return secrets.token_bytes(n)
        return self._stream.update(bytes(n))

    def below(self, bound: int) -> int:
        """A uniform integer in ``[0, bound)`` (from 128 bits more than ``bound`` needs: a
        bias below 2^-128)."""
        if self._stream is None:
            return secrets.randbelow(bound)
        return int.from_bytes(self.token((bound.bit_length() + 7) // 8 + 16), "big") % bound

    def x25519(self) -> X25519PrivateKey:
        return X25519PrivateKey.from_private_bytes(self.token(32))


OS_DRAWS = Draws()
"""Draws from the OS (``secrets``): every round's default."""


# -- Shamir's secret sharing -------------------------------------------------------------------


def shamir_split(
    secret: int, xs: Sequence[int], threshold: int, *, draws: Draws | None = None
) -> dict[int, int]:
    """Shares ``{x: f(x)}`` of ``secret`` for the points ``xs`` (distinct, non-zero), ``f`` a
    random polynomial of degree ``threshold - 1`` with ``f(0) = secret`` over :data:`PRIME`
    (coefficients from ``draws``: the OS by default)."""
    if not 0 <= secret < PRIME:
        raise ValueError("a secret must be an integer in [0, PRIME)")
    if not 1 <= threshold <= len(xs):
        raise ValueError(f"threshold {threshold} must be between 1 and the {len(xs)} shares")
    if len(set(xs)) != len(xs) or any(not 0 < x < PRIME for x in xs):
        raise ValueError("share points must be distinct and non-zero")
    draws = draws or OS_DRAWS
    coefficients = [secret] + [draws.below(PRIME) for _ in range(threshold - 1)]
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
        if values.ndim != 1:
            raise ValueError("secure aggregation sums flat vectors of finite numbers")
        if clients * self.bound * 2.0**self.fraction_bits >= 2.0**63:
            raise ValueError(
                f"{clients} clients x bound {self.bound:g} at 2**-{self.fraction_bits} overflow "
                "the 64-bit ring: lower fraction_bits or bound"
            )
        # one pass for both checks: NaN propagates through max, inf exceeds any bound
        worst = max(float(values.max()), -float(values.min())) if values.size else 0.0
        if not np.isfinite(worst):
            raise ValueError("secure aggregation sums flat vectors of finite numbers")
        if worst > self.bound:
            raise ValueError(
                f"a value of magnitude {worst:.3g} exceeds the ring's bound {self.bound:g}: clip "
                "the update first or raise bound"
            )
        scaled = values * 2.0**self.fraction_bits
        out: np.ndarray[Any, Any] = np.rint(scaled, out=scaled).astype(np.int64).view(np.uint64)
        return out

    def decode(self, total: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = total.view(np.int64).astype(np.float64)
        return out * 2.0**-self.fraction_bits


# -- SecAgg+'s graph ---------------------------------------------------------------------------


def neighbourhoods(names: Sequence[str], k: int | None, round_: int) -> dict[str, frozenset[str]]:
    """Who shares keys and masks with whom: everyone (``k`` None), or SecAgg+'s sparse graph
    (Bell et al. 2020): the clients on a ring in an order drawn from the round and the roster
    (public: every party computes it), each linked to the ``k / 2`` on either side.

    A pure function of public values, kept for the last few rosters (the parties of a
    simulation, which share a process, then compute each graph once)."""
    return dict(_graph(tuple(sorted(names)), k, round_))


@functools.lru_cache(maxsize=8)
def _graph(ordered: tuple[str, ...], k: int | None, round_: int) -> dict[str, frozenset[str]]:
    if k is None or k + 1 >= len(ordered):
        everyone = frozenset(ordered)
        return {n: everyone - {n} for n in ordered}
    roster = "|".join(ordered)

    def rank(name: str) -> bytes:  # a public, library-version-independent shuffle
        return hashlib.sha256(f"vflink/secagg+/{round_}/{roster}/{name}".encode()).digest()

    ring = sorted(ordered, key=rank)
    out: dict[str, frozenset[str]] = {}
    for i, name in enumerate(ring):
        out[name] = frozenset(ring[(i + j) % len(ring)] for j in range(-(k // 2), k // 2 + 1) if j)
    return out


def is_connected(nodes: AbstractSet[str], graph: Mapping[str, AbstractSet[str]]) -> bool:
    """Whether ``nodes`` form one connected piece of ``graph`` (SecAgg+: survivors in
    separate pieces would each have their own sum unmasked)."""
    if not nodes:
        return True
    seen = frontier = {next(iter(nodes))}
    while frontier:  # breadth first, a layer at a time (set operations, no loop per edge)
        frontier = set().union(*(graph[node] for node in frontier)).intersection(nodes) - seen
        seen = seen | frontier
    return seen == set(nodes)
