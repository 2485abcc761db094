"""Koord-Queue's HTTP API, for the scripts and tools written against it: the same paths
and the same JSON (field names, nesting, units), read-only.

Koord-Queue (``--enableApiHandler``) serves on port 19876 ``/apis/v1/queue`` and
``/apis/v1/userquota`` (each Queue by name to its policy's debug info: ``null`` for every
policy it ships) and its quota plugins' handlers: ``/apis/v1/elasticquotatree`` (the tree
plugin: each quota by name to Count, Max, Min, Used as ``{"Resources": {...}}`` in
milli-cpu and bytes, and Items, the units charged to it) and ``/apis/v1/elasticquota``
(the ElasticQuota plugin: Count, Max, Min, Used and its self/children/guaranteed/oversold
splits in whole units, and Items, the units holding quota in it or below). Koord-Queue
registers one quota plugin; here the path of the way quotas are written now (a tree, or
ElasticQuotas) answers with them and the other with ``{}``.

Only the leader holds the engine: a follower, or a leader still loading, answers 503 in
words. Bound to loopback unless told otherwise (``kubectl port-forward`` reaches it); bound
elsewhere, ``authorize`` says who may read: the manager fills it with the dashboard's
authentication (``bearer_authorize``: TokenReview, SubjectAccessReview).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from koordqueue.api import constants as c
from koordqueue.controller.access import AccessReviewer
from koordqueue.controller.controller import Controller
from koordqueue.controller.quotastatus import queue_usage
from koordqueue.controller.views import UnitView
from koordqueue.engine.model import QuotaInfo

log = logging.getLogger(__name__)

# Says whether a request may read: None to let it through, else why not: (HTTP status, why),
# or just why (answered 401).
Authorize = Callable[[web.Request], Awaitable[tuple[int, str] | str | None]]
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


class NotLeading(Exception):
    """This replica holds no current queue state; the message says why."""


class KoordAPI:
    """Serves Koord-Queue's HTTP API for one replica; ``controller_of()`` is the
    controller while it leads."""

    def __init__(self, controller_of: Callable[[], Controller | None], host: str = "127.0.0.1",
                 port: int = c.KOORD_API_PORT, identity: str = "", authorize: Authorize | None = None) -> None:
        self.controller_of = controller_of
        self.host = host
        self.requested_port = port
        self.identity = identity
        self.authorize = authorize
        self.port = 0  # the port bound (0 asks for any free one)
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        for path, build in ((c.KOORD_API_QUEUE, queue_debug_info), (c.KOORD_API_USER_QUOTA, user_quota_debug_info),
                            (c.KOORD_API_QUOTA_TREE, quota_tree_debug_info),
                            (c.KOORD_API_ELASTIC_QUOTA, elastic_quota_debug_info)):
            app.router.add_get(path, self._handler(build))
        return app

    async def start(self) -> None:
        if self.host not in LOOPBACK and self.authorize is None:
            log.warning("Koord-Queue's HTTP API is served on %s:%d without authentication: anyone who reaches the "
                        "port reads every queue and quota", self.host, self.requested_port)
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.requested_port).start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _guard(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                     ) -> web.StreamResponse:
        if self.authorize is not None:
            refused = await self.authorize(request)
            if refused is not None:
                status, why = refused if isinstance(refused, tuple) else (401, refused)
                return _json({"error": "unauthorized" if status == 401 else "forbidden", "message": why},
                             status=status)
        return await handler(request)

    def _leader(self) -> Controller:
        controller = self.controller_of()
        who = f" ({self.identity})" if self.identity else ""
        if controller is None:
            raise NotLeading(f"This replica{who} is not the leader, so it holds no current queue state; ask the "
                             "leading replica (the holder of the controller's Lease, its pod labelled "
                             f"{c.LABEL_LEADER}=true).")
        if not controller.sync_done:
            raise NotLeading(f"This replica{who} has just become the leader and is still loading the cluster's "
                             "objects; ask again in a moment.")
        return controller

    def _handler(self, build: Callable[[Controller], Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(_: web.Request) -> web.Response:
            try:
                return _json(build(self._leader()))
            except NotLeading as e:
                return _json({"error": "unavailable", "message": str(e)}, status=503)
        return handle


# --- the answers, built as Koord-Queue's handlers build them ------------------------------


def queue_debug_info(controller: Controller) -> dict[str, None]:
    """``/apis/v1/queue``: each Queue by name to its policy's debug info. Every policy
    Koord-Queue ships (Priority, Block, Intelligent) returns nil, written ``null``."""
    return dict.fromkeys(_queue_names(controller))


def user_quota_debug_info(controller: Controller) -> dict[str, None]:
    """``/apis/v1/userquota``: as ``/apis/v1/queue`` (nil per queue in Koord-Queue too)."""
    return dict.fromkeys(_queue_names(controller))


def quota_tree_debug_info(controller: Controller) -> dict[str, dict[str, Any]]:
    """``/apis/v1/elasticquotatree``: each quota of the ElasticQuotaTree by name. Count and
    Used count the units holding quota in it or below; Items are the units charged to it,
    waiting or not (Koord-Queue lists every unit it maps to the quota)."""
    sync = controller.quota_sync
    if sync.tree is None:
        return {}
    statuses = controller.engine.quota_status()
    units = _units_by_quota(controller)
    quotas = sync.tree.quotas
    holding = [q for q, _view in _holding(controller)]
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(quotas):
        quota = quotas[name]
        status = statuses.get(name)
        below = _self_and_below(name, quotas)
        out[name] = {
            "Count": sum(1 for q in holding if q in below),
            "Max": {"Resources": _milli_cpu(quota.max)},
            "Min": {"Resources": _milli_cpu(quota.min)},
            "Used": {"Resources": _milli_cpu(status.used if status else {})},
            "Items": {view.key: {"Name": view.name, "Resource": _resource(view), "Priority": _priority(view),
                                 "CreationTimestamp": _time(view.created)}
                      for view in sorted(units.get(name, []), key=lambda v: v.key)},
        }
    return out


def elastic_quota_debug_info(controller: Controller) -> dict[str, dict[str, Any]]:
    """``/apis/v1/elasticquota``: each ElasticQuota by name, amounts in whole units (cpu in
    cores, rounded up, as Koord-Queue's ``Quantity.Value()``); Items are the units holding
    quota in it or below. No unit of ours is admitted oversold: the guaranteed amounts are
    the used ones and the oversold ones are empty, as Koord-Queue's are then."""
    sync = controller.quota_sync
    if sync.tree is not None:
        return {}
    quotas = sync.quotas
    statuses = {n: s for n, s in controller.engine.quota_status().items() if n in quotas}
    usage = queue_usage(statuses, quotas)
    holding = list(_holding(controller))
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(quotas):
        quota = quotas[name]
        split = usage.get(name, {})
        used = _units(split.get(c.ANNOTATION_QUEUE_USED, {}))
        own = _units(split.get(c.ANNOTATION_QUEUE_SELF_USED, {}))
        below = _units(split.get(c.ANNOTATION_QUEUE_CHILDREN_USED, {}))
        tree = _self_and_below(name, quotas)
        mine = sorted((view for q, view in holding if q in tree), key=lambda v: v.key)
        out[name] = {
            "Count": len(mine),
            "Max": _units(quota.max), "Min": _units(quota.min),
            "Used": used, "SelfUsed": own, "ChildrenUsed": below,
            "GuaranteedUsed": used, "SelfGuaranteedUsed": own, "ChildrenGuaranteedUsed": below,
            "OverSoldUsed": {}, "SelfOverSoldUsed": {}, "ChildrenOverSoldUsed": {},
            "Items": {view.key: {"Name": view.name, "Resource": _resource(view), "Priority": _priority(view),
                                 "OversoldType": "", "ActualOversoldType": "",
                                 "CreationTimestamp": _time(view.created),
                                 "InReserveCache": view.phase == c.Phase.RESERVED.value}
                      for view in mine},
        }
    return out


# --- helpers ----------------------------------------------------------------------------


def _queue_names(controller: Controller) -> list[str]:
    """The Queues' names (Koord-Queue keys its queues by name, all in its namespace; a
    Queue elsewhere is named namespace/name here)."""
    system = controller.shared.config.system_namespace
    names = []
    for key in controller.quota_sync.queue_quotas:
        namespace, _, name = key.partition("/")
        names.append(name if namespace == system else key)
    return sorted(names)


def _holding(controller: Controller) -> Iterable[tuple[str, UnitView]]:
    """(quota, unit) for each unit holding quota, as the engine accounts it."""
    engine = controller.engine
    for key, view in controller.unit_informer.items():
        info = engine.unit(key)
        if info is not None and info.admitted_quota is not None:
            yield info.admitted_quota, view


def _units_by_quota(controller: Controller) -> dict[str, list[UnitView]]:
    """The units the engine charges (or would charge) to each quota."""
    engine = controller.engine
    out: dict[str, list[UnitView]] = {}
    for key, view in controller.unit_informer.items():
        info = engine.unit(key)
        if info is None:
            continue
        quota = info.admitted_quota or engine.named_quota(info)
        if quota is not None:
            out.setdefault(quota, []).append(view)
    return out


def _self_and_below(name: str, quotas: Mapping[str, QuotaInfo]) -> set[str]:
    out = {name}
    grew = True
    while grew:
        more = {q for q, info in quotas.items() if info.parent in out} - out
        grew = bool(more)
        out |= more
    return out


def _milli_cpu(amounts: Mapping[str, int]) -> dict[str, int]:
    """Koord-Queue's utils.Resource: cpu in milli-cores, the rest in whole units (rounded up)."""
    return {k: (v if k == "cpu" else -(-v // 1000)) for k, v in sorted(amounts.items())}


def _units(amounts: Mapping[str, int]) -> dict[str, int]:
    """Whole units, rounded up (``Quantity.Value()``), cpu included."""
    return {k: -(-v // 1000) for k, v in sorted(amounts.items())}


def _resource(view: UnitView) -> dict[str, str] | None:
    """The unit's spec.resource as written (Koord-Queue returns the ResourceList)."""
    resource = view.spec.get("resource")
    if not isinstance(resource, Mapping):
        return None
    return {str(k): str(v) for k, v in sorted(resource.items())}


def _priority(view: UnitView) -> int:
    priority = view.spec.get("priority")
    return priority if isinstance(priority, int) else 0


def _time(seconds: float) -> str | None:
    """A metav1.Time: RFC 3339 in UTC to the second (null when unset)."""
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bearer_authorize(access: AccessReviewer) -> Authorize:
    """The dashboard's authentication, for the API bound beyond loopback: a bearer token (a
    TokenReview says whose), and a grant to `list queueunits` in every namespace (a
    SubjectAccessReview): its answers show every quota and every tenant's units, with no
    namespace to filter them by, so only who may read all units anyway reads them."""

    async def authorize(request: web.Request) -> tuple[int, str] | None:
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.startswith("Bearer ") else ""
        if not token:
            return 401, "A bearer token is needed (Authorization: Bearer <token>; kubectl create token ...)."
        caller = await access.authenticate(token)
        if caller is None:
            return 401, "That token was not accepted."
        if not await access.allowed(caller, "list", c.QUEUE_GROUP, c.QUEUE_UNIT_PLURAL):
            return 403, (f"{caller.user} may not read Koord-Queue's HTTP API: it shows every quota and every "
                         f"tenant's units, so it needs list on {c.QUEUE_UNIT_PLURAL}.{c.QUEUE_GROUP} in all "
                         "namespaces.")
        return None

    return authorize


def _json(body: Any, status: int = 200) -> web.Response:
    """Indented with tabs, keys as built (Go's json.MarshalIndent(v, "", "\\t"))."""
    return web.Response(text=json.dumps(body, indent="\t"), status=status, content_type="application/json",
                        headers={"Cache-Control": "no-store"})


