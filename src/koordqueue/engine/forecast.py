"""When will a pending unit start? The engine played forward on a virtual clock.

A copy of the engine's inputs (quotas, Queues, nodes, units: ``clone``) is run with the
production cycle (``Engine.schedule``) as the simulator runs it: running units end at
their expected end (admitted at + expected runtime), pending ones, once admitted, run
their expected runtime, and nothing else arrives. The first admission of each unit that
was pending is its expected start. Three plays give the range: expected (runtimes as
estimated), optimistic (every runtime x FORECAST_OPTIMISTIC_FACTOR) and pessimistic
(every job runs to its max-exec-time when it has one, else x FORECAST_PESSIMISTIC_FACTOR).
The range is the earliest and latest of the three starts (ordering effects can make a
shorter play start a unit later).

The plays of a state where every quota is on its own (``snapshot``: flat quotas that the
cluster's capacity never binds, one Queue each, no preemption, placement, flavors,
fairness by history nor back-off) are made by a replay of their own (``_fast_play``): the
same loop over the same ends, each quota whose room grew scanned as the engine's cycle
scans it (its pending units in admission order, each admitted that fits its max, the scan
stopped at the first that does not where the Queue's policy stops). It gives what the
engine's play gives (tests/engine/test_forecast_fast.py compares them on random states)
at a fraction of the cost: no copy of the engine, no message, no write path.

A unit that is still pending when nothing is left to happen can never start as things
are (start None, basis BASIS_NEVER); one still pending when the play hits its horizon or
its cycle bound is beyond the forecast (None, BASIS_BEYOND). Pure: no I/O, ``now`` given.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

from koordqueue.api.constants import (
    BASIS_ANNOTATION,
    BASIS_BEYOND,
    BASIS_DEFAULT,
    BASIS_HISTORY,
    BASIS_NEVER,
    FORECAST_COARSEN,
    FORECAST_HORIZON_SECONDS,
    FORECAST_MAX_CYCLES,
    FORECAST_OPTIMISTIC_FACTOR,
    FORECAST_PESSIMISTIC_FACTOR,
    FORECAST_RESOLUTION_SECONDS,
)
from koordqueue.engine.core import Engine
from koordqueue.engine.ledger import UnitState, copy_unit
from koordqueue.engine.model import ResourceList
from koordqueue.engine.pending import Entry
from koordqueue.engine.runtimes import Runtime

BASES = (BASIS_ANNOTATION, BASIS_HISTORY, BASIS_DEFAULT)  # strongest first
EXPECTED, OPTIMISTIC, PESSIMISTIC = "expected", "optimistic", "pessimistic"
MAX_CYCLES_PER_INSTANT = 100  # as the simulator's: beyond this the engine is deemed stuck at one instant


@dataclass(frozen=True, slots=True)
class UnitForecast:
    """One pending unit's expected start (None: never, or beyond the horizon, as ``basis``
    says), its range, where the runtimes it depends on came from (``basis``: the weakest
    of those of the jobs that end before it starts, joined with "+"), and how many jobs
    end before it starts (``ahead``)."""

    start: float | None
    earliest: float | None
    latest: float | None
    basis: str
    ahead: int = 0


@dataclass(slots=True)
class Forecast:
    """Every pending unit's forecast, taken at ``at``; ``complete``: no play hit a bound."""

    at: float
    units: dict[str, UnitForecast] = field(default_factory=dict)
    cycles: int = 0
    complete: bool = True
    # The units running at ``at``: (admitted through queue, admitted at, expected end), for timelines.
    running: dict[str, tuple[str | None, float, float]] = field(default_factory=dict)
    fast: bool = False  # played by ``_fast_play`` (else by copies of the engine)


def clone(engine: Engine) -> Engine:
    """A new engine with the same inputs (the copy's units are copies): one to play forward."""
    new = Engine(engine._config)
    new.set_cluster_capacity(engine._capacity)
    for quota in engine._quotas.values():
        new.set_quota(quota)
    for queue in engine._queues.values():
        new.set_queue(queue)
    room = engine._ledger.room
    for node in room._infos.values():
        new.set_node(node)
    for name, used in room._usage.items():
        new.set_node_usage(name, used)
    for key, record in engine._ledger.units.items():
        new.set_unit(copy_unit(record.info), owned=True)
        pods = room._pods.get(key)
        if pods:
            new.set_unit_pods(key, pods)
    new._ledger.done.since.update(engine._ledger.done.since)
    if engine._fair.history.tracks:  # budgets and sharing by history play forward from the same past
        new._fair.history = engine._fair.history.copy()
    return new


