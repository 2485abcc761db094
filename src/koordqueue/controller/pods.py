"""Which pods belong to which job, and how many of them run: for a unit's podState; and
what the pods bound to each node take, for node fit.

The pod informer keeps one tiny projection per pod of a queued job (the label that
names its job, its role, its phase) or bound to a node (its node and its request), and
skips every other pod, so a big cluster's pods cost little. Counts are kept per job as
pods come and go; what bound pods take, per node and per job (``NodeUsage``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.quantity import QuantityError, ResourceList, add, sub
from koordqueue.jobs import POD_LABELS
from koordqueue.jobs.podrequest import pod_request

RUNNING, PENDING, SUCCEEDED, FAILED = "Running", "Pending", "Succeeded", "Failed"
ONE_POD = 1000  # of a node's allocatable pods, in milli-units
ENDED = (SUCCEEDED, FAILED)  # a pod that ended takes no room on its node
GRACE_SECONDS = 30  # Kubernetes' terminationGracePeriodSeconds when a pod does not say


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    job_label: str  # which label names the job (one of the kinds' POD_LABELS)
    job_name: str  # that label's value (for a RayJob's pods, its Ray cluster's name: Informers.jobs_of_pod)
    role: str  # its pod set's name, from its role label (training.kubeflow.org/replica-type, spark-role, ...); or ""
    phase: str
    node: str = ""  # spec.nodeName: bound there, taking ``request`` while it has not ended
    request: tuple[tuple[str, int], ...] = ()
    quota: str = ""  # its label quota.scheduling.koordinator.sh/name: the quota koord-scheduler charges it to
    grace: int = GRACE_SECONDS  # of a job's pod: the seconds its containers are given to stop when it is deleted

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def takes_room(self) -> bool:
        return bool(self.node) and self.phase not in ENDED

    @property
    def job(self) -> tuple[str, str, str]:
        return (self.job_label, self.namespace, self.job_name)


def pod_view(obj: dict[str, Any]) -> PodView | None:
    """The projection of a pod of a queued job, or of a pod bound to a node; None for any
    other pod (not kept)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = obj.get("spec") or {}
    node = str(spec.get("nodeName") or "") if isinstance(spec, dict) else ""
    phase = str((obj.get("status") or {}).get("phase") or PENDING)
    request = _request(obj) if node and phase not in ENDED else ()
    namespace = str(meta.get("namespace") or "default")
    for kind_labels in POD_LABELS:
        job_name = labels.get(kind_labels.job)
        if job_name:
            role = str(labels.get(kind_labels.role, "")) if kind_labels.role else ""
            role = dict(kind_labels.role_names).get(role, role).lower()
            return PodView(
                namespace=namespace,
                name=str(meta.get("name", "")),
                job_label=kind_labels.job,
                job_name=str(job_name),
                role=role,
                phase=phase,
                node=node,
                request=request,
                quota=str(labels.get(c.LABEL_QUOTA_NAME) or ""),
                grace=_grace(spec),
            )
    if node:
        return PodView(namespace, str(meta.get("name", "")), "", "", "", phase, node=node, request=request,
                       quota=str(labels.get(c.LABEL_QUOTA_NAME) or ""))
    return None


def _grace(spec: object) -> int:
    grace = spec.get("terminationGracePeriodSeconds") if isinstance(spec, dict) else None
    return grace if isinstance(grace, int) and not isinstance(grace, bool) and grace >= 0 else GRACE_SECONDS


