"""The mutating admission webhook that suspends a job as it is created, and the validating
one that refuses to let a queued job run before it is admitted.

On a real cluster the training operator starts creating pods the moment a job
appears, so suspending the job at reconcile time comes too late; answering the API
server's AdmissionReview closes that race (Kueue does the same). An update that turns a
queued job's suspension off (its kind's own field, say) is refused unless its unit holds
quota, as Kueue's ValidateUpdate refuses it: the operator would start its pods at once. So
is one that makes a running job ask for more (replicas, parallelism, a pod's requests, a
Ray worker group, claims its pods did not name), as Kueue keeps a running job's pod sets as
admitted: its operator would make the new pods before the controller could suspend it (the
controller still sends such a job back when the webhook is off or failed open, reconciler.py).
Every replica serves both, leader or not. Without a certificate directory the webhook
makes its own CA and serving certificate and keeps the CA in both configurations'
caBundle, renewing both before they expire.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import logging
import ssl
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from koordqueue.api import constants as c
from koordqueue.api.dra import PodClaims, template_claims
from koordqueue.api.meta import InvalidObject
from koordqueue.api.quantity import ResourceList, format_quantity
from koordqueue.controller import gating
from koordqueue.controller.certs import CertificateFiles, ServingCert, make_serving_cert, needs_rotation
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.resources import NAMESPACES, UNITS
from koordqueue.controller.unitsync import grown
from koordqueue.jobs import adapter_for, kind_named
from koordqueue.jobs.base import JobAdapter, enqueued_patch, merge_patches
from koordqueue.jobs.parents import Parent, ParentOf, claimed_owner, no_parents, parent_from, queued
from koordqueue.jobs.placement import pins_changed
from koordqueue.jobs.podrequest import pod_request
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

ADMISSION_REVIEW_VERSION = "admission.k8s.io/v1"
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                             namespaced=False)
API_SERVICES = Resource("apiregistration.k8s.io", "v1", "apiservices", namespaced=False)
VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                               namespaced=False)
MUTATE_PATH = "/mutate"
VALIDATE_PATH = "/validate"
CA_CHECK_SECONDS = 60.0
MAX_CAS = 8  # CAs kept in a caBundle: one per replica, and some for restarts
SELF_SUBJECT_REVIEWS = Resource("authentication.k8s.io", "v1", "selfsubjectreviews", namespaced=False)


def json_patch_for(obj: Mapping[str, Any], merge: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """The JSONPatch operations that apply the merge patch ``merge`` to ``obj``.

    A webhook must answer with JSONPatch, while the job adapters speak merge patches;
    this turns one into the other (None removes, a missing parent is added whole)."""
    ops: list[dict[str, Any]] = []
    for key, value in merge.items():
        path = f"{prefix}/{_escape(str(key))}"
        present = isinstance(obj, Mapping) and key in obj
        if value is None:
            if present:
                ops.append({"op": "remove", "path": path})
        elif isinstance(value, Mapping) and present and isinstance(obj[key], Mapping):
            ops += json_patch_for(obj[key], value, path)
        elif isinstance(value, Mapping):
            ops.append({"op": "add", "path": path, "value": _without_nulls(value)})
        elif not present or obj[key] != value:
            ops.append({"op": "add" if not present else "replace", "path": path, "value": value})
    return ops


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _without_nulls(value: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _without_nulls(v) if isinstance(v, Mapping) else v for k, v in value.items() if v is not None}


def merged_ca_bundle(bundle_b64: str, ours: bytes, now: dt.datetime) -> str:
    """A caBundle (base64 of PEM) holding ``ours`` and the unexpired CAs already in it,
    the newest MAX_CAS of them: a replica restarted many times does not grow it forever."""
    try:
        certs = x509.load_pem_x509_certificates(base64.b64decode(bundle_b64, validate=True)) if bundle_b64 else []
    except ValueError:
        certs = []  # unreadable: start again from ours
    mine = x509.load_pem_x509_certificate(ours)
    kept = [cert for cert in certs if cert.not_valid_after_utc > now]
    if mine not in kept:  # (where it is already, it stays: no churn between replicas)
        kept = [*kept[-(MAX_CAS - 1):], mine]
    pem = b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in kept)
    return base64.b64encode(pem).decode()


def _request(body: Any) -> dict[str, Any]:
    request = body.get("request") if isinstance(body, dict) else None
    if not isinstance(request, dict):
        raise ValueError("an AdmissionReview with a request is expected")
    return request


def _adapter(request: Mapping[str, Any], job_kinds: frozenset[str]) -> JobAdapter | None:
    """The adapter of the request's kind when we queue it, else None."""
    kind = request.get("kind") or {}
    group, version = kind.get("group", ""), kind.get("version", "")
    adapter = adapter_for(f"{group}/{version}" if group else version, str(kind.get("kind", "")))
    return adapter if adapter is not None and adapter.kind in job_kinds else None