def pending_keys(engine: Engine) -> tuple[list[str], list[str]]:
    """The units waiting for an admission (queued or backing off), and the parked ones."""
    engine._sync()  # as its views do: derived state brought up to date
    waiting: list[str] = []
    parked: list[str] = []
    for key, record in engine._ledger.units.items():
        if record.state in (UnitState.QUEUED, UnitState.BACKOFF):
            waiting.append(key)
        elif record.state is UnitState.PARKED:
            parked.append(key)
    return waiting, parked


def _duration(runtime: Runtime, scenario: str) -> float:
    if scenario == OPTIMISTIC:
        return runtime.seconds * FORECAST_OPTIMISTIC_FACTOR
    if scenario == PESSIMISTIC:
        return runtime.max_seconds if runtime.max_seconds is not None else runtime.seconds * FORECAST_PESSIMISTIC_FACTOR
    return runtime.seconds


@dataclass(slots=True)
class _Play:
    starts: dict[str, float]
    ends: list[tuple[float, str]]  # (time, basis) of every job that ended, in time order
    complete: bool
    cycles: int
    running: dict[str, tuple[str | None, float, float]]  # of the units running at first


def _play(engine: Engine, now: float, runtimes: Mapping[str, Runtime], default: Runtime, scenario: str,
          wanted: set[str], horizon: float, max_cycles: int, coarsen: float, resolution: float) -> _Play:
    """Run ``engine`` (a clone, used up) forward from ``now`` until every ``wanted`` unit
    started, nothing is left to happen, or a bound is hit."""
    engine._sync()  # (a clone's units are placed at its first rebuild)
    ledger = engine._ledger
    room = ledger.room
    events: list[tuple[float, int, str]] = []  # (end, run, unit)
    runs: dict[str, int] = {}
    seq = 0

    def end_of(key: str, started: float, at: float) -> float:
        runtime = runtimes.get(key, default)
        end = started + _duration(runtime, scenario)
        if end < at:  # past its expected end already: it ends now (pessimistic: runs as long again)
            end = at + (_duration(runtime, scenario) if scenario == PESSIMISTIC else 0.0)
        return end

    running: dict[str, tuple[str | None, float, float]] = {}
    for key, record in ledger.units.items():
        if record.state is UnitState.ADMITTED:
            started = record.info.admitted_at if record.info.admitted_at is not None else now
            runs[key] = 0
            end = end_of(key, started, now)
            running[key] = (record.info.admitted_queue, started, end)
            heapq.heappush(events, (end, 0, key))
    starts: dict[str, float] = {}
    ends: list[tuple[float, str]] = []
    left = set(wanted)
    cycles = at_instant = 0
    t = now
    limit = now + horizon
    while left:
        result = engine.schedule(t)
        cycles += 1
        for admission in result.admitted:
            key = admission.unit
            if key in left:
                starts[key] = t
                left.discard(key)
            engine.set_pods_running(key, True)  # its pods run at once: a Queue waiting for them goes on
            seq += 1
            runs[key] = seq
            heapq.heappush(events, (t + _duration(runtimes.get(key, default), scenario), seq, key))
        for victim in result.preempted:
            runs.pop(victim.unit, None)  # its end is no more; it waits again
            if room._pods.get(victim.unit):
                _unbind(engine, victim.unit)
        if not left or cycles >= max_cycles:
            break
        wake = result.next_wakeup
        if wake is not None and wake <= t:
            at_instant += 1
            if at_instant < MAX_CYCLES_PER_INSTANT:
                continue  # more to do at this instant
            wake = None  # (stuck at this instant, as the simulator deems it: move on)
        at_instant = 0
        while events and runs.get(events[0][2]) != events[0][1]:
            heapq.heappop(events)  # ended or preempted since
        upcoming = [when for when in (wake, events[0][0] if events else None) if when is not None]
        if not upcoming:
            break  # nothing left to happen: the rest never start as things are
        t = max(t, min(upcoming))
        if t > limit:
            break
        batch = t + max(resolution, coarsen * (t - now))  # ends this close together: one cycle
        while events and events[0][0] <= batch:
            _, run, key = heapq.heappop(events)
            if runs.get(key) != run:
                continue
            del runs[key]
            ends.append((t, runtimes.get(key, default).basis))
            if room._pods.get(key):
                _unbind(engine, key)
            engine.remove_unit(key)
    complete = not left or (cycles < max_cycles and t <= limit)
    return _Play(starts, ends, complete, cycles, running)


