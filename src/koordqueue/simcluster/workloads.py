"""The simulated Deployment, ReplicaSet and StatefulSet controllers (kube-controller-manager's),
enough for a Deployment to stand as it does on a cluster: its ReplicaSet, its pods, and its READY
count; and for a StatefulSet: its pods `<name>-<ordinal>`, one at a time (OrderedReady) or all
at once (Parallel), removed from the highest ordinal.

A Deployment gets one ReplicaSet per pod template, `<deployment>-<pod-template-hash>`,
with the Deployment's replica count; the ReplicaSets of earlier templates are scaled to 0
(all at once: the rollout strategy is not simulated). A ReplicaSet keeps that many pods,
`<replicaset>-<5 characters>`, owned by it (so the garbage collector removes them with it).
Statuses (replicas, ready, available, updated; the Deployment's Available and Progressing
conditions) are computed from the pods the simulated kubelet runs, and written only when
they change. Events are worded as the real controllers word them.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson

from koordqueue.api import constants as c
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import AlreadyExists, NotFound
from koordqueue.kube.events import EventRecorder
from koordqueue.kube.informer import Informer, key_of
from koordqueue.kube.workqueue import WorkQueue
from koordqueue.simcluster.background import Background, serve, stop_serving
from koordqueue.simcluster.jobloop import (
    controller_of,
    creations_in_flight,
    delete_pod,
    is_deleting,
    merge_patch,
    pod_phase,
)
from koordqueue.simcluster.kubelet import PODS, now_rfc3339

log = logging.getLogger(__name__)

Object = dict[str, Any]
Item = tuple[str, str]  # (kind, namespace/name)
DEPLOYMENTS = Resource("apps", "v1", c.DEPLOYMENTS_PLURAL)
REPLICA_SETS = Resource("apps", "v1", c.REPLICA_SETS_PLURAL)
STATEFUL_SETS = Resource("apps", "v1", c.STATEFUL_SETS_PLURAL)
EXPECTATION_TTL = 30.0  # seconds after which pod creations never seen are no longer waited for
_SAFE = "bcdfghjklmnpqrstvwxz2456789"  # the characters of generated names (rand.SafeEncodeString)


def pod_template_hash(template: Mapping[str, Any]) -> str:
    """The `pod-template-hash` of a template: FNV-1a (32 bits) of it, written in safe characters."""
    value = 0x811C9DC5
    for byte in orjson.dumps(template, option=orjson.OPT_SORT_KEYS):
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[int(digit) % len(_SAFE)] for digit in str(value))


def is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return pod_phase(pod) == c.POD_RUNNING and any(
        isinstance(cond, Mapping) and cond.get("type") == c.POD_CONDITION_READY
        and cond.get("status") == c.CONDITION_TRUE for cond in conditions)


def _replicas(obj: Mapping[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def _owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    return bool((controller_of(obj) or {}).get("uid") == owner["metadata"].get("uid"))


class SimWorkloads:
    def __init__(
        self,
        client: KubeClient,
        pods: Informer[Object],
        deployments: Informer[Object],
        replica_sets: Informer[Object],
        background: Background,
        record_events: bool = True,
        workers: int = 2,
        stateful_sets: Informer[Object] | None = None,
    ) -> None:
        self.client = client
        self.pods = pods
        self.deployments = deployments
        self.replica_sets = replica_sets
        self.stateful_sets = stateful_sets
        self.background = background
        self.recorders = {c.DEPLOYMENT_KIND: EventRecorder(client, c.DEPLOYMENT_CONTROLLER),
                          c.REPLICA_SET_KIND: EventRecorder(client, c.REPLICA_SET_CONTROLLER),
                          c.STATEFUL_SET_KIND: EventRecorder(client, c.STATEFUL_SET_CONTROLLER)} \
            if record_events else {}
        self.workers = workers
        self.queue: WorkQueue[Item] = WorkQueue()
        self._expected: dict[str, tuple[int, float]] = {}  # ReplicaSet -> (pods created, not yet seen; since)
        self._tasks: list[asyncio.Task[None]] = []
        pods.on_add(self._on_pod_added)
        pods.on_update(lambda _old, new: self._on_pod(new))
        pods.on_delete(self._on_pod)
        if stateful_sets is not None:
            for handler in (stateful_sets.on_add, stateful_sets.on_delete):
                handler(functools.partial(self._on, c.STATEFUL_SET_KIND))
            stateful_sets.on_update(lambda _old, new: self._on(c.STATEFUL_SET_KIND, new))
        replica_sets.on_add(self._on_replica_set)
        replica_sets.on_update(lambda _old, new: self._on_replica_set(new))
        replica_sets.on_delete(self._on_replica_set)
        for handler in (deployments.on_add, deployments.on_delete):
            handler(functools.partial(self._on, c.DEPLOYMENT_KIND))
        deployments.on_update(lambda _old, new: self._on(c.DEPLOYMENT_KIND, new))

    def start(self) -> None:
        self._tasks = serve(self.queue, self.sync, "simulated workload controllers", "simworkloads", self.workers)

    async def stop(self) -> None:
        await stop_serving(self.queue, self._tasks)
        self._tasks = []

    # --- informer handlers ------------------------------------------------------------

    def _on(self, kind: str, obj: Object) -> None:
        self.queue.add((kind, key_of(obj)))

    def _on_owned(self, obj: Object, owner_kind: str) -> None:
        ref = controller_of(obj)
        if ref is not None and ref.get("kind") == owner_kind and ref.get("apiVersion") == c.APPS_API_VERSION:
            self.queue.add((owner_kind, f"{obj['metadata'].get('namespace', '')}/{ref.get('name', '')}"))

    def _on_pod(self, pod: Object) -> None:
        self._on_owned(pod, c.REPLICA_SET_KIND)
        self._on_owned(pod, c.STATEFUL_SET_KIND)

    def _on_pod_added(self, pod: Object) -> None:
        ref = controller_of(pod)
        if ref is not None and ref.get("kind") == c.REPLICA_SET_KIND:
            owner = f"{pod['metadata'].get('namespace', '')}/{ref.get('name', '')}"
            count, since = self._expected.get(owner, (0, 0.0))
            if count > 1:
                self._expected[owner] = (count - 1, since)
            else:
                self._expected.pop(owner, None)
        self._on_pod(pod)

    def _on_replica_set(self, rs: Object) -> None:
        self._on(c.REPLICA_SET_KIND, rs)
        self._on_owned(rs, c.DEPLOYMENT_KIND)

    # --- reconcile --------------------------------------------------------------------

    async def sync(self, item: Item) -> None:
        kind, key = item
        if kind == c.DEPLOYMENT_KIND:
            deployment = self.deployments.get(key)
            if deployment is not None and not is_deleting(deployment):
                await self._sync_deployment(deployment)
        elif kind == c.STATEFUL_SET_KIND:
            sts = self.stateful_sets.get(key) if self.stateful_sets is not None else None
            if sts is not None and not is_deleting(sts):
                await self._sync_stateful_set(sts)
        else:
            rs = self.replica_sets.get(key)
            if rs is not None and not is_deleting(rs):
                await self._sync_replica_set(key, rs)

    def _owned(self, informer: Informer[Object], owner: Object) -> list[Object]:
        namespace = owner["metadata"].get("namespace")
        return sorted((obj for _, obj in informer.items()
                       if obj["metadata"].get("namespace") == namespace and _owned_by(obj, owner)),
                      key=lambda obj: obj["metadata"]["name"])

    async def _sync_deployment(self, deployment: Object) -> None:
        meta = deployment["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        template = copy.deepcopy((deployment.get("spec") or {}).get("template") or {})
        template_hash = pod_template_hash(template)
        wanted = _replicas(deployment)
        owned = self._owned(self.replica_sets, deployment)
        new = next((rs for rs in owned if (rs["metadata"].get("labels") or {}).get(
            c.LABEL_POD_TEMPLATE_HASH) == template_hash), None)
        for old in owned:
            if old is not new and _replicas(old) > 0:
                await self._scale(deployment, old, 0)
        if new is None:
            new = await self._create_replica_set(deployment, template, template_hash, wanted)
            if new is None:
                return
        elif _replicas(new) != wanted:
            await self._scale(deployment, new, wanted)
        owned = self._owned(self.replica_sets, deployment)
        totals = {field: sum(int((rs.get("status") or {}).get(field) or 0) for rs in owned)
                  for field in ("replicas", "readyReplicas", "availableReplicas")}
        updated = int(((self.replica_sets.get(key_of(new)) or new).get("status") or {}).get("replicas") or 0)
        status: Object = copy.deepcopy(deployment.get("status") or {})
        old_status = copy.deepcopy(status)
        status["observedGeneration"] = meta.get("generation", 1)
        for field, value in (("replicas", totals["replicas"]), ("updatedReplicas", updated),
                             ("readyReplicas", totals["readyReplicas"]),
                             ("availableReplicas", totals["availableReplicas"]),
                             ("unavailableReplicas", max(totals["replicas"] - totals["availableReplicas"], 0))):
            if value:
                status[field] = value
            else:
                status.pop(field, None)
        now = now_rfc3339()
        available = totals["availableReplicas"] >= wanted
        conditions = [cond for cond in status.get("conditions") or [] if isinstance(cond, dict)]
        conditions = _set_condition(conditions, c.DEPLOYMENT_CONDITION_AVAILABLE, available,
                                    "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                                    "Deployment has minimum availability." if available
                                    else "Deployment does not have minimum availability.", now)
        rs_name = new["metadata"]["name"]
        done = available and updated == wanted and totals["replicas"] == wanted
        conditions = _set_condition(conditions, c.DEPLOYMENT_CONDITION_PROGRESSING, True,
                                    "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                                    f'ReplicaSet "{rs_name}" has successfully progressed.' if done
                                    else f'ReplicaSet "{rs_name}" is progressing.', now)
        status["conditions"] = conditions
        if status != old_status:
            await self._write_status(DEPLOYMENTS, deployment, {"status": merge_patch(old_status, status)})
        log.debug("simulated deployment controller: %s/%s synced", namespace, name)

    async def _create_replica_set(self, deployment: Object, template: Object, template_hash: str,
                                  replicas: int) -> Object | None:
        meta = deployment["metadata"]
        name = f"{meta['name']}-{template_hash}"
        template.setdefault("metadata", {}).setdefault("labels", {})[c.LABEL_POD_TEMPLATE_HASH] = template_hash
        selector = copy.deepcopy((deployment.get("spec") or {}).get("selector") or {})
        selector.setdefault("matchLabels", {})[c.LABEL_POD_TEMPLATE_HASH] = template_hash
        revision = 1 + max((int((rs["metadata"].get("annotations") or {}).get(c.ANNOTATION_DEPLOYMENT_REVISION, 0))
                            for rs in self._owned(self.replica_sets, deployment)), default=0)
        body = {
            "apiVersion": c.APPS_API_VERSION, "kind": c.REPLICA_SET_KIND,
            "metadata": {
                "name": name, "namespace": meta["namespace"],
                "labels": dict(template["metadata"]["labels"]),
                "annotations": {c.ANNOTATION_DEPLOYMENT_REVISION: str(revision),
                                c.ANNOTATION_DESIRED_REPLICAS: str(replicas),
                                c.ANNOTATION_MAX_REPLICAS: str(replicas + 1)},
                "ownerReferences": [_owner(deployment)],
            },
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }
        try:
            created = await self.client.create(REPLICA_SETS, body, namespace=meta["namespace"])
        except NotFound:
            return None  # its namespace is going
        self._event(deployment, c.EVENT_SCALING_REPLICA_SET, f"Scaled up replica set {name} from 0 to {replicas}")
        return created

    async def _scale(self, deployment: Object, rs: Object, replicas: int) -> None:
        old = _replicas(rs)
        try:
            await self.client.patch(REPLICA_SETS, rs["metadata"]["name"], {"spec": {"replicas": replicas}},
                                    namespace=rs["metadata"]["namespace"])
        except NotFound:
            return
        direction = "up" if replicas > old else "down"
        self._event(deployment, c.EVENT_SCALING_REPLICA_SET,
                    f"Scaled {direction} replica set {rs['metadata']['name']} from {old} to {replicas}")

    async def _sync_replica_set(self, key: str, rs: Object) -> None:
        meta = rs["metadata"]
        pods = [pod for pod in self._owned(self.pods, rs) if not is_deleting(pod)
                and pod_phase(pod) not in (c.POD_SUCCEEDED, c.POD_FAILED)]
        wanted = _replicas(rs)
        if len(pods) > wanted:
            doomed = sorted(pods, key=is_ready)[: len(pods) - wanted]  # not ready ones first
            for pod in doomed:
                await self._delete_pod(rs, pod)
            pods = [pod for pod in pods if pod not in doomed]
        elif len(pods) < wanted and not self._creations_in_flight(key):
            missing = wanted - len(pods)
            self._expected[key] = (missing, time.monotonic())
            for _ in range(missing):
                await self._create_pod(rs)
        ready = sum(1 for pod in pods if is_ready(pod))
        status: Object = copy.deepcopy(rs.get("status") or {})
        old_status = copy.deepcopy(status)
        status.update({"replicas": len(pods), "observedGeneration": meta.get("generation", 1)})
        for field, value in (("fullyLabeledReplicas", len(pods)), ("readyReplicas", ready),
                             ("availableReplicas", ready)):
            if value:
                status[field] = value
            else:
                status.pop(field, None)
        if status != old_status:
            await self._write_status(REPLICA_SETS, rs, {"status": merge_patch(old_status, status)})

    async def _sync_stateful_set(self, sts: Object) -> None:
        """Pods `<name>-<ordinal>`: OrderedReady makes the next one only when every one before it
        is Running and Ready, and removes from the highest ordinal, one at a time; Parallel makes
        and removes all at once (kube-controller-manager's StatefulSet controller, without
        revisions or volume claims)."""
        meta, spec = sts["metadata"], sts.get("spec") or {}
        name = meta["name"]
        parallel = spec.get("podManagementPolicy") == "Parallel"
        wanted = _replicas(sts)
        pods = {pod["metadata"]["name"]: pod for pod in self._owned(self.pods, sts)}
        live = {n: p for n, p in pods.items() if not is_deleting(p)}
        for ordinal in range(wanted):
            pod_name = f"{name}-{ordinal}"
            if pod_name in pods:
                if not parallel and not is_ready(pods[pod_name]):
                    break
                continue
            await self._create_stateful_pod(sts, pod_name, ordinal)
            if not parallel:
                break
        extra = sorted((n for n in live if _ordinal(n, name) >= wanted), key=lambda n: -_ordinal(n, name))
        for pod_name in extra if parallel else extra[:1]:
            await self._delete_pod(sts, live[pod_name])
        ready = sum(1 for n, p in live.items() if _ordinal(n, name) < wanted and is_ready(p))
        replicas = sum(1 for n in live if _ordinal(n, name) < wanted)
        status: Object = {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready,
                          "currentReplicas": replicas, "updatedReplicas": replicas,
                          "observedGeneration": meta.get("generation", 1)}
        old = sts.get("status") or {}
        if any(old.get(k) != v for k, v in status.items()):
            await self._write_status(STATEFUL_SETS, sts, {"status": status})

    async def _create_stateful_pod(self, sts: Object, pod_name: str, ordinal: int) -> None:
        meta = sts["metadata"]
        template = (sts.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        labels = {**dict(tmeta.get("labels") or {}), c.LABEL_STATEFUL_SET_POD_NAME: pod_name,
                  c.LABEL_POD_INDEX: str(ordinal)}
        body: Object = {
            "apiVersion": c.CORE_API_VERSION, "kind": c.POD_KIND,
            "metadata": {"name": pod_name, "namespace": meta["namespace"], "labels": labels,
                         "ownerReferences": [_owner(sts)]},
            "spec": {**copy.deepcopy(template.get("spec") or {}), "hostname": pod_name},
        }
        if tmeta.get("annotations"):
            body["metadata"]["annotations"] = dict(tmeta["annotations"])
        try:
            await self.client.create(PODS, body, namespace=meta["namespace"])
        except (NotFound, AlreadyExists):
            return
        self._event(sts, c.EVENT_BATCH_SUCCESSFUL_CREATE,
                    f"create Pod {pod_name} in StatefulSet {meta['name']} successful")

    def _creations_in_flight(self, key: str) -> bool:
        return creations_in_flight(self._expected, key)

    async def _create_pod(self, rs: Object) -> None:
        meta = rs["metadata"]
        template = (rs.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        body: Object = {
            "apiVersion": c.CORE_API_VERSION, "kind": c.POD_KIND,
            "metadata": {"generateName": f"{meta['name']}-", "namespace": meta["namespace"],
                         "labels": dict(tmeta.get("labels") or {}), "ownerReferences": [_owner(rs)]},
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        if tmeta.get("annotations"):
            body["metadata"]["annotations"] = dict(tmeta["annotations"])
        try:
            pod = await self.client.create(PODS, body, namespace=meta["namespace"])
        except NotFound:
            return
        self._event(rs, c.EVENT_BATCH_SUCCESSFUL_CREATE, f"Created pod: {pod['metadata']['name']}")

    async def _delete_pod(self, rs: Object, pod: Object) -> None:
        if await delete_pod(self.client, pod):
            self._event(rs, c.EVENT_BATCH_SUCCESSFUL_DELETE, f"Deleted pod: {pod['metadata']['name']}")

    async def _write_status(self, resource: Resource, obj: Object, patch: Object) -> None:
        meta = obj["metadata"]
        try:
            await self.client.patch_status(resource, meta["name"], patch, namespace=meta["namespace"])
        except NotFound:
            pass

    def _event(self, obj: Object, reason: str, message: str) -> None:
        recorder = self.recorders.get(str(obj.get("kind")))
        if recorder is not None:
            self.background.spawn(recorder.record(obj, c.EventType.NORMAL, reason, message))


def _ordinal(pod_name: str, sts_name: str) -> int:
    tail = pod_name[len(sts_name) + 1:]
    return int(tail) if pod_name.startswith(f"{sts_name}-") and tail.isdigit() else -1


def _owner(obj: Object) -> Object:
    return {"apiVersion": c.APPS_API_VERSION, "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _set_condition(conditions: list[Object], kind: str, true: bool, reason: str, message: str,
                   now: str) -> list[Object]:
    """The Deployment controller's: the transition time kept while the status is."""
    status = c.CONDITION_TRUE if true else c.CONDITION_FALSE
    current = next((cond for cond in conditions if cond.get("type") == kind), None)
    if current is not None and (current.get("status"), current.get("reason"), current.get("message")) == (
            status, reason, message):
        return conditions
    transition = current.get("lastTransitionTime", now) if current is not None and \
        current.get("status") == status else now
    new = {"type": kind, "status": status, "lastUpdateTime": now, "lastTransitionTime": transition,
           "reason": reason, "message": message}
    return [cond for cond in conditions if cond.get("type") != kind] + [new]
