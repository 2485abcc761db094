"""The discrete-event loop that replays a trace against the production engine.

Virtual time jumps from one moment to the next at which something can happen: a job
arrives, a job ends, a trace event fires, a backoff runs out, or the engine says time
alone will change a decision (``next_wakeup``). After each batch of simultaneous
happenings the engine runs one cycle, so the simulator asks exactly what the
controller would ask, and nothing depends on a tick length.
"""

from __future__ import annotations

import heapq
import marshal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from time import process_time
from typing import Any, cast

from koordqueue.api.constants import (
    ELASTIC_QUOTA_KIND,
    NAMESPACE_KIND,
    PRIORITY_CLASS_KIND,
    QUEUE_KIND,
    RESOURCE_CLAIM_KIND,
    RESOURCE_CLAIM_TEMPLATE_KIND,
    Phase,
)
from koordqueue.api.meta import InvalidObject, Meta, read_int, read_meta
from koordqueue.api.objects import parse_queue
from koordqueue.engine.core import Engine, copy_unit
from koordqueue.engine.model import (
    CycleResult,
    EngineConfig,
    Placement,
    PodSetInfo,
    QuotaInfo,
    ResourceList,
    UnitInfo,
    auto_queue_for,
)
from koordqueue.jobs import adapter_for
from koordqueue.jobs.base import JobAdapter
from koordqueue.jobs.unit import charge_claims, unit_info
from koordqueue.loader import Settings

from .nodes import NodePool, Pods
from .trace import EventEntry, JobEntry, Trace
from .tracefile import ReadWhole, load_trace
from .usage import UsageBook

TIME_QUANTUM = 1e-6  # times are rounded to this, so that 0.1 + 0.2 meets 0.3
# Cycles run at one instant while the engine says it has work left for that instant;
# beyond this, the engine is deemed stuck: the simulator says so and moves on.
MAX_CYCLES_PER_INSTANT = 100
REQUEST_SHAPES = 1024  # distinct requests kept for sharing
UNIT_SHAPES = 16384  # distinct job manifests (less their names) whose unit is kept


class Step(IntEnum):
    """What happens at one instant, in the order it is handled."""

    FINISH = 0  # a running job ends (frees room first)
    EVENT = 1  # a trace event
    ARRIVAL = 2  # a job is submitted
    WAKE = 3  # a backoff runs out: nothing to do but run a cycle


@dataclass(slots=True)
class JobRecord:
    """Everything the report says about one job."""

    kind: str | None
    namespace: str | None
    name: str | None
    runtime: float | None
    submitted: float | None = None
    priority: int | None = None
    quota: str | None = None
    queue: str | None = None
    admitted: float | None = None  # first admission
    started: float | None = None  # start of the current run
    finished: float | None = None
    phase: Phase | None = None
    preemptions: int = 0
    attempts: int = 0  # admissions
    message: str | None = None
    unit_key: str | None = None
    request: ResourceList = field(default_factory=dict)
    pod_sets: tuple[PodSetInfo, ...] = ()  # with nodes (or an elastic role)
    held: ResourceList | None = None  # what it holds of its quotas when admitted in part
    charged: Sequence[str] = ()  # quotas its request is counted on
    pods: Pods | None = None  # its pods bound to nodes
    counts: tuple[tuple[str, int], ...] = ()  # pods admitted per pod set, when fewer than asked
    domains: tuple[tuple[str, str, str], ...] = ()  # (pod set, level, its domain: label values, widest first, "a/r1")
    run: int = 0  # bumped on every admission, so a stale finish is ignored
    requeue_at: float | None = None
    deleted: float | None = None

    @property
    def live(self) -> bool:
        return self.unit_key is not None and self.finished is None and self.deleted is None


@dataclass(slots=True)
class Holding:
    """One change in what a job holds: admitted (+1) or released (-1), and whether it
    waits again (the job records keep only the first admission and the end)."""

    time: float
    record: JobRecord
    quotas: list[str]
    sign: int
    requeued: bool = False
    held: ResourceList | None = None  # what it holds (its request, or the part admitted)


@dataclass(slots=True)
class NodeFreeAt:
    """The room left on one node from a time on (the HTML report's fragmentation)."""

    time: float
    node: str
    free: ResourceList


