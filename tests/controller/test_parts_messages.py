"""MessageWriter alone, on the in-memory API server: a waiting unit's message is written at
most once per flush (the last one the engine gave), not again while it does not change, a
reason that moves no more often than MESSAGE_REFRESH_SECONDS (the writer's amounts_seconds, 60 s
by default, when only its amounts move), and never from a view of the
unit older than our own last write of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller import messages
from koordqueue.controller.messages import MESSAGE_REFRESH_SECONDS, MessageWriter
from koordqueue.controller.resources import UNITS
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.engine.model import UnitInfo

from .fakeapi import Clock, FakeKube, shared_on, until

FLUSH = 0.01  # seconds between flushes here (MESSAGE_FLUSH_SECONDS, 1 s in the product)
KEY = "default/u"


class Setting:
    """A new QueueUnit `u` (no status yet) on the fake, seen by the unit informer, waiting in
    the engine; the MessageWriter made as controller.py makes it, flushing every FLUSH."""

    def __init__(self) -> None:
        self.fake = FakeKube()
        self.clock = Clock()
        self.fake.seed(UNITS, {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_UNIT_KIND,
                               "metadata": {"name": "u", "namespace": "default"}, "spec": {}})
        self.shared = shared = shared_on(self.fake, self.clock)
        self.status = UnitStatusWriter(shared)
        self.writer = MessageWriter(shared, self.status)
        shared.engine.set_unit(UnitInfo(namespace="default", name="u", priority=0, created=0.0, request={}))
        self.informer = shared.informers.unit

    def engine_says(self, message: str) -> None:
        """What the scheduling loop does with a cycle's message for the unit."""
        self.shared.records.pending_messages[KEY] = message

    def written(self) -> list[dict[str, Any]]:
        """The status of each write of the unit, in order."""
        return [r.body["status"] for r in self.fake.writes(UNITS.plural, "u")]

    def stored(self) -> dict[str, Any]:
        return self.fake.get(UNITS, "u", namespace="default").get("status") or {}

    async def flushes(self, n: int) -> None:
        await asyncio.sleep(FLUSH * n)


@pytest.fixture
async def setting(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Setting]:
    monkeypatch.setattr(messages, "MESSAGE_FLUSH_SECONDS", FLUSH)
    s = Setting()
    s.informer.start()
    await s.informer.wait_synced(5)
    task = asyncio.create_task(s.writer.run())
    try:
        yield s
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await s.informer.stop()


async def test_a_message_is_written_once_per_flush_and_not_again_unchanged(setting: Setting) -> None:
    """Two cycles between flushes: one write, of the later message, as the new unit's first
    status (Enqueued). The same message again at later flushes: not written again."""
    setting.engine_says("queued in quota a: 3rd")
    setting.engine_says("queued in quota a: 2nd")
    await until(setting.written)
    await until(lambda: setting.informer.get(KEY).phase)  # type: ignore[union-attr]
    assert [(s.get("phase"), s["message"]) for s in setting.written()] == [
        (c.Phase.ENQUEUED.value, "queued in quota a: 2nd")]
    for _ in range(5):
        setting.engine_says("queued in quota a: 2nd")
        await setting.flushes(2)
    assert len(setting.written()) == 1
    setting.engine_says("queued in quota a: 1st")
    await until(lambda: len(setting.written()) == 2)
    assert setting.written()[1] == {"message": "queued in quota a: 1st"}  # (the phase is not written again)
    assert setting.stored()["phase"] == c.Phase.ENQUEUED.value


async def test_a_reason_that_moves_is_rewritten_only_after_the_refresh_time(setting: Setting) -> None:
    setting.engine_says("does not fit: quota a uses 4 of 4")
    await until(setting.written)
    setting.engine_says("does not fit: its parent quota p uses 4 of 4")
    await setting.flushes(5)
    assert len(setting.written()) == 1  # deferred, not dropped
    setting.clock.now += MESSAGE_REFRESH_SECONDS
    await until(lambda: len(setting.written()) == 2)
    assert setting.written()[1] == {"message": "does not fit: its parent quota p uses 4 of 4"}


