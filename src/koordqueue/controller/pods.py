"""Which pods belong to which job, and how many of them run: for a unit's podState.

The pod informer keeps one tiny projection per pod of a queued job (the label that
names its job, its role, its phase) and skips every other pod, so a big cluster's
pods cost little. Counts are kept per job as pods come and go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from koordqueue.api import constants as c

# The labels that name a pod's job, per kind family (the adapters' pod selectors).
JOB_NAME_LABELS = (c.LABEL_JOB_NAME, c.LABEL_BATCH_JOB_NAME, c.LABEL_RAY_CLUSTER)
RUNNING, PENDING = "Running", "Pending"
RAY_HEAD_ROLE = "head"  # the RayJob adapter's name for the head's pod set


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    job_label: str  # which of JOB_NAME_LABELS names the job
    job_name: str  # that label's value (for a RayJob's pods, its Ray cluster's name)
    role: str  # training.kubeflow.org/replica-type; a Ray pod's role (head, or its worker group); or ""
    phase: str
    owner: str = ""  # the job's own name when the label names something else (a RayJob's cluster)

    @property
    def owner_name(self) -> str:
        """The name of the job the pod belongs to."""
        return self.owner or self.job_name

    @property
    def job(self) -> tuple[str, str, str]:
        return (self.job_label, self.namespace, self.job_name)


def pod_view(obj: dict[str, Any]) -> PodView | None:
    """The projection of a pod of a queued job; None for any other pod (not kept)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    for label in JOB_NAME_LABELS:
        job_name = labels.get(label)
        if job_name:
            role, owner = labels.get(c.LABEL_REPLICA_TYPE, ""), ""
            if label == c.LABEL_RAY_CLUSTER:  # KubeRay's labels: the RayJob, and the head or worker group
                owner = labels.get(c.LABEL_RAY_ORIGINATED_FROM_CR_NAME, "")
                role = RAY_HEAD_ROLE if labels.get(c.LABEL_RAY_NODE_TYPE) == "head" else labels.get(c.LABEL_RAY_GROUP, "")
            return PodView(
                namespace=str(meta.get("namespace") or "default"),
                name=str(meta.get("name", "")),
                job_label=label,
                job_name=str(job_name),
                role=str(role),
                phase=str((obj.get("status") or {}).get("phase") or PENDING),
                owner=str(owner),
            )
    return None


@dataclass(slots=True)
class PodCount:
    running: int = 0
    pending: int = 0
    running_by_role: dict[str, int] = field(default_factory=dict)


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
        return result
