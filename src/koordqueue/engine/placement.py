"""Do a unit's pods fit on the nodes now? On which nodes, in which topology domain, and if
not, why not (``Unplaced``, which messages.py turns into words).

Nodes are an input like quotas. The room on a node is its allocatable, minus what the pods
bound to it request (the shell counts them, as kube-scheduler's cache does), minus the pods
of admitted units that are not bound yet (assumed on the nodes planned for them), plus what
the bound pods of units that hold no quota any more request (their jobs are being suspended:
that room is on its way back, and the unit that preempted them counts on it).

A unit fits when all its pods have a node at once (gang). The pods of one pod set go, in
turn, to the nodes that take the most of them (few nodes, so few hops between them), the
last of them to the node that takes what is left with the least room to spare (big holes
kept for big pods). Pod sets that ask for the same topology level go together into one
domain of it, the tightest that holds them all (the fewest of their pods would fit there);
a preferred level falls back to the levels above it, then to anywhere. Arrays over the
nodes keep a check in tens of microseconds on a thousand nodes.

A check that failed stays failed until room grows on nodes that can take pods of it: as
many of them as it lacked (a node adds to the counts a check looks at only the pods it
takes). The failure is kept (``failing``) and answered without a check until then; room
only shrinking never makes a failed check pass, as the scans already assume for quotas.
Growth is the room on a node against what it was when last looked at, so that a pod that
is planned and then bound there (room taken twice, given back once) is no growth.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from koordqueue.api.constants import PODS
from koordqueue.engine.model import (
    NodeInfo,
    Placement,
    PodSetInfo,
    ResourceList,
)
from koordqueue.engine.nodefilter import node_refusal, rules_key

if TYPE_CHECKING:  # numpy only once there are nodes (lazynumpy.py)
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.int64]
    Matrix = npt.NDArray[np.int64]
    Mask = npt.NDArray[np.bool_]
else:
    from koordqueue.engine.lazynumpy import LazyNumpy

    np = LazyNumpy(globals())
Shape = tuple[tuple[str, int], ...]
Chain = tuple[tuple[str, str], ...]  # a domain: the labels that pin it, widest level first
Pair = tuple[Shape, object]  # one pod's request and the rules for the nodes it may go to
ONE_POD = 1000  # a pod takes one of a node's ``pods`` (in milli-units)
MANY = 1 << 40  # pods that fit on a node when they ask for nothing the node counts
DOMAINS_COUNTED = 3  # of the domains that come closest to holding a gang, those counted exactly


class CheckKey:
    """What a check depends on besides the room (pod sets, counts), hashed once: it is
    looked up at every head of a scan, and its parts nest deep."""

    __slots__ = ("parts", "_hash")

    def __init__(self, parts: tuple[object, ...]) -> None:
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, CheckKey) and self._hash == other._hash and self.parts == other.parts)


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
class _Failure:
    """A check that failed, and what room would have to grow for it to pass."""

    epoch: int  # it failed after the growths up to this one
    unplaced: Unplaced
    pairs: tuple[Pair, ...]  # its pods and their rules
    lacks: int  # with one pair: how many of its pods the nodes (its best domain) lacked; else 1
    checked: int  # the epoch it was last found failing at


@dataclass(slots=True)
class _Group:
    """Pod sets placed together: those asking for one topology level, or (``level`` None) the rest."""

    level: str | None
    required: bool
    sets: list[tuple[PodSetInfo, int]] = field(default_factory=list)  # with the count to place


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
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self._columns: dict[str, int] = {}
        self._alloc: Matrix  # these arrays come with the first node (sync)
        self._free: Matrix
        self._vectors: dict[Shape, tuple[Vector, list[int], str | None]] = {}
        self._masks: dict[object, Mask] = {}
        self._domains: dict[str, tuple[npt.NDArray[np.intp], list[Chain]]] = {}
        self._sizes: dict[Shape, float] = {}
        # Room that grew: an epoch counts growths; per node, the last epoch it grew at, and
        # the room it had when last looked at; the nodes whose room changed since.
        self._epoch = 0
        self._grown: npt.NDArray[np.int64]
        self._seen: Matrix
        self._touched: set[int] = set()
        # Per pod and its rules: (the epoch growth was looked at up to, the last epoch a
        # node where one such pod fits grew at or before).
        self._relevant: dict[Pair, tuple[int, int]] = {}
        self._taken: dict[tuple[Pair, int], int] = {}  # (pair, since) -> pods the nodes grown since take
        self._taken_at = 0  # the epoch ``_taken`` holds for
        self._failed: dict[CheckKey, _Failure] = {}
        # The last check that passed, and the room it passed in: ``_version`` counts the
        # changes of ``_free``.
        self._version = 0
        self._passed: tuple[CheckKey, int, Placement] | None = None
        # Per pod vector (by id, as kept in ``_vectors``): how many such pods each node has
        # room for, and how far into ``_log`` (the rows of ``_free`` changed since, in
        # order) that count is current; a check updates only the rows changed since.
        self._counts: dict[int, tuple[npt.NDArray[np.int64], int]] = {}
        self._log: list[int] = []
        self._whole: dict[int, npt.NDArray[np.int64]] = {}  # per pod vector: pods per empty node
        self._rows: dict[str, list[npt.NDArray[np.intp]]] = {}  # level -> each domain's rows
        self._usable: dict[tuple[object, str], Mask] = {}  # (rules, level) -> nodes labelled and allowed

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
        if self._stale or node not in self._index:
            return True
        change = self._vector(old) - self._vector(used)
        index = self._index[node]
        self._free[index] += change
        self._touched.add(index)
        self._log.append(index)
        self._version += 1
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
        self.names = sorted(self._infos)
        self._index = {name: i for i, name in enumerate(self.names)}
        columns = sorted({r for info in self._infos.values() for r in info.allocatable})
        self._columns = {name: i for i, name in enumerate(columns)}
        self._vectors = {}
        self._masks = {}
        self._domains = {}
        self._sizes = {}
        self._relevant = {}
        self._taken = {}
        self._failed = {}
        self._counts = {}
        self._log = []
        self._version += 1
        self._whole = {}
        self._rows = {}
        self._usable = {}
        self._epoch += 1
        self._touched = set()
        self._applied = {}
        if not self.names:  # no row to index: the arrays (and numpy) wait for a node
            return
        self._grown = np.full(len(self.names), self._epoch, dtype=np.int64)
        self._alloc = np.zeros((len(self.names), len(columns)), dtype=np.int64)
        for i, name in enumerate(self.names):
            self._alloc[i] = self._vector(self._infos[name].allocatable)
        self._free = self._alloc.copy()
        for node, used in self._usage.items():
            if node in self._index:
                self._free[self._index[node]] -= self._vector(used)
        for unit in self._requests:
            self._refresh(unit)
        self._seen = self._free.copy()
        self._touched = set()

    def free(self, node: str) -> ResourceList:
        """The room left on ``node`` now (for reports and tests)."""
        self.sync()
        row = self._free[self._index[node]]
        return {name: int(row[i]) for name, i in self._columns.items()}

    def place(
        self,
        pod_sets: Sequence[PodSetInfo],
        counts: Mapping[str, int] | None = None,
        released: Iterable[str] = (),
        key: CheckKey | None = None,
    ) -> Placement | Unplaced:
        """Nodes for every pod of ``pod_sets`` (``counts`` of them, where given), or why not.
        ``released``: units whose room counts as given back (victims about to be preempted).
        A check that failed is answered from ``failing`` until room it could use grows;
        the last that passed, while no room changed since (a queue's scan checks again
        what woke it). ``key``: ``check_key(pod_sets, counts)``, when the caller keeps it."""
        self.sync()
        released = tuple(released)
        if released:
            key = None
        else:
            key = key if key is not None else check_key(pod_sets, counts)
            known = self.failing(key)
            if known is not None:
                return known
            passed = self._passed
            if passed is not None and passed[0] == key and passed[1] == self._version:
                return passed[2]
        found = self._place(pod_sets, counts, released)
        if key is not None and isinstance(found, Placement):
            self._passed = (key, self._version, found)
        if key is not None and isinstance(found, Unplaced):
            self._look()
            pairs = tuple({(_shape(ps.request), rules_key(ps)): None for ps in pod_sets
                           if (counts.get(ps.name, ps.count) if counts else ps.count) > 0})
            for pair in pairs:
                if pair not in self._relevant:  # room that grew before now is in this check already
                    self._relevant[pair] = (self._epoch, 0)
            lacks = self._lacks(pod_sets, counts) if len(pairs) == 1 else 1
            self._failed[key] = _Failure(self._epoch, found, pairs, lacks, self._epoch)
        return found

    def failing(self, key: CheckKey) -> Unplaced | None:
        """Why the check of ``key`` failed, while the room that grew since could not make
        it pass (None: it did not fail, or it may pass now)."""
        self.sync()
        failure = self._failed.get(key)
        if failure is None:
            return None
        self._look()
        if failure.checked == self._epoch:
            return failure.unplaced
        for pair in failure.pairs:
            if self._last_growth(pair) > failure.epoch and (
                    failure.lacks <= 1 or self._taken_since(pair, failure.epoch) >= failure.lacks):
                del self._failed[key]
                return None
        failure.checked = self._epoch
        return failure.unplaced

    def _look(self) -> None:
        """Mark the nodes whose room grew since it was last looked at."""
        if not self._touched:
            return
        free, seen = self._free, self._seen
        index = np.fromiter(self._touched, dtype=np.intp, count=len(self._touched))
        grew = index[(free[index] > seen[index]).any(axis=1)]
        if len(grew):  # an epoch each, in turn
            self._grown[grew] = np.arange(self._epoch + 1, self._epoch + 1 + len(grew))
            self._epoch += len(grew)
        seen[index] = free[index]
        self._touched = set()

    def _lacks(self, pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None) -> int:
        """How many pods of a check with one pod shape and one set of rules the nodes lack
        (in its domain that holds the most of them, for a required level): more than that
        must fit on nodes where room grew before it can pass. Pods alike add up, so that
        is exact but for its topology; 1 when unsure."""
        groups = self._groups(pod_sets, counts)
        if len(groups) != 1:
            return 1
        group = groups[0]
        ps = group.sets[0][0]
        wanted = sum(count for _, count in group.sets)
        vector, cols, missing = self._pod_vector(ps.request)
        if missing is not None:
            return MANY
        k = self._count(vector, cols)
        use = self._mask(ps)
        if group.level is not None and group.required:
            codes, chains = self._domain_codes(group.level)
            use = use & (codes >= 0)
            if not len(chains) or not use.any():
                return MANY
            most = int(np.bincount(codes[use], weights=k[use], minlength=len(chains)).max())
        else:
            most = int(k[use].sum())
        return max(wanted - most, 1)

    def _taken_since(self, pair: Pair, since: int) -> int:
        """How many pods of ``pair`` the nodes whose room grew after ``since`` take now."""
        if self._taken_at != self._epoch:
            self._taken = {}
            self._taken_at = self._epoch
        known = self._taken.get((pair, since))
        if known is None:
            index = np.flatnonzero(self._grown > since)
            mask = self._masks.get(pair[1])
            if mask is not None:
                index = index[mask[index]]
            vector, cols, _ = self._pod_vector(dict(pair[0]))
            known = self._taken[pair, since] = int(self._count(vector, cols)[index].sum())
        return known

    def _last_growth(self, pair: Pair) -> int:
        """The last epoch room grew at on a node that can take one pod of ``pair``."""
        checked, last = self._relevant.get(pair, (0, self._epoch))
        if checked < self._epoch:
            grown = self._grown
            index = np.flatnonzero(grown > checked)
            if len(index):
                vector, cols, missing = self._pod_vector(dict(pair[0]))
                if missing is None:
                    mask = self._masks.get(pair[1])
                    use = index if mask is None else index[mask[index]]
                    if len(use):
                        k = self._count(vector, cols)[use]
                        if (k > 0).any():
                            last = max(last, int(grown[use][k > 0].max()))
            self._relevant[pair] = (self._epoch, last)
        return last

    def _place(self, pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None,
               released: tuple[str, ...]) -> Placement | Unplaced:
        free = self._free
        extra = [self._release_change(unit) for unit in released]
        if any(extra):
            free = free.copy()
            for change in extra:
                for index, vector in change.items():
                    free[index] += vector
        groups = self._groups(pod_sets, counts)
        nodes: list[tuple[str, str, int]] = []
        domains: list[tuple[str, str, Chain]] = []
        last = len(groups) - 1
        for number, group in enumerate(groups):
            found = self._place_group(free, group)
            if isinstance(found, Unplaced):
                return found
            placed, chain = found
            for ps, index, n in placed:
                nodes.append((ps.name, self.names[index], n))
                if number < last:  # the groups after it go where it leaves room (a copy: the room now is kept)
                    if free is self._free:
                        free = free.copy()
                    free[index] -= n * self._pod_vector(ps.request)[0]
            if chain is not None and group.level is not None:
                domains += [(ps.name, chain[-1][0], chain) for ps, _ in group.sets]
        out_counts = tuple((ps.name, counts[ps.name]) for ps in pod_sets if counts and ps.name in counts)
        return Placement(out_counts, tuple(domains), tuple(nodes))

    def most_pods(self, pod_set: PodSetInfo) -> int:
        """How many pods of ``pod_set`` the nodes have room for now, alone (for partial admission)."""
        self.sync()
        vector, cols, missing = self._pod_vector(pod_set.request)
        if missing is not None:
            return 0
        return int(self._count(vector, cols)[self._mask(pod_set)].sum())

    def best_effort(self, pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None) -> Placement:
        """Nodes for as many pods as fit (a unit found holding quota: its pods that are not
        bound yet are assumed somewhere, not nowhere)."""
        self.sync()
        free = self._free.copy()
        nodes: list[tuple[str, str, int]] = []
        for ps in pod_sets:
            vector, cols, missing = self._pod_vector(ps.request)
            if missing is not None:
                continue
            mask = self._mask(ps)
            k = self._fits(free, vector, cols)
            k[~mask] = 0
            want = min(counts.get(ps.name, ps.count) if counts else ps.count, int(k.sum()))
            if want <= 0:
                continue
            for index, n in _pack(k, want):
                nodes.append((ps.name, self.names[index], n))
                free[index] -= n * vector
        return Placement(nodes=tuple(nodes))

    # --- placing ----------------------------------------------------------------------
    def _groups(self, pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None) -> list[_Group]:
        """Topology groups first (the most constrained), in the order the pod sets name them."""
        groups: dict[tuple[str, bool] | None, _Group] = {}
        for ps in pod_sets:
            count = counts.get(ps.name, ps.count) if counts else ps.count
            if count <= 0:
                continue
            topology = ps.topology
            key = None if topology is None else (topology.level, topology.required)
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group(None if topology is None else topology.level,
                                             topology is not None and topology.required)
            group.sets.append((ps, count))
        plain = groups.pop(None, None)
        return [*groups.values(), *([plain] if plain is not None else [])]

    def _place_group(self, free: Matrix, group: _Group) -> tuple[list[tuple[PodSetInfo, int, int]], Chain | None] | Unplaced:
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
        wider = list(reversed(self.levels[: self.levels.index(level)])) if level in self.levels else []
        return [level, *wider, None]

    def _place_in_domain(
        self, free: Matrix, sets: list[tuple[PodSetInfo, int]], level: str, explain: bool = True
    ) -> tuple[list[tuple[PodSetInfo, int, int]], Chain] | Unplaced | None:
        """The tightest domain of ``level`` that holds ``sets``, and where in it; else why
        not (None without ``explain``)."""
        codes, chains = self._domain_codes(level)
        caps: list[npt.NDArray[np.int64]] = []
        fitting = np.ones(len(chains), dtype=np.bool_)
        total = sum(count for _, count in sets)
        held = np.zeros(len(chains), dtype=np.int64)  # of all their pods, how many each domain holds
        known: dict[int, npt.NDArray[np.int64]] = {}  # pod sets alike (a master, its workers): one count
        for ps, count in sets:
            vector, cols, missing = self._pod_vector(ps.request)
            if missing is not None:
                return self._unplaced(free, ps, count, None) if explain else None
            k = known.get(id(vector))
            if k is None:
                k = known[id(vector)] = self._count(vector, cols) if free is self._free else \
                    self._fits(free, vector, cols)
            use = self._usable_in(ps, level)
            cap = np.bincount(codes[use], weights=np.minimum(k[use], count), minlength=len(chains)).astype(np.int64)
            caps.append(cap)
            fitting &= cap >= count
            held += np.minimum(cap, count)
        main = max(range(len(sets)), key=lambda i: sets[i][1])
        candidates = np.flatnonzero(fitting)
        rows_of = self._domain_rows(level)
        for domain in candidates[np.lexsort((candidates, caps[main][candidates]))].tolist():
            rows = rows_of[domain]
            found = self._pack_rows(free[rows], sets, rows, known if free is self._free else None)
            if found is not None:
                return found, chains[domain]
        if not explain:
            return None
        if not len(chains):
            return Unplaced(sets[0][0].name, total, _shape(sets[0][0].request), 0, level=level)
        # ``held`` counts each pod set on the whole domain: an upper bound when they share it.
        # The few domains it ranks first are counted pod set after pod set.
        domains = np.arange(len(chains))
        ranked = domains[np.lexsort((domains, -held))][:DOMAINS_COUNTED].tolist()
        room, best = max((self._room_in(free, sets, rows_of[d]), -d) for d in ranked)
        return Unplaced(sets[0][0].name if len(sets) == 1 else "", total, _shape(sets[0][0].request),
                        room, level=level, domain=chains[-best][-1][1])

    def _room_in(self, free: Matrix, sets: list[tuple[PodSetInfo, int]], rows: npt.NDArray[np.intp]) -> int:
        """Of the pods of ``sets``, how many fit on the nodes ``rows`` together (the
        biggest pods first, as they are placed)."""
        scratch = free[rows]
        room = 0
        for ps, count in sorted(sets, key=lambda item: -self._size(item[0].request)):
            vector, cols, missing = self._pod_vector(ps.request)
            if missing is not None:
                continue
            k = self._fits(scratch, vector, cols)
            k[~self._mask(ps)[rows]] = 0
            n = min(int(k.sum()), count)
            if n > 0:
                for index, m in _pack(k, n):
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
            sets = sorted(sets, key=lambda item: -self._size(item[0].request))
        for ps, count in sets:
            vector, cols, missing = self._pod_vector(ps.request)
            if missing is not None:
                return None
            whole = known.get(id(vector)) if known is not None and not placed else None
            k = whole[rows] if whole is not None else self._fits(scratch, vector, cols)
            k[~self._mask(ps)[rows]] = 0
            if int(k.sum()) < count:
                return None
            for index, n in _pack(k, count):
                placed.append((ps, int(rows[index]), n))
                scratch[index] -= n * vector
        return placed

    def _pack_sets(
        self, free: Matrix, sets: list[tuple[PodSetInfo, int]], within: Mask | None
    ) -> list[tuple[PodSetInfo, int, int]] | Unplaced:
        """Each pod set in turn, on what the ones before it left (``free`` is a scratch copy
        when there is more than one)."""
        placed: list[tuple[PodSetInfo, int, int]] = []
        now = free is self._free  # the counts kept per pod vector hold until a pod is placed
        many = len(sets) > 1
        scratch = free.copy() if many else free
        if many:  # the biggest pods first: the small ones fill the holes they leave
            sets = sorted(sets, key=lambda item: -self._size(item[0].request))
        # Per pod vector: how many such pods each node of ``scratch`` has room for, brought
        # up to date on the nodes each pod set takes (pod sets alike: a master, its workers).
        known: dict[int, tuple[npt.NDArray[np.int64], Vector, list[int]]] = {}
        for ps, count in sets:
            vector, cols, missing = self._pod_vector(ps.request)
            if missing is not None:
                return self._unplaced(scratch, ps, count, within)
            mask = self._mask(ps) if within is None else self._mask(ps) & within
            entry = known.get(id(vector))
            if entry is not None:
                room = entry[0]
            else:
                room = self._count(vector, cols) if now and not placed else self._fits(scratch, vector, cols)
                if many:
                    room = known.setdefault(id(vector), (room.copy(), vector, cols))[0]
            k = np.where(mask, room, 0)
            if int(k.sum()) < count:
                return self._unplaced(scratch, ps, count, within)
            taken = _pack(k, count)
            for index, n in taken:
                placed.append((ps, index, n))
                if many:
                    scratch[index] -= n * vector
            if many:
                rows = np.array([index for index, _ in taken], dtype=np.intp)
                for counted, other, other_cols in known.values():
                    counted[rows] = self._fits(scratch[rows], other, other_cols)
        return placed

    def _unplaced(self, free: Matrix, ps: PodSetInfo, count: int, within: Mask | None) -> Unplaced:
        """Why the pods of ``ps`` do not all fit: the numbers for the message."""
        asked = _shape(ps.request)
        vector, cols, missing = self._pod_vector(ps.request)
        mask = self._mask(ps)
        if within is not None:
            mask = mask & within
        if not mask.any():
            return Unplaced(ps.name, count, asked, 0, shut_out=self._shut_out(ps))
        if missing is not None:
            return Unplaced(ps.name, count, asked, 0, resource=missing, never=True)
        k = self._count(vector, cols) if free is self._free else self._fits(free, vector, cols)
        room = int(k[mask].sum())
        whole = self._whole.get(id(vector))
        if whole is None:
            whole = self._whole[id(vector)] = self._fits(self._alloc, vector, cols)
        never = int(whole[mask].sum()) < count
        if room > 0:
            return Unplaced(ps.name, count, asked, room, never=never)
        index = np.flatnonzero(mask)
        lacking: tuple[float, str, int, int] | None = None  # (best free / asked, resource, most free, node)
        for name, col in self._columns.items():
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
                        node=self.names[node], never=never)

    def _shut_out(self, ps: PodSetInfo) -> tuple[tuple[str, int], ...]:
        """Why no node may take pods of ``ps``: the first rule each node breaks, counted."""
        reasons: dict[str, int] = {}
        for name in self.names:
            refusal = node_refusal(self._infos[name], ps)
            if refusal is not None:
                reasons[refusal.reason] = reasons.get(refusal.reason, 0) + 1
        return tuple(sorted(reasons.items(), key=lambda item: (-item[1], item[0])))

    # --- arrays -------------------------------------------------------------------------
    def _vector(self, amounts: ResourceList) -> Vector:
        vector = np.zeros(len(self._columns), dtype=np.int64)
        for name, amount in amounts.items():
            col = self._columns.get(name)
            if col is not None:
                vector[col] = amount
        return vector

    def _pod_vector(self, request: ResourceList) -> tuple[Vector, list[int], str | None]:
        """One pod's request over the columns (a pod slot included), the columns it asks
        for, and a resource it asks for that no node has (None: none)."""
        shape = _shape(request)
        known = self._vectors.get(shape)
        if known is None:
            with_pod = {**request, PODS: request.get(PODS, 0) + ONE_POD} if PODS in self._columns else request
            vector = self._vector(with_pod)
            missing = next((n for n, a in sorted(request.items()) if a > 0 and n not in self._columns), None)
            known = self._vectors[shape] = (vector, np.flatnonzero(vector > 0).tolist(), missing)
        return known

    def _size(self, request: ResourceList) -> float:
        """A pod's size: the largest share of a node's allocatable it asks for."""
        shape = _shape(request)
        known = self._sizes.get(shape)
        if known is None:
            vector, cols, _ = self._pod_vector(request)
            biggest = self._alloc.max(axis=0) if len(self._alloc) else vector
            known = self._sizes[shape] = max((int(vector[c]) / max(int(biggest[c]), 1) for c in cols), default=0.0)
        return known

    def _count(self, vector: Vector, cols: list[int]) -> npt.NDArray[np.int64]:
        """``_fits`` on the room now, kept per pod vector and brought up to date on the rows
        changed since it was last asked for (read only: callers copy before writing)."""
        log = self._log
        known = self._counts.get(id(vector))
        if known is None:
            k = self._fits(self._free, vector, cols)
        else:
            k, seen = known
            if seen < len(log):
                changed = np.array(log[seen:], dtype=np.intp)  # a row twice is counted twice alike
                if 2 * len(changed) >= len(k):
                    k = self._fits(self._free, vector, cols)
                else:
                    k = k.copy()
                    k[changed] = self._fits(self._free[changed], vector, cols)
        if len(log) > 4 * max(len(self.names), 64):  # trim: what is behind every count
            self._counts = {}
            log.clear()
        self._counts[id(vector)] = (k, len(log))
        return k

    def _domain_rows(self, level: str) -> list[npt.NDArray[np.intp]]:
        """The rows of each domain of ``level``, in the order of ``_domain_codes``."""
        rows = self._rows.get(level)
        if rows is None:
            codes, chains = self._domain_codes(level)
            order = np.argsort(codes, kind="stable")
            bounds = np.searchsorted(codes[order], np.arange(len(chains) + 1))
            rows = self._rows[level] = [order[bounds[d]:bounds[d + 1]] for d in range(len(chains))]
        return rows

    def _usable_in(self, ps: PodSetInfo, level: str) -> Mask:
        """The nodes pods of ``ps`` may go to that have a domain of ``level``."""
        key = (rules_key(ps), level)
        mask = self._usable.get(key)
        if mask is None:
            mask = self._usable[key] = self._mask(ps) & (self._domain_codes(level)[0] >= 0)
        return mask

    @staticmethod
    def _fits(free: Matrix, vector: Vector, cols: list[int]) -> npt.NDArray[np.int64]:
        """How many pods of ``vector`` each node has room for."""
        if not cols:
            return np.full(len(free), MANY, dtype=np.int64)
        k: npt.NDArray[np.int64] = (free[:, cols] // vector[cols]).min(axis=1)
        return np.maximum(k, 0)

    def _mask(self, ps: PodSetInfo) -> Mask:
        """The nodes the pods of ``ps`` may go to (selector, affinity, taints)."""
        key = rules_key(ps)
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks[key] = np.array(
                [node_refusal(self._infos[name], ps) is None for name in self.names], dtype=np.bool_)
        return mask

    def _domain_codes(self, level: str) -> tuple[npt.NDArray[np.intp], list[Chain]]:
        """Each node's domain of ``level`` (-1: none), and the domains in order. A configured
        level's domain is named by the levels above it too (rack 1 of zone a is not rack 1
        of zone b)."""
        known = self._domains.get(level)
        if known is not None:
            return known
        above = self.levels[: self.levels.index(level)] if level in self.levels else ()
        keys: list[Chain | None] = []
        for name in self.names:
            labels = self._infos[name].labels
            value = labels.get(level)
            keys.append(None if value is None else
                        tuple((upper, labels[upper]) for upper in above if upper in labels) + ((level, value),))
        chains = sorted({key for key in keys if key is not None})
        number = {chain: i for i, chain in enumerate(chains)}
        codes = np.array([-1 if key is None else number[key] for key in keys], dtype=np.intp)
        self._domains[level] = (codes, chains)
        return codes, chains

    # --- what units add to the room -------------------------------------------------------
    def _refresh(self, unit: str) -> bool:
        """Apply the unit's part of the room anew; True when room grew somewhere."""
        if self._stale:
            return True
        old = self._applied.pop(unit, {})
        new = self._contribution(unit, unit in self._plans)
        grew = False
        for index, vector in old.items():
            self._free[index] -= vector
            self._touched.add(index)
            self._log.append(index)
            self._version += 1
            grew = grew or bool((vector < 0).any())
        for index, vector in new.items():
            self._free[index] += vector
            self._touched.add(index)
            self._log.append(index)
            self._version += 1
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
                    index = self._index.get(node)
                    if left > 0 and index is not None:
                        _add(out, index, -left * self._pod_vector(request)[0])
                        unbound -= left
        else:
            for (pod_set, node), n in pods.items():
                request = requests.get(pod_set)
                index = self._index.get(node)
                if request is not None and index is not None:
                    _add(out, index, n * self._pod_vector(request)[0])
        return out


def _add(out: dict[int, Vector], index: int, vector: Vector) -> None:
    if index in out:
        out[index] = out[index] + vector
    else:
        out[index] = vector


def _pack(k: npt.NDArray[np.int64], count: int) -> list[tuple[int, int]]:
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


def check_key(pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None = None) -> CheckKey:
    """What a check of ``pod_sets`` depends on besides the room: units alike check alike."""
    return CheckKey((tuple((ps.name, ps.count, _shape(ps.request), rules_key(ps), ps.topology) for ps in pod_sets),
                     tuple(sorted(counts.items())) if counts else ()))


def _shape(request: ResourceList) -> Shape:
    return tuple(sorted((name, amount) for name, amount in request.items() if amount))
