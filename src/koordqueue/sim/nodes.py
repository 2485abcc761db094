"""Simulated nodes: where an admitted job's pods go, and the room left on each.

The simulator is the cluster's scheduler and kubelet: a job admitted with a placement
(node fit, on by default when the trace has nodes) has its pods bound at once where the
engine planned them; a job admitted on quota alone (node fit turned off) waits until its
pods all fit, gang, first fit over the nodes in trace order. What the pods take on each
node is told back to the engine, as the controller tells it what bound pods take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from koordqueue.api.constants import LABEL_HOSTNAME, PODS
from koordqueue.api.quantity import format_resource_list, less_equal
from koordqueue.engine.model import NodeInfo, ResourceList
from koordqueue.engine.placement import ONE_POD

from .trace import NodeGroup

Pods = list[tuple[int, str, ResourceList]]
"""(node index, pod set, pod request) for every pod of a job."""


@dataclass(slots=True)
class Node:
    info: NodeInfo
    free: ResourceList

    @property
    def name(self) -> str:
        return self.info.name

    def used(self) -> ResourceList:
        """What the pods bound here take."""
        return {r: a - self.free.get(r, 0) for r, a in self.info.allocatable.items() if a - self.free.get(r, 0)}


class NodePool:
    def __init__(self, groups: Sequence[NodeGroup]) -> None:
        self.nodes = [
            Node(NodeInfo(f"{group.name}-{i}", dict(group.allocatable),
                          {**dict(group.labels), LABEL_HOSTNAME: f"{group.name}-{i}"}, group.taints,
                          group.unschedulable), dict(group.allocatable))
            for group in groups
            for i in range(group.count)
        ]
        self.index = {node.name: i for i, node in enumerate(self.nodes)}

    def capacity(self) -> ResourceList:
        """The cluster total: the sum of every node's allocatable."""
        total: ResourceList = {}
        for node in self.nodes:
            for name, amount in node.info.allocatable.items():
                total[name] = total.get(name, 0) + amount
        return total

    def bind(self, planned: Sequence[tuple[str, str, int]], requests: dict[str, ResourceList]) -> Pods:
        """Bind pods where the engine planned them: (pod set, node, how many)."""
        pods: Pods = []
        for pod_set, name, count in planned:
            index = self.index[name]
            pods += [(index, pod_set, requests[pod_set])] * count
        self._take(pods, -1)
        return pods

    def place(self, pods: Sequence[tuple[str, ResourceList]]) -> Pods | None:
        """Bind all ``pods`` (pod set, request) first fit, or none of them (None)."""
        free = [dict(node.free) for node in self.nodes]
        placed: Pods = []
        for pod_set, pod in pods:
            index = next((i for i, room in enumerate(free) if less_equal(pod, room)
                          and room.get(PODS, ONE_POD) >= ONE_POD), None)
            if index is None:
                return None
            for name, amount in pod.items():
                free[index][name] = free[index].get(name, 0) - amount
            if PODS in free[index]:
                free[index][PODS] -= ONE_POD
            placed.append((index, pod_set, pod))
        self._take(placed, -1)
        return placed

    def release(self, pods: Pods) -> None:
        self._take(pods, 1)

    def _take(self, pods: Pods, sign: int) -> None:
        for index, _, pod in pods:
            free = self.nodes[index].free
            for name, amount in pod.items():
                free[name] = free.get(name, 0) + sign * amount
            if PODS in free:  # a pod takes one of the node's pod slots too
                free[PODS] += sign * ONE_POD

    def why_not(self, pods: Sequence[tuple[str, ResourceList]]) -> str:
        """In words, why ``pods`` cannot be placed now, or can never be."""
        count = len(pods)
        empty = NodePool([])
        empty.nodes = [Node(node.info, dict(node.info.allocatable)) for node in self.nodes]
        for _, pod in pods:
            if not any(less_equal(pod, node.info.allocatable) for node in self.nodes):
                return (
                    f"admitted, but a pod asking {format_resource_list(pod)} fits on none of the "
                    f"{len(self.nodes)} node(s), even empty: it can never start"
                )
        if empty.place(pods) is None:
            return f"admitted, but its {count} pods do not fit on the {len(self.nodes)} node(s) all at once, even empty (first-fit)"
        return f"admitted, waiting for room on the nodes for all its {count} pod(s) at once"
