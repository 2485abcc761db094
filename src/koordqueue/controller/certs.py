"""A self-signed CA and serving certificate for the admission webhook, or the files
someone else keeps renewed.

The controller makes its own TLS material so that the webhook works with no
cert-manager: a CA (whose PEM goes into the webhook configuration's caBundle) and a
serving certificate for the names the API server dials. Rotation is regeneration.
With cert-manager (or any certificate directory given) the files are renewed under the
running process: `CertificateFiles` loads them again when they change, or the pods would
serve the old certificate after the caBundle moved on, and every create of a queued kind
would fail under `failurePolicy: Fail`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import logging
import os
import secrets
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

log = logging.getLogger(__name__)

VALIDITY = dt.timedelta(days=365)
CERT_RELOAD_SECONDS = 10.0  # how often given certificate files are looked at for a renewal


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


Stamp = tuple[tuple[int, int, int], tuple[int, int, int]]


class CertificateFiles:
    """A serving certificate and key in files another party renews (cert-manager's Secret as
    the kubelet mounts it: a renewal swaps a symlink, so the files' inode, size and mtime
    change). `reload_if_changed` puts a changed pair into the live SSLContext: new handshakes
    get the new certificate, open connections keep theirs. A pair that does not load (caught
    half-written: a new certificate with the old key) is tried again at the next look, and
    the pair in use is kept meanwhile: loading it straight into the live context could leave
    it holding a certificate whose key it does not have."""

    def __init__(self, context: ssl.SSLContext, cert_path: Path, key_path: Path) -> None:
        self.context = context
        self.cert_path = cert_path
        self.key_path = key_path
        self.loaded: Stamp | None = None
        self._refused: Stamp | None = None

    def _stamp(self) -> Stamp | None:
        try:
            cert, key = os.stat(self.cert_path), os.stat(self.key_path)
        except OSError:
            return None  # in the middle of a swap: look again later
        return (cert.st_ino, cert.st_size, cert.st_mtime_ns), (key.st_ino, key.st_size, key.st_mtime_ns)

    def load(self) -> None:
        """The first load, at start: a pair that does not load is an error, as it always was."""
        stamp = self._stamp()
        self._load_checked()
        self.loaded = stamp

    def reload_if_changed(self) -> bool:
        """Load the pair again if the files changed since; True when a new pair is in use."""
        stamp = self._stamp()
        if stamp is None or stamp == self.loaded:
            return False
        try:
            self._load_checked()
        except (OSError, ssl.SSLError, ValueError) as e:
            if stamp != self._refused:  # said once per version of the files
                log.warning("webhook: the renewed certificate %s (key %s) does not load, the one loaded before "
                            "is served until it does: %s", self.cert_path, self.key_path, e)
                self._refused = stamp
            return False
        log.info("webhook: serving the renewed certificate %s", self.cert_path)
        self.loaded = stamp
        return True

    def _load_checked(self) -> None:
        """Read both files once, check the pair in a scratch context, then load the same bytes
        into the live one (load_cert_chain only takes paths: a private copy of what was read)."""
        cert, key = self.cert_path.read_bytes(), self.key_path.read_bytes()
        with tempfile.TemporaryDirectory(prefix="koord-queue-cert-") as scratch:
            cert_copy, key_copy = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
            cert_copy.write_bytes(cert)
            fd = os.open(key_copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(key)
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_copy, key_copy)
            self.context.load_cert_chain(cert_copy, key_copy)

    async def keep(self) -> None:
        """Look at the files every CERT_RELOAD_SECONDS, for as long as the server runs."""
        while True:
            await asyncio.sleep(CERT_RELOAD_SECONDS)
            self.reload_if_changed()
