"""The federation runtime: how parties talk.

A protocol is written once against :class:`Federation` (``name``, ``peers``, ``send``, ``recv``,
``gather``, ``broadcast``); :class:`LocalFederation` runs every party as a thread of one process
(the embedded default, used by simulations, examples and tests). Payloads are the closed set of
types of :mod:`vfl.federation.wire`.
"""

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
from vfl.federation.wire import CiphertextBlock, WireFormatError

__all__ = [
    "DEFAULT_TIMEOUT",
    "CiphertextBlock",
    "Federation",
    "FederationAbortedError",
    "FederationError",
    "FederationTimeoutError",
    "LocalChannel",
    "LocalFederation",
    "MessageRecord",
    "PartyFailedError",
    "PeerGoneError",
    "ProtocolMismatchError",
    "Transcript",
    "WireFormatError",
    "wire",
]
