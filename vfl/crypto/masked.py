"""The one masked decryption: a party has a key holder decrypt values it must not see.

Every protocol in vflink that asks another party to decrypt uses this pair:

* the requester (:func:`request_decryption`) adds to every value a secret mask ``kappa >= 40``
  bits longer than the value, packs many values per ciphertext, re-randomises, and sends a
  :class:`DecryptionRequest` (the packed ciphertexts and their public
  :class:`~vfl.crypto.packing.PackingLayout`);
* the key holder (:func:`serve_decryption`) decrypts the packed ciphertexts and answers with the
  masked slots (:class:`DecryptedSlots`); the requester subtracts its masks.

The key holder sees each value hidden by a mask whose statistical distance from uniform is
below ``2**-kappa`` and decrypts ``count / slots`` ciphertexts instead of ``count``. Values come
in two shapes: a vector of encrypted fixed-point numbers (:func:`pack_masked` packs them by
Horner's rule on ciphertexts) or ciphertexts whose plaintexts are already packed signed slots
(:func:`mask_slots`: the vertical linear models' gradient shares, the transfer target's
gradients, the split network's weight gradient; rows of a
:class:`~vfl.crypto.packing.RowPacking` take ``packing.masked_layout(rows)``).

Where the masked slots are themselves a share (the secret-shared protocols: the holder keeps
``value + mask``, the requester ``-mask``), the holder decrypts locally
(:meth:`~vfl.crypto.PaillierPrivateKey.decrypt_packed`) or, holding no key, forwards the
ciphertexts to the key holder as they are (:func:`request_slots`).

The key holder checks every request against what it knows of the step independently (the
number of ciphertexts and values, the packing layout). That bounds each request, not its
contents: a requester that deviates from the protocol can put any ciphertexts under the key in
a request of the right shape -- up to that many whole plaintexts, e.g. rows of another party's
encrypted features, per request; malicious parties are out of scope.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from gmpy2 import mpz

from vfl.crypto import fixedpoint
from vfl.crypto.kernels import horner_pack
from vfl.crypto.keys import PaillierPrivateKey
from vfl.crypto.packing import MIN_KAPPA, PackingLayout, PackingMasks
from vfl.crypto.rerandomize import rerandomize
from vfl.crypto.vector import EncryptedVector
from vfl.federation.messages import Message, Namespace
from vfl.federation.wire import CiphertextBlock

if TYPE_CHECKING:
    from vfl.federation.base import Federation

__all__ = [
    "DecryptedSlots",
    "DecryptionRequest",
    "add_slot_masks",
    "decrypt_masked",
    "draw_slot_masks",
    "mask_slots",
    "pack_masked",
    "request_decryption",
    "request_slots",
    "serve_decryption",
    "zero_sum_masks",
]

ZERO_SUM = Namespace("zero-sum")
"""Tags of :func:`zero_sum_masks`' seeds (``zero-sum/seed``)."""


@dataclass(frozen=True)
class DecryptionRequest(Message):
    """Packed, masked ciphertexts and their public layout (``PackingLayout.to_dict()``)."""

    KIND = "decryption request"
    data: CiphertextBlock
    layout: dict[str, int]


@dataclass(frozen=True)
class DecryptedSlots(Message):
    """The key holder's answer: the masked slot values, in order."""

    KIND = "decryption answer"
    slots: list[int]


@dataclass(frozen=True)
class PairSeed(Message):
    """A 32-byte seed from the OS, sent by the earlier party of a pair to the later one."""

    KIND = "mask seed"
    seed: bytes


