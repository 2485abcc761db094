"""Simulated nodes: the Node objects, and the room left on each for the simulated kubelet.

A node's room is its allocatable (cpu, memory, nvidia.com/gpu, pods) minus the requests
of the pods placed on it that have not ended. A pod may go only to the nodes its rules
let it (``node_refusal``, the engine's reading of kube-scheduler's NodeUnschedulable,
TaintToleration and NodeAffinity filters). `place_gang` is first fit over those nodes in
name order, for all pods of a gang at once, on a scratch copy: it commits nothing, so
a gang either gets a node for every pod or no node at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.quantity import QuantityError, add, parse_quantity, sub
from koordqueue.engine.model import NodeInfo, PodSetInfo
from koordqueue.engine.nodefilter import Refusal, node_refusal, rules_key
from koordqueue.jobs.placement import node_info

Object = dict[str, Any]
ResourceList = dict[str, int]
KUBELET_VERSION = "v1.32.0"
ONE_POD = {c.PODS: 1000}  # every pod takes one of the node's pod slots
DEFAULT_POD_NETWORK = "10.88.0.0/16"  # containerd's bridge, for nodes without spec.podCIDR


def node_name(prefix: str, index: int) -> str:
    return f"{prefix}{index}"


def node_object(name: str, index: int, cpu: str, memory: str, gpus: int, pods: int, now: str) -> Object:
    """A Ready node as a kubelet registers it, with capacity = allocatable."""
    capacity = {c.CPU: cpu, c.MEMORY: memory, c.GPU: str(gpus), c.PODS: str(pods)}
    ready = {
        "type": c.NODE_CONDITION_READY, "status": c.CONDITION_TRUE, "reason": c.NODE_REASON_READY,
        "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now,
    }
    pressures = [
        {"type": kind, "status": c.CONDITION_FALSE, "reason": f"KubeletHasNo{kind}",
         "message": f"kubelet has no {kind}", "lastHeartbeatTime": now, "lastTransitionTime": now}
        for kind in c.NODE_CONDITION_PRESSURES
    ]
    return {
        "apiVersion": c.CORE_API_VERSION,
        "kind": c.NODE_KIND,
        "metadata": {
            "name": name,
            "labels": {c.LABEL_HOSTNAME: name, c.LABEL_OS: "linux", c.LABEL_ARCH: "amd64"},
        },
        "spec": {"podCIDR": pod_cidr(index)},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [*pressures, ready],
            "addresses": [
                {"type": c.NODE_ADDRESS_INTERNAL_IP, "address": f"10.0.{index // 250}.{index % 250 + 1}"},
                {"type": c.NODE_ADDRESS_HOSTNAME, "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION,
                "containerRuntimeVersion": "containerd://1.7.22", "operatingSystem": "linux",
                "architecture": "amd64", "osImage": "koord-queue simulated node",
                "kernelVersion": "6.1.0", "machineID": name, "systemUUID": name, "bootID": name,
            },
        },
    }


def pod_cidr(index: int) -> str:
    return f"10.{244 + index // 256}.{index % 256}.0/24"


def check_node_sizes(cpu: str, memory: str, gpus: int, pods: int) -> None:
    """Refuse sizes no node could have, with a message that says which."""
    for what, value in ((c.CPU, cpu), (c.MEMORY, memory)):
        try:
            parse_quantity(value)
        except QuantityError as e:
            raise ValueError(f"simulated node {what}: {e}") from None
    if gpus < 0 or pods < 1:
        raise ValueError(f"simulated nodes need gpus >= 0 and pods >= 1 (got gpus={gpus}, pods={pods})")


def ready_node(node: Mapping[str, Any]) -> NodeInfo | None:
    """The node as placement reads it (labels, taints, cordon, allocatable), or None when
    it takes no new pods: not Ready, or malformed. A cordoned node stays: kube-scheduler
    counts it, and it takes the pods that tolerate its cordon."""
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        return None
    conditions = status.get("conditions") or []
    ready = any(
        isinstance(cond, Mapping) and cond.get("type") == c.NODE_CONDITION_READY
        and cond.get("status") == c.CONDITION_TRUE
        for cond in conditions
    ) if isinstance(conditions, list) else False
    return node_info(node) if ready else None


@dataclass
class PodBinding:
    """One pod bound to a node and the room it holds there."""

    node: str
    request: ResourceList
    uid: str


@dataclass
class NodeBook:
    """The simulated kubelet's book: the nodes that take pods and the pods holding room, by pod key; the source of truth for fits."""

    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    used: dict[str, ResourceList] = field(default_factory=dict)
    placements: dict[str, PodBinding] = field(default_factory=dict)
    cidrs: dict[str, str] = field(default_factory=dict)  # node -> spec.podCIDR
    ip_counter: Counter[str] = field(default_factory=Counter)
    _allowed: dict[object, list[str]] = field(default_factory=dict)  # pods' rules -> their nodes, in name order

    def set_node(self, name: str, info: NodeInfo | None, pod_cidr: str = "") -> None:
        """A node appeared or changed; None removes it from placement (its pods keep running)."""
        if info is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = info
        self._allowed.clear()
        if pod_cidr:
            self.cidrs[name] = pod_cidr

    def hold(self, pod_key: str, node: str, request: ResourceList, uid: str) -> None:
        """Count `request` on `node` for this pod (idempotent for the same pod uid)."""
        current = self.placements.get(pod_key)
        if current is not None:
            if current.uid == uid and current.node == node:
                return
            self.release(pod_key)
        request = add(request, ONE_POD)
        self.placements[pod_key] = PodBinding(node, request, uid)
        self.used[node] = add(self.used.get(node, {}), request)

    def release(self, pod_key: str, uid: str | None = None) -> bool:
        """Give back the pod's room; with `uid`, only if it is still that pod. True if freed."""
        current = self.placements.get(pod_key)
        if current is None or (uid is not None and current.uid != uid):
            return False
        del self.placements[pod_key]
        self.used[current.node] = sub(self.used.get(current.node, {}), current.request)
        return True

    def free(self, node: str) -> ResourceList:
        info = self.nodes.get(node)
        return sub(info.allocatable if info is not None else {}, self.used.get(node, {}))

    def allowed(self, pod: PodSetInfo) -> list[str]:
        """The nodes, in name order, whose rules let ``pod`` in (resources aside)."""
        key = rules_key(pod)
        names = self._allowed.get(key)
        if names is None:
            names = self._allowed[key] = [name for name in sorted(self.nodes)
                                          if node_refusal(self.nodes[name], pod) is None]
        return names

    def place_gang(self, pods: Iterable[PodSetInfo]) -> list[str] | None:
        """A node per pod (first fit among the nodes it may go to), or None if any one cannot fit."""
        free: dict[str, ResourceList] = {}
        chosen = []
        for pod in pods:
            need = add(pod.request, ONE_POD)
            for name in self.allowed(pod):
                room = free[name] if name in free else self.free(name)
                if fits(need, room):
                    free[name] = sub(room, need)
                    chosen.append(name)
                    break
            else:
                return None
        return chosen

    def why_not(self, pod: PodSetInfo) -> str:
        """kube-scheduler's words for a pod that fits no node: `0/4 nodes are available: ...`,
        each node counted under the first filter it fails, as kube-scheduler counts them."""
        need = add(pod.request, ONE_POD)
        reasons: Counter[str] = Counter()
        for name, info in self.nodes.items():
            refusal = node_refusal(info, pod)
            if refusal is not None:
                reasons[_in_scheduler_words(refusal)] += 1
                continue
            room = self.free(name)
            for resource, amount in need.items():
                if amount > room.get(resource, 0):
                    reasons[_insufficient(resource)] += 1
        total = len(self.nodes)
        if not reasons:
            return (f"0/{total} nodes are available: the pod fits a node alone, "
                    "but not together with the rest of its gang.")
        return f"0/{total} nodes are available: {', '.join(sorted(f'{n} {text}' for text, n in reasons.items()))}."

    def next_pod_ip(self, node: str) -> str:
        """The next address of the node's pod CIDR (a /24 taken as its first three octets)."""
        self.ip_counter[node] += 1
        host = (self.ip_counter[node] - 1) % 254 + 1
        network = self.cidrs.get(node, DEFAULT_POD_NETWORK).split("/")[0].rsplit(".", 1)[0]
        return f"{network}.{host}"


def fits(need: Mapping[str, int], room: Mapping[str, int]) -> bool:
    return all(amount <= room.get(resource, 0) for resource, amount in need.items() if amount > 0)


def _in_scheduler_words(refusal: Refusal) -> str:
    """A node's refusal as kube-scheduler's filter plugins word it."""
    if refusal.rule == "unschedulable":
        return "node(s) were unschedulable"
    if refusal.taint is not None:
        return f"node(s) had untolerated taint {{{refusal.taint.key}: {refusal.taint.value}}}"
    return "node(s) didn't match Pod's node affinity/selector"


def _insufficient(resource: str) -> str:
    return "Too many pods" if resource == c.PODS else f"Insufficient {resource}"
