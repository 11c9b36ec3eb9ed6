"""The gRPC federation with mutual TLS: identities, refusals, faults, and the same model as
in-process. Marked ``network`` (real sockets on 127.0.0.1; the training test runs one OS
process per party); they run in CI, ``--skip-slow`` skips them locally."""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

grpc = pytest.importorskip("grpc")

from vfl.federation import PeerGoneError  # noqa: E402
from vfl.federation.certs import make_certificates  # noqa: E402
from vfl.federation.network import (  # noqa: E402
    SERVICE,
    GrpcFederation,
    PeerRefusedError,
    UntrustedPeerError,
)

pytestmark = [
    pytest.mark.network,
    pytest.mark.filterwarnings("ignore::vfl.crypto.SecurityWarning"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    paths = make_certificates(tmp_path_factory.mktemp("pki"), ["a", "b", "c"])
    other = make_certificates(tmp_path_factory.mktemp("rogue"), ["a"])  # another CA
    paths["rogue_a"], paths["rogue_a_key"] = other["a"], other["a_key"]
    return paths


def endpoint(
    pki: dict[str, Path], name: str, port: int, peers: dict[str, int], **kw: Any
) -> GrpcFederation:
    options = {"timeout": 20.0, "connect_timeout": 3.0, "peer_timeout": 3.0, "heartbeat": 0.5}
    options.update(kw)
    return GrpcFederation(
        name,
        f"127.0.0.1:{port}",
        {p: f"127.0.0.1:{q}" for p, q in peers.items()},
        ca_cert=pki["ca"].read_bytes(),
        cert=pki[name].read_bytes(),
        key=pki[f"{name}_key"].read_bytes(),
        **options,
    )


def raw_channel(pki: dict[str, Path], port: int, *, cert: str | None, target: str = "b") -> Any:
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki["ca"].read_bytes(),
        private_key=pki[f"{cert}_key"].read_bytes() if cert else None,
        certificate_chain=pki[cert].read_bytes() if cert else None,
    )
    return grpc.secure_channel(
        f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", target)]
    )


def test_messages_of_any_size_arrive_in_order_and_closing_tells_the_peer(pki) -> None:  # type: ignore[no-untyped-def]
    pa, pb = free_port(), free_port()
    with (
        endpoint(pki, "a", pa, {"b": pb}, chunk_bytes=1 << 16) as a,
        endpoint(pki, "b", pb, {"a": pa}) as b,
    ):
        big = np.random.default_rng(0).normal(size=1_000_000)  # 8 MB: beyond gRPC's 4 MB
        a.send("b", "x", {"v": big})
        for i in range(5):
            a.send("b", "n", i)
        got = b.recv("a", "x")
        assert np.array_equal(got["v"], big)
        assert [b.recv("a", "n") for _ in range(5)] == list(range(5))
        b.send("a", "back", "ok")
        assert a.recv("b", "back") == "ok"
        a.close()
        with pytest.raises(PeerGoneError, match="'a' has closed its endpoint"):
            b.recv("a", "never", timeout=10)


def test_a_certificate_from_another_ca_is_refused(pki) -> None:  # type: ignore[no-untyped-def]
    pa, pb = free_port(), free_port()
    rogue = GrpcFederation(
        "a",
        f"127.0.0.1:{pa}",
        {"b": f"127.0.0.1:{pb}"},
        ca_cert=pki["ca"].read_bytes(),
        cert=pki["rogue_a"].read_bytes(),
        key=pki["rogue_a_key"].read_bytes(),
        connect_timeout=2.0,
        timeout=5.0,
    )
    with endpoint(pki, "b", pb, {"a": pa}) as b, rogue:
        with pytest.raises(PeerGoneError, match="party 'a' lost peer 'b'"):
            rogue.send("b", "start", 1)
        assert b._inbox.boxes == {}  # nothing was delivered: the protocol cannot start


def test_a_peer_with_another_cas_certificate_is_named_at_once_not_retried(pki) -> None:  # type: ignore[no-untyped-def]
    """The party that reaches a peer presenting another CA's certificate stops retrying at
    once and names it (in send, and in a recv waiting on that peer); the rogue peer, which
    cannot tell it anything, gives up its goodbye after a few heartbeats, not its patience."""
    pa, pb = free_port(), free_port()
    rogue = GrpcFederation(
        "a",
        f"127.0.0.1:{pa}",
        {"b": f"127.0.0.1:{pb}"},
        ca_cert=pki["ca"].read_bytes(),
        cert=pki["rogue_a"].read_bytes(),
        key=pki["rogue_a_key"].read_bytes(),
        heartbeat=0.5,
    )
    with rogue, endpoint(pki, "b", pb, {"a": pa}, connect_timeout=30.0) as b:
        began = time.monotonic()
        with pytest.raises(UntrustedPeerError) as info:
            b.send("a", "start", 1)
        assert time.monotonic() - began < 5  # not the 30 s connect timeout
        assert re.fullmatch(
            r"party 'b' refuses party 'a' at 127\.0\.0\.1:\d+: party 'a' presents a certificate "
            r"that is not signed by the federation's CA \(it was issued by CN=vflink federation "
            r"CA,O=vflink federation\)",
            str(info.value),
        ), str(info.value)
        with pytest.raises(UntrustedPeerError, match="party 'a' presents a certificate"):
            b.recv("a", "start", timeout=20)
        began = time.monotonic()
        rogue.close(reason="a bad certificate", patience=20.0)
        assert time.monotonic() - began < 6  # two heartbeats and two seconds after the refusal


def test_a_client_without_a_certificate_is_refused(pki) -> None:  # type: ignore[no-untyped-def]
    pb = free_port()
    with endpoint(pki, "b", pb, {"a": free_port()}) as b:
        channel = raw_channel(pki, pb, cert=None)
        ping = channel.unary_unary(f"/{SERVICE}/Ping")
        with pytest.raises(grpc.RpcError) as info:
            ping(json.dumps({"from": "a"}).encode(), timeout=3)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # the TLS handshake fails
        channel.close()
        assert b._inbox.boxes == {}


def test_claiming_another_partys_name_is_refused_and_logged(pki, caplog) -> None:  # type: ignore[no-untyped-def]
    pb = free_port()
    with endpoint(pki, "b", pb, {"a": free_port(), "c": free_port()}) as b:
        channel = raw_channel(pki, pb, cert="a")  # a genuine certificate of 'a' ...
        send = channel.stream_unary(f"/{SERVICE}/Send")
        header = json.dumps({"from": "c", "tag": "x", "size": 0, "seq": 0}).encode()
        with (
            caplog.at_level(logging.WARNING, logger="vfl.federation.network"),
            pytest.raises(grpc.RpcError) as info,
        ):
            send(iter([header]), timeout=5)  # ... claiming to be 'c'
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "claiming to be 'c'" in caplog.text
        channel.close()
        assert b._inbox.boxes == {}


def test_oversized_and_malformed_messages_are_refused_and_the_receiver_carries_on(pki) -> None:  # type: ignore[no-untyped-def]
    pa, pb = free_port(), free_port()
    with (
        endpoint(pki, "a", pa, {"b": pb}) as a,
        endpoint(pki, "b", pb, {"a": pa}, max_message_bytes=100_000) as b,
    ):
        with pytest.raises(PeerRefusedError, match="party 'b' refused the 'big' message"):
            a.send("b", "big", np.zeros(50_000))
        channel = raw_channel(pki, pb, cert="a")
        send = channel.stream_unary(f"/{SERVICE}/Send")
        header = json.dumps({"from": "a", "tag": "bad", "size": 7, "seq": 99}).encode()
        with pytest.raises(grpc.RpcError) as info:
            send(iter([header, b"garbage"]), timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        send_one = channel.unary_unary(f"/{SERVICE}/SendOne")
        for junk in (b"", b"\x00\x00\x00\x05{}", b"\xff" * 64):
            with pytest.raises(grpc.RpcError) as info:
                send_one(junk, timeout=5)
            assert info.value.code() in (
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.PERMISSION_DENIED,
            )
        channel.close()
        a.send("b", "fine", [1, 2, 3])
        assert b.recv("a", "fine") == [1, 2, 3]
        assert ("a", "bad") not in b._inbox.boxes


class Proxy:
    """A TCP forwarder that can be cut and restored: a transient network fault."""

    def __init__(self, target: int) -> None:
        self.target, self.port = target, free_port()
        self.up = threading.Event()
        self.conns: list[socket.socket] = []
        self.server: socket.socket | None = None

    def start(self) -> None:
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.up.set()
        threading.Thread(target=self._accept, args=(self.server,), daemon=True).start()

    def cut(self) -> None:
        self.up.clear()
        assert self.server is not None
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self.server.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.conns.clear()

    def _accept(self, server: socket.socket) -> None:
        while self.up.is_set():
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the endpoint behind is gone (the test is ending)
                client.close()
                continue
            self.conns += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def test_a_peer_back_within_the_retry_window_is_reconnected(pki) -> None:  # type: ignore[no-untyped-def]
    pa, pb = free_port(), free_port()
    proxy = Proxy(pb)
    proxy.start()
    with (
        endpoint(pki, "a", pa, {"b": proxy.port}, peer_timeout=10.0) as a,
        endpoint(pki, "b", pb, {"a": pa}) as b,
    ):
        a.send("b", "one", 1)
        assert b.recv("a", "one") == 1
        proxy.cut()
        threading.Timer(1.5, proxy.start).start()  # the network comes back after 1.5 s
        began = time.monotonic()
        a.send("b", "two", 2)  # retried until the link is back
        assert time.monotonic() - began >= 1.0
        assert b.recv("a", "two") == 2
        assert [r.tag for r in a.transcript.records] == ["one", "two"]
    proxy.cut()


# -- the same training over real processes ----------------------------------------------------


def _breast_parts() -> tuple[dict[str, Any], Any]:
    import pandas as pd
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    x, y = x.iloc[:300].reset_index(drop=True), y.iloc[:300].reset_index(drop=True)
    cols = list(x.columns)
    parts = {"imaging": x[cols[:10]], "lab": x[cols[10:]]}
    return {k: pd.DataFrame(v) for k, v in parts.items()}, y


MODEL = {
    "max_iter": 2,
    "batch_size": 100,
    "tol": None,
    "random_state": 3,
    "protocol": "shared_coordinator",
    "key_bits": 1024,
    "insecure": True,
}


def _party_process(name: str, ports: dict[str, int], pki: dict[str, str], out: str) -> None:
    import warnings

    from vfl.linear import VerticalLogisticRegression

    warnings.simplefilter("ignore")
    parts, y = _breast_parts()
    fed = GrpcFederation.from_files(
        name,
        f"127.0.0.1:{ports[name]}",
        {p: f"127.0.0.1:{q}" for p, q in ports.items() if p != name},
        ca=pki["ca"],
        cert=pki[name],
        key=pki[f"{name}_key"],
        timeout=60.0,
        connect_timeout=30.0,
    )
    est = VerticalLogisticRegression(**MODEL, coordinator="c")  # type: ignore[arg-type]
    with fed:
        est.fit_party(
            fed,
            parts.get(name),
            y if name == "imaging" else None,
            label_party="imaging",
            data_parties=["imaging", "lab"],
        )
    if name != "c":
        est.parts_[name].save(Path(out, f"{name}.npz"))


def test_training_over_grpc_processes_gives_the_in_process_model(tmp_path: Path) -> None:
    from vfl.linear import PartyModel, VerticalLogisticRegression

    names = ["imaging", "lab", "c"]
    pki = {k: str(v) for k, v in make_certificates(tmp_path / "pki", names).items()}
    ports = {n: free_port() for n in names}
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_party_process, args=(n, ports, pki, str(tmp_path))) for n in names]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0, f"a party process failed (exit code {p.exitcode})"
    parts, y = _breast_parts()
    local = VerticalLogisticRegression(**MODEL, coordinator="c").fit(  # type: ignore[arg-type]
        parts, y, label_party="imaging"
    )
    # the secret-shared protocol truncates random shares: equal to a unit of 2**-24 per step
    for name in ("imaging", "lab"):
        remote = PartyModel.load(tmp_path / f"{name}.npz")
        np.testing.assert_allclose(remote.coef, local.parts_[name].coef, rtol=0, atol=1e-5)
        assert remote.intercept == pytest.approx(local.parts_[name].intercept, abs=1e-5)


