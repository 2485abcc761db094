"""The one interface every job kind implements, and what all kinds share.

A kind's adapter only says where its pod templates and replica counts are, where its
native suspend field is, and how its status reads. Demand, priority, suspension through
the annotation, and the engine's ``UnitInfo`` are computed here, the same for all kinds.
"""

from __future__ import annotations

import datetime as dt
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from koordqueue.api.constants import (
    ANNOTATION_ACTIVE,
    ANNOTATION_JOB_DEQUEUE_TIMESTAMP,
    ANNOTATION_JOB_ENQUEUE_TIMESTAMP,
    ANNOTATION_JOB_HAS_ENQUEUED,
    ANNOTATION_MAX_EXEC_TIME_SECONDS,
    ANNOTATION_PRIORITY,
    ANNOTATION_QUEUE,
    ANNOTATION_SUSPEND,
    CONDITION_TRUE,
    FALSE,
    LABEL_ASI_QUOTA_NAME,
    LABEL_PREEMPTIBLE,
    LABEL_QUOTA_NAME,
    TRUE,
)
from koordqueue.api.meta import INT32_MAX, InvalidObject, Meta, parse_int_text, read_int, read_meta, section
from koordqueue.api.quantity import MAX_MILLI, ResourceList, add, scale
from koordqueue.engine.model import PodSetInfo
from koordqueue.jobs.placement import as_written, originals, pod_set_info
from koordqueue.jobs.podrequest import pod_request

Job = Mapping[str, Any]
"""A job object as it comes from the API server or YAML."""

MAX_NAME_LENGTH = 253  # an object name (DNS subdomain), as the API server allows


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED)


@dataclass(frozen=True, slots=True)
class Role:
    """One replica spec of a job, as the kind writes it: a pod template and a count."""

    name: str
    replicas: int
    template: Mapping[str, Any]
    min_count: int | None = None


@dataclass(frozen=True, slots=True)
class PodSet:
    """One role of a job, as the user wrote it: ``count`` pods, each asking for ``request``
    (milli-units). ``role`` is its name in the job (``Worker``); ``name``, in its unit (``worker``)."""

    name: str
    count: int
    request: ResourceList
    template: Mapping[str, Any]
    min_count: int | None = None
    role: str = ""

    @property
    def total(self) -> ResourceList:
        return scale(self.request, self.count)


@dataclass(frozen=True, slots=True)
class PodLabels:
    """How a kind's operator labels a job's pods: ``job`` names the job, or what the job's
    pods are made for (a RayJob's Ray cluster; ``pod_selector`` gives its value); ``role``,
    the pod's role ("": none), its value (lower-cased) the name of the pod set, but for
    those ``role_names`` renames."""

    job: str
    role: str = ""
    role_names: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class _Reading:
    """A job being read whole, and what was read of it so far."""

    job: Job
    meta: Meta | None = None
    roles: list[Role] | None = None


