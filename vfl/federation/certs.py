"""Certificates for pilots: a federation CA and one key and certificate per party.

Made with ``cryptography``: ECDSA P-256 keys, SHA-256 signatures. Each party certificate names
the party in its common name and as a DNS subject alternative name (what
:class:`~vfl.federation.network.GrpcFederation` checks), plus any extra host names or IP
addresses given, and may serve and connect (server and client authentication).

Real deployments may bring their own PKI instead: any CA works, as long as every party
certificate carries the party's name (as in the federation config) as its common name (what a
server checks of a client) and as a DNS subject alternative name (what a client checks of a
server), names no other party, allows both TLS server and client authentication, and every
party has the CA certificate. The CA's private key should then live offline;
:func:`make_certificates` keeps it beside the certificates only because a pilot has no better
place.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from vfl.federation.config import NAME_RE as _NAME_RE
from vfl.files import write_atomically

__all__ = ["make_certificates"]


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "vflink federation"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_certificates(
    folder: str | Path,
    parties: Iterable[str],
    *,
    hosts: Iterable[str] = ("localhost", "127.0.0.1"),
    days: int = 365,
) -> dict[str, Path]:
    """Create ``ca.pem`` / ``ca.key`` and ``<party>.pem`` / ``<party>.key`` in ``folder``.

    Parameters
    ----------
    folder : path
        Where to write (created if missing). Private keys are written with mode 0600.
    parties : iterable of str
        The party names, as in the federation config.
    hosts : iterable of str
        Extra DNS names or IP addresses to put in every party certificate.
    days : int
        Validity of the certificates.

    Returns
    -------
    dict of str to Path
        ``"ca"``, ``"ca_key"``, and per party ``"<party>"`` (certificate) and
        ``"<party>_key"``.
    """
    names = [str(p) for p in parties]
    if not names:
        raise ValueError("make_certificates needs at least one party name")
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate party names in {names}")
    for name in names:
        if not _NAME_RE.fullmatch(name) or name in ("ca", "ca_key"):
            raise ValueError(
                f"{name!r} cannot be a party name: use 1-64 letters, digits, '_', '.' or '-' "
                "(not 'ca')"
            )
    hosts = [str(h) for h in hosts]
    clash = sorted(set(hosts) & set(names))
    if clash:
        raise ValueError(
            f"hosts {clash} are also party names: every certificate lists the hosts, so a "
            "party could then pass for another"
        )
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("vflink federation CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca": out / "ca.pem", "ca_key": out / "ca.key"}
    write_atomically(paths["ca"], ca_cert.public_bytes(serialization.Encoding.PEM), private=False)
    write_atomically(paths["ca_key"], _pem_key(ca_key), private=True)
    extra: list[x509.GeneralName] = []
    for host in hosts:
        try:
            extra.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            extra.append(x509.DNSName(host))
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(name), *extra]), critical=False
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        paths[name] = out / f"{name}.pem"
        paths[f"{name}_key"] = out / f"{name}.key"
        write_atomically(paths[name], cert.public_bytes(serialization.Encoding.PEM), private=False)
        write_atomically(paths[f"{name}_key"], _pem_key(key), private=True)
    return paths
