"""RayJob (ray.io/v1): a head pod and worker groups of ``spec.rayClusterSpec``, ``spec.suspend``.

The submitter pod KubeRay starts for ``K8sJobMode`` is small and short-lived; it is not
counted (Kueue counts it; a later change may).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordqueue.api.constants import (
    BATCH_JOB_KIND,
    LABEL_RAY_CLUSTER,
    LABEL_RAY_GROUP,
    RAY_API_VERSION,
    RAY_CLUSTER_KIND,
    RAY_DEPLOYMENT_COMPLETE,
    RAY_DEPLOYMENT_FAILED,
    RAY_DEPLOYMENT_RUNNING,
    RAY_DEPLOYMENT_VALIDATION_FAILED,
    RAY_HEAD_GROUP,
    RAY_JOB_KIND,
    RAY_JOB_STATUS_FAILED,
    RAY_JOB_STATUS_RUNNING,
    RAY_JOB_STATUS_SUCCEEDED,
    RAY_PLURAL,
    RAY_SUBMITTER_REQUESTS,
    UNIT_SUFFIX_RAY,
)
from koordqueue.api.meta import InvalidObject, section
from koordqueue.api.quantity import ResourceList, parse_resource_list
from koordqueue.jobs.base import (
    Job,
    JobState,
    PodLabels,
    Role,
    SpecSuspendAdapter,
    replicas,
    template,
)
from koordqueue.jobs.kind import JobKind, Manifest

HEAD = "head"
# KubeRay's pod labels (common/pod.go labelPod): the Ray cluster and its group (the head's is
# headgroup). Nothing on a pod names the RayJob: ray.io/originated-from-cr-name is on the
# RayCluster KubeRay makes for it, so a RayJob's pods are found by its cluster's name.
RAY_POD_LABELS = (PodLabels(LABEL_RAY_CLUSTER, LABEL_RAY_GROUP, ((RAY_HEAD_GROUP, HEAD),)),)


class RayJobAdapter(SpecSuspendAdapter):
    api_version = RAY_API_VERSION
    kind = RAY_JOB_KIND
    unit_suffix = UNIT_SUFFIX_RAY
    leader_roles = (HEAD,)
    pod_labels = RAY_POD_LABELS

    def roles(self, job: Job) -> list[Role]:
        where = self.meta(job).describe()
        spec = section(job, "spec", where, required=True)
        return cluster_roles(section(spec, "rayClusterSpec", f"{where}: spec", required=True),
                             f"{where}: spec.rayClusterSpec")

    def status(self, job: Job) -> JobState:
        status = section(job, "status", self.meta(job).describe())
        job_status, deployment = status.get("jobStatus"), status.get("jobDeploymentStatus")
        if job_status == RAY_JOB_STATUS_SUCCEEDED:
            return JobState.SUCCEEDED
        if job_status == RAY_JOB_STATUS_FAILED or deployment in (
            RAY_DEPLOYMENT_FAILED,
            RAY_DEPLOYMENT_VALIDATION_FAILED,
            RAY_DEPLOYMENT_COMPLETE,  # complete without success: stopped
        ):
            return JobState.FAILED
        if job_status == RAY_JOB_STATUS_RUNNING or deployment == RAY_DEPLOYMENT_RUNNING:
            return JobState.RUNNING
        return JobState.PENDING

    def children(self, job: Job) -> dict[str, tuple[str, ResourceList | None]]:
        """KubeRay's RayCluster, named in status.rayClusterName (written before it is made), no
        bigger than the RayJob; its submitter Job, named as the RayJob, no bigger than KubeRay's
        default submitter (a bigger submitterPodTemplate's Job is queued on its own)."""
        made: dict[str, tuple[str, ResourceList | None]] = {
            BATCH_JOB_KIND: (self.meta(job).name, parse_resource_list(RAY_SUBMITTER_REQUESTS))}
        status = job.get("status")
        cluster = status.get("rayClusterName") if isinstance(status, Mapping) else None
        if isinstance(cluster, str) and cluster:
            made[RAY_CLUSTER_KIND] = (cluster, None)
        return made

    def pod_selector(self, job: Job) -> dict[str, str]:
        """The pods of its Ray cluster, named in status.rayClusterName (KubeRay writes it before
        it makes the cluster, and empties it when it deletes the cluster on suspension); before
        that, a selector no pod matches (an empty value: not the RayJob's name, which its
        submitter Job bears)."""
        cluster = section(job, "status", self.meta(job).describe()).get("rayClusterName")
        return {LABEL_RAY_CLUSTER: cluster if isinstance(cluster, str) else ""}


def cluster_roles(cluster: Mapping[str, Any], where: str) -> list[Role]:
    """A Ray cluster's spec (a RayCluster's, a RayJob's rayClusterSpec): its head, then each
    worker group, ``replicas`` (default 1) times ``numOfHosts`` pods."""
    head = section(cluster, "headGroupSpec", where, required=True)
    roles = [Role(HEAD, 1, template(head.get("template"), f"{where}.headGroupSpec"))]
    groups = cluster.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise InvalidObject(f"{where}.workerGroupSpecs must be a list")
    for index, group in enumerate(groups):
        at = f"{where}.workerGroupSpecs[{index}]"
        if not isinstance(group, Mapping):
            raise InvalidObject(f"{at} must be a mapping")
        name = group.get("groupName")
        if not isinstance(name, str) or not name:
            raise InvalidObject(f"{at}: groupName is missing or not a string")
        hosts = replicas(group.get("numOfHosts"), f"{at}: numOfHosts")
        count = replicas(group.get("replicas"), at) * hosts
        roles.append(Role(name, count, template(group.get("template"), at)))
    return roles


def ray_job_crd() -> Manifest:
    """KubeRay's RayJob CRD, printing its jobs as KubeRay's does (its schema left open)."""
    from koordqueue.api.crds import OPERATOR_SCHEMA, age, column, crd  # pydantic: only when CRDs are wanted

    columns = [column("Job Status", ".status.jobStatus"), column("Deployment Status", ".status.jobDeploymentStatus"),
               age()]
    group, _, version = RAY_API_VERSION.rpartition("/")
    return crd(group, version, RAY_JOB_KIND, RAY_PLURAL, OPERATOR_SCHEMA, columns)


KIND = JobKind(RayJobAdapter(), RAY_PLURAL, "ray", crd=ray_job_crd)