def _request(obj: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """What a bound pod takes on its node (as kube-scheduler counts it); nothing when unreadable."""
    try:
        return tuple(sorted(pod_request(obj, "pod").items()))
    except (InvalidObject, QuantityError):
        return ()


@dataclass(slots=True)
class PodCount:
    running: int = 0
    pending: int = 0
    running_by_role: dict[str, int] = field(default_factory=dict)
    succeeded: int = 0
    failed: int = 0
    other: int = 0  # Unknown, or a phase Kubernetes may add

    @property
    def all_succeeded(self) -> bool:
        """Its pods did their work: some, and every one Succeeded (none left in any other phase)."""
        return self.succeeded > 0 and not (self.running or self.pending or self.failed or self.other)


class PodIndex:
    """Pods per job, updated from informer events."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str, str], dict[str, PodView]] = {}

    def put(self, pod: PodView) -> None:
        self._pods.setdefault(pod.job, {})[pod.name] = pod

    def remove(self, pod: PodView) -> None:
        pods = self._pods.get(pod.job)
        if pods is not None:
            pods.pop(pod.name, None)
            if not pods:
                del self._pods[pod.job]

    def count(self, job_label: str, namespace: str, job_name: str) -> PodCount:
        result = PodCount()
        for pod in self._pods.get((job_label, namespace, job_name), {}).values():
            if pod.phase == RUNNING:
                result.running += 1
                result.running_by_role[pod.role] = result.running_by_role.get(pod.role, 0) + 1
            elif pod.phase == PENDING:
                result.pending += 1
            elif pod.phase == SUCCEEDED:
                result.succeeded += 1
            elif pod.phase == FAILED:
                result.failed += 1
            else:
                result.other += 1
        return result

    def lingering(self, job_label: str, namespace: str, job_name: str) -> list[PodView]:
        """The job's pods that have not ended: they hold their node's room until they are gone
        (a pod being deleted is here until its containers have stopped)."""
        return [pod for pod in self._pods.get((job_label, namespace, job_name), {}).values()
                if pod.phase not in ENDED]


class NodeUsage:
    """What the pods bound to each node take (every pod, of a job or not), and where the
    pods of each job are bound, per role: the engine's inputs for node fit."""

    def __init__(self) -> None:
        self._pods: dict[str, PodView] = {}  # pod key -> the pod, while it takes room
        self._by_job: dict[tuple[str, str, str], dict[str, PodView]] = {}  # of those, a job's
        self.used: dict[str, ResourceList] = {}  # node -> what its pods request

    def put(self, pod: PodView) -> set[str]:
        """Take the pod as it is now (bound, ended or gone: ``remove``); the nodes whose use changed."""
        old = self._pods.pop(pod.key, None)
        changed = set()
        if old is not None:
            self._take(old, -1)
            changed.add(old.node)
        if pod.takes_room:
            self._pods[pod.key] = pod
            self._take(pod, 1)
            changed.add(pod.node)
        if old is not None and pod.takes_room and old.node == pod.node and old.request == pod.request:
            return set()
        return changed

    def remove(self, pod: PodView) -> set[str]:
        old = self._pods.pop(pod.key, None)
        if old is None:
            return set()
        self._take(old, -1)
        return {old.node}

    def _take(self, pod: PodView, sign: int) -> None:
        if pod.job_label:
            mine = self._by_job.setdefault(pod.job, {})
            if sign > 0:
                mine[pod.key] = pod
            else:
                mine.pop(pod.key, None)
                if not mine:
                    del self._by_job[pod.job]
        used = self.used.get(pod.node, {})
        takes = {**dict(pod.request), c.PODS: dict(pod.request).get(c.PODS, 0) + ONE_POD}  # and a pod slot
        used = add(used, takes) if sign > 0 else sub(used, takes)
        used = {name: amount for name, amount in used.items() if amount}
        if used:
            self.used[pod.node] = used
        else:
            self.used.pop(pod.node, None)

    def bound(self, job: tuple[str, str, str], pod_sets: tuple[str, ...]) -> dict[tuple[str, str], int]:
        """Where the pods of a job are bound: (pod set, node) -> how many. A pod without a
        role belongs to the job's only pod set (a batch Job's)."""
        out: dict[tuple[str, str], int] = {}
        for pod in self._by_job.get(job, {}).values():
            role = pod.role.lower() or (pod_sets[0] if len(pod_sets) == 1 else "")
            out[role, pod.node] = out.get((role, pod.node), 0) + 1
        return out
