"""The engine's read-only views: where units stand and why they wait, and quotas' usage.

Functions over the ledger, worked out when asked (with today's amounts), so that a unit
the last cycle did not get to has a reason too. ``live_message`` is also what a scan
tells the units behind one that stops it (cycle.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine import flavors, messages
from koordqueue.engine.fairness import Fairness, budget_wait
from koordqueue.engine.fit import first_misfit
from koordqueue.engine.ledger import Ledger, QueueState, UnitRecord, UnitState
from koordqueue.engine.model import (
    FlavorTry,
    Placement,
    QuotaInfo,
    QuotaStatus,
    ResourceList,
    Standing,
    UnitInfo,
)
from koordqueue.engine.pending import Shape
from koordqueue.engine.placement import Unplaced


def quota_status(ledger: Ledger, quotas: Mapping[str, QuotaInfo], reasons: Mapping[str, str]) -> dict[str, QuotaStatus]:
    """Every quota's limits and usage; ``reasons``: why some cannot be used."""
    out: dict[str, QuotaStatus] = {}
    for name in sorted(quotas):
        quota = quotas[name]
        node = ledger.tree.nodes.get(name)
        if node is None:
            out[name] = QuotaStatus(
                name,
                dict(quota.min),
                dict(quota.max),
                dict(ledger.used_by_name.get(name, {})),
                {},
                {},
                False,
                reasons.get(name),
                dict(quota.max),
            )
        else:
            used = {k: v for k, v in node.used.items() if v}
            out[name] = QuotaStatus(
                name, dict(quota.min), dict(quota.max), used, dict(node.runtime), dict(node.demand), True,
                limit=dict(node.limit),
            )
    return out


def queue_positions(ledger: Ledger) -> dict[str, list[Standing]]:
    """Every queue's pending units in order, each with why it waits now."""
    out: dict[str, list[Standing]] = {}
    for key in sorted(ledger.qs):
        state = ledger.qs[key]
        rows = []
        reasons: dict[tuple[Shape, int, bool], str] = {}
        for position, entry in enumerate(state.pending.ordered(), start=1):
            record = ledger.units[entry.key]
            rows.append(
                Standing(
                    record.key,
                    key,
                    state.leaf.name,
                    position,
                    record.info.priority,
                    live_message(ledger, record, reasons, position),
                )
            )
        out[key] = rows
    return out


def standing(ledger: Ledger, key: str) -> Standing | None:
    """Where one unit stands: admitted, queued (its position) or not, and why it waits now."""
    record = ledger.units.get(key)
    if record is None:
        return None
    info = record.info
    if record.state is UnitState.ADMITTED:
        return Standing(
            key,
            info.admitted_queue,
            info.admitted_quota,
            None,
            info.priority,
            f"admitted to quota {info.admitted_quota}",
        )
    state = record.queue
    quota = record.node.name if record.node is not None else None
    position = (
        state.pending.position(record.entry)
        if state is not None and record.state is UnitState.QUEUED
        else None
    )
    return Standing(
        key, state.key if state else None, quota, position, info.priority, live_message(ledger, record)
    )


