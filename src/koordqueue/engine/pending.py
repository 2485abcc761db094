"""The pending units of one queue, in admission order, split by request.

Order is priority (high first), creation time, namespace, name. Units with the same
request form one *stream*, already in that order. Capacity only shrinks while a queue
is scanned, so once the first unit of a stream does not fit, none of the later ones
(same request, same or lower priority) can: a scan merges the stream heads and drops a
whole stream at its first misfit. A cycle therefore costs O(admissions + streams),
not O(pending units), however long the queue.

Units placed on nodes form a stream per request *and* pod rules, so one request may have
many streams. Those of one request (and, elastic, one least request) form a *group*: a
scan takes the heads of a group in order, and when one does not fit its quota, the rest
of the group (same request, same or lower priority) cannot either and is dropped with it
(``Heads``), so a scan costs about as much as with one stream per request.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from koordqueue.engine.model import PodSetInfo


class Entry(NamedTuple):
    """Sort key of a pending unit (a tuple: compared field by field)."""

    neg_priority: int  # -priority: the highest first
    created: float
    namespace: str
    name: str
    key: str  # the unit's

Shape = tuple[tuple[str, object], ...]
"""A request as a hashable value: for a non-preemptible unit ``PINNED``, then sorted
(resource, amount) pairs, then, for a unit whose pods are placed on nodes, what its pod
sets ask for (units alike fit alike)."""
POD_SETS = "\x00pod-sets"  # the key of the pod sets' part of a shape, after the resources
LEAST = "\x00least"  # in a group of elastic streams: their least request
# First in the shape of a non-preemptible unit: it is held to min as well (fit.py), so it
# fits less often than a preemptible unit of the same request: they are not one stream.
PINNED: tuple[str, object] = ("\x00non-preemptible", "")


def shape_of(request: dict[str, int], pod_sets: Sequence[PodSetInfo] = (), preemptible: bool = True) -> Shape:
    shape: Shape
    if len(request) == 1:  # the common case, without a sort
        ((name, amount),) = request.items()
        shape = ((name, amount),) if amount else ()
    else:
        shape = tuple(sorted((name, amount) for name, amount in request.items() if amount))
    if not preemptible:
        shape = (PINNED, *shape)
    if pod_sets:
        shape += ((POD_SETS, tuple(
            (ps.name, ps.count, ps.min_count, tuple(sorted(ps.request.items())), ps.node_selector, ps.affinity,
             ps.tolerations, ps.topology) for ps in pod_sets)),)
    return shape


def group_of(shape: Shape) -> Shape:
    """The group of a stream: its request, and for elastic pod sets its least request."""
    if not shape or shape[-1][0] != POD_SETS:
        return shape
    pod_sets = shape[-1][1]
    assert isinstance(pod_sets, tuple)
    least: dict[str, object] | None = None
    for _, count, fewest, request, *_ in pod_sets:
        if fewest is not None and fewest < count:
            least = dict(shape[:-1]) if least is None else least
            for name, amount in request:
                left = least.get(name, 0)
                assert isinstance(left, int)
                least[name] = left - (count - fewest) * amount
    if least is None:
        return shape[:-1]
    return (*shape[:-1], (LEAST, tuple(sorted(least.items()))))


def least_of(group: Shape) -> dict[str, int]:
    """The least request of the units of a group (``group_of``): with their elastic pod sets at their min."""
    pairs = group[-1][1] if group and group[-1][0] == LEAST else group
    assert isinstance(pairs, tuple)
    return {name: amount for name, amount in pairs if isinstance(amount, int)}


class Head(NamedTuple):
    """The first unit of a stream, its stream, and the least request of its group (a
    tuple: heads are kept sorted, and compared, by entry)."""

    entry: Entry
    shape: Shape
    least: dict[str, int]


class Heads:
    """The first unit of every stream, merged in admission order a group at a time (see
    the module doc)."""

    __slots__ = ("_groups", "_top", "_last", "_least", "_own")

    def __init__(self, groups: dict[Shape, list[Head]]) -> None:
        # Each group's heads come sorted (``PendingQueue`` keeps them so): a sorted list is
        # a heap already. The lists are the queue's, which it never changes in place (it
        # makes new ones): one is copied only before this scan changes it (``_own``), and
        # most scans take a group's one head without changing its list.
        heads = dict(groups)
        self._groups = heads
        self._top = [(items[0].entry, group) for group, items in heads.items()]
        heapq.heapify(self._top)
        self._last: Shape = ()
        self._least: dict[str, int] = {}
        self._own: set[Shape] = set()  # groups whose list is this scan's copy

    def peek(self) -> Head | None:
        """The next head in admission order (entries of the top heap left behind by a
        group's change are dropped here)."""
        top, groups = self._top, self._groups
        while top:
            entry, group = top[0]
            items = groups.get(group)
            if items and items[0].entry == entry:
                return items[0]
            heapq.heappop(top)
        return None

    def pop(self) -> None:
        """Take the head ``peek`` gave."""
        entry, group = self._top[0]
        self._last = group
        groups = self._groups
        items = groups[group]
        if len(items) == 1:  # its last head: the group goes, its list untouched
            self._least = items[0].least
            heapq.heappop(self._top)
            del groups[group]
            return
        if group not in self._own:
            items = groups[group] = items[:]
            self._own.add(group)
        self._least = heapq.heappop(items).least
        heapq.heapreplace(self._top, (items[0].entry, group))

    def push(self, entry: Entry, shape: Shape) -> None:
        """The next unit of the stream of the head taken last."""
        group = self._last
        items = self._groups.get(group)
        if items is None or group not in self._own:
            items = self._groups[group] = [] if items is None else items[:]
            self._own.add(group)
        heapq.heappush(items, Head(entry, shape, self._least))
        if items[0].entry == entry:
            heapq.heappush(self._top, (entry, group))

    def drop_group(self) -> list[Entry]:
        """Drop the rest of the group of the head taken last: they wait as it does."""
        items = self._groups.pop(self._last, [])
        return [item.entry for item in items]

    def clear(self) -> None:
        self._groups = {}
        self._top = []


class PendingQueue:
    """Sorted streams of pending units, and per group the first unit of each of its
    streams, sorted; insert and remove in O(log n) plus a memmove. A group's list of
    heads is replaced, never changed in place, so that a scan's ``Heads`` can share it."""

    __slots__ = ("_streams", "_heads", "_group_of", "_least", "_size")

    def __init__(self) -> None:
        self._streams: dict[Shape, list[Entry]] = {}
        self._heads: dict[Shape, list[Head]] = {}
        self._group_of: dict[Shape, Shape] = {}
        self._least: dict[Shape, dict[str, int]] = {}  # per stream: its group's least request (``Head``)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def _new_stream(self, shape: Shape) -> list[Entry]:
        stream: list[Entry] = []
        self._streams[shape] = stream
        group = self._group_of[shape] = group_of(shape)
        self._least[shape] = least_of(group)
        return stream

    def _unhead(self, entry: Entry, shape: Shape) -> None:
        """The stream ``shape`` is headed by ``entry`` no more."""
        group = self._group_of[shape]
        heads = self._heads[group]
        if len(heads) == 1:
            del self._heads[group]
            return
        index = bisect_left(heads, (entry,))
        self._heads[group] = heads[:index] + heads[index + 1:]  # a new list: a scan may hold the old one

    def _head(self, entry: Entry, shape: Shape) -> None:
        """The stream ``shape`` is headed by ``entry`` now."""
        group = self._group_of[shape]
        item = Head(entry, shape, self._least[shape])
        heads = self._heads.get(group)
        if heads is None:
            self._heads[group] = [item]
            return
        heads = heads[:]  # a new list: a scan may hold the old one (``Heads``)
        insort(heads, item)
        self._heads[group] = heads

    def add(self, entry: Entry, shape: Shape) -> None:
        stream = self._streams.get(shape)
        if stream is None:
            stream = self._new_stream(shape)
        elif entry < stream[0]:
            self._unhead(stream[0], shape)
        else:
            if entry > stream[-1]:
                stream.append(entry)  # (the common case: units come in order of creation)
            else:
                insort(stream, entry)
            self._size += 1
            return
        stream.insert(0, entry)
        self._head(entry, shape)
        self._size += 1

    def load(self, items: Iterable[tuple[Entry, Shape]]) -> None:
        """Add many units at once (a rebuild): one sort per stream."""
        for shape, old in self._streams.items():
            if old:
                self._unhead(old[0], shape)
        for entry, shape in items:
            stream = self._streams.get(shape)
            if stream is None:
                stream = self._new_stream(shape)
            stream.append(entry)
            self._size += 1
        for shape, stream in self._streams.items():
            stream.sort()
            self._head(stream[0], shape)

    def remove(self, entry: Entry, shape: Shape) -> None:
        stream = self._streams[shape]
        index = 0 if stream[0] is entry else bisect_left(stream, entry)  # (an admission takes the first)
        if index == len(stream) or stream[index] != entry:
            raise KeyError(entry.key)
        del stream[index]
        if index == 0:
            self._unhead(entry, shape)
            if stream:
                self._head(stream[0], shape)
        if not stream:
            del self._streams[shape]
            del self._group_of[shape]
            del self._least[shape]
        self._size -= 1

    def heads(self) -> Heads:
        """The first unit of every stream, to merge the streams in order."""
        return Heads(self._heads)

    def next_of(self, shape: Shape) -> Entry | None:
        stream = self._streams.get(shape)
        return stream[0] if stream else None

    def first_before(self, entry: Entry, shape: Shape, count: int) -> Entry | None:
        """The first unit of ``entry``'s stream when ``entry`` is one of the ``count``
        units right behind it (``followers``), else None."""
        stream = self._streams.get(shape)
        if not stream or stream[0] is entry:
            return None
        return stream[0] if entry <= stream[min(count, len(stream) - 1)] else None

    def followers(self, shape: Shape, count: int) -> list[Entry]:
        """Up to ``count`` units right behind the first of a stream."""
        return self._streams.get(shape, [])[1 : count + 1]

    def ordered(self) -> Iterator[Entry]:
        """Every pending unit in admission order."""
        return heapq.merge(*self._streams.values())

    def position(self, entry: Entry) -> int:
        """1-based position of ``entry`` in admission order."""
        return 1 + sum(bisect_left(stream, entry) for stream in self._streams.values())
