"""The QueueUnit object (scheduling.x-k8s.io/v1alpha1), in Koord-Queue v1.8's field names.

Reading is tolerant: fields we do not know are kept (``extra="allow"``), so a unit written
by Koord-Queue, or by a newer version of us, survives a read-modify-write. The same models
give the CRD's schema (``api/crds.py``), so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from koordqueue.api.constants import QUEUE_API_VERSION, QUEUE_UNIT_KIND
from koordqueue.api.meta import INT32_MAX
from koordqueue.api.quantity import QuantityError, format_quantity, parse_quantity

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
    # Each field's docstring is its description in the CRD (what `kubectl explain` shows).
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow",
                              use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """Go writes ``null`` for empty fields without omitempty (``status.admissions``)."""
        if isinstance(data, Mapping):
            return {key: value for key, value in data.items() if value is not None}
        return data


class ObjectReference(_Model):
    api_version: str | None = None
    """The job's apiVersion."""
    kind: str | None = None
    """The job's kind (PyTorchJob, TFJob, MPIJob, Job, RayJob)."""
    name: str | None = None
    """The job's name."""
    namespace: str | None = None
    """The job's namespace."""
    uid: str | None = None
    """The job's uid."""
    resource_version: str | None = None
    """Not used."""
    field_path: str | None = None
    """Not used."""


class PodSet(_Model):
    name: str
    """The role (Master, Worker, ...)."""
    count: Count
    """How many pods of this role."""
    min_count: Count | None = None
    """The fewest pods the role can run with (elastic jobs)."""
    template: FreeObject = Field(default_factory=dict)
    """The role's pod template, requests filled from limits."""


class QueueUnitSpec(_Model):
    consumer_ref: ObjectReference | None = None
    """The job this unit queues (it owns the unit)."""
    priority: Int32 | None = None
    """The unit's priority in its queue: the job's scheduling.x-k8s.io/priority annotation, else its
    PriorityClass's value."""
    queue: str | None = None
    """The Queue the job names (annotation scheduling.x-k8s.io/queue); the job's quota's Queue when empty."""
    resource: Resources = Field(default_factory=dict)
    """The job's total request (deprecated: see request)."""
    pod_sets: list[PodSet] = Field(default_factory=list, alias="podSet")
    """The job's pods, by role."""
    priority_class_name: str | None = None
    """The PriorityClass of the job's pods."""
    request: Resources = Field(default_factory=dict)
    """The job's total request: what it takes from its quota when admitted."""
    active: bool | None = None
    """False keeps the job from being admitted, and suspends it if it runs (Koord-Queue v1.8). Set from
    the job's scheduling.x-k8s.io/active annotation when it has one; set false once the job ran past
    maximumExecutionTimeSeconds."""
    maximum_execution_time_seconds: Int32 | None = None
    """Seconds the job's pods may run, summed over its admissions, before it is suspended and made
    inactive (the job's scheduling.x-k8s.io/max-exec-time-seconds annotation)."""


# One admission check's entry in status.admissionChecks (its state: constants.AdmissionCheckState).
# A comment, not a docstring: a model's docstring is written into the CRD.
class AdmissionCheckStatus(_Model):
    name: str
    """The check's name (the Queue's spec.admissionChecks)."""
    state: str | None = None
    """Pending, Ready, Retry or Rejected; set by whoever runs the check."""
    last_transition_time: Time | None = None
    """When the state last changed."""
    message: str | None = None
    """Why the check is in this state."""
    pod_set_updates: list[FreeObject] | None = None
    """Not used."""


class PodState(_Model):
    running: Count = 0
    """The job's pods that run."""
    pending: Count = 0
    """The job's pods that wait to run."""


class ReclaimState(_Model):
    replicas: Count = 0
    """Pods of the role given back."""


