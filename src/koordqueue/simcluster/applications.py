"""The operators of the applications run by one loop: the Spark operator's SparkApplications,
Argo's Workflows, KubeRay's RayClusters, and the mpi-operator's MPIJobs in their v1alpha1 form.

No pods while suspended (the annotation, or spec.suspend); else each role's pods, named and
labelled as their operator names and labels them (`<app>-driver` and `<app>-exec-<n>` with
spark-app-name and spark-role; `<workflow>-…` with workflows.argoproj.io/workflow, one pod
asking for the min-resources annotation, as a one-step workflow; `<cluster>-head-…` and
`<cluster>-<group>-worker-…` with ray.io/cluster; `<job>-worker-<i>` and a `<job>-launcher`
without GPUs with mpi_job_name and mpi_role_type). The simulation annotations go to the
leader (the driver, the workflow's pod, the launcher): the application ends when it ends, the
other pods deleted. A RayCluster's pods get none: it serves until deleted. Status as each
writes it: applicationState.state SUBMITTED, RUNNING, COMPLETED, FAILED (SUSPENDED while
suspended); phase Running, Succeeded, Failed; state ready (suspended while suspended);
status.launcherStatus Active, Succeeded or Failed. An application's pods are one gang.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.jobs.argo import WorkflowAdapter
from koordqueue.jobs.base import JobState, Role
from koordqueue.jobs.mpijob import MPIJobAdapter, v1alpha1_form
from koordqueue.jobs.raycluster import RayClusterAdapter
from koordqueue.jobs.spark import SparkApplicationAdapter
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
from koordqueue.simcluster.ray import ray_pod_labels

log = logging.getLogger(__name__)


class ApplicationOperator(JobOperator):
    @staticmethod
    def handles(kind: SimKind) -> bool:
        return isinstance(kind.adapter, SparkApplicationAdapter | WorkflowAdapter | RayClusterAdapter)

    def runs(self, kind: SimKind, job: Object) -> bool:
        """Its kinds, and an MPIJob in the v1alpha1 form (whose kind is the training operator's)."""
        return self.handles(kind) or isinstance(kind.adapter, MPIJobAdapter) and v1alpha1_form(job)

    @staticmethod
    def event_source(kind: SimKind) -> str:
        if isinstance(kind.adapter, RayClusterAdapter):
            return c.RAY_CLUSTER_CONTROLLER
        if isinstance(kind.adapter, SparkApplicationAdapter):
            return c.SPARK_OPERATOR
        return c.ARGO_CONTROLLER

    async def sync(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
        meta = job["metadata"]
        status: Object = copy.deepcopy(job.get("status") or {})
        old_status = copy.deepcopy(status)
        active = [p for p in pods if not is_deleting(p)]
        try:
            roles = _app_roles(kind, job)
            suspended = kind.adapter.is_suspended(job)
            state = kind.adapter.status(job)
        except InvalidObject as e:  # the operator's own validation would refuse it
            log.warning("simulated %s: %s/%s: %s", kind.kind, meta["namespace"], meta["name"], e)
            self._event(job, c.EventType.WARNING, c.KUBEFLOW_REASON_FAILED_VALIDATION, f"not run: {e}")
            return
        if state.ended:
            await self._delete_pods(kind, job, [p for p in active if pod_phase(p) not in _ENDED])
            return
        if suspended:
            await self._delete_pods(kind, job, active)
            _app_status(kind, job, status, _SUSPENDED, active)
            await self._write_status(kind, job, old_status, status)
            return
        leaders = [r.name for r in roles if r.name in kind.adapter.leader_roles] or [r.name for r in roles]
        led = [p for p in active if _role_of(kind, p) in leaders]
        if led and all(pod_phase(p) in _ENDED for p in led) and not isinstance(kind.adapter, RayClusterAdapter):
            failed = any(pod_phase(p) == c.POD_FAILED for p in led)
            await self._delete_pods(kind, job, [p for p in active if pod_phase(p) not in _ENDED])
            _app_status(kind, job, status, JobState.FAILED if failed else JobState.SUCCEEDED, active)
            await self._write_status(kind, job, old_status, status)
            return
        live = [p for p in active if pod_phase(p) not in _ENDED]
        await self._reconcile_app_pods(item, kind, job, roles, leaders, live)
        wanted = sum(role.replicas for role in roles)
        running = len(live) == wanted and all(pod_phase(p) == c.POD_RUNNING for p in live)
        _app_status(kind, job, status, JobState.RUNNING if running else JobState.PENDING, live)
        await self._write_status(kind, job, old_status, status)

    async def _reconcile_app_pods(self, item: Item, kind: SimKind, job: Object, roles: list[Role],
                                  leaders: list[str], live: list[Object]) -> None:
        """Each role's pods: missing ones created, extra ones deleted; one gang."""
        if self._creations_in_flight(item):
            return
        total = sum(role.replicas for role in roles)
        name = job["metadata"]["name"]
        bodies: list[Object] = []
        for role in roles:
            have = [p for p in live if _role_of(kind, p) == role.name]
            await self._delete_pods(kind, job, have[role.replicas:])
            taken = {p["metadata"]["name"] for p in have}
            for index in range(role.replicas):
                if len(have) >= role.replicas:
                    break
                labels, pod_name = _app_pod(kind, name, role.name, index)
                if pod_name in taken:
                    continue
                pod = self._pod_from_template(job, role.template, labels, {}, total, kind)
                if pod_name.endswith("-"):
                    pod["metadata"]["generateName"] = pod_name
                else:
                    pod["metadata"]["name"] = pod_name
                if role.name not in leaders or isinstance(kind.adapter, RayClusterAdapter):
                    for annotation in SIM_ANNOTATIONS:  # they serve until the leader ends (a cluster: deleted)
                        pod["metadata"]["annotations"].pop(annotation, None)
                bodies.append(pod)
                have.append(pod)
        if bodies:
            await self._create_pods(item, kind, job, bodies)


_ENDED = (c.POD_SUCCEEDED, c.POD_FAILED)
_SUSPENDED = "suspended"
MPI_LAUNCHER = "Launcher"


def _app_roles(kind: SimKind, job: Object) -> list[Role]:
    """The roles the operator makes pods of: the adapter's, and a v1alpha1 MPIJob's launcher,
    made from its template without the GPUs (the mpi-operator gives the launcher none)."""
    roles = kind.adapter.roles(job)
    if not isinstance(kind.adapter, MPIJobAdapter):
        return roles
    launcher = copy.deepcopy(dict(roles[0].template))
    for container in (launcher.get("spec") or {}).get("containers") or ():
        for part in ((container.get("resources") or {}).get(key) or {} for key in ("requests", "limits")):
            part.pop(c.GPU, None)
    return [Role(MPI_LAUNCHER, 1, launcher), *roles]


def _role_of(kind: SimKind, pod: Mapping[str, Any]) -> str:
    """The role of one of an application's pods, from the labels its operator put on it."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if isinstance(kind.adapter, SparkApplicationAdapter):
        return str(labels.get(c.LABEL_SPARK_ROLE, ""))
    if isinstance(kind.adapter, RayClusterAdapter):
        group = str(labels.get(c.LABEL_RAY_GROUP, ""))
        return "head" if group == c.RAY_HEAD_GROUP else group
    if isinstance(kind.adapter, MPIJobAdapter):
        role = str(labels.get(c.LABEL_MPI_ROLE_V1ALPHA1, ""))
        return MPI_LAUNCHER if role == "launcher" else role
    return "default"  # a Workflow's one pod


def _app_pod(kind: SimKind, name: str, role: str, index: int) -> tuple[dict[str, str], str]:
    """The labels and the name (a generateName when it ends in "-") of a role's pod."""
    if isinstance(kind.adapter, SparkApplicationAdapter):
        labels = {c.LABEL_SPARK_APP_NAME: name, c.LABEL_SPARK_ROLE: role}
        return labels, f"{name}-driver" if role == c.SPARK_ROLE_DRIVER else f"{name}-exec-{index + 1}"
    if isinstance(kind.adapter, RayClusterAdapter):
        head = role == "head"
        group = c.RAY_HEAD_GROUP if head else role
        return ray_pod_labels(name, group), f"{name}-head-" if head else f"{name}-{group}-worker-"
    if isinstance(kind.adapter, MPIJobAdapter):
        rtype = "launcher" if role == MPI_LAUNCHER else role
        labels = {c.LABEL_MPI_JOB_NAME_V1ALPHA1: name, c.LABEL_MPI_ROLE_V1ALPHA1: rtype}
        return labels, f"{name}-launcher" if rtype == "launcher" else f"{name}-{rtype}-{index}"
    return {c.LABEL_ARGO_WORKFLOW: name}, f"{name}-"



def _app_status(kind: SimKind, job: Object, status: Object, state: JobState | str, pods: list[Object]) -> None:
    """Write, in `status`, where the application is, as its operator words it."""
    now = now_rfc3339()
    if isinstance(kind.adapter, SparkApplicationAdapter):
        if state == _SUSPENDED:  # as the operator suspends it: its pods gone, SUSPENDED
            for key in ("driverInfo", "executorState", "lastSubmissionAttemptTime"):
                status.pop(key, None)
            status["applicationState"] = {"state": c.SPARK_STATE_SUSPENDED}
            return
        words = {JobState.PENDING: c.SPARK_STATE_SUBMITTED, JobState.RUNNING: c.SPARK_STATE_RUNNING,
                 JobState.SUCCEEDED: c.SPARK_STATE_COMPLETED, JobState.FAILED: c.SPARK_STATE_FAILED}
        status["applicationState"] = {"state": words[JobState(state)]}
        status.setdefault("lastSubmissionAttemptTime", now)
        status["driverInfo"] = {"podName": f"{job['metadata']['name']}-driver"}
        if state in (JobState.SUCCEEDED, JobState.FAILED):
            status["terminationTime"] = now
    elif isinstance(kind.adapter, WorkflowAdapter):
        # Argo keeps a suspended workflow Running (the adapter reads spec.suspend).
        phases: dict[str, str] = {JobState.SUCCEEDED: c.ARGO_PHASE_SUCCEEDED, JobState.FAILED: c.ARGO_PHASE_FAILED}
        status["phase"] = phases.get(state, c.ARGO_PHASE_RUNNING)
        status.setdefault("startedAt", now)
        if state in (JobState.SUCCEEDED, JobState.FAILED):
            status["finishedAt"] = now
    elif isinstance(kind.adapter, MPIJobAdapter):  # the v1alpha1 form
        launcher: dict[str, str] = {JobState.RUNNING: c.MPI_LAUNCHER_ACTIVE, JobState.SUCCEEDED: c.MPI_LAUNCHER_SUCCEEDED,
                                    JobState.FAILED: c.MPI_LAUNCHER_FAILED}
        if state in launcher:
            status["launcherStatus"] = launcher[state]
        else:
            status.pop("launcherStatus", None)
        if state in (JobState.SUCCEEDED, JobState.FAILED):
            status["completionTime"] = now
    else:  # RayCluster
        workers = [p for p in pods if (p["metadata"].get("labels") or {}).get(c.LABEL_RAY_NODE_TYPE) == "worker"]
        ready = sum(1 for p in workers if pod_phase(p) == c.POD_RUNNING)
        desired = sum(r.replicas for r in kind.adapter.roles(job)) - 1
        status.update({"desiredWorkerReplicas": desired, "readyWorkerReplicas": ready,
                       "availableWorkerReplicas": ready})
        if state == _SUSPENDED:
            status.update({"state": c.RAY_CLUSTER_STATE_SUSPENDED, "readyWorkerReplicas": 0,
                           "availableWorkerReplicas": 0})
        elif state == JobState.RUNNING:
            status["state"] = c.RAY_CLUSTER_STATE_READY
        else:
            status.pop("state", None)
