"""Workloads queued by a scheduling gate: each pod group (controller/gating.py) stands as one
bare QueueUnit, admitted whole by the engine like any, and its pods' gates are removed once
that unit is Dequeued.

The pods are the source: a group's unit is made when its first gated pod is seen, and deleted
when its last pod has ended or is gone (a Deployment scaled down gives its quota back as its
pods go; a plain pod that finished, at once). The
unit names the pods as its owners, so that the garbage collector removes it too when the
controller is down. What is done, per group, each time its pods or its unit change:

- no unit and a pod still gated: the unit is made (its podSet: the group's size, one pod's
  template: node fit and gang as any unit's), in the Queue the pod names (Kueue's
  ``queue-name`` or our ``scheduling.x-k8s.io/queue``), charged to the quota its labels or
  namespace give, at the pod's priority;
- the unit holds quota (Dequeued, Running): the gates of its pods are removed, of as many as
  the group's size and each only if it asks (requests and DRA claims) no more than the pod the
  unit was admitted for; an ungated pod beyond that (a tenant's, let past the webhook) is deleted;
- the unit does not hold quota and a pod of it runs ungated (it was preempted, or a tenant got
  the gate off with the validating webhook down): that pod is deleted; its owner (ReplicaSet,
  StatefulSet) makes it again, gated, and it queues as a new group.

A Deployment or StatefulSet scaled up makes new gated pods: new groups, each queued on its own
(one unit per pod, as Kueue's Deployment integration has one Workload per pod), never growing an
admitted unit; scaled down, its pods' units go with them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.dra import PodClaims, UncountedClaim, missing_reason, pod_claims, template_claims
from koordqueue.api.meta import InvalidObject
from koordqueue.api.quantity import ResourceList
from koordqueue.controller import gating
from koordqueue.controller.resources import PODS, UNITS
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.views import UnitView
from koordqueue.jobs.podrequest import pod_request
from koordqueue.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from koordqueue.kube.events import ObjectRef
from koordqueue.kube.informer import Informer
from koordqueue.kube.workqueue import WorkQueue

log = logging.getLogger(__name__)

SELECTOR = f"{c.LABEL_GATED_POD}={c.TRUE}"
POD_SET = "main"
WORKERS = 8
# What of a pod's spec its unit's podSet keeps: what it asks for (its claims: what each of the
# group's pods may claim, charged as the first's), and where it may go.
_TEMPLATE_FIELDS = ("containers", "initContainers", "overhead", "resourceClaims", "nodeSelector", "affinity",
                    "tolerations", "priorityClassName")
_HOLDING = frozenset({c.Phase.DEQUEUED.value, c.Phase.RUNNING.value})


@dataclass(frozen=True, slots=True)
class GatedPod:
    """A pod the webhook gated (gated still or not), as its group needs it."""

    namespace: str
    name: str
    uid: str
    group: gating.Group
    gated: bool
    gates: tuple[str, ...]
    resource_version: str
    ended: bool  # Succeeded, Failed or being deleted: no longer of its group
    template: Mapping[str, Any]
    priority: int
    queue: str
    labels: tuple[tuple[str, str], ...]  # its quota's and preemptible, copied to its unit
    # DRA: the ResourceClaimTemplates and ResourceClaims it names (charged to its unit as a
    # job's are, controller/dra.py), or why they cannot be read (tenant input)
    claims: PodClaims = PodClaims()
    claims_invalid: str | None = None
    created: str = ""  # its creationTimestamp (RFC 3339: sorts as the time)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _project(obj: dict[str, Any]) -> GatedPod | None:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return None
    labels: dict[str, Any] = meta["labels"] if isinstance(meta.get("labels"), dict) else {}
    annotations: dict[str, Any] = meta["annotations"] if isinstance(meta.get("annotations"), dict) else {}
    phase = (obj.get("status") or {}).get("phase")
    priority = spec.get("priority")
    queue = annotations.get(c.ANNOTATION_QUEUE) or labels.get(c.LABEL_KUEUE_QUEUE_NAME) or ""
    key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
    try:
        claims, claims_invalid = pod_claims(spec, f"Pod {key}"), None
    except UncountedClaim as e:
        claims, claims_invalid = PodClaims(), str(e)
    kept = {k: labels[k] for k in (c.LABEL_QUOTA_NAME, c.LABEL_ASI_QUOTA_NAME, c.LABEL_PREEMPTIBLE)
            if isinstance(labels.get(k), str)}
    return GatedPod(
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
        group=gating.group_of(obj), gated=gating.gated(obj), gates=tuple(gating.gates(obj)),
        resource_version=str(meta.get("resourceVersion") or ""),
        ended=phase in (c.POD_SUCCEEDED, c.POD_FAILED) or bool(meta.get("deletionTimestamp")),
        template={"spec": {k: spec[k] for k in _TEMPLATE_FIELDS if k in spec}},
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        queue=str(queue), labels=tuple(sorted(kept.items())), claims=claims, claims_invalid=claims_invalid,
        created=str(meta.get("creationTimestamp") or ""))


def unit_manifest(pods: list[GatedPod]) -> dict[str, Any]:
    """The QueueUnit of a pod group (``pods``: those there are now, the first one's template)."""
    first = pods[0]
    group = first.group
    spec: dict[str, Any] = {
        "consumerRef": {"apiVersion": "v1", "kind": c.POD_KIND, "namespace": first.namespace,
                        "name": group.kueue_name or first.name},
        "priority": first.priority,
        "podSet": [{"name": POD_SET, "count": group.total, "template": first.template}],
    }
    if first.queue:
        spec["queue"] = first.queue
    return {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_UNIT_KIND,
            "metadata": {"name": group.unit, "namespace": first.namespace,
                         "labels": {**dict(first.labels), c.LABEL_POD_GROUP_UNIT: c.TRUE},
                         "ownerReferences": [{"apiVersion": "v1", "kind": c.POD_KIND, "name": p.name, "uid": p.uid}
                                             for p in pods[:100]]},
            "spec": spec}


def fits(pod: GatedPod, allowed: ResourceList | None) -> bool:
    """Whether the pod asks for no more of anything than its unit's pod was admitted with."""
    if allowed is None:
        return False
    try:
        asks = pod_request(pod.template, pod.key)
    except InvalidObject:
        return False
    return all(amount <= allowed.get(name, 0) for name, amount in asks.items())


def _template_claims(unit: UnitView) -> PodClaims:
    """The claims of the pod a group's unit was admitted for (its podSet's template keeps them)."""
    sets = unit.spec.get("podSet")
    template = sets[0].get("template") if isinstance(sets, list) and sets and isinstance(sets[0], Mapping) else None
    return template_claims(template, f"QueueUnit {unit.key}")  # (ours, from a pod whose claims were read)


def pod_ref(pod: GatedPod) -> ObjectRef:
    return ObjectRef("v1", c.POD_KIND, pod.name, pod.namespace, pod.uid)


class PodGroups(Part):
    """Run by the controller when workloads are queued by gate (config.workload_kinds)."""

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.pods: Informer[GatedPod] = Informer(self.client, PODS, project=_project, label_selector=SELECTOR)
        self.queue: WorkQueue[str] = WorkQueue()
        self._members: dict[str, set[str]] = {}  # unit key -> its pods' keys
        self._group_of: dict[str, str] = {}  # pod key -> its unit key

    def wire(self) -> None:
        self.pods.on_add(self._pod_changed)
        self.pods.on_update(lambda _old, new: self._pod_changed(new))
        self.pods.on_delete(self._pod_gone)
        self.informers.unit.on_add(self._unit_changed)
        self.informers.unit.on_update(lambda _old, new: self._unit_changed(new))
        self.informers.unit.on_delete(self._unit_changed)
        for dra in self.informers.claims.informers()[:2]:  # templates, claims: the groups waiting for them
            dra.on_add(self._claims_changed)
            dra.on_update(lambda _old, new: self._claims_changed(new))

    def _claims_changed(self, obj: Mapping[str, Any]) -> None:
        prefix = f"{obj.get('namespace')}/"
        for unit in [u for u in self._members if u.startswith(prefix)]:
            self.queue.add(unit)

    def _pod_changed(self, pod: GatedPod) -> None:
        unit = f"{pod.namespace}/{pod.group.unit}"
        before = self._group_of.get(pod.key)
        if before is not None and before != unit:
            self._leave(pod.key)
        self._group_of[pod.key] = unit
        self._members.setdefault(unit, set()).add(pod.key)
        self.queue.add(unit)

    def _pod_gone(self, pod: GatedPod) -> None:
        self._leave(pod.key)

    def _leave(self, key: str) -> None:
        unit = self._group_of.pop(key, None)
        if unit is None:
            return
        members = self._members.get(unit)
        if members is not None:
            members.discard(key)
            if not members:
                del self._members[unit]
        self.queue.add(unit)

    def _unit_changed(self, unit: UnitView) -> None:
        if dict(unit.labels).get(c.LABEL_POD_GROUP_UNIT) == c.TRUE:
            self.queue.add(unit.key)

    async def start(self) -> None:
        self.pods.start()
        await self.pods.wait_synced()

    async def sync(self, key: str) -> None:
        """One group: its unit made or deleted, its gates removed, or its unadmitted pods evicted."""
        pods = [p for p in (self.pods.get(k) for k in sorted(self._members.get(key, ()))) if p is not None]
        live = [p for p in pods if not p.ended]
        unit = self.informers.unit.get(key)
        ours = unit is not None and dict(unit.labels).get(c.LABEL_POD_GROUP_UNIT) == c.TRUE
        if not live:
            if unit is not None and ours:  # every pod ended or gone: its quota back
                await self._delete_unit(unit)
            return
        holding = ours and unit is not None and unit.phase in _HOLDING
        if unit is None and any(p.gated for p in live):
            await self._create_unit(live)
        elif unit is not None and not ours:
            return  # a unit of that name that is not ours: the group waits (said nowhere better than the pods)
        if holding and unit is not None:
            # At most the group's size ungated, each pod asking no more than the pod admitted: a
            # tenant's extra or bigger pods of a Kueue group stay gated, and those that run
            # ungated all the same (made past the webhook) are deleted, the newest first.
            room = self._admitted_count(unit)
            allowed = self._admitted_request(unit)
            for pod in sorted((p for p in live if not p.gated), key=lambda p: (p.created, p.name)):
                why = self._beyond(pod, unit, allowed)
                if why is None and room == 0:
                    why = f"its group's {self._admitted_count(unit)} admitted pods run already"
                if why is None:
                    room -= 1
                else:
                    await self._evict(pod, unit, why)
            for pod in live:
                if pod.gated and room > 0:
                    why = self._beyond(pod, unit, allowed)
                    if why is not None:
                        self._event(pod_ref(pod), c.EventType.WARNING, c.EventReason.KEPT_GATED,
                                    f"kept gated though its QueueUnit {pod.group.unit} is admitted: {why}")
                        continue
                    room -= 1
                    await self._ungate(pod, unit)
            return
        for pod in live:  # ungated and not admitted: preempted, or got past us
            if not pod.gated:
                await self._evict(pod, unit)

    def _beyond(self, pod: GatedPod, unit: UnitView, allowed: ResourceList | None) -> str | None:
        """Why the pod may not run on its unit's admission (None: it may): it asks for more
        than the pod the unit was admitted for, by its requests or by the devices its DRA
        claims take (charged as that pod's were, controller/dra.py), or its claims cannot be
        charged."""
        if not fits(pod, allowed):
            return f"it asks for more than the pod its QueueUnit {pod.group.unit} was admitted for"
        if pod.claims_invalid is not None:
            return pod.claims_invalid
        claims = self.informers.claims
        if not pod.claims or not claims.mappings:
            return None  # (no claims charged, as a job's)
        admitted = _template_claims(unit)
        other = next((n for n in pod.claims.claims if n not in admitted.claims), None)
        if other is not None:
            return f"its ResourceClaim {other} is not one its QueueUnit {pod.group.unit} was charged for"
        try:
            asks = claims.per_pod(POD_SET, pod.claims, pod.namespace, f"Pod {pod.key}")
            had = claims.per_pod(POD_SET, admitted, unit.namespace, f"QueueUnit {unit.key}")
        except UncountedClaim as e:
            return str(e)
        if asks.missing and pod.gated:  # (one running has its claims made already)
            return missing_reason(asks.missing)
        over = sorted(r for r, amount in asks.per_pod.get(POD_SET, {}).items()
                      if amount > had.per_pod.get(POD_SET, {}).get(r, 0))
        if over:
            return (f"its DRA claims ask for more {', '.join(over)} than the pod its QueueUnit "
                    f"{pod.group.unit} was admitted for")
        return None

    @staticmethod
    def _admitted_count(unit: UnitView) -> int:
        sets = unit.spec.get("podSet")
        count = sets[0].get("count") if isinstance(sets, list) and sets and isinstance(sets[0], Mapping) else 0
        return count if isinstance(count, int) and not isinstance(count, bool) else 0

    @staticmethod
    def _admitted_request(unit: UnitView) -> ResourceList | None:
        sets = unit.spec.get("podSet")
        template = sets[0].get("template") if isinstance(sets, list) and sets and isinstance(sets[0], Mapping) else None
        try:
            return pod_request(template if isinstance(template, Mapping) else {}, unit.key)
        except InvalidObject:
            return None

    async def _create_unit(self, pods: list[GatedPod]) -> None:
        group = pods[0].group
        manifest = unit_manifest(pods)
        first = pods[0]
        # its pods' claims charged as a job's (controller/dra.py): waiting for a template or
        # claim not there yet (no unit: it is made once they are), held when uncountable
        invalid = group.invalid or first.claims_invalid
        if invalid is None:
            charge = self.informers.claims.charged_group(manifest["spec"], POD_SET, first.claims, first.namespace,
                                                         f"Pod {first.key}")
            if charge.missing:
                for pod in pods:
                    self._event(pod_ref(pod), c.EventType.WARNING, c.EventReason.RESOURCE_CLAIM_NOT_FOUND,
                                f"not queued: {missing_reason(charge.missing)}")
                return
            manifest["spec"], invalid = charge.spec, charge.invalid
        if invalid is not None:  # held (inactive), the reason told on its pods
            manifest["spec"]["podSet"][0]["count"] = len(pods)
            manifest["spec"]["active"] = False
            for pod in pods:
                self._event(pod_ref(pod), c.EventType.WARNING, c.EventReason.INVALID_JOB,
                            f"{invalid}; its QueueUnit {group.unit} is held inactive")
        try:
            await self.client.create(UNITS, manifest, namespace=pods[0].namespace)
        except (Conflict, AlreadyExists):
            pass  # made meanwhile (our informer lags): its update brings us back

    async def _delete_unit(self, unit: UnitView) -> None:
        try:
            await self.client.delete(UNITS, unit.name, namespace=unit.namespace)
        except NotFound:
            pass

    async def _ungate(self, pod: GatedPod, unit: UnitView | None) -> None:
        left = [{"name": g} for g in pod.gates if g != c.SCHEDULING_GATE]
        patch = {"metadata": {"resourceVersion": pod.resource_version}, "spec": {"schedulingGates": left or None}}
        try:
            await self.client.patch(PODS, pod.name, patch, namespace=pod.namespace)
        except (NotFound, Conflict):
            return  # gone, or changed meanwhile: its update brings us back
        self._event(pod_ref(pod), c.EventType.NORMAL, c.EventReason.UNGATED,
                    f"QueueUnit {pod.group.unit} admitted: scheduling gate {c.SCHEDULING_GATE} removed")

    async def _evict(self, pod: GatedPod, unit: UnitView | None, beyond: str | None = None) -> None:
        why = beyond if beyond is not None else \
            f"its QueueUnit {pod.group.unit} is {unit.phase or 'not admitted'}" if unit is not None else \
            f"it has no QueueUnit ({pod.group.unit})"
        try:
            await self.client.delete(PODS, pod.name, namespace=pod.namespace)
        except NotFound:
            return
        except KubeError as e:
            log.info("podgroups: cannot delete %s: %s", pod.key, e)
            raise
        said = f"it ran beyond what its QueueUnit {pod.group.unit} was admitted for ({why})" if beyond is not None \
            else f"it ran without its scheduling gate {c.SCHEDULING_GATE} while {why}"
        self._event(pod_ref(pod), c.EventType.WARNING, c.EventReason.EVICTED,
                    f"deleted: {said}; its owner makes it again, gated, to queue")
