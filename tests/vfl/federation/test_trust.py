"""What a party checks of its own certificate before it starts, and of a peer's when a TLS
handshake fails (no network here: see test_network.py for the handshakes themselves)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from vfl.federation.certs import make_certificates
from vfl.federation.trust import (
    CertificateError,
    check_own_certificate,
    explain_peer_certificate,
    handshake_failure,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    paths = make_certificates(tmp_path_factory.mktemp("pki"), ["a", "b"])
    other = make_certificates(tmp_path_factory.mktemp("rogue"), ["a"])  # another CA
    paths["rogue_a"], paths["rogue_a_key"] = other["a"], other["a_key"]
    expired = make_certificates(tmp_path_factory.mktemp("expired"), ["a"], days=0)
    paths["old_ca"], paths["old_a"], paths["old_a_key"] = (
        expired["ca"],
        expired["a"],
        expired["a_key"],
    )
    return paths


def der(path: Path) -> bytes:
    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    return certificate.public_bytes(serialization.Encoding.DER)


def test_a_party_with_the_federations_certificate_passes(pki: dict[str, Path]) -> None:
    check_own_certificate("a", ca=pki["ca"], cert=pki["a"], key=pki["a_key"])


def test_a_certificate_from_another_ca_is_named_with_both_files(pki: dict[str, Path]) -> None:
    with pytest.raises(CertificateError) as info:
        check_own_certificate("a", ca=pki["ca"], cert=pki["rogue_a"], key=pki["rogue_a_key"])
    message = str(info.value)
    assert message.startswith(f"party 'a': its certificate {pki['rogue_a']} is not signed by ")
    assert f"{pki['ca']}, the federation's CA (it was issued by CN=vflink federation CA" in message
    assert "its peers will refuse it" in message


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("key", "its key .*b.key is not the key of its certificate .*a.pem"),
        ("name", r"has the common name \['a'\], not 'b'; it does not name 'b' among its DNS"),
        ("expired", "expired on"),
        ("missing", "cannot read its certificate .*nope.pem"),
        ("not pem", "is not a PEM certificate"),
    ],
)
def test_every_problem_of_an_own_certificate_is_named(
    pki: dict[str, Path], tmp_path: Path, case: str, match: str
) -> None:
    files = {"name": "a", "ca": pki["ca"], "cert": pki["a"], "key": pki["a_key"]}
    if case == "key":
        files["key"] = pki["b_key"]
    elif case == "name":
        files["name"] = "b"
    elif case == "expired":
        files.update(ca=pki["old_ca"], cert=pki["old_a"], key=pki["old_a_key"])
    elif case == "missing":
        files["cert"] = tmp_path / "nope.pem"
    else:
        (tmp_path / "junk.pem").write_text("not a certificate")
        files["cert"] = tmp_path / "junk.pem"
    name = str(files.pop("name"))
    with pytest.raises(CertificateError, match=match):
        check_own_certificate(name, **files)  # type: ignore[arg-type]


def test_a_peers_certificate_is_explained_against_the_ca(pki: dict[str, Path]) -> None:
    ca = pki["ca"].read_bytes()
    assert explain_peer_certificate("a", [der(pki["a"])], ca_cert=ca, ca_name="ca.pem") is None
    why = explain_peer_certificate("a", [der(pki["rogue_a"])], ca_cert=ca, ca_name="ca.pem")
    assert why is not None
    assert why.startswith("party 'a' presents a certificate that is not signed by ca.pem")
    # a certificate for another party than the one reached
    why = explain_peer_certificate("b", [der(pki["a"])], ca_cert=ca)
    assert why is not None and "does not name 'b'" in why
    assert explain_peer_certificate("a", [b"junk"], ca_cert=ca) is None  # nothing to say


def test_handshake_failures_on_a_certificate_are_told_from_peers_not_up_yet() -> None:
    # status details gRPC gives (grpcio 1.85) for a server certificate from another CA, for a
    # peer whose server is down, and for a peer that refused our certificate
    signed_elsewhere = (
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:40611: Tls "
        "handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1a000064:ECDSA "
        "routines:OPENSSL_internal:BAD_SIGNATURE: certificate signature failure: OK"
    )
    down = (
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:47102: "
        "Failed to connect to remote host: Connection refused"
    )
    closed = (
        "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:1.2.3.4:5: Socket closed"
    )
    assert handshake_failure(signed_elsewhere)
    assert not handshake_failure(down)
    assert not handshake_failure(closed)
    assert not handshake_failure(None)