def test_a_restarted_sender_is_refused_and_its_peer_told(pki) -> None:  # type: ignore[no-untyped-def]
    pa, pb = free_port(), free_port()
    with endpoint(pki, "b", pb, {"a": pa}) as b:
        with endpoint(pki, "a", pa, {"b": pb}) as a:
            a.send("b", "one", 1)
            assert b.recv("a", "one") == 1
        # a new process of 'a' (a new session) while 'b' is mid-job: refused on both sides
        with (
            endpoint(pki, "a", pa, {"b": pb}) as again,
            pytest.raises(PeerRefusedError, match="earlier process of 'a'"),
        ):
            again.send("b", "one", 1)
        with pytest.raises(PeerGoneError, match="'a' has restarted"):
            b.recv("a", "two", timeout=5)


def test_certificates_refuse_unsafe_names_and_hosts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be a party name"):
        make_certificates(tmp_path, ["../evil"])
    with pytest.raises(ValueError, match="are also party names"):
        make_certificates(tmp_path, ["lab", "localhost"])


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_the_endpoint_negotiates_tls_1_3_with_a_client_certificate(pki) -> None:  # type: ignore[no-untyped-def]
    pb = free_port()
    with endpoint(pki, "b", pb, {"a": free_port()}):
        client = ["-cert", str(pki["a"]), "-key", str(pki["a_key"]), "-CAfile", str(pki["ca"])]
        result = subprocess.run(
            [
                "openssl",
                "s_client",
                "-connect",
                f"127.0.0.1:{pb}",
                "-brief",
                "-alpn",
                "h2",
                *client,
            ],
            input=b"",
            capture_output=True,
            timeout=30,
        )
    text = (result.stdout + result.stderr).decode(errors="replace")
    assert "Protocol version: TLSv1.3" in text
    assert "Verification: OK" in text