class JobAdapter(ABC):
    """What the controller needs to know about one job kind."""

    _reading: _Reading | None = None  # see ``reading``

    api_version: ClassVar[str]
    kind: ClassVar[str]
    unit_suffix: ClassVar[str]  # QueueUnit name = job name + "-" + suffix ("" = the job's name)
    leader_roles: ClassVar[tuple[str, ...]] = ()  # roles whose priorityClassName counts first
    # The labels of its pods, the one ``pod_selector`` names first (no default: a kind
    # without them would have its pods uncounted; controller/pods.py reads every kind's).
    pod_labels: ClassVar[tuple[PodLabels, ...]]
    # Kinds that make jobs of this kind for themselves (KubeRay's RayJob: its RayCluster and
    # submitter Job), queued for them: see jobs/parents.py for when such an owner is trusted.
    parent_kinds: ClassVar[frozenset[str]] = frozenset()
    # Its roles' templates are items of a list (a Ray cluster's worker groups), which a merge
    # patch can only write whole: ``role_patch`` needs the job as it is, read just before.
    role_patch_reads_job: ClassVar[bool] = False

    @abstractmethod
    def roles(self, job: Job) -> list[Role]:
        """The replica specs, in the order the manifest lists them."""

    @abstractmethod
    def native_suspended(self, job: Job) -> bool:
        """Whether the kind's own suspend field is set."""

    @abstractmethod
    def native_suspend_patch(self, suspend: bool) -> dict[str, Any]:
        """A merge patch setting the kind's own suspend field."""

    @abstractmethod
    def status(self, job: Job) -> JobState:
        """Where the job is, from its conditions or status."""

    def finishes_once_resumed(self, job: Job) -> bool:
        """Whether the job has ended (``status``) but its own controller marks it finished only
        once it is not suspended: it must be resumed to be told Complete or Failed."""
        return False

    def api_version_of(self, job: Job) -> str:
        """The apiVersion its unit names the job by (consumerRef, owner reference): the one it
        was read in (a kind read in more than one version may be served in another than its
        own), else the kind's own."""
        version = job.get("apiVersion")
        return version if isinstance(version, str) and version else self.api_version

    def pod_selector(self, job: Job) -> dict[str, str]:
        """The labels the job's pods carry, to find them (one of ``pod_labels``)."""
        return {self.pod_labels[0].job: self.meta(job).name}


    # --- shared by every kind (``meta``: the job's, when already read) -----------------

    @contextmanager
    def reading(self, job: Job) -> Iterator[None]:
        """Within it, ``job``'s metadata and roles are read once, not once per question (a
        job's view asked them 14 and 4 times: most of a restart's CPU). For a synchronous
        read only: the adapter is shared, and the job must not change meanwhile."""
        outer, self._reading = self._reading, _Reading(job)
        try:
            yield
        finally:
            self._reading = outer

    def meta(self, job: Job) -> Meta:
        reading = self._reading
        if reading is None or reading.job is not job:
            return read_meta(job, self.kind)
        if reading.meta is None:
            reading.meta = read_meta(job, self.kind)
        return reading.meta

    def _roles(self, job: Job) -> list[Role]:
        reading = self._reading
        if reading is None or reading.job is not job:
            return self.roles(job)
        if reading.roles is None:
            reading.roles = self.roles(job)
        return reading.roles

    def unit_name_for(self, job_name: str) -> str:
        """The name of the QueueUnit of the job named ``job_name``."""
        return f"{job_name}-{self.unit_suffix}" if self.unit_suffix else job_name

    def unit_name(self, job: Job, meta: Meta | None = None) -> str:
        meta = meta or self.meta(job)
        name = self.unit_name_for(meta.name)
        if len(name) > MAX_NAME_LENGTH:
            raise InvalidObject(
                f"{meta.describe()}: its QueueUnit's name would be {len(name)} characters, more than "
                f"{MAX_NAME_LENGTH}: name the job with at most {MAX_NAME_LENGTH - len(name) + len(meta.name)}")
        return name

    def pod_sets(self, job: Job, meta: Meta | None = None) -> list[PodSet]:
        """The roles as the user wrote them: what an admission changed on the job is put back."""
        meta = meta or self.meta(job)
        where = meta.describe()
        replaced = originals(meta)
        sets = []
        for role in self._roles(job):
            at = f"{where}: {role.name}"
            count, written = as_written(role.name, role.replicas, role.template, replaced.get(role.name), at)
            request = pod_request(written, at)
            sets.append(PodSet(role.name.lower(), count, request, written, role.min_count, role.name))
        return sets

    def pod_set_infos(self, sets: list[PodSet], meta: Meta) -> tuple[PodSetInfo, ...]:
        """Where the pods of each role may go, for node fit."""
        where = meta.describe()
        return tuple(pod_set_info(ps.name, ps.count, ps.request, ps.template, ps.min_count, f"{where}: {ps.role}")
                     for ps in sets)

    def children(self, job: Job) -> dict[str, tuple[str, ResourceList | None]]:
        """The jobs this job's operator makes for it (jobs/parents.py): per kind, the name it
        gives it and the most it may ask (None: as much as this job asks). Read from the job,
        which a tenant writes but whose status only its operator does."""
        return {}

    def role_patch(self, changes: Mapping[str, Mapping[str, Any]], job: Job | None = None) -> dict[str, Any] | None:
        """A merge patch setting, per role, ``replicas``, ``nodeSelector`` entries (None removes
        one), tolerations and template marks (``placement.template_patch``); ``job``: the job as
        it is (``role_patch_reads_job``). None when this kind's roles cannot be changed so: an
        admission then writes nothing on its pods, so a kind whose pods an admission must pin
        (into a flavor, a topology domain) has to say so here or be refused such admissions."""
        return None

    def demand(self, job: Job, meta: Meta | None = None, sets: list[PodSet] | None = None) -> ResourceList:
        """The whole job's request: per role, replicas times the pod's request."""
        total: ResourceList = {}
        for pod_set in sets if sets is not None else self.pod_sets(job, meta):
            total = add(total, pod_set.total)
        too_big = [name for name, amount in total.items() if amount > MAX_MILLI]
        if too_big:
            raise InvalidObject(
                f"{(meta or self.meta(job)).describe()}: the total request of {', '.join(too_big)} is too large"
            )
        return total

    def priority_class_name(self, job: Job) -> str | None:
        """The first ``priorityClassName`` of the pod templates, leader roles first."""
        names = self.priority_class_names(job)
        return names[0] if names else None

    def priority_class_names(self, job: Job) -> tuple[str, ...]:
        """Every ``priorityClassName`` of the pod templates, leader roles first, each once."""
        names: dict[str, None] = {}
        for role in self._leaders_first(job):
            name = section(role.template, "spec", "template").get("priorityClassName")
            if isinstance(name, str) and name:
                names[name] = None
        return tuple(names)

    def annotated_priority(self, job: Job, meta: Meta | None = None) -> int | None:
        """The annotation ``scheduling.x-k8s.io/priority``, when the job has one."""
        meta = meta or self.meta(job)
        text = meta.annotations.get(ANNOTATION_PRIORITY, "")
        if not text.strip():
            return None
        return parse_int_text(text, f"{meta.describe()}: annotation {ANNOTATION_PRIORITY}")

    def priority(self, job: Job, priority_classes: Mapping[str, int], meta: Meta | None = None) -> int:
        """The annotation ``scheduling.x-k8s.io/priority``, else the pod templates' class value, else 0."""
        annotated = self.annotated_priority(job, meta)
        if annotated is not None:
            return annotated
        return class_priority(self.priority_class_names(job), priority_classes)

    def requested_queue(self, job: Job, meta: Meta | None = None) -> str | None:
        return (meta or self.meta(job)).annotations.get(ANNOTATION_QUEUE) or None

    def requested_quota(self, job: Job, meta: Meta | None = None) -> str | None:
        return quota_of_labels((meta or self.meta(job)).labels)

    def active(self, job: Job, meta: Meta | None = None) -> bool | None:
        """The annotation ``scheduling.x-k8s.io/active`` as Koord-Queue reads it (Go's
        strconv.ParseBool); None when absent, empty or not a boolean (ignored, as there)."""
        text = (meta or self.meta(job)).annotations.get(ANNOTATION_ACTIVE, "")
        return GO_BOOLS.get(text)

    def max_execution_seconds(self, job: Job, meta: Meta | None = None) -> int | None:
        """The annotation ``scheduling.x-k8s.io/max-exec-time-seconds``: a positive int32, else
        None (absent or not one: ignored, as Koord-Queue does)."""
        text = (meta or self.meta(job)).annotations.get(ANNOTATION_MAX_EXEC_TIME_SECONDS, "")
        if not GO_INT.fullmatch(text):
            return None
        seconds = int(text)
        return seconds if 0 < seconds <= INT32_MAX else None

    def preemptible(self, job: Job, meta: Meta | None = None) -> bool:
        return (meta or self.meta(job)).labels.get(LABEL_PREEMPTIBLE, "").lower() != FALSE

    def is_suspended(self, job: Job) -> bool:
        """Whether the job's pods are kept away: by the kind's own field alone when it has one
        (its operator reads only that: a job whose field a tenant set to false runs, whatever
        the annotation says), else by the annotation ``scheduling.x-k8s.io/suspend``."""
        if self.has_native_suspend(job):
            return self.native_suspended(job)
        return self.meta(job).annotations.get(ANNOTATION_SUSPEND) == TRUE

    def has_native_suspend(self, job: Job) -> bool:
        """Whether the job has the kind's own suspend field (an MPIJob in the v1alpha1 form has none)."""
        return True

    def suspend_patch(self, job: Job, native: bool | None = None) -> dict[str, Any]:
        """A merge patch that suspends the job: annotation and native field (``native``: whether
        the job has one, when the patch is made without it; by default, read from ``job``)."""
        return self._switch_patch(True, self.has_native_suspend(job) if native is None else native)

    def resume_patch(self, job: Job, native: bool | None = None) -> dict[str, Any]:
        """A merge patch that lets the job run: the annotation removed, the native field false."""
        return self._switch_patch(False, self.has_native_suspend(job) if native is None else native)

    def _switch_patch(self, suspend: bool, native: bool) -> dict[str, Any]:
        patch: dict[str, Any] = {"metadata": {"annotations": {ANNOTATION_SUSPEND: TRUE if suspend else None}}}
        return merge_patches(patch, self.native_suspend_patch(suspend)) if native else patch

    def _leaders_first(self, job: Job) -> list[Role]:
        roles = self._roles(job)
        rank = {name: index for index, name in enumerate(self.leader_roles)}
        return sorted(roles, key=lambda role: rank.get(role.name, len(rank)))