def live_message(ledger: Ledger, record: UnitRecord, reasons: dict[tuple[Shape, int, bool], str] | None = None,
                 position: int | None = None) -> str:
    """Why a queued unit waits now: its queue waiting for a unit's pods, else being
    beyond its queue's depth, else who blocks it, else the limit its request runs into
    (worked out now, so that units the last cycle did not get to have a reason too),
    else the text it was last told. ``reasons`` caches the limit's text per request and
    priority, for many units of one queue; ``position``: the unit's in its queue, when known."""
    state = record.queue
    if record.state is not UnitState.QUEUED or state is None:
        return record.message
    starting = ledger.pods_blocker(state)
    if starting is not None:
        return messages.pods_starting(state.key, starting)
    depth = state.info.max_depth
    if depth is not None:
        if position is None:
            position = state.pending.position(record.entry)
        if position > depth:
            return messages.beyond_depth(state.key, depth)
    blocker = ledger.units.get(state.blocker) if state.blocker is not None else None
    if (
        blocker is not None
        and blocker is not record
        and blocker.state is UnitState.QUEUED
        and blocker.entry < record.entry
    ):
        if state.info.policy == QueuePolicy.INTELLIGENT and record.info.priority < state.threshold:
            return messages.band_blocked(blocker.key, state.key, state.threshold)
        return messages.blocked(blocker.key, state.key, str(state.info.policy))
    info = record.info
    fair = ledger.fair
    if fair is not None and fair.budgeted:  # a budget holds it back: said afresh, with when it frees up
        held = budget_wait(fair, state.leaf, info, ledger.now)
        if held is not None:
            return held[0]
    if state.flavors is not None:
        return flavors.live_message(ledger, record, state)
    protected = is_protected(ledger, record, state)
    key = (record.shape, info.priority, protected)
    text = reasons.get(key) if reasons is not None else None
    if text is None:
        request, counts = info.request, None
        misfit = first_misfit(state.leaf, request, info.priority, preemptible=info.preemptible)
        if misfit is not None and any(ps.elastic for ps in info.pod_sets):  # why not even its least
            request, counts = _least(info)
            misfit = first_misfit(state.leaf, request, info.priority, preemptible=info.preemptible)
        text = "" if misfit is None else messages.waiting(state.leaf, misfit, info.priority,
                                                          ledger.protect(protected))
        if misfit is None and ledger.places(state, info):
            found = ledger.room.place(info.pod_sets, counts)
            if isinstance(found, Unplaced):
                text = messages.unplaced(state.leaf, found)
        if reasons is not None:
            reasons[key] = text
    return text or record.message


def is_protected(ledger: Ledger, record: UnitRecord, state: QueueState) -> bool:
    """Whether only its victims' protect time keeps the unit from preempting (by its last
    scan, or that of the first unit of its request)."""
    first = state.pending.next_of(record.shape)  # what holds for the first of its request holds for it
    return ledger.units[first.key].protected if first is not None else record.protected


def _least(info: UnitInfo) -> tuple[ResourceList, dict[str, int]]:
    """An elastic unit's least: its request and pod counts with its elastic pod sets at their min."""
    request = dict(info.request)
    counts = {}
    for ps in info.pod_sets:
        if ps.elastic:
            assert ps.min_count is not None
            counts[ps.name] = ps.min_count
            for name, amount in ps.request.items():
                request[name] = request.get(name, 0) - (ps.count - ps.min_count) * amount
    return request, counts


def protect_wait(ledger: Ledger, key: str) -> float | None:
    """The protect time, when the queued unit ``key`` could preempt for room but for its
    victims' protect time; else None (``Engine.protect_wait``)."""
    record = ledger.units.get(key)
    if record is None or record.state is not UnitState.QUEUED or record.queue is None:
        return None
    return ledger.protect(is_protected(ledger, record, record.queue))


def flavors_tried(ledger: Ledger, key: str) -> list[FlavorTry] | None:
    """The flavors a queued unit of a flavored quota may be admitted into, in order, and why
    each refuses it now (``Engine.flavors_tried``); None: not queued, or no flavors."""
    record = ledger.units.get(key)
    state = record.queue if record is not None else None
    if record is None or record.state is not UnitState.QUEUED or state is None or state.flavors is None:
        return None
    return flavors.tried(ledger, record, state)


def flavor_of(ledger: Ledger, key: str, placement: Placement | None) -> str | None:
    """The flavor whose selector is among the node labels ``placement`` pinned, for a unit of
    a quota with flavors (``Engine.flavor_of``)."""
    record = ledger.units.get(key)
    state = record.queue if record is not None else None
    if state is None or state.flavors is None or placement is None:
        return None
    pinned = {label: value for _, _, chain in placement.domains for label, value in chain}
    for flavor in state.flavors.flavors:
        if all(pinned.get(label) == value for label, value in flavor.selector):
            return flavor.node.name
    return None


def fairness_status(fair: Fairness) -> dict[str, dict[str, object]]:
    """Per tracked quota: decayed usage, weight and budgets, in resource-hours (``Engine.fairness_status``)."""
    out: dict[str, dict[str, object]] = {}
    history = fair.history
    for name in sorted(history.tracks):
        budgets = {b.resource: {"used": history.in_window(name, b.resource) / 3.6e6, "amount": b.amount / 3.6e6,
                                "window": b.window} for b in fair.budgeted.get(name, ())}
        out[name] = {"decayed": {r: v / 3.6e6 for r, v in history.decayed(name).items()},
                     "weight": dict(fair.weights.get(name, {})), "budgets": budgets}
    return out