def zero_sum_masks(
    fed: Federation,
    parties: list[str],
    count: int,
    modulus: int,
    *,
    tags: Namespace = ZERO_SUM,
) -> list[int]:
    """``count`` masks modulo ``modulus`` for this party such that, slot by slot, the masks of
    all of ``parties`` sum to zero; ``fed.name`` must be one of them, and every one of them
    calls this with the same arguments.

    Each pair agrees on a 32-byte seed (drawn from the OS by the earlier party of the pair and
    sent directly to the later one, over the federation's mutually authenticated channel); the
    seed's ChaCha20 keystream gives ``count`` values, each from 128 bits more than the
    modulus, so uniform modulo it to within ``2**-128``; the earlier party adds them, the
    later one subtracts them (the pairwise masks of Bonawitz et al.'s secure aggregation).

    Whoever sees the masked values of a proper subset of the parties sees them under at least
    one pair's mask it does not know: uniform. Only the sum over all of them is in the clear.
    One party alone gets zeros."""
    me = fed.name
    if me not in parties:
        raise ValueError(f"party {me!r} is not among the parties of the masks {parties}")
    mine = parties.index(me)
    seeds: dict[str, tuple[bytes, int]] = {}
    for peer in parties[mine + 1 :]:
        seed = secrets.token_bytes(32)
        tags.send(fed, peer, "seed", PairSeed(seed=seed))
        seeds[peer] = (seed, 1)
    for peer in parties[:mine]:
        seed = tags.recv(fed, peer, "seed", PairSeed).seed
        if not isinstance(seed, bytes) or len(seed) != 32:
            PairSeed.refuse(peer, "seed", f"holds {len(seed)} bytes, 32 expected")
        seeds[peer] = (seed, -1)
    width = (modulus.bit_length() + 128 + 7) // 8
    out = [0] * count
    for seed, sign in seeds.values():
        stream = _keystream(seed, width * count)
        for j in range(count):
            out[j] += sign * int.from_bytes(stream[j * width : (j + 1) * width], "big")
    return [v % modulus for v in out]


def _keystream(seed: bytes, size: int) -> bytes:
    """``size`` bytes of the ChaCha20 keystream of a 32-byte ``seed`` (zero nonce: each seed
    is used once)."""
    encryptor = Cipher(algorithms.ChaCha20(seed, b"\0" * 16), mode=None).encryptor()
    return encryptor.update(b"\0" * size)


def pack_masked(
    vector: EncryptedVector, *, bound: float, kappa: int = MIN_KAPPA
) -> tuple[EncryptedVector, PackingMasks]:
    """Mask and pack an encrypted 1-d vector whose values satisfy ``|v| <= bound``.

    Returns
    -------
    (EncryptedVector, PackingMasks)
        The packed ciphertexts (send them, with ``masks.layout.to_dict()``) and the masks to keep.
    """
    if kappa < MIN_KAPPA:
        raise ValueError(
            f"kappa must be at least {MIN_KAPPA} bits for statistical hiding, got {kappa}"
        )
    if not bound > 0 or not math.isfinite(bound):
        raise ValueError(f"bound must be a positive finite number, got {bound!r}")
    pk = vector.public_key
    value_bits = max(1, math.ceil(math.log2(bound) - vector.exponent) + 1) + 1
    slot_bits = value_bits + kappa + 1
    slots = (pk.n_length - 2) // slot_bits
    if slots < 1:
        raise ValueError(f"a value of {value_bits} bits with kappa={kappa} does not fit the key")
    layout = PackingLayout(count=vector.size, value_bits=value_bits, kappa=kappa, slots=slots)
    offset = 1 << (value_bits - 1)
    masks = tuple(offset + secrets.randbits(value_bits + kappa) for _ in range(vector.size))
    n, nsq = pk.n, pk.nsquare
    masked = [c * (1 + n * m) % nsq for c, m in zip(vector.ciphertexts, masks, strict=True)]
    shift = mpz(1) << slot_bits
    packed = []
    for start in range(0, len(masked), slots):
        packed.append(horner_pack(masked[start : start + slots], shift, nsq))
    return EncryptedVector(pk, packed, 0), PackingMasks(layout, vector.exponent, masks)


