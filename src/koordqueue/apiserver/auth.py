"""Who may talk to the embedded server: one bearer token per state directory, over TLS.

The server listens on loopback only. It speaks HTTPS with a certificate of its own
(a self-signed CA made once per state directory, the server certificate signed by
it for 127.0.0.1/localhost), because kubectl 1.32 does not send a bearer token over
plain HTTP: observed, a `--token` to an `http://` server goes out with no
`Authorization` header at all, so every request came back 401 ("the server has
asked for the client to provide credentials"). Over HTTPS it sends it. The
kubeconfig carries the CA (`certificate-authority-data`), so kubectl and our
Python client verify the server. The token keeps other local users out; the
token, the keys and the kubeconfig are readable by their owner only.
"""

from __future__ import annotations

import base64
import datetime as dt
import hmac
import ipaddress
import os
import secrets
import ssl
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TOKEN_FILE = "token"
KUBECONFIG_FILE = "kubeconfig"
CONTEXT = "koord-queue-local"
CA_FILE = "ca.crt"
CERT_FILE = "server.crt"
KEY_FILE = "server.key"
CERT_DAYS = 3650


def ensure_state_dir(state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def load_or_create_token(state_dir: Path) -> str:
    path = state_dir / TOKEN_FILE
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
    token = secrets.token_urlsafe(32)
    _write_private(path, token + "\n")
    return token


def authorized(header: str | None, token: str) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer "):].strip().encode(), token.encode())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _make_certificates(state_dir: Path) -> None:
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=CERT_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "koord-queue-local-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "koord-queue-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_private(state_dir / KEY_FILE, _pem_key(key).decode())
    _write_private(state_dir / CERT_FILE, cert.public_bytes(serialization.Encoding.PEM).decode())
    _write_private(state_dir / CA_FILE, ca.public_bytes(serialization.Encoding.PEM).decode())


def load_or_create_certificates(state_dir: Path) -> tuple[ssl.SSLContext, bytes]:
    """(server SSL context, CA certificate PEM); made once, kept across restarts."""
    paths = [state_dir / name for name in (CA_FILE, CERT_FILE, KEY_FILE)]
    if not all(p.exists() and p.stat().st_size for p in paths):
        _make_certificates(state_dir)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        ctx.load_cert_chain(state_dir / CERT_FILE, state_dir / KEY_FILE)
    except ssl.SSLError:  # damaged files: make new ones rather than refuse to start
        _make_certificates(state_dir)
        ctx.load_cert_chain(state_dir / CERT_FILE, state_dir / KEY_FILE)
    return ctx, (state_dir / CA_FILE).read_bytes()


def client_ssl_context(ca_pem: bytes) -> ssl.SSLContext:
    """What a client of ours verifies the server with."""
    return ssl.create_default_context(cadata=ca_pem.decode())


def write_kubeconfig(path: Path, server_url: str, token: str, ca_pem: bytes | None = None) -> None:
    cluster: dict[str, str] = {"server": server_url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
        "current-context": CONTEXT,
        "preferences": {},
    }
    _write_private(path, yaml.safe_dump(config, sort_keys=False))