# Go's strconv.ParseBool: the spellings Koord-Queue accepts for a boolean annotation.
GO_INT = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.ParseInt reads in base 10
GO_BOOLS = {**dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
            **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)}


def quota_of_labels(labels: Mapping[str, str]) -> str | None:
    """The quota a job names: ``quota.scheduling.koordinator.sh/name``, else (absent or
    empty) ``alibabacloud.com/quota-name``, as Koord-Queue reads its units' labels."""
    return labels.get(LABEL_QUOTA_NAME) or labels.get(LABEL_ASI_QUOTA_NAME) or None


def go_time(seconds: float) -> str:
    """A time as Koord-Queue writes it on jobs, Go's time.Time.String() in UTC
    (``2006-01-02 15:04:05.999999999 +0000 UTC``), without the monotonic clock reading
    (`` m=+...``) that Go appends and that Koord-Queue's own reader cannot parse."""
    when = dt.datetime.fromtimestamp(seconds, dt.UTC)
    fraction = f"{when.microsecond:06d}".rstrip("0")
    return when.strftime("%Y-%m-%d %H:%M:%S") + (f".{fraction}" if fraction else "") + " +0000 UTC"


def enqueued_patch(now: float) -> dict[str, Any]:
    """A merge patch saying, as Koord-Queue's job extensions do, that the job is queued (and since when)."""
    return {"metadata": {"annotations": {ANNOTATION_JOB_HAS_ENQUEUED: TRUE,
                                         ANNOTATION_JOB_ENQUEUE_TIMESTAMP: go_time(now)}}}


