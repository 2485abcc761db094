"""The simulated job operators: the Kubeflow training operator and the batch Job controller.

Each job is reconciled level-triggered from the informers' caches, as the real
controllers do: while the job is suspended (`scheduling.x-k8s.io/suspend: "true"`, or
the kind's own field) it has no pods, and a running job suspended again loses them;
otherwise its pods are created, and its status (conditions, replica counts, start and
completion times) is computed from its pods and written only when it changed.

KubeRay's RayJobs get a Ray cluster: status.rayClusterName `<job>-<5 characters>`, a
head pod and the worker groups' pods (`<cluster>-head-…`, `<cluster>-<group>-worker-…`) with
the labels KubeRay v1.5.0 writes on a Ray cluster's pods (ray.io/cluster, node-type, group,
is-ray-node: none names the RayJob, which KubeRay names on the RayCluster object alone),
owned by the RayJob itself (no RayCluster object). jobDeploymentStatus goes Initializing, Running once every pod runs, then Complete
(jobStatus SUCCEEDED) or Failed (FAILED) when the head pod ends (the simulation annotations
go to the head only: the job runs there, workers serve until the cluster is taken down);
Suspended while suspended, its pods gone. With shutdownAfterJobFinishes the cluster's pods
are deleted at the end.

Kubeflow jobs (PyTorchJob, TFJob, MPIJob) get the pods and headless Services the training
operator v1.9.2 makes (training.py: its labels, env, ports and init containers, no
annotation of its own), and conditions Created, Running, Succeeded, Failed, Suspended
worded as the operator words them; a pod deleted (suspended, cleaned up, scaled down)
takes its Service along, as the operator's DeletePodsAndServices does. Batch Jobs get
`parallelism` pods at a time until `completions` succeeded, or Failed past `backoffLimit`.
The Spark operator's SparkApplications, Argo's Workflows and KubeRay's RayClusters are run
by one loop (`_sync_app`): no pods while suspended (the annotation, or spec.suspend); else each
role's pods, named and labelled as their operator names and labels them (`<app>-driver` and
`<app>-exec-<n>` with spark-app-name and spark-role; `<workflow>-…` with
workflows.argoproj.io/workflow, one pod asking for the min-resources annotation, as a one-step
workflow; `<cluster>-head-…` and `<cluster>-<group>-worker-…` with ray.io/cluster). The
simulation annotations go to the leader (the driver, the workflow's pod): the application
ends when it ends, the other pods deleted. A RayCluster's pods get none: it serves until
deleted. Status as each writes it: applicationState.state SUBMITTED, RUNNING, COMPLETED,
FAILED (SUSPENDED while suspended); phase Running, Succeeded, Failed; state ready (suspended while suspended). An MPIJob
in the mpi-operator's v1alpha1 form (spec.replicas + spec.template) runs there too:
`<job>-worker-<i>` and a `<job>-launcher` without GPUs (labels mpi_job_name, mpi_role_type),
status.launcherStatus Active, Succeeded or Failed as the launcher runs and ends.
Pods are owned by their job (controller reference, so the garbage collector removes them
with it) and carry the job's simulation annotations (`koord-queue.sim/duration`,
`koord-queue.sim/fail`). A training job's and a RayJob's pods also get Koordinator's gang
annotations (the real operators write none: the simulation's own), so the simulated
scheduler binds them all together or none; a batch Job's pods are placed one by one.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.jobs import KINDS
from koordqueue.jobs.argo import WorkflowAdapter
from koordqueue.jobs.base import JobAdapter, JobState, Role
from koordqueue.jobs.kubeflow import KubeflowAdapter
from koordqueue.jobs.mpijob import MPIJobAdapter, v1alpha1_form
from koordqueue.jobs.raycluster import RayClusterAdapter
from koordqueue.jobs.rayjob import RayJobAdapter
from koordqueue.jobs.spark import SparkApplicationAdapter
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import AlreadyExists, NotFound
from koordqueue.kube.events import EventRecorder
from koordqueue.kube.informer import Informer, key_of
from koordqueue.kube.workqueue import WorkQueue
from koordqueue.simcluster.background import Background
from koordqueue.simcluster.kubelet import PODS, now_rfc3339
from koordqueue.simcluster.training import (
    TEMPLATE_RESTART_POLICY_MESSAGE,
    Replica,
    TooManyPods,
    replicas_of,
    validate,
)

log = logging.getLogger(__name__)

Object = dict[str, Any]
Item = tuple[str, str]  # (kind, namespace/name)
EXPECTATION_TTL = 30.0  # seconds after which creations never seen are no longer waited for
SIM_ANNOTATIONS = (c.ANNOTATION_SIM_DURATION, c.ANNOTATION_SIM_FAIL)
SERVICES = Resource("", c.CORE_API_VERSION, c.SERVICES_PLURAL)


@dataclass(frozen=True, slots=True)
class SimKind:
    """A job kind as the simulated operators run it."""

    kind: str
    resource: Resource
    adapter: JobAdapter

    @property
    def kubeflow(self) -> bool:
        return isinstance(self.adapter, KubeflowAdapter)

    @property
    def ray(self) -> bool:
        return isinstance(self.adapter, RayJobAdapter)

    @property
    def app(self) -> bool:
        """Run by `_sync_app`: a SparkApplication, a Workflow or a RayCluster."""
        return isinstance(self.adapter, SparkApplicationAdapter | WorkflowAdapter | RayClusterAdapter)


def job_kinds() -> list[SimKind]:
    """The kinds the simulated operators run: those registered as simulated (jobs/__init__.py):
    the training operator's, KubeRay's RayJob and batch Job."""
    return [SimKind(k.kind, Resource.of(k.api_version, k.plural), k.adapter) for k in KINDS if k.simulated]


# --- conditions, as the operators set them -------------------------------------------

def find_condition(conditions: list[Object], kind: str) -> Object | None:
    return next((cond for cond in conditions if cond.get("type") == kind), None)


def condition_is_true(conditions: list[Object], kind: str) -> bool:
    found = find_condition(conditions, kind)
    return found is not None and found.get("status") == c.CONDITION_TRUE


def set_kubeflow_condition(conditions: list[Object], kind: str, status: str, reason: str, message: str,
                           now: str) -> list[Object]:
    """The training operator's setCondition: nothing changes once Failed; an unchanged
    (status, reason) is left alone; the updated condition goes last; Running and
    Restarting exclude each other; Succeeded or Failed turn Running to False."""
    if condition_is_true(conditions, c.KUBEFLOW_CONDITION_FAILED):
        return conditions
    current = find_condition(conditions, kind)
    if current is not None and current.get("status") == status and current.get("reason") == reason:
        return conditions
    transition = current.get("lastTransitionTime", now) if current is not None and current.get("status") == status \
        else now
    exclusive = {c.KUBEFLOW_CONDITION_RUNNING: c.KUBEFLOW_CONDITION_RESTARTING,
                 c.KUBEFLOW_CONDITION_RESTARTING: c.KUBEFLOW_CONDITION_RUNNING}
    out = []
    for cond in conditions:
        if cond.get("type") in (kind, exclusive.get(kind)):
            continue
        if kind in (c.KUBEFLOW_CONDITION_SUCCEEDED, c.KUBEFLOW_CONDITION_FAILED) \
                and cond.get("type") == c.KUBEFLOW_CONDITION_RUNNING:
            cond = {**cond, "status": c.CONDITION_FALSE}
        out.append(cond)
    out.append({"type": kind, "status": status, "reason": reason, "message": message,
                "lastUpdateTime": now, "lastTransitionTime": transition})
    return out


def set_batch_condition(conditions: list[Object], kind: str, status: str, reason: str, message: str,
                        now: str) -> list[Object]:
    """The Job controller's: a condition is updated in place, its transition time kept if the status is."""
    current = find_condition(conditions, kind)
    if current is not None and current.get("status") == status and current.get("reason") == reason:
        return conditions
    transition = current.get("lastTransitionTime", now) if current is not None and current.get("status") == status \
        else now
    new = {"type": kind, "status": status, "lastProbeTime": now, "lastTransitionTime": transition,
           "reason": reason, "message": message}
    if current is None:
        return [*conditions, new]
    return [new if cond is current else cond for cond in conditions]


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