# One role's entry in status.admissions (engine.model.Admission is a whole unit's admission).
class PodSetAdmission(_Model):
    name: str
    """The role (pod set) admitted."""
    replicas: Count = 0
    """Pods of the role admitted."""
    resources: Resources = Field(default_factory=dict)
    """What each of those pods requests."""
    running: Count = 0
    """Pods of the role that run."""
    domain: dict[str, str] | None = None
    """The topology domain its pods were given, as the node labels that pin them (widest
    level first), written into the job's pod templates as nodeSelector entries."""
    reclaim_state: ReclaimState | None = None
    """Not used."""


class Condition(_Model):
    type: str
    """The condition's type."""
    status: str
    """True, False or Unknown."""
    observed_generation: int | None = None
    """The spec's generation the condition was set for."""
    last_transition_time: Time | None = None
    """When the status last changed."""
    reason: str | None = None
    """Why, in one word."""
    message: str | None = None
    """Why, in words."""


class RequeueState(_Model):
    count: Count = 0
    """How many times the unit was sent back."""
    requeue_at: Time | None = None
    """When it may be admitted again."""


class ReclaimablePod(_Model):
    name: str
    """The role."""
    count: Count = 0
    """Pods of the role that may be given back."""


class QueueUnitStatus(_Model):
    phase: str | None = None
    """Enqueued (waiting), Reserved (quota held, admission checks pending), Dequeued (admitted), Running,
    Succeed, Failed, Preempted or TimeoutBackoff (sent back, waiting again)."""
    attempts: Count = 0
    """How many times the unit was admitted."""
    message: str | None = None
    """Why the unit is in its phase: what it waits for, or where it was admitted."""
    last_update_time: Time | None = None
    """When the status was last written."""
    admission_checks: list[AdmissionCheckStatus] = Field(default_factory=list)
    """The admission checks of the unit's Queue that apply to it, and their states."""
    pod_state: PodState | None = None
    """The job's pods, counted."""
    admissions: list[PodSetAdmission] = Field(default_factory=list)
    """What was admitted, per role, while the unit holds quota."""
    admission_summary: str | None = None
    """The pods admitted per role (master=1,worker=1): the ADMISSIONS column."""
    last_allocate_time: Time | None = None
    """When the unit was last admitted."""
    conditions: list[Condition] = Field(default_factory=list)
    """PodsReady: True while the job's pods run, since when (its execution clock)."""
    requeue_state: RequeueState | None = None
    """When a unit sent back may be admitted again."""
    reclaimable_pods: list[ReclaimablePod] = Field(default_factory=list)
    """Pods that may be given back (elastic jobs)."""
    accumulated_past_execution_time_seconds: Int32 | None = None
    """Seconds the job's pods ran in earlier admissions (counted against maximumExecutionTimeSeconds)."""
    expected_start: str | None = None
    """While it waits: when it is expected to start (RFC 3339), by the leader's forecast; written only
    when the forecast moves by more than a minute and 10 % of the wait. Absent: no forecast (yet)."""
    expected_start_range: list[str] | None = None
    """The forecast's earliest and latest start (RFC 3339; the earliest alone: the latest is beyond
    the forecast's horizon)."""
    forecast_basis: str | None = None
    """Where the forecast's runtimes came from: annotation, history, default (joined with +), or
    never-fits / beyond-horizon when it has no expected start."""
    forecast_note: str | None = None
    """Why the job's koord-queue/expected-runtime annotation is ignored by the forecast (not a runtime)."""


class QueueUnit(_Model):
    """QueueUnit is a job's place in its queue: the controller makes one for each job it queues,
    admits it against the job's ElasticQuota, and writes why it waits (status.message)."""

    api_version: str = QUEUE_API_VERSION
    kind: str = QUEUE_UNIT_KIND
    metadata: FreeObject = Field(default_factory=dict)
    spec: QueueUnitSpec = Field(default_factory=QueueUnitSpec)
    """What the job asks for: its pods, priority, queue."""
    status: QueueUnitStatus | None = None
    """Written by the controller."""

    def manifest(self) -> dict[str, Any]:
        """The object as JSON-ready dict, in the API's field names, without empty optionals."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