def _unbind(engine: Engine, key: str) -> None:
    """The unit's bound pods leave their nodes (its job ended or was preempted)."""
    room = engine._ledger.room
    pods = room._pods.get(key, {})
    requests = room._requests.get(key, {})
    for (pod_set, node), count in pods.items():
        used = dict(room._usage.get(node, {}))
        for resource, amount in requests.get(pod_set, {}).items():
            used[resource] = max(0, used.get(resource, 0) - amount * count)
        engine.set_node_usage(node, {r: a for r, a in used.items() if a})
    engine.set_unit_pods(key, {})


@dataclass(slots=True)
class _Leaf:
    """One quota in the fast play: its limits, what its admitted units use, its pending units
    in admission order as (key, request, stops: a misfit of it stops the scan)."""

    limit: ResourceList
    used: ResourceList
    pending: list[tuple[str, ResourceList, bool]]
    least: ResourceList = field(default_factory=dict)  # per limited resource, the least a pending unit asks


@dataclass(slots=True)
class Snapshot:
    """What the fast play reads of the engine (``snapshot``): the quotas, the running units
    as key -> (queue, admitted at, quota charged: None when not a leaf here, charged), and
    the waiting and parked units' keys. Its own copies: it may be played in another thread."""

    leaves: dict[str, _Leaf]
    running: dict[str, tuple[str | None, float | None, str | None, ResourceList]]
    waiting: list[str] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)


def snapshot(engine: Engine) -> Snapshot | None:
    """The state for ``_fast_play`` when every quota is on its own, else None (the engine's
    play is used). On its own: no fairness by history nor budget, not beside koord-scheduler,
    every quota a child of the cluster without flavors or holds, whose limits (with every
    quota's max, used and the min of those that do not lend) the cluster's capacity covers
    for every resource it names, so that the cluster never binds; one Queue per quota,
    without preemption, wait-for-pods-running or max-depth; no unit backing off, and no
    pending unit elastic, non-preemptible or whose pods must fit on the nodes. Then a quota's admissions depend on its own units
    only. Read-only; ``engine`` is synced first (as its views are)."""
    engine._sync()
    ledger = engine._ledger
    config = engine._config
    if engine._fair.active or engine._fair.history.tracks or ledger.fair is not None or config.koordinator:
        return None
    tree = ledger.tree
    root = tree.root
    if root.holds or root.held or root.lent_reserve:
        return None
    leaves: dict[str, _Leaf] = {}
    for state in ledger.qs.values():
        info = state.info
        leaf = state.leaf
        if (state.flavors is not None or info.preemption or info.wait_for_pods_running or info.max_depth is not None
                or leaf.parent is not root or leaf.children or leaf.capped or leaf.holds or leaf.held
                or leaf.name in leaves):
            return None
        leaves[leaf.name] = _Leaf(dict(leaf.limit), dict(leaf.used), [])
    for node in root.children:
        if node.name not in leaves:
            if node.children or node.used:  # (a quota without a Queue and nothing admitted plays no part)
                return None
    # The cluster never binds: for each resource it names, every quota's most (its limit, or
    # what it uses past it) and the min of those that do not lend fit within it, beside what
    # is charged to the cluster itself (units of removed quotas).
    quota_used: ResourceList = {}
    for node in root.children:
        for name, amount in node.used.items():
            quota_used[name] = quota_used.get(name, 0) + amount
    for name, cap in root.limit.items():
        need = root.used.get(name, 0) - quota_used.get(name, 0)
        for node in root.children:
            limit = node.limit.get(name)
            if limit is None:
                return None
            need += max(limit, node.used.get(name, 0)) + (0 if node.lends else node.min.get(name, 0))
        if need > cap:
            return None
    running: dict[str, tuple[str | None, float | None, str | None, ResourceList]] = {}
    pending: list[tuple[Entry, str, ResourceList, bool, str]] = []
    waiting: list[str] = []
    parked: list[str] = []
    for key, record in ledger.units.items():
        rstate = record.state
        if rstate is UnitState.PARKED:
            parked.append(key)
            continue
        if rstate is UnitState.BACKOFF:
            return None
        unit = record.info
        if rstate is UnitState.ADMITTED:
            at = record.node
            charged_at = at.name if at is not None and at.name in leaves and at.parent is root else None
            running[key] = (unit.admitted_queue, unit.admitted_at, charged_at, dict(record.charged))
            continue
        queue = record.queue
        if queue is None or record.elastic or not unit.preemptible or ledger.places(queue, unit):
            return None
        own = leaves[queue.leaf.name]
        request = dict(unit.request)
        waiting.append(key)
        never = any(asked > own.limit[name] for name, asked in request.items() if name in own.limit)
        stops = queue.stops_at(unit.priority) and not never
        pending.append((record.entry, key, request, stops, queue.leaf.name))
    pending.sort()
    for _, key, request, stops, name in pending:
        leaves[name].pending.append((key, request, stops))
    for each in leaves.values():
        each.least = {name: min((asks.get(name, 0) for _, asks, _ in each.pending), default=0)
                      for name in each.limit}
    return Snapshot(leaves, running, waiting, parked)


