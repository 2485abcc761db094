"""The visibility API: the pending QueueUnits of a Queue (or of an ElasticQuota) with their
positions, served by the controller as an aggregated API that `kubectl get --raw` reads.

Paths and object shape are Koord-Queue's (pkg/visibility):
``/apis/visibility.koord-queue.x-k8s.io/v1alpha1/queues/NAME/queueunits`` and
``.../elasticquotas/NAME/queueunits`` answer a QueueUnitsSummary whose items carry quotaName,
queueName, request, resources, phase and podState; ours adds each unit's ``position`` (1-based,
as in the Queue's status.queueItemDetails) and ``priority``, and honours ``limit``/``offset``
(Kueue's pendingworkloads options; Koord-Queue declares them and ignores them).

It is served on the webhook's HTTPS port (same certificate, same Service). kube-apiserver's
aggregation layer authenticates the user and forwards it in X-Remote-User/X-Remote-Group
headers over a client certificate signed by its requestheader CA (published in
kube-system/extension-apiserver-authentication): that certificate is verified and its name
checked before the headers are believed. Each request is then authorized with a
SubjectAccessReview, and the units listed are those of the namespaces where the user may
`list queueunits` (all of them for who may list them cluster-wide): a tenant sees its own
units and where they stand, never another tenant's.

Only the leader holds the engine; a follower answers 503, as the dashboard does.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import orjson
from aiohttp import web
from multidict import MultiMapping

from koordqueue.api import constants as c
from koordqueue.controller.access import AccessReviewer, Caller
from koordqueue.controller.forecaster import forecast_fields
from koordqueue.controller.views import UnitView, rfc3339
from koordqueue.engine.forecast import UnitForecast
from koordqueue.engine.model import Standing
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import KubeError, NotFound

if TYPE_CHECKING:
    from koordqueue.controller.controller import Controller

log = logging.getLogger(__name__)

PREFIX = f"/apis/{c.VISIBILITY_GROUP}/{c.VISIBILITY_VERSION}"
CONFIG_MAPS = Resource("", "v1", "configmaps")
DEFAULT_LIMIT = 1000  # Koord-Queue's and Kueue's
REQUEST_HEADER_CHECK_SECONDS = 60.0
POSITIONS_MIN_AGE = 1.0  # seconds the queues' order is reused between requests...
POSITIONS_BUDGET = 0.1  # ...and longer with long queues: working it out takes at most this share of the loop
# The resources served: (plural, kind, singular). GET of a parent answers Koord-Queue's Queue
# (or ElasticQuota) type, its QueueUnitsSummary inside; its queueunits subresource, the summary.
RESOURCES = (("queues", "Queue", "queue"), ("elasticquotas", "ElasticQuota", "elasticquota"))
ADMITTED_PHASES = frozenset(p.value for p in c.PHASES_HOLDING_QUOTA)


@dataclass(frozen=True)
class RequestHeader:
    """kube-apiserver's requestheader settings: whose certificate may name a user, and in which headers."""

    ca_pem: str = ""
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def from_config_map(cls, data: Mapping[str, str]) -> RequestHeader:
        def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            try:
                value = orjson.loads(data[key]) if data.get(key) else None
            except orjson.JSONDecodeError:
                value = None
            return tuple(str(v) for v in value) if isinstance(value, list) else default

        return cls(ca_pem=data.get("requestheader-client-ca-file", ""),
                   allowed_names=names("requestheader-allowed-names", ()),
                   username_headers=names("requestheader-username-headers", ("X-Remote-User",)),
                   group_headers=names("requestheader-group-headers", ("X-Remote-Group",)),
                   extra_prefixes=names("requestheader-extra-headers-prefix", ("X-Remote-Extra-",)))

    def caller(self, peer_names: Sequence[str] | None, headers: MultiMapping[str]) -> Caller | None:
        """The user the headers name, if the peer's (verified) certificate may name one; else None.
        ``peer_names``: the common names of the client certificate, None without one."""
        if peer_names is None:
            return None
        if self.allowed_names and not set(peer_names) & set(self.allowed_names):
            return None
        user = next((headers[h] for h in self.username_headers if headers.get(h)), "")
        if not user:
            return None
        groups = tuple(g for h in self.group_headers for g in headers.getall(h, ()))
        extra: dict[str, list[str]] = {}
        for key in headers:
            for prefix in self.extra_prefixes:
                if key.lower().startswith(prefix.lower()):
                    extra.setdefault(unquote(key[len(prefix):]).lower(), []).extend(headers.getall(key, ()))
        return Caller(user, groups, tuple((k, tuple(v)) for k, v in sorted(extra.items())))


