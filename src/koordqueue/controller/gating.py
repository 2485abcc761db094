"""Which pods are queued by a scheduling gate, and the pod group each belongs to (docs/workloads.md).

A pod of a managed workload (a Deployment's, a StatefulSet's, a LeaderWorkerSet's, a plain pod
or one of Kueue's pod groups) is created carrying our gate ``scheduling.koord-queue.io/admission``
(the webhook adds it); the controller (podgroups.py) makes a QueueUnit per group and removes the
gates once the unit is admitted. A workload is managed when opted in: its namespace labelled
``koord-queue/managed: "true"``, or the pod (its template) labelled with Kueue's
``kueue.x-k8s.io/queue-name`` or annotated with our ``scheduling.x-k8s.io/queue``. Pods of our
own job kinds are never gated: their jobs are suspended whole.

Groups, as Kueue's pod integration has them: pods labelled ``kueue.x-k8s.io/pod-group-name``
form one group of ``kueue.x-k8s.io/pod-group-total-count`` pods, admitted whole; any other pod is
a group of one (a Deployment's or StatefulSet's replicas are independent serving pods: each is
admitted on its own, so that 2 of 4 run where the quota has room for 2, as Kueue's Deployment
integration does; a StatefulSet made OrderedReady makes one pod at a time, which a gang of all
its replicas would wait on for ever). Everything read here is a tenant's: a bad value is a
reason, never an exception.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import INT32_MAX
from koordqueue.jobs import KIND_NAMES, POD_LABELS

UNIT_SUFFIX_POD = "-pod"
UNIT_SUFFIX_GROUP = "-group"
MAX_NAME = 253  # an object's name
MAX_GROUP = 10_000  # pods in one Kueue pod group we read (beyond: refused, said on the unit)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def controller_owner(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in _map(pod.get("metadata")).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def workload_of(pod: Mapping[str, Any]) -> str | None:
    """The chart's extension the pod falls under (c.WORKLOAD_*), None for a pod of one of our job
    kinds (its job is suspended whole, never its pods)."""
    labels = _map(_map(pod.get("metadata")).get("labels"))
    if any(labels.get(kind.job) for kind in POD_LABELS):
        return None
    owner = controller_owner(pod)
    kind = str(owner.get("kind") or "") if owner is not None else ""
    if kind in KIND_NAMES or kind == c.BATCH_JOB_KIND:
        return None
    if labels.get(c.LABEL_LWS_NAME):
        return c.WORKLOAD_LEADERWORKERSET
    if kind == c.REPLICA_SET_KIND:
        return c.WORKLOAD_DEPLOYMENT
    if kind == c.STATEFUL_SET_KIND:
        return c.WORKLOAD_STATEFULSET
    return c.WORKLOAD_POD  # plain, Kueue's pod groups, or another operator's


def opted_in(pod: Mapping[str, Any], namespace_labels: Mapping[str, str] | None) -> bool:
    """Whether the pod's workload is queued: its namespace opted in, or the pod names a queue."""
    meta = _map(pod.get("metadata"))
    if (namespace_labels or {}).get(c.LABEL_MANAGED_NAMESPACE) == c.TRUE:
        return True
    return bool(_map(meta.get("labels")).get(c.LABEL_KUEUE_QUEUE_NAME)) or \
        bool(_map(meta.get("annotations")).get(c.ANNOTATION_QUEUE))


def gates(pod: Mapping[str, Any]) -> list[str]:
    listed = _map(pod.get("spec")).get("schedulingGates")
    return [str(g.get("name")) for g in listed if isinstance(g, Mapping)] if isinstance(listed, list) else []


def gated(pod: Mapping[str, Any]) -> bool:
    return c.SCHEDULING_GATE in gates(pod)


def is_ours(pod: Mapping[str, Any]) -> bool:
    """Whether the webhook gated the pod (marked it), gated still or let through since."""
    return _map(_map(pod.get("metadata")).get("labels")).get(c.LABEL_GATED_POD) == c.TRUE


def gate_json_patch(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The webhook's JSONPatch: our gate added to the pod's, the pod marked as ours."""
    meta = _map(pod.get("metadata"))
    spec = _map(pod.get("spec"))
    ops: list[dict[str, Any]] = []
    if not isinstance(meta.get("labels"), Mapping):
        ops.append({"op": "add", "path": "/metadata/labels", "value": {}})
    ops.append({"op": "add", "path": "/metadata/labels/" + c.LABEL_GATED_POD.replace("/", "~1"), "value": c.TRUE})
    if gated(pod):
        return ops  # (carried already: a gate named twice is refused by the API server)
    if isinstance(spec.get("schedulingGates"), list):
        ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": c.SCHEDULING_GATE}})
    else:
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": c.SCHEDULING_GATE}]})
    return ops


@dataclass(frozen=True, slots=True)
class Group:
    """A pod group: its QueueUnit's name, the group's name ("" for a pod alone), its size."""

    unit: str
    kueue_name: str
    total: int
    invalid: str | None = None  # why its size cannot be read (said on its unit)


def group_of(pod: Mapping[str, Any]) -> Group:
    """Kueue's pod group, else a LeaderWorkerSet's group (its leader and workers), else the pod alone."""
    meta = _map(pod.get("metadata"))
    labels, annotations = _map(meta.get("labels")), _map(meta.get("annotations"))
    name = str(labels.get(c.LABEL_KUEUE_POD_GROUP_NAME) or "")
    if name:
        text = annotations.get(c.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT) or labels.get(
            c.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT)
        return _sized(name, text, c.LABEL_KUEUE_POD_GROUP_NAME, c.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT)
    lws, index = labels.get(c.LABEL_LWS_NAME), labels.get(c.LABEL_LWS_GROUP_INDEX)
    if lws and index is not None:
        return _sized(f"{lws}-{index}", annotations.get(c.ANNOTATION_LWS_SIZE), c.LABEL_LWS_GROUP_INDEX,
                      c.ANNOTATION_LWS_SIZE)
    return Group(unit_name(str(meta.get("name")), UNIT_SUFFIX_POD), "", 1)


def unit_name(base: str, suffix: str) -> str:
    """``base + suffix``, within an object name's 253 characters: a longer base is cut and told
    apart by a hash of it (a pod's name may take all 253)."""
    name = base + suffix
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(base.encode()).hexdigest()[:10]
    return f"{base[:MAX_NAME - len(suffix) - 11].rstrip('-.')}-{digest}{suffix}"


def _sized(name: str, text: object, named_by: str, sized_by: str) -> Group:
    unit = unit_name(name, UNIT_SUFFIX_GROUP)
    if text is None:
        return Group(unit, name, 0, f"its pods carry {named_by} but no {sized_by}: how many pods it has is not said")
    try:
        total = int(str(text).strip())
    except ValueError:
        total = -1
    if not 1 <= total <= min(MAX_GROUP, INT32_MAX):
        return Group(unit, name, 0, f"{sized_by} {str(text)[:40]!r} is not a count of pods from 1 to {MAX_GROUP}")
    return Group(unit, name, total)
