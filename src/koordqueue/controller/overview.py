"""What a person wants to see, as plain data: the quota tree, the queues, why units wait.

One function builds it from an engine and the unit views, whoever holds them: the
controller (for its dashboard's JSON endpoint) or `koord-queue status` / `explain`
(from a snapshot of the cluster's objects). Amounts are milli-units, as in the engine;
readers format them, but for the advice of ``explain``, which is words.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from koordqueue.api.quantity import format_quantity
from koordqueue.controller.forecaster import forecast_fields, forecast_words
from koordqueue.controller.phases import SENT_BACK
from koordqueue.controller.views import UnitView
from koordqueue.engine import Engine, messages
from koordqueue.engine.forecast import Forecast
from koordqueue.engine.model import QuotaInfo, ResourceList, Standing

Overview = dict[str, Any]


def mode_text(koordinator: bool) -> str:
    """Which admission rule is in force (EngineConfig.koordinator), in words."""
    if koordinator:
        return ("Koordinator mode on: koord-scheduler schedules the pods, so no job is admitted past its "
                "quota's runtime quota as koord-scheduler computes it")
    return "Koordinator mode off: a quota borrows past its runtime quota while the cluster has room"


def overview(
    engine: Engine,
    quotas: Mapping[str, QuotaInfo],
    units: Mapping[str, UnitView],
    capacity: ResourceList | None,
    now: float,
    recent: Iterable[Mapping[str, Any]] = (),
    queue_limit: int = 100,
    queue_quotas: Mapping[str, str | None] | None = None,
    told: Mapping[str, str] | None = None,
    forecast: Forecast | None = None,
) -> Overview:
    """Quotas (flat, each naming its parent), queues with their first pending units,
    the cluster's capacity, and the recent decisions.

    Why a unit waits is worked out now by the engine (not the unit's status.message,
    which may lag); ``told``: units whose reason the caller knows better (a snapshot's
    units that the controller admits at its next cycle). ``queue_quotas``: queue key ->
    the quota it is bound to, so that an empty queue still names its quota. Units
    waiting out a back-off are listed with their queue and the reason they were sent back."""
    told = told or {}
    statuses = engine.quota_status()
    history = engine.fairness_status()  # (empty unless a budget or sharing by history is asked for)
    quota_rows = []
    for name, status in statuses.items():
        info = quotas.get(name)
        resources = sorted(set(status.max) | set(status.min) | set(status.used))
        row: dict[str, Any] = {
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
        }
        if name in history:  # decayed usage, effective weight, budgets' use (docs/fairness.md)
            row["history"] = history[name]
        quota_rows.append(row)
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
    running_by_queue: dict[str, list[dict[str, Any]]] = {}  # the forecast's running units: (since, expected end)
    for key, (through, since, until) in sorted((forecast.running if forecast else {}).items(),
                                               key=lambda kv: (kv[1][2], kv[0])):
        if through is not None:
            running_by_queue.setdefault(through, []).append({"unit": key, "since": since, "until": until})
    queue_rows = []
    for key, standings in engine.queue_positions().items():
        pending = []
        for standing in standings[:queue_limit]:
            queued = units.get(standing.unit)
            pending.append({
                "unit": standing.unit,
                "job": f"{queued.consumer_kind}/{queued.consumer_name}" if queued else "",
                "position": standing.position,
                "priority": standing.priority,
                "age": max(0.0, now - queued.created) if queued else None,
                "message": told.get(standing.unit, standing.message),
                **_forecast_of(forecast, standing.unit, now),
            })
        waiting_out = sorted(backing_off.get(key, []), key=lambda b: (b["requeue_at"] or 0.0, b["unit"]))
        queue_rows.append({"key": key, "quota": bindings.get(key) or (standings[0].quota if standings else None),
                           "pending_count": len(standings), "pending": pending,
                           "backing_off": waiting_out[:queue_limit],
                           "running": running_by_queue.get(key, [])[:queue_limit]})
    return {
        "time": now,
        "mode": mode_text(engine.koordinator),
        "capacity": dict(capacity) if capacity is not None else None,
        "quotas": quota_rows,
        "queues": queue_rows,
        "recent": list(recent),
    }


def _forecast_of(forecast: Forecast | None, key: str, now: float | None) -> dict[str, Any]:
    """A pending unit's forecast fields (forecaster.py), and its words when ``now`` is given."""
    if forecast is None:
        return {}
    item = forecast.units.get(key)
    out = forecast_fields(item)
    out["startsAt"] = item.start if item is not None else None  # (epoch seconds, for the dashboard and status)
    out["rangeAt"] = [item.earliest, item.latest] if item is not None else None
    if now is not None:
        out["forecast"] = forecast_words(item, now)
    return out


