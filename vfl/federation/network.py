"""The network federation: every party its own process, talking gRPC over mutual TLS.

:class:`GrpcFederation` is one party's endpoint. It serves a gRPC endpoint at its own address
and sends to its peers' endpoints; protocols written against
:class:`~vfl.federation.Federation` run over it unchanged.

Security: every connection is mutual TLS (TLS 1.3 where both ends support it, which gRPC's
BoringSSL negotiates by default). Each party holds a key and a certificate signed by the
federation's CA, whose certificate every party has. A server accepts only clients with a
certificate from that CA, and only messages whose claimed sender is that certificate's common
name; a client checks that the server's certificate names the party it wants to reach as a DNS
subject alternative name (the address may be anything: a proxy, a NAT).
Refusals are logged at WARNING with the peer's address and claimed name.

A peer whose certificate fails this party's TLS handshake (not signed by the federation's CA,
expired, naming another party) is not retried as a peer that is not up yet would be: the first
such failure of a call or a heartbeat fetches the certificate the peer presents, says what is
wrong with it against the CA file (:mod:`vfl.federation.trust`), logs it at ERROR and raises
:class:`UntrustedPeerError` from ``send`` and from any ``recv`` waiting on that peer. gRPC's
own log of the failed handshakes goes to standard error at its verbosity (``vflink party``
turns it off, :mod:`vfl.app.cli`); a party whose own certificate is not the CA's learns it before
it starts (:func:`vfl.federation.trust.check_own_certificate`).

Transport, per message:

* ``send`` streams the encoded message in chunks (1 MiB by default; no 4 MB gRPC ceiling),
  led by a small JSON header (sender, tag, size, sequence number, session), and waits for the
  receiver's acknowledgement; messages from one sender are acknowledged in order, so FIFO per
  tag holds. A message of 64 KiB or less goes as one unary call instead (half the latency).
* The receiver checks the header, the size (``max_message_bytes``), that the bytes decode as
  the wire format, and only then queues the message; a bad message is refused with an error
  the sender raises, naming the receiver, and the receiver carries on.
* Receive queues are bounded: a sender whose undelivered bytes at a receiver exceed
  ``max_pending_bytes`` waits for the receiver to read (backpressure), up to ``timeout``.
* A peer that cannot be reached is retried with exponential backoff (0.05 s doubling to 2 s)
  until ``connect_timeout`` (first contact) or ``peer_timeout`` (later) has passed; a resent
  message carries the same sequence number and is delivered once. A peer that comes back within
  the window is simply reconnected.
* Heartbeats: a background thread pings each peer every ``heartbeat`` seconds; a ``recv`` from a
  peer that has not answered for ``peer_timeout`` seconds (after first contact) raises
  :class:`~vfl.federation.PeerGoneError` naming it. A party that closes its endpoint tells its
  peers, so they stop waiting for it at once.
"""

from __future__ import annotations

import collections
import json
import logging
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from pathlib import Path
from typing import Any, NoReturn

from vfl.extras import require
from vfl.federation import trust, wire
from vfl.federation.base import (
    DEFAULT_TIMEOUT,
    Federation,
    FederationError,
    FederationTimeoutError,
    PeerGoneError,
    Transcript,
    check_tag,
)

__all__ = ["GrpcFederation", "PeerRefusedError", "UntrustedPeerError"]

logger = logging.getLogger(__name__)

SERVICE = "vflink.Federation"
CHUNK_BYTES = 1 << 20
UNARY_BYTES = 1 << 16
DEFAULT_MAX_PENDING_BYTES = 256 * 2**20
_HEADER_LIMIT = 4096


class PeerRefusedError(FederationError):
    """A peer refused a message or our identity (certificate, size, format); names the peer."""


class UntrustedPeerError(FederationError):
    """A TLS handshake with a peer failed on a certificate, most often the one it presents
    (not signed by the federation's CA, expired, naming another party): waiting will not help.
    Names the peer, its address and what is wrong."""


