"""Mutating admission webhooks: called over HTTPS (caBundle), JSONPatch applied, failurePolicy, timeouts."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from koordqueue.apiserver.testing import APIClient

from .conftest import WIDGETS, configmap, widget

CMS = "/api/v1/namespaces/default/configmaps"
MWCS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def _certificates(tmp: Path) -> tuple[bytes, ssl.SSLContext]:
    """A CA, and a server certificate it signs for 127.0.0.1 and hook.default.svc."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hook")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("hook.default.svc")]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    (tmp / "hook.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "hook.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp / "hook.crt", tmp / "hook.key")
    return ca.public_bytes(serialization.Encoding.PEM), ctx


@dataclass
class Webhook:
    port: int
    ca_bundle: str
    reviews: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "label"  # label | deny | slow | error | hold (label, once `release` is set)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[Webhook]:
    ca_pem, ctx = _certificates(tmp_path)
    hook = Webhook(0, base64.b64encode(ca_pem).decode())

    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        hook.reviews.append(review)
        uid = review["request"]["uid"]
        if hook.mode == "slow":
            await asyncio.sleep(3)
        if hook.mode == "hold":
            await hook.release.wait()
        if hook.mode == "error":
            return web.Response(status=500, text="boom")
        if hook.mode == "deny":
            response: dict[str, Any] = {"uid": uid, "allowed": False,
                                        "status": {"code": 403, "message": "no configmaps today"}}
        else:
            patch = [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]
            response = {"uid": uid, "allowed": True, "patchType": "JSONPatch",
                        "patch": base64.b64encode(orjson.dumps(patch)).decode()}
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": response})

    app = web.Application()
    app.router.add_post("/mutate", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    hook.port = runner.addresses[0][1]
    yield hook
    await runner.cleanup()


def configuration(hook: Webhook, **overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": "label.example.com",
        "clientConfig": {"url": f"https://127.0.0.1:{hook.port}/mutate", "caBundle": hook.ca_bundle},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                   "resources": ["configmaps"]}],
        "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 5,
    }
    entry.update(overrides)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "labeler"}, "webhooks": [entry]}


async def test_webhook_patch_is_applied_on_create_and_update(api: APIClient, webhook: Webhook) -> None:
    assert (await api.post(MWCS, configuration(webhook)))[0] == 201
    status, obj, _ = await api.post(CMS, configmap("a"))
    assert status == 201 and obj["metadata"]["labels"] == {"mutated": "yes"}
    request = webhook.reviews[0]["request"]
    assert request["operation"] == "CREATE" and request["namespace"] == "default" and request["name"] == "a"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert request["object"]["metadata"]["name"] == "a"
    await api.put(f"{CMS}/a", {**obj, "metadata": {**obj["metadata"], "labels": {}}})
    assert webhook.reviews[-1]["request"]["operation"] == "UPDATE"
    assert webhook.reviews[-1]["request"]["oldObject"]["metadata"]["labels"] == {"mutated": "yes"}
    assert (await api.get(f"{CMS}/a"))[1]["metadata"]["labels"] == {"mutated": "yes"}
    await api.post("/api/v1/namespaces/default/secrets", {"metadata": {"name": "s"}})
    assert len(webhook.reviews) == 2  # rules did not match secrets


