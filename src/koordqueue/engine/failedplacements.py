"""Placements that failed (a try to put a unit's pods on the nodes), answered without trying
again until room they could use grows.

A placement that failed stays failed until room grows on nodes that can take pods of it: as
many of them as it lacked (a node adds to the counts a placement looks at only the pods it
takes). Room only shrinking never makes a failed placement pass, as the scans already assume
for quotas. Growth is the room on a node against what it was when last looked at, so
that a pod that is planned and then bound there (room taken twice, given back once) is
no growth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koordqueue.engine.gangsearch import Unplaced, topology_groups
from koordqueue.engine.model import PodSetInfo
from koordqueue.engine.nodearrays import MANY, NodeArrays, Shape, shape
from koordqueue.engine.nodefilter import rules_key

if TYPE_CHECKING:  # numpy only once there are nodes (lazynumpy.py)
    import numpy as np
    import numpy.typing as npt

    from koordqueue.engine.nodearrays import Matrix
else:
    from koordqueue.engine.lazynumpy import LazyNumpy

    np = LazyNumpy(globals())
Pair = tuple[Shape, object]  # one pod's request and the rules for the nodes it may go to


class PlacementKey:
    """What a placement depends on besides the room (pod sets, counts), hashed once: it is
    looked up at every head of a scan, and its parts nest deep."""

    __slots__ = ("parts", "_hash")

    def __init__(self, parts: tuple[object, ...]) -> None:
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, PlacementKey) and self._hash == other._hash and self.parts == other.parts)


@dataclass(slots=True)
class _Failure:
    """A placement that failed, and what room would have to grow for it to pass."""

    epoch: int  # it failed after the growths up to this one
    unplaced: Unplaced
    pairs: tuple[Pair, ...]  # its pods and their rules
    lacks: int  # with one pair: how many of its pods the nodes (its best domain) lacked; else 1
    checked: int  # the epoch it was last found failing at


class FailedPlacements:
    """The failed placements, and the growth of room on the nodes since each failed."""

    def __init__(self, arrays: NodeArrays) -> None:
        self.arrays = arrays
        # Room that grew: an epoch counts growths; per node, the last epoch it grew at, and
        # the room it had when last looked at (the rows changed since: ``arrays.touched``).
        self.epoch = 0
        self.grown: npt.NDArray[np.int64]
        self.seen: Matrix
        # Per pod and its rules: (the epoch growth was looked at up to, the last epoch a
        # node where one such pod fits grew at or before).
        self.relevant: dict[Pair, tuple[int, int]] = {}
        self.taken: dict[tuple[Pair, int], int] = {}  # (pair, since) -> pods the nodes grown since take
        self.taken_at = 0  # the epoch ``taken`` holds for
        self.failed: dict[PlacementKey, _Failure] = {}

    def forget_all(self) -> None:
        """The nodes changed: every failure and growth is forgotten (``watch`` follows)."""
        self.relevant = {}
        self.taken = {}
        self.failed = {}
        self.epoch += 1

    def watch(self) -> None:
        """Growth counts from the room now (after ``forget_all`` and the arrays' rebuild)."""
        if self.arrays.names:
            self.grown = np.full(len(self.arrays.names), self.epoch, dtype=np.int64)
            self.seen = self.arrays.free.copy()
        self.arrays.touched = set()

    def remember(self, key: PlacementKey, found: Unplaced, pod_sets: Sequence[PodSetInfo],
                 counts: Mapping[str, int] | None) -> None:
        """Keep a failed placement, with what would have to grow for it to pass."""
        self.look()
        pairs = tuple({(shape(ps.request), rules_key(ps)): None for ps in pod_sets
                       if (counts.get(ps.name, ps.count) if counts else ps.count) > 0})
        for pair in pairs:
            if pair not in self.relevant:  # room that grew before now is in this placement already
                self.relevant[pair] = (self.epoch, 0)
        lacks = self._lacks(pod_sets, counts) if len(pairs) == 1 else 1
        self.failed[key] = _Failure(self.epoch, found, pairs, lacks, self.epoch)

    def failing(self, key: PlacementKey) -> Unplaced | None:
        """Why the placement of ``key`` failed, while the room that grew since could not make
        it pass (None: it did not fail, or it may pass now)."""
        failure = self.failed.get(key)
        if failure is None:
            return None
        self.look()
        if failure.checked == self.epoch:
            return failure.unplaced
        for pair in failure.pairs:
            if self._last_growth(pair) > failure.epoch and (
                    failure.lacks <= 1 or self._taken_since(pair, failure.epoch) >= failure.lacks):
                del self.failed[key]
                return None
        failure.checked = self.epoch
        return failure.unplaced

    def look(self) -> None:
        """Mark the nodes whose room grew since it was last looked at."""
        if not self.arrays.touched:
            return
        free, seen = self.arrays.free, self.seen
        touched = self.arrays.touched
        index = np.fromiter(touched, dtype=np.intp, count=len(touched))
        grew = index[(free[index] > seen[index]).any(axis=1)]
        if len(grew):  # an epoch each, in turn
            self.grown[grew] = np.arange(self.epoch + 1, self.epoch + 1 + len(grew))
            self.epoch += len(grew)
        seen[index] = free[index]
        self.arrays.touched = set()

    def _lacks(self, pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None) -> int:
        """How many pods of a placement with one pod shape and one set of rules the nodes lack
        (in its domain that holds the most of them, for a required level): more than that
        must fit on nodes where room grew before it can pass. Pods alike add up, so that
        is exact but for its topology; 1 when unsure."""
        groups = topology_groups(pod_sets, counts)
        if len(groups) != 1:
            return 1
        group = groups[0]
        ps = group.sets[0][0]
        wanted = sum(count for _, count in group.sets)
        vector, cols, missing = self.arrays.pod_vector(ps.request)
        if missing is not None:
            return MANY
        k = self.arrays.count(vector, cols)
        use = self.arrays.mask(ps)
        if group.level is not None and group.required:
            codes, chains = self.arrays.domain_codes(group.level)
            use = use & (codes >= 0)
            if not len(chains) or not use.any():
                return MANY
            most = int(np.bincount(codes[use], weights=k[use], minlength=len(chains)).max())
        else:
            most = int(k[use].sum())
        return max(wanted - most, 1)

    def _taken_since(self, pair: Pair, since: int) -> int:
        """How many pods of ``pair`` the nodes whose room grew after ``since`` take now."""
        if self.taken_at != self.epoch:
            self.taken = {}
            self.taken_at = self.epoch
        known = self.taken.get((pair, since))
        if known is None:
            index = np.flatnonzero(self.grown > since)
            mask = self.arrays.masks.get(pair[1])
            if mask is not None:
                index = index[mask[index]]
            vector, cols, _ = self.arrays.pod_vector(dict(pair[0]))
            known = self.taken[pair, since] = int(self.arrays.count(vector, cols)[index].sum())
        return known

    def _last_growth(self, pair: Pair) -> int:
        """The last epoch room grew at on a node that can take one pod of ``pair``."""
        checked, last = self.relevant.get(pair, (0, self.epoch))
        if checked < self.epoch:
            grown = self.grown
            index = np.flatnonzero(grown > checked)
            if len(index):
                vector, cols, missing = self.arrays.pod_vector(dict(pair[0]))
                if missing is None:
                    mask = self.arrays.masks.get(pair[1])
                    use = index if mask is None else index[mask[index]]
                    if len(use):
                        k = self.arrays.count(vector, cols)[use]
                        if (k > 0).any():
                            last = max(last, int(grown[use][k > 0].max()))
            self.relevant[pair] = (self.epoch, last)
        return last


def placement_key(pod_sets: Sequence[PodSetInfo], counts: Mapping[str, int] | None = None) -> PlacementKey:
    """What a placement of ``pod_sets`` depends on besides the room: units alike place alike."""
    return PlacementKey((tuple((ps.name, ps.count, shape(ps.request), rules_key(ps), ps.topology) for ps in pod_sets),
                     tuple(sorted(counts.items())) if counts else ()))
