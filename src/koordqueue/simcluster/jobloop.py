"""What the simulated job operators share: the kinds they run, the condition and pod helpers,
and `JobOperator`, the base each operator builds on (its pods made, deleted and awaited, its
status written, its events recorded).

Each operator is one file: kubeflow.py (the Kubeflow training operator), ray.py (KubeRay's
RayJobs), applications.py (SparkApplications, Argo Workflows, RayClusters, v1alpha1 MPIJobs)
and batch.py (the batch Job controller). operators.py runs them all on one work queue.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from koordqueue.api import constants as c
from koordqueue.jobs.base import JobAdapter
from koordqueue.jobs.kubeflow import KubeflowAdapter
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import AlreadyExists, NotFound
from koordqueue.kube.events import EventRecorder
from koordqueue.simcluster.background import Background
from koordqueue.simcluster.kubelet import PODS

Object = dict[str, Any]
Item = tuple[str, str]  # (kind, namespace/name)
EXPECTATION_TTL = 30.0  # seconds after which creations never seen are no longer waited for
SIM_ANNOTATIONS = (c.ANNOTATION_SIM_DURATION, c.ANNOTATION_SIM_FAIL)
K = TypeVar("K", bound=Hashable)


async def delete_pod(client: KubeClient, pod: Object) -> bool:
    """Delete ``pod`` as it was seen (its uid a precondition); False when it is gone already."""
    meta = pod["metadata"]
    try:
        await client.delete(PODS, meta["name"], namespace=meta["namespace"], preconditions={"uid": meta["uid"]})
    except NotFound:
        return False
    return True


def creations_in_flight(expected: dict[K, tuple[int, float]], key: K) -> bool:
    """Whether pods created for ``key`` (a job, a ReplicaSet) are not all seen yet: ``expected``
    holds (created and not yet seen, since when), forgotten after EXPECTATION_TTL."""
    pending = expected.get(key)
    if pending is None:
        return False
    if time.monotonic() - pending[1] > EXPECTATION_TTL:
        del expected[key]
        return False
    return True


@dataclass(frozen=True, slots=True)
class SimKind:
    """A job kind as the simulated operators run it."""

    kind: str
    resource: Resource
    adapter: JobAdapter

    @property
    def kubeflow(self) -> bool:
        """The training operator's kind: its pods' events are worded as that operator words them."""
        return isinstance(self.adapter, KubeflowAdapter)


# --- conditions, as the operators set them -------------------------------------------

def find_condition(conditions: list[Object], kind: str) -> Object | None:
    return next((cond for cond in conditions if cond.get("type") == kind), None)


def condition_is_true(conditions: list[Object], kind: str) -> bool:
    found = find_condition(conditions, kind)
    return found is not None and found.get("status") == c.CONDITION_TRUE


def merge_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns `old` into `new` (None where a key went away)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: Object = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


def controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def pod_phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or c.POD_PENDING)


def is_deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))



@dataclass(slots=True)
class Shared:
    """What every operator uses from the loop that runs them: the client, the background
    tasks, one event recorder per kind, and the pods created but not yet seen, per job
    (count, since), which the loop's pod informer counts down."""

    client: KubeClient
    background: Background
    recorders: dict[str, EventRecorder]
    expected: dict[Item, tuple[int, float]]


