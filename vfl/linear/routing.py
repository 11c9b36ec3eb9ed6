"""Routed decryption under ``protocol="coordinator"``: nobody reads a decryption of
ciphertexts it chose (issue #31).

A data party that assembled its own decryption request could put in it any ciphertext it
holds under the coordinator's key -- its peers' encrypted feature rows share its slot
width -- and read them opened, masked only by masks it drew itself. So each request is
assembled by another data party, the receiver's *assembler* (:func:`assembler_of`), and the
coordinator answers the receiver (:func:`~vfl.crypto.masked.serve_decryption` with
``answer_to``), as the secret-shared protocols route theirs:

1. the receiver draws a mask per slot of the request's public layout (:func:`slot_masks`:
   OS randomness, ``kappa`` bits longer than the value) and sends them to its assembler in
   the clear (:class:`SlotMasks`): plain integers are all it puts into its own request;
2. the assembler multiplies the ciphertexts the protocol hands it -- its own contribution
   and those the other data parties sent it -- by a fresh encryption of the masks
   (:func:`assemble`; the fresh encryption re-randomises the product) and sends the request
   to the coordinator;
3. the coordinator checks the request against the layout it derived itself, decrypts it and
   answers the receiver, which removes its masks (:func:`receive_opened`).

What each party sees: the receiver, its value and nothing more (it chose no ciphertext, only
masks it knows); the assembler, ciphertexts under a key it does not hold and the
receiver's masks, never the masked value; the coordinator, each value under a mask
``kappa`` bits longer than it, drawn by the receiver. The assembler knowing the masks is
harmless while it does not pool what it knows with the coordinator, which the threat model
assumes anyway (the coordinator's key opens every party's encrypted rows). The masks travel
in the clear because an encrypted mask would be a ciphertext of the receiver's choosing in
its own decryption: ``[[m]]`` times a peer's row ciphertext raised to ``2**s`` would land
the row's slots above the value's bits, readable once ``m`` is removed. The work is as
before: the assembler encrypts the receiver's masks instead of the receiver, and no
decryption is added.

.. warning::
   The assembler chooses what is decrypted for the receiver, and so does every party whose
   contribution it multiplies in: a deviating one can put any ciphertext it holds under the
   key into the request (a third party's encrypted rows, say), and the receiver reads it
   behind nothing but its own masks. The party that chose it sees nothing, so that helps
   only two parties pooling what they see, which is out of scope. A deviating assembler can
   also leave the masks out (the coordinator then sees the value: again collusion) or spoil
   the value, which the receiver's bound checks catch as an overflow unless it is small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vfl.crypto import EncryptedVector
from vfl.crypto.masked import (
    DecryptedSlots,
    DecryptionRequest,
    add_slot_masks,
    draw_slot_masks,
)
from vfl.crypto.packing import PackingLayout, PackingMasks
from vfl.federation.base import Federation
from vfl.federation.messages import Message, Namespace

__all__ = [
    "SlotMasks",
    "assemble",
    "assembler_of",
    "receive_opened",
    "send_masks",
    "slot_masks",
]


@dataclass(frozen=True)
class SlotMasks(Message):
    """To the party that assembles our decryption request: our mask of each slot of the
    request's public layout, which it encrypts and multiplies in. In the clear, so that we
    choose no ciphertext that is decrypted for us."""

    KIND = "decryption masks"
    masks: list[int]


def assembler_of(party: str, label_party: str, data_parties: Sequence[str]) -> str:
    """The data party that assembles ``party``'s decryption requests: the label party for
    every passive party, and for the label party the first passive one (in
    ``data_parties``' order).

    The label party already talks to every passive party each batch and multiplies its own
    contribution into each passive's share, so assembling those costs it no extra message;
    any passive party would do for the label party's, the first is the one every party can
    name."""
    if party != label_party:
        return label_party
    for p in data_parties:
        if p != label_party:
            return p
    raise ValueError(f"party {party!r} has no other data party to assemble its requests")


def slot_masks(layout: PackingLayout, exponent: int = 0) -> PackingMasks:
    """A fresh mask per slot of ``layout``, from the OS: the public offset ``2**(b-1)`` plus
    ``b + kappa`` random bits (``b = layout.value_bits``), as
    :func:`~vfl.crypto.masked.mask_slots` draws them; ``exponent`` is the values'
    fixed-point exponent (for :meth:`~vfl.crypto.packing.PackingMasks.unmask_integers`)."""
    return PackingMasks(layout, exponent, draw_slot_masks(layout))


def send_masks(fed: Federation, assembler: str, tags: Namespace, masks: PackingMasks) -> None:
    """Send our masks to ``assembler`` (tag ``<namespace>/masks``)."""
    tags.send(fed, assembler, "masks", SlotMasks(masks=[int(m) for m in masks.masks]))


def assemble(
    fed: Federation,
    receiver: str,
    coordinator: str,
    tags: Namespace,
    total: EncryptedVector,
    layout: PackingLayout,
) -> None:
    """Receive ``receiver``'s masks, multiply a fresh encryption of them into ``total``
    (ciphertexts of packed signed slots, ``layout.slots`` per ciphertext) and send the request
    to ``coordinator`` (tags ``<namespace>/masks`` and ``<namespace>/req``), which answers
    ``receiver``.

    Each mask must be one :func:`slot_masks` can draw: a larger one could spill into the
    next slot, or have the coordinator refuse the request naming us, not the receiver.

    Raises
    ------
    MessageError
        Another number of masks than the layout's slots, or one out of range (names
        ``receiver``).
    """
    if total.size != layout.n_ciphertexts:
        raise ValueError(
            f"{total.size} ciphertexts to assemble, but the layout packs {layout.n_ciphertexts}"
        )
    masks = tags.recv(fed, receiver, "masks", SlotMasks).masks
    if len(masks) != layout.count:
        SlotMasks.refuse(
            receiver, "masks", f"holds {len(masks)} values; the layout has {layout.count} slots"
        )
    low = 1 << (layout.value_bits - 1)
    high = low + (1 << (layout.value_bits + layout.kappa))
    for i, m in enumerate(masks):
        if not low <= m < high:
            SlotMasks.refuse(
                receiver,
                "masks",
                f"item {i} is {m}, not a mask of this layout (2**{layout.value_bits - 1} plus "
                f"{layout.value_bits + layout.kappa} random bits)",
            )
    request = add_slot_masks(total, layout, masks)  # a few ciphertexts: no workers
    tags.send(
        fed,
        coordinator,
        "req",
        DecryptionRequest(data=request.to_wire(), layout=layout.to_dict()),
    )


def receive_opened(
    fed: Federation, coordinator: str, tags: Namespace, masks: PackingMasks
) -> list[int]:
    """The coordinator's answer to the request our assembler sent for us (tag
    ``<namespace>/plain``), unmasked: the signed integers at ``masks.exponent``.

    Raises
    ------
    MessageError
        Another number of slots than the layout's (names ``coordinator``).
    FixedPointOverflowError
        A value left its bound (the coordinator or the assembler spoilt it, or it overflowed).
    """
    answer = tags.recv(fed, coordinator, "plain", DecryptedSlots)
    count = masks.layout.count
    if len(answer.slots) != count:
        DecryptedSlots.refuse(
            coordinator, "slots", f"holds {len(answer.slots)} values, {count} asked for"
        )
    return masks.unmask_integers([int(v) for v in answer.slots])
