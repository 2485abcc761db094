"""The simulated scheduler and kubelet: bind pods to nodes with room, run them, end them.

Scheduling is by gang, as Koordinator's coscheduling does it: pods carrying the same
`gang.scheduling.koordinator.sh/name` (in one namespace) are bound all together or
not at all, once `min-available` of them exist; a gang that already has a pod bound
takes its later pods (replacements) as they come. Pods without the annotation are a
gang of one. Placement is first fit on the pods' requests (as `jobs/podrequest.py`
computes them) against each node's allocatable minus the pods it holds, among the nodes
the pod's rules let it on, as kube-scheduler's filters read them: spec.nodeSelector,
required node affinity, tolerations against the node's NoSchedule/NoExecute taints, and
cordoned (spec.unschedulable) nodes, which take only pods tolerating the cordon.

Pods with `spec.schedulingGates` wait until the gates are removed, as kube-scheduler
has them. Everything is driven by the pod and node informers: a pod that does not fit is marked
`PodScheduled=False/Unschedulable` and waits; a pod ending or going away, or a node
appearing, wakes the scheduler, which tries the waiting gangs again. Per pod, one
reconcile (`_sync`) binds it (the `pods/binding` subresource), marks it Running, and
ends it when the duration in `koord-queue.sim/duration` has passed since it started
(never when absent): `Succeeded` with exit code 0, or `Failed` with exit code 1 when
`koord-queue.sim/fail` is "true".
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.duration import parse_duration, parse_rfc3339
from koordqueue.api.meta import InvalidObject
from koordqueue.engine.model import PodSetInfo
from koordqueue.engine.nodefilter import rules_key
from koordqueue.jobs.placement import pod_set_info
from koordqueue.jobs.podrequest import pod_request
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import Conflict, NotFound
from koordqueue.kube.events import EventRecorder
from koordqueue.kube.informer import Informer, key_of
from koordqueue.kube.workqueue import WorkQueue
from koordqueue.simcluster.background import Background, serve, stop_serving
from koordqueue.simcluster.nodes import NodeBook, ready_node

log = logging.getLogger(__name__)

Object = dict[str, Any]
ResourceList = dict[str, int]
PODS = Resource("", c.CORE_API_VERSION, c.PODS_PLURAL)
TERMINAL = frozenset({c.POD_SUCCEEDED, c.POD_FAILED})


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def gang_of(pod: Mapping[str, Any]) -> tuple[str, int]:
    """(gang key, min-available): the Koordinator gang annotations, else the pod alone."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    name = annotations.get(c.ANNOTATION_GANG_NAME)
    if not isinstance(name, str) or not name:
        return f"pod:{key_of(dict(pod))}", 1
    try:
        minimum = max(int(annotations.get(c.ANNOTATION_GANG_MIN_AVAILABLE, "1")), 1)
    except (TypeError, ValueError):
        minimum = 1
    return f"gang:{meta.get('namespace', '')}/{name}", minimum


def request_of(pod: Mapping[str, Any]) -> ResourceList:
    """What the pod asks of a node; a pod whose resources cannot be read asks nothing (logged)."""
    try:
        return pod_request(pod, f"pod {key_of(dict(pod))}")
    except InvalidObject as e:
        log.warning("%s; placing it as if it asked for nothing", e)
        return {}


def needs_of(pod: Mapping[str, Any]) -> PodSetInfo:
    """What the pod asks of a node and which nodes its rules let it on; rules that cannot be
    read are left out (logged), as the request is."""
    request = request_of(pod)
    try:
        return pod_set_info("", 1, request, pod, None, f"pod {key_of(dict(pod))}")
    except InvalidObject as e:
        log.warning("%s; placing it as if it had no node rules", e)
        return PodSetInfo("", 1, request)


