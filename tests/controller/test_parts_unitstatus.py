"""UnitStatusWriter alone, on the in-memory API server: writes of one unit go one after
another, each on the version the last one made, however long the first takes to land; a
write on a version someone else has moved past is refused and remembers nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from koordqueue.controller import unitstatus
from koordqueue.controller.resources import UNITS
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.kube.errors import Conflict

from .fakeapi import Clock, FakeKube, shared_on, status_error

KEY = "default/u"


def setting() -> tuple[FakeKube, UnitStatusWriter, str]:
    """A QueueUnit `u`, its version known to the writer as our views would have it."""
    fake = FakeKube()
    obj = fake.seed(UNITS, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
                            "metadata": {"name": "u", "namespace": "default"}, "spec": {},
                            "status": {"phase": "Enqueued"}})
    writer = UnitStatusWriter(shared_on(fake, Clock()))
    rv = obj["metadata"]["resourceVersion"]
    writer.records.saw(KEY, rv)
    return fake, writer, rv


def sent_versions(fake: FakeKube) -> list[tuple[str | None, str | None]]:
    """Each status write's precondition, and how it ended."""
    out: list[tuple[str | None, str | None]] = []
    for r in fake.writes(UNITS.plural, "u"):
        body: dict[str, Any] = r.body
        out.append(((body.get("metadata") or {}).get("resourceVersion"), type(r.error).__name__ if r.error else None))
    return out


async def test_writes_of_a_unit_go_one_after_another_on_the_last_version() -> None:
    """The admission's write fails once with a 500 and lands 50 ms later; the message written
    meanwhile waits for it and goes on the version it made (not the one both started from,
    which would be a Conflict)."""
    fake, writer, rv0 = setting()
    fake.fail_next(status_error(500, "InternalError"), verb="patch_status", name="u", retried_after=0.05)
    admission = asyncio.create_task(writer.write(KEY, {"phase": "Dequeued"}, precondition=True))
    while not fake.requests:
        await asyncio.sleep(0.001)
    message = asyncio.create_task(writer.write(KEY, {"message": "admitted"}, precondition=True,
                                               limit=writer.message_limit))
    assert await admission and await message
    rv1 = fake.writes()[1].resource_version
    assert sent_versions(fake) == [(rv0, "ServerError"), (rv0, None), (rv1, None)]
    stored = fake.get(UNITS, "u", namespace="default")
    assert stored["status"]["phase"] == "Dequeued" and stored["status"]["message"] == "admitted"
    assert writer.records.rv(KEY) == stored["metadata"]["resourceVersion"] != rv1
    assert writer.records.written_message(KEY) == "admitted"
    assert writer.metrics.registry.get_sample_value(
        "koord_queue_api_writes_total", {"verb": "patch", "resource": "queueunits/status"}) == 2


async def test_a_write_on_a_version_moved_past_is_refused() -> None:
    """Someone else wrote the unit since the version we know: our write with that version as
    its precondition is a Conflict, and neither the version nor the message is remembered."""
    fake, writer, rv0 = setting()
    await fake.patch_status(UNITS, "u", {"status": {"phase": "Preempted"}}, namespace="default")
    with pytest.raises(Conflict):
        await writer.write(KEY, {"message": "waiting"}, precondition=True)
    assert writer.records.rv(KEY) == rv0
    assert writer.records.written_message(KEY) is None
    assert fake.get(UNITS, "u", namespace="default")["status"] == {"phase": "Preempted"}


async def test_a_write_no_longer_wanted_when_its_turn_comes_is_skipped() -> None:
    """`still` is asked once the unit's lock is had: a write that waited behind another and
    is stale by then is not sent."""
    fake, writer, _ = setting()
    fake.fail_next(status_error(429, "TooManyRequests"), verb="patch_status", retried_after=0.05)
    wanted = {"yes": True}
    first = asyncio.create_task(writer.write(KEY, {"phase": "Dequeued"}))
    while not fake.requests:
        await asyncio.sleep(0.001)
    second = asyncio.create_task(writer.write(KEY, {"message": "waits"}, still=lambda: wanted["yes"]))
    await asyncio.sleep(0)
    wanted["yes"] = False
    assert await first and not await second
    assert len(fake.writes()) == 2 and "message" not in fake.get(UNITS, "u", namespace="default")["status"]


