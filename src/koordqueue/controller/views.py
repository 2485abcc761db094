"""Small projections of the objects the controller watches, and the QueueUnit it makes.

The informers keep these, not whole objects: a job's pod templates are read once, when
the job arrives, and only what the unit needs is kept. This is what lets 100k jobs fit.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.dra import PodClaims, UncountedClaim, missing_reason, pod_claims
from koordqueue.api.meta import INT32_MAX, InvalidObject, section
from koordqueue.api.quantity import QuantityError, format_resource_list, parse_resource_list
from koordqueue.engine.model import Held, Placement, PodSetInfo, ResourceList, UnitInfo
from koordqueue.jobs import PLURALS, kind_named
from koordqueue.jobs.base import JobAdapter, JobState, PodSet, class_priority, quota_of_labels
from koordqueue.jobs.placement import Written, pod_set_info, written_role
from koordqueue.jobs.podrequest import pod_request
from koordqueue.jobs.unit import expected_runtime

Object = dict[str, Any]

JOB_PLURALS: dict[str, str] = PLURALS
"""REST plural of each job kind we queue (from the kinds' registrations, jobs/__init__.py)."""


def adapter_of_kind(kind: str) -> JobAdapter:
    """The adapter of a kind we queue (KeyError for any other)."""
    return kind_named(kind).adapter


def parse_time(text: object) -> float:
    """An RFC 3339 timestamp as epoch seconds (0 when absent or unreadable)."""
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def rfc3339(seconds: float) -> str:
    return _rfc3339(math.floor(seconds))


@functools.lru_cache(maxsize=4)
def _rfc3339(second: int) -> str:
    """Formatted once a second, not at every status write of that second."""
    return dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class JobView:
    """One job: what its unit must say, and where the job is."""

    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str
    suspended: bool
    state: JobState
    created: float
    unit_name: str
    unit_spec: Object | None  # None when the job is unusable (see invalid)
    unit_labels: tuple[tuple[str, str], ...]
    invalid: str | None
    deleting: bool
    pods: tuple[str, str] | None = None  # (label, value) that its pods carry
    # Each PriorityClass its pod templates name (leaders first), with its value when this
    # view was made (None: it did not exist); see with_priority_classes.
    priority_classes: tuple[tuple[str, int | None], ...] = ()
    priority_annotated: bool = False  # its priority is its annotation's, whatever the classes
    pod_sets: tuple[PodSetInfo, ...] = ()  # its roles' pods as the user wrote them, for node fit
    roles: tuple[Written, ...] = ()  # its roles as the user wrote them (see jobs/placement.py)
    placed: str | None = None  # annotation koord-queue/placed: what an admission changed on it
    active: bool | None = None  # annotation scheduling.x-k8s.io/active (None: not given)
    max_execution_seconds: int | None = None  # annotation scheduling.x-k8s.io/max-exec-time-seconds
    enqueued: bool = False  # annotation koord-queue/job-has-enqueued is there
    native_suspend: bool = True  # it has its kind's own suspend field (JobAdapter.has_native_suspend)
    finishes_once_resumed: bool = False  # ended, but told Complete only once resumed (JobAdapter's)
    # Placed (an admission changed its replicas): each pod set's replicas on the job now, which
    # may be more than the admission gave (raised since); () when not placed.
    live_counts: tuple[tuple[str, int], ...] = ()
    suspend_annotated: bool = False  # annotation scheduling.x-k8s.io/suspend "true" (see JobAdapter.is_suspended)
    expected_runtime: str | None = None  # annotation koord-queue/expected-runtime, as written (forecaster.py)
    # DRA (controller/dra.py): per role, the ResourceClaimTemplates and ResourceClaims its pods name;
    # as charged (Claims.charged): the templates and claims not found, and per quota resource
    # the device classes charged to it (for messages).
    pod_claims: tuple[tuple[str, PodClaims], ...] = ()
    claims_missing: tuple[str, ...] = ()
    device_classes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The jobs its operator makes for it (JobAdapter.children, jobs/parents.py): per kind, the
    # name and the most it may ask (None: as much as this job).
    children: tuple[tuple[str, str, ResourceList | None], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def unit_key(self) -> str:
        return f"{self.namespace}/{self.unit_name}"

    @property
    def missing_priority_classes(self) -> tuple[str, ...]:
        return tuple(name for name, value in self.priority_classes if value is None)


def job_view(obj: Object, adapter: JobAdapter, priority_classes: Mapping[str, int]) -> JobView:
    """Project a job; a job we cannot read still gets a view, with the reason in ``invalid``."""
    with adapter.reading(obj):
        return _job_view(obj, adapter, priority_classes)


def _job_view(obj: Object, adapter: JobAdapter, priority_classes: Mapping[str, int]) -> JobView:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    namespace = str(meta.get("namespace") or "default")
    invalid: str | None = None
    spec: Object | None = None
    classes: tuple[tuple[str, int | None], ...] = ()
    annotated = False
    pod_sets: tuple[PodSetInfo, ...] = ()
    roles: tuple[Written, ...] = ()
    annotations = (meta.get("annotations") or {}) if isinstance(meta, Mapping) else {}
    placed = annotations.get(c.ANNOTATION_PLACED)
    active: bool | None = None
    max_seconds: int | None = None
    live: tuple[tuple[str, int], ...] = ()
    claims: tuple[tuple[str, PodClaims], ...] = ()
    children: tuple[tuple[str, str, ResourceList | None], ...] = ()
    try:
        unit_name = adapter.unit_name(obj)
        job_meta = adapter.meta(obj)
        labels = job_meta.labels
        sets = adapter.pod_sets(obj, job_meta)
        spec = unit_spec(obj, adapter, priority_classes, sets)
        classes = tuple((pc, priority_classes.get(pc)) for pc in adapter.priority_class_names(obj))
        annotated = adapter.annotated_priority(obj) is not None
        pod_sets = adapter.pod_set_infos(sets, job_meta)
        roles = tuple(written_role(ps.role, ps.count, ps.template) for ps in sets)
        claims = tuple((ps.name, names) for ps in sets
                       if (names := pod_claims(section(ps.template, "spec", "template"),
                                                          f"{job_meta.describe()}: {ps.role}")))
        if isinstance(placed, str) and placed:
            live = tuple((role.name.lower(), role.replicas) for role in adapter.roles(obj))
        active, max_seconds = adapter.active(obj, job_meta), adapter.max_execution_seconds(obj, job_meta)
        children = job_children(adapter, obj)
    except (InvalidObject, QuantityError, UncountedClaim) as e:
        invalid = str(e)
        unit_name = adapter.unit_name_for(name)
        labels = {}
    try:
        suspended = adapter.is_suspended(obj)
        state = adapter.status(obj)
        finishes_once_resumed = adapter.finishes_once_resumed(obj)
    except InvalidObject as e:
        suspended, state, finishes_once_resumed = False, JobState.PENDING, False
        invalid = invalid or str(e)
    try:
        pods = next(iter(adapter.pod_selector(obj).items()), None)
    except InvalidObject:
        pods = None
    # The unit carries the job's labels: the quota label, preemptible, and whatever a
    # Queue's admissionChecks[].labelSelector picks units by.
    unit_labels = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
    return JobView(
        kind=adapter.kind,
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        api_version=adapter.api_version_of(obj),
        suspended=suspended,
        state=state,
        created=parse_time(meta.get("creationTimestamp")),
        unit_name=unit_name,
        unit_spec=spec,
        unit_labels=unit_labels,
        invalid=invalid,
        deleting=bool(meta.get("deletionTimestamp")),
        pods=pods,
        priority_classes=classes,
        priority_annotated=annotated,
        pod_sets=pod_sets,
        roles=roles,
        placed=placed if isinstance(placed, str) else None,
        active=active,
        max_execution_seconds=max_seconds,
        enqueued=bool(annotations.get(c.ANNOTATION_JOB_HAS_ENQUEUED)),
        native_suspend=adapter.has_native_suspend(obj),
        finishes_once_resumed=finishes_once_resumed,
        live_counts=live,
        suspend_annotated=annotations.get(c.ANNOTATION_SUSPEND) == c.TRUE,
        expected_runtime=_text_or_none(annotations.get(c.ANNOTATION_EXPECTED_RUNTIME)),
        pod_claims=claims,
        children=children,
    )


def job_children(adapter: JobAdapter, obj: Object) -> tuple[tuple[str, str, ResourceList | None], ...]:
    """``JobView.children``: read from its status too, which a view's refresh reads again."""
    return tuple((kind, name, most) for kind, (name, most) in adapter.children(obj).items())


def _text_or_none(value: object) -> str | None:
    """An annotation's value as text; a tenant's non-string (never from a real API server) is kept as text."""
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)[:64]


def priority_classes_changed(job: JobView, priority_classes: Mapping[str, int]) -> bool:
    """Whether a PriorityClass the job names came, went or changed its value since its view was made."""
    return any(priority_classes.get(name) != value for name, value in job.priority_classes)


def with_priority_classes(job: JobView, priority_classes: Mapping[str, int]) -> JobView:
    """The job's view as it would be made now: a view is made when its job changes, and the
    PriorityClasses it names may have come, gone or changed since (its priority, and
    whether it is held for a class that does not exist, follow them)."""
    classes = tuple((name, priority_classes.get(name)) for name, _ in job.priority_classes)
    spec = job.unit_spec
    if spec is not None and not job.priority_annotated:
        spec = {**spec, "priority": class_priority(tuple(name for name, _ in classes), priority_classes)}
    return replace(job, unit_spec=spec, priority_classes=classes)


def missing_class_reason(names: tuple[str, ...]) -> str:
    """Why a job naming PriorityClasses that do not exist is held: on a cluster the API
    server (its Priority admission plugin) refuses pods naming such a class, so admitted,
    the job would hold quota with no pod; at priority 0 it would also be ordered wrong."""
    which = f"PriorityClass {names[0]}, which does not exist" if len(names) == 1 else \
        f"PriorityClasses {', '.join(names)}, which do not exist"
    return f"its pods name {which} (the API server would refuse them); it is queued once created"


def unit_spec(job: Object, adapter: JobAdapter, priority_classes: Mapping[str, int],
              pod_sets: list[PodSet] | None = None) -> Object:
    """The QueueUnit spec for ``job`` (Koord-Queue v1.8 field names); ``pod_sets``: its
    roles, when read already."""
    meta = adapter.meta(job)
    pod_sets = adapter.pod_sets(job, meta) if pod_sets is None else pod_sets
    spec: Object = {
        "consumerRef": {
            "apiVersion": adapter.api_version_of(job),
            "kind": adapter.kind,
            "name": meta.name,
            "namespace": meta.namespace,
        },
        "priority": adapter.priority(job, priority_classes),
        "resource": format_resource_list(adapter.demand(job, meta, pod_sets)),
        "podSet": [
            {
                "name": ps.name,
                "count": ps.count,
                **({"minCount": ps.min_count} if ps.min_count is not None else {}),
                "template": {"spec": {"containers": [{"name": "main", "resources": {
                    "requests": format_resource_list(ps.request)}}]}},
            }
            for ps in pod_sets
        ],
    }
    queue = adapter.requested_queue(job)
    if queue:
        spec["queue"] = queue
    pc = adapter.priority_class_name(job)
    if pc:
        spec["priorityClassName"] = pc
    active = adapter.active(job, meta)
    if active is not None:  # (absent: the unit's own spec.active stands, as in Koord-Queue)
        spec["active"] = active
    seconds = adapter.max_execution_seconds(job, meta)
    if seconds is not None:
        spec["maximumExecutionTimeSeconds"] = seconds
    return spec


def queue_unit_manifest(job: JobView) -> Object:
    """The whole QueueUnit for a job, owned by it so that it goes with it."""
    assert job.unit_spec is not None
    return {
        "apiVersion": c.QUEUE_API_VERSION,
        "kind": c.QUEUE_UNIT_KIND,
        "metadata": {
            "name": job.unit_name,
            "namespace": job.namespace,
            "labels": dict(job.unit_labels),
            "ownerReferences": [
                {
                    "apiVersion": job.api_version,
                    "kind": job.kind,
                    "name": job.name,
                    "uid": job.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": job.unit_spec,
    }


@dataclass(frozen=True, slots=True)
class UnitView:
    """One QueueUnit: where it stands (its status) and what it says it asks for (its spec,
    which the controller compares with its job's; the engine takes the job's, see unit_info)."""

    namespace: str
    name: str
    uid: str  # for its Events: kubectl describe finds them by it
    resource_version: str
    spec: Object
    labels: tuple[tuple[str, str], ...]
    phase: str
    message: str
    attempts: int
    created: float
    requeue_at: float | None
    consumer_kind: str
    consumer_name: str
    request: ResourceList | None  # None when spec.resource does not parse
    allocated_at: float | None = None  # status.lastAllocateTime
    checks: tuple[tuple[str, str], ...] = ()  # status.admissionChecks: (name, state)
    pod_state: tuple[int, int] | None = None  # status.podState: (running, pending)
    admissions_running: tuple[int, ...] = ()  # status.admissions[].running
    admissions: tuple[Object, ...] = ()  # status.admissions as written (what was admitted, per role)
    running_since: float | None = None  # condition PodsReady True: since when its pods run
    ran_seconds: int = 0  # status.accumulatedPastExecutionTimeSeconds: run in earlier admissions

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def job_key(self) -> str:
        return f"{self.consumer_kind}/{self.namespace}/{self.consumer_name}"

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)


def unit_view(obj: Object) -> UnitView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(spec, dict):
        spec = {}
    if not isinstance(status, dict):
        status = {}
    ref = spec.get("consumerRef") or {}
    try:
        request: ResourceList | None = parse_resource_list(spec.get("resource") or {})
    except QuantityError:
        request = None
    requeue = (status.get("requeueState") or {}).get("requeueAt")
    attempts = status.get("attempts")
    labels = meta.get("labels") or {}
    checks = tuple(
        (str(check.get("name", "")), str(check.get("state") or c.AdmissionCheckState.PENDING))
        for check in status.get("admissionChecks") or () if isinstance(check, dict)
    )
    pod_state = status.get("podState")
    admissions = [a for a in status.get("admissions") or () if isinstance(a, dict)]
    return UnitView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion", "")),
        spec=spec,
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        phase=_phase(status.get("phase")),
        message=str(status.get("message") or ""),
        attempts=attempts if isinstance(attempts, int) else 0,
        created=parse_time(meta.get("creationTimestamp")),
        requeue_at=parse_time(requeue) if requeue else None,
        consumer_kind=str(ref.get("kind", "")),
        consumer_name=str(ref.get("name", "")),
        request=request,
        allocated_at=parse_time(status.get("lastAllocateTime")) or None,
        checks=checks,
        pod_state=(_count(pod_state.get("running")), _count(pod_state.get("pending")))
        if isinstance(pod_state, dict) else None,
        admissions_running=tuple(_count(a.get("running")) for a in admissions),
        admissions=tuple(admissions),
        running_since=_running_since(status.get("conditions")),
        ran_seconds=_count(status.get("accumulatedPastExecutionTimeSeconds")),
    )


def _running_since(conditions: object) -> float | None:
    """When the unit's pods started running (its PodsReady condition, True), if they run."""
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == c.UNIT_CONDITION_PODS_READY:
            if cond.get("status") != c.CONDITION_TRUE:
                return None
            return parse_time(cond.get("lastTransitionTime")) or None
    return None


def unit_active(unit: UnitView, job: JobView) -> bool:
    """Whether the unit may be admitted: the job's annotation scheduling.x-k8s.io/active when
    it gives one, else the unit's spec.active (set by hand, or false once it ran past its
    maximum execution time), else true: Koord-Queue's precedence."""
    if job.active is not None:
        return job.active
    return unit.spec.get("active") is not False


INACTIVE = "it is inactive"  # how the reason an inactive unit waits begins
ORPHAN = "this QueueUnit stands for no job"  # how the reason of a unit without one begins


def held(info: UnitInfo | None) -> Held | None:
    """The held state of a unit, the engine's copy or one made from our views: its field,
    set where the unit info is made (unit_info, bare_unit_info, orphan_info)."""
    return info.held if info is not None else None


def inactive_reason(job: JobView) -> str:
    why = f"annotation {c.ANNOTATION_ACTIVE} is false" if job.active is False else \
        "its QueueUnit's spec.active is false: set by hand, or as it ran past its maximum execution time"
    return f"{INACTIVE} ({why}); it is admitted once active again"


def unit_info(unit: UnitView, job: JobView) -> UnitInfo:
    """The engine's view of a unit that stands for ``job``. What it asks for (priority,
    request, queue, quota, preemptible) is the job's, never the unit's own spec or labels:
    whoever may edit QueueUnits could change those, and although the controller puts them
    back, a scheduling cycle may come first. The unit gives only its age and its attempts."""
    spec = job.unit_spec
    if spec is None:  # the job is unusable: its unit waits, saying why (or, admitted before, holds what it held)
        return UnitInfo(namespace=unit.namespace, name=unit.name, priority=0, created=unit.created,
                        request=unit.request or {}, attempts=unit.attempts, requeue_at=unit.requeue_at,
                        invalid=job.invalid or "unreadable")
    labels = dict(job.unit_labels)
    missing = job.missing_priority_classes
    claims_missing = missing_reason(job.claims_missing) if job.claims_missing else None
    active = unit_active(unit, job)
    # (formatted from amounts we computed: it parses)
    request, pod_sets = as_admitted_per_pod(parse_resource_list(spec["resource"]), job.pod_sets, spec, unit)
    return UnitInfo(
        namespace=unit.namespace,
        name=unit.name,
        priority=spec["priority"],
        created=unit.created,
        request=request,
        queue_name=spec.get("queue") or None,
        quota_name=quota_of_labels(labels),
        preemptible=(labels.get(c.LABEL_PREEMPTIBLE) or "").lower() != c.FALSE,
        attempts=unit.attempts,
        requeue_at=unit.requeue_at,
        # held: it waits, saying why
        invalid=missing_class_reason(missing) if missing else claims_missing if claims_missing else
        None if active else inactive_reason(job),
        pod_sets=pod_sets,
        expected_runtime=expected_runtime(
            {} if job.expected_runtime is None else {c.ANNOTATION_EXPECTED_RUNTIME: job.expected_runtime},
            job.max_execution_seconds),
        held=None if missing or claims_missing or active else Held.INACTIVE,
    )


def as_admitted_per_pod(request: ResourceList, pod_sets: tuple[PodSetInfo, ...], spec: Object,
                        unit: UnitView) -> tuple[ResourceList, tuple[PodSetInfo, ...]]:
    """While its unit's status holds quota, a job is charged for each of its pods at least what
    each pod of that role was admitted with (status.admissions[].resources, claims included):
    its pods keep what they were made with when their template asks less (no operator makes
    running pods again for that), and so do the claims made from a ResourceClaimTemplate made
    again smaller. Fewer pods (replicas, parallelism lowered) charge less at once, as those pods
    go; a smaller pod is charged from the job's next admission. ``spec``: the job's unit spec
    (its podSet: what each pod asks now, claims included); ``pod_sets`` each get the larger of
    each resource they ask for (what their node fit and an admission in part count)."""
    if unit.phase not in c.PHASES_HOLDING_QUOTA or not unit.admissions:
        return request, pod_sets
    admitted: dict[str, ResourceList] = {}
    for entry in unit.admissions:
        try:
            admitted[str(entry.get("name", ""))] = parse_resource_list(entry.get("resources") or {})
        except QuantityError:
            continue  # (we write it: unreadable only if edited by hand; the job's own ask stands)
    total = dict(request)
    for entry in spec.get("podSet") or ():
        was = admitted.get(str(entry.get("name", "")))
        count = int(entry.get("count") or 0)
        if not was or count <= 0:
            continue
        containers = entry["template"]["spec"].get("containers") or [{}]
        now = parse_resource_list((containers[0].get("resources") or {}).get("requests") or {})
        for name, amount in was.items():
            if amount > now.get(name, 0):
                total[name] = total.get(name, 0) + (amount - now.get(name, 0)) * count
    if total == request:
        return request, pod_sets
    sets = tuple(replace(ps, request={name: max(amount, admitted[ps.name].get(name, 0))
                                      for name, amount in ps.request.items()})
                 if ps.name in admitted else ps for ps in pod_sets)
    return total, sets


BARE = "a QueueUnit no job of ours stands behind"  # how its messages name such a unit


def bare_unit_info(unit: UnitView, queue_exists: Callable[[str, str], bool]) -> UnitInfo:
    """The engine's view of a bare unit (made by a Koord-Queue job extension, a platform or a
    person; no job of ours stands behind it): what its own object says, as Koord-Queue reads
    it. Its demand is spec.resource, else its podSet (count x each pod's requests); its
    priority spec.priority (Koord-Queue's queue sorts on that alone: a priorityClassName,
    existing or not, changes nothing); its quota its labels' or its namespace's, through
    the same tenancy rules as a job's (engine/tenancy.py), so it cannot borrow another
    team's; its queue spec.queue when a Queue of that name exists (in the system namespace
    or its own), else its quota's, as Koord-Queue's ElasticQuota plugins map a unit."""
    labels = dict(unit.labels)
    priority = unit.spec.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool) or not -INT32_MAX - 1 <= priority <= INT32_MAX:
        priority = 0
    invalid, state = None, None
    request = unit.request if unit.spec.get("resource") else _pod_set_demand(unit.spec.get("podSet"))
    if request is None:
        invalid = f"{BARE}: its spec.resource and spec.podSet give no readable request"
    elif unit.spec.get("active") is False:
        invalid = f"{INACTIVE} (its spec.active is false); it is admitted once active again"
        state = Held.INACTIVE
    queue = unit.spec.get("queue")
    queue = queue if isinstance(queue, str) and queue and queue_exists(queue, unit.namespace) else None
    return UnitInfo(
        namespace=unit.namespace,
        name=unit.name,
        priority=priority,
        created=unit.created,
        request=request or {},
        queue_name=queue,
        quota_name=quota_of_labels(labels),
        preemptible=(labels.get(c.LABEL_PREEMPTIBLE) or "").lower() != c.FALSE,
        attempts=unit.attempts,
        requeue_at=unit.requeue_at,
        invalid=invalid,
        pod_sets=_pod_group_sets(unit) if invalid is None else (),
        held=state,
    )


def _pod_group_sets(unit: UnitView) -> tuple[PodSetInfo, ...]:
    """A pod group's unit (controller/podgroups.py, ours alone) is placed on nodes too, whole, as a
    job's; any other bare unit by its quota alone, as Koord-Queue has it."""
    if dict(unit.labels).get(c.LABEL_POD_GROUP_UNIT) != c.TRUE:
        return ()
    sets = unit.spec.get("podSet")
    try:
        return tuple(pod_set_info(str(ps.get("name") or "main"), int(ps.get("count") or 0),
                                  pod_request(ps.get("template"), unit.key), ps.get("template") or {}, None, unit.key)
                     for ps in sets if isinstance(ps, Mapping)) if isinstance(sets, list) else ()
    except (InvalidObject, TypeError, ValueError):
        return ()


def _pod_set_demand(pod_sets: object) -> ResourceList | None:
    """count x each pod's requests (its containers' summed, requests defaulting to limits),
    summed over a unit's podSet; None when unreadable."""
    if not isinstance(pod_sets, list):
        return None
    total: dict[str, int] = {}
    try:
        for ps in pod_sets:
            count = ps.get("count", 1) if isinstance(ps, Mapping) else None
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                return None
            spec = ((ps.get("template") or {}).get("spec") or {})
            for container in spec.get("containers") or ():
                resources = container.get("resources") or {}
                amounts = parse_resource_list({**(resources.get("limits") or {}), **(resources.get("requests") or {})})
                for name, amount in amounts.items():
                    total[name] = total.get(name, 0) + amount * count
    except (QuantityError, AttributeError, TypeError):
        return None
    return total


def admitted_placement(unit: UnitView) -> Placement | None:
    """What a unit's status says was admitted: the pods of each role, the domain each was
    given (None: no admission written)."""
    if not unit.admissions:
        return None
    counts, domains = [], []
    for admission in unit.admissions:
        name = str(admission.get("name", ""))
        counts.append((name, _count(admission.get("replicas"))))
        domain = admission.get("domain")
        if isinstance(domain, Mapping) and domain and all(isinstance(v, str) for v in domain.values()):
            # (JSON keeps no order: the default levels' order, widest first, others after)
            chain = tuple(sorted(((str(k), v) for k, v in domain.items()), key=_level_rank))
            domains.append((name, chain[-1][0], chain))
    return Placement(counts=tuple(counts), domains=tuple(domains))


def _level_rank(label: tuple[str, str]) -> tuple[int, str]:
    levels = c.DEFAULT_TOPOLOGY_LEVELS
    return (levels.index(label[0]) if label[0] in levels else len(levels), label[0])


def orphan_info(unit: UnitView, reason: str) -> UnitInfo:
    """The engine's view of a unit that stands for no usable job: it waits, saying ``reason``,
    and asks for nothing (so nothing on it can be edited to any effect)."""
    return UnitInfo(namespace=unit.namespace, name=unit.name, priority=0, created=unit.created, request={},
                    attempts=unit.attempts, requeue_at=unit.requeue_at, invalid=reason, held=Held.ORPHAN)


def _phase(value: object) -> str:
    """status.phase, Koord-Queue's older phases read as the ones of ours they mean."""
    phase = str(value or "")
    older = c.KOORD_QUEUE_OLDER_PHASES.get(phase)
    return older.value if older is not None else phase


def _count(value: object) -> int:
    """A count from a status someone else may have written: anything but an int is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