def mask_slots(
    vector: EncryptedVector,
    layout: PackingLayout,
    *,
    workers: Any = None,
    for_key_owner: bool = False,
) -> tuple[EncryptedVector, PackingMasks]:
    """Mask ciphertexts whose plaintexts are already packed signed slots (``layout.slots`` per
    ciphertext, the last one possibly fewer; each ``|v| < 2**(layout.value_bits - 1)``).

    Every slot gets a secret mask from the OS (offset plus ``value_bits + kappa`` random
    bits), and the result is re-randomised for the key holder in one of two ways:

    * by default each ciphertext is multiplied by a fresh encryption of its masks. The fresh
      DJN obfuscator re-randomises: under the key holder's key, everything the requester
      computed lies in the group of the key's base ``h``, and the mask's fresh uniform
      exponent makes each of its residues modulo the group order's small factors uniform to
      the key holder. ``workers`` share the encryption of the masks
      (:mod:`vfl.crypto.parallel`);
    * ``for_key_owner=True``, where the key holder encrypted the inputs itself, with our base
      (:meth:`~vfl.crypto.PaillierPrivateKey.for_base`: the transfer source, the split
      network's label party): the masks are added as plaintexts and the result gets a
      full-length power of our base (:func:`~vfl.crypto.rerandomize.rerandomize` with
      ``for_key_owner="base"``, drawn by ``workers``), which hides from the owner how it was
      computed.
    """
    if vector.ndim != 1 or vector.size != layout.n_ciphertexts or vector.exponent != 0:
        raise ValueError(
            f"expected {layout.n_ciphertexts} packed integer ciphertexts, got {vector.shape} at "
            f"exponent {vector.exponent}"
        )
    masks = draw_slot_masks(layout)
    if for_key_owner:
        pk = vector.public_key
        n, nsq = pk.n, pk.nsquare
        packed = _pack_masks(layout, masks)
        plain = [c * (1 + n * m) % nsq for c, m in zip(vector.ciphertexts, packed, strict=True)]
        masked = rerandomize(EncryptedVector(pk, plain, 0), for_key_owner="base", workers=workers)
    else:
        masked = add_slot_masks(vector, layout, masks, workers=workers)
    return masked, PackingMasks(layout, 0, masks)


def draw_slot_masks(layout: PackingLayout) -> tuple[int, ...]:
    """A fresh mask per slot of ``layout``, from the OS: the public offset ``2**(b-1)`` plus
    ``b + kappa`` random bits (``b = layout.value_bits``)."""
    offset = 1 << (layout.value_bits - 1)
    width = layout.value_bits + layout.kappa
    return tuple(offset + secrets.randbits(width) for _ in range(layout.count))


def _pack_masks(layout: PackingLayout, masks: tuple[int, ...] | list[int]) -> list[int]:
    packed = []
    for c in range(layout.n_ciphertexts):
        chunk = masks[c * layout.slots : (c + 1) * layout.slots]
        packed.append(sum(m << (layout.slot_bits * j) for j, m in enumerate(chunk)))
    return packed


def add_slot_masks(
    vector: EncryptedVector,
    layout: PackingLayout,
    masks: tuple[int, ...] | list[int],
    *,
    workers: Any = None,
) -> EncryptedVector:
    """``vector`` (packed slots, ``layout.slots`` per ciphertext) times a fresh encryption of
    ``masks`` packed the same way: masked and re-randomised (the fresh DJN obfuscators), at
    ``vector``'s exponent."""
    pk = vector.public_key
    encrypted = pk.raw_encrypt(_pack_masks(layout, masks), workers=workers)
    out = [c * e % pk.nsquare for c, e in zip(vector.ciphertexts, encrypted, strict=True)]
    return EncryptedVector(pk, out, vector.exponent, fresh=True)


def request_decryption(
    fed: Federation,
    holder: str,
    tags: Namespace,
    packed: EncryptedVector,
    masks: PackingMasks,
) -> list[int]:
    """Send masked, packed ciphertexts to ``holder`` (tags ``<namespace>/req`` and
    ``<namespace>/plain``) and return the unmasked signed integers (at ``masks.exponent``)."""
    return masks.unmask_integers(request_slots(fed, holder, tags, packed, masks.layout))