def peer_common_names(transport: Any) -> list[str] | None:
    """The common names of the client certificate the TLS handshake verified; None without one."""
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return None
    return [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]


# --- the documents ---------------------------------------------------------------------------

def api_resource_list() -> dict[str, Any]:
    """Discovery of the group version: what `kubectl api-resources` lists."""
    resources: list[dict[str, Any]] = []
    for plural, kind, singular in RESOURCES:
        resources.append({"name": plural, "singularName": singular, "namespaced": False, "kind": kind, "verbs": ["get"]})
        resources.append({"name": f"{plural}/{c.VISIBILITY_SUBRESOURCE}", "singularName": "", "namespaced": False,
                          "kind": c.VISIBILITY_SUMMARY_KIND, "verbs": ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": c.VISIBILITY_API_VERSION,
            "resources": resources}


def api_group() -> dict[str, Any]:
    version = {"groupVersion": c.VISIBILITY_API_VERSION, "version": c.VISIBILITY_VERSION}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": c.VISIBILITY_GROUP, "versions": [version],
            "preferredVersion": version}


def openapi(path: str) -> dict[str, Any]:
    info = {"title": "koord-queue visibility", "version": c.VISIBILITY_VERSION}
    if path == "/openapi/v2":
        return {"swagger": "2.0", "info": info, "paths": {}, "definitions": {}}
    if path == "/openapi/v3":
        return {"paths": {PREFIX.lstrip("/"): {"serverRelativeURL": "/openapi/v3" + PREFIX}}}
    return {"openapi": "3.0.0", "info": info, "paths": {}, "components": {"schemas": {}}}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def summary(name: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": c.VISIBILITY_SUMMARY_KIND, "apiVersion": c.VISIBILITY_API_VERSION,
            "metadata": {"name": name}, "items": items}


def item(unit_key: str, unit: UnitView | None, queue: str | None, quota: str | None, position: int | None,
         priority: int | None, forecast: UnitForecast | None = None) -> dict[str, Any]:
    """One unit as Koord-Queue's visibility QueueUnit says it, with its position and priority;
    a pending one with the leader's forecast of its start (expectedStart, expectedStartRange,
    basis: forecaster.py), when there is one."""
    namespace, _, name = unit_key.partition("/")
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    out: dict[str, Any] = {"metadata": meta, "queueName": (queue or "").partition("/")[2], "quotaName": quota or "",
                           "position": position, "priority": priority}
    if unit is not None:
        meta["uid"] = unit.uid
        meta["creationTimestamp"] = rfc3339(unit.created)
        spec = unit.spec
        if isinstance(spec.get("request"), Mapping):
            out["request"] = {str(k): str(v) for k, v in spec["request"].items()}
        if isinstance(spec.get("resource"), Mapping):
            out["resources"] = {str(k): str(v) for k, v in spec["resource"].items()}
        out["phase"] = unit.phase or c.Phase.ENQUEUED.value
        running, pending = unit.pod_state or (0, 0)
        out["podState"] = {"running": running, "pending": pending}
    if position is not None and forecast is not None:
        out.update(forecast_fields(forecast))
    return out


def resolve_queue(name: str, known: Sequence[str], system_namespace: str) -> str | None:
    """The queue key that ``queues/NAME`` means: Koord-Queue's Queues all live in the system
    namespace, so there first; else the one Queue of that name in another namespace."""
    if f"{system_namespace}/{name}" in known:
        return f"{system_namespace}/{name}"
    found = [key for key in known if key.partition("/")[2] == name]
    return found[0] if len(found) == 1 else None


Row = tuple[str, str | None, str | None, int | None, int | None]  # unit, queue, quota, position, priority


# --- the server --------------------------------------------------------------------------------

@dataclass
class _Cache:
    positions: tuple[float, dict[str, list[Standing]]] | None = None
    positions_max_age: float = POSITIONS_MIN_AGE


