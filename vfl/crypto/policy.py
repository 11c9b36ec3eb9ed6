"""Keys between parties: the key-size policy, the public-key message, checked ciphertexts.

One place decides which keys a party makes and accepts (:class:`KeyPolicy`: 2048 bits by
default, smaller only with ``insecure=True``, at most 8192) and how a public key and encrypted
vectors cross a channel (:class:`PublicKeyMessage`, :func:`vector_from`), so that a malformed,
foreign or too-small key is refused with the sender's name wherever it arrives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vfl.crypto.keys import PaillierPrivateKey, PaillierPublicKey, generate_paillier_keypair
from vfl.crypto.vector import EncryptedVector
from vfl.federation.messages import Message, MessageError

__all__ = ["MAX_KEY_BITS", "Base", "KeyPolicy", "PublicKeyMessage", "vector_from"]

MAX_KEY_BITS = 8192
"""Largest modulus a party accepts from another."""


@dataclass(frozen=True)
class PublicKeyMessage(Message):
    """A Paillier public key on the wire: its modulus ``n``, big-endian."""

    KIND = "public key"
    n: bytes

    @classmethod
    def of(cls, key: PaillierPublicKey) -> PublicKeyMessage:
        return cls(n=int(key.n).to_bytes((key.n_length + 7) // 8, "big"))


@dataclass(frozen=True)
class Base(Message):
    """The ``h_s`` a party re-randomises with under another party's key, for that party to
    encrypt its inputs with (:meth:`PaillierPrivateKey.for_base`), so that a full-length
    re-randomisation hides from the key's owner how a result was computed
    (:mod:`vfl.crypto.rerandomize`)."""

    KIND = "re-randomisation base"
    h_s: bytes


@dataclass(frozen=True)
class KeyPolicy:
    """Which Paillier keys a party generates and accepts.

    Parameters
    ----------
    key_bits : int
        Modulus size of the keys this party generates (bits).
    insecure : bool
        Allow keys below 2048 bits, generated and received (tests only; warns).
    """

    key_bits: int = 2048
    insecure: bool = False

    def generate(self) -> tuple[PaillierPublicKey, PaillierPrivateKey]:
        """A fresh key pair from OS randomness."""
        return generate_paillier_keypair(self.key_bits, insecure=self.insecure)

    def accept(self, message: PublicKeyMessage, sender: str) -> PaillierPublicKey:
        """The public key ``sender`` sent, if the policy accepts it.

        Raises
        ------
        MessageError
            Too small (without ``insecure``), too large, or not a usable modulus.
        """
        n = int.from_bytes(message.n, "big")
        bits = n.bit_length()
        if bits > MAX_KEY_BITS:
            PublicKeyMessage.refuse(sender, "n", f"is a {bits}-bit key (at most {MAX_KEY_BITS})")
        if bits < 2048 and not self.insecure:
            PublicKeyMessage.refuse(
                sender,
                "n",
                f"is a {bits}-bit key; at least 2048 bits are needed (insecure=True allows "
                "smaller keys for tests)",
            )
        try:
            return PaillierPublicKey(n, insecure=bits < 2048)
        except ValueError as exc:
            PublicKeyMessage.refuse(sender, "n", f"is not a usable key: {exc}")

    def receive(self, payload: Any, sender: str) -> PaillierPublicKey:
        """:meth:`accept` a raw payload."""
        return self.accept(PublicKeyMessage.from_payload(payload, sender), sender)


def vector_from(key: PaillierPublicKey, block: Any, sender: str) -> EncryptedVector:
    """An encrypted vector ``sender`` sent under ``key`` (MessageError naming it if foreign or
    malformed)."""
    try:
        return key.vector_from_wire(block)
    except (ValueError, TypeError) as exc:
        raise MessageError(f"party {sender!r} sent an unusable ciphertext message: {exc}") from None
