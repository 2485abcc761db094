"""The Kubeflow training operator (v1.9.2), simulated: PyTorchJob, TFJob and MPIJob.

Its jobs get the pods and headless Services the operator makes (training.py: its labels, env,
ports and init containers, no annotation of its own), and conditions Created, Running,
Succeeded, Failed, Suspended worded as the operator words them; a pod deleted (suspended,
cleaned up, scaled down) takes its Service along, as the operator's DeletePodsAndServices does.
While suspended a job has no pods; a running job suspended again loses them. A job's pods
get Koordinator's gang annotations (the operator writes none: the simulation's own), so the
simulated scheduler binds them all together or none. (An MPIJob in the mpi-operator's
v1alpha1 form is run by applications.py.)
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Mapping
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.jobs.base import Role
from koordqueue.jobs.kubeflow import KubeflowAdapter
from koordqueue.kube.client import Resource
from koordqueue.kube.errors import AlreadyExists, NotFound
from koordqueue.kube.informer import Informer, key_of
from koordqueue.simcluster.jobloop import (
    EXPECTATION_TTL,
    Item,
    JobOperator,
    Object,
    Shared,
    SimKind,
    condition_is_true,
    find_condition,
    is_deleting,
    pod_phase,
)
from koordqueue.simcluster.kubelet import now_rfc3339
from koordqueue.simcluster.training import (
    TEMPLATE_RESTART_POLICY_MESSAGE,
    Replica,
    TooManyPods,
    replicas_of,
    validate,
)

SERVICES = Resource("", c.CORE_API_VERSION, c.SERVICES_PLURAL)


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



def operator_name(kind: SimKind) -> str:
    return f"{kind.kind.lower()}{c.OPERATOR_NAME_SUFFIX}"


class KubeflowOperator(JobOperator):
    def __init__(self, shared: Shared, services: Informer[Object] | None,
                 job_item: Callable[[Mapping[str, Any]], Item | None]) -> None:
        """`services`: an informer of Services (None: the operator makes none); `job_item`: the
        job (kind, key) that controls an object, if one of the loop's."""
        super().__init__(shared)
        self.services = services
        self._job_item = job_item
        self._services_of: dict[Item, set[str]] = {}  # job -> keys of the Services it controls
        self._services_made: dict[Item, dict[str, float]] = {}  # job -> Services created, not yet seen: since
        # per (uid, generation) of the job: validated, and its pods once worked out (None until it runs)
        self._replicas: dict[Item, tuple[tuple[str, str], list[Replica] | None]] = {}
        if services is not None:
            services.on_add(self._on_service)
            services.on_update(lambda _old, new: self._on_service(new))
            services.on_delete(self._on_service_gone)

    @staticmethod
    def handles(kind: SimKind) -> bool:
        return isinstance(kind.adapter, KubeflowAdapter)

    @staticmethod
    def event_source(kind: SimKind) -> str:
        return operator_name(kind)  # its per-kind controllers: pytorchjob-controller...

    def forget(self, item: Item) -> None:
        self._services_made.pop(item, None)
        self._replicas.pop(item, None)

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

    async def sync(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
        run_policy = (job.get("spec") or {}).get("runPolicy")
        manager = run_policy.get("managedBy") if isinstance(run_policy, dict) else None
        if manager and manager != c.TRAINING_OPERATOR_MANAGER:
            return  # another controller's (MultiKueue's): the operator leaves it alone, as the real one does
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
