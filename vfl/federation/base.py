"""The channel every protocol is written against: :class:`Federation`, its errors and transcript.

A protocol (PSI, Bloom-filter linkage, vertical LR, split learning, FedAvg, ...) is written once,
as the code each role runs, and talks to other parties only through the :class:`Federation` it
is given. The in-process :class:`~vfl.federation.LocalFederation` and the network federation
implement the same interface, so the protocol cannot tell them apart.

Semantics every implementation keeps:

* ``send(to, tag, payload)`` encodes ``payload`` with :mod:`vfl.federation.wire` and queues it
  (in one process, where :attr:`Federation.passes_values`, it queues the receiver's replica of
  the payload: what the bytes would decode to); it does not wait for the receiver (it may wait
  for queue space: backpressure).
* ``recv(frm, tag)`` returns the oldest message from ``frm`` with exactly that ``tag``; messages
  with one ``(sender, receiver, tag)`` arrive in the order they were sent. Tags name a step of a
  protocol, usually with the round, e.g. ``"vlr/grad/3"``, so rounds never cross.
* ``gather(senders, tag)`` waits for one message from each of several senders (in any order),
  and with ``min_count`` tolerates senders that drop out.
* Every message sent is recorded in a :class:`Transcript` (sender, receiver, tag, payload kind
  and encoded byte size) that tests audit and benchmarks count.
"""

from __future__ import annotations

import abc
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from vfl.federation import wire
from vfl.federation.wire import Payload

__all__ = [
    "DEFAULT_TIMEOUT",
    "Federation",
    "FederationAbortedError",
    "FederationError",
    "FederationTimeoutError",
    "MessageRecord",
    "PartyFailedError",
    "PeerGoneError",
    "ProtocolMismatchError",
    "Transcript",
]

DEFAULT_TIMEOUT = 300.0
"""Seconds a ``recv`` waits by default before it gives up."""

_TAG_RE = re.compile(r"[\x21-\x7e]{1,256}")


class FederationError(RuntimeError):
    """Base class of the errors a federation raises."""


class FederationTimeoutError(TimeoutError):
    """A ``recv`` or ``gather`` ran out of time; the message says who waited for what."""


class FederationAbortedError(FederationError):
    """The run was stopped because another party failed; raised in the parties still waiting."""


class PeerGoneError(FederationError):
    """A party waits for a message from a peer that finished or disconnected without sending it."""


class ProtocolMismatchError(FederationError):
    """Every party waits for a message that no pending message can satisfy (e.g. a tag mismatch)."""


class PartyFailedError(FederationError):
    """A party's code raised; carries the party's name and its formatted traceback.

    Attributes
    ----------
    party : str
        The party whose code failed first.
    party_traceback : str
        That party's traceback, formatted in its own thread.
    others : dict of str to str
        Further parties that failed on their own (not merely aborted), with their error lines.
    """

    def __init__(
        self, party: str, error: BaseException, party_traceback: str, others: Mapping[str, str]
    ) -> None:
        self.party = party
        self.error = error
        self.party_traceback = party_traceback
        self.others = dict(others)
        lines = [f"party {party!r} failed: {type(error).__name__}: {error}"]
        for name, line in self.others.items():
            lines.append(f"party {name!r} also failed: {line}")
        lines.append("")
        lines.append(f"Traceback in party {party!r}:")
        lines.append(party_traceback.rstrip())
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class MessageRecord:
    """One message of a transcript.

    Attributes
    ----------
    seq : int
        Position in the transcript (0-based, in send order).
    sender, receiver, tag : str
        Who sent what to whom.
    kind : str
        The payload's type as :func:`vfl.federation.wire.payload_kind` describes it.
    nbytes : int
        Size of the encoded message in bytes (what a network would carry, before transport framing).
    time : float
        ``time.monotonic()`` when it was sent.
    data : bytes or None
        The encoded message itself, only when the transcript was asked to keep payloads.
    """

    seq: int
    sender: str
    receiver: str
    tag: str
    kind: str
    nbytes: int
    time: float
    data: bytes | None = None

    def payload(self) -> Payload:
        """Decode the kept message (for audits); raises if payloads were not kept."""
        if self.data is None:
            raise FederationError(
                "this transcript did not keep payloads; create the federation with "
                "record_payloads=True to audit message contents"
            )
        return wire.decode(self.data, max_bytes=len(self.data))