def request_slots(
    fed: Federation,
    holder: str,
    tags: Namespace,
    packed: EncryptedVector,
    layout: PackingLayout,
) -> list[int]:
    """Have ``holder`` decrypt ciphertexts packed and masked as ``layout`` says (by us, or by
    the party that sent them to us) and return its slots as they are, masks included (tags
    ``<namespace>/req`` and ``<namespace>/plain``; :func:`serve_decryption` answers)."""
    request = DecryptionRequest(data=packed.to_wire(), layout=layout.to_dict())
    tags.send(fed, holder, "req", request)
    answer = tags.recv(fed, holder, "plain", DecryptedSlots)
    if len(answer.slots) != layout.count:
        DecryptedSlots.refuse(
            holder, "slots", f"holds {len(answer.slots)} values, {layout.count} asked for"
        )
    return [int(v) for v in answer.slots]


def decrypt_masked(
    fed: Federation,
    holder: str,
    tags: Namespace,
    vector: EncryptedVector,
    *,
    bound: float,
    kappa: int = MIN_KAPPA,
    exact: bool = False,
) -> Any:
    """Have ``holder`` decrypt ``vector`` (``|v| <= bound``) under masks only we know: float64
    values, or with ``exact`` the signed fixed-point integers at ``vector.exponent``."""
    packed, masks = pack_masked(vector, bound=bound, kappa=kappa)
    values = request_decryption(fed, holder, tags, packed, masks)
    if exact:
        return values
    return fixedpoint.ints_to_floats(values, masks.exponent)


def serve_decryption(
    fed: Federation,
    requester: str,
    tags: Namespace,
    private_key: PaillierPrivateKey,
    *,
    expected: int | None = None,
    count: int | None = None,
    layout: PackingLayout | None = None,
    workers: int | None = None,
    answer_to: str | None = None,
) -> None:
    """The key holder's side: decrypt one :class:`DecryptionRequest` from ``requester`` and
    answer with its masked slots (``workers``: threads of the decryption, see
    :meth:`~vfl.crypto.PaillierPrivateKey.raw_decrypt`).

    What the key holder knows of the step independently pins the request: ``expected``
    (packed ciphertexts), ``count`` (values) and ``layout`` (the whole packing), each refusing
    a request that differs, naming the requester. Every slot must lie within its mask's width
    (:meth:`~vfl.crypto.PaillierPrivateKey.decrypt_packed`).

    ``answer_to``: the party the slots go to, where it is not the requester. The secret-shared
    protocols route this way: the party that masked the ciphertexts sends them, and the party
    whose share they are receives the slots, so that nobody has the holder decrypt ciphertexts
    of its own choosing and sees the result."""
    request = tags.recv(fed, requester, "req", DecryptionRequest)
    try:
        vector = private_key.public_key.vector_from_wire(request.data)
    except (TypeError, ValueError) as exc:
        DecryptionRequest.refuse(requester, "data", f"is not usable: {exc}")
    if expected is not None and vector.size != expected:
        DecryptionRequest.refuse(
            requester, "data", f"asks for {vector.size} decryptions; this step has {expected}"
        )
    if count is not None and request.layout.get("count") != count:
        DecryptionRequest.refuse(
            requester,
            "layout",
            f"asks for {request.layout.get('count')} values; this step has {count}",
        )
    if layout is not None and request.layout != layout.to_dict():
        DecryptionRequest.refuse(
            requester, "layout", f"is {request.layout}; this step's packing is {layout.to_dict()}"
        )
    try:
        slots = private_key.decrypt_packed(vector, request.layout, workers=workers)
    except ValueError as exc:
        DecryptionRequest.refuse(requester, "layout", f"does not fit: {exc}")
    answer = DecryptedSlots(slots=[int(v) for v in slots])
    tags.send(fed, answer_to or requester, "plain", answer)