def dequeued_patch(now: float | None) -> dict[str, Any]:
    """A merge patch saying when the job was let run (None: suspended again, emptied)."""
    return {"metadata": {"annotations": {ANNOTATION_JOB_DEQUEUE_TIMESTAMP: go_time(now) if now is not None else ""}}}


class SpecSuspendAdapter(JobAdapter):
    """A kind whose own suspend field is ``spec.suspend`` (batch Job, KubeRay's, Spark's, Argo's)."""

    def native_suspended(self, job: Job) -> bool:
        where = self.meta(job).describe()
        return suspend_flag(section(job, "spec", where).get("suspend"), f"{where}: spec")

    def native_suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return {"spec": {"suspend": suspend}}


def class_priority(names: tuple[str, ...], priority_classes: Mapping[str, int]) -> int:
    """The value of the first of ``names`` that is a PriorityClass, else 0."""
    return next((priority_classes[name] for name in names if name in priority_classes), 0)


def replicas(value: object, where: str, default: int = 1) -> int:
    """A replica count: absent is ``default``; negative, non-integer or beyond int32 is invalid."""
    if value is None:
        return default
    return read_int(value, f"{where}: replicas", minimum=0, maximum=INT32_MAX)


def template(value: object, where: str) -> Mapping[str, Any]:
    """A pod template (PodTemplateSpec); its containers are checked when its request is computed."""
    if not isinstance(value, Mapping):
        raise InvalidObject(f"{where}: template is missing or not a mapping")
    return value


def suspend_flag(value: object, where: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidObject(f"{where}: suspend must be true or false, got {value!r}")
    return value


def condition_true(conditions: object, kind: str) -> bool:
    """Whether ``status.conditions`` holds a condition of type ``kind`` with status True."""
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == CONDITION_TRUE
        for c in conditions
    )


def merge_patches(a: dict[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge of two patch dicts (b wins on leaves)."""
    result = dict(a)
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merge_patches(dict(result[key]), value)
        else:
            result[key] = value
    return result