def _is_pod(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind") or {}
    return isinstance(kind, Mapping) and kind.get("group", "") == "" and kind.get("kind") == c.POD_KIND


NAMESPACE_TTL = 5.0


def _answer(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": ADMISSION_REVIEW_VERSION, "kind": "AdmissionReview", "response": response}


def review(body: Any, job_kinds: frozenset[str], parent_of: ParentOf = no_parents) -> dict[str, Any]:
    """Answer one AdmissionReview: suspend a new job of a queued kind; allow all else.
    ``parent_of``: the owners a job may claim to be made by (jobs/parents.py).

    Never refuses: even a job we cannot read is suspended and let through, and the
    controller reports why at reconcile time, where a message can be shown."""
    request = _request(body)
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    obj = request.get("object")
    adapter = _adapter(request, job_kinds)
    if request.get("operation") == "CREATE" and adapter is not None \
            and isinstance(obj, dict) and queued(adapter, obj, parent_of):
        merge = adapter.suspend_patch(obj)
        if not ((obj.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_JOB_HAS_ENQUEUED):
            merge = merge_patches(merge, enqueued_patch(time.time()))  # queued from now: said in the same write
        patch = json_patch_for(obj, merge)
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    return _answer(response)


def unsuspends(adapter: JobAdapter, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether an update lets a suspended job run: its kind's own field turned off, or its
    last suspension (annotation or field) removed (never raises)."""
    try:
        return (adapter.native_suspended(old) and not adapter.native_suspended(new)) or \
            (adapter.is_suspended(old) and not adapter.is_suspended(new))
    except InvalidObject:
        return False  # unreadable: the controller says why, and keeps it queued


def unit_holds_quota(unit: Mapping[str, Any] | None) -> bool:
    """Whether the unit was admitted (or has finished: a job that ended while suspended is
    resumed for its operator to mark it finished, jobswitch.let_finish)."""
    phase = ((unit or {}).get("status") or {}).get("phase")
    return phase in {p.value for p in c.PHASES_HOLDING_QUOTA | c.PHASES_FINISHED}


def unit_finished(unit: Mapping[str, Any] | None) -> bool:
    """Whether the unit's job has ended (its quota released: growing it makes no pods)."""
    return ((unit or {}).get("status") or {}).get("phase") in {p.value for p in c.PHASES_FINISHED}


def refusal(adapter: JobAdapter, job: Mapping[str, Any], unit_name: str, unit: Mapping[str, Any] | None) -> str:
    """What a refused un-suspension is told."""
    meta = job.get("metadata") or {}
    phase = ((unit or {}).get("status") or {}).get("phase") or "not admitted"
    where = "has no QueueUnit yet" if unit is None else f"is queued (QueueUnit {unit_name} is {phase})"
    return (f"{adapter.kind} {meta.get('namespace')}/{meta.get('name')} {where}: Koord-Queue lets it run once "
            "its quota admits it; do not set its suspension off yourself")


def _live(adapter: JobAdapter, job: Mapping[str, Any]) -> dict[str, tuple[int, ResourceList, PodClaims]]:
    """Per role (as the job names it): the pods its operator keeps now, what each asks for,
    and the claims each names."""
    where = adapter.meta(job).describe()
    return {role.name: (role.replicas, pod_request(role.template, f"{where}: {role.name}"),
                        template_claims(role.template, f"{where}: {role.name}"))
            for role in adapter.roles(job)}


def _claims_added(had: PodClaims, now: PodClaims) -> list[str]:
    """The templates and claims a role's pods name now and did not (a renamed one too: it may ask more)."""
    return [f"{c.RESOURCE_CLAIM_TEMPLATE_KIND} {name}"
            for name in sorted((Counter(now.templates) - Counter(had.templates)).elements())] + \
        [f"{c.RESOURCE_CLAIM_KIND} {name}" for name in sorted((Counter(now.claims) - Counter(had.claims)).elements())]


def growth(adapter: JobAdapter, old: Mapping[str, Any], new: Mapping[str, Any], claims: bool = True) -> list[str]:
    """What an update of a running job (suspended neither before nor after) makes it ask for
    beyond what it had: more pods of a role, more of a resource a pod, a new role, a
    ResourceClaimTemplate or ResourceClaim its pods did not name (``claims``: charged, DRA
    mappings given; read from the update alone, so any is refused: what it asks is in an
    object the webhook does not read) ([]: nothing, or it shrank). Compared with the job as it
    was, not with its unit's admission: a job given fewer pods was charged less at once, and
    the room it gave back may be another's now. Never raises: a job we cannot read is the
    controller's to tell about."""
    try:
        if adapter.is_suspended(old) or adapter.is_suspended(new):
            return []
        was, now = _live(adapter, old), _live(adapter, new)
    except InvalidObject:
        return []
    said = []
    for name, (count, request, named) in now.items():
        if name not in was:
            if count > 0:
                said.append(f"a new role {name} of {count} pods")
            continue
        had, asked, had_named = was[name]
        if count > had:
            said.append(f"{name} {count} pods (had {had})")
        said += [f"{name} {resource} {format_quantity(request[resource])} a pod (had "
                 f"{format_quantity(asked.get(resource, 0))})" for resource in grown(asked, request)] if count else []
        said += [f"{name} pods claiming from {what} (not before)"
                 for what in _claims_added(had_named, named)] if count and claims else []
    return said


def pins_moved(adapter: JobAdapter, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What an update of a running job changes of the placement its admission wrote on it
    (jobs/placement.pins_changed, and the annotation that records it): admitted into the A100
    flavor, a job whose node selector a tenant edits to H100 had its next pods run there,
    charged to A100. Never raises."""
    try:
        if adapter.is_suspended(old) or adapter.is_suspended(new):
            return []
        before, after = adapter.meta(old), adapter.meta(new)
        placed = before.annotations.get(c.ANNOTATION_PLACED)
        if not isinstance(placed, str) or not placed:
            return []
        said = [] if after.annotations.get(c.ANNOTATION_PLACED) == placed else [f"annotation {c.ANNOTATION_PLACED}"]
        return said + pins_changed(placed, {role.name: role.template for role in adapter.roles(old)},
                                   {role.name: role.template for role in adapter.roles(new)}, before.describe())
    except InvalidObject:
        return []


def pins_refusal(adapter: JobAdapter, job: Mapping[str, Any], unit_name: str, said: list[str]) -> str:
    """What a refused change of a running job's placement is told."""
    meta = job.get("metadata") or {}
    return (f"{adapter.kind} {meta.get('namespace')}/{meta.get('name')} is running where its QueueUnit {unit_name} "
            f"was admitted (its flavor or topology domain, written on its pod templates), and this update changes "
            f"it ({', '.join(said)}): its pods made again would run outside what it is charged to. Suspend it in "
            "the same update to have it queued again, or delete it and submit it anew")


def _scale_replicas(scale: object) -> int | None:
    """A Scale object's spec.replicas (absent: 0, as Go omits it), None when it is not one."""
    if not isinstance(scale, Mapping):
        return None
    replicas = (scale.get("spec") or {}).get("replicas", 0)
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None


def growth_refusal(adapter: JobAdapter, job: Mapping[str, Any], unit_name: str, unit: Mapping[str, Any] | None,
                   said: list[str], scale: bool = False) -> str:
    """What a refused growth of a running job is told: what grew, and the two ways to grow it
    (``scale``: asked through its scale subresource, where no suspension can come along)."""
    meta = job.get("metadata") or {}
    status = (unit or {}).get("status") or {}
    admitted = f" (admitted with {status['admissionSummary']})" if status.get("admissionSummary") else ""
    suspend = orjson.dumps(adapter.native_suspend_patch(True) if adapter.has_native_suspend(job)
                           else {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: c.TRUE}}}).decode()
    return (f"{adapter.kind} {meta.get('namespace')}/{meta.get('name')} is running, its QueueUnit {unit_name} "
            f"admitted{admitted}: a running job may shrink but not grow, and this update asks for more "
            f"({', '.join(said)}). {'Patch the job instead, suspending it' if scale else 'Suspend it'} in the "
            f"same update ({suspend}) to have it queued again at its new size, or delete it and submit it anew")


class SuspendWebhook:
    """The HTTPS server for ``review``, with its certificate and the caBundle it needs."""

    def __init__(self, client: KubeClient, config: ControllerConfig,
                 routes: Sequence[Callable[[web.Application], None]] = (), api_services: Sequence[str] = ()) -> None:
        """``routes``: more paths served on this port (the visibility API); ``api_services``:
        APIServices whose caBundle holds our CA too (they name this port's Service)."""
        self.client = client
        self.config = config
        self.routes = tuple(routes)
        self.api_services = tuple(api_services)
        self.port = 0
        self.ca_pem = b""
        self._cert: ServingCert | None = None
        self._files: CertificateFiles | None = None  # given files, loaded again when renewed
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._runner: web.AppRunner | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._namespaces: dict[str, tuple[float, Mapping[str, str]]] = {}
        self._username = ""

    async def start(self) -> None:
        self._load_certificate()
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_post(MUTATE_PATH, self._handle)
        app.router.add_post(VALIDATE_PATH, self._handle_validate)
        for add in self.routes:
            add(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.webhook_host, self.config.webhook_port, ssl_context=self._ssl)
        await site.start()
        if addresses := self._runner.addresses:  # the port actually bound (0 asks for any)
            self.port = int(addresses[0][1])
        if self._cert is not None:
            self._keeper = asyncio.create_task(self._keep_ca_bundle(), name="webhook-ca-bundle")
        elif self._files is not None:
            self._keeper = asyncio.create_task(self._files.keep(), name="webhook-cert-files")

    @property
    def ssl_context(self) -> ssl.SSLContext:
        return self._ssl

    async def stop(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._dir is not None:
            self._dir.cleanup()

    def _load_certificate(self) -> None:
        given = Path(self.config.webhook_cert_dir) if self.config.webhook_cert_dir else None
        if given is not None and (given / "tls.crt").exists():
            self._files = CertificateFiles(self._ssl, given / "tls.crt", given / "tls.key")  # cert-manager's or
            self._files.load()  # the user's, renewed under us
            return
        self._cert = make_serving_cert(list(self.config.webhook_hosts))
        self._install(self._cert)

    def _install(self, cert: ServingCert) -> None:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="koord-queue-webhook-")
        cert_path, key_path = cert.write(Path(self._dir.name))
        self._ssl.load_cert_chain(cert_path, key_path)  # new handshakes use the new pair
        self.ca_pem = cert.ca_pem

    async def _keep_ca_bundle(self) -> None:
        """Keep our CA in the webhook configuration; renew the pair before it expires."""
        while True:
            assert self._cert is not None
            if needs_rotation(self._cert, dt.datetime.now(dt.UTC)):
                self._cert = make_serving_cert(list(self.config.webhook_hosts))
                self._install(self._cert)
            try:
                await self.ensure_ca_bundle()
            except KubeError as e:
                log.warning("webhook: cannot write the caBundle of %s: %s", self.config.webhook_config_name, e)
            for name in self.api_services:
                try:
                    await self.ensure_api_service_ca_bundle(name)
                except KubeError as e:
                    log.warning("webhook: cannot write the caBundle of APIService %s: %s", name, e)
            await asyncio.sleep(CA_CHECK_SECONDS)

    async def ensure_ca_bundle(self) -> bool:
        """Add our CA to every webhook's caBundle of both configurations (mutating and
        validating, one name); True if either changed."""
        changed = False
        for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
            changed |= await self._ensure_ca_bundle_of(resource)
        return changed

    async def _ensure_ca_bundle_of(self, resource: Resource) -> bool:
        """Add our CA to every webhook's caBundle of the configuration; True if it changed.

        Each replica makes its own CA, and the API server may call any replica, so the
        bundle holds all of theirs: ours is added, the others' are kept until they expire.
        Replicas write it concurrently: each write is conditional on the version read."""
        for _ in range(5):
            try:
                current = await self.client.get(resource, self.config.webhook_config_name)
            except NotFound:
                return False  # nothing registered (yet): the chart or `up` creates it
            now = dt.datetime.now(dt.UTC)
            hooks = copy.deepcopy(current.get("webhooks") or [])
            changed = False
            for hook in hooks:
                client_config = hook.setdefault("clientConfig", {})
                old = client_config.get("caBundle") or ""
                client_config["caBundle"] = merged_ca_bundle(old, self.ca_pem, now)
                changed |= client_config["caBundle"] != old
            if not changed:
                return False
            patch = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "webhooks": hooks}
            try:
                await self.client.patch(resource, self.config.webhook_config_name, patch)
                return True
            except Conflict:
                continue  # another replica wrote it meanwhile: merge into its version
        return False

    async def ensure_api_service_ca_bundle(self, name: str) -> bool:
        """Add our CA to the APIService's caBundle, as to the webhook's; True if it changed."""
        for _ in range(5):
            try:
                current = await self.client.get(API_SERVICES, name)
            except NotFound:
                return False  # not registered (yet): the chart or `up` creates it
            old = (current.get("spec") or {}).get("caBundle") or ""
            bundle = merged_ca_bundle(old, self.ca_pem, dt.datetime.now(dt.UTC))
            if bundle == old:
                return False
            patch = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                     "spec": {"caBundle": bundle}}
            try:
                await self.client.patch(API_SERVICES, name, patch)
                return True
            except Conflict:
                continue
        return False

    async def _handle(self, request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
            if _is_pod(_request(body)):
                answer = await self.gate(_request(body))
            else:
                answer = review(body, self.config.job_kinds, await self._owners(_request(body)))
        except (orjson.JSONDecodeError, ValueError) as e:
            return web.Response(status=400, text=f"bad AdmissionReview: {e}")
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def _handle_validate(self, request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
            answer = await self.validate(body)
        except (orjson.JSONDecodeError, ValueError) as e:
            return web.Response(status=400, text=f"bad AdmissionReview: {e}")
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def validate(self, body: Any) -> dict[str, Any]:
        """Answer a ValidatingWebhook's AdmissionReview: refuse an update that lets a queued
        job run while its unit holds no quota (the controller admits first, then resumes),
        and one that makes a running job ask for more (``growth``) while its unit has not
        finished. The controller's own writes pass: it resumes a suspended job, and suspends
        a running one (putting back the replicas an admission lowered in the same write)."""
        request = _request(body)
        response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
        if _is_pod(request):
            said = await self._pod_refusal(request)
            if said is not None:
                response.update(allowed=False, status={"code": 403, "reason": "Forbidden", "message": said})
            return _answer(response)
        if request.get("subResource") == "scale":
            said = await self._scale_refusal(request) if request.get("operation") == "UPDATE" else None
            if said is not None:
                response.update(allowed=False, status={"code": 403, "reason": "Forbidden", "message": said})
            return _answer(response)
        old, new = request.get("oldObject"), request.get("object")
        adapter = _adapter(request, self.config.job_kinds)
        if request.get("operation") != "UPDATE" or adapter is None or not isinstance(old, dict) \
                or not isinstance(new, dict):
            return _answer(response)
        lets_run = unsuspends(adapter, old, new)
        grew = [] if lets_run else growth(adapter, old, new, claims=bool(self.config.dra_mappings))
        moved = [] if lets_run or grew else pins_moved(adapter, old, new)
        if not (lets_run or grew or moved) or not queued(adapter, new, await self._owners(request)):
            return _answer(response)
        namespace = str((new.get("metadata") or {}).get("namespace") or request.get("namespace") or "default")
        try:
            unit_name = adapter.unit_name(new)
        except InvalidObject as e:
            response.update(allowed=False, status={"code": 403, "reason": "Forbidden", "message": e.reason})
            return _answer(response)
        unit = await self._read(UNITS, unit_name, namespace)
        if lets_run and not unit_holds_quota(unit):
            message = refusal(adapter, new, unit_name, unit)
        elif grew and not unit_finished(unit):
            message = growth_refusal(adapter, new, unit_name, unit, grew)
        elif moved and unit_holds_quota(unit) and not unit_finished(unit):
            message = pins_refusal(adapter, new, unit_name, moved)
        else:
            return _answer(response)
        response.update(allowed=False, status={"code": 403, "reason": "Forbidden", "message": message})
        return _answer(response)

    async def gate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A new pod of a managed workload (controller/gating.py) gets our scheduling gate and
        our mark; any other pod passes unchanged. Never refuses. A pod created carrying our mark
        is gated all the same: the mark is a tenant's to copy, and only the controller removes a gate."""
        response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
        pod = request.get("object")
        namespace = str(request.get("namespace") or "")
        if request.get("operation") != "CREATE" or request.get("subResource") or not isinstance(pod, dict) \
                or namespace in (*c.KUBE_SYSTEM_NAMESPACES, self.config.system_namespace) \
                or gating.workload_of(pod) not in self.config.workload_kinds \
                or (pod.get("spec") or {}).get("nodeName"):
            return _answer(response)
        if gating.is_ours(pod) and gating.gated(pod):
            return _answer(response)  # (marked and gated already: held as any pod we gate)
        if not gating.is_ours(pod) and not gating.opted_in(pod, None) \
                and not gating.opted_in(pod, await self._namespace_labels(namespace)):
            return _answer(response)  # (our mark opts in: the controller queues every pod that has it)
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(gating.gate_json_patch(pod))).decode()
        return _answer(response)

    async def _namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """A namespace's labels, read at most every NAMESPACE_TTL seconds (a Deployment's pods come in bursts)."""
        now = time.monotonic()
        known = self._namespaces.get(namespace)
        if known is not None and now - known[0] < NAMESPACE_TTL:
            return known[1]
        try:  # (listed by name: the chart's ClusterRole lists namespaces, never gets them)
            listed = await self.client.list(NAMESPACES, field_selector=f"metadata.name={namespace}")
            found = next(iter(listed.items), None) or {}
            labels = (found.get("metadata") or {}).get("labels") or {}
        except KubeError:
            labels = {}
        self._namespaces[namespace] = (now, labels if isinstance(labels, dict) else {})
        return self._namespaces[namespace][1]

    async def own_username(self) -> str:
        """Who the controller is to the API server (a SelfSubjectReview): only it removes our gate."""
        if not self._username:
            try:
                answer = await self.client.create(SELF_SUBJECT_REVIEWS, {
                    "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
                self._username = str(((answer.get("status") or {}).get("userInfo") or {}).get("username") or "")
            except KubeError as e:
                log.warning("webhook: cannot learn our own user name (%s): gate removals are refused to all", e)
        return self._username

    async def _pod_refusal(self, request: Mapping[str, Any]) -> str | None:
        """An update of a pod we gated by anyone but the controller: removing our gate (its pods
        would run past the quota), our mark, or changing its Kueue pod group is refused; and a
        pod created carrying our mark without our gate (the mutating webhook off, or skipped):
        it would join its group's unit ungated."""
        old, new = request.get("oldObject"), request.get("object")
        if request.get("operation") == "CREATE":
            return await self._pod_create_refusal(request)
        if request.get("operation") != "UPDATE" or request.get("subResource") or not isinstance(old, dict) \
                or not isinstance(new, dict) or not gating.is_ours(old):
            return None
        ungated = gating.gated(old) and not gating.gated(new)
        unmarked = not gating.is_ours(new)
        regrouped = gating.group_of(old).unit != gating.group_of(new).unit
        if not (ungated or unmarked or regrouped):
            return None
        user = str((request.get("userInfo") or {}).get("username") or "")
        if user and user == await self.own_username():
            return None
        meta = new.get("metadata") or {}
        what = "remove its scheduling gate " + c.SCHEDULING_GATE if ungated else \
            f"remove its label {c.LABEL_GATED_POD}" if unmarked else "change the pod group it is in"
        return (f"pod {meta.get('namespace')}/{meta.get('name')} is queued by Koord-Queue (QueueUnit "
                f"{gating.group_of(old).unit}): only the controller may {what}; it does so once the unit is admitted")

    async def _pod_create_refusal(self, request: Mapping[str, Any]) -> str | None:
        pod = request.get("object")
        if request.get("subResource") or not isinstance(pod, dict) or not gating.is_ours(pod) or gating.gated(pod):
            return None
        user = str((request.get("userInfo") or {}).get("username") or "")
        if user and user == await self.own_username():
            return None
        meta = pod.get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or ""
        return (f"pod {request.get('namespace') or meta.get('namespace')}/{name} carries {c.LABEL_GATED_POD} "
                f"without the scheduling gate {c.SCHEDULING_GATE}: only Koord-Queue marks a pod, as it gates it")

    async def _scale_refusal(self, request: Mapping[str, Any]) -> str | None:
        """What a scale-up of a running queued job through its kind's scale subresource (`kubectl
        scale`, a HorizontalPodAutoscaler) is told (None: let through): a growth like any other.
        The request carries Scale objects: the job is read as it is now."""
        ref = request.get("resource") or {}
        registered = next((k for k in map(kind_named, sorted(self.config.job_kinds))
                           if k.scale_role and (k.group, k.plural) == (ref.get("group"), ref.get("resource"))), None)
        had, wants = _scale_replicas(request.get("oldObject")), _scale_replicas(request.get("object"))
        if registered is None or had is None or wants is None or wants <= had:
            return None
        namespace, name = str(request.get("namespace") or "default"), str(request.get("name") or "")
        version = str(ref.get("version") or registered.version)
        job = await self._read(Resource.of(f"{registered.group}/{version}", registered.plural), name, namespace)
        adapter = registered.adapter
        try:
            if job is None or adapter.is_suspended(job):
                return None  # (suspended: the controller queues it at its new size)
            unit_name = adapter.unit_name(job)
        except InvalidObject:
            return None
        kind = {"group": registered.group, "version": version, "kind": registered.kind}
        if not queued(adapter, job, await self._owners({**request, "kind": kind, "object": job})):
            return None
        unit = await self._read(UNITS, unit_name, namespace)
        if unit_finished(unit):
            return None
        return growth_refusal(adapter, job, unit_name, unit, [f"{registered.scale_role} {wants} pods (had {had}) "
                                                              "through its scale subresource"], scale=True)

    async def _read(self, resource: Resource, name: str, namespace: str) -> dict[str, Any] | None:
        """One object as the API server has it now, or None: listed by name, as the controller
        may list what it reads but not get it (the chart's ClusterRole)."""
        try:
            listed = await self.client.list(resource, namespace=namespace, field_selector=f"metadata.name={name}")
        except NotFound:
            return None  # (the kind is not served)
        return next(iter(listed.items), None)

    async def _owners(self, request: Mapping[str, Any]) -> ParentOf:
        """The owner the request's job claims, read from the API server (a replica that does
        not lead has no informers): jobs/parents.py trusts it only as it is there. Here, as
        Kueue does, only while it runs too: KubeRay makes a RayJob's cluster and submitter once
        it is let run, so a job claiming a suspended (queued) owner is the tenant's own, made
        to run beside it: it is suspended and queued, and may not be let run before admitted."""
        adapter = _adapter(request, self.config.job_kinds)
        obj = request.get("object")
        owner = claimed_owner(adapter, obj) if adapter is not None and isinstance(obj, dict) else None
        if owner is None or owner.kind not in self.config.job_kinds:
            return no_parents
        registered = kind_named(owner.kind)
        found = await self._read(Resource.of(registered.api_versions[0], registered.plural), owner.name,
                                 owner.namespace)
        if found is None:
            return no_parents
        try:
            if registered.adapter.is_suspended(found):
                return no_parents
        except InvalidObject:
            return no_parents
        parent = parent_from(registered.adapter, found)

        def parent_of(kind: str, namespace: str, name: str) -> Parent | None:
            return parent if (kind, namespace, name) == (owner.kind, owner.namespace, owner.name) else None

        return parent_of


WEBHOOK_NAME = "jobs.koord-queue.koordinator.sh"
VALIDATING_WEBHOOK_NAME = "validate-jobs.koord-queue.koordinator.sh"
POD_WEBHOOK_NAME = "gate-pods.koord-queue.koordinator.sh"
VALIDATING_POD_WEBHOOK_NAME = "validate-pods.koord-queue.koordinator.sh"


def _pod_hook(name: str, client_config: dict[str, Any], operations: list[str], failure_policy: str,
              namespace_selector: Mapping[str, Any] | None) -> dict[str, Any]:
    """The entry that sends pods to us (workloads queued by gate, controller/gating.py)."""
    return {"name": name, "clientConfig": client_config,
            "rules": [{"operations": operations, "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                       "scope": "Namespaced"}],
            "namespaceSelector": dict(namespace_selector or {}), "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": failure_policy, "timeoutSeconds": 5}


def _rules(job_kinds: frozenset[str], operation: str) -> list[dict[str, Any]]:
    rules: dict[tuple[str, str], list[str]] = {}
    for kind in sorted(job_kinds):  # each version the kind is read in (MPIJob's v1alpha1 too)
        registered = kind_named(kind)
        for version in registered.versions:
            rules.setdefault((registered.group, version), []).append(registered.plural)
    if operation == "UPDATE":  # (scale subresources after their kinds, as the chart lists them)
        for kind in sorted(job_kinds):
            registered = kind_named(kind)
            if registered.scale_role:
                for version in registered.versions:
                    rules[(registered.group, version)].append(f"{registered.plural}/scale")
    return [{"operations": [operation], "apiGroups": [group], "apiVersions": [version],
             "resources": plurals, "scope": "Namespaced"} for (group, version), plurals in sorted(rules.items())]


def webhook_configuration(name: str, client_config: dict[str, Any], job_kinds: frozenset[str],
                          failure_policy: str = "Ignore",
                          namespace_selector: Mapping[str, Any] | None = None,
                          workload_kinds: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A MutatingWebhookConfiguration that sends new jobs of ``job_kinds`` to us
    (what `koord-queue up` registers; the Helm chart renders the same shape), in the
    namespaces ``namespace_selector`` selects (controller/scope.py; None: all); and new pods,
    to be gated, when workloads are queued by gate (``workload_kinds``)."""
    config: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "clientConfig": client_config,
            "rules": _rules(job_kinds, "CREATE"),
            "namespaceSelector": dict(namespace_selector or {}),
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure_policy,
            "timeoutSeconds": 5,
        }],
    }
    if workload_kinds:
        config["webhooks"].append(_pod_hook(POD_WEBHOOK_NAME, client_config, ["CREATE"], failure_policy,
                                            namespace_selector))
    return config


def validating_webhook_configuration(name: str, client_config: dict[str, Any], job_kinds: frozenset[str],
                                     failure_policy: str = "Ignore",
                                     namespace_selector: Mapping[str, Any] | None = None,
                                     workload_kinds: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration that sends updates of jobs of ``job_kinds`` to us
    (``client_config``: the mutating one's, its path VALIDATE_PATH); and of pods, whose gate
    only the controller may remove (and new ones, which none but it may mark ungated), when
    workloads are queued by gate."""
    config: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": VALIDATING_WEBHOOK_NAME,
            "clientConfig": client_config,
            "rules": _rules(job_kinds, "UPDATE"),
            "namespaceSelector": dict(namespace_selector or {}),
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure_policy,
            "timeoutSeconds": 5,
        }],
    }
    if workload_kinds:
        config["webhooks"].append(_pod_hook(VALIDATING_POD_WEBHOOK_NAME, client_config, ["CREATE", "UPDATE"],
                                            failure_policy, namespace_selector))
    return config
