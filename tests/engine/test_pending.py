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
            entry = Entry(-rng.choice((0, 10)), float(rng.randint(0, 50)), "ns", f"u{step}", f"ns/u{step}")
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
        queue.add(Entry(0, float(i), "ns", f"u{i}", f"ns/u{i}"), shape)
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


@pytest.mark.parametrize("seed", range(8))
def test_a_scans_heads_are_the_queue_as_it_was_whatever_the_queue_does_meanwhile(seed: int) -> None:
    """``Heads`` shares the queue's lists of heads (copied only before it changes one): a
    scan taken before units join and leave the queue gives the heads it had then, as a
    scan of a queue copied then does, pushes of the next units included."""
    rng = random.Random(seed)
    shapes = _shapes(rng)
    queue, twin = PendingQueue(), PendingQueue()
    present: dict[Entry, Shape] = {}
    for step in range(300):
        entry = Entry(-rng.choice((0, 10)), float(rng.randint(0, 50)), "ns", f"u{step}", f"ns/u{step}")
        present[entry] = rng.choice(shapes)
        queue.add(entry, present[entry])
        twin.add(entry, present[entry])
        if rng.random() < 0.3:
            gone = rng.choice(sorted(present))
            queue.remove(gone, present[gone])
            twin.remove(gone, present.pop(gone))
        if step % 25:
            continue
        shared, private = queue.heads(), twin.heads()
        seen: list[tuple[Entry, Shape]] = []
        while (head := shared.peek()) is not None:
            assert head == private.peek()
            seen.append(head[:2])
            shared.pop()
            private.pop()
            if rng.random() < 0.5:  # the queue changes under the scan (the twin does not)
                entry = Entry(-rng.choice((0, 10)), float(rng.randint(0, 50)), "ns", f"x{step}-{len(seen)}",
                         f"ns/x{step}-{len(seen)}")
                present[entry] = rng.choice(shapes)
                queue.add(entry, present[entry])
            elif present:
                gone = rng.choice(sorted(present))
                queue.remove(gone, present.pop(gone))
            if rng.random() < 0.3:
                later = Entry(head[0][0], head[0][1] + 100, "ns", f"p{step}-{len(seen)}", f"ns/p{step}-{len(seen)}")
                shared.push(later, head[1])
                private.push(later, head[1])
        assert private.peek() is None
        twin = PendingQueue()
        twin.load(present.items())


def test_a_shape_of_one_resource_is_the_sorted_pairs_as_for_many() -> None:
    """``shape_of``'s path for a request of one resource gives what the general one does."""
    def general(request: dict[str, int]) -> Shape:
        return tuple(sorted((name, amount) for name, amount in request.items() if amount))

    for request in ({"cpu": 1000}, {"gpu": 0}, {"memory": -5}, {"cpu": 1, "gpu": 0}, {"b": 2, "a": 1}, {}):
        assert shape_of(request) == general(request)
        pods = (PodSetInfo("worker", 2, {"gpu": 1}),)
        assert shape_of(request, pods)[:len(general(request))] == general(request)
