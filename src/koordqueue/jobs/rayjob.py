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
from koordqueue.jobs.placement import template_patch

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
    role_patch_reads_job = True

    def roles(self, job: Job) -> list[Role]:
        where = self.meta(job).describe()
        spec = section(job, "spec", where, required=True)
        return cluster_roles(section(spec, "rayClusterSpec", f"{where}: spec", required=True),
                             f"{where}: spec.rayClusterSpec")

    def role_patch(self, changes: Mapping[str, Mapping[str, Any]], job: Job | None = None) -> dict[str, Any] | None:
        cluster = None
        if job is not None:
            where = self.meta(job).describe()
            cluster = section(section(job, "spec", where), "rayClusterSpec", f"{where}: spec")
        return {"spec": {"rayClusterSpec": cluster_patch(changes, cluster)}}

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


def cluster_patch(changes: Mapping[str, Mapping[str, Any]], cluster: Mapping[str, Any] | None) -> dict[str, Any]:
    """A Ray cluster spec's part of an admission's merge patch: the head's template, and the
    worker groups' (found by groupName). A merge patch writes a list whole, so the groups are
    ``cluster``'s (the job as it is) with the changes made on them; a change to a group it
    lacks (the job changed since it was read) is refused. Replicas are never changed: a
    Ray group is not elastic here (``cluster_roles``)."""
    out: dict[str, Any] = {}
    head = template_patch(changes.get(HEAD, {}))
    if head:
        out["headGroupSpec"] = {"template": head}
    workers = {name: template_patch(fields) for name, fields in changes.items() if name != HEAD}
    workers = {name: patch for name, patch in workers.items() if patch}
    if not workers:
        return out
    groups = (cluster or {}).get("workerGroupSpecs")
    if not isinstance(groups, list):
        raise InvalidObject(f"worker groups {', '.join(sorted(workers))} to pin, and no workerGroupSpecs read")
    written = []
    for group in groups:
        name = group.get("groupName") if isinstance(group, Mapping) else None
        patch = workers.pop(name, None) if isinstance(name, str) else None
        if patch is None:
            written.append(group)
            continue
        template = group.get("template")
        written.append({**group, "template": merged(template if isinstance(template, Mapping) else {}, patch)})
    if workers:
        raise InvalidObject(f"worker groups {', '.join(sorted(workers))} to pin are no longer in workerGroupSpecs")
    out["workerGroupSpecs"] = written
    return out


def merged(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``target`` with a JSON merge patch (RFC 7386) applied: what the API server will store."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            current = out.get(key)
            out[key] = merged(current if isinstance(current, Mapping) else {}, value)
        else:
            out[key] = value
    return out


def ray_job_crd() -> Manifest:
    """KubeRay's RayJob CRD, printing its jobs as KubeRay's does (its schema left open)."""
    from koordqueue.api.crds import OPERATOR_SCHEMA, age, column, crd  # pydantic: only when CRDs are wanted

    columns = [column("Job Status", ".status.jobStatus"), column("Deployment Status", ".status.jobDeploymentStatus"),
               age()]
    group, _, version = RAY_API_VERSION.rpartition("/")
    return crd(group, version, RAY_JOB_KIND, RAY_PLURAL, OPERATOR_SCHEMA, columns)


KIND = JobKind(RayJobAdapter(), RAY_PLURAL, "ray", crd=ray_job_crd)
