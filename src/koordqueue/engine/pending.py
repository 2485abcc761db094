"""The pending units of one queue, in admission order, split by request.

Order is priority (high first), creation time, namespace, name. Units with the same
request form one *stream*, already in that order. Capacity only shrinks while a queue
is scanned, so once the first unit of a stream does not fit, none of the later ones
(same request, same or lower priority) can: a scan merges the stream heads and drops a
whole stream at its first misfit. A cycle therefore costs O(admissions + streams),
not O(pending units), however long the queue.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence

from koordqueue.engine.model import PodSetInfo

Entry = tuple[int, float, str, str, str]
"""Sort key of a pending unit: (-priority, created, namespace, name, key)."""
Shape = tuple[tuple[str, object], ...]
"""A request as a hashable value: sorted (resource, amount) pairs, then, for a unit whose
pods are placed on nodes, what its pod sets ask for (units alike fit alike)."""
POD_SETS = "\x00pod-sets"  # the key of the pod sets' part of a shape, after the resources


def shape_of(request: dict[str, int], pod_sets: Sequence[PodSetInfo] = ()) -> Shape:
    shape: Shape = tuple(sorted((name, amount) for name, amount in request.items() if amount))
    if pod_sets:
        shape += ((POD_SETS, tuple(
            (ps.name, ps.count, ps.min_count, tuple(sorted(ps.request.items())), ps.node_selector, ps.affinity,
             ps.tolerations, ps.topology) for ps in pod_sets)),)
    return shape


class PendingQueue:
    """Sorted streams of pending units; insert and remove in O(log n) plus a memmove."""

    __slots__ = ("_streams", "_size")

    def __init__(self) -> None:
        self._streams: dict[Shape, list[Entry]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, entry: Entry, shape: Shape) -> None:
        stream = self._streams.get(shape)
        if stream is None:
            self._streams[shape] = [entry]
        else:
            insort(stream, entry)
        self._size += 1

    def load(self, items: Iterable[tuple[Entry, Shape]]) -> None:
        """Add many units at once (a rebuild): one sort per stream."""
        for entry, shape in items:
            self._streams.setdefault(shape, []).append(entry)
            self._size += 1
        for stream in self._streams.values():
            stream.sort()

    def remove(self, entry: Entry, shape: Shape) -> None:
        stream = self._streams[shape]
        index = bisect_left(stream, entry)
        if index == len(stream) or stream[index] != entry:
            raise KeyError(entry[4])
        del stream[index]
        if not stream:
            del self._streams[shape]
        self._size -= 1

    def heads(self) -> list[tuple[Entry, Shape]]:
        """The first unit of every stream, as a heap to merge the streams in order."""
        heads = [(stream[0], shape) for shape, stream in self._streams.items()]
        heapq.heapify(heads)
        return heads

    def next_of(self, shape: Shape) -> Entry | None:
        stream = self._streams.get(shape)
        return stream[0] if stream else None

    def followers(self, shape: Shape, count: int) -> list[Entry]:
        """Up to ``count`` units right behind the first of a stream."""
        return self._streams.get(shape, [])[1 : count + 1]

    def ordered(self) -> Iterator[Entry]:
        """Every pending unit in admission order."""
        return heapq.merge(*self._streams.values())

    def position(self, entry: Entry) -> int:
        """1-based position of ``entry`` in admission order."""
        return 1 + sum(bisect_left(stream, entry) for stream in self._streams.values())
