"""A simulation trace: what the file says, checked entry by entry.

The loader (``tracefile.py``) only fails for a file it cannot read or whose top level is not a mapping.
Every other problem stays attached to the entry it concerns (``problem`` on a job or an
event, a line in ``warnings`` otherwise), so that one bad entry never hides the rest.
Manifests are kept verbatim: they are parsed when the simulator applies them.
Top-level keys starting with ``x-`` are skipped: they hold YAML anchors that the
entries share (``x-pod: &pod {...}`` then ``template: *pod``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from koordqueue.api.constants import TAINT_NO_EXECUTE, TAINT_NO_SCHEDULE, TAINT_PREFER_NO_SCHEDULE
from koordqueue.api.dra import DeviceClassMapping, parse_mappings
from koordqueue.api.quantity import QuantityError, parse_resource_list
from koordqueue.engine.model import ResourceList, Taint


class TraceError(Exception):
    """The trace cannot be used at all (unreadable file, not a YAML mapping)."""


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """``count`` identical nodes; each one is named ``{name}-{i}``, with the same labels
    (its own ``kubernetes.io/hostname`` besides) and taints."""

    name: str
    count: int
    allocatable: ResourceList
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    # DRA: devices per driver each node publishes (its ResourceSlices'); in ``allocatable`` as
    # the quota resources the trace's deviceClassMappings name that driver for.
    devices: tuple[tuple[str, int], ...] = ()


@dataclass(slots=True)
class JobEntry:
    """One job of the trace: submitted at ``at``, runs ``runtime`` seconds once started."""

    index: int
    at: float
    runtime: float | None  # None: runs forever
    manifest: dict[str, Any]
    problem: str | None = None  # why the entry cannot be submitted


@dataclass(slots=True)
class EventEntry:
    """A change at time ``at``: ``apply`` a manifest or ``delete`` an object."""

    index: int
    at: float
    action: str  # "apply" | "delete"
    body: dict[str, Any]
    runtime: float | None = None  # for an applied job: how long it runs
    problem: str | None = None


@dataclass(slots=True)
class Trace:
    nodes: list[NodeGroup] = field(default_factory=list)
    objects: list[Any] = field(default_factory=list)  # manifests applied at t=0, in order
    jobs: Iterable[JobEntry] = field(default_factory=list)  # an iterator when streamed (tracefile.py)
    events: list[EventEntry] = field(default_factory=list)
    until: float | None = None
    topology: tuple[str, ...] | None = None  # node labels of the topology levels, widest first
    warnings: list[str] = field(default_factory=list)
    # DRA: DeviceClass -> quota resource (the controller's --device-class-mappings; api/dra.py)
    device_class_mappings: dict[str, DeviceClassMapping] = field(default_factory=dict)


TOP_LEVEL_KEYS = ("nodes", "topology", "deviceClassMappings", "objects", "jobs", "events", "until")
TAINT_EFFECTS = (TAINT_NO_SCHEDULE, TAINT_PREFER_NO_SCHEDULE, TAINT_NO_EXECUTE)
ANCHOR_PREFIX = "x-"


def parse_trace(document: dict[str, Any]) -> Trace:
    """Check a trace already read as a mapping (also used by tests and benchmarks)."""
    trace = Trace()
    for key in document:
        if key not in TOP_LEVEL_KEYS and not str(key).startswith(ANCHOR_PREFIX):
            trace.warnings.append(f"unknown top-level key {key!r} ignored (known: {', '.join(TOP_LEVEL_KEYS)})")
    trace.device_class_mappings = _mappings(document.get("deviceClassMappings"), trace.warnings)
    trace.nodes = _with_devices(_nodes(_as_list(document, "nodes", trace.warnings), trace.warnings),
                                trace.device_class_mappings)
    if document.get("topology") is not None:
        levels = document["topology"]
        if isinstance(levels, list) and levels and all(isinstance(level, str) and level for level in levels):
            trace.topology = tuple(levels)
        else:
            trace.warnings.append(f"topology must be a list of node labels, widest first, got {levels!r}; "
                                  "the default levels are used")
    trace.objects = _as_list(document, "objects", trace.warnings)
    trace.jobs = [job_entry(i, entry) for i, entry in enumerate(_as_list(document, "jobs", trace.warnings))]
    trace.events = [_event(i, entry) for i, entry in enumerate(_as_list(document, "events", trace.warnings))]
    if document.get("until") is not None:
        until, problem = _seconds(document["until"], "until")
        if problem:
            trace.warnings.append(f"{problem}; simulating until nothing more happens")
        trace.until = until
    return trace


def _as_list(document: dict[str, Any], key: str, warnings: list[str]) -> list[Any]:
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        warnings.append(f"{key} must be a list, got {type(value).__name__}; ignored")
        return []
    return value


def _nodes(entries: list[Any], warnings: list[str]) -> list[NodeGroup]:
    groups: list[NodeGroup] = []
    for i, entry in enumerate(entries):
        where = f"nodes[{i}]"
        if not isinstance(entry, dict):
            warnings.append(f"{where}: must be a mapping with name, count, allocatable; ignored")
            continue
        name = entry.get("name", f"node{i}")
        count = entry.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            warnings.append(f"{where} ({name}): count must be a whole number >= 0, got {count!r}; ignored")
            continue
        try:
            allocatable = parse_resource_list(entry.get("allocatable"))
        except QuantityError as err:
            warnings.append(f"{where} ({name}): bad allocatable: {err}; ignored")
            continue
        labels = entry.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            warnings.append(f"{where} ({name}): labels must be a mapping of strings (quote numbers); ignored")
            continue
        taints = _taints(entry.get("taints"))
        if isinstance(taints, str):
            warnings.append(f"{where} ({name}): {taints}; ignored")
            continue
        devices = entry.get("devices") or {}
        if not isinstance(devices, dict) or not all(isinstance(k, str) and isinstance(v, int) and not
                                                    isinstance(v, bool) and v >= 0 for k, v in devices.items()):
            warnings.append(f"{where} ({name}): devices must be a mapping of driver to a whole number; ignored")
            continue
        groups.append(NodeGroup(str(name), count, allocatable, tuple(sorted(labels.items())), taints,
                                entry.get("unschedulable") is True, tuple(sorted(devices.items()))))
    return groups


def _mappings(value: Any, warnings: list[str]) -> dict[str, DeviceClassMapping]:
    """deviceClassMappings: the flag's text, or the chart's list of {deviceClass, resource, count, driver}."""
    if value is None:
        return {}
    if isinstance(value, list):
        terms = []
        for item in value:
            if not isinstance(item, dict):
                warnings.append(f"deviceClassMappings: {item!r} is not a mapping; ignored")
                continue
            driver = item.get("driver")
            terms.append(f"{item.get('deviceClass', '')}={item.get('resource', '')}:{item.get('count', 1)}"
                         + (f"@{driver}" if driver else ""))
        value = ",".join(terms)
    if not isinstance(value, str):
        warnings.append("deviceClassMappings must be deviceclass=resource[:count][@driver] text or a list; ignored")
        return {}
    try:
        return parse_mappings(value)
    except ValueError as err:
        warnings.append(f"deviceClassMappings: {err}; ignored")
        return {}


def _with_devices(groups: list[NodeGroup], mappings: dict[str, DeviceClassMapping]) -> list[NodeGroup]:
    """Each group's devices in its allocatable, as the mapped quota resources (placement)."""
    out = []
    for group in groups:
        room = dict(group.allocatable)
        for driver, count in group.devices:
            for mapping in mappings.values():
                if mapping.driver == driver:
                    room[mapping.resource] = room.get(mapping.resource, 0) + count * mapping.count * 1000
        out.append(replace(group, allocatable=room) if group.devices else group)
    return out


