"""What a person wants to see, as plain data: the quota tree, the queues, why units wait.

One function builds it from an engine and the unit views, whoever holds them: the
controller (for its dashboard's JSON endpoint) or `koord-queue status` / `explain`
(from a snapshot of the cluster's objects). Amounts are milli-units, as in the engine;
readers format them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from koordqueue.controller.snapshot import SENT_BACK
from koordqueue.controller.views import UnitView
from koordqueue.engine import Engine
from koordqueue.engine.model import QuotaInfo, ResourceList

Overview = dict[str, Any]


def overview(
    engine: Engine,
    quotas: Mapping[str, QuotaInfo],
    units: Mapping[str, UnitView],
    capacity: ResourceList | None,
    now: float,
    recent: Iterable[Mapping[str, Any]] = (),
    queue_limit: int = 100,
    written_messages: bool = False,
    queue_quotas: Mapping[str, str | None] | None = None,
) -> Overview:
    """Quotas (flat, each naming its parent), queues with their first pending units,
    the cluster's capacity, and the recent decisions.

    ``written_messages``: say why units wait with the message on the unit (what the
    controller wrote), for an engine loaded from a snapshot that has not run a cycle.
    ``queue_quotas``: queue key -> the quota it is bound to, so that an empty queue
    still names its quota. Units waiting out a back-off are listed with their queue."""
    statuses = engine.quota_status()
    quota_rows = []
    for name, status in statuses.items():
        info = quotas.get(name)
        resources = sorted(set(status.max) | set(status.min) | set(status.used))
        quota_rows.append({
            "name": name,
            "namespace": info.namespace if info else "",
            "parent": info.parent if info else None,
            "is_parent": bool(info and info.is_parent),
            "policy": str(info.policy) if info else "",
            "valid": status.valid,
            "reason": status.reason,
            "resources": {
                r: {"min": status.min.get(r, 0), "max": status.max.get(r), "used": status.used.get(r, 0),
                    "runtime": status.runtime.get(r), "demand": status.demand.get(r, 0)}
                for r in resources
            },
        })
    backing_off: dict[str, list[dict[str, Any]]] = {}
    for key, unit in units.items():
        if unit.phase in SENT_BACK:
            standing = engine.standing(key)
            if standing is not None and standing.queue:
                backing_off.setdefault(standing.queue, []).append({
                    "unit": key, "job": f"{unit.consumer_kind}/{unit.consumer_name}", "phase": unit.phase,
                    "priority": standing.priority, "requeue_at": unit.requeue_at, "message": unit.message,
                })
    bindings = queue_quotas or {}
    queue_rows = []
    for key, standings in engine.queue_positions().items():
        pending = []
        for standing in standings[:queue_limit]:
            unit = units.get(standing.unit)
            pending.append({
                "unit": standing.unit,
                "job": f"{unit.consumer_kind}/{unit.consumer_name}" if unit else "",
                "position": standing.position,
                "priority": standing.priority,
                "age": max(0.0, now - unit.created) if unit else None,
                "message": unit.message if written_messages and unit and unit.message else standing.message,
            })
        waiting_out = sorted(backing_off.get(key, []), key=lambda b: (b["requeue_at"] or 0.0, b["unit"]))
        queue_rows.append({"key": key, "quota": bindings.get(key) or (standings[0].quota if standings else None),
                           "pending_count": len(standings), "pending": pending,
                           "backing_off": waiting_out[:queue_limit]})
    return {
        "time": now,
        "capacity": dict(capacity) if capacity is not None else None,
        "quotas": quota_rows,
        "queues": queue_rows,
        "recent": list(recent),
    }


def explain(
    engine: Engine, quotas: Mapping[str, QuotaInfo], unit: UnitView, capacity: ResourceList | None,
) -> dict[str, Any]:
    """Why one unit waits, where it stands, and what would let it in."""
    standing = engine.standing(unit.key)
    info = engine.unit(unit.key)
    request = dict(unit.request or {})
    result: dict[str, Any] = {
        "unit": unit.key,
        "job": f"{unit.consumer_kind}/{unit.namespace}/{unit.consumer_name}",
        "phase": unit.phase or "Enqueued",
        "message": unit.message or (standing.message if standing else ""),
        "priority": info.priority if info else None,
        "request": request,
        "quota": standing.quota if standing else None,
        "queue": standing.queue if standing else None,
        "position": standing.position if standing else None,
        "ahead": [],
        "shortfall": [],
        "admitted": bool(info and info.admitted_quota),
    }
    if standing is not None and standing.queue and standing.position:
        rows = engine.queue_positions().get(standing.queue, [])
        result["ahead"] = [{"unit": s.unit, "priority": s.priority, "message": s.message}
                           for s in rows[: standing.position - 1][:10]]
    if standing is None or not standing.quota or result["admitted"]:
        return result
    statuses = engine.quota_status()
    name: str | None = standing.quota
    while name is not None and name in statuses:
        status = statuses[name]
        for resource, asks in sorted(request.items()):
            limit = status.max.get(resource)
            used = status.used.get(resource, 0)
            if limit is not None and used + asks > limit:
                result["shortfall"].append({"where": f"quota {name}", "resource": resource, "asks": asks,
                                            "used": used, "limit": limit, "short": used + asks - limit})
        parent = quotas.get(name)
        name = parent.parent if parent else None
    if capacity is not None:
        used_all: ResourceList = {}  # what the top-level quotas use
        for top, status in statuses.items():
            if top in quotas and quotas[top].parent is None:
                for resource, amount in status.used.items():
                    used_all[resource] = used_all.get(resource, 0) + amount
        for resource, asks in sorted(request.items()):
            limit = capacity.get(resource)
            used = used_all.get(resource, 0)
            if limit is not None and used + asks > limit:
                result["shortfall"].append({"where": "the cluster", "resource": resource, "asks": asks,
                                            "used": used, "limit": limit, "short": used + asks - limit})
    return result