def _grpc() -> Any:
    return require("grpc", for_="the network federation")


class _Inbox:
    """Messages received by this party's server, per (sender, tag), bounded per sender."""

    def __init__(self, max_pending_bytes: int) -> None:
        self.cond = threading.Condition()
        self.boxes: dict[tuple[str, str], collections.deque[bytes]] = {}
        self.pending: collections.Counter[str] = collections.Counter()
        self.last_seq: dict[str, int] = {}
        self.sessions: dict[str, str] = {}
        self.finished: set[str] = set()
        self.reasons: dict[str, str] = {}
        self.restarted: set[str] = set()
        self.max_pending_bytes = max_pending_bytes

    def session(self, sender: str, session: str) -> bool:
        """Record the sender's session; False (and the sender marked restarted) when a
        sender already heard from comes back as a new process: its protocol state is lost."""
        with self.cond:
            known = self.sessions.setdefault(sender, session)
            if known != session:
                self.restarted.add(sender)
                self.cond.notify_all()
                return False
            return True

    def put(
        self, sender: str, tag: str, seq: int, data: bytes, deadline: float, active: Any
    ) -> bool:
        """Queue a message (False if the receiver had no room before ``deadline``, or the
        call was cancelled); a resend of a message already queued is acknowledged only."""
        with self.cond:
            while True:
                if seq <= self.last_seq.get(sender, -1):
                    return True  # a resend of a message already delivered
                room = self.pending[sender] + len(data) <= self.max_pending_bytes
                if room or not self.pending[sender]:
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not active():
                    return False
                self.cond.wait(min(left, 1.0))
            self.boxes.setdefault((sender, tag), collections.deque()).append(data)
            self.pending[sender] += len(data)
            self.last_seq[sender] = seq
            self.finished.discard(sender)
            self.cond.notify_all()
            return True

    def take(self, sender: str, tag: str) -> bytes | None:
        box = self.boxes.get((sender, tag))
        if not box:
            return None
        data = box.popleft()
        if not box:
            del self.boxes[(sender, tag)]
        self.pending[sender] -= len(data)
        self.cond.notify_all()
        return data

    def tags_from(self, sender: str) -> list[str]:
        return sorted(tag for (s, tag), box in self.boxes.items() if s == sender and box)