def is_terminal(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") in TERMINAL or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


@dataclass
class Gang:
    minimum: int
    seq: int  # arrival order: older gangs are tried first among equal priorities
    priority: int = 0
    pending: dict[str, tuple[Object, PodSetInfo]] = field(default_factory=dict)  # unbound pods and their needs
    bound: set[str] = field(default_factory=set)  # pods holding room (assumed or bound), not ended


@dataclass
class Started:
    uid: str
    at: float  # time.time() the pod started, exact (status.startTime has whole seconds)


class SimKubelet:
    def __init__(
        self,
        client: KubeClient,
        pods: Informer[Object],
        nodes: Informer[Object],
        background: Background,
        record_events: bool = True,
        workers: int = 8,
    ) -> None:
        self.client = client
        self.pods = pods
        self.nodes = nodes
        self.room = NodeBook()
        self.queue: WorkQueue[str] = WorkQueue()
        self.background = background
        self.recorder = EventRecorder(client, c.SCHEDULER_NAME) if record_events else None
        self.workers = workers
        self._gangs: dict[str, Gang] = {}
        self._gang_of_pod: dict[str, str] = {}
        self._assumed: dict[str, tuple[str, str]] = {}  # pod key -> (uid, node) chosen, binding not yet seen
        self._started: dict[str, Started] = {}
        self._unschedulable: dict[str, str] = {}  # pod key -> message it should show
        self._host_ips: dict[str, str] = {}
        self._seq = 0
        self._changed: set[str] = set()  # gangs with new pods since the last pass
        self._room_grew = True  # room freed since the last pass: every waiting gang may fit now
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        pods.on_add(self._on_pod)
        pods.on_update(lambda _old, new: self._on_pod(new))
        pods.on_delete(self._on_pod_gone)
        nodes.on_add(self._on_node)
        nodes.on_update(lambda _old, new: self._on_node(new))
        nodes.on_delete(self._on_node_gone)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._schedule_loop(), name="simkubelet-scheduler")]
        self._tasks += serve(self.queue, self._sync, "simulated kubelet", "simkubelet", self.workers)

    async def stop(self) -> None:
        await stop_serving(self.queue, self._tasks)
        self._tasks = []

    # --- informer handlers: bookkeeping only, never a request ---------------------------

    def _on_node(self, node: Object) -> None:
        name = node["metadata"]["name"]
        self.room.set_node(name, ready_node(node), str((node.get("spec") or {}).get("podCIDR") or ""))
        for address in (node.get("status") or {}).get("addresses") or []:
            if isinstance(address, Mapping) and address.get("type") == c.NODE_ADDRESS_INTERNAL_IP:
                self._host_ips[name] = str(address.get("address"))
        self._room_freed()

    def _on_node_gone(self, node: Object) -> None:
        self.room.set_node(node["metadata"]["name"], None)

    def _on_pod(self, pod: Object) -> None:
        key = key_of(pod)
        uid = str(pod["metadata"].get("uid", ""))
        if is_terminal(pod):
            self._forget(key, uid)
            return
        gang = self._gang(key, pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            self._assumed.pop(key, None)
            gang.pending.pop(key, None)
            gang.bound.add(key)
            held = self.room.placements.get(key)
            if held is None or held.uid != uid or held.node != node:
                self.room.hold(key, node, request_of(pod), uid)
            self.queue.add(key)
        elif key in self._assumed and self._assumed[key][0] == uid:
            return  # bound by us a moment ago; the binding is on its way
        elif (pod.get("spec") or {}).get("schedulingGates"):
            gang.pending.pop(key, None)  # not to be scheduled until its gates are removed
        else:
            known = gang.pending.get(key)
            new = known is None or known[0]["metadata"].get("uid") != uid
            gang.pending[key] = (pod, needs_of(pod) if new or known is None else known[1])
            if new:  # a pod's own status writes change nothing for placement
                self._changed.add(self._gang_of_pod[key])
                self._wake.set()

    def _on_pod_gone(self, pod: Object) -> None:
        self._forget(key_of(pod), str(pod["metadata"].get("uid", "")))

    def _gang(self, key: str, pod: Object) -> Gang:
        gang_key, minimum = gang_of(pod)
        previous = self._gang_of_pod.get(key)
        if previous is not None and previous != gang_key:
            self._leave_gang(key)
        self._gang_of_pod[key] = gang_key
        gang = self._gangs.get(gang_key)
        if gang is None:
            self._seq += 1
            gang = self._gangs[gang_key] = Gang(minimum, self._seq)
        priority = (pod.get("spec") or {}).get("priority")
        gang.priority = priority if isinstance(priority, int) else 0
        if not gang.bound:  # a new round takes the size its latest pods ask for
            gang.minimum = minimum
        return gang

    def _leave_gang(self, key: str) -> None:
        gang_key = self._gang_of_pod.pop(key, None)
        gang = self._gangs.get(gang_key or "")
        if gang is not None:
            gang.pending.pop(key, None)
            gang.bound.discard(key)
            if not gang.pending and not gang.bound:
                del self._gangs[gang_key or ""]
                self._changed.discard(gang_key or "")

    def _forget(self, key: str, uid: str) -> None:
        """The pod ended or went away: free its room and wake the scheduler."""
        assumed = self._assumed.get(key)
        if assumed is not None and assumed[0] == uid:
            del self._assumed[key]
        if self._started.get(key) is not None and self._started[key].uid == uid:
            del self._started[key]
        self._unschedulable.pop(key, None)
        self._leave_gang(key)
        if self.room.release(key, uid):
            self._room_freed()

    def _room_freed(self) -> None:
        self._room_grew = True
        self._wake.set()

    # --- scheduling -------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                self.schedule_pass()
            except Exception:
                log.exception("simulated scheduler pass failed")
            await asyncio.sleep(0)  # let the informers deliver a burst before the next pass

    def schedule_pass(self) -> None:
        """Place every waiting gang that fits, highest priority and oldest first.

        Only gangs that may fit now are tried: all of them after room was freed, else
        just those with new pods (nothing else changed for the others).
        """
        if self._room_grew:
            candidates = [g for g in self._gangs.values() if g.pending]
        else:
            candidates = [g for k in self._changed if (g := self._gangs.get(k)) is not None and g.pending]
        self._room_grew = False
        self._changed.clear()
        candidates.sort(key=lambda g: (-g.priority, g.seq))
        reasons: dict[tuple[object, ...], str] = {}  # why a pod fits nowhere, per request shape and rules
        for gang in candidates:
            if not gang.bound and len(gang.pending) < gang.minimum:
                continue  # the rest of the gang is not created yet
            pods = [(key, pod) for key, (pod, _) in gang.pending.items()]
            needs = [need for _, need in gang.pending.values()]
            nodes = self.room.place_gang(needs)
            if nodes is None:
                for (key, _), need in zip(pods, needs, strict=True):
                    kind = (_shape(need.request), rules_key(need))
                    message = reasons.get(kind)
                    if message is None:
                        message = reasons[kind] = self.room.why_not(need)
                    self._mark_unschedulable(key, message, len(pods))
                continue
            for (key, pod), node, need in zip(pods, nodes, needs, strict=True):
                uid = str(pod["metadata"].get("uid", ""))
                self.room.hold(key, node, need.request, uid)
                self._assumed[key] = (uid, node)
                self._unschedulable.pop(key, None)
                del gang.pending[key]
                gang.bound.add(key)
                self.queue.add(key)

    def _mark_unschedulable(self, key: str, message: str, gang_size: int) -> None:
        if gang_size > 1 and "gang" not in message:
            message = f"{message} The gang of {gang_size} pods waits until all of them fit."
        if self._unschedulable.get(key) != message:
            self._unschedulable[key] = message
            self.queue.add(key)

    # --- per-pod reconcile ------------------------------------------------------------

    async def _sync(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None or is_terminal(pod):
            return
        uid = str(pod["metadata"].get("uid", ""))
        node = (pod.get("spec") or {}).get("nodeName")
        if node and self.nodes.get(node) is None:
            return  # bound to a node no kubelet of ours runs
        if not node:
            assumed = self._assumed.get(key)
            if assumed is None or assumed[0] != uid:
                await self._write_unschedulable(key, pod)
                return
            node = assumed[1]
            if not await self._bind(key, pod, node):
                return
        phase = (pod.get("status") or {}).get("phase")
        started = self._started.get(key)
        if started is None or started.uid != uid:
            if phase == c.POD_RUNNING:  # started before we came up (a restart of the simulation)
                at = parse_rfc3339((pod.get("status") or {}).get("startTime")) or time.time()
                started = self._started[key] = Started(uid, at)
            else:
                started = await self._run(key, pod, node)
                if started is None:
                    return
        await self._end_when_due(key, pod, started)

    async def _bind(self, key: str, pod: Object, node: str) -> bool:
        """POST the pod's binding; on failure give back the room chosen for it."""
        meta = pod["metadata"]
        binding = {
            "apiVersion": c.CORE_API_VERSION, "kind": c.BINDING_KIND,
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
            "target": {"apiVersion": c.CORE_API_VERSION, "kind": c.NODE_KIND, "name": node},
        }
        try:
            await self.client.create(_binding_resource(meta["name"]), binding, namespace=meta["namespace"])
        except (NotFound, Conflict) as e:  # deleted meanwhile, or someone else bound it
            log.info("simulated scheduler: binding %s to %s: %s", key, node, e)
            self._assumed.pop(key, None)
            if self.room.release(key, str(meta.get("uid", ""))):
                self._room_freed()
            return False
        self._event(pod, c.EventType.NORMAL, c.EVENT_SCHEDULED,
                    f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}")
        return True

    async def _write_unschedulable(self, key: str, pod: Object) -> None:
        message = self._unschedulable.get(key)
        if message is None:
            return
        status = pod.get("status") or {}
        current = next((cond for cond in status.get("conditions") or []
                        if isinstance(cond, Mapping) and cond.get("type") == c.POD_CONDITION_SCHEDULED), None)
        if current is not None and current.get("status") == c.CONDITION_FALSE and current.get("message") == message:
            return
        condition = {"type": c.POD_CONDITION_SCHEDULED, "status": c.CONDITION_FALSE, "lastProbeTime": None,
                     "lastTransitionTime": now_rfc3339(), "reason": c.POD_REASON_UNSCHEDULABLE, "message": message}
        meta = pod["metadata"]
        await self._patch_status(meta, {"status": {"conditions": [condition]}})
        self._event(pod, c.EventType.WARNING, c.EVENT_FAILED_SCHEDULING, message)

    async def _run(self, key: str, pod: Object, node: str) -> Started | None:
        """Mark the bound pod Running, its containers started; the clock of its duration starts."""
        meta = pod["metadata"]
        started = Started(str(meta.get("uid", "")), time.time())
        now = now_rfc3339()
        spec = pod.get("spec") or {}
        pod_ip = self.room.next_pod_ip(node)
        host_ip = self._host_ips.get(node, "")
        status: Object = {
            "phase": c.POD_RUNNING,
            "conditions": [_condition(kind, now) for kind in (
                c.POD_CONDITION_INITIALIZED, c.POD_CONDITION_READY, c.POD_CONDITION_CONTAINERS_READY,
                c.POD_CONDITION_SCHEDULED)],
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}] if host_ip else [],
            "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "qosClass": qos_class(spec),
            "containerStatuses": [_container_status(ct, meta, {"running": {"startedAt": now}}, True)
                                  for ct in _containers(spec, "containers")],
        }
        init = [_container_status(ct, meta, _terminated(0, now, now), False)
                for ct in _containers(spec, "initContainers")]
        if init:
            status["initContainerStatuses"] = init
        if not await self._patch_status(meta, {"status": status}):
            return None
        self._started[key] = started
        return started

    async def _end_when_due(self, key: str, pod: Object, started: Started) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        text = annotations.get(c.ANNOTATION_SIM_DURATION)
        if text is None:
            return  # runs until deleted
        try:
            duration = parse_duration(str(text))
        except ValueError as e:
            self._event(pod, c.EventType.WARNING, c.EVENT_INVALID_SIM_ANNOTATION,
                        f"annotation {c.ANNOTATION_SIM_DURATION}: {e}; the pod runs until it is deleted")
            return
        remaining = started.at + duration - time.time()
        if remaining > 0:
            self.queue.add_after(key, remaining)
            return
        failed = str(annotations.get(c.ANNOTATION_SIM_FAIL, "")).lower() == c.TRUE
        await self._end(pod, failed)

    async def _end(self, pod: Object, failed: bool) -> None:
        """The containers exit: 0 and Succeeded, or 1 and Failed."""
        meta = pod["metadata"]
        now = now_rfc3339()
        spec = pod.get("spec") or {}
        old = {cs.get("name"): cs for cs in (pod.get("status") or {}).get("containerStatuses") or []
               if isinstance(cs, Mapping)}
        statuses = []
        for container in _containers(spec, "containers"):
            running = ((old.get(container.get("name")) or {}).get("state") or {}).get("running") or {}
            state = _terminated(1 if failed else 0, str(running.get("startedAt") or now), now)
            statuses.append(_container_status(container, meta, state, False))
        reason = c.POD_REASON_FAILED if failed else c.POD_REASON_COMPLETED
        conditions = [_condition(c.POD_CONDITION_INITIALIZED, now)]
        conditions += [_condition(kind, now, c.CONDITION_FALSE, reason)
                       for kind in (c.POD_CONDITION_READY, c.POD_CONDITION_CONTAINERS_READY)]
        conditions.append(_condition(c.POD_CONDITION_SCHEDULED, now))
        status = {"phase": c.POD_FAILED if failed else c.POD_SUCCEEDED, "conditions": conditions,
                  "containerStatuses": statuses}
        await self._patch_status(meta, {"status": status})

    async def _patch_status(self, meta: Mapping[str, Any], patch: Object) -> bool:
        """Merge-patch the pod's status; False when the pod is gone."""
        try:
            await self.client.patch_status(PODS, meta["name"], patch, namespace=meta["namespace"])
        except NotFound:
            return False
        return True

    def _event(self, pod: Object, event_type: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.background.spawn(self.recorder.record(pod | {"kind": c.POD_KIND, "apiVersion": c.CORE_API_VERSION},
                                                       event_type, reason, message))


def _shape(request: ResourceList) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(request.items()))


