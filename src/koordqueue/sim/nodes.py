"""Simulated nodes: where an admitted job's pods go.

Quota admission says a job may run; the nodes say whether its pods fit right now.
Placement is gang (all pods of a job or none) and first-fit over the nodes in trace
order, on each node's free allocatable; a resource a node does not list is 0 there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from koordqueue.api.quantity import format_resource_list, less_equal
from koordqueue.engine.model import ResourceList

from .trace import NodeGroup

Placement = list[tuple[int, ResourceList]]
"""(node index, pod request) for every pod of a job."""


@dataclass(slots=True)
class Node:
    name: str
    allocatable: ResourceList
    free: ResourceList


class NodePool:
    def __init__(self, groups: Sequence[NodeGroup]) -> None:
        self.nodes = [
            Node(f"{group.name}-{i}", dict(group.allocatable), dict(group.allocatable))
            for group in groups
            for i in range(group.count)
        ]

    def capacity(self) -> ResourceList:
        """The cluster total: the sum of every node's allocatable."""
        total: ResourceList = {}
        for node in self.nodes:
            for name, amount in node.allocatable.items():
                total[name] = total.get(name, 0) + amount
        return total

    def place(self, pods: Sequence[ResourceList]) -> Placement | None:
        """Reserve room for all ``pods`` (in role order), or nothing and ``None``."""
        placement = _first_fit(pods, [dict(node.free) for node in self.nodes])
        if placement is None:
            return None
        for index, pod in placement:
            free = self.nodes[index].free
            for name, amount in pod.items():
                free[name] = free.get(name, 0) - amount
        return placement

    def release(self, placement: Placement) -> None:
        for index, pod in placement:
            free = self.nodes[index].free
            for name, amount in pod.items():
                free[name] = free.get(name, 0) + amount

    def why_not(self, pods: Sequence[ResourceList]) -> str:
        """In words, why ``pods`` cannot be placed now, or can never be."""
        count = len(pods)
        empty = [dict(node.allocatable) for node in self.nodes]
        for pod in pods:
            if not any(less_equal(pod, room) for room in empty):
                return (
                    f"admitted, but a pod asking {format_resource_list(pod)} fits on none of the "
                    f"{len(self.nodes)} node(s), even empty: it can never start"
                )
        if _first_fit(pods, empty) is None:
            return f"admitted, but its {count} pods do not fit on the {len(self.nodes)} node(s) all at once, even empty (first-fit)"
        return f"admitted, waiting for room on the nodes for all its {count} pod(s) at once"


def _first_fit(pods: Sequence[ResourceList], free: list[ResourceList]) -> Placement | None:
    """Each pod on the first node with room left in ``free`` (which it consumes)."""
    placement: Placement = []
    for pod in pods:
        index = next((i for i, room in enumerate(free) if less_equal(pod, room)), None)
        if index is None:
            return None
        for name, amount in pod.items():
            free[index][name] = free[index].get(name, 0) - amount
        placement.append((index, pod))
    return placement
