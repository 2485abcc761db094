"""WorkQueue: client-go semantics (dedup, re-queue after done, delays, backoff, shutdown).

Every test that waits runs on a virtual clock (tests/kube/virtualtime.py): delays are
asserted exactly, and a loaded machine cannot make them late."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from koordqueue.kube.workqueue import ShutDown, WorkQueue
from tests.kube.virtualtime import run_on_virtual_clock


class Workers:
    """``count`` workers taking items of ``q``, each held a random while (up to 2 ms, drawn
    from ``rng``), noting an item taken while another worker holds it (``overlaps``);
    ``started`` is told each item as its processing starts."""

    def __init__(self, q: WorkQueue[int], rng: random.Random, count: int,
                 started: Callable[[int], None] | None = None) -> None:
        self.q, self.rng, self.started = q, rng, started
        self.in_progress: set[int] = set()
        self.overlaps: list[int] = []
        self.tasks = [asyncio.create_task(self._work()) for _ in range(count)]

    async def _work(self) -> None:
        while True:
            try:
                k = await self.q.get()
            except ShutDown:
                return
            if k in self.in_progress:
                self.overlaps.append(k)
            self.in_progress.add(k)
            if self.started is not None:
                self.started(k)
            await asyncio.sleep(self.rng.random() * 0.002)
            self.in_progress.discard(k)
            self.q.done(k)

    async def stop(self) -> None:
        self.q.shutdown()
        await asyncio.gather(*self.tasks)


async def test_an_item_added_twice_while_waiting_is_queued_once() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    q.add("a")
    assert len(q) == 2
    assert [await q.get(), await q.get()] == ["a", "b"]
    assert len(q) == 0


async def test_an_item_added_while_processing_is_requeued_once_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    item = await q.get()
    q.add("a")
    q.add("a")
    assert len(q) == 0  # not handed to a second worker while the first holds it
    q.done(item)
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_done_without_a_new_add_does_not_requeue() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.done(await q.get())
    assert len(q) == 0


def test_get_waits_for_an_add() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        getter = asyncio.create_task(q.get())
        await asyncio.sleep(1)
        assert not getter.done()
        q.add("x")
        assert await asyncio.wait_for(getter, 1) == "x"

    run_on_virtual_clock(main)


def test_concurrent_workers_never_share_an_item_and_lose_no_add() -> None:
    """Many workers, repeated adds of a few keys: one worker per key at a time, and
    every add is followed by a processing that started after it."""

    async def main() -> None:
        q: WorkQueue[int] = WorkQueue()
        keys = range(5)
        last_add: dict[int, int] = {}
        last_start: dict[int, int] = {}
        clock = 0
        rng = random.Random(7)

        def started(k: int) -> None:
            nonlocal clock
            clock += 1
            last_start[k] = clock

        workers = Workers(q, rng, 8, started)
        for _ in range(400):
            k = rng.choice(keys)
            clock += 1
            last_add[k] = clock
            q.add(k)
            if rng.random() < 0.3:
                await asyncio.sleep(0)
        async with asyncio.timeout(5):
            while len(q) or workers.in_progress or any(last_start.get(k, 0) < last_add[k] for k in last_add):
                await asyncio.sleep(0.005)
        await workers.stop()
        assert workers.overlaps == []
        assert all(last_start[k] > last_add[k] for k in last_add)

    run_on_virtual_clock(main)


def test_add_after_delays_and_keeps_the_earliest() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        loop = asyncio.get_running_loop()
        start = loop.time()
        q.add_after("a", 0.3)
        q.add_after("a", 0.05)  # earlier: replaces
        q.add_after("a", 0.5)  # later: ignored
        assert len(q) == 0
        assert await asyncio.wait_for(q.get(), 1) == "a"
        assert loop.time() - start == pytest.approx(0.05)
        q.done("a")
        await asyncio.sleep(1)  # neither the replaced 0.3 s timer nor the ignored 0.5 s one fires
        assert len(q) == 0

    run_on_virtual_clock(main)


def test_add_after_of_a_queued_item_does_not_duplicate() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        q.add("a")
        q.add_after("a", 0.01)
        await asyncio.sleep(0.03)
        assert len(q) == 1

    run_on_virtual_clock(main)


def test_rate_limited_adds_back_off_exponentially_until_forgotten() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        q: WorkQueue[str] = WorkQueue(base_delay=0.02, max_delay=0.08, clock=loop.time)
        waits = []
        for _ in range(4):
            start = loop.time()
            q.add_rate_limited("a")
            item = await asyncio.wait_for(q.get(), 1)
            waits.append(loop.time() - start)
            q.done(item)
        assert q.num_requeues("a") == 4
        assert waits == pytest.approx([0.02, 0.04, 0.08, 0.08])  # doubled, then capped
        q.forget("a")
        assert q.num_requeues("a") == 0
        start = loop.time()
        q.add_rate_limited("a")
        await asyncio.wait_for(q.get(), 1)
        assert loop.time() - start == pytest.approx(0.02)  # from the base delay again

    run_on_virtual_clock(main)


def test_rate_limited_adds_are_paced_overall() -> None:
    """Many items failing together are spread out by the overall bucket: 20 a second,
    after the one token the burst holds."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        q: WorkQueue[int] = WorkQueue(base_delay=0.001, qps=20, burst=1, clock=loop.time)
        start = loop.time()
        for i in range(4):
            q.add_rate_limited(i)
        handed: list[tuple[int, float]] = []
        for _ in range(4):
            item = await asyncio.wait_for(q.get(), 2)
            handed.append((item, loop.time() - start))
        assert [item for item, _ in handed] == [0, 1, 2, 3]
        assert [at for _, at in handed] == pytest.approx([0.001, 0.05, 0.10, 0.15])

    run_on_virtual_clock(main)