class Transcript:
    """Thread-safe, append-only log of the messages of a run.

    Parameters
    ----------
    keep_payloads : bool
        Also keep each encoded message (memory grows with the traffic: for tests and audits).
    """

    def __init__(self, *, keep_payloads: bool = False) -> None:
        self.keep_payloads = keep_payloads
        self._records: list[MessageRecord] = []
        self._lock = threading.Lock()

    def record(self, sender: str, receiver: str, tag: str, kind: str, data: bytes | int) -> None:
        """Record a message: its encoded ``data``, or (where the transport passed the value
        itself and the payloads are not kept) only its encoded size."""
        if isinstance(data, int) and self.keep_payloads:
            raise ValueError("a transcript that keeps the payloads needs each message's bytes")
        with self._lock:
            self._records.append(
                MessageRecord(
                    seq=len(self._records),
                    sender=sender,
                    receiver=receiver,
                    tag=tag,
                    kind=kind,
                    nbytes=data if isinstance(data, int) else len(data),
                    time=time.monotonic(),
                    data=data if self.keep_payloads and not isinstance(data, int) else None,
                )
            )

    @property
    def records(self) -> list[MessageRecord]:
        """A snapshot of the records so far."""
        with self._lock:
            return list(self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[MessageRecord]:
        return iter(self.records)

    def total_bytes(self, *, sender: str | None = None, receiver: str | None = None) -> int:
        """Bytes sent, optionally only by ``sender`` and/or only to ``receiver``."""
        return sum(
            r.nbytes
            for r in self.records
            if (sender is None or r.sender == sender)
            and (receiver is None or r.receiver == receiver)
        )

    def to_frame(self) -> Any:
        """The transcript as a pandas DataFrame (one row per message, without payload bytes)."""
        import pandas as pd

        columns = ["seq", "sender", "receiver", "tag", "kind", "nbytes", "time"]
        return pd.DataFrame(
            [[getattr(r, c) for c in columns] for r in self.records], columns=columns
        )


def check_tag(tag: str) -> str:
    """Validate a message tag: 1-256 printable ASCII characters without spaces."""
    if not isinstance(tag, str) or not _TAG_RE.fullmatch(tag):
        raise ValueError(
            f"invalid message tag {tag!r}: use 1-256 printable ASCII characters without "
            "spaces, e.g. 'vlr/grad/3'"
        )
    return tag


class Parcel:
    """A message passed by value between two ends in one process: the receiver's own replica
    of the payload (:func:`vfl.federation.wire.replica`: what it would decode, sharing nothing
    with the sender) and the size of its encoding, which the transcript records and the
    transport's backpressure counts as if the bytes had passed (``len(parcel)``)."""

    __slots__ = ("nbytes", "value")

    def __init__(self, value: Payload, nbytes: int) -> None:
        self.value, self.nbytes = value, nbytes

    def __len__(self) -> int:
        return self.nbytes


Frame: TypeAlias = "bytes | Parcel"
"""What a transport carries: a message's encoded bytes, or in one process a :class:`Parcel`."""


class Federation(abc.ABC):
    """One party's view of a federation: its name, its peers, and typed messages to and from them.

    Subclasses implement the byte transport (:meth:`_send_bytes`, :meth:`_recv_bytes`,
    :meth:`_gather_bytes`); encoding, decoding, validation and the transcript live here once.

    Parameters
    ----------
    name : str
        This party's name.
    peers : iterable of str
        Every other party this one may talk to.
    transcript : Transcript, optional
        Where sent messages are recorded (a new one by default).
    timeout : float
        Default seconds ``recv`` and ``gather`` wait.
    max_message_bytes : int
        Largest encoded message sent or accepted.
    """

    def __init__(
        self,
        name: str,
        peers: Iterable[str],
        *,
        transcript: Transcript | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_message_bytes: int = wire.DEFAULT_MAX_BYTES,
    ) -> None:
        self._name = name
        self._peers = tuple(p for p in peers if p != name)
        self.transcript = transcript if transcript is not None else Transcript()
        self.timeout = float(timeout)
        self.max_message_bytes = int(max_message_bytes)

    @property
    def name(self) -> str:
        """This party's name."""
        return self._name

    @property
    def peers(self) -> tuple[str, ...]:
        """The other parties, in the federation's order."""
        return self._peers

    @property
    def passes_values(self) -> bool:
        """True where both ends share a process, so a message reaches the receiver as a
        replica of its payload rather than as bytes to decode (:class:`Parcel`), unless the
        transcript keeps every message's bytes. The transcript counts the same bytes."""
        return False

    @property
    def takes_turns(self) -> bool:
        """True where every party of the run takes turns on this one thread
        (:class:`~vfl.federation.LocalFederation`'s cooperative scheduling): a party then
        computes where it is rather than handing work to another thread."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._name!r}, peers={list(self._peers)!r})"

    # -- public API --------------------------------------------------------------------------

    def send(self, to: str, tag: str, payload: Payload) -> None:
        """Send ``payload`` to party ``to`` under ``tag`` (see the module docstring)."""
        self._check_peer(to, "send to")
        check_tag(tag)
        self._deliver(to, tag, self._frame(to, tag, payload, wire.payload_kind(payload)))

    def broadcast(self, tag: str, payload: Payload, *, to: Iterable[str] | None = None) -> None:
        """Send the same payload to several peers (all by default), encoding it once (by value,
        one replica, recopied for each further peer: :func:`vfl.federation.wire.recopy`)."""
        targets = self._peers if to is None else tuple(to)
        for peer in targets:
            self._check_peer(peer, "send to")
        check_tag(tag)
        kind = wire.payload_kind(payload)
        if not self._by_value():
            data = wire.encode(payload, max_bytes=self.max_message_bytes)
            for peer in targets:
                self._deliver(peer, tag, self._frame(peer, tag, payload, kind, data))
            return
        if not targets:
            return
        first = self._frame(targets[0], tag, payload, kind)
        if not isinstance(first, Parcel):  # beyond what decode takes: bytes, refused there
            self._deliver(targets[0], tag, first)
            for peer in targets[1:]:
                self._deliver(peer, tag, self._frame(peer, tag, payload, kind, first))
            return
        # one replica (checked and sized once); each peer but the last gets a recopy of it,
        # made before the replica itself is handed over, so no receiver's change reaches another
        for i, peer in enumerate(targets):
            if i:
                self.transcript.record(self._name, peer, tag, kind, first.nbytes)
            last = i == len(targets) - 1
            self._deliver(
                peer, tag, first if last else Parcel(wire.recopy(first.value), first.nbytes)
            )

    def recv(self, frm: str, tag: str, *, timeout: float | None = None) -> Payload:
        """Receive the oldest message from ``frm`` with ``tag``, waiting up to ``timeout`` seconds.

        Raises
        ------
        FederationTimeoutError
            Nothing arrived in time; the message names who waited for which tag from whom.
        PeerGoneError
            ``frm`` finished or disconnected without sending it.
        FederationAbortedError
            Another party failed and the run is being stopped.
        vfl.federation.wire.WireFormatError
            The message is malformed; the error names the sender.
        """
        self._check_peer(frm, "receive from")
        check_tag(tag)
        data = self._recv_bytes(
            frm, tag, self._deadline(timeout), explicit_timeout=timeout is not None
        )
        return self._decode(frm, tag, data)

    def gather(
        self,
        senders: Iterable[str],
        tag: str,
        *,
        timeout: float | None = None,
        min_count: int | None = None,
    ) -> dict[str, Payload]:
        """Receive one ``tag`` message from each of ``senders``, in whatever order they arrive.

        Parameters
        ----------
        senders : iterable of str
            The peers to hear from.
        tag : str
            The tag they send under.
        timeout : float, optional
            Seconds to wait in all (the federation's default if None).
        min_count : int, optional
            Fewest messages that make a success (all senders by default). Senders that have
            finished or disconnected, or are still silent at the deadline, are left out of the
            result; with fewer than ``min_count`` replies the call raises.

        Returns
        -------
        dict of str to payload
            The replies, keyed by sender, in the order of ``senders``. When the call raises
            (too few replies, or a malformed one), the replies it had taken are lost.
        """
        wanted = tuple(dict.fromkeys(senders))
        for peer in wanted:
            self._check_peer(peer, "receive from")
        check_tag(tag)
        need = len(wanted) if min_count is None else int(min_count)
        if not 0 <= need <= len(wanted):
            raise ValueError(f"min_count={min_count} must be between 0 and {len(wanted)}")
        raw = self._gather_bytes(
            wanted, tag, self._deadline(timeout), need=need, explicit_timeout=timeout is not None
        )
        if len(raw) < need:
            missing = [p for p in wanted if p not in raw]
            raise FederationTimeoutError(
                f"party {self._name!r} gathered {tag!r} from {len(raw)} of {len(wanted)} "
                f"senders, fewer than the {need} required; no reply from {missing}"
            )
        return {p: self._decode(p, tag, raw[p]) for p in wanted if p in raw}

    # -- transport, implemented by subclasses --------------------------------------------------

    @abc.abstractmethod
    def _send_bytes(self, to: str, tag: str, data: bytes) -> None:
        """Deliver one encoded message (may block for backpressure)."""

    def _send_parcel(self, to: str, tag: str, parcel: Parcel) -> None:
        """Deliver one message by value (transports whose :attr:`passes_values`)."""
        raise NotImplementedError(f"{type(self).__name__} carries bytes only")

    @abc.abstractmethod
    def _recv_bytes(
        self, frm: str, tag: str, deadline: float, *, explicit_timeout: bool = False
    ) -> Frame:
        """Return the oldest message from ``frm`` with ``tag`` before ``time.monotonic()`` passes
        ``deadline``, else raise :class:`FederationTimeoutError` / :class:`PeerGoneError`.

        ``explicit_timeout`` tells that the caller chose the timeout (and may expect it)."""

    def _gather_bytes(
        self,
        senders: tuple[str, ...],
        tag: str,
        deadline: float,
        *,
        need: int,
        explicit_timeout: bool = False,
    ) -> Mapping[str, Frame]:
        """Collect one message per sender until the deadline; senders that are gone are skipped.

        This generic version waits for the senders one after another; transports that can
        wait for all at once override it. ``need`` is the caller's ``min_count``.
        """
        out: dict[str, Frame] = {}
        for peer in senders:
            try:
                out[peer] = self._recv_bytes(peer, tag, deadline, explicit_timeout=True)
            except (FederationTimeoutError, PeerGoneError):
                continue
        return out

    # -- helpers --------------------------------------------------------------------------------

    def _deadline(self, timeout: float | None) -> float:
        seconds = self.timeout if timeout is None else float(timeout)
        if seconds < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {seconds}")
        return time.monotonic() + seconds

    def _check_peer(self, peer: str, action: str) -> None:
        if peer not in self._peers:
            if peer == self._name:
                raise ValueError(f"party {self._name!r} cannot {action} itself")
            raise ValueError(
                f"party {self._name!r} cannot {action} {peer!r}: not a peer in this federation; "
                f"peers are {list(self._peers)}"
            )

    def _deliver(self, to: str, tag: str, frame: Frame) -> None:
        if isinstance(frame, Parcel):
            self._send_parcel(to, tag, frame)
        else:
            self._send_bytes(to, tag, frame)

    def _by_value(self) -> bool:
        return self.passes_values and not self.transcript.keep_payloads

    def _frame(
        self, to: str, tag: str, payload: Payload, kind: str, data: bytes | None = None
    ) -> Frame:
        """What carries ``payload`` to ``to`` (its encoding ``data``, when already made),
        recorded in the transcript."""
        if data is None and self._by_value():
            try:
                value, nbytes = wire.replica(payload, max_bytes=self.max_message_bytes)
            except wire.WireFormatError:  # more values than decode takes: the receiver says so
                pass
            else:
                self.transcript.record(self._name, to, tag, kind, nbytes)
                return Parcel(value, nbytes)
        if data is None:
            data = wire.encode(payload, max_bytes=self.max_message_bytes)
        self.transcript.record(self._name, to, tag, kind, data)
        return data

    def _decode(self, frm: str, tag: str, data: Frame) -> Payload:
        if isinstance(data, Parcel):
            return data.value
        try:
            return wire.decode(data, max_bytes=self.max_message_bytes)
        except wire.WireFormatError as exc:
            raise wire.WireFormatError(
                f"party {self._name!r} refused the {tag!r} message from {frm!r}: {exc}"
            ) from exc
