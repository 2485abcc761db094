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


def forecast(engine: Engine, now: float, runtimes: Mapping[str, Runtime], default: Runtime,
             horizon: float = FORECAST_HORIZON_SECONDS, max_cycles: int = FORECAST_MAX_CYCLES,
             coarsen: float = FORECAST_COARSEN, resolution: float = FORECAST_RESOLUTION_SECONDS) -> Forecast:
    """Every pending unit's expected start and range (see the module doc). ``runtimes``:
    unit key -> its expected runtime (``default`` for the others). ``engine`` is not
    changed; the plays run on clones, each bounded by ``horizon`` seconds and ``max_cycles``.
    The jobs that end within ``max(resolution, coarsen x how far ahead)`` of the next end
    end with it, in one cycle: the cost is bounded by the span of time, not the jobs (0 and
    0: every end a cycle of its own, exact)."""
    waiting, parked = pending_keys(engine)
    out = Forecast(now)
    for key in parked:
        out.units[key] = UnitForecast(None, None, None, BASIS_NEVER)
    if not waiting:
        return out
    wanted = set(waiting)
    plays = {scenario: _play(clone(engine), now, runtimes, default, scenario, wanted, horizon, max_cycles,
                             coarsen, resolution)
             for scenario in (EXPECTED, OPTIMISTIC, PESSIMISTIC)}
    out.cycles = sum(play.cycles for play in plays.values())
    expected = plays[EXPECTED]
    out.running = expected.running
    out.complete = all(play.complete for play in plays.values())
    end_times = [when for when, _ in expected.ends]
    counts = {basis: [0] for basis in BASES}  # running count of each basis among the ends
    for _, basis in expected.ends:
        for name, running in counts.items():
            running.append(running[-1] + (name == basis))
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
        bases = [name for name in BASES if counts[name][ahead] > 0]
        own = runtimes.get(key, default).basis
        out.units[key] = UnitForecast(start, earliest, latest, "+".join(bases) if bases else own, ahead)
    return out
