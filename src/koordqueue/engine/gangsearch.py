"""The gang placement search: nodes for all the pods of a unit at once, or why not.

The pods of one pod set go, in turn, to the nodes that take the most of them (few nodes,
so few hops between them), the last of them to the node that takes what is left with the
least room to spare (big holes kept for big pods). Pod sets that ask for the same
topology level go together into one domain of it, the tightest that holds them all (the
fewest of their pods would fit there); a preferred level falls back to the levels above
it, then to anywhere. It reads the room (nodearrays.py) and never writes it: scratch
copies hold what earlier pod sets took.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from koordqueue.engine.model import Placement, PodSetInfo
from koordqueue.engine.nodearrays import MANY, Chain, NodeArrays, Shape, fits, shape

if TYPE_CHECKING:  # numpy only once there are nodes (lazynumpy.py)
    import numpy as np
    import numpy.typing as npt

    from koordqueue.engine.nodearrays import Mask, Matrix, Vector
else:
    from koordqueue.engine.lazynumpy import LazyNumpy

    np = LazyNumpy(globals())
DOMAINS_COUNTED = 3  # of the domains that come closest to holding a gang, those counted exactly


@dataclass(frozen=True, slots=True)
class Unplaced:
    """Why the pods of a unit that fits its quota have no nodes now."""

    pod_set: str
    count: int  # its pods to place
    asked: Shape  # one pod's request
    room: int  # of them, how many the nodes (or, with ``level``, its best domain) have room for
    resource: str | None = None  # with no room at all: what one pod lacks on every node it may use
    most: int = 0  # the most of ``resource`` free on one such node
    node: str | None = None  # that node
    shut_out: tuple[tuple[str, int], ...] = ()  # no node may take them at all: why, on how many nodes
    level: str | None = None  # a required topology level: no domain of it holds them all
    domain: str | None = None  # its best domain (``room`` is counted there)
    never: bool = False  # not even on empty nodes


@dataclass(slots=True)
class Group:
    """Pod sets placed together: those asking for one topology level, or (``level`` None) the rest."""

    level: str | None
    required: bool
    sets: list[tuple[PodSetInfo, int]] = field(default_factory=list)  # with the count to place


class GangSearch:
    """Where the pods of a unit go on the nodes of ``arrays``, all or none."""

    def __init__(self, arrays: NodeArrays) -> None:
        self.arrays = arrays

    def place(self, pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None,
              free: Matrix) -> Placement | Unplaced:
        """Nodes for every pod of ``pod_sets`` in the room ``free`` (the room now, or a copy
        with victims' room given back), or why not."""
        groups = topology_groups(pod_sets, counts)
        nodes: list[tuple[str, str, int]] = []
        domains: list[tuple[str, str, Chain]] = []
        last = len(groups) - 1
        for number, group in enumerate(groups):
            found = self._place_group(free, group)
            if isinstance(found, Unplaced):
                return found
            placed, chain = found
            for ps, index, n in placed:
                nodes.append((ps.name, self.arrays.names[index], n))
                if number < last:  # the groups after it go where it leaves room (a copy: the room now is kept)
                    if free is self.arrays.free:
                        free = free.copy()
                    free[index] -= n * self.arrays.pod_vector(ps.request)[0]
            if chain is not None and group.level is not None:
                domains += [(ps.name, chain[-1][0], chain) for ps, _ in group.sets]
        out_counts = tuple((ps.name, counts[ps.name]) for ps in pod_sets if counts and ps.name in counts)
        return Placement(out_counts, tuple(domains), tuple(nodes))

    def most_pods(self, pod_set: PodSetInfo) -> int:
        """How many pods of ``pod_set`` the nodes have room for now, alone (for partial admission)."""
        vector, cols, missing = self.arrays.pod_vector(pod_set.request)
        if missing is not None:
            return 0
        return int(self.arrays.count(vector, cols)[self.arrays.mask(pod_set)].sum())

    def best_effort(self, pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None) -> Placement:
        """Nodes for as many pods as fit (a unit found holding quota: its pods that are not
        bound yet are assumed somewhere, not nowhere)."""
        free = self.arrays.free.copy()
        nodes: list[tuple[str, str, int]] = []
        for ps in pod_sets:
            vector, cols, missing = self.arrays.pod_vector(ps.request)
            if missing is not None:
                continue
            mask = self.arrays.mask(ps)
            k = fits(free, vector, cols)
            k[~mask] = 0
            want = min(counts.get(ps.name, ps.count) if counts else ps.count, int(k.sum()))
            if want <= 0:
                continue
            for index, n in pack(k, want):
                nodes.append((ps.name, self.arrays.names[index], n))
                free[index] -= n * vector
        return Placement(nodes=tuple(nodes))

    def _place_group(self, free: Matrix, group: Group) -> tuple[list[tuple[PodSetInfo, int, int]], Chain | None] | Unplaced:
        if group.level is None:
            found = self._pack_sets(free, group.sets, None)
            return (found, None) if not isinstance(found, Unplaced) else found
        first: Unplaced | None = None
        for level in self._levels_to_try(group.level, group.required):
            if level is None:  # preferred, and no domain holds them: anywhere
                found = self._pack_sets(free, group.sets, None)
                return (found, None) if not isinstance(found, Unplaced) else found
            # Preferred: the fallback answers when no domain holds them, why not is not asked.
            in_domain = self._place_in_domain(free, group.sets, level, explain=group.required)
            if in_domain is not None and not isinstance(in_domain, Unplaced):
                return in_domain
            first = first or in_domain
        assert first is not None
        return first

    def _levels_to_try(self, level: str, required: bool) -> list[str | None]:
        if required:
            return [level]
        wider = self.arrays.wider_levels(level)
        return [level, *wider, None]

    def _place_in_domain(
        self, free: Matrix, sets: list[tuple[PodSetInfo, int]], level: str, explain: bool = True
    ) -> tuple[list[tuple[PodSetInfo, int, int]], Chain] | Unplaced | None:
        """The tightest domain of ``level`` that holds ``sets``, and where in it; else why
        not (None without ``explain``)."""
        codes, chains = self.arrays.domain_codes(level)
        caps: list[npt.NDArray[np.int64]] = []
        fitting = np.ones(len(chains), dtype=np.bool_)
        total = sum(count for _, count in sets)
        held = np.zeros(len(chains), dtype=np.int64)  # of all their pods, how many each domain holds
        known: dict[int, npt.NDArray[np.int64]] = {}  # pod sets alike (a master, its workers): one count
        for ps, count in sets:
            vector, cols, missing = self.arrays.pod_vector(ps.request)
            if missing is not None:
                return self._unplaced(free, ps, count, None) if explain else None
            k = known.get(id(vector))
            if k is None:
                k = known[id(vector)] = self.arrays.count(vector, cols) if free is self.arrays.free else \
                    fits(free, vector, cols)
            use = self.arrays.usable_in(ps, level)
            cap = np.bincount(codes[use], weights=np.minimum(k[use], count), minlength=len(chains)).astype(np.int64)
            caps.append(cap)
            fitting &= cap >= count
            held += np.minimum(cap, count)
        main = max(range(len(sets)), key=lambda i: sets[i][1])
        candidates = np.flatnonzero(fitting)
        rows_of = self.arrays.domain_rows(level)
        for domain in candidates[np.lexsort((candidates, caps[main][candidates]))].tolist():
            rows = rows_of[domain]
            found = self._pack_rows(free[rows], sets, rows, known if free is self.arrays.free else None)
            if found is not None:
                return found, chains[domain]
        if not explain:
            return None
        if not len(chains):
            return Unplaced(sets[0][0].name, total, shape(sets[0][0].request), 0, level=level)
        # ``held`` counts each pod set on the whole domain: an upper bound when they share it.
        # The few domains it ranks first are counted pod set after pod set.
        domains = np.arange(len(chains))
        ranked = domains[np.lexsort((domains, -held))][:DOMAINS_COUNTED].tolist()
        room, best = max((self._room_in(free, sets, rows_of[d]), -d) for d in ranked)
        return Unplaced(sets[0][0].name if len(sets) == 1 else "", total, shape(sets[0][0].request),
                        room, level=level, domain=chains[-best][-1][1])

    def _room_in(self, free: Matrix, sets: list[tuple[PodSetInfo, int]], rows: npt.NDArray[np.intp]) -> int:
        """Of the pods of ``sets``, how many fit on the nodes ``rows`` together (the
        biggest pods first, as they are placed)."""
        scratch = free[rows]
        room = 0
        for ps, count in sorted(sets, key=lambda item: -self.arrays.size(item[0].request)):
            vector, cols, missing = self.arrays.pod_vector(ps.request)
            if missing is not None:
                continue
            k = fits(scratch, vector, cols)
            k[~self.arrays.mask(ps)[rows]] = 0
            n = min(int(k.sum()), count)
            if n > 0:
                for index, m in pack(k, n):
                    scratch[index] -= m * vector
                room += n
        return room

    def _pack_rows(
        self, scratch: Matrix, sets: list[tuple[PodSetInfo, int]], rows: npt.NDArray[np.intp],
        known: dict[int, npt.NDArray[np.int64]] | None = None,
    ) -> list[tuple[PodSetInfo, int, int]] | None:
        """``_pack_sets`` on the nodes ``rows`` alone (a domain), ``scratch`` their room
        (a copy): None when they do not fit. ``known``: per pod vector, the counts on all
        nodes for the room ``scratch`` starts from (good until a pod is placed)."""
        placed: list[tuple[PodSetInfo, int, int]] = []
        if len(sets) > 1:
            sets = sorted(sets, key=lambda item: -self.arrays.size(item[0].request))
        for ps, count in sets:
            vector, cols, missing = self.arrays.pod_vector(ps.request)
            if missing is not None:
                return None
            whole = known.get(id(vector)) if known is not None and not placed else None
            k = whole[rows] if whole is not None else fits(scratch, vector, cols)
            k[~self.arrays.mask(ps)[rows]] = 0
            if int(k.sum()) < count:
                return None
            for index, n in pack(k, count):
                placed.append((ps, int(rows[index]), n))
                scratch[index] -= n * vector
        return placed

    def _pack_sets(
        self, free: Matrix, sets: list[tuple[PodSetInfo, int]], within: Mask | None
    ) -> list[tuple[PodSetInfo, int, int]] | Unplaced:
        """Each pod set in turn, on what the ones before it left (``free`` is a scratch copy
        when there is more than one)."""
        placed: list[tuple[PodSetInfo, int, int]] = []
        now = free is self.arrays.free  # the counts kept per pod vector hold until a pod is placed
        many = len(sets) > 1
        scratch = free.copy() if many else free
        if many:  # the biggest pods first: the small ones fill the holes they leave
            sets = sorted(sets, key=lambda item: -self.arrays.size(item[0].request))
        # Per pod vector: how many such pods each node of ``scratch`` has room for, brought
        # up to date on the nodes each pod set takes (pod sets alike: a master, its workers).
        known: dict[int, tuple[npt.NDArray[np.int64], Vector, list[int]]] = {}
        for ps, count in sets:
            vector, cols, missing = self.arrays.pod_vector(ps.request)
            if missing is not None:
                return self._unplaced(scratch, ps, count, within)
            mask = self.arrays.mask(ps) if within is None else self.arrays.mask(ps) & within
            entry = known.get(id(vector))
            if entry is not None:
                room = entry[0]
            else:
                room = self.arrays.count(vector, cols) if now and not placed else fits(scratch, vector, cols)
                if many:
                    room = known.setdefault(id(vector), (room.copy(), vector, cols))[0]
            k = np.where(mask, room, 0)
            if int(k.sum()) < count:
                return self._unplaced(scratch, ps, count, within)
            taken = pack(k, count)
            for index, n in taken:
                placed.append((ps, index, n))
                if many:
                    scratch[index] -= n * vector
            if many:
                rows = np.array([index for index, _ in taken], dtype=np.intp)
                for counted, other, other_cols in known.values():
                    counted[rows] = fits(scratch[rows], other, other_cols)
        return placed

    def _unplaced(self, free: Matrix, ps: PodSetInfo, count: int, within: Mask | None) -> Unplaced:
        """Why the pods of ``ps`` do not all fit: the numbers for the message."""
        asked = shape(ps.request)
        vector, cols, missing = self.arrays.pod_vector(ps.request)
        mask = self.arrays.mask(ps)
        if within is not None:
            mask = mask & within
        if not mask.any():
            return Unplaced(ps.name, count, asked, 0, shut_out=self.arrays.shut_out(ps))
        if missing is not None:
            return Unplaced(ps.name, count, asked, 0, resource=missing, never=True)
        k = self.arrays.count(vector, cols) if free is self.arrays.free else fits(free, vector, cols)
        room = int(k[mask].sum())
        whole = self.arrays.on_empty(vector, cols)
        never = int(whole[mask].sum()) < count
        if room > 0:
            return Unplaced(ps.name, count, asked, room, never=never)
        index = np.flatnonzero(mask)
        lacking: tuple[float, str, int, int] | None = None  # (best free / asked, resource, most free, node)
        for name, col in self.arrays.columns.items():
            amount = int(vector[col])
            if amount <= 0:
                continue
            column = free[index, col]
            best = int(np.argmax(column))
            most = int(column[best])
            if most < amount and (lacking is None or most / amount < lacking[0]):
                lacking = (most / amount, name, most, int(index[best]))
        if lacking is None:  # every resource is free somewhere, never all on one node
            return Unplaced(ps.name, count, asked, 0, never=never)
        _, resource, most, node = lacking
        return Unplaced(ps.name, count, asked, 0, resource=resource, most=max(most, 0),
                        node=self.arrays.names[node], never=never)


def topology_groups(pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None) -> list[Group]:
    """Topology groups first (the most constrained), in the order the pod sets name them."""
    groups: dict[tuple[str, bool] | None, Group] = {}
    for ps in pod_sets:
        count = counts.get(ps.name, ps.count) if counts else ps.count
        if count <= 0:
            continue
        topology = ps.topology
        key = None if topology is None else (topology.level, topology.required)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(None if topology is None else topology.level,
                                         topology is not None and topology.required)
        group.sets.append((ps, count))
    plain = groups.pop(None, None)
    return [*groups.values(), *([plain] if plain is not None else [])]


def pack(k: npt.NDArray[np.int64], count: int) -> list[tuple[int, int]]:
    """Spread ``count`` pods on nodes with room for ``k`` each (their sum is enough): the
    nodes that take the most first, the rest on the node it fills best (nodes that take
    none are never chosen: they are left out before sorting, in their order)."""
    some = np.flatnonzero(k > 0)
    order = some[np.argsort(-k[some], kind="stable")]
    ordered = k[order]
    total = np.cumsum(ordered)
    p = int(np.searchsorted(total, count))  # the first place where the sum reaches count
    done = int(total[p - 1]) if p else 0
    rest = count - done
    tail = ordered[p:]
    last = p + int(np.argmin(np.where(tail >= rest, tail, MANY)))
    out = [(int(order[i]), int(ordered[i])) for i in range(p)]
    out.append((int(order[last]), rest))
    return out
