"""Admission webhooks: the server calls them on create and update, as a real one does.

Only a webhook closes the race between a job's creation and its operator starting
pods, so the embedded server honours MutatingWebhookConfigurations: rules,
namespaceSelector, objectSelector, AdmissionReview v1 over HTTPS verified with the
`caBundle`, the JSONPatch answer, `failurePolicy` and `timeoutSeconds`. A webhook
given as a Service is reached on loopback (everything of the embedded cluster runs
on this machine) at the Service's target port, with the Service's DNS name for TLS.
ValidatingWebhookConfigurations are honoured the same way, after the object was
validated (the training operator refuses malformed jobs with one): a webhook that
denies fails the request with its status (403 Forbidden for controller-runtime's).
`matchPolicy: Equivalent` (the default) is honoured as kube-apiserver honours it: a
request for another served version of a resource the rules name (an MPIJob created as
kubeflow.org/v1alpha1, the rules naming v1) is sent as the version the rules name, with
`requestKind` the one asked for, and the webhook's patch is applied to that version.
"""

from __future__ import annotations

import base64
import binascii
import ssl
import uuid
from contextvars import ContextVar
from typing import Any

import aiohttp
import orjson

from koordqueue.apiserver import errors
from koordqueue.apiserver.builtin import (
    MUTATING_WEBHOOKS_KEY,
    NAMESPACE_KEY,
    SERVICE_KEY,
    VALIDATING_WEBHOOKS_KEY,
)
from koordqueue.apiserver.patch import PatchError, PatchFormatError, apply_json_patch
from koordqueue.apiserver.registry import Registry, ResourceType
from koordqueue.apiserver.selectors import selector_from_object
from koordqueue.apiserver.store import Store

ADMISSION_API_VERSION = "admission.k8s.io/v1"
DEFAULT_TIMEOUT = 10
MAX_TIMEOUT = 30
USER_INFO = {"username": "koord-queue-local-admin", "groups": ["system:masters", "system:authenticated"]}
# Who sent the request being admitted (set by the server per request): its webhooks are told, as
# kube-apiserver tells them in request.userInfo (a webhook may let only a controller make a change).
REQUESTER: ContextVar[dict[str, Any] | None] = ContextVar("requester", default=None)


class WebhookCallError(Exception):
    """The webhook could not be called or gave an unusable answer (failurePolicy decides)."""


def _rule_matches(rule: dict[str, Any], operation: str, rt: ResourceType, subresource: str) -> bool:
    def has(values: Any, value: str) -> bool:
        return isinstance(values, list) and ("*" in values or value in values)

    if not (has(rule.get("operations"), operation) and has(rule.get("apiGroups"), rt.group)
            and has(rule.get("apiVersions"), rt.version)):
        return False
    scope = rule.get("scope", "*")
    if scope == "Cluster" and rt.namespaced or scope == "Namespaced" and not rt.namespaced:
        return False
    for entry in rule.get("resources") or ():
        res, _, sub = str(entry).partition("/")
        if entry == "*/*" or ((res in ("*", rt.plural)) and (sub in ("*", subresource) if "/" in entry
                                                                else not subresource)):
            return True
    return False


