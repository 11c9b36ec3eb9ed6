"""What a party checks of certificates: its own before it starts, a peer's when a TLS
handshake with it fails.

A party whose certificate the federation's CA did not sign would otherwise learn nothing
clear: gRPC retries the refused handshakes silently until the connect timeout, and logs each
one deep in its core. So:

* :func:`check_own_certificate` -- before a party contacts anyone (``vflink party`` runs it
  first), its own certificate must be signed by the CA file it was given, be valid now, name
  the party (common name and DNS subject alternative name, what its peers check) and match its
  key. A party holding another CA's certificate learns it at once, locally, with the files.
* :func:`handshake_failure` and :func:`explain_peer_certificate` -- when a call to a peer fails
  because the TLS handshake failed on the certificate it presents (gRPC's status details say
  so: a bad signature, an unknown issuer, an expired certificate, another name), the caller
  fetches the certificate the peer presents (:func:`fetch_certificate`, Python's :mod:`ssl`,
  not verified) and says what is wrong with it against its own CA file. A handshake failure
  does not get better by waiting, unlike a peer that is not up yet: the caller stops retrying.

Certificates are read with ``cryptography``. A CA file may hold several CA certificates (a
bundle); a party's certificate file may carry intermediate CA certificates after its own.
"""

from __future__ import annotations

import datetime
import socket
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertificateError",
    "check_own_certificate",
    "explain_peer_certificate",
    "fetch_certificate",
    "handshake_failure",
]


class CertificateError(ValueError):
    """A party's own certificate or key does not fit the federation; names the files and the
    fix."""


# what gRPC's status details (BoringSSL's errors) say when a handshake failed on the
# certificate the other side presented, rather than on a connection that is not there yet
_CERTIFICATE_FAILURES = (
    "certificate_verify_failed",
    "certificate signature failure",
    "bad_signature",
    "unable to get local issuer certificate",
    "self signed certificate",
    "self-signed certificate",
    "certificate has expired",
    "certificate is not yet valid",
    "not in peer certificate",
    "unknown ca",
    "bad certificate",
)


def handshake_failure(details: str | None) -> bool:
    """Whether gRPC's status ``details`` report a TLS handshake that failed on the peer's
    certificate (not a peer that is down, not up yet, or closed the connection)."""
    text = (details or "").lower()
    return "handshake" in text and any(marker in text for marker in _CERTIFICATE_FAILURES)


def _load_certificates(pem: bytes, what: str) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateError(f"{what} is not a PEM certificate ({exc})") from None
    if not certificates:
        raise CertificateError(f"{what} holds no certificate")
    return certificates