async def test_selectors_limit_what_is_sent(api: APIClient, webhook: Webhook) -> None:
    await api.post(MWCS, configuration(
        webhook, objectSelector={"matchLabels": {"inject": "true"}},
        namespaceSelector={"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                 "values": ["default"]}]}))
    _, plain, _ = await api.post(CMS, configmap("plain"))
    assert "mutated" not in plain["metadata"].get("labels", {})
    await api.post("/api/v1/namespaces", {"metadata": {"name": "other"}})
    _, other, _ = await api.post("/api/v1/namespaces/other/configmaps", configmap("o", labels={"inject": "true"}))
    assert "mutated" not in other["metadata"]["labels"]
    _, chosen, _ = await api.post(CMS, configmap("chosen", labels={"inject": "true"}))
    assert chosen["metadata"]["labels"] == {"mutated": "yes"}
    assert len(webhook.reviews) == 1


async def test_failure_policy(api: APIClient, webhook: Webhook) -> None:
    webhook.mode = "error"
    await api.post(MWCS, configuration(webhook))
    status, body, _ = await api.post(CMS, configmap("a"))
    assert status == 500 and body["reason"] == "InternalError"
    assert 'failed calling webhook "label.example.com"' in body["message"]
    assert (await api.get(f"{CMS}/a"))[0] == 404
    _, mwc, _ = await api.get(f"{MWCS}/labeler")
    mwc["webhooks"][0]["failurePolicy"] = "Ignore"
    await api.put(f"{MWCS}/labeler", mwc)
    status, obj, _ = await api.post(CMS, configmap("a"))
    assert status == 201 and "labels" not in obj["metadata"]


async def test_unverifiable_certificate_fails_closed(api: APIClient, webhook: Webhook) -> None:
    other_ca, _ = _certificates(Path(api.server.state_dir))
    await api.post(MWCS, configuration(webhook, clientConfig={
        "url": f"https://127.0.0.1:{webhook.port}/mutate", "caBundle": base64.b64encode(other_ca).decode()}))
    status, body, _ = await api.post(CMS, configmap("a"))
    assert status == 500 and "failed calling webhook" in body["message"]
    assert webhook.reviews == []


async def test_timeout_seconds(api: APIClient, webhook: Webhook) -> None:
    webhook.mode = "slow"
    await api.post(MWCS, configuration(webhook, timeoutSeconds=1))
    loop = asyncio.get_running_loop()
    start = loop.time()
    status, body, _ = await api.post(CMS, configmap("a"))
    assert status == 500 and "failed calling webhook" in body["message"]
    assert loop.time() - start < 2.5


async def test_denial_carries_the_webhook_status(api: APIClient, webhook: Webhook) -> None:
    webhook.mode = "deny"
    await api.post(MWCS, configuration(webhook))
    status, body, _ = await api.post(CMS, configmap("a"))
    assert status == 403
    assert body["message"] == 'admission webhook "label.example.com" denied the request: no configmaps today'


async def test_service_reference_is_reached_on_loopback(api: APIClient, webhook: Webhook) -> None:
    await api.post("/api/v1/namespaces/default/services", {
        "metadata": {"name": "hook"}, "spec": {"ports": [{"port": 443, "targetPort": webhook.port}]}})
    await api.post(MWCS, configuration(webhook, clientConfig={
        "service": {"namespace": "default", "name": "hook", "path": "/mutate", "port": 443},
        "caBundle": webhook.ca_bundle}))
    status, obj, _ = await api.post(CMS, configmap("a"))
    assert status == 201 and obj["metadata"]["labels"] == {"mutated": "yes"}


async def _patch_while_another_write_lands(api: APIClient, webhook: Webhook, with_version: bool) -> tuple[int, Any]:
    """Patch widget w's spec (with the resourceVersion it was created with, or none); while its
    webhook holds it, w's status is written (no webhook for widgets/status, as for the training
    operator's jobs). The patch's answer, once the webhook let it go."""
    webhook.mode = "hold"
    await api.post(MWCS, configuration(webhook, rules=[{
        "apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["widgets"]}]))
    _, created, _ = await api.post(WIDGETS, widget("w", size=1))
    patch: dict[str, Any] = {"spec": {"size": 2}}
    if with_version:
        patch["metadata"] = {"resourceVersion": created["metadata"]["resourceVersion"]}
    patching = asyncio.create_task(api.patch(f"{WIDGETS}/w", patch))
    while not webhook.reviews:
        await asyncio.sleep(0.01)
    assert (await api.patch(f"{WIDGETS}/w/status", {"status": {"phase": "Busy"}}))[0] == 200
    webhook.release.set()
    status, body, _ = await patching
    return status, body


async def test_a_patch_is_applied_again_when_another_write_lands_while_its_webhook_runs(
        api: APIClient, webhook: Webhook) -> None:
    """kube-apiserver's GuaranteedUpdate: a patch without a resourceVersion is never a conflict.
    It was a 409 here: a test suspending a PyTorchJob failed when the simulated operator wrote
    the job's status while the training operator's webhook ran."""
    status, body = await _patch_while_another_write_lands(api, webhook, with_version=False)
    assert status == 200, body
    assert body["spec"] == {"size": 2} and body["status"] == {"phase": "Busy"}
    assert body["metadata"]["labels"] == {"mutated": "yes"}
    first, second = (review["request"] for review in webhook.reviews)  # done again, on the object as it is now
    assert "status" not in first["oldObject"] and second["oldObject"]["status"] == {"phase": "Busy"}
    assert (await api.get(f"{WIDGETS}/w"))[1] == body


async def test_a_patch_with_a_resource_version_is_still_a_conflict_when_another_write_lands(
        api: APIClient, webhook: Webhook) -> None:
    status, body = await _patch_while_another_write_lands(api, webhook, with_version=True)
    assert status == 409 and body["reason"] == "Conflict", body
    stored = (await api.get(f"{WIDGETS}/w"))[1]
    assert stored["spec"] == {"size": 1} and stored["status"] == {"phase": "Busy"}