class JobOperator:
    """One simulated operator: the kinds it runs, and what it does with one of its jobs on each
    sync (level-triggered, from the informers' caches: `pods` are those the job controls)."""

    def __init__(self, shared: Shared) -> None:
        self.client = shared.client
        self.background = shared.background
        self.recorders = shared.recorders
        self._expected = shared.expected

    @staticmethod
    def handles(kind: SimKind) -> bool:
        """Whether the kind is this operator's (the events of its jobs are named after it)."""
        raise NotImplementedError

    def runs(self, kind: SimKind, job: Object) -> bool:
        """Whether this operator runs the job: by default, every job of the kinds it handles."""
        return self.handles(kind)

    @staticmethod
    def event_source(kind: SimKind) -> str:
        """The component named on the events of the kind's jobs."""
        raise NotImplementedError

    async def sync(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
        raise NotImplementedError

    def forget(self, item: Item) -> None:
        """The job is gone: drop what is kept about it (its pods go with it, by the garbage collector)."""

    def _creations_in_flight(self, item: Item) -> bool:
        return creations_in_flight(self._expected, item)

    # --- pods, status, events ---------------------------------------------------------

    def _pod_from_template(self, job: Object, template: Mapping[str, Any], labels: dict[str, str],
                           annotations: dict[str, str], gang_size: int | None, kind: SimKind) -> Object:
        """`gang_size`: the job's pods are one Koordinator gang of that size (None: no gang; a
        batch Job's pods are placed one by one, as kube-scheduler places them)."""
        meta = job["metadata"]
        tmeta = template.get("metadata") or {}
        pod_labels = {**(tmeta.get("labels") or {}), **labels}
        pod_annotations = {**(tmeta.get("annotations") or {}), **annotations}
        for name in SIM_ANNOTATIONS:
            value = (meta.get("annotations") or {}).get(name)
            if value is not None:
                pod_annotations[name] = value
        if gang_size is not None and c.ANNOTATION_GANG_NAME not in pod_annotations:
            pod_annotations[c.ANNOTATION_GANG_NAME] = f"{kind.kind.lower()}-{meta['name']}"
            pod_annotations[c.ANNOTATION_GANG_MIN_AVAILABLE] = str(gang_size)
        owner = self._owner(kind, job)
        return {
            "apiVersion": c.CORE_API_VERSION,
            "kind": c.POD_KIND,
            "metadata": {"namespace": meta["namespace"], "labels": pod_labels, "annotations": pod_annotations,
                         "ownerReferences": [owner]},
            "spec": copy.deepcopy(dict(template.get("spec") or {})),
        }

    @staticmethod
    def _owner(kind: SimKind, job: Object) -> Object:
        meta = job["metadata"]
        return {"apiVersion": kind.resource.api_version, "kind": kind.kind, "name": meta["name"],
                "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}

    async def _create_pods(self, item: Item, kind: SimKind, job: Object, bodies: list[Object],
                           created: list[tuple[str, str]] | None = None) -> None:
        """`created`: the event (reason, message) of each body once created; by default the
        kind's controller's "Created pod: <name>"."""
        self._expected[item] = (len(bodies), time.monotonic())
        events: list[tuple[str, str] | None] = list(created) if created else [None] * len(bodies)
        results = await asyncio.gather(*(self._create_pod(kind, job, body, event)
                                         for body, event in zip(bodies, events, strict=True)),
                                       return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        unseen = sum(1 for r in results if r is False or isinstance(r, BaseException))
        if unseen and item in self._expected:
            count, since = self._expected[item]
            if count - unseen <= 0:
                del self._expected[item]
            else:
                self._expected[item] = (count - unseen, since)
        if failures:
            raise failures[0]

    async def _create_pod(self, kind: SimKind, job: Object, body: Object, event: tuple[str, str] | None) -> bool:
        """True if created; False when a pod of that name is already there."""
        try:
            pod = await self.client.create(PODS, body, namespace=job["metadata"]["namespace"])
        except AlreadyExists:
            return False
        reason = c.EVENT_SUCCESSFUL_CREATE_POD if kind.kubeflow else c.EVENT_BATCH_SUCCESSFUL_CREATE
        reason, message = event or (reason, f"Created pod: {pod['metadata']['name']}")
        self._event(job, c.EventType.NORMAL, reason, message)
        return True

    async def _delete_pods(self, kind: SimKind, job: Object, pods: list[Object]) -> None:
        async def delete(pod: Object) -> None:
            if not await delete_pod(self.client, pod):
                return
            reason = c.EVENT_SUCCESSFUL_DELETE_POD if kind.kubeflow else c.EVENT_BATCH_SUCCESSFUL_DELETE
            self._event(job, c.EventType.NORMAL, reason, f"Deleted pod: {pod['metadata']['name']}")

        results = await asyncio.gather(*(delete(pod) for pod in pods), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]

    async def _write_status(self, kind: SimKind, job: Object, old: Object, new: Object) -> None:
        if new == old:
            return
        meta = job["metadata"]
        # On the version it was computed from, as the real operators update status: from a
        # stale view, a merge patch would replace the conditions list and drop newer ones (a
        # job suspended just after it succeeded lost its Succeeded condition). A conflict is
        # retried with the job as it is now.
        patch: Object = {"status": merge_patch(old, new)}
        if meta.get("resourceVersion"):
            patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        try:
            await self.client.patch_status(kind.resource, meta["name"], patch, namespace=meta["namespace"])
        except NotFound:
            pass

    def _event(self, job: Object, event_type: str, reason: str, message: str) -> None:
        recorder = self.recorders.get(str(job.get("kind")))
        if recorder is not None:
            self.background.spawn(recorder.record(job, event_type, reason, message))

