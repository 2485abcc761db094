"""Item 6 of issue 29: certificates from cert-manager were read once.

With `webhook.certManager.enable` the serving certificate is a Secret the kubelet mounts;
a renewal swaps the files (a `..data` symlink, atomically) and cainjector moves the
caBundle on. A webhook still serving the pair it read at start is then refused by the API
server, and every create of a queued kind fails under `failurePolicy: Fail` (or, under
`Ignore`, runs unsuspended). The files are looked at again while the server runs: a new
TLS handshake gets the renewed certificate.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from cryptography import x509

from koordqueue.api import constants as c
from koordqueue.controller import certs
from koordqueue.controller.certs import ServingCert, make_serving_cert
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.webhook import MUTATING_WEBHOOKS, SuspendWebhook, webhook_configuration
from koordqueue.kube.client import KubeClient
from tests.controller.conftest import SystemFactory, pytorch_job, quick_config

pytestmark = pytest.mark.timeout(120)

WEBHOOK_CONFIG = "koord-queue"  # up.py's name, which the system fixture registers


class MountedSecret:
    """A directory laid out as the kubelet mounts a Secret: tls.crt and tls.key are symlinks
    through `..data`, which a renewal points at a new timestamped directory in one rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0
        root.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            (root / name).symlink_to(Path("..data") / name)

    def write(self, cert: bytes, key: bytes) -> None:
        self.version += 1
        target = self.root / f"..2026_12_06_{self.version}"
        target.mkdir()
        (target / "tls.crt").write_bytes(cert)
        (target / "tls.key").write_bytes(key)
        link = self.root / "..data_tmp"
        link.symlink_to(target.name)
        os.replace(link, self.root / "..data")

    def install(self, pair: ServingCert) -> None:
        self.write(pair.cert_pem + pair.ca_pem, pair.key_pem)


async def served_certificate(port: int) -> x509.Certificate:
    """The certificate a new TLS handshake with 127.0.0.1:port gets."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der)


def leaf(pair: ServingCert) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pair.cert_pem)


async def until_served(port: int, pair: ServingCert, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (served := await served_certificate(port)) != leaf(pair):
        assert asyncio.get_running_loop().time() < deadline, f"still serving {served.serial_number}"
        await asyncio.sleep(0.05)


@pytest.fixture
def quick_reload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(certs, "CERT_RELOAD_SECONDS", 0.05)


@pytest.fixture
async def webhook(tmp_path: Path, quick_reload: None) -> AsyncIterator[tuple[SuspendWebhook, MountedSecret]]:
    secret = MountedSecret(tmp_path / "certs")
    secret.install(make_serving_cert(["127.0.0.1"]))
    config = ControllerConfig(webhook=True, webhook_port=0, webhook_host="127.0.0.1",
                              webhook_cert_dir=str(secret.root))
    server = SuspendWebhook(cast(KubeClient, None), config)  # (given files: no caBundle to keep, no client used)
    await server.start()
    try:
        yield server, secret
    finally:
        await server.stop()


async def test_a_new_handshake_gets_the_renewed_certificate(webhook: tuple[SuspendWebhook, MountedSecret]) -> None:
    server, secret = webhook
    first = await served_certificate(server.port)
    renewed = make_serving_cert(["127.0.0.1"])
    secret.install(renewed)
    await until_served(server.port, renewed)
    assert first != leaf(renewed)


async def test_a_pair_caught_half_written_is_not_loaded_and_the_old_one_is_served(
        webhook: tuple[SuspendWebhook, MountedSecret]) -> None:
    server, secret = webhook
    before = await served_certificate(server.port)
    stale_key, renewed = (secret.root / "tls.key").read_bytes(), make_serving_cert(["127.0.0.1"])
    secret.write(renewed.cert_pem, stale_key)  # the certificate renewed, its key not yet
    for _ in range(10):  # many looks at the files meanwhile: each new handshake still works
        assert await served_certificate(server.port) == before
        await asyncio.sleep(0.05)
    secret.install(renewed)
    await until_served(server.port, renewed)


@pytest.mark.both_control_planes
async def test_after_a_renewal_and_a_new_ca_bundle_jobs_are_still_suspended_by_the_webhook(
        start_system: SystemFactory, tmp_path: Path, quick_reload: None) -> None:
    """cert-manager renews the pair and cainjector writes the new CA alone into the caBundle:
    the API server must reach the webhook with the renewed certificate, or (failurePolicy
    Ignore, as `up` registers it) the job is created unsuspended and its pods start."""
    secret = MountedSecret(tmp_path / "certs")
    first = make_serving_cert(["127.0.0.1"])
    secret.install(first)
    config = quick_config(webhook=True, webhook_port=0, webhook_host="127.0.0.1", webhook_cert_dir=str(secret.root))
    async with start_system(config=config) as system:
        assert system.manager.webhook is not None
        port = system.manager.webhook.port

        async def register(ca_pem: bytes) -> None:  # as cainjector: the CA of the current certificate only
            current = await system.client.get(MUTATING_WEBHOOKS, WEBHOOK_CONFIG)
            body = webhook_configuration(WEBHOOK_CONFIG, {"url": f"https://127.0.0.1:{port}/mutate",
                                                          "caBundle": base64.b64encode(ca_pem).decode()},
                                         config.job_kinds)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await system.client.replace(MUTATING_WEBHOOKS, body)

        async def created_suspended(name: str) -> bool:
            out = await system.akubectl("create", "-f", "-", "-o", "json",
                                        stdin=yaml.safe_dump(pytorch_job(name, duration=60)))
            created: dict[str, Any] = yaml.safe_load(out[out.index("{"):])
            return (created["metadata"].get("annotations") or {}).get(c.ANNOTATION_SUSPEND) == c.TRUE

        await register(first.ca_pem)
        assert await created_suspended("before")
        renewed = make_serving_cert(["127.0.0.1"])  # a new CA too: the old one no longer verifies it
        secret.install(renewed)
        await register(renewed.ca_pem)
        await until_served(port, renewed)
        assert await created_suspended("after")
