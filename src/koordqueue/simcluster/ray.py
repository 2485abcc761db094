"""KubeRay's RayJob controller (v1.5.0), simulated.

A RayJob gets a Ray cluster: status.rayClusterName `<job>-<5 characters>`, a head pod and the
worker groups' pods (`<cluster>-head-…`, `<cluster>-<group>-worker-…`) with the labels KubeRay
writes on a Ray cluster's pods (ray.io/cluster, node-type, group, is-ray-node: none names the
RayJob, which KubeRay names on the RayCluster object alone), owned by the RayJob itself (no
RayCluster object). jobDeploymentStatus goes Initializing, Running once every pod runs, then
Complete (jobStatus SUCCEEDED) or Failed (FAILED) when the head pod ends (the simulation
annotations go to the head only: the job runs there, workers serve until the cluster is taken
down); Suspended while suspended, its pods gone. With shutdownAfterJobFinishes the cluster's
pods are deleted at the end. The pods are one Koordinator gang.
"""

from __future__ import annotations

import copy
import hashlib

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.jobs.base import Role
from koordqueue.jobs.rayjob import RayJobAdapter
from koordqueue.simcluster.jobloop import (
    SIM_ANNOTATIONS,
    Item,
    JobOperator,
    Object,
    SimKind,
    is_deleting,
    pod_phase,
)
from koordqueue.simcluster.kubelet import now_rfc3339


