"""Do a unit's pods fit on the nodes now? On which nodes, in which topology domain, and if
not, why not (``Unplaced``, which messages.py turns into words).

Nodes are an input like quotas. The room on a node is its allocatable, minus what the pods
bound to it request (the shell counts them, as kube-scheduler's cache does), minus the pods
of admitted units that are not bound yet (assumed on the nodes planned for them), plus what
the bound pods of units that hold no quota any more request (their jobs are being suspended:
that room is on its way back, and the unit that preempted them counts on it).

NodeRoom is the front door and keeps that bookkeeping; it delegates the rest by
responsibility: the arrays over the nodes and their caches (nodearrays.py), the search for
nodes for a gang (gangsearch.py), and the memory of placements that failed until room they
could use grows (failedplacements.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from koordqueue.engine.failedplacements import FailedPlacements, PlacementKey, placement_key
from koordqueue.engine.gangsearch import GangSearch, Unplaced
from koordqueue.engine.model import NodeInfo, Placement, PodSetInfo, ResourceList
from koordqueue.engine.nodearrays import ONE_POD, NodeArrays

if TYPE_CHECKING:  # numpy only once there are nodes (lazynumpy.py)
    import numpy as np

    from koordqueue.engine.nodearrays import Vector
else:
    from koordqueue.engine.lazynumpy import LazyNumpy

    np = LazyNumpy(globals())

__all__ = ["ONE_POD", "PlacementKey", "NodeRoom", "Unplaced", "placement_key"]  # what the engine reads from here


class NodeRoom:
    """The nodes, the room on each, and the units' pods on them."""

    def __init__(self, levels: Sequence[str]) -> None:
        self.levels = tuple(levels)
        self._infos: dict[str, NodeInfo] = {}
        self._usage: dict[str, ResourceList] = {}  # node -> what its bound pods request (the shell's)
        self._requests: dict[str, dict[str, ResourceList]] = {}  # unit -> pod set -> one pod's request
        self._pods: dict[str, dict[tuple[str, str], int]] = {}  # unit -> (pod set, node) -> bound pods
        self._plans: dict[str, tuple[tuple[str, str, int], ...]] = {}  # units holding quota -> planned pods
        self._applied: dict[str, dict[int, Vector]] = {}  # unit -> node -> what it adds to the room now
        self._stale = True
        self.arrays = NodeArrays(levels)
        self._search = GangSearch(self.arrays)
        self._failures = FailedPlacements(self.arrays)
        # The last placement that passed, and the room it passed in (``arrays.version``).
        self._passed: tuple[PlacementKey, int, Placement] | None = None

    @property
    def names(self) -> list[str]:
        """The nodes, in the order of the arrays' rows."""
        return self.arrays.names

    def __bool__(self) -> bool:
        return bool(self._infos)

    # --- inputs -------------------------------------------------------------------
    def set_node(self, info: NodeInfo) -> bool:
        """Take a node (new or changed); True when it changed."""
        if self._infos.get(info.name) == info:
            return False
        self._infos[info.name] = info
        self._stale = True
        return True

    def remove_node(self, name: str) -> bool:
        if self._infos.pop(name, None) is None:
            return False
        self._stale = True
        return True

    def set_usage(self, node: str, used: ResourceList) -> bool:
        """What the pods bound to ``node`` request; True when room grew there."""
        old = self._usage.get(node, {})
        if old == used:
            return False
        if used:
            self._usage[node] = dict(used)
        else:
            self._usage.pop(node, None)
        if self._stale or node not in self.arrays.index:
            return True
        change = self.arrays.vector(old) - self.arrays.vector(used)
        self.arrays.add(self.arrays.index[node], change)
        return bool((change > 0).any())

    def track(self, unit: str, pod_sets: Sequence[PodSetInfo]) -> None:
        """The pod sets of a unit the engine knows: for the room its pods take or give back."""
        self._requests[unit] = {ps.name: ps.request for ps in pod_sets}
        self._refresh(unit)

    def forget(self, unit: str) -> None:
        self._requests.pop(unit, None)
        self._plans.pop(unit, None)
        self._pods.pop(unit, None)
        self._refresh(unit)

    def hold(self, unit: str, nodes: Sequence[tuple[str, str, int]]) -> None:
        """The unit holds quota with its pods planned on ``nodes``: the unbound ones are assumed there."""
        self._plans[unit] = tuple(nodes)
        self._refresh(unit)

    def release(self, unit: str) -> bool:
        """The unit holds quota no more: its plan goes, and its bound pods are on their way
        out. True when room grew."""
        if self._plans.pop(unit, None) is None:
            return False
        self._refresh(unit)
        return True

    def set_pods(self, unit: str, pods: Mapping[tuple[str, str], int]) -> bool:
        """The unit's bound pods: (pod set, node) -> how many. True when room grew."""
        pods = {k: n for k, n in pods.items() if n > 0}
        if self._pods.get(unit, {}) == pods:
            return False
        if pods:
            self._pods[unit] = pods
        else:
            self._pods.pop(unit, None)
        return self._refresh(unit)

    def plan_of(self, unit: str) -> tuple[tuple[str, str, int], ...]:
        return self._plans.get(unit, ())

    # --- the room -------------------------------------------------------------------
    def sync(self) -> None:
        """Derive the arrays again after nodes came, went or changed."""
        if not self._stale:
            return
        self._stale = False
        self._failures.forget_all()
        self._applied = {}
        self.arrays.rebuild(self._infos, self._usage)
        if not self.arrays.names:
            return
        for unit in self._requests:
            self._refresh(unit)
        self._failures.watch()

    def free(self, node: str) -> ResourceList:
        """The room left on ``node`` now (for reports and tests)."""
        self.sync()
        row = self.arrays.free[self.arrays.index[node]]
        return {name: int(row[i]) for name, i in self.arrays.columns.items()}

    def place(
        self,
        pod_sets: Sequence[PodSetInfo],
        counts: Mapping[str, int] | None = None,
        released: Iterable[str] = (),
        key: PlacementKey | None = None,
    ) -> Placement | Unplaced:
        """Nodes for every pod of ``pod_sets`` (``counts`` of them, where given), or why not.
        ``released``: units whose room counts as given back (victims about to be preempted).
        A placement that failed is answered from ``failing`` until room it could use grows;
        the last that passed, while no room changed since (a queue's scan tries again
        what woke it). ``key``: ``placement_key(pod_sets, counts)``, when the caller keeps it."""
        self.sync()
        released = tuple(released)
        if released:
            key = None
        else:
            key = key if key is not None else placement_key(pod_sets, counts)
            known = self.failing(key)
            if known is not None:
                return known
            passed = self._passed
            if passed is not None and passed[0] == key and passed[1] == self.arrays.version:
                return passed[2]
        found = self._place(pod_sets, counts, released)
        if key is not None and isinstance(found, Placement):
            self._passed = (key, self.arrays.version, found)
        if key is not None and isinstance(found, Unplaced):
            self._failures.remember(key, found, pod_sets, counts)
        return found

    def _place(self, pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None,
               released: tuple[str, ...]) -> Placement | Unplaced:
        """The placement itself (no memory): in the room now, or a copy with ``released``'s given back."""
        free = self.arrays.free
        extra = [self._release_change(unit) for unit in released]
        if any(extra):
            free = free.copy()
            for change in extra:
                for index, vector in change.items():
                    free[index] += vector
        return self._search.place(pod_sets, counts, free)

    def failing(self, key: PlacementKey) -> Unplaced | None:
        """Why the placement of ``key`` failed, while the room that grew since could not make
        it pass (None: it did not fail, or it may pass now)."""
        self.sync()
        return self._failures.failing(key)

    def most_pods(self, pod_set: PodSetInfo) -> int:
        """How many pods of ``pod_set`` the nodes have room for now, alone (for partial admission)."""
        self.sync()
        return self._search.most_pods(pod_set)

    def best_effort(self, pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None) -> Placement:
        """Nodes for as many pods as fit (a unit found holding quota: its pods that are not
        bound yet are assumed somewhere, not nowhere)."""
        self.sync()
        return self._search.best_effort(pod_sets, counts)

    # --- what units add to the room -------------------------------------------------------
    def _refresh(self, unit: str) -> bool:
        """Apply the unit's part of the room anew; True when room grew somewhere."""
        if self._stale:
            return True
        old = self._applied.pop(unit, {})
        new = self._contribution(unit, unit in self._plans)
        grew = False
        for index, vector in old.items():
            self.arrays.add(index, -vector)
            grew = grew or bool((vector < 0).any())
        for index, vector in new.items():
            self.arrays.add(index, vector)
            grew = grew or bool((vector > 0).any())
        if new:
            self._applied[unit] = new
        return grew

    def _release_change(self, unit: str) -> dict[int, Vector]:
        """How the room would change if ``unit`` were released now."""
        if unit not in self._plans:
            return {}
        change = {i: -v for i, v in self._applied.get(unit, {}).items()}
        for index, vector in self._contribution(unit, False).items():
            change[index] = change.get(index, np.zeros_like(vector)) + vector
        return change

    def _contribution(self, unit: str, holding: bool) -> dict[int, Vector]:
        """What the unit adds to the room of each node: its planned pods not bound yet take
        room (holding quota); its bound pods give room back (holding none: they are leaving)."""
        requests = self._requests.get(unit)
        if not requests:
            return {}
        pods = self._pods.get(unit, {})
        out: dict[int, Vector] = {}
        if holding:
            planned: dict[str, list[tuple[str, int]]] = {}
            for pod_set, node, n in self._plans[unit]:
                planned.setdefault(pod_set, []).append((node, n))
            for pod_set, entries in planned.items():
                request = requests.get(pod_set)
                if request is None:
                    continue
                on = {node: n for (s, node), n in pods.items() if s == pod_set}
                unbound = sum(n for _, n in entries) - sum(on.values())
                for node, n in entries:
                    if unbound <= 0:
                        break
                    left = min(n - on.get(node, 0), unbound)
                    index = self.arrays.index.get(node)
                    if left > 0 and index is not None:
                        _add(out, index, -left * self.arrays.pod_vector(request)[0])
                        unbound -= left
        else:
            for (pod_set, node), n in pods.items():
                request = requests.get(pod_set)
                index = self.arrays.index.get(node)
                if request is not None and index is not None:
                    _add(out, index, n * self.arrays.pod_vector(request)[0])
        return out


def _add(out: dict[int, Vector], index: int, vector: Vector) -> None:
    if index in out:
        out[index] = out[index] + vector
    else:
        out[index] = vector