def _fits(limit: ResourceList, used: ResourceList, request: ResourceList) -> bool:
    for name, asked in request.items():
        cap = limit.get(name)
        if cap is not None and used.get(name, 0) + asked > cap:
            return False
    return True


def _full(limit: ResourceList, used: ResourceList, least: ResourceList) -> bool:
    """Whether no pending unit can fit: for one resource, the room left is less than the
    least any of them asked at first (``_Leaf.least``: the pending units now ask at least as
    much, so a False answer is only ever too cautious: a scan that admits none)."""
    for name, amount in least.items():
        if amount > 0 and used.get(name, 0) + amount > limit[name]:
            return True
    return False


def _fast_play(snap: Snapshot, now: float, runtimes: Mapping[str, Runtime], default: Runtime, scenario: str,
               wanted: set[str], horizon: float, max_cycles: int, coarsen: float, resolution: float) -> _Play:
    """``_play`` over a ``Snapshot``: the same loop, each cycle a scan of the quotas whose
    room grew (all of them at first), as the engine's cycle makes it for quotas on their own."""
    used_of = {name: dict(leaf.used) for name, leaf in snap.leaves.items()}
    pending_of = {name: leaf.pending for name, leaf in snap.leaves.items()}  # (replaced, never changed)
    events: list[tuple[float, int, str]] = []  # (end, run, unit)
    held: dict[str, tuple[str | None, ResourceList, str]] = {}  # running unit -> (its quota here, what it holds, basis)
    seq = 0
    running: dict[str, tuple[str | None, float, float]] = {}
    for key, (queue, admitted_at, charged_at, charged) in snap.running.items():
        started = admitted_at if admitted_at is not None else now
        runtime = runtimes.get(key, default)
        took = _duration(runtime, scenario)
        end = started + took
        if end < now:  # (as ``_play``'s ``end_of``)
            end = now + (took if scenario == PESSIMISTIC else 0.0)
        running[key] = (queue, started, end)
        held[key] = (charged_at, charged, runtime.basis)
        events.append((end, 0, key))
    heapq.heapify(events)
    heappush, heappop = heapq.heappush, heapq.heappop
    starts: dict[str, float] = {}
    ends: list[tuple[float, str]] = []
    left = set(wanted)
    cycles = 0
    t = now
    limit = now + horizon
    dirty: set[str] = set(snap.leaves)
    while left:
        cycles += 1
        for name in dirty:
            line = pending_of[name]
            if not line:
                continue
            leaf = snap.leaves[name]
            used = used_of[name]
            caps = leaf.limit
            least = leaf.least
            if _full(caps, used, least):
                continue  # (no pending unit asks as little as its room: the scan admits none)
            kept: list[tuple[str, ResourceList, bool]] = []
            for i, item in enumerate(line):
                key, request, stops = item
                if _fits(caps, used, request):
                    for resource, amount in request.items():
                        used[resource] = used.get(resource, 0) + amount
                    if key in left:
                        starts[key] = t
                        left.discard(key)
                    seq += 1
                    runtime = runtimes.get(key, default)
                    held[key] = (name, request, runtime.basis)
                    heappush(events, (t + _duration(runtime, scenario), seq, key))
                    if _full(caps, used, least):
                        kept.extend(line[i + 1:])
                        break
                elif stops:
                    kept.extend(line[i:])
                    break
                else:
                    kept.append(item)
            pending_of[name] = kept
        dirty = set()
        if not left or cycles >= max_cycles:
            break
        if not events:
            break  # nothing left to happen: the rest never start as things are
        t = max(t, events[0][0])
        if t > limit:
            break
        batch = t + max(resolution, coarsen * (t - now))
        while events and events[0][0] <= batch:
            _, _, key = heappop(events)
            charged_at, charged, basis = held.pop(key)
            ends.append((t, basis))
            if charged_at is not None:
                used = used_of[charged_at]
                for resource, amount in charged.items():
                    used[resource] = used.get(resource, 0) - amount
                dirty.add(charged_at)
    complete = not left or (cycles < max_cycles and t <= limit)
    return _Play(starts, ends, complete, cycles, running)