@pytest.fixture
def quick_news(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(unitstatus, "INFORM_SECONDS", 0.05)
    return 0.05


async def test_news_of_a_run_within_the_window_is_one_write(quick_news: float,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Pods created (pending), then running, within INFORM_SECONDS: one write, of the latest,
    none before the window is over. Then Running: written at once, with the news waiting."""
    fake, writer, _ = setting()
    loop = asyncio.get_running_loop()
    start = loop.time()
    writer.inform(KEY, {"podState": {"running": 0, "pending": 2}}, touch=False)
    writer.inform(KEY, {"podState": {"running": 1, "pending": 1}}, touch=False)
    assert not fake.writes(UNITS.plural, "u")
    await asyncio.gather(*writer.inform_tasks)
    assert loop.time() - start >= quick_news
    assert [r.body["status"] for r in fake.writes(UNITS.plural, "u")] == [{"podState": {"running": 1, "pending": 1}}]
    monkeypatch.setattr(unitstatus, "INFORM_SECONDS", 3600.0)  # Running does not wait for the window
    writer.inform(KEY, {"podState": {"running": 2, "pending": 0}}, touch=False)
    writer.inform(KEY, {"phase": "Running", "message": "the job is running"}, still=lambda: True)
    async with asyncio.timeout(5):
        await asyncio.gather(*writer.inform_tasks)
    writes = [r.body["status"] for r in fake.writes(UNITS.plural, "u")]
    assert len(writes) == 2
    assert writes[1]["phase"] == "Running" and writes[1]["podState"] == {"running": 2, "pending": 0}


async def test_a_phase_written_meanwhile_takes_the_place_of_the_news(quick_news: float) -> None:
    """The job ends while its podState waits: its Succeed is written, the podState never is."""
    fake, writer, _ = setting()
    writer.inform(KEY, {"podState": {"running": 0, "pending": 0}}, touch=False)
    await writer.write(KEY, {"phase": "Succeed", "podState": None})
    await asyncio.gather(*writer.inform_tasks)
    assert [r.body["status"].get("phase") for r in fake.writes(UNITS.plural, "u")] == ["Succeed"]
    assert not writer.informs


async def test_news_no_longer_true_is_not_written(quick_news: float) -> None:
    fake, writer, _ = setting()
    errors: list[Exception] = []
    writer.inform(KEY, {"phase": "Running"}, still=lambda: False, failed=errors.append)
    writer.inform(KEY, {"podState": {"running": 1, "pending": 0}}, touch=False)
    await asyncio.gather(*writer.inform_tasks)
    assert not fake.writes(UNITS.plural, "u") and not errors


async def test_news_due_later_is_brought_forward_by_news_due_sooner(quick_news: float) -> None:
    """Pods only pending wait the longer time; a pod running meanwhile brings the write forward
    to its own (shorter) time, with the latest counts."""
    fake, writer, _ = setting()
    loop = asyncio.get_running_loop()
    start = loop.time()
    writer.inform(KEY, {"podState": {"running": 0, "pending": 1}}, touch=False, within=3600.0)
    await asyncio.sleep(quick_news * 2)
    assert not fake.writes(UNITS.plural, "u")
    writer.inform(KEY, {"podState": {"running": 1, "pending": 0}}, touch=False)
    async with asyncio.timeout(5):
        await asyncio.gather(*writer.inform_tasks)
    assert loop.time() - start >= quick_news * 3
    assert [r.body["status"] for r in fake.writes(UNITS.plural, "u")] == [{"podState": {"running": 1, "pending": 0}}]
