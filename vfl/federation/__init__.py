"""The federation runtime: how parties talk.

A protocol is written once against :class:`Federation` (``name``, ``peers``, ``send``, ``recv``,
``gather``, ``broadcast``); :class:`LocalFederation` runs every party as a thread of one process
(the embedded default, used by simulations, examples and tests). Payloads are the closed set of
types of :mod:`vfl.federation.wire`; protocols exchange typed
:mod:`~vfl.federation.messages` with namespaced tags. Names are exported lazily, so importing
one module (the wire format, say) loads only what it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linkage.lazy import lazy_exports

_EXPORTS = {
    "DEFAULT_TIMEOUT": "vfl.federation.base",
    "Federation": "vfl.federation.base",
    "FederationAbortedError": "vfl.federation.base",
    "FederationError": "vfl.federation.base",
    "FederationTimeoutError": "vfl.federation.base",
    "MessageRecord": "vfl.federation.base",
    "PartyFailedError": "vfl.federation.base",
    "PeerGoneError": "vfl.federation.base",
    "ProtocolMismatchError": "vfl.federation.base",
    "Transcript": "vfl.federation.base",
    "LocalChannel": "vfl.federation.local",
    "LocalFederation": "vfl.federation.local",
    "CiphertextBlock": "vfl.federation.wire",
    "WireFormatError": "vfl.federation.wire",
    "Message": "vfl.federation.messages",
    "MessageError": "vfl.federation.messages",
}

__all__ = [
    "DEFAULT_TIMEOUT",
    "CiphertextBlock",
    "Federation",
    "FederationAbortedError",
    "FederationError",
    "FederationTimeoutError",
    "LocalChannel",
    "LocalFederation",
    "Message",
    "MessageError",
    "MessageRecord",
    "PartyFailedError",
    "PeerGoneError",
    "ProtocolMismatchError",
    "Transcript",
    "WireFormatError",
    "wire",
]

if TYPE_CHECKING:
    from vfl.federation import wire
    from vfl.federation.base import (
        DEFAULT_TIMEOUT,
        Federation,
        FederationAbortedError,
        FederationError,
        FederationTimeoutError,
        MessageRecord,
        PartyFailedError,
        PeerGoneError,
        ProtocolMismatchError,
        Transcript,
    )
    from vfl.federation.local import LocalChannel, LocalFederation
    from vfl.federation.messages import Message, MessageError
    from vfl.federation.wire import CiphertextBlock, WireFormatError


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, submodules=("wire",))
