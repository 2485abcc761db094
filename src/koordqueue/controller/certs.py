"""A self-signed CA and serving certificate for the admission webhook.

The controller makes its own TLS material so that the webhook works with no
cert-manager: a CA (whose PEM goes into the webhook configuration's caBundle) and a
serving certificate for the names the API server dials. Rotation is regeneration.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class ServingCert:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    not_after: dt.datetime

    def write(self, directory: Path) -> tuple[Path, Path]:
        """Write cert and key (key mode 0600); return their paths."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        cert_path, key_path = directory / "tls.crt", directory / "tls.key"
        cert_path.write_bytes(self.cert_pem + self.ca_pem)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.key_pem)
        return cert_path, key_path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_serving_cert(hosts: list[str], now: dt.datetime | None = None) -> ServingCert:
    """A fresh CA and a certificate it signs for ``hosts`` (DNS names or IP addresses)."""
    now = now or dt.datetime.now(dt.UTC)
    not_after = now + VALIDITY
    ca_key = ec.generate_private_key(ec.SECP256R1())
    # Every replica has a CA of its own in one caBundle: distinct names and key ids let a
    # verifier find the right one (OpenSSL picks by name).
    ca_name = _name(f"koord-queue-webhook-ca-{secrets.token_hex(4)}")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCert(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        not_after=not_after,
    )


def needs_rotation(cert: ServingCert, now: dt.datetime, margin: dt.timedelta = dt.timedelta(days=30)) -> bool:
    return now >= cert.not_after - margin