class SimOperator:
    def __init__(
        self,
        client: KubeClient,
        pods: Informer[Object],
        jobs: dict[str, tuple[SimKind, Informer[Object]]],
        background: Background,
        record_events: bool = True,
        workers: int = 8,
        services: Informer[Object] | None = None,
    ) -> None:
        """`jobs`: kind -> (kind, informer of its jobs), for the kinds whose API is served;
        `services`: an informer of Services (None: the training operator makes none)."""
        self.client = client
        self.pods = pods
        self.services = services
        self.jobs = jobs
        self.background = background
        # Events come from each kind's controller, as on a cluster: pytorchjob-controller, job-controller...
        self.recorders = {kind: EventRecorder(client, event_source(job_kind))
                          for kind, (job_kind, _) in jobs.items()} if record_events else {}
        self.workers = workers
        self.queue: WorkQueue[Item] = WorkQueue()
        self._pods_of: dict[Item, set[str]] = {}  # job -> keys of the pods it controls
        self._job_of_pod: dict[str, Item] = {}
        self._services_of: dict[Item, set[str]] = {}  # job -> keys of the Services it controls
        self._services_made: dict[Item, dict[str, float]] = {}  # job -> Services created, not yet seen: since
        # per (uid, generation) of the job: validated, and its pods once worked out (None until it runs)
        self._replicas: dict[Item, tuple[tuple[str, str], list[Replica] | None]] = {}
        self._expected: dict[Item, tuple[int, float]] = {}  # job -> (pods created, not yet seen; since)
        self._tasks: list[asyncio.Task[None]] = []
        pods.on_add(self._on_pod_added)
        pods.on_update(lambda _old, new: self._on_pod(new))
        pods.on_delete(self._on_pod_gone)
        if services is not None:
            services.on_add(self._on_service)
            services.on_update(lambda _old, new: self._on_service(new))
            services.on_delete(self._on_service_gone)
        for kind, (_, informer) in jobs.items():
            informer.on_add(functools.partial(self._on_job, kind))
            informer.on_update(functools.partial(self._on_job_update, kind))
            informer.on_delete(functools.partial(self._on_job_gone, kind))

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self.queue.serve(self.sync, "simulated operator"), name=f"simoperator-{i}")
                       for i in range(self.workers)]

    async def stop(self) -> None:
        self.queue.shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # --- informer handlers ------------------------------------------------------------

    def _job_item(self, pod: Mapping[str, Any]) -> Item | None:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") not in self.jobs:
            return None
        kind = self.jobs[str(ref["kind"])][0]
        if ref.get("apiVersion") != kind.resource.api_version:
            return None
        return kind.kind, f"{(pod.get('metadata') or {}).get('namespace', '')}/{ref.get('name', '')}"

    def _on_pod_added(self, pod: Object) -> None:
        item = self._job_item(pod)
        if item is not None and item in self._expected:
            count, since = self._expected[item]
            if count <= 1:
                del self._expected[item]
            else:
                self._expected[item] = (count - 1, since)
        self._on_pod(pod)

    def _on_pod(self, pod: Object) -> None:
        item = self._job_item(pod)
        if item is None:
            return
        key = key_of(pod)
        self._job_of_pod[key] = item
        self._pods_of.setdefault(item, set()).add(key)
        self.queue.add(item)

    def _on_pod_gone(self, pod: Object) -> None:
        key = key_of(pod)
        item = self._job_of_pod.pop(key, None)
        if item is None:
            return
        keys = self._pods_of.get(item)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._pods_of[item]
        self.queue.add(item)

    def _on_service(self, service: Object) -> None:
        """Services are only looked up (a job's are made and deleted with its pods): no sync."""
        item = self._job_item(service)
        if item is not None:
            self._services_of.setdefault(item, set()).add(key_of(service))
            made = self._services_made.get(item)
            if made is not None:
                made.pop(service["metadata"]["name"], None)

    def _on_service_gone(self, service: Object) -> None:
        item = self._job_item(service)
        self._services_made.get(item or ("", ""), {}).pop(service["metadata"]["name"], None)
        keys = self._services_of.get(item) if item is not None else None
        if item is not None and keys is not None:
            keys.discard(key_of(service))
            if not keys:
                del self._services_of[item]

    def _on_job(self, kind: str, job: Object) -> None:
        self.queue.add((kind, key_of(job)))

    def _on_job_update(self, kind: str, _old: Object, new: Object) -> None:
        self.queue.add((kind, key_of(new)))

    def _on_job_gone(self, kind: str, job: Object) -> None:
        item = (kind, key_of(job))
        self._expected.pop(item, None)  # its pods (and Services) go with it (garbage collector)
        self._services_made.pop(item, None)
        self._replicas.pop(item, None)

    # --- reconcile --------------------------------------------------------------------

    async def sync(self, item: Item) -> None:
        kind_name, key = item
        kind, informer = self.jobs[kind_name]
        job = informer.get(key)
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            return
        uid = job["metadata"].get("uid")
        pods = [pod for pod_key in sorted(self._pods_of.get(item, ()))
                if (pod := self.pods.get(pod_key)) is not None and (controller_of(pod) or {}).get("uid") == uid]
        if kind.app or isinstance(kind.adapter, MPIJobAdapter) and v1alpha1_form(job):
            await self._sync_app(item, kind, job, pods)
        elif kind.kubeflow:
            await self._sync_kubeflow(item, kind, job, pods)
        elif kind.ray:
            await self._sync_ray(item, kind, job, pods)
        else:
            await self._sync_batch(item, kind, job, pods)

    def _validate(self, item: Item, kind: SimKind, job: Object) -> None:
        """Refuse the job as the operator's webhook does (InvalidObject), once per spec."""
        version = self._version(job)
        cached = self._replicas.get(item)
        if cached is None or cached[0] != version:
            validate(kind.kind, job)
            self._replicas[item] = (version, None)

    def _replicas_of(self, item: Item, kind: SimKind, job: Object) -> list[Replica]:
        """What the training operator makes of the job, worked out again only when its spec changed."""
        version = self._version(job)
        cached = self._replicas.get(item)
        if cached is not None and cached[0] == version and cached[1] is not None:
            return cached[1]
        replicas = replicas_of(kind.kind, job)
        self._replicas[item] = (version, replicas)
        return replicas

    @staticmethod
    def _version(job: Object) -> tuple[str, str]:
        meta = job["metadata"]
        return str(meta.get("uid")), str(meta.get("generation") or meta.get("resourceVersion"))

    def _creations_in_flight(self, item: Item) -> bool:
        expected = self._expected.get(item)
        if expected is None:
            return False
        if time.monotonic() - expected[1] > EXPECTATION_TTL:
            del self._expected[item]
            return False
        return True

    # --- Kubeflow training jobs -------------------------------------------------------

    async def _sync_kubeflow(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
        adapter = kind.adapter
        meta = job["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        status: Object = copy.deepcopy(job.get("status") or {})
        old_status = copy.deepcopy(status)
        conditions: list[Object] = [cond for cond in status.get("conditions") or [] if isinstance(cond, dict)]
        now = now_rfc3339()

        def set_condition(kind_: str, state: str, reason: str, message: str) -> None:
            nonlocal conditions
            conditions = set_kubeflow_condition(conditions, kind_, state, f"{kind.kind}{reason}", message, now)

        if find_condition(conditions, c.KUBEFLOW_CONDITION_CREATED) is None:
            set_condition(c.KUBEFLOW_CONDITION_CREATED, c.CONDITION_TRUE, c.KUBEFLOW_REASON_CREATED,
                          f"{kind.kind} {namespace}/{name} is created.")
        try:
            roles = adapter.roles(job)
            suspended = adapter.is_suspended(job)
            self._validate(item, kind, job)  # the pods themselves are worked out only when it runs
        except InvalidObject as e:
            set_condition(c.KUBEFLOW_CONDITION_FAILED, c.CONDITION_TRUE, c.KUBEFLOW_REASON_FAILED_VALIDATION, str(e))
            status["conditions"] = conditions
            await self._write_status(kind, job, old_status, status)
            return
        selectors = {role.name: self._selector(kind, name, role) for role in roles}
        finished = condition_is_true(conditions, c.KUBEFLOW_CONDITION_SUCCEEDED) or condition_is_true(
            conditions, c.KUBEFLOW_CONDITION_FAILED)
        if finished:
            await self._clean_finished(item, kind, job, pods)
        elif suspended:
            await self._delete_pods_and_services(item, kind, job, [p for p in pods if not is_deleting(p)])
            pods = []
            message = f"{kind.kind} {name} is suspended."
            if condition_is_true(conditions, c.KUBEFLOW_CONDITION_RUNNING):
                set_condition(c.KUBEFLOW_CONDITION_RUNNING, c.CONDITION_FALSE, c.KUBEFLOW_REASON_SUSPENDED, message)
            if not condition_is_true(conditions, c.KUBEFLOW_CONDITION_SUSPENDED):
                set_condition(c.KUBEFLOW_CONDITION_SUSPENDED, c.CONDITION_TRUE, c.KUBEFLOW_REASON_SUSPENDED, message)
                self._event(job, c.EventType.NORMAL, f"{kind.kind}{c.KUBEFLOW_REASON_SUSPENDED}", message)
        else:
            if condition_is_true(conditions, c.KUBEFLOW_CONDITION_SUSPENDED):
                message = f"{kind.kind} {name} is resumed."
                set_condition(c.KUBEFLOW_CONDITION_SUSPENDED, c.CONDITION_FALSE, c.KUBEFLOW_REASON_RESUMED, message)
                status["startTime"] = now
                self._event(job, c.EventType.NORMAL, f"{kind.kind}{c.KUBEFLOW_REASON_RESUMED}", message)
            status.setdefault("startTime", now)
            try:
                replicas = self._replicas_of(item, kind, job)
            except TooManyPods as e:
                self._event(job, c.EventType.WARNING, c.EVENT_FAILED_CREATE_POD, str(e))
            else:
                await self._reconcile_kubeflow_pods(item, kind, job, replicas, pods)

        replica_statuses: Object = {}
        by_role: dict[str, list[Object]] = {}
        for pod in pods:
            rtype = (pod["metadata"].get("labels") or {}).get(c.LABEL_REPLICA_TYPE, "")
            by_role.setdefault(rtype, []).append(pod)
        counts: dict[str, dict[str, int]] = {}
        for role in roles:
            role_pods = by_role.get(role.name.lower(), [])
            count = {
                "active": sum(1 for p in role_pods if pod_phase(p) == c.POD_RUNNING and not is_deleting(p)),
                "succeeded": sum(1 for p in role_pods if pod_phase(p) == c.POD_SUCCEEDED),
                "failed": sum(1 for p in role_pods if pod_phase(p) == c.POD_FAILED and not is_deleting(p)),
            }
            if finished and condition_is_true(conditions, c.KUBEFLOW_CONDITION_SUCCEEDED):
                count["succeeded"] += count["active"]
                count["active"] = 0
            counts[role.name] = count
            replica_statuses[role.name] = {k: v for k, v in count.items() if v} | selectors[role.name]
        if not finished and not suspended:
            self._kubeflow_progress(kind, job, roles, counts, set_condition, status, now)
        status["conditions"] = conditions
        status["replicaStatuses"] = replica_statuses
        await self._write_status(kind, job, old_status, status)

    def _kubeflow_progress(self, kind: SimKind, job: Object, roles: list[Role], counts: dict[str, dict[str, int]],
                           set_condition: Any, status: Object, now: str) -> None:
        """Running, Succeeded or Failed from the replica counts, as the operator decides them."""
        meta = job["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        replicas = {role.name: role.replicas for role in roles}
        leaders = [role.name for role in roles if role.name in kind.adapter.leader_roles]
        judged = leaders or ([name for name in replicas if name.lower() == "worker"] or list(replicas))
        for role_name, count in counts.items():
            if count["failed"]:
                message = (f"{kind.kind} {where} has failed because {count['failed']} {role_name} "
                           "replica(s) failed.")
                set_condition(c.KUBEFLOW_CONDITION_FAILED, c.CONDITION_TRUE, c.KUBEFLOW_REASON_FAILED, message)
                status.setdefault("completionTime", now)
                self._event(job, c.EventType.NORMAL, f"{kind.kind}{c.KUBEFLOW_REASON_FAILED}", message)
                return
        if all(counts[name]["succeeded"] >= replicas[name] for name in judged):
            message = f"{kind.kind} {where} successfully completed."
            set_condition(c.KUBEFLOW_CONDITION_SUCCEEDED, c.CONDITION_TRUE, c.KUBEFLOW_REASON_SUCCEEDED, message)
            status.setdefault("completionTime", now)
            self._event(job, c.EventType.NORMAL, f"{kind.kind}{c.KUBEFLOW_REASON_SUCCEEDED}", message)
            return
        if any(counts[name]["active"] for name in judged):
            set_condition(c.KUBEFLOW_CONDITION_RUNNING, c.CONDITION_TRUE, c.KUBEFLOW_REASON_RUNNING,
                          f"{kind.kind} {where} is running.")

    def _selector(self, kind: SimKind, name: str, role: Role) -> Object:
        labels = {c.LABEL_JOB_NAME: name, c.LABEL_OPERATOR_NAME: operator_name(kind),
                  c.LABEL_REPLICA_TYPE: role.name.lower()}
        text = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        return {"labelSelector": {"matchLabels": labels}, "selector": text}

    async def _reconcile_kubeflow_pods(self, item: Item, kind: SimKind, job: Object, replicas: list[Replica],
                                       pods: list[Object]) -> None:
        """The operator's pods: create the missing, delete those it no longer wants; then the
        Services of the pods it wants (ReconcilePods, then ReconcileServices)."""
        wanted = {replica.name: replica for replica in replicas}
        existing = {pod["metadata"]["name"] for pod in pods}
        extra = [pod for pod in pods if pod["metadata"]["name"] not in wanted and not is_deleting(pod)]
        await self._delete_pods(kind, job, extra)
        if not self._creations_in_flight(item):
            missing = [replica for name, replica in wanted.items() if name not in existing]
            if missing:
                await self._create_pods(item, kind, job, [self._kubeflow_pod(kind, job, replica, len(replicas))
                                                          for replica in missing],
                                        [replica.created for replica in missing])
        await self._reconcile_services(item, kind, job, replicas)

    def _kubeflow_pod(self, kind: SimKind, job: Object, replica: Replica, gang_size: int) -> Object:
        pod = self._pod_from_template(job, replica.template, replica.labels, {}, gang_size, kind)
        pod["metadata"]["name"] = replica.name
        if replica.template_restart_policy:
            self._event(job, c.EventType.WARNING, replica.template_restart_policy,
                        TEMPLATE_RESTART_POLICY_MESSAGE)
        return pod

    async def _reconcile_services(self, item: Item, kind: SimKind, job: Object, replicas: list[Replica]) -> None:
        """A headless Service per replica that has one: the missing are created, those of no
        wanted replica deleted."""
        if self.services is None:
            return
        namespace = job["metadata"]["namespace"]
        wanted = {replica.name: replica.service for replica in replicas if replica.service is not None}
        have = {key.partition("/")[2] for key in self._services_of.get(item, ())}
        await asyncio.gather(*(self._delete_service(job, name) for name in sorted(have - set(wanted))))
        made = self._services_made.setdefault(item, {})
        now = time.monotonic()
        for name in [name for name, since in made.items() if now - since > EXPECTATION_TTL]:
            del made[name]  # never seen: look again
        owner = self._owner(kind, job)

        async def create(service: Object) -> None:
            body = {"apiVersion": c.CORE_API_VERSION, "kind": c.SERVICE_KIND, **copy.deepcopy(service)}
            body["metadata"]["ownerReferences"] = [owner]
            try:
                await self.client.create(SERVICES, body, namespace=namespace)
            except AlreadyExists:
                return  # made by an earlier sync its informer has not shown yet
            if f"{namespace}/{service['metadata']['name']}" not in self._services_of.get(item, ()):
                made[service["metadata"]["name"]] = time.monotonic()  # until its informer shows it
            self._event(job, c.EventType.NORMAL, c.EVENT_SUCCESSFUL_CREATE_SERVICE,
                        f"Created service: {service['metadata']['name']}")

        results = await asyncio.gather(*(create(service) for name, service in wanted.items()
                                         if name not in have and name not in made), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]

    async def _delete_service(self, job: Object, name: str) -> None:
        namespace = job["metadata"]["namespace"]
        try:
            await self.client.delete(SERVICES, name, namespace=namespace)
        except NotFound:
            return
        self._event(job, c.EventType.NORMAL, c.EVENT_SUCCESSFUL_DELETE_SERVICE, f"Deleted service: {name}")

    async def _clean_finished(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
        """runPolicy.cleanPodPolicy: None (the default) keeps every pod; Running removes those
        still running or pending; All removes all."""
        run_policy = (job.get("spec") or {}).get("runPolicy") or {}
        policy = run_policy.get("cleanPodPolicy") if isinstance(run_policy, Mapping) else None
        if policy == c.CLEAN_POD_POLICY_ALL:
            doomed = pods
        elif policy == c.CLEAN_POD_POLICY_RUNNING:
            doomed = [p for p in pods if pod_phase(p) in (c.POD_RUNNING, c.POD_PENDING)]
        else:
            doomed = []
        await self._delete_pods_and_services(item, kind, job, [p for p in doomed if not is_deleting(p)])

    async def _delete_pods_and_services(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
        """Each pod, and the Service of its name (the operator's DeletePodsAndServices)."""
        await self._delete_pods(kind, job, pods)
        have = {key.partition("/")[2] for key in self._services_of.get(item, ())} | set(
            self._services_made.pop(item, {}))
        await asyncio.gather(*(self._delete_service(job, p["metadata"]["name"]) for p in pods
                               if p["metadata"]["name"] in have))

    # --- KubeRay's RayJobs -------------------------------------------------------------

    async def _sync_ray(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
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
        cluster = status.get("rayClusterName") or f"{meta['name']}-{_suffix(str(meta.get('uid')))}"
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
                               "jobId": f"{meta['name']}-{_suffix(cluster)}"})
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

    # --- SparkApplications, Workflows, RayClusters ------------------------------------

    async def _sync_app(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
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

    # --- batch Jobs -------------------------------------------------------------------

    async def _sync_batch(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
        meta = job["metadata"]
        spec = job.get("spec") or {}
        status: Object = copy.deepcopy(job.get("status") or {})
        old_status = copy.deepcopy(status)
        conditions: list[Object] = [cond for cond in status.get("conditions") or [] if isinstance(cond, dict)]
        now = now_rfc3339()
        try:
            suspended = kind.adapter.is_suspended(job)
            parallelism = _count(spec, "parallelism", 1)
            completions = None if spec.get("completions") is None else _count(spec, "completions", 1)
            backoff_limit = _count(spec, "backoffLimit", 6)
        except (InvalidObject, ValueError) as e:  # kube-apiserver's validation would have refused it
            log.warning("simulated Job controller: %s/%s: %s", meta["namespace"], meta["name"], e)
            self._event(job, c.EventType.WARNING, c.KUBEFLOW_REASON_FAILED_VALIDATION, f"the Job is not run: {e}")
            return
        active = [p for p in pods if pod_phase(p) not in (c.POD_SUCCEEDED, c.POD_FAILED) and not is_deleting(p)]
        succeeded = sum(1 for p in pods if pod_phase(p) == c.POD_SUCCEEDED)
        failed = sum(1 for p in pods if pod_phase(p) == c.POD_FAILED)

        def set_condition(kind_: str, state: str, reason: str, message: str) -> None:
            nonlocal conditions
            conditions = set_batch_condition(conditions, kind_, state, reason, message, now)

        finished = condition_is_true(conditions, c.BATCH_CONDITION_COMPLETE) or condition_is_true(
            conditions, c.BATCH_CONDITION_FAILED)
        if finished:
            await self._delete_pods(kind, job, active)
            active = []
        elif suspended:
            await self._delete_pods(kind, job, active)
            active = []
            if not condition_is_true(conditions, c.BATCH_CONDITION_SUSPENDED):
                set_condition(c.BATCH_CONDITION_SUSPENDED, c.CONDITION_TRUE, c.BATCH_REASON_SUSPENDED, "Job suspended")
                status.pop("startTime", None)  # (kube-controller-manager 1.36+ clears it)
            met = succeeded >= completions if completions is not None else succeeded >= 1
            if met and succeeded and not condition_is_true(conditions, c.BATCH_CONDITION_SUCCESS_CRITERIA_MET):
                # Pods that succeeded before the suspension landed are counted, and the Job has
                # met its criteria; Complete waits for a resume (kube-apiserver refuses a
                # finished Job without startTime, which a suspended Job does not have).
                set_condition(c.BATCH_CONDITION_SUCCESS_CRITERIA_MET, c.CONDITION_TRUE, c.BATCH_REASON_COMPLETED,
                              "Reached expected number of succeeded pods")
        else:
            if condition_is_true(conditions, c.BATCH_CONDITION_SUSPENDED):
                set_condition(c.BATCH_CONDITION_SUSPENDED, c.CONDITION_FALSE, c.BATCH_REASON_RESUMED, "Job resumed")
                status["startTime"] = now
            status.setdefault("startTime", now)
            done = succeeded >= completions if completions is not None else succeeded >= 1 and not active
            done = done or condition_is_true(conditions, c.BATCH_CONDITION_SUCCESS_CRITERIA_MET)
            if failed > backoff_limit:
                await self._delete_pods(kind, job, active)
                active = []
                for condition in (c.BATCH_CONDITION_FAILURE_TARGET, c.BATCH_CONDITION_FAILED):
                    set_condition(condition, c.CONDITION_TRUE, c.BATCH_REASON_BACKOFF_LIMIT,
                                  "Job has reached the specified backoff limit")
            elif done:  # (its pods are gone at once here: both conditions together)
                for condition in (c.BATCH_CONDITION_SUCCESS_CRITERIA_MET, c.BATCH_CONDITION_COMPLETE):
                    set_condition(condition, c.CONDITION_TRUE, c.BATCH_REASON_COMPLETED,
                                  "Reached expected number of succeeded pods")
                status["completionTime"] = now
            elif completions is not None:
                want = min(parallelism, completions - succeeded)
                active = await self._scale_batch(item, kind, job, active, want)
            elif not succeeded:  # no completions: once one pod succeeded, the rest only finish
                active = await self._scale_batch(item, kind, job, active, parallelism)
        status["conditions"] = conditions
        for field_name, value in (("active", len(active)), ("succeeded", succeeded), ("failed", failed)):
            if value:
                status[field_name] = value
            else:
                status.pop(field_name, None)
        status["ready"] = sum(1 for p in active if pod_phase(p) == c.POD_RUNNING)
        status["terminating"] = 0
        status.setdefault("uncountedTerminatedPods", {})
        if not conditions:
            status.pop("conditions")
        await self._write_status(kind, job, old_status, status)

    async def _scale_batch(self, item: Item, kind: SimKind, job: Object, active: list[Object],
                           want: int) -> list[Object]:
        if len(active) > want:
            extra = sorted(active, key=lambda p: pod_phase(p) == c.POD_RUNNING)[: len(active) - want]
            await self._delete_pods(kind, job, extra)
            return [p for p in active if p not in extra]
        if len(active) < want and not self._creations_in_flight(item):
            template = (job.get("spec") or {}).get("template") or {}
            bodies = []
            for _ in range(want - len(active)):
                pod = self._pod_from_template(job, template, {}, {}, None, kind)
                pod["metadata"]["generateName"] = f"{job['metadata']['name']}-"
                bodies.append(pod)
            await self._create_pods(item, kind, job, bodies)
        return active

    # --- pods -------------------------------------------------------------------------

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
            meta = pod["metadata"]
            try:
                await self.client.delete(PODS, meta["name"], namespace=meta["namespace"],
                                         preconditions={"uid": meta["uid"]})
            except NotFound:
                return
            reason = c.EVENT_SUCCESSFUL_DELETE_POD if kind.kubeflow else c.EVENT_BATCH_SUCCESSFUL_DELETE
            self._event(job, c.EventType.NORMAL, reason, f"Deleted pod: {meta['name']}")

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


def operator_name(kind: SimKind) -> str:
    return f"{kind.kind.lower()}{c.OPERATOR_NAME_SUFFIX}"


def event_source(kind: SimKind) -> str:
    """The component named on a kind's events: the training operator's per-kind controllers,
    KubeRay's rayjob-controller, or kube-controller-manager's job-controller."""
    if kind.ray:
        return c.RAY_JOB_CONTROLLER
    if isinstance(kind.adapter, RayClusterAdapter):
        return c.RAY_CLUSTER_CONTROLLER
    if isinstance(kind.adapter, SparkApplicationAdapter):
        return c.SPARK_OPERATOR
    if isinstance(kind.adapter, WorkflowAdapter):
        return c.ARGO_CONTROLLER
    return operator_name(kind) if kind.kubeflow else c.BATCH_JOB_CONTROLLER


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


def ray_pod_labels(cluster: str, group: str) -> dict[str, str]:
    """The labels KubeRay puts on a Ray cluster's pods (common/pod.go labelPod): its cluster and
    group, never the RayJob it was made for (that is on the RayCluster object only)."""
    return {c.LABEL_RAY_CLUSTER: cluster, c.LABEL_RAY_NODE_TYPE: "head" if group == c.RAY_HEAD_GROUP else "worker",
            c.LABEL_RAY_GROUP: group, c.LABEL_RAY_IS_RAY_NODE: "yes", c.LABEL_CREATED_BY: c.RAY_OPERATOR}


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


def _suffix(seed: str) -> str:
    """Five name characters, the same for the same seed (a RayJob's uid): KubeRay draws them at
    random and keeps them in status, which a lost status write would lose here."""
    digest = hashlib.sha256(seed.encode()).digest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(alphabet[b % len(alphabet)] for b in digest[:5])


def _count(spec: Mapping[str, Any], field_name: str, default: int) -> int:
    value = spec.get(field_name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"spec.{field_name} must be a whole number >= 0, not {value!r}")
    return value