def explain(
    engine: Engine, quotas: Mapping[str, QuotaInfo], unit: UnitView, capacity: ResourceList | None,
    told: Mapping[str, str] | None = None, forecast: Forecast | None = None, now: float | None = None,
    runtime_problem: str | None = None,
) -> dict[str, Any]:
    """Why one unit waits (worked out now), where it stands, and what would let it in
    (``advice``, in words). ``told`` as for ``overview``; ``forecast``: when it is expected
    to start (forecaster.py), told in words as of ``now``; ``runtime_problem``: why its
    expected-runtime annotation was ignored."""
    standing = engine.standing(unit.key)
    info = engine.unit(unit.key)
    request = dict(info.request) if info else dict(unit.request or {})  # the job's, as the engine has it
    admitted = bool(info and info.admitted_quota)
    waiting = standing is not None and standing.position is not None
    if unit.key in (told or {}):
        message = (told or {})[unit.key]
    elif waiting and standing is not None:
        message = standing.message
    else:  # admitted, backing off (its status says why it was sent back), or parked
        message = unit.message or (standing.message if standing else "")
    result: dict[str, Any] = {
        "unit": unit.key,
        "job": f"{unit.consumer_kind}/{unit.namespace}/{unit.consumer_name}",
        "phase": unit.phase or "Enqueued",
        "message": message,
        "priority": info.priority if info else None,
        "request": request,
        "quota": standing.quota if standing else None,
        "queue": standing.queue if standing else None,
        "position": standing.position if standing else None,
        "ahead": [],
        "advice": [],
        "admitted": admitted,
        "mode": mode_text(engine.koordinator),
        **({} if admitted else _forecast_of(forecast, unit.key, now)),
    }
    if runtime_problem:
        result["runtimeProblem"] = runtime_problem
    if unit.key in (told or {}):
        result["advice"] = ["nothing more: it fits now"]
        return result
    if admitted or standing is None or not standing.quota:
        if not admitted:
            result["advice"] = ["It is in no queue: see why above."]
        return result
    ahead: list[Standing] = []
    if standing.queue and standing.position:
        ahead = engine.queue_positions().get(standing.queue, [])[: standing.position - 1]
        result["ahead"] = [{"unit": s.unit, "priority": s.priority, "message": s.message} for s in ahead[:10]]
    result["advice"] = advice(engine, quotas, standing.quota, request, ahead, capacity)
    tried = engine.flavors_tried(unit.key)
    if tried is not None:  # its quota's flavors, in order, and why each refuses it (the message's words)
        result["flavors"] = [{"flavor": t.flavor, "selects": t.selects, "refused": t.refused} for t in tried]
    protect = engine.protect_wait(unit.key)
    if protect is not None:
        result["advice"].insert(0, messages.protect_advice(protect))
    return result


def advice(engine: Engine, quotas: Mapping[str, QuotaInfo], quota: str, request: ResourceList,
           ahead: list[Standing], capacity: ResourceList | None) -> list[str]:
    """What would let a request into ``quota``, in words: for each limit on its path (the
    quota's max, its parents', the cluster's), either a change that can happen when the
    request is more than the limit itself (raise it, or ask for less), or how much must
    be freed there for it and for the units ahead of it in its queue (they go first)."""
    statuses = engine.quota_status()
    limits: list[tuple[str, str | None, ResourceList, ResourceList]] = []  # where, quota, limit, used
    name: str | None = quota
    while name is not None and name in statuses:
        limits.append((f"quota {name}", name, statuses[name].limit, statuses[name].used))
        parent = quotas.get(name)
        name = parent.parent if parent else None
    if capacity is not None:
        used_all: ResourceList = {}  # what the top-level quotas use
        for top, status in statuses.items():
            if top in quotas and quotas[top].parent is None:
                for resource, amount in status.used.items():
                    used_all[resource] = used_all.get(resource, 0) + amount
        limits.append(("the cluster", None, capacity, used_all))
    never: list[str] = []
    short: list[str] = []
    asked_ahead: ResourceList = {}
    counted = 0
    for other in ahead:
        info = engine.unit(other.unit)
        if info is None or _never_fits(info.request, limits):
            continue  # it will never take room: it is no competition
        counted += 1
        for resource, amount in info.request.items():
            asked_ahead[resource] = asked_ahead.get(resource, 0) + amount
    for where, name, limit_map, used_map in limits:
        for resource, asks in sorted(request.items()):
            limit = limit_map.get(resource)
            if limit is None:
                continue
            if asks > limit:
                change = (f"raise the max {resource} of {where} to at least {_q(asks)}" if name is not None
                          else f"add nodes until the cluster has {_q(asks)} {resource} to share")
                never.append(f"it can never fit as it is: {change} (now {_q(limit)}), or ask for at most "
                             f"{_q(limit)} {resource}")
                continue
            used = used_map.get(resource, 0)
            before = asked_ahead.get(resource, 0)
            if used + before + asks > limit:
                them = "unit" if counted == 1 else "units"
                behind = f" + {_q(before)} for the {counted} {them} ahead of it in its queue" if before else ""
                bound = "capacity" if name is None else "max" if limit == statuses[name].max.get(resource) \
                    else f"max {_q(statuses[name].max.get(resource, 0))} x oversellrate ="
                short.append(f"{_q(used + before + asks - limit)} {resource} freed in {where} "
                             f"(used {_q(used)}{behind} + asks {_q(asks)} > {bound} {_q(limit)})")
    own = statuses.get(quota)
    if engine.koordinator and own is not None:  # koord-scheduler's own limit comes first
        for resource, asks in sorted(request.items()):
            share = own.runtime.get(resource)
            used = own.used.get(resource, 0) + asked_ahead.get(resource, 0)
            if share is not None and asks <= own.limit.get(resource, asks) and used + asks > share:
                short.insert(0, f"{_q(used + asks - share)} {resource} more runtime quota for quota {quota}, or "
                                f"as much freed in it (used and asked ahead {_q(used)} + asks {_q(asks)} > its "
                                f"runtime quota {_q(share)} as koord-scheduler computes it; it grows as other "
                                "quotas ask for less)")
    if never:
        return never
    if short:
        return short
    return ["its quotas have room for it now: it waits for its turn (see why above: the units ahead of it, "
            "a unit that blocks its queue, or room held for a unit of another quota)"]


def _never_fits(request: ResourceList, limits: list[tuple[str, str | None, ResourceList, ResourceList]]) -> bool:
    return any(asks > limit_map.get(resource, asks) for _, _, limit_map, _ in limits
               for resource, asks in request.items())


def _q(amount: int) -> str:
    return format_quantity(amount)