class VisibilityAPI:
    """Answers the visibility paths for ``controller_of()`` (the controller while leading)."""

    def __init__(self, client: KubeClient, controller_of: Callable[[], Controller | None],
                 system_namespace: str) -> None:
        self.client = client
        self.controller_of = controller_of
        self.system_namespace = system_namespace
        self.request_header: RequestHeader | None = None
        self.access = AccessReviewer(client, "visibility")
        self._cache = _Cache()

    # -- wiring -------------------------------------------------------------------------------
    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(f"/apis/{c.VISIBILITY_GROUP}", self._discovery)
        app.router.add_get(PREFIX, self._discovery)
        app.router.add_get(PREFIX + "/{tail:.+}", self._serve)
        app.router.add_get("/openapi/v2", self._openapi)
        app.router.add_get("/openapi/v3", self._openapi)
        app.router.add_get("/openapi/v3" + PREFIX, self._openapi)

    async def load_request_header(self, context: ssl.SSLContext) -> None:
        """Read who may name users (the requestheader CA and names) and trust that CA for client
        certificates; without it (no grant, not kube-apiserver) nobody is believed."""
        try:
            cm = await self.client.get(CONFIG_MAPS, c.REQUESTHEADER_CONFIG_MAP, namespace=c.REQUESTHEADER_NAMESPACE)
        except NotFound:
            log.info("visibility: no %s/%s (not kube-apiserver): no client certificate names a user",
                     c.REQUESTHEADER_NAMESPACE, c.REQUESTHEADER_CONFIG_MAP)
            return
        except KubeError as e:
            log.warning("visibility: cannot read %s/%s (%s): no client certificate names a user",
                        c.REQUESTHEADER_NAMESPACE, c.REQUESTHEADER_CONFIG_MAP, e)
            return
        header = RequestHeader.from_config_map(cm.get("data") or {})
        if header.ca_pem and header != self.request_header:
            context.load_verify_locations(cadata=header.ca_pem)
            context.verify_mode = ssl.CERT_OPTIONAL  # the webhook's callers send none
        self.request_header = header

    async def keep_request_header(self, context: ssl.SSLContext) -> None:
        """Read the requestheader settings now and every minute (kube-apiserver's CA may rotate)."""
        while True:
            await self.load_request_header(context)
            await asyncio.sleep(REQUEST_HEADER_CHECK_SECONDS)

    # -- HTTP -------------------------------------------------------------------------------------
    async def _discovery(self, request: web.Request) -> web.Response:
        doc = api_group() if request.path.rstrip("/") == f"/apis/{c.VISIBILITY_GROUP}" else api_resource_list()
        return web.Response(body=orjson.dumps(doc), content_type="application/json")

    async def _openapi(self, request: web.Request) -> web.Response:
        """Empty OpenAPI documents: kube-apiserver merges every APIService's, and logs a failure
        (and retries) for one that has none."""
        return web.Response(body=orjson.dumps(openapi(request.path)), content_type="application/json")

    async def _serve(self, request: web.Request) -> web.Response:
        header = self.request_header
        caller = header.caller(peer_common_names(request.transport), request.headers) if header else None
        if caller is None:
            code, doc = 401, status(401, "Unauthorized", "Unauthorized: only kube-apiserver's aggregation layer "
                                    "may call this API (a client certificate of its requestheader CA)")
        else:
            code, doc = await self.answer(request.match_info["tail"], request.query, caller)
        return web.Response(status=code, body=orjson.dumps(doc), content_type="application/json")

    # -- the answer, for any caller (the embedded control plane calls it directly) ------------------
    async def answer_for(self, tail: str, query: Mapping[str, str], user: str,
                         groups: tuple[str, ...]) -> tuple[int, dict[str, Any]]:
        """``answer`` for a user an API server authenticated itself (the embedded control plane)."""
        return await self.answer(tail, query, Caller(user, tuple(groups)))

    async def answer(self, tail: str, query: Mapping[str, str], caller: Caller) -> tuple[int, dict[str, Any]]:
        parts = tail.strip("/").split("/")
        kinds = {plural: kind for plural, kind, _ in RESOURCES}
        if len(parts) not in (2, 3) or parts[0] not in kinds or not parts[1] or \
                parts[2:] not in ([], [c.VISIBILITY_SUBRESOURCE]):
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        plural, name, sub = parts[0], parts[1], "".join(parts[2:])
        if not await self._allowed(caller, "get", c.VISIBILITY_GROUP, plural, sub, "", name):
            what = f"{plural}/{sub}" if sub else plural
            return 403, status(403, "Forbidden", f'{plural}.{c.VISIBILITY_GROUP} "{name}" is forbidden: User '
                               f'"{caller.user}" cannot get resource "{what}" in API group "{c.VISIBILITY_GROUP}" '
                               "at the cluster scope")
        try:
            limit = int(query.get("limit") or DEFAULT_LIMIT)
            offset = int(query.get("offset") or 0)
        except ValueError:
            return 400, status(400, "BadRequest", "limit and offset must be integers")
        if limit < 0 or offset < 0:
            return 400, status(400, "BadRequest", "limit and offset must not be negative")
        controller = self.controller_of()
        if controller is None or not controller.sync_done:
            return 503, status(503, "ServiceUnavailable", "this replica is not leading (or still loading the "
                               "cluster): only the leader knows the queues' order")
        units = controller.unit_informer
        rows = self._queue_rows(controller, name) if plural == "queues" else self._quota_rows(controller, name)
        if rows is None:
            return 404, status(404, "NotFound", f'{plural}.{c.VISIBILITY_GROUP} "{name}" not found')
        forecaster = controller.forecaster
        items = [item(key, units.get(key), queue, quota, position, priority, forecaster.of(key))
                 for key, queue, quota, position, priority in rows]
        phase = query.get("phase") or ""
        if phase:
            items = [i for i in items if i.get("phase") == phase]
        items = await self._visible(caller, items)
        listed = summary(name, items[offset:offset + limit] if limit else items[offset:])
        if sub:
            return 200, listed
        # The Queue (or ElasticQuota) itself, as Koord-Queue's type says it: its summary inside.
        return 200, {"kind": kinds[plural], "apiVersion": c.VISIBILITY_API_VERSION, "metadata": {"name": name},
                     "QueueUnitsSummary": listed}

    def _positions(self, controller: Controller) -> dict[str, list[Standing]]:
        """Every queue's order, as the dashboard and the Queues' status have it (the engine orders
        all queues at once: 0.6 s with 110,000 pending units, bench/visibility_answer.py), reused
        for a second, or for ten times as long as it took, as the dashboard reuses its overview."""
        now = time.monotonic()
        cached = self._cache.positions
        if cached is None or now - cached[0] >= self._cache.positions_max_age:
            cached = (now, controller.engine.queue_positions())
            self._cache.positions = cached
            self._cache.positions_max_age = max(POSITIONS_MIN_AGE, (time.monotonic() - now) / POSITIONS_BUDGET)
        return cached[1]

    def _queue_rows(self, controller: Controller, name: str) -> list[Row] | None:
        positions = self._positions(controller)
        known = sorted(set(positions) | {key for key, _ in controller.shared.informers.queue.items()})
        key = resolve_queue(name, known, self.system_namespace)
        if key is None:
            return None
        return [(s.unit, s.queue, s.quota, s.position, s.priority) for s in positions.get(key, [])]

    def _quota_rows(self, controller: Controller, name: str) -> list[Row] | None:
        """Koord-Queue's by-quota listing: the quota's units, pending (in queue order) and admitted."""
        if name not in controller.quota_sync.quotas:
            return None
        rows: list[Row] = [
            (s.unit, s.queue, s.quota, s.position, s.priority)
            for _, standings in sorted(self._positions(controller).items()) for s in standings if s.quota == name]
        for key, unit in sorted(controller.unit_informer.items()):
            info = controller.engine.unit(key)
            if info is not None and info.admitted_quota == name and unit.phase in ADMITTED_PHASES:
                standing = controller.engine.standing(key)
                rows.append((key, standing.queue if standing else None, name, None, info.priority))
        return rows

    async def _visible(self, caller: Caller, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The items of the namespaces where the caller may list QueueUnits."""
        allowed = await self.access.unit_namespaces(caller, {i["metadata"]["namespace"] for i in items})
        return items if allowed is None else [i for i in items if i["metadata"]["namespace"] in allowed]

    async def _allowed(self, caller: Caller, verb: str, group: str, resource: str, subresource: str,
                       namespace: str, name: str) -> bool:
        return await self.access.allowed(caller, verb, group, resource, subresource, namespace, name)