class RayJobOperator(JobOperator):
    @staticmethod
    def handles(kind: SimKind) -> bool:
        return isinstance(kind.adapter, RayJobAdapter)

    @staticmethod
    def event_source(kind: SimKind) -> str:
        return c.RAY_JOB_CONTROLLER

    async def sync(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
        meta = job["metadata"]
        spec = job.get("spec") or {}
        status: Object = copy.deepcopy(job.get("status") or {})
        old_status = copy.deepcopy(status)
        now = now_rfc3339()
        active = [p for p in pods if not is_deleting(p)]
        try:
            roles = kind.adapter.roles(job)
            suspended = kind.adapter.is_suspended(job)
        except InvalidObject as e:
            status.update({"jobDeploymentStatus": c.RAY_DEPLOYMENT_VALIDATION_FAILED, "reason": "ValidationFailed",
                           "message": str(e)})
            await self._write_status(kind, job, old_status, status)
            return
        shutdown = spec.get("shutdownAfterJobFinishes") is True
        deployment = status.get("jobDeploymentStatus")
        if deployment in (c.RAY_DEPLOYMENT_COMPLETE, c.RAY_DEPLOYMENT_FAILED):
            if shutdown:
                await self._delete_pods(kind, job, active)
            return
        if suspended:
            await self._delete_pods(kind, job, active)
            if deployment != c.RAY_DEPLOYMENT_SUSPENDED:
                for field_name in ("rayClusterName", "jobId", "jobStatus", "startTime", "message"):
                    status.pop(field_name, None)
                status["jobDeploymentStatus"] = c.RAY_DEPLOYMENT_SUSPENDED
                self._event(job, c.EventType.NORMAL, c.RAY_DEPLOYMENT_SUSPENDED,
                            f"Deleted the Ray cluster of RayJob {meta['name']}: it is suspended")
            await self._write_status(kind, job, old_status, status)
            return
        cluster = status.get("rayClusterName") or f"{meta['name']}-{suffix(str(meta.get('uid')))}"
        if not status.get("rayClusterName") or deployment == c.RAY_DEPLOYMENT_SUSPENDED or not deployment:
            status.update({"rayClusterName": cluster, "jobDeploymentStatus": c.RAY_DEPLOYMENT_INITIALIZING,
                           "startTime": now})
        mine = [p for p in active if (p["metadata"].get("labels") or {}).get(c.LABEL_RAY_CLUSTER) == cluster]
        await self._delete_pods(kind, job, [p for p in active if p not in mine])  # an earlier cluster's
        head = next((p for p in mine if (p["metadata"].get("labels") or {}).get(c.LABEL_RAY_NODE_TYPE) == "head"),
                    None)
        if head is not None and pod_phase(head) in (c.POD_SUCCEEDED, c.POD_FAILED):
            succeeded = pod_phase(head) == c.POD_SUCCEEDED
            status.update({
                "jobStatus": c.RAY_JOB_STATUS_SUCCEEDED if succeeded else c.RAY_JOB_STATUS_FAILED,
                "jobDeploymentStatus": c.RAY_DEPLOYMENT_COMPLETE if succeeded else c.RAY_DEPLOYMENT_FAILED,
                "endTime": now,
                "message": "Job finished successfully." if succeeded else "Job failed.",
            })
            self._event(job, c.EventType.NORMAL if succeeded else c.EventType.WARNING,
                        c.RAY_DEPLOYMENT_COMPLETE if succeeded else c.RAY_DEPLOYMENT_FAILED,
                        f"RayJob {meta['name']} {'succeeded' if succeeded else 'failed'}")
            if shutdown:
                await self._delete_pods(kind, job, mine)
            await self._write_status(kind, job, old_status, status)
            return
        live = [p for p in mine if pod_phase(p) not in (c.POD_SUCCEEDED, c.POD_FAILED)]
        await self._reconcile_ray_pods(item, kind, job, roles, cluster, live)
        wanted = sum(role.replicas for role in roles)
        if len(live) == wanted and all(pod_phase(p) == c.POD_RUNNING for p in live):
            if status.get("jobDeploymentStatus") != c.RAY_DEPLOYMENT_RUNNING:
                status.update({"jobDeploymentStatus": c.RAY_DEPLOYMENT_RUNNING, "jobStatus": c.RAY_JOB_STATUS_RUNNING,
                               "jobId": f"{meta['name']}-{suffix(cluster)}"})
                self._event(job, c.EventType.NORMAL, c.RAY_DEPLOYMENT_RUNNING,
                            f"Submitted the job of RayJob {meta['name']} to its Ray cluster {cluster}")
        await self._write_status(kind, job, old_status, status)

    async def _reconcile_ray_pods(self, item: Item, kind: SimKind, job: Object, roles: list[Role], cluster: str,
                                  live: list[Object]) -> None:
        """The head pod and each worker group's pods: missing ones created, extra ones deleted."""
        if self._creations_in_flight(item):
            return
        total = sum(role.replicas for role in roles)
        bodies: list[Object] = []
        for role in roles:
            head = role.name in kind.adapter.leader_roles
            group = c.RAY_HEAD_GROUP if head else role.name
            have = [p for p in live if (p["metadata"].get("labels") or {}).get(c.LABEL_RAY_GROUP) == group]
            await self._delete_pods(kind, job, have[role.replicas:])
            labels = ray_pod_labels(cluster, group)
            for _ in range(role.replicas - len(have)):
                pod = self._pod_from_template(job, role.template, labels, {}, total, kind)
                pod["metadata"]["generateName"] = f"{cluster}-head-" if head else f"{cluster}-{group}-worker-"
                if not head:  # the job runs on the head: workers serve until the cluster is taken down
                    for name in SIM_ANNOTATIONS:
                        pod["metadata"]["annotations"].pop(name, None)
                bodies.append(pod)
        if bodies:
            await self._create_pods(item, kind, job, bodies)


def ray_pod_labels(cluster: str, group: str) -> dict[str, str]:
    """The labels KubeRay puts on a Ray cluster's pods (common/pod.go labelPod): its cluster and
    group, never the RayJob it was made for (that is on the RayCluster object only)."""
    return {c.LABEL_RAY_CLUSTER: cluster, c.LABEL_RAY_NODE_TYPE: "head" if group == c.RAY_HEAD_GROUP else "worker",
            c.LABEL_RAY_GROUP: group, c.LABEL_RAY_IS_RAY_NODE: "yes", c.LABEL_CREATED_BY: c.RAY_OPERATOR}


def suffix(seed: str) -> str:
    """Five name characters, the same for the same seed (a RayJob's uid): KubeRay draws them at
    random and keeps them in status, which a lost status write would lose here."""
    digest = hashlib.sha256(seed.encode()).digest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(alphabet[b % len(alphabet)] for b in digest[:5])

