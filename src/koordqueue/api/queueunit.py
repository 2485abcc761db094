"""The QueueUnit object (scheduling.x-k8s.io/v1alpha1), in Koord-Queue v1.8's field names.

Reading is tolerant: fields we do not know are kept (``extra="allow"``), so a unit written
by Koord-Queue, or by a newer version of us, survives a read-modify-write. The same models
give the CRD's schema (``api/crds.py``), so the two cannot disagree.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from koordqueue.api.constants import (
    ANNOTATION_LAST_APPLIED,
    QUEUE_API_VERSION,
    QUEUE_UNIT_KIND,
)
from koordqueue.api.meta import INT32_MAX, InvalidObject
from koordqueue.api.quantity import QuantityError, format_quantity, format_resource_list, parse_quantity

if TYPE_CHECKING:
    from koordqueue.jobs.base import Job, JobAdapter

QUANTITY_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
    "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
}
FREE_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _quantity(value: object) -> str:
    """A quantity kept as the text it was written in; numbers become their short form."""
    try:
        milli = parse_quantity(value, allow_negative=True)  # type: ignore[arg-type]  # checked inside
    except QuantityError as err:
        raise ValueError(str(err)) from None
    return value.strip() if isinstance(value, str) else format_quantity(milli)


def _time(value: datetime) -> str:
    """metav1.Time: RFC 3339 in UTC, whole seconds."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Quantity = Annotated[str, BeforeValidator(_quantity), WithJsonSchema(QUANTITY_SCHEMA)]
Resources = dict[str, Quantity]
Time = Annotated[datetime, PlainSerializer(_time), WithJsonSchema({"type": "string", "format": "date-time"})]
FreeObject = Annotated[dict[str, Any], WithJsonSchema(FREE_OBJECT_SCHEMA)]
Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
Count = Annotated[int, Field(ge=0)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """Go writes ``null`` for empty fields without omitempty (``status.admissions``)."""
        if isinstance(data, Mapping):
            return {key: value for key, value in data.items() if value is not None}
        return data


class ObjectReference(_Model):
    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    field_path: str | None = None


class PodSet(_Model):
    name: str
    count: Count
    min_count: Count | None = None
    template: FreeObject = Field(default_factory=dict)


class QueueUnitSpec(_Model):
    consumer_ref: ObjectReference | None = None
    priority: Int32 | None = None
    queue: str | None = None
    resource: Resources = Field(default_factory=dict)  # the job's total request (deprecated in Go)
    pod_sets: list[PodSet] = Field(default_factory=list, alias="podSet")
    priority_class_name: str | None = None
    request: Resources = Field(default_factory=dict)
    active: bool | None = None  # Koord-Queue v1.8: false evicts the job and stops scheduling it
    maximum_execution_time_seconds: Int32 | None = None


class AdmissionCheckState(_Model):
    name: str
    state: str | None = None  # Pending, Ready, Retry, Rejected
    last_transition_time: Time | None = None
    message: str | None = None
    pod_set_updates: list[FreeObject] | None = None


class PodState(_Model):
    running: Count = 0
    pending: Count = 0


class ReclaimState(_Model):
    replicas: Count = 0


class Admission(_Model):
    name: str
    replicas: Count = 0
    resources: Resources = Field(default_factory=dict)
    running: Count = 0
    reclaim_state: ReclaimState | None = None


class Condition(_Model):
    type: str
    status: str
    observed_generation: int | None = None
    last_transition_time: Time | None = None
    reason: str | None = None
    message: str | None = None


class RequeueState(_Model):
    count: Count = 0
    requeue_at: Time | None = None


class ReclaimablePod(_Model):
    name: str
    count: Count = 0


class QueueUnitStatus(_Model):
    phase: str | None = None  # constants.Phase; Koord-Queue's older phases (SchedReady, ...) read too
    attempts: Count = 0
    message: str | None = None
    last_update_time: Time | None = None
    admission_checks: list[AdmissionCheckState] = Field(default_factory=list)
    pod_state: PodState | None = None
    admissions: list[Admission] = Field(default_factory=list)
    last_allocate_time: Time | None = None
    conditions: list[Condition] = Field(default_factory=list)
    requeue_state: RequeueState | None = None
    reclaimable_pods: list[ReclaimablePod] = Field(default_factory=list)
    accumulated_past_execution_time_seconds: Int32 | None = None


class QueueUnit(_Model):
    api_version: str = QUEUE_API_VERSION
    kind: str = QUEUE_UNIT_KIND
    metadata: FreeObject = Field(default_factory=dict)
    spec: QueueUnitSpec = Field(default_factory=QueueUnitSpec)
    status: QueueUnitStatus | None = None

    def manifest(self) -> dict[str, Any]:
        """The object as JSON-ready dict, in the API's field names, without empty optionals."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def parse_queue_unit(obj: object) -> QueueUnit:
    """A QueueUnit read from the API; ``InvalidObject`` says which field is wrong."""
    try:
        return QueueUnit.model_validate(obj)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'object'}: {e['msg']}" for e in err.errors()
        )
        name = obj.get("metadata", {}).get("name") if isinstance(obj, Mapping) else None
        raise InvalidObject(f"{QUEUE_UNIT_KIND} {name or '?'}: {problems}") from None


def build_queue_unit(job: Job, adapter: JobAdapter, priority_classes: Mapping[str, int]) -> dict[str, Any]:
    """The QueueUnit manifest for ``job``: owned by it, named like Koord-Queue names it.

    Labels and annotations are the job's (so selectors and the quota label work on the unit);
    pod templates get requests filled from limits, as Koord-Queue writes them. Status is
    left out: on create the API server ignores it, the controller writes it afterwards.
    """
    meta = adapter.meta(job)
    if meta.uid is None:
        raise InvalidObject(
            f"{meta.describe()}: metadata.uid is missing; only a stored job can own a QueueUnit"
        )
    owner = {"apiVersion": adapter.api_version, "kind": adapter.kind, "name": meta.name, "uid": meta.uid}
    demand = format_resource_list(adapter.demand(job))
    unit = QueueUnit(
        metadata={
            "name": adapter.unit_name(job),
            "namespace": meta.namespace,
            "labels": dict(meta.labels),
            "annotations": {k: v for k, v in meta.annotations.items() if k != ANNOTATION_LAST_APPLIED},
            "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
        },
        spec=QueueUnitSpec(
            consumer_ref=ObjectReference(**owner, namespace=meta.namespace),
            priority=adapter.priority(job, priority_classes),
            queue=adapter.requested_queue(job),
            resource=demand,
            podSet=[
                PodSet(
                    name=s.name,
                    count=s.count,
                    min_count=s.min_count,
                    template=_requests_from_limits(s.template),
                )
                for s in adapter.pod_sets(job)
            ],
            priority_class_name=adapter.priority_class_name(job),
            request=demand,
        ),
    )
    return unit.manifest()


def _requests_from_limits(template: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a pod template whose containers request their limits where they request nothing."""
    result = copy.deepcopy(dict(template))
    spec = result.get("spec") or {}
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") or {}
            if resources.get("limits"):
                resources["requests"] = {**resources["limits"], **(resources.get("requests") or {})}
    return result