class GrpcFederation(Federation):
    """One party's endpoint of a federation over gRPC with mutual TLS.

    Parameters
    ----------
    name : str
        This party's name (the name in its certificate).
    address : str
        ``host:port`` this party's server listens on (``0.0.0.0:port`` for all interfaces).
    peers : mapping of str to str
        Every other party's name and ``host:port``.
    ca_cert, cert, key : bytes
        PEM of the federation's CA certificate, this party's certificate and its private key.
    timeout : float
        Default seconds a ``recv`` waits for a message (and a ``send`` for queue room).
    connect_timeout : float
        Seconds to keep retrying a peer never reached yet (parties start at different times).
    peer_timeout : float
        Seconds a peer already reached may stay unreachable before it counts as lost.
    heartbeat : float
        Seconds between pings to each peer.
    max_message_bytes : int
        Largest message sent or accepted.
    max_pending_bytes : int
        Undelivered bytes per sender this party queues before senders wait.
    chunk_bytes : int
        Bytes per streamed chunk.
    ca_name : str, optional
        How messages name the CA certificate (:meth:`from_files` gives its path).

    Use it as a context manager (or call :meth:`start` and :meth:`close`).
    """

    def __init__(
        self,
        name: str,
        address: str,
        peers: Mapping[str, str],
        *,
        ca_cert: bytes,
        cert: bytes,
        key: bytes,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = 60.0,
        peer_timeout: float = 30.0,
        heartbeat: float = 2.0,
        max_message_bytes: int = wire.DEFAULT_MAX_BYTES,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        chunk_bytes: int = CHUNK_BYTES,
        transcript: Transcript | None = None,
        ca_name: str | None = None,
    ) -> None:
        super().__init__(
            name,
            list(peers),
            transcript=transcript,
            timeout=timeout,
            max_message_bytes=max_message_bytes,
        )
        if name in peers:
            raise ValueError(f"party {name!r} is listed among its own peers")
        self.address = address
        self.peer_addresses = dict(peers)
        self.connect_timeout = float(connect_timeout)
        self.peer_timeout = float(peer_timeout)
        self.heartbeat = float(heartbeat)
        self.chunk_bytes = int(chunk_bytes)
        self._ca, self._cert, self._key = ca_cert, cert, key
        self.ca_name = ca_name
        self._untrusted: dict[str, str] = {}  # peer -> why its certificate is refused
        self._lost: set[str] = set()  # peers found unreachable for their whole window
        self._inbox = _Inbox(int(max_pending_bytes))
        self._session = secrets.token_hex(8)  # tells a restarted process from a resend
        self._seq: collections.Counter[str] = collections.Counter()
        self._send_locks = {p: threading.Lock() for p in peers}
        self._last_ok: dict[str, float] = {}
        self._started_at = time.monotonic()
        self._stop = threading.Event()
        self._server: Any = None
        self._channels: dict[str, Any] = {}
        self._heartbeat_thread: threading.Thread | None = None

    @classmethod
    def from_files(
        cls,
        name: str,
        address: str,
        peers: Mapping[str, str],
        *,
        ca: str | Path,
        cert: str | Path,
        key: str | Path,
        **options: Any,
    ) -> GrpcFederation:
        """The endpoint with its PEM files read from paths (errors name the party and file);
        ``options`` are the constructor's keyword arguments."""
        pem = {}
        for what, path in (("CA certificate", ca), ("certificate", cert), ("key", key)):
            try:
                pem[what] = Path(path).read_bytes()
            except OSError as exc:
                raise ValueError(f"party {name!r}: cannot read its {what} {path}: {exc}") from None
        options.setdefault("ca_name", str(ca))
        return cls(
            name,
            address,
            peers,
            ca_cert=pem["CA certificate"],
            cert=pem["certificate"],
            key=pem["key"],
            **options,
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> GrpcFederation:
        """Start serving and heart-beating; returns self."""
        grpc = _grpc()
        credentials = grpc.ssl_server_credentials(
            [(self._key, self._cert)], root_certificates=self._ca, require_client_auth=True
        )
        handlers = {
            "Send": grpc.stream_unary_rpc_method_handler(self._serve_send),
            "SendOne": grpc.unary_unary_rpc_method_handler(self._serve_send_one),
            "Ping": grpc.unary_unary_rpc_method_handler(self._serve_ping),
            "Bye": grpc.unary_unary_rpc_method_handler(self._serve_bye),
        }
        options = [
            ("grpc.max_receive_message_length", self.chunk_bytes + 2 * _HEADER_LIMIT),
            ("grpc.so_reuseport", 0),  # a port in use is an error, not a shared listener
        ]
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4 + 2 * len(self.peers)),
            handlers=[grpc.method_handlers_generic_handler(SERVICE, handlers)],
            options=options,
        )
        try:
            port = self._server.add_secure_port(self.address, credentials)
        except RuntimeError as exc:
            self._server = None
            raise OSError(f"party {self.name!r} cannot listen on {self.address}: {exc}") from None
        if port == 0:
            self._server = None
            raise OSError(
                f"party {self.name!r} cannot listen on {self.address} (address in use or invalid)"
            )
        self._server.start()
        root = grpc.ssl_channel_credentials(
            root_certificates=self._ca, private_key=self._key, certificate_chain=self._cert
        )
        for peer, address in self.peer_addresses.items():
            self._channels[peer] = grpc.secure_channel(
                address,
                root,
                options=[
                    ("grpc.ssl_target_name_override", peer),  # the peer's certificate names it
                    ("grpc.max_send_message_length", self.chunk_bytes + 2 * _HEADER_LIMIT),
                    ("grpc.initial_reconnect_backoff_ms", 50),
                    ("grpc.max_reconnect_backoff_ms", 1000),
                ],
            )
        self._started_at = time.monotonic()
        self._heartbeat_thread = threading.Thread(
            target=self._beat, name=f"vflink-heartbeat-{self.name}", daemon=True
        )
        self._heartbeat_thread.start()
        logger.info("party %r listening on %s", self.name, self.address)
        return self

    def close(
        self, *, grace: float = 1.0, reason: str | None = None, patience: float = 0.0
    ) -> None:
        """Tell the peers this party is done, stop heart-beating and serving.

        ``reason`` (a party that stops on an error of its own) travels with the goodbye, and
        a peer waiting for this party's messages fails at once with it. ``patience`` seconds
        are spent retrying peers that do not answer yet, which may still be starting (best
        effort): a peer reached before is retried for ``peer_timeout`` at most (after that it
        counts as gone), and a peer that said goodbye, before or while this party waits, is
        not told. A peer that is up but refuses this party's certificate (it closes the
        connection: "Socket closed" under TLS 1.3, where the client's side of the handshake
        completes first) cannot be told either: it is given two heartbeats and two seconds
        more, in which its own handshakes with this endpoint fail on that certificate, which it
        then names (:class:`UntrustedPeerError`); a peer whose certificate this party refuses,
        or that this party already found lost (unreachable for its whole window), is not
        tried."""
        if self._server is None:
            return
        self._stop.set()
        goodbye = {"from": self.name, **({"reason": reason[:2000]} if reason else {})}
        now = time.monotonic()
        deadline = {
            p: now + (min(patience, self.peer_timeout) if p in self._last_ok else patience)
            for p in self.peers
            # cannot be told: it refuses our certificate, or was already found lost
            if p not in self._inbox.finished and p not in self._untrusted and p not in self._lost
        }
        refusing: set[str] = set()
        while deadline:
            for peer in list(deadline):
                if peer in self._inbox.finished:  # it said goodbye meanwhile: it has ended
                    del deadline[peer]
                    continue
                try:
                    self._call(peer, "Bye", json.dumps(goodbye).encode(), timeout=1.0)
                    del deadline[peer]
                except Exception as exc:  # best effort: the peer may be gone, or not up yet
                    logger.debug("party %r could not say goodbye to %r", self.name, peer)
                    details = getattr(exc, "details", None)  # a grpc.RpcError's
                    details = str(details() if callable(details) else "")
                    if trust.handshake_failure(details):  # we refuse its certificate
                        del deadline[peer]
                        continue
                    if peer not in refusing and "Socket closed" in details:  # it refuses ours
                        refusing.add(peer)
                        calm = time.monotonic() + 2 * self.heartbeat + 2.0
                        deadline[peer] = min(deadline[peer], calm)
                    if time.monotonic() >= deadline[peer]:
                        del deadline[peer]
            if deadline:
                time.sleep(0.5)
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join()
        for channel in self._channels.values():
            channel.close()
        self._server.stop(grace).wait()
        self._server = None

    def __enter__(self) -> GrpcFederation:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the server side -------------------------------------------------------------------------

    def _identity(self, context: Any, claimed: Any) -> str:
        """The sender's name if its certificate proves it, else abort the call."""
        grpc = _grpc()
        # the certificate's common name only: subject alternative names carry host names,
        # which several parties' certificates may share
        names = {
            v.decode(errors="replace") for v in context.auth_context().get("x509_common_name", [])
        }
        if not isinstance(claimed, str) or claimed not in self.peers or claimed not in names:
            logger.warning(
                "party %r refused a connection from %s claiming to be %r (certificate common "
                "name: %s; peers: %s)",
                self.name,
                context.peer(),
                claimed,
                sorted(names) or "none",
                list(self.peers),
            )
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"party {self.name!r} does not accept {claimed!r} with a certificate for "
                f"{sorted(names)}",
            )
        return str(claimed)

    def _serve_send_one(self, request: bytes, context: Any) -> bytes:
        """A message in one call: a 4-byte header length, the header, the data."""
        length = int.from_bytes(request[:4], "big") if len(request) >= 4 else _HEADER_LIMIT
        if length >= _HEADER_LIMIT or len(request) < 4 + length:
            length = len(request)  # unparseable: the header check below refuses it
        return self._serve_send(iter([request[4 : 4 + length], request[4 + length :]]), context)

    def _serve_send(self, chunks: Iterator[bytes], context: Any) -> bytes:
        grpc = _grpc()
        try:
            header = json.loads(next(chunks))
            claimed = header.get("from") if isinstance(header, dict) else None
        except (StopIteration, ValueError, UnicodeDecodeError):
            header, claimed = None, None
        sender = self._identity(context, claimed)
        if not isinstance(header, dict):
            # unreachable while _identity refuses a missing sender; checked here all the same
            logger.warning("party %r refused a message from %r: no JSON header", self.name, sender)
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the message to party {self.name!r} does not start with a JSON object header",
            )
        tag, size, seq = header.get("tag"), header.get("size"), header.get("seq")
        session = header.get("session")
        try:
            check_tag(tag)  # type: ignore[arg-type]
            if not isinstance(size, int) or not isinstance(seq, int) or size < 0 or seq < 0:
                raise ValueError(f"bad size or sequence number in the header {header!r}")
            if not isinstance(session, str) or not 1 <= len(session) <= 64:
                raise ValueError(f"no session in the header {header!r}")
        except ValueError as exc:
            logger.warning("party %r refused a message from %r: %s", self.name, sender, exc)
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if size > self.max_message_bytes:
            logger.warning(
                "party %r refused a %d-byte %r message from %r (limit %d)",
                self.name,
                size,
                tag,
                sender,
                self.max_message_bytes,
            )
            _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"a message of {size} bytes exceeds party {self.name!r}'s limit of "
                f"{self.max_message_bytes} bytes",
            )
        data = bytearray()
        for chunk in chunks:
            data += chunk
            if len(data) > size:
                _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "more bytes than the header said")
        if len(data) != size:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "fewer bytes than the header said")
        try:
            wire.decode(data, max_bytes=self.max_message_bytes)
        except wire.WireFormatError as exc:
            logger.warning(
                "party %r refused a malformed %r message from %r: %s", self.name, tag, sender, exc
            )
            _abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, f"party {self.name!r} refused it: {exc}"
            )
        if not self._inbox.session(sender, session):
            logger.warning("party %r refused %r from %r: it restarted", self.name, tag, sender)
            _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"party {self.name!r} was already talking to an earlier process of {sender!r}; "
                "a party that restarts mid-job loses its state: restart every party",
            )
        self._last_ok[sender] = time.monotonic()
        deadline = time.monotonic() + self.timeout
        if not self._inbox.put(sender, str(tag), seq, bytes(data), deadline, context.is_active):
            _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"party {self.name!r} has not read {self._inbox.pending[sender]} bytes from "
                f"{sender!r} for {self.timeout:g} s",
            )
        return b""

    def _serve_ping(self, request: bytes, context: Any) -> bytes:
        claimed = _json_field(request, "from")
        sender = self._identity(context, claimed)
        self._last_ok[sender] = time.monotonic()
        return b"pong"

    def _serve_bye(self, request: bytes, context: Any) -> bytes:
        sender = self._identity(context, _json_field(request, "from"))
        reason = _json_field(request, "reason")
        with self._inbox.cond:
            if isinstance(reason, str) and reason:
                self._inbox.reasons[sender] = reason[:2000]
            self._inbox.finished.add(sender)
            self._inbox.cond.notify_all()
        return b""

    # -- the client side -------------------------------------------------------------------------

    def _call(self, peer: str, method: str, request: Any, *, timeout: float) -> Any:
        channel = self._channels[peer]
        if method == "Send":  # streams (and unary calls below) are cheap to make per call
            stub = channel.stream_unary(f"/{SERVICE}/Send")
        else:
            stub = channel.unary_unary(f"/{SERVICE}/{method}")
        return stub(request, timeout=timeout)

    def _beat(self) -> None:
        grpc = _grpc()
        while not self._stop.wait(self.heartbeat):
            for peer in self.peers:
                try:
                    ping = json.dumps({"from": self.name}).encode()
                    self._call(peer, "Ping", ping, timeout=max(1.0, self.heartbeat))
                    self._last_ok[peer] = time.monotonic()
                except grpc.RpcError as exc:  # a recv waiting on an untrusted peer ends
                    try:
                        self._untrusted_reason(peer, exc.details())
                    except Exception:  # never the heartbeat's end: send will say it again
                        logger.debug("%r could not explain %r", self.name, peer, exc_info=True)
                except ValueError:  # the channel closed meanwhile
                    pass

    def _send_bytes(self, to: str, tag: str, data: bytes) -> None:
        grpc = _grpc()
        with self._send_locks[to]:
            seq = self._seq[to]
            self._seq[to] += 1
            header = json.dumps(
                {
                    "from": self.name,
                    "tag": tag,
                    "size": len(data),
                    "seq": seq,
                    "session": self._session,
                }
            ).encode()
            view = memoryview(data)
            step = self.chunk_bytes

            def chunks() -> Iterator[bytes]:
                yield header
                for start in range(0, len(view), step):
                    yield bytes(view[start : start + step])

            # a small message goes in a single unary call (about half a stream's latency)
            single = len(data) <= min(step, UNARY_BYTES)
            request = len(header).to_bytes(4, "big") + header + data if single else None

            delay, failing_since = 0.05, None
            while True:
                try:
                    if request is not None:
                        self._call(to, "SendOne", request, timeout=self.timeout)
                    else:
                        self._call(to, "Send", chunks(), timeout=self.timeout)
                    self._last_ok[to] = time.monotonic()
                    return
                except grpc.RpcError as exc:
                    code, details = exc.code(), exc.details()
                    untrusted = self._untrusted_reason(to, details)
                    if untrusted is not None:  # waiting will not help
                        raise UntrustedPeerError(untrusted) from None
                    if code in (
                        grpc.StatusCode.PERMISSION_DENIED,
                        grpc.StatusCode.FAILED_PRECONDITION,
                    ):
                        raise PeerRefusedError(
                            f"party {to!r} refused party {self.name!r}: {details}"
                        ) from None
                    refused = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)
                    if code in refused:
                        raise PeerRefusedError(
                            f"party {to!r} refused the {tag!r} message of {len(data)} bytes "
                            f"from {self.name!r}: {details}"
                        ) from None
                    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                        raise FederationTimeoutError(
                            f"party {self.name!r} could not deliver {tag!r} to {to!r} within "
                            f"{self.timeout:g} s"
                        ) from None
                    reason = self._inbox.reasons.get(to)
                    if reason is not None and to in self._inbox.finished:
                        raise PeerGoneError(  # it said why it stopped: no use retrying
                            f"party {self.name!r} cannot deliver {tag!r} to {to!r}: {to!r} "
                            f"stopped: {reason}"
                        ) from None
                    now = time.monotonic()
                    failing_since = failing_since or now
                    window = self._window(to)
                    if now - failing_since >= window:
                        self._lost.add(to)
                        raise PeerGoneError(
                            f"party {self.name!r} lost peer {to!r} at "
                            f"{self.peer_addresses[to]}: unreachable for {now - failing_since:.1f}"
                            f" s while sending {tag!r} (last error: {code.name}: {details})"
                        ) from None
                    if self._stop.is_set():
                        raise PeerGoneError(
                            f"party {self.name!r} closed its endpoint while sending {tag!r} "
                            f"to {to!r}"
                        ) from None
                    with self._inbox.cond:  # back off, but wake for the peer's goodbye
                        self._inbox.cond.wait_for(lambda: to in self._inbox.reasons, delay)
                    delay = min(2.0, delay * 2)

    def _untrusted_reason(self, peer: str, details: str | None) -> str | None:
        """Why ``peer``'s certificate is refused, when a call's status ``details`` say that the
        TLS handshake failed on it (the first time: fetched, explained, logged at ERROR, and
        any ``recv`` waiting on the peer woken); None for any other failure."""
        reason = self._untrusted.get(peer)
        if reason is not None or not trust.handshake_failure(details):
            return reason
        address = self.peer_addresses[peer]
        presented = trust.fetch_certificate(address, timeout=2.0)
        why = (
            trust.explain_peer_certificate(peer, presented, ca_cert=self._ca, ca_name=self.ca_name)
            or f"the TLS handshake with it failed on a certificate (its or ours): {details}"
        )
        reason = f"party {self.name!r} refuses party {peer!r} at {address}: {why}"
        logger.error("%s", reason)
        with self._inbox.cond:
            self._untrusted[peer] = reason
            self._inbox.cond.notify_all()
        return reason

    def _window(self, peer: str) -> float:
        return self.peer_timeout if peer in self._last_ok else self.connect_timeout

    def _recv_bytes(
        self, frm: str, tag: str, deadline: float, *, explicit_timeout: bool = False
    ) -> bytes:
        inbox = self._inbox
        started = time.monotonic()
        with inbox.cond:
            while True:
                data = inbox.take(frm, tag)
                if data is not None:
                    return data
                if frm in self._untrusted:
                    raise UntrustedPeerError(self._untrusted[frm])
                if frm in inbox.restarted:
                    raise PeerGoneError(
                        f"party {self.name!r} waits for {tag!r} from {frm!r}, but {frm!r} has "
                        "restarted and lost its state; restart every party"
                    )
                if frm in inbox.finished and frm in inbox.reasons:
                    raise PeerGoneError(
                        f"party {self.name!r} waits for {tag!r} from {frm!r}, but {frm!r} "
                        f"stopped: {inbox.reasons[frm]}"
                    )
                if frm in inbox.finished:
                    raise PeerGoneError(
                        f"party {self.name!r} waits for {tag!r} from {frm!r}, but {frm!r} has "
                        f"closed its endpoint without sending it; pending from {frm!r}: "
                        f"{inbox.tags_from(frm) or 'nothing'}"
                    )
                now = time.monotonic()
                last = self._last_ok.get(frm)
                silent = now - (last if last is not None else self._started_at)
                if silent > self._window(frm) and now - started > self.heartbeat:
                    self._lost.add(frm)
                    raise PeerGoneError(
                        f"party {self.name!r} lost peer {frm!r} at {self.peer_addresses[frm]}: "
                        f"no answer for {silent:.1f} s while waiting for {tag!r}"
                    )
                if now >= deadline:
                    raise FederationTimeoutError(
                        f"party {self.name!r} waited {now - started:.1f} s for {tag!r} from "
                        f"{frm!r} and nothing arrived; pending from {frm!r}: "
                        f"{inbox.tags_from(frm) or 'nothing'}"
                    )
                inbox.cond.wait(min(deadline - now, self.heartbeat / 2))


def _abort(context: Any, code: Any, message: str) -> NoReturn:
    """End an RPC with ``code`` (``context.abort`` raises; this tells the type checker)."""
    context.abort(code, message)
    raise AssertionError("unreachable: grpc's abort raises")


def _json_field(request: bytes, field: str) -> Any:
    try:
        data = json.loads(request)
    except (ValueError, UnicodeDecodeError):
        return None
    return data.get(field) if isinstance(data, dict) else None