def _taints(value: Any) -> tuple[Taint, ...] | str:
    """Taints as a node lists them ({key, value, effect}); or what is wrong with them."""
    if value is None:
        return ()
    if not isinstance(value, list):
        return "taints must be a list of {key, value, effect}"
    out = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str) or \
                not isinstance(item.get("value", ""), str):
            return f"a taint must be a mapping with a key (and a value, an effect), got {item!r}"
        effect = item.get("effect", TAINT_NO_SCHEDULE)
        if effect not in TAINT_EFFECTS:
            return f"a taint's effect must be one of {', '.join(TAINT_EFFECTS)}, got {effect!r}"
        out.append(Taint(item["key"], item.get("value", ""), effect))
    return tuple(out)


def _seconds(value: Any, what: str) -> tuple[float | None, str | None]:
    """A time or duration in seconds, or the reason it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None, f"{what} must be a number of seconds >= 0, got {value!r}"
    return float(value), None


def job_entry(index: int, entry: Any) -> JobEntry:
    """One entry of ``jobs``, checked; what is wrong with it stays on it."""
    if type(entry) is dict:  # the common case, checked without building a message
        manifest, at, runtime = entry.get("manifest"), entry.get("at", 0), entry.get("runtime")
        if type(manifest) is dict and type(at) is float and 0 <= at < math.inf and \
                (runtime is None or (type(runtime) is float and 0 <= runtime < math.inf)):
            return JobEntry(index, at, runtime, manifest)
    where = f"jobs[{index}]"
    if not isinstance(entry, dict):
        return JobEntry(index, 0.0, None, {}, f"{where}: must be a mapping with at, runtime, manifest")
    manifest = entry.get("manifest")
    job = JobEntry(index, 0.0, None, manifest if isinstance(manifest, dict) else {})
    at, problem = _seconds(entry.get("at", 0), f"{where}.at")
    runtime, runtime_problem = (None, None) if entry.get("runtime") is None else _seconds(entry["runtime"], f"{where}.runtime")
    if not isinstance(manifest, dict):
        problem = f"{where}: manifest must be a mapping (a job manifest), got {type(manifest).__name__}"
    job.at = at if at is not None else 0.0
    job.runtime = runtime
    job.problem = problem or runtime_problem
    return job


def _event(index: int, entry: Any) -> EventEntry:
    where = f"events[{index}]"
    if not isinstance(entry, dict):
        return EventEntry(index, 0.0, "apply", {}, problem=f"{where}: must be a mapping with at and apply or delete")
    at, problem = _seconds(entry.get("at", 0), f"{where}.at")
    actions = [key for key in ("apply", "delete") if key in entry]
    action = actions[0] if len(actions) == 1 else "apply"
    body = entry.get(action)
    if len(actions) != 1:
        problem = f"{where}: needs exactly one of apply or delete"
    elif not isinstance(body, dict):
        problem = f"{where}.{action} must be a mapping, got {type(body).__name__}"
    runtime, runtime_problem = (None, None) if entry.get("runtime") is None else _seconds(entry["runtime"], f"{where}.runtime")
    return EventEntry(
        index,
        at if at is not None else 0.0,
        action,
        body if isinstance(body, dict) else {},
        runtime=runtime,
        problem=problem or runtime_problem,
    )
