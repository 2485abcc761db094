"""The certificates and keys a real control plane needs, made as kubeadm makes them.

A cluster CA signs kube-apiserver's serving certificate and every client's
certificate (the user is the CN, its groups the O); a front-proxy CA signs the
certificate kube-apiserver presents to aggregated API servers; an RSA key signs
service-account tokens.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=3650)


PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _pem_key(key: PrivateKey) -> bytes:
    # RSA keys as PKCS #1 ("RSA PRIVATE KEY"): some readers take no other (cert-controller's CA).
    form = serialization.PrivateFormat.TraditionalOpenSSL if isinstance(key, rsa.RSAPrivateKey) \
        else serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption())


def _names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def write_private(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


@dataclass(frozen=True)
class CertificateAuthority:
    name: str
    cert: x509.Certificate
    key: PrivateKey

    @classmethod
    def create(cls, name: str, hosts: tuple[str, ...] = (), rsa_key: bool = False) -> CertificateAuthority:
        """A new CA; `hosts` become SANs (a CA that some verifier checks by name)."""
        key: PrivateKey = rsa.generate_private_key(public_exponent=65537, key_size=2048) if rsa_key \
            else ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        return cls(name, builder.sign(key, hashes.SHA256()), key)

    @classmethod
    def load(cls, name: str, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"CA {name}: not an EC or RSA key")
        return cls(name, x509.load_pem_x509_certificate(cert_pem), key)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _pem_key(self.key)

    def issue(self, common_name: str, groups: tuple[str, ...] = (), hosts: tuple[str, ...] = (),
              server: bool = False) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) for a client (`groups` as O) or a server (`hosts` as SANs)."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
                            + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                           critical=False)
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    def write(self, directory: Path) -> tuple[Path, Path]:
        cert = directory / f"{self.name}.crt"
        cert.write_bytes(self.pem)
        return cert, write_private(directory / f"{self.name}.key", self.key_pem)

    def write_issued(self, directory: Path, stem: str, common_name: str, groups: tuple[str, ...] = (),
                     hosts: tuple[str, ...] = (), server: bool = False) -> tuple[Path, Path]:
        cert_pem, key_pem = self.issue(common_name, groups, hosts, server)
        cert = directory / f"{stem}.crt"
        cert.write_bytes(cert_pem)
        return cert, write_private(directory / f"{stem}.key", key_pem)


def write_service_account_key(directory: Path) -> tuple[Path, Path]:
    """(public, private) PEM files of the key that signs service-account tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = directory / "sa.pub"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return public, write_private(directory / "sa.key", _pem_key(key))
