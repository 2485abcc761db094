"""Fixtures for the kube tests: TLS material made on the fly, the embedded API server."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from koordqueue.kube.client import KubeClient, RetryPolicy
from koordqueue.kube.config import load_config

if TYPE_CHECKING:
    from koordqueue.apiserver.server import APIServer


@dataclass
class TLSFiles:
    ca_pem: bytes
    server_cert: Path
    server_key: Path
    client_cert_pem: bytes
    client_key_pem: bytes
    ca: Path
    client_cert: Path
    client_key: Path


def _cert(subject: str, issuer: x509.Name | None, issuer_key: ec.EllipticCurvePrivateKey | None,
          *, ca: bool = False, san: list[x509.GeneralName] | None = None,
          usage: list[x509.ObjectIdentifier] | None = None) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False), critical=True)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256()), key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    d = tmp_path_factory.mktemp("tls")
    ca_cert, ca_key = _cert("test-ca", None, None, ca=True)
    server, server_key = _cert(
        "kube.test", ca_cert.subject, ca_key,
        san=[x509.DNSName("kube.test")],
        usage=[ExtendedKeyUsageOID.SERVER_AUTH])
    client, client_key = _cert("alice", ca_cert.subject, ca_key, usage=[ExtendedKeyUsageOID.CLIENT_AUTH])
    files = {
        "ca.crt": _pem(ca_cert), "server.crt": _pem(server), "server.key": _key_pem(server_key),
        "client.crt": _pem(client), "client.key": _key_pem(client_key),
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    return TLSFiles(
        ca_pem=files["ca.crt"], server_cert=d / "server.crt", server_key=d / "server.key",
        client_cert_pem=files["client.crt"], client_key_pem=files["client.key"],
        ca=d / "ca.crt", client_cert=d / "client.crt", client_key=d / "client.key",
    )


# --- the embedded API server ---------------------------------------------------------

FAST_RETRY = RetryPolicy(attempts=6, base_delay=0.01, max_delay=0.05)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[APIServer]:
    from koordqueue.apiserver.server import APIServer  # imported here: unit tests run without it

    srv = APIServer(tmp_path / "state")
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def client(server: APIServer) -> AsyncIterator[KubeClient]:
    async with KubeClient(load_config(str(server.kubeconfig_path)), qps=0, retry=FAST_RETRY) as c:
        yield c
