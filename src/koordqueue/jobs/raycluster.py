"""RayCluster (ray.io/v1): a head pod and worker groups, ``spec.suspend``; queued as
``<name>-raycluster-qu``, as Koord-Queue's raycluster extension names its units.

A RayCluster serves until it is deleted: it never succeeds, and its quota is freed when it
goes (or fails)."""

from __future__ import annotations

from typing import Any

from koordqueue.api.constants import (
    LABEL_RAY_CLUSTER,
    RAY_API_VERSION,
    RAY_CLUSTER_KIND,
    RAY_CLUSTER_PLURAL,
    RAY_CLUSTER_STATE_FAILED,
    RAY_CLUSTER_STATE_READY,
    UNIT_SUFFIX_RAY_CLUSTER,
)
from koordqueue.api.meta import section
from koordqueue.jobs.base import Job, JobAdapter, JobState, Role, suspend_flag
from koordqueue.jobs.kind import JobKind, Manifest
from koordqueue.jobs.rayjob import HEAD, cluster_roles


class RayClusterAdapter(JobAdapter):
    api_version = RAY_API_VERSION
    kind = RAY_CLUSTER_KIND
    unit_suffix = UNIT_SUFFIX_RAY_CLUSTER
    leader_roles = (HEAD,)

    def roles(self, job: Job) -> list[Role]:
        where = self.meta(job).describe()
        return cluster_roles(section(job, "spec", where, required=True), f"{where}: spec")

    def native_suspended(self, job: Job) -> bool:
        where = self.meta(job).describe()
        return suspend_flag(section(job, "spec", where).get("suspend"), f"{where}: spec")

    def native_suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return {"spec": {"suspend": suspend}}

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

    def pod_selector(self, job: Job) -> dict[str, str]:
        return {LABEL_RAY_CLUSTER: self.meta(job).name}


def ray_cluster_crd() -> Manifest:
    """KubeRay's RayCluster CRD, printing its clusters as KubeRay's does (its schema left open)."""
    from koordqueue.api.crds import OPERATOR_SCHEMA, age, column, crd  # pydantic: only when CRDs are wanted

    columns = [column("Desired Workers", ".status.desiredWorkerReplicas", "integer"),
               column("Available Workers", ".status.availableWorkerReplicas", "integer"),
               column("Status", ".status.state"), age()]
    group, _, version = RAY_API_VERSION.rpartition("/")
    return crd(group, version, RAY_CLUSTER_KIND, RAY_CLUSTER_PLURAL, OPERATOR_SCHEMA, columns)


KIND = JobKind(RayClusterAdapter(), RAY_CLUSTER_PLURAL, "raycluster", crd=ray_cluster_crd)