def test_shutdown_wakes_waiting_workers_and_stops_handing_out() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        waiting = [asyncio.create_task(q.get()) for _ in range(3)]
        await asyncio.sleep(0.01)
        q.add_after("late", 0.01)
        q.shutdown()
        for task in waiting:
            with pytest.raises(ShutDown):
                await asyncio.wait_for(task, 1)
        q.add("a")
        assert len(q) == 0
        assert q.shutting_down
        with pytest.raises(ShutDown):
            await q.get()
        await asyncio.sleep(0.02)
        assert len(q) == 0  # the delayed add was cancelled

    run_on_virtual_clock(main)


async def test_shutdown_drops_items_already_queued() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.shutdown()
    with pytest.raises(ShutDown):
        await q.get()


async def test_urgent_items_go_first_and_a_waiting_item_moves_ahead_once() -> None:
    q: WorkQueue[str] = WorkQueue()
    for item in "abcd":
        q.add(item)
    q.add("e", urgent=True)
    q.add("c", urgent=True)  # already waiting: moves ahead, not queued twice
    assert len(q) == 5
    got = [await q.get() for _ in range(5)]
    assert got == ["e", "c", "a", "b", "d"]
    assert len(q) == 0
    for item in got:
        q.done(item)
    assert len(q) == 0
    q.add("x")
    assert await q.get() == "x"  # the stale copy of c was skipped, nothing else is left


async def test_an_urgent_add_while_processing_is_requeued_urgently_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    item = await q.get()
    q.add("b")
    q.add("a", urgent=True)
    assert len(q) == 1  # a is not handed out twice at once
    q.done(item)
    assert len(q) == 2
    assert [await q.get(), await q.get()] == ["a", "b"]


def test_urgent_and_plain_adds_never_share_an_item_between_workers() -> None:
    async def main() -> None:
        q: WorkQueue[int] = WorkQueue()
        rng = random.Random(11)
        workers = Workers(q, rng, 6)
        for _ in range(500):
            q.add(rng.randrange(8), urgent=rng.random() < 0.4)
            if rng.random() < 0.3:
                await asyncio.sleep(0)
        async with asyncio.timeout(5):
            while len(q) or workers.in_progress:
                await asyncio.sleep(0.005)
        await workers.stop()
        assert workers.overlaps == []
        assert len(q) == 0

    run_on_virtual_clock(main)
