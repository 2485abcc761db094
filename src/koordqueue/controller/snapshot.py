"""Loading the engine from the objects' status: what a restarted controller does, and
what `koord-queue status` and `explain` do to see the queue as the controller sees it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.objects import parse_elastic_quota, parse_queue
from koordqueue.api.quantity import QuantityError, parse_resource_list
from koordqueue.controller.views import UnitView, unit_view
from koordqueue.engine import Engine
from koordqueue.engine.model import QuotaInfo, ResourceList, UnitInfo
from koordqueue.kube.client import KubeClient, Resource

QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
QUEUES = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_PLURAL)
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
NODES = Resource("", "v1", "nodes", namespaced=False)
HOLDING = {p.value for p in c.PHASES_HOLDING_QUOTA}
FINISHED = {p.value for p in c.PHASES_FINISHED}
SENT_BACK = {c.Phase.PREEMPTED.value, c.Phase.TIMEOUT_BACKOFF.value}
UNRESOLVED = "(unresolved)"  # a held unit whose quota is gone: charged to the cluster total


def hold(engine: Engine, info: UnitInfo, since: float) -> None:
    """Account a unit as holding quota: the quota it resolves to (else the cluster's)."""
    info.requeue_at = None
    engine.set_unit(info)
    standing = engine.standing(info.key)
    info.admitted_quota = (standing.quota if standing and standing.quota else None) or UNRESOLVED
    info.admitted_queue = standing.queue if standing else None
    info.admitted_at = since
    engine.set_unit(info)


def load_unit(engine: Engine, unit: UnitView, now: float) -> float | None:
    """Put a unit into the engine as its object says; return when it leaves back-off."""
    if unit.phase in FINISHED:
        return None
    info = unit.unit_info()
    if unit.phase in HOLDING:
        hold(engine, info, unit.allocated_at or unit.created)
        return None
    requeue_at = None
    if unit.phase in SENT_BACK:
        requeue_at = unit.requeue_at if unit.requeue_at is not None else now
        info.requeue_at = requeue_at
    engine.set_unit(info)
    return requeue_at


@dataclass
class Snapshot:
    engine: Engine
    quotas: dict[str, QuotaInfo] = field(default_factory=dict)
    units: dict[str, UnitView] = field(default_factory=dict)
    queue_quotas: dict[str, str | None] = field(default_factory=dict)  # queue key -> bound quota
    capacity: ResourceList | None = None
    problems: list[str] = field(default_factory=list)  # objects that could not be read


async def take_snapshot(client: KubeClient) -> Snapshot:
    """Read quotas, queues, units and nodes and load them into a fresh engine."""
    snap = Snapshot(Engine())
    total: ResourceList = {}
    for node in (await client.list_all(NODES)).items:
        try:
            for name, amount in parse_resource_list((node.get("status") or {}).get("allocatable") or {}).items():
                total[name] = total.get(name, 0) + amount
        except QuantityError as e:
            snap.problems.append(f"node {node['metadata'].get('name')}: {e}")
    snap.capacity = total or None
    snap.engine.set_cluster_capacity(snap.capacity)
    for obj in (await client.list_all(QUOTAS)).items:
        try:
            quota = parse_elastic_quota(obj).quota
        except (InvalidObject, QuantityError) as e:
            snap.problems.append(str(e))
            continue
        if c.LABEL_QUEUE_POLICY not in (obj["metadata"].get("labels") or {}):
            quota = replace(quota, policy=c.DEFAULT_QUEUE_POLICY)
        snap.quotas[quota.name] = quota
        snap.engine.set_quota(quota)
    for obj in (await client.list_all(QUEUES)).items:
        try:
            queue = parse_queue(obj, list(snap.quotas)).queue
            snap.engine.set_queue(queue)
            snap.queue_quotas[queue.key] = queue.quota
        except InvalidObject as e:
            snap.problems.append(str(e))
    now = time.time()
    for obj in (await client.list_all(UNITS)).items:
        unit = unit_view(obj)
        snap.units[unit.key] = unit
        load_unit(snap.engine, unit, now)
    return snap