def _binding_resource(pod_name: str) -> Resource:
    """`pods/<name>/binding` addressed as a collection, so KubeClient.create POSTs to it."""
    return Resource("", c.CORE_API_VERSION, f"{c.PODS_PLURAL}/{pod_name}/binding")


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = spec.get(key)
    return [ct for ct in value if isinstance(ct, Mapping)] if isinstance(value, list) else []


def _condition(kind: str, now: str, status: str = c.CONDITION_TRUE, reason: str | None = None) -> Object:
    condition: Object = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        condition["reason"] = reason
    return condition


def _terminated(exit_code: int, started_at: str, finished_at: str) -> Object:
    reason = c.CONTAINER_REASON_COMPLETED if exit_code == 0 else c.CONTAINER_REASON_ERROR
    return {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started_at,
                           "finishedAt": finished_at}}


def _container_status(container: Mapping[str, Any], meta: Mapping[str, Any], state: Object, ready: bool) -> Object:
    name = str(container.get("name", ""))
    image = str(container.get("image", ""))
    digest = hashlib.sha256(image.encode()).hexdigest()
    container_id = hashlib.sha256(f"{meta.get('uid')}/{name}".encode()).hexdigest()
    return {
        "name": name, "image": image, "imageID": f"{image.split(':')[0]}@sha256:{digest}",
        "containerID": f"containerd://{container_id}", "ready": ready, "started": "running" in state,
        "restartCount": 0, "state": state, "lastState": {},
    }


def qos_class(spec: Mapping[str, Any]) -> str:
    """Guaranteed when every container limits cpu and memory at its requests; BestEffort with none."""
    containers = _containers(spec, "containers") + _containers(spec, "initContainers")
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = {**limits, **(resources.get("requests") or {})}
        any_set = any_set or bool(limits) or bool(requests)
        for name in (c.CPU, c.MEMORY):
            if name not in limits or str(requests.get(name)) != str(limits.get(name)):
                guaranteed = False
    if not any_set:
        return c.POD_QOS_BEST_EFFORT
    return c.POD_QOS_GUARANTEED if guaranteed else c.POD_QOS_BURSTABLE
