"""A test helper: every party its own GrpcFederation endpoint on loopback (mutual TLS), each
in a thread of this process."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vfl.federation.base import Federation


def run_endpoints(
    folder: Path, names: list[str], body: Callable[[str, Federation], Any], *, wait: float = 120
) -> dict[str, Any]:
    """``body(name, federation)`` for every party, each on its own endpoint; the results by
    party. Raises the first party's exception, if any."""
    from vfl.federation.certs import make_certificates
    from vfl.federation.network import GrpcFederation

    pki = make_certificates(folder / "pki", names)
    ports = {}
    for name in names:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports[name] = int(s.getsockname()[1])
    results: dict[str, Any] = {}
    failures: list[BaseException] = []

    def party(name: str) -> None:
        try:
            federation = GrpcFederation(
                name,
                f"127.0.0.1:{ports[name]}",
                {p: f"127.0.0.1:{q}" for p, q in ports.items() if p != name},
                ca_cert=pki["ca"].read_bytes(),
                cert=pki[name].read_bytes(),
                key=pki[f"{name}_key"].read_bytes(),
                timeout=60.0,
                connect_timeout=30.0,
            )
            with federation:
                results[name] = body(name, federation)
        except BaseException as exc:  # raised below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=party, args=(n,)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=wait)
    if failures:
        raise failures[0]
    return results