@dataclass(slots=True)
class SimResult:
    jobs: list[JobRecord]
    quotas: dict[str, QuotaInfo]  # the quotas that exist at the end
    runtime_at_end: dict[str, ResourceList]
    usage: UsageBook
    end: float
    warnings: list[str]
    capacity: ResourceList | None
    engine_seconds: float | None  # CPU time spent inside engine calls, when timed
    node_free_at: list[NodeFreeAt] = field(default_factory=list)  # with nodes, when holdings are kept


class _Timed:
    """The engine, each call of it counted in ``seconds`` of CPU time."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.engine, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = process_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += process_time() - start

        return timed


_HOLDING = (Phase.DEQUEUED, Phase.RUNNING)  # a job admitted: the engine's messages are not for it
_ARRIVAL = int(Step.ARRIVAL)


def _at(seconds: float) -> float:
    quanta = round(seconds / TIME_QUANTUM)
    if -_EXACT_QUANTA < quanta < _EXACT_QUANTA:
        return quanta / 1_000_000  # the float nearest quanta us, as below, in a third of the time
    return round(quanta * TIME_QUANTUM, 6)


# Below this many quanta (some 35 years), ``quanta * TIME_QUANTUM`` is off quanta us by at
# most 2**-52 of it (two roundings), under a quarter of a quantum: ``round(..., 6)`` then
# gives the float nearest quanta us, which is what int / int (rounded correctly) gives.
_EXACT_QUANTA = 2**50


class Simulator:
    """One run of one trace. Objects are loaded into the engine as the controller loads
    them with ``settings`` (loader.py); ``config`` overrides the engine's settings,
    ``capacity`` the nodes' total, and ``time_engine`` counts the CPU time spent in the
    engine (tests, benchmarks)."""

    def __init__(
        self,
        trace: Trace,
        config: EngineConfig | None = None,
        capacity: ResourceList | None = None,
        keep_holdings: bool = False,
        time_engine: bool = False,
        settings: Settings | None = None,
    ) -> None:
        self.trace = trace
        self.settings = settings or Settings()
        config = config or self.settings.engine_config()
        if trace.topology is not None:
            config = replace(config, topology_levels=trace.topology)
        self.engine = Engine(config)
        # The engine's calls go through ``calls``: the engine itself, or timed when asked
        # (a clock read costs more than many calls, and a wrapper a call each).
        self.timed = _Timed(self.engine) if time_engine else None
        self.calls: Engine = cast(Engine, self.timed) if self.timed is not None else self.engine
        self.nodes = NodePool(trace.nodes) if trace.nodes else None
        self.capacity = capacity if capacity is not None else \
            self.settings.capacity([self.nodes.capacity()] if self.nodes else [])
        self.warnings = list(trace.warnings)
        self.jobs: list[JobRecord] = []
        self.by_name: dict[tuple[str, str, str], JobRecord] = {}  # (kind, namespace, name)
        self.by_unit: dict[str, JobRecord] = {}  # the live jobs
        self.requests: dict[tuple[tuple[str, int], ...], ResourceList] = {}  # one dict per request shape
        # (kind, manifest less its name, placed) -> the first such job's metadata, and its unit
        self.units: dict[tuple[str, bytes | str, bool], tuple[Meta, UnitInfo]] = {}
        self.quotas: dict[str, QuotaInfo] = {}
        self.priority_bounded = False  # some quota has a max-priority (koord-queue/max-priority)
        self.chains: dict[str, list[str]] = {}  # a quota and its ancestors, until the quotas change
        self.priority_classes: dict[str, int] = {}
        # DRA: (namespace, name) -> the ResourceClaimTemplates and ResourceClaims applied
        self.claim_templates: dict[tuple[str, str], dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.usage = UsageBook()
        self.waiting_for_nodes: list[JobRecord] = []  # admitted, pods not placed yet, by admission
        self.reported_invalid: dict[str, str] = {}
        self.heap: list[tuple[float, int, int, Any]] = []
        self.pending: Iterator[JobEntry] = iter(())  # the jobs not on the heap yet, in time order
        self.last_arrival = 0.0
        self.seq = 0
        self.now = 0.0
        # Every admission and release, in order, when asked for (the HTML report).
        self.holdings: list[Holding] | None = [] if keep_holdings else None
        self.node_free_at: list[NodeFreeAt] = []

    # --- the loop ----------------------------------------------------------------------
    def run(self) -> SimResult:
        self.calls.set_cluster_capacity(self.capacity)
        for node in self.nodes.nodes if self.nodes else ():
            self.calls.set_node(node.info)
            if self.holdings is not None:
                self.node_free_at.append(NodeFreeAt(0.0, node.name, dict(node.free)))
        for index, obj in enumerate(self.trace.objects):
            self._apply(obj, f"objects[{index}]", runtime=None)
        self._check_quotas()
        jobs = self.trace.jobs
        if isinstance(jobs, list):
            jobs = sorted(jobs, key=lambda job: _at(job.at))  # stable: at one time, in file order
        self.pending = iter(jobs)
        self._next_arrival()
        for event in self.trace.events:
            self._push(event.at, Step.EVENT, event)
        until = self.trace.until
        handlers = self._handlers()
        wakeup: float | None = None
        last = 0.0
        cycles_here = 0  # cycles run at the current instant
        while True:
            moment = self.heap[0][0] if self.heap else None
            wake = self._wake_time(wakeup, cycles_here)
            if wake is not None and (moment is None or wake < moment):
                moment = wake
            if moment is None or (until is not None and moment > until):
                break
            cycles_here = cycles_here + 1 if moment == self.now else 1
            self.now = last = moment
            heap = self.heap
            while heap and heap[0][0] <= moment:
                _, step, _, payload = heapq.heappop(heap)
                handlers[step](payload)
            wakeup = self._cycle()
        for _ in self.pending:
            pass  # the rest of a streamed trace is still read: its errors, and keys after the jobs
        end = until if until is not None else last
        self.now = end
        self.usage.close(end)
        return self._result(end)

    def _wake_time(self, wakeup: float | None, cycles_here: int) -> float | None:
        """When to run the next cycle for the engine's own sake (None: not needed).

        Work left for now is done now; a time within a quantum after now is the next
        quantum, never now, or the engine would be asked again before its time came.
        """
        if wakeup is None:
            return None
        if wakeup > self.now:
            return max(_at(wakeup), _at(self.now + TIME_QUANTUM))
        if cycles_here < MAX_CYCLES_PER_INSTANT:
            return self.now
        self.warnings.append(
            f"the engine still had work at t={self.now:g} s after {MAX_CYCLES_PER_INSTANT} cycles; "
            "it waits for the next event"
        )
        return None

    def _next_arrival(self) -> None:
        """Put the next job of the trace on the heap: one at a time, so a streamed trace
        is read as the clock reaches it. Jobs come in time order (a list is sorted first)."""
        job = next(self.pending, None)
        if job is None:
            return
        at = _at(job.at)
        if at < self.last_arrival:
            raise ReadWhole()  # a streamed trace out of time order
        self.last_arrival = at
        self.seq += 1
        heapq.heappush(self.heap, (at, _ARRIVAL, self.seq, job))  # (``_push`` less rounding again)

    def _push(self, when: float, step: Step, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (_at(when), int(step), self.seq, payload))

    def _handlers(self) -> tuple[Callable[[Any], None], ...]:
        """What handles a happening, by its Step's value (a lookup, not a comparison with each Step)."""
        by_step: dict[Step, Callable[[Any], None]] = {
            Step.FINISH: self._on_finish, Step.EVENT: self._event, Step.ARRIVAL: self._on_arrival,
            Step.WAKE: self._on_wake,
        }
        return tuple(by_step[Step(value)] for value in range(len(Step)))

    def _on_finish(self, payload: tuple[JobRecord, int]) -> None:
        record, run = payload
        if record.live and record.run == run and record.phase is Phase.RUNNING:
            self._finish(record)

    def _on_arrival(self, entry: JobEntry) -> None:
        self._arrive(entry)
        self._next_arrival()

    def _on_wake(self, record: JobRecord) -> None:
        if record.live and record.phase is Phase.PREEMPTED:
            record.phase = Phase.ENQUEUED

    def _cycle(self) -> float | None:
        result: CycleResult = self.calls.schedule(self.now)
        for preemption in result.preempted:
            self._preempted(self.by_unit[preemption.unit], preemption.reason, preemption.requeue_at)
        for admission in result.admitted:
            self._admitted(self.by_unit[admission.unit], admission.quota, admission.queue, admission.placement)
        by_unit = self.by_unit
        for key, message in result.messages.items():
            record = by_unit.get(key)
            if record is not None and record.live and record.phase not in _HOLDING:
                record.message = message
        return result.next_wakeup

    # --- jobs --------------------------------------------------------------------------
    def _arrive(self, entry: JobEntry) -> None:
        if entry.problem:
            record = self._new_record(entry.manifest, entry.runtime)
            record.message = f"not submitted: {entry.problem}"
            return
        self._apply(entry.manifest, f"jobs[{entry.index}]", runtime=entry.runtime)

    def _new_record(self, manifest: dict[str, Any], runtime: float | None) -> JobRecord:
        metadata = manifest.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        kind, namespace = _text(manifest.get("kind")), _text(metadata.get("namespace"))
        record = JobRecord(  # the strings every job repeats are kept once (a trace may have millions)
            kind=None if kind is None else sys.intern(kind),
            namespace=(sys.intern(namespace) if namespace else "default") if metadata.get("name") else None,
            name=_text(metadata.get("name")),
            runtime=runtime,
        )
        self.jobs.append(record)
        return record

    def _submit(self, manifest: dict[str, Any], adapter: JobAdapter, runtime: float | None, where: str) -> None:
        shape = self._shape(manifest, adapter)
        known = self.units.get(shape) if shape is not None else None
        if known is not None:  # its metadata is an earlier job's but for its name: read then
            first = known[0]
            meta = Meta(first.kind, manifest["metadata"]["name"], first.namespace, first.uid, first.labels,
                        first.annotations)
        else:
            try:
                meta = read_meta(manifest, adapter.kind)
            except InvalidObject as err:
                self._new_record(manifest, runtime).message = f"rejected: {where}: {err.reason}"
                return
        name = (adapter.kind, meta.namespace, meta.name)
        existing = self.by_name.get(name)
        if existing is not None and existing.live:
            self._update(existing, manifest, adapter, meta, where)
            return
        if existing is not None and existing.finished is not None:
            self.warnings.append(f"{where}: {meta.describe()} already finished; applying it again changes nothing")
            return
        record = JobRecord(sys.intern(manifest["kind"]), sys.intern(meta.namespace), meta.name, runtime)
        self.jobs.append(record)  # (``_new_record``, with what is known valid by now)
        try:
            unit = self._unit(manifest, adapter, meta, self.now, shape, known)
        except InvalidObject as err:
            record.message = f"rejected: {err.reason}"
            return
        key = unit.key
        if key in self.by_unit:
            record.message = f"rejected: QueueUnit {key} already belongs to another live job"
            return
        if self.priority_bounded:  # queued at no more than its quota's bound, as the controller does
            cap = self.engine.priority_cap(unit)
            if cap is not None and unit.priority > cap[1]:
                unit.priority = cap[1]
        record.unit_key, record.submitted, record.priority = key, self.now, unit.priority
        record.request, record.pod_sets, record.phase = self._shared(unit.request), unit.pod_sets, Phase.ENQUEUED
        record.message = unit.invalid
        self.by_name[name] = record
        self.by_unit[key] = record
        self.calls.set_unit(unit, True)  # a fresh unit: the engine keeps it, uncopied

    def _shape(self, manifest: dict[str, Any], adapter: JobAdapter) -> tuple[str, bytes | str, bool] | None:
        """What jobs of one shape share: the manifest but for its name, its name blanked
        for the time of it; and whether nodes place its pods. The manifest is compared by
        its ``marshal`` bytes (types and order count; a third of ``repr``'s time), or by
        ``repr`` when it holds what marshal does not take (a YAML date): bytes and text
        never compare equal. None when its metadata or name is not there to blank."""
        metadata = manifest.get("metadata")
        if type(metadata) is not dict:
            return None
        name = metadata.get("name")
        if type(name) is not str or not name:
            return None
        metadata["name"] = ""
        try:
            try:
                # Version 0: the bytes follow the values alone, not which strings are interned.
                text: bytes | str = marshal.dumps(manifest, 0)
            except ValueError:
                text = repr(manifest)
            return (adapter.kind, text, self.nodes is not None)
        finally:
            metadata["name"] = name

    def _unit(self, manifest: dict[str, Any], adapter: JobAdapter, meta: Meta, created: float,
              shape: tuple[str, bytes | str, bool] | None = None, known: tuple[Meta, UnitInfo] | None = None) -> UnitInfo:
        """``unit_info`` of the job, taken from an earlier job of the same ``shape``: a trace
        repeats a few manifests, and reading pod sets and requests was the most of a job's
        cost. ``meta`` is its metadata, read; ``known``: what ``shape`` already found."""
        if known is None:
            shape = shape or self._shape(manifest, adapter)
            assert shape is not None  # its metadata was read
            known = self.units.get(shape)
            if known is None:
                unit = unit_info(manifest, adapter, self.priority_classes, created, placed=self.nodes is not None)
                if self.trace.device_class_mappings:
                    ns = meta.namespace
                    unit = charge_claims(
                        unit, manifest, adapter, {n: o for (s, n), o in self.claim_templates.items() if s == ns},
                        {n: o for (s, n), o in self.claims.items() if s == ns}, self.trace.device_class_mappings)
                if len(self.units) >= UNIT_SHAPES:
                    self.units.clear()
                known = self.units[shape] = (meta, unit)
        # Only its name (which may be too long) and creation differ.
        unit = copy_unit(known[1])
        unit.name = adapter.unit_name(manifest, meta)
        unit.created = created
        return unit

    def _shared(self, request: ResourceList) -> ResourceList:
        """An equal request another job already holds (never changed), so that a million jobs
        of a few shapes keep a few dicts; the cache is emptied when it grows past its bound."""
        key = tuple(request.items())
        shared = self.requests.get(key)
        if shared is None:
            if len(self.requests) >= REQUEST_SHAPES:
                self.requests.clear()
            shared = self.requests[key] = dict(request)
        return shared

    def _update(self, record: JobRecord, manifest: dict[str, Any], adapter: JobAdapter, meta: Meta, where: str) -> None:
        """A live job applied again: new priority or request; an admission it holds stays."""
        assert record.unit_key is not None and record.submitted is not None
        try:
            unit = self._unit(manifest, adapter, meta, record.submitted)
        except InvalidObject as err:
            self.warnings.append(f"{where}: update of {record.unit_key} refused: {err.reason}")
            return
        held = self.calls.unit(record.unit_key)
        if held is not None:
            unit.admitted_quota, unit.admitted_queue = held.admitted_quota, held.admitted_queue
            unit.admitted_at, unit.requeue_at, unit.attempts = held.admitted_at, held.requeue_at, held.attempts
            unit.placement = held.placement
        record.priority = unit.priority
        self.calls.set_unit(unit, True)

    def _admitted(self, record: JobRecord, quota: str, queue: str, placement: Placement | None) -> None:
        record.attempts += 1
        record.run += 1
        if record.admitted is None:
            record.admitted = self.now
        record.quota, record.queue, record.requeue_at = quota, sys.intern(queue), None
        record.phase, record.message = Phase.DEQUEUED, None
        charged = self.chains.get(quota)
        if charged is None:
            charged = self.chains[quota] = self.usage.chain(quota, self.quotas)
        record.charged = charged
        record.counts = placement.counts if placement is not None else ()
        record.held = _part(record) if record.counts else None
        held = record.held or record.request
        self.usage.charge(record.charged, held, self.now, 1)
        if self.holdings is not None:
            self.holdings.append(Holding(self.now, record, list(record.charged), 1, held=held))
        record.domains = tuple((pod_set, level, "/".join(value for _, value in chain))
                               for pod_set, level, chain in placement.domains) \
            if placement is not None else ()
        if self.nodes is None:
            self._start(record)
        elif placement is not None and placement.nodes:  # placed by the engine: bound there at once
            requests = {ps.name: ps.request for ps in record.pod_sets}
            record.pods = self.nodes.bind(placement.nodes, requests)
            self._bound(record, record.pods)
            self._start(record)
        else:
            self.waiting_for_nodes.append(record)
            self._place_waiting()

    def _place_waiting(self) -> None:
        """Start, in admission order, every admitted job (on quota alone) whose pods now all fit."""
        assert self.nodes is not None
        still: list[JobRecord] = []
        for record in self.waiting_for_nodes:
            pods = _pods(record)
            placed = self.nodes.place(pods)
            if placed is None:
                record.message = self.nodes.why_not(pods)
                still.append(record)
            else:
                record.pods = placed
                self._bound(record, placed)
                self._start(record)
        self.waiting_for_nodes = still

    def _bound(self, record: JobRecord, pods: Pods) -> None:
        """Tell the engine what the pods bound (or gone) take on their nodes, as the
        controller does; and where the job's own pods are now."""
        assert self.nodes is not None
        for index in sorted({index for index, _, _ in pods}):
            node = self.nodes.nodes[index]
            self.calls.set_node_usage(node.name, node.used())
            if self.holdings is not None:
                self.node_free_at.append(NodeFreeAt(self.now, node.name, dict(node.free)))
        if record.live and record.unit_key is not None:
            bound: dict[tuple[str, str], int] = {}
            for index, pod_set, _ in record.pods or ():
                where = (pod_set, self.nodes.nodes[index].name)
                bound[where] = bound.get(where, 0) + 1
            self.calls.set_unit_pods(record.unit_key, bound)

    def _start(self, record: JobRecord) -> None:
        record.phase, record.started, record.message = Phase.RUNNING, self.now, None
        if record.unit_key is not None:  # its pods run: a Queue that waits for them goes on
            self.calls.set_pods_running(record.unit_key, True)
        if record.runtime is not None:
            self._push(self.now + record.runtime, Step.FINISH, (record, record.run))

    def _release(self, record: JobRecord) -> None:
        """Give back what an admitted job holds: its quota charge and its room on nodes."""
        if record.charged:
            held = record.held or record.request
            self.usage.charge(record.charged, held, self.now, -1)
            if self.holdings is not None:
                self.holdings.append(Holding(self.now, record, list(record.charged), -1, requeued=record.live,
                                             held=held))
            record.charged = ()
            record.held = None
        if record in self.waiting_for_nodes:
            self.waiting_for_nodes.remove(record)
        if record.pods is not None and self.nodes is not None:
            pods, record.pods = record.pods, None
            self.nodes.release(pods)
            self._bound(record, pods)
            self._place_waiting()

    def _finish(self, record: JobRecord) -> None:
        assert record.unit_key is not None
        record.finished, record.phase = self.now, Phase.SUCCEED
        del self.by_unit[record.unit_key]
        self.calls.remove_unit(record.unit_key)
        self._release(record)

    def _preempted(self, record: JobRecord, reason: str, requeue_at: float) -> None:
        record.preemptions += 1
        record.run += 1  # its progress is lost: a new admission runs it from the start
        record.phase, record.message, record.requeue_at = Phase.PREEMPTED, reason, requeue_at
        record.started = None
        self._release(record)
        self._push(max(requeue_at, self.now), Step.WAKE, record)

    # --- objects -------------------------------------------------------------------------
    def _apply(self, obj: Any, where: str, runtime: float | None) -> None:
        kind = obj.get("kind") if isinstance(obj, dict) else None
        try:
            if kind == ELASTIC_QUOTA_KIND:
                self._apply_quota(obj, where)
            elif kind == QUEUE_KIND:
                parsed = parse_queue(obj, self.quotas.keys())
                self.warnings.extend(f"{where}: {text}" for text in parsed.warnings)
                self.calls.set_queue(parsed.queue)
            elif kind == PRIORITY_CLASS_KIND:
                meta = read_meta(obj, PRIORITY_CLASS_KIND)
                self.priority_classes[meta.name] = read_int(obj.get("value"), f"{PRIORITY_CLASS_KIND} {meta.name}: value")
                self.units.clear()  # a job's priority may come from its class
            elif kind == NAMESPACE_KIND:
                read_meta(obj, NAMESPACE_KIND)
            elif kind in (RESOURCE_CLAIM_TEMPLATE_KIND, RESOURCE_CLAIM_KIND):
                meta = read_meta(obj, kind)
                kept = self.claim_templates if kind == RESOURCE_CLAIM_TEMPLATE_KIND else self.claims
                kept[(meta.namespace, meta.name)] = obj
                self.units.clear()  # a job's charge comes from them (jobs queued already keep theirs)
            else:
                adapter = adapter_for(_text(obj.get("apiVersion")) or "", _text(kind) or "") if isinstance(obj, dict) else None
                if adapter is None:
                    raise InvalidObject(f"unknown kind {kind!r}: not an object or a job kind the simulator knows")
                self._submit(obj, adapter, runtime, where)
        except InvalidObject as err:
            if where.startswith("jobs["):
                self._new_record(obj if isinstance(obj, dict) else {}, runtime).message = f"rejected: {err.reason}"
            else:
                self.warnings.append(f"{where}: {err.reason}; ignored")

    def _apply_quota(self, obj: dict[str, Any], where: str) -> None:
        parsed = self.settings.quota(obj)
        self.warnings.extend(f"{where}: {text}" for text in parsed.warnings)
        self.quotas[parsed.quota.name] = parsed.quota
        self.priority_bounded = any(q.max_priority is not None for q in self.quotas.values())
        self.chains.clear()
        self.calls.set_quota(parsed.quota)
        self.calls.set_queue(auto_queue_for(parsed.quota))

    def _event(self, event: EventEntry) -> None:
        where = f"events[{event.index}]"
        if event.problem:
            self.warnings.append(f"{event.problem}; ignored")
        elif event.action == "apply":
            self._apply(event.body, where, runtime=event.runtime)
        else:
            self._delete(event.body, where)
        self._check_quotas()

    def _delete(self, ref: dict[str, Any], where: str) -> None:
        kind, name = _text(ref.get("kind")), _text(ref.get("name"))
        namespace = _text(ref.get("namespace")) or "default"
        if kind == ELASTIC_QUOTA_KIND and name in self.quotas:
            quota = self.quotas.pop(name)
            self.priority_bounded = any(q.max_priority is not None for q in self.quotas.values())
            self.chains.clear()
            self.calls.remove_quota(name)
            self.calls.remove_queue(auto_queue_for(quota).key)
            return
        if kind == QUEUE_KIND and name:
            self.calls.remove_queue(f"{namespace}/{name}")
            return
        record = self.by_name.get((kind or "", namespace, name or ""))
        if record is None or not record.live:
            self.warnings.append(f"{where}: nothing to delete: no live {kind} {namespace}/{name}")
            return
        assert record.unit_key is not None
        record.deleted = self.now
        record.message = f"deleted at {self.now:g} s while {record.phase}"
        del self.by_unit[record.unit_key]
        self.calls.remove_unit(record.unit_key)
        self._release(record)

    def _check_quotas(self) -> None:
        """Report each quota the engine refuses (min > max, bad parent, ...) once per reason."""
        errors = self.calls.validation_errors()
        for name, reason in errors.items():
            if self.reported_invalid.get(name) != reason:
                self.warnings.append(f"{ELASTIC_QUOTA_KIND} {name}: {reason}; not used")
        self.reported_invalid = dict(errors)

    # --- the end -------------------------------------------------------------------------
    def _result(self, end: float) -> SimResult:
        for record in self.jobs:
            if record.live and record.phase is Phase.PREEMPTED and (record.requeue_at or 0) <= end:
                record.phase = Phase.ENQUEUED
            if record.live and record.phase in (Phase.ENQUEUED, Phase.PREEMPTED) and record.unit_key:
                standing = self.calls.standing(record.unit_key)
                if standing is not None:
                    record.quota, record.queue = standing.quota, standing.queue
                    record.message = standing.message or record.message
        statuses = self.calls.quota_status()
        runtime = {name: dict(statuses[name].runtime) if name in statuses else {} for name in self.quotas}
        return SimResult(
            jobs=self.jobs,
            quotas=dict(self.quotas),
            runtime_at_end=runtime,
            usage=self.usage,
            end=end,
            warnings=self.warnings,
            capacity=self.capacity,
            engine_seconds=self.timed.seconds if self.timed is not None else None,
            node_free_at=self.node_free_at,
        )


