"""RayCluster (ray.io/v1): a head pod and worker groups, ``spec.suspend``; queued as
``<name>-raycluster-qu``, as Koord-Queue's raycluster extension names its units.

A RayCluster serves until it is deleted: it never succeeds, and its quota is freed when it
goes (or fails). The cluster KubeRay makes for a RayJob (controlled by it) is not queued:
its RayJob is (jobs/parents.py; its label ray.io/originated-from-crd alone proves nothing)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordqueue.api.constants import (
    RAY_API_VERSION,
    RAY_CLUSTER_KIND,
    RAY_CLUSTER_PLURAL,
    RAY_CLUSTER_STATE_FAILED,
    RAY_CLUSTER_STATE_READY,
    RAY_JOB_KIND,
    UNIT_SUFFIX_RAY_CLUSTER,
)
from koordqueue.api.meta import section
from koordqueue.jobs.base import Job, JobState, Role, SpecSuspendAdapter
from koordqueue.jobs.kind import JobKind, Manifest
from koordqueue.jobs.rayjob import HEAD, RAY_POD_LABELS, cluster_patch, cluster_roles


class RayClusterAdapter(SpecSuspendAdapter):
    api_version = RAY_API_VERSION
    kind = RAY_CLUSTER_KIND
    unit_suffix = UNIT_SUFFIX_RAY_CLUSTER
    leader_roles = (HEAD,)
    pod_labels = RAY_POD_LABELS
    parent_kinds = frozenset({RAY_JOB_KIND})  # the cluster KubeRay makes for a RayJob: queued through it
    role_patch_reads_job = True

    def roles(self, job: Job) -> list[Role]:
        where = self.meta(job).describe()
        return cluster_roles(section(job, "spec", where, required=True), f"{where}: spec")

    def role_patch(self, changes: Mapping[str, Mapping[str, Any]], job: Job | None = None) -> dict[str, Any] | None:
        cluster = None if job is None else section(job, "spec", self.meta(job).describe())
        return {"spec": cluster_patch(changes, cluster)}

    def status(self, job: Job) -> JobState:
        """Running once ready (or a worker is); it never succeeds: it serves until deleted."""
        status = section(job, "status", self.meta(job).describe())
        state = status.get("state")
        if state == RAY_CLUSTER_STATE_FAILED:
            return JobState.FAILED
        ready_workers = status.get("readyWorkerReplicas")
        if state == RAY_CLUSTER_STATE_READY or (isinstance(ready_workers, int) and ready_workers > 0):
            return JobState.RUNNING
        return JobState.PENDING


def ray_cluster_crd() -> Manifest:
    """KubeRay's RayCluster CRD, printing its clusters as KubeRay's does (its schema left open)."""
    from koordqueue.api.crds import OPERATOR_SCHEMA, age, column, crd  # pydantic: only when CRDs are wanted

    columns = [column("Desired Workers", ".status.desiredWorkerReplicas", "integer"),
               column("Available Workers", ".status.availableWorkerReplicas", "integer"),
               column("Status", ".status.state"), age()]
    group, _, version = RAY_API_VERSION.rpartition("/")
    return crd(group, version, RAY_CLUSTER_KIND, RAY_CLUSTER_PLURAL, OPERATOR_SCHEMA, columns)


KIND = JobKind(RayClusterAdapter(), RAY_CLUSTER_PLURAL, "raycluster", crd=ray_cluster_crd)