def _issued_by(certificate: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _signed_by(
    certificate: x509.Certificate,
    chain: Sequence[x509.Certificate],
    authorities: Sequence[x509.Certificate],
) -> bool:
    """Whether ``certificate`` leads to one of ``authorities`` through ``chain`` (the
    intermediate certificates that came with it), each link a verified signature."""
    current, seen = certificate, 0
    while seen <= len(chain):
        if any(_issued_by(current, ca) for ca in authorities):
            return True
        parents = [c for c in chain if c is not current and _issued_by(current, c)]
        if not parents:
            return False
        current, seen = parents[0], seen + 1
    return False


def _window(certificate: Any) -> tuple[datetime.datetime, datetime.datetime]:
    """The certificate's validity period, in UTC (``cryptography`` >= 42 names it ``_utc``)."""
    utc = datetime.timezone.utc
    start = getattr(certificate, "not_valid_before_utc", None)
    end = getattr(certificate, "not_valid_after_utc", None)
    if start is None or end is None:  # pragma: no cover - cryptography < 42
        start = certificate.not_valid_before.replace(tzinfo=utc)
        end = certificate.not_valid_after.replace(tzinfo=utc)
    return start, end


def _names(certificate: x509.Certificate) -> tuple[list[str], list[str]]:
    """The certificate's common names and DNS subject alternative names."""
    common = [str(a.value) for a in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        dns = [str(n) for n in extension.value.get_values_for_type(x509.DNSName)]
    except x509.ExtensionNotFound:
        dns = []
    return common, dns


def _problems(
    certificate: x509.Certificate,
    chain: Sequence[x509.Certificate],
    authorities: Sequence[x509.Certificate],
    party: str,
    ca: str | None,
) -> list[str]:
    """What the federation's peers would refuse in ``party``'s ``certificate`` (``ca`` names
    the CA file, if known)."""
    found = []
    if not _signed_by(certificate, chain, authorities):
        which = f"{ca}, the federation's CA" if ca else "the federation's CA"
        issuer = certificate.issuer.rfc4514_string() or "an unnamed issuer"
        found.append(f"is not signed by {which} (it was issued by {issuer})")
    start, end = _window(certificate)
    now = datetime.datetime.now(datetime.timezone.utc)
    if now < start:
        found.append(f"is not valid before {start:%Y-%m-%d %H:%M} UTC")
    if now > end:
        found.append(f"expired on {end:%Y-%m-%d %H:%M} UTC")
    common, dns = _names(certificate)
    if party not in common:
        found.append(f"has the common name {common or 'none'}, not {party!r}")
    if party not in dns:
        found.append(f"does not name {party!r} among its DNS names ({dns or 'none'})")
    try:  # every party serves and connects: both uses, when the certificate limits them
        usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usage = None
    if usage is not None:
        wanted = {
            ExtendedKeyUsageOID.SERVER_AUTH: "server",
            ExtendedKeyUsageOID.CLIENT_AUTH: "client",
        }
        missing = [use for oid, use in wanted.items() if oid not in usage]
        if missing:
            found.append(f"does not allow TLS {' and '.join(missing)} authentication")
    return found


def check_own_certificate(
    name: str,
    *,
    ca: str | Path,
    cert: str | Path,
    key: str | Path,
) -> None:
    """Check party ``name``'s own certificate and key against the CA file it was given,
    before it contacts anyone.

    Raises
    ------
    CertificateError
        A file that cannot be read or is not PEM; a certificate not signed by the CA (directly
        or through intermediates in its file), not valid now, not naming the party as its
        common name and a DNS name, or not matching the key. The message names the party, the
        files and the fix.
    """
    pem = {}
    for what, path in (("CA certificate", ca), ("certificate", cert), ("key", key)):
        try:
            pem[what] = Path(path).read_bytes()
        except OSError as exc:
            raise CertificateError(
                f"party {name!r}: cannot read its {what} {path}: {exc}"
            ) from None
    authorities = _load_certificates(pem["CA certificate"], f"party {name!r}: the CA file {ca}")
    own, *chain = _load_certificates(pem["certificate"], f"party {name!r}: its certificate {cert}")
    problems = _problems(own, chain, authorities, name, str(ca))
    if problems:
        raise CertificateError(
            f"party {name!r}: its certificate {cert} {'; it '.join(problems)}: its peers will "
            f"refuse it. Use a certificate for {name!r} signed by the federation's CA (vflink "
            "certs makes them for a pilot), or the federation's CA file"
        )
    try:
        private = serialization.load_pem_private_key(pem["key"], password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(
            f"party {name!r}: its key {key} is not an unencrypted PEM private key ({exc})"
        ) from None
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if private.public_key().public_bytes(der, spki) != own.public_key().public_bytes(der, spki):
        raise CertificateError(
            f"party {name!r}: its key {key} is not the key of its certificate {cert}: pass the "
            "key that was made with it"
        )


def fetch_certificate(address: str, *, timeout: float = 2.0) -> list[bytes]:
    """The certificates (DER, its own first, then any intermediates where this Python can tell
    them: 3.13 and later) that the TLS server at ``host:port`` presents, not verified; empty
    when none can be had (nothing listens, not TLS, the handshake fails before it).

    Offers no client certificate: a server requiring one (every party) refuses the connection
    after its own certificate has been sent, which is all this needs."""
    host, _, port = address.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # read only: trust is decided against the CA apart
    try:
        with (
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw,
            context.wrap_socket(raw) as tls,
        ):
            unverified = getattr(tls, "get_unverified_chain", None)  # Python 3.13
            if unverified is not None:
                return [bytes(c) for c in unverified() or []]
            own = tls.getpeercert(binary_form=True)
            return [own] if own else []
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return []


def explain_peer_certificate(
    peer: str, certificates: Sequence[bytes], *, ca_cert: bytes, ca_name: str | None = None
) -> str | None:
    """What the federation would refuse in the ``certificates`` (DER: the peer's own, then any
    intermediates) that party ``peer`` presents, against its CA (``ca_cert``, PEM; ``ca_name``
    names its file in the message); None when nothing is (the failure lies elsewhere)."""
    try:
        own, *chain = [x509.load_der_x509_certificate(c) for c in certificates]
        authorities = _load_certificates(ca_cert, ca_name or "the CA certificate")
    except (ValueError, CertificateError):
        return None
    problems = _problems(own, chain, authorities, peer, ca_name)
    if not problems:
        return None
    return f"party {peer!r} presents a certificate that {'; it '.join(problems)}"
