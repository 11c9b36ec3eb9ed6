"""The one message for an encrypted vector between parties.

Every protocol that sends ciphertexts with nothing else beside them (a gradient share, scores,
a loss piece, a split network's packed weights) sends an :class:`Encrypted`; its receiver
checks the block against its own key with :func:`~vfl.crypto.policy.vector_from`. Messages
that carry more (a decryption request and its layout, the transfer terms) have their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from vfl.federation.messages import Message
from vfl.federation.wire import CiphertextBlock

__all__ = ["Encrypted"]


@dataclass(frozen=True)
class Encrypted(Message):
    """One encrypted vector (its ciphertexts, exponent and shape)."""

    KIND = "encrypted vector"
    data: CiphertextBlock