def _kind(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _resource(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "resource": rt.plural}


def _as_version(obj: dict[str, Any] | None, rt: ResourceType) -> Any:
    """The object as version `rt` serves it: custom resources convert by apiVersion alone
    (conversion None), and built-in kinds have one version here."""
    if obj is None or obj.get("apiVersion") in (None, rt.api_version):
        return obj
    return {**obj, "apiVersion": rt.api_version}


class AdmissionWebhooks:
    """Calls the registered admission webhooks on create and update."""

    def __init__(self, store: Store, registry: Registry | None = None) -> None:
        """`registry`: the served types, to match `matchPolicy: Equivalent` (None: exact only)."""
        self._store = store
        self._registry = registry
        self._session: aiohttp.ClientSession | None = None
        self._ssl: dict[str, ssl.SSLContext] = {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def mutate(
        self, operation: str, rt: ResourceType, subresource: str, obj: dict[str, Any], old: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Run every matching mutating webhook in order and return the patched object."""
        configs = self._store.items(MUTATING_WEBHOOKS_KEY)
        for config in configs:
            for hook in config.get("webhooks") or ():
                if not isinstance(hook, dict):
                    continue
                target = self._matched_type(hook, operation, rt, subresource)
                if target is not None and self._matches(hook, rt, obj, old):
                    sent = await self._run(hook, operation, target, rt, subresource,
                                           _as_version(obj, target), _as_version(old, target))
                    obj = _as_version(sent, rt)
        return obj

    async def validate(
        self, operation: str, rt: ResourceType, subresource: str, obj: dict[str, Any], old: dict[str, Any] | None,
    ) -> None:
        """Run every matching validating webhook; the first that denies fails the request."""
        for config in self._store.items(VALIDATING_WEBHOOKS_KEY):
            for hook in config.get("webhooks") or ():
                if not isinstance(hook, dict):
                    continue
                target = self._matched_type(hook, operation, rt, subresource)
                if target is not None and self._matches(hook, rt, obj, old):
                    await self._check(hook, operation, target, rt, subresource,
                                      _as_version(obj, target), _as_version(old, target))

    async def _check(
        self, hook: dict[str, Any], operation: str, rt: ResourceType, asked: ResourceType, subresource: str,
        obj: dict[str, Any], old: dict[str, Any] | None,
    ) -> None:
        name = str(hook.get("name", ""))
        try:
            response = await self._call(hook, self._review(operation, rt, asked, subresource, obj, old))
        except WebhookCallError as e:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return
            raise errors.internal(f'failed calling webhook "{name}": {e}') from None
        if not response.get("allowed"):
            raise self._denied(name, response.get("status") or {})

    def _matched_type(
        self, hook: dict[str, Any], operation: str, rt: ResourceType, subresource: str,
    ) -> ResourceType | None:
        """The type the hook's rules name for a request on `rt`: `rt` itself, or with
        `matchPolicy: Equivalent` (the default) another served version of the same resource."""
        rules = [r for r in hook.get("rules") or () if isinstance(r, dict)]
        if any(_rule_matches(r, operation, rt, subresource) for r in rules):
            return rt
        if hook.get("matchPolicy", "Equivalent") != "Equivalent" or self._registry is None:
            return None
        return next((other for other in self._registry.versions_of(rt.storage_key)
                     if other != rt and any(_rule_matches(r, operation, other, subresource) for r in rules)), None)

    def _matches(
        self, hook: dict[str, Any], rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None,
    ) -> bool:
        """Whether the hook's namespaceSelector and objectSelector select the object."""
        ns_selector = selector_from_object(hook.get("namespaceSelector"))
        if ns_selector is None:
            return False
        if rt.storage_key == NAMESPACE_KEY:
            ns_labels = obj["metadata"].get("labels")
        elif rt.namespaced:
            ns_obj = self._store.get(NAMESPACE_KEY, "", obj["metadata"].get("namespace", ""))
            ns_labels = ns_obj["metadata"].get("labels") if ns_obj else {}
        else:
            ns_labels = None
        if ns_labels is not None and not ns_selector.matches(ns_labels):
            return False
        obj_selector = selector_from_object(hook.get("objectSelector"))
        if obj_selector is None:
            return False
        return obj_selector.matches(obj["metadata"].get("labels")) or (
            old is not None and obj_selector.matches(old["metadata"].get("labels")))

    async def _run(
        self, hook: dict[str, Any], operation: str, rt: ResourceType, asked: ResourceType, subresource: str,
        obj: dict[str, Any], old: dict[str, Any] | None,
    ) -> dict[str, Any]:
        name = str(hook.get("name", ""))
        try:
            response = await self._call(hook, self._review(operation, rt, asked, subresource, obj, old))
            if not response.get("allowed"):
                raise self._denied(name, response.get("status") or {})
            patch = response.get("patch")
            if not patch:
                return obj
            if response.get("patchType") != "JSONPatch":
                raise WebhookCallError(f"unsupported patch type {response.get('patchType')!r}")
            try:
                ops = orjson.loads(base64.b64decode(patch))
                patched = apply_json_patch(obj, ops)
            except (binascii.Error, orjson.JSONDecodeError, PatchError, PatchFormatError) as e:
                raise WebhookCallError(f"the webhook's JSON patch could not be applied: {e}") from None
            if not isinstance(patched, dict):
                raise WebhookCallError("the webhook's JSON patch made the object something other than an object")
            return patched
        except WebhookCallError as e:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return obj
            raise errors.internal(f'failed calling webhook "{name}": {e}') from None

    def _review(
        self, operation: str, rt: ResourceType, asked: ResourceType, subresource: str, obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """`rt`: the version sent (the rules'); `asked`: the version of the request."""
        meta = obj["metadata"]
        request: dict[str, Any] = {
            "uid": str(uuid.uuid4()), "kind": _kind(rt), "resource": _resource(rt), "requestKind": _kind(asked),
            "requestResource": _resource(asked), "name": meta.get("name", ""), "operation": operation,
            "userInfo": REQUESTER.get() or USER_INFO, "object": obj, "oldObject": old, "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1",
                        "kind": "CreateOptions" if operation == "CREATE" else "UpdateOptions"},
        }
        if subresource:
            request["subResource"] = request["requestSubResource"] = subresource
        if meta.get("namespace"):
            request["namespace"] = meta["namespace"]
        return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "request": request}

    def _denied(self, name: str, status: dict[str, Any]) -> errors.APIError:
        denied_by = f'admission webhook "{name}" denied the request'
        if status.get("message"):
            message = f"{denied_by}: {status['message']}"
        elif status.get("reason"):
            message = f"{denied_by}: {status['reason']}"
        else:
            message = f"{denied_by} without explanation"
        code = status.get("code")
        if not isinstance(code, int) or code < 400:
            code = 400
        return errors.APIError(code, str(status.get("reason") or ""), message, status.get("details"))

    def _target(self, hook: dict[str, Any]) -> tuple[str, str | None]:
        """(URL to post to, TLS server name when it differs from the URL's host)."""
        client = hook.get("clientConfig") or {}
        if client.get("url"):
            return str(client["url"]), None
        service = client.get("service") or {}
        if not service.get("name") or not service.get("namespace"):
            raise WebhookCallError("clientConfig has neither url nor service")
        port = int(service.get("port") or 443)
        svc = self._store.get(SERVICE_KEY, service["namespace"], service["name"])
        if svc is None:
            raise WebhookCallError(f'service "{service["namespace"]}/{service["name"]}" not found')
        for p in (svc.get("spec") or {}).get("ports") or ():
            if p.get("port") == port and isinstance(p.get("targetPort"), int):
                port = p["targetPort"]
        path = service.get("path") or "/"
        return f"https://127.0.0.1:{port}{path}", f"{service['name']}.{service['namespace']}.svc"

    def _ssl_context(self, ca_bundle: str) -> ssl.SSLContext:
        ctx = self._ssl.get(ca_bundle)
        if ctx is None:
            if ca_bundle:
                try:
                    cadata = base64.b64decode(ca_bundle).decode()
                    ctx = ssl.create_default_context(cadata=cadata)
                except (binascii.Error, UnicodeDecodeError, ssl.SSLError) as e:
                    raise WebhookCallError(f"invalid caBundle: {e}") from None
            else:
                ctx = ssl.create_default_context()
            self._ssl[ca_bundle] = ctx
        return ctx

    async def _call(self, hook: dict[str, Any], review: dict[str, Any]) -> dict[str, Any]:
        url, server_name = self._target(hook)
        ctx = self._ssl_context(str((hook.get("clientConfig") or {}).get("caBundle") or ""))
        timeout = min(int(hook.get("timeoutSeconds") or DEFAULT_TIMEOUT), MAX_TIMEOUT)
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(
                url, data=orjson.dumps(review), headers={"Content-Type": "application/json"},
                ssl=ctx if url.startswith("https://") else False, server_hostname=server_name,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise WebhookCallError(f"the server responded with status {resp.status}")
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise WebhookCallError(f'failed to call webhook: Post "{url}": {e or type(e).__name__}') from None
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise WebhookCallError(f"the response is not JSON: {e}") from None
        response = answer.get("response") if isinstance(answer, dict) else None
        if not isinstance(response, dict):
            raise WebhookCallError("the AdmissionReview has no response")
        if response.get("uid") != review["request"]["uid"]:
            raise WebhookCallError("the response uid does not match the request uid")
        return response