def forecast(engine: Engine | Snapshot, now: float, runtimes: Mapping[str, Runtime], default: Runtime,
             horizon: float = FORECAST_HORIZON_SECONDS, max_cycles: int = FORECAST_MAX_CYCLES,
             coarsen: float = FORECAST_COARSEN, resolution: float = FORECAST_RESOLUTION_SECONDS,
             fast: bool = True) -> Forecast:
    """Every pending unit's expected start and range (see the module doc). ``runtimes``:
    unit key -> its expected runtime (``default`` for the others). ``engine`` is not
    changed; the plays run on clones, each bounded by ``horizon`` seconds and ``max_cycles``.
    The jobs that end within ``max(resolution, coarsen x how far ahead)`` of the next end
    end with it, in one cycle: the cost is bounded by the span of time, not the jobs (0 and
    0: every end a cycle of its own, exact). ``fast``: by ``_fast_play`` when the state allows
    it (``snapshot``); False: by the engine's play always (the tests compare the two).
    ``engine`` may be a ``Snapshot`` taken before (the leader takes it on its event loop)."""
    snap: Snapshot | None
    if isinstance(engine, Snapshot):
        snap, waiting, parked = engine, engine.waiting, engine.parked
    else:
        waiting, parked = pending_keys(engine)
        snap = snapshot(engine) if fast and waiting else None
    out = Forecast(now)
    for key in parked:
        out.units[key] = UnitForecast(None, None, None, BASIS_NEVER)
    if not waiting:
        return out
    wanted = set(waiting)
    out.fast = snap is not None
    scenarios = (EXPECTED, OPTIMISTIC, PESSIMISTIC)
    if snap is not None:
        plays = {scenario: _fast_play(snap, now, runtimes, default, scenario, wanted, horizon, max_cycles,
                                      coarsen, resolution) for scenario in scenarios}
    else:
        assert isinstance(engine, Engine)
        plays = {scenario: _play(clone(engine), now, runtimes, default, scenario, wanted, horizon, max_cycles,
                                 coarsen, resolution) for scenario in scenarios}
    out.cycles = sum(play.cycles for play in plays.values())
    expected = plays[EXPECTED]
    out.running = expected.running
    out.complete = all(play.complete for play in plays.values())
    end_times = [when for when, _ in expected.ends]
    first: dict[str, int] = {}  # each basis: the index of the first end of it
    for index, (_, basis) in enumerate(expected.ends):
        if basis not in first:
            first[basis] = index
            if len(first) == len(BASES):
                break
    for key in waiting:
        start = expected.starts.get(key)
        if start is None:
            why = BASIS_NEVER if expected.complete else BASIS_BEYOND
            out.units[key] = UnitForecast(None, None, None, why)
            continue
        others = [plays[s].starts.get(key) for s in (OPTIMISTIC, PESSIMISTIC)]
        known = [start, *(when for when in others if when is not None)]
        earliest = min(known)
        latest = max(known) if all(when is not None for when in others) else None  # None: beyond the horizon
        ahead = bisect_right(end_times, start)
        bases = [name for name in BASES if first.get(name, ahead) < ahead]
        own = runtimes.get(key, default).basis
        out.units[key] = UnitForecast(start, earliest, latest, "+".join(bases) if bases else own, ahead)
    return out
