"""The pending units of a queue: the heads a scan merges are the first unit of every
stream in admission order, grouped as ``group_of`` says, however the queue got there
(units added and removed one at a time, or loaded at once)."""

from __future__ import annotations

import random

import pytest

from koordqueue.engine.model import PodSetInfo
from koordqueue.engine.pending import Entry, PendingQueue, Shape, group_of, least_of, shape_of


def _shapes(rng: random.Random) -> list[Shape]:
    """Requests with and without pod sets, some elastic: several streams per group."""
    shapes = []
    for gpus in (1, 2, 4):
        request = {"gpu": 2 * gpus}
        shapes.append(shape_of(request))
        for selector in ((), (("zone", "a"),)):
            pod = {"gpu": gpus}
            shapes.append(shape_of(request, (PodSetInfo("worker", 2, pod, None, selector),)))
            shapes.append(shape_of(request, (PodSetInfo("worker", 2, pod, 1, selector),)))
    rng.shuffle(shapes)
    return shapes


def _merged(queue: PendingQueue) -> list[tuple[Entry, Shape]]:
    heads = queue.heads()
    out = []
    while (head := heads.peek()) is not None:
        entry, shape, least = head
        assert least == least_of(group_of(shape))
        out.append((entry, shape))
        heads.pop()
    return out


@pytest.mark.parametrize("seed", range(8))
def test_heads_are_the_first_of_every_stream_in_order(seed: int) -> None:
    rng = random.Random(seed)
    shapes = _shapes(rng)
    queue = PendingQueue()
    present: dict[Entry, Shape] = {}
    for step in range(400):
        if present and rng.random() < 0.45:
            entry = rng.choice(sorted(present))
            queue.remove(entry, present.pop(entry))
        else:
            entry = (-rng.choice((0, 10)), float(rng.randint(0, 50)), "ns", f"u{step}", f"ns/u{step}")
            present[entry] = rng.choice(shapes)
            queue.add(entry, present[entry])
        firsts: dict[Shape, Entry] = {}
        for entry, shape in present.items():
            firsts[shape] = min(entry, firsts.get(shape, entry))
        expected = sorted((entry, shape) for shape, entry in firsts.items())
        assert _merged(queue) == expected, f"step {step}"
        assert len(queue) == len(present)
        loaded = PendingQueue()
        loaded.load(present.items())
        assert _merged(loaded) == expected


def test_a_dropped_group_takes_the_heads_of_its_streams_alone() -> None:
    rng = random.Random(1)
    shapes = _shapes(rng)
    queue = PendingQueue()
    for i, shape in enumerate(shapes):
        queue.add((0, float(i), "ns", f"u{i}", f"ns/u{i}"), shape)
    heads = queue.heads()
    head = heads.peek()
    assert head is not None
    heads.pop()
    dropped = heads.drop_group()
    group = group_of(head[1])
    assert sorted(dropped) == sorted(e for e, s in _merged(queue) if group_of(s) == group and e != head[0])
    left = []
    while (item := heads.peek()) is not None:
        left.append(item[:2])
        heads.pop()
    assert all(group_of(s) != group for _, s in left)
    assert len(left) + len(dropped) + 1 == len(shapes)


def test_the_least_of_a_group_is_its_request_with_elastic_pod_sets_at_their_min() -> None:
    plain = shape_of({"gpu": 8, "cpu": 8}, (PodSetInfo("worker", 2, {"gpu": 4, "cpu": 4}),))
    elastic = shape_of({"gpu": 8, "cpu": 8}, (PodSetInfo("worker", 2, {"gpu": 4, "cpu": 4}, 1),))
    assert least_of(group_of(plain)) == {"gpu": 8, "cpu": 8}
    assert least_of(group_of(elastic)) == {"gpu": 4, "cpu": 4}
    assert least_of(group_of(shape_of({"gpu": 2}))) == {"gpu": 2}