def _part(record: JobRecord) -> ResourceList:
    """What a job admitted in part holds: its request less the pods left out."""
    held = dict(record.request)
    counts = dict(record.counts)
    for ps in record.pod_sets:
        left_out = ps.count - counts.get(ps.name, ps.count)
        for name, amount in ps.request.items():
            held[name] = held.get(name, 0) - left_out * amount
    return held


def _pods(record: JobRecord) -> list[tuple[str, ResourceList]]:
    """Every pod of an admitted job, pod set by pod set (as many as were admitted)."""
    counts = dict(record.counts)
    return [(ps.name, ps.request) for ps in record.pod_sets for _ in range(counts.get(ps.name, ps.count))]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def simulate(trace: Trace, config: EngineConfig | None = None, capacity: ResourceList | None = None) -> SimResult:
    """Run ``trace`` to its end and return what happened."""
    return Simulator(trace, config, capacity).run()


def simulate_file(path: str, keep_holdings: bool = False) -> tuple[SimResult, list[Holding] | None]:
    """Run the trace file at ``path``: streamed when it can be, else read whole.

    Returns what happened, and every admission and release when ``keep_holdings``.
    """
    try:
        simulator = Simulator(load_trace(path), keep_holdings=keep_holdings)
        result = simulator.run()
    except ReadWhole:
        simulator = Simulator(load_trace(path, stream=False), keep_holdings=keep_holdings)
        result = simulator.run()
    return result, simulator.holdings