def test_handshake_refusals_are_logged_by_the_receiving_party(pki, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A certificate from another CA, or none, fails the TLS handshake inside gRPC's core,
    which logs it on the receiving process's standard error (the party's log)."""
    import sys

    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from vfl.federation.network import GrpcFederation\n"
            f"f = GrpcFederation.from_files('b', '127.0.0.1:{port}', {{'a': '127.0.0.1:9'}}, "
            f"ca=r'{pki['ca']}', cert=r'{pki['b']}', key=r'{pki['b_key']}').start()\n"
            "print('up', flush=True)\n"
            "sys.stdin.read()\n"
            "f.close()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # gRPC's default verbosity, whatever this process's environment holds (importing
        # Flower, in another test, sets GRPC_VERBOSITY=error, which would silence the log)
        env={k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"},
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        rogue = GrpcFederation(
            "a",
            f"127.0.0.1:{free_port()}",
            {"b": f"127.0.0.1:{port}"},
            ca_cert=pki["ca"].read_bytes(),
            cert=pki["rogue_a"].read_bytes(),
            key=pki["rogue_a_key"].read_bytes(),
            connect_timeout=1.5,
        )
        with rogue, pytest.raises(PeerGoneError):
            rogue.send("b", "x", 1)
        channel = raw_channel(pki, port, cert=None)
        with pytest.raises(grpc.RpcError):
            channel.unary_unary(f"/{SERVICE}/Ping")(b"{}", timeout=2)
        channel.close()
    finally:
        _, err = server.communicate(input="", timeout=30)
    failures = [line for line in err.splitlines() if "Handshake failed" in line]
    assert any("certificate signature failure" in line for line in failures), err[-2000:]
    assert any("PEER_DID_NOT_RETURN_A_CERTIFICATE" in line for line in failures), err[-2000:]