async def test_a_reason_whose_amounts_alone_move_is_rewritten_only_after_the_longer_time(setting: Setting) -> None:
    """Ten usage changes, the reason's words the same: not one more write until
    amounts_seconds (60 s by default) have passed (MESSAGE_REFRESH_SECONDS is not enough);
    then one, of the latest amounts."""
    assert setting.writer.amounts_seconds == 60.0
    setting.engine_says("waiting for quota leaf-0-1: cpu asks 5, used 118 of max 120")
    await until(setting.written)
    start = setting.clock.now
    for used in range(100, 110):
        setting.engine_says(f"waiting for quota leaf-0-1: cpu asks 5, used {used} of max 120")
        await setting.flushes(2)
        setting.clock.now += 1.0
    setting.clock.now += MESSAGE_REFRESH_SECONDS
    await setting.flushes(5)
    assert len(setting.written()) == 1
    setting.clock.now = start + setting.writer.amounts_seconds
    await until(lambda: len(setting.written()) == 2)
    await setting.flushes(5)
    assert setting.written()[1:] == [{"message": "waiting for quota leaf-0-1: cpu asks 5, used 109 of max 120"}]


async def test_new_words_after_new_amounts_are_not_held_for_the_amounts_time(setting: Setting) -> None:
    """Amounts moved (deferred for amounts_seconds), then the reason itself changes:
    it is written once MESSAGE_REFRESH_SECONDS are over, not held for the longer time."""
    setting.engine_says("waiting for quota a: cpu asks 5, used 118 of max 120")
    await until(setting.written)
    setting.engine_says("waiting for quota a: cpu asks 5, used 117 of max 120")
    await setting.flushes(3)
    setting.engine_says("waiting for quota a: cpu asks 5; the free 3 of quota p is held for b")
    await setting.flushes(3)
    assert len(setting.written()) == 1
    setting.clock.now += MESSAGE_REFRESH_SECONDS
    await until(lambda: len(setting.written()) == 2)
    assert setting.written()[1] == {"message": "waiting for quota a: cpu asks 5; the free 3 of quota p is held for b"}


def test_the_meaning_of_a_message_is_its_words_not_its_amounts() -> None:
    same = ["waiting for quota leaf-0-1: cpu asks 5, used 118 of max 120",
            "waiting for quota leaf-0-1: cpu asks 5, used 1500m of max 120",
            "waiting for quota leaf-0-1: cpu asks 20, used 4.5 of max 120"]
    assert len({messages.meaning(m) for m in same}) == 1
    assert messages.meaning("held for leaf-0-1-small-3, of higher priority (200 > 50)") != \
        messages.meaning("held for leaf-0-1-small-4, of higher priority (200 > 50)")  # names are words
    assert messages.meaning(same[0]) != messages.meaning("waiting for quota leaf-0-2: cpu asks 5, used 118 of max 120")


async def test_no_message_from_a_view_older_than_our_last_write(setting: Setting) -> None:
    """Our view of `u` lags (its watch held: the informer stopped) at the new unit; we write
    its admission, and the engine then sends it back (its Preempted on its way), with a
    message. From that view the unit looks new, and its first status (Enqueued) would be
    written over our Dequeued: nothing is written until the view has caught up; then the
    message alone."""
    await setting.informer.stop()
    assert setting.informer.get(KEY).phase == ""  # type: ignore[union-attr]
    await setting.status.write(KEY, {"phase": c.Phase.DEQUEUED.value, "message": "admitted into quota a"},
                               precondition=True)
    setting.engine_says("preempted: quota a reclaimed it; queued again in 10s")
    await setting.flushes(5)
    assert len(setting.written()) == 1
    assert setting.stored()["phase"] == c.Phase.DEQUEUED.value
    assert setting.shared.records.pending_messages == {KEY: "preempted: quota a reclaimed it; queued again in 10s"}
    setting.informer.start()  # the watch goes on from where it was
    await until(lambda: len(setting.written()) == 2)
    assert setting.written()[1] == {"message": "preempted: quota a reclaimed it; queued again in 10s"}
    assert setting.stored()["phase"] == c.Phase.DEQUEUED.value
