"""QuotaStatusWriter alone, on the in-memory API server: a quota's status.used is what the
engine says it uses, written when it changes (not again while it does not), and written
again after a write that failed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.messages import MessageWriter
from koordqueue.controller.quotastatus import QuotaStatusWriter
from koordqueue.controller.quotasync import QuotaSync
from koordqueue.controller.resources import QUOTAS
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.engine.model import UnitInfo
from koordqueue.kube.errors import ConnectionFailed

from .conftest import quota
from .fakeapi import Clock, FakeKube, shared_on, until

REFRESH = 0.01  # seconds between the writer's rounds


class Setting:
    """The quota `team-a` (8 GPUs) on the fake, seen by QuotaSync through its informer, and
    the status writer running, made and wired as controller.py does."""

    def __init__(self) -> None:
        self.fake = FakeKube()
        self.fake.seed(QUOTAS, quota("team-a", 4, 8))
        config = replace(ControllerConfig(), quota_status_refresh_seconds=REFRESH)
        self.shared = shared = shared_on(self.fake, Clock(), config)
        self.quotas = QuotaSync(shared)
        messages = MessageWriter(shared, UnitStatusWriter(shared))
        self.writer = QuotaStatusWriter(shared, self.quotas, messages)
        self.quotas.wire()
        self.writer.wire()

    def used_writes(self) -> list[tuple[Any, str | None]]:
        return [(r.body["status"]["used"], type(r.error).__name__ if r.error else None)
                for r in self.fake.writes(QUOTAS.plural, "team-a")]

    def admit(self, name: str, gpus: int) -> None:
        self.shared.engine.set_unit(UnitInfo(namespace="default", name=name, priority=0, created=0.0,
                                             request={c.GPU: gpus * 1000}, quota_name="team-a",
                                             admitted_quota="team-a"))

    async def rounds(self, n: int) -> None:
        await asyncio.sleep(REFRESH * n)


@pytest.fixture
async def setting() -> AsyncIterator[Setting]:
    s = Setting()
    informer = s.shared.informers.quota
    informer.start()
    await informer.wait_synced(5)
    assert "team-a" in s.quotas.quota_namespaces
    task = asyncio.create_task(s.writer.run())
    try:
        yield s
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await informer.stop()


async def test_status_used_is_the_engines_and_written_when_it_changes(setting: Setting) -> None:
    await until(lambda: setting.used_writes())
    assert setting.used_writes() == [({c.GPU: "0", "cpu": "0", "memory": "0"}, None)]
    await setting.rounds(5)
    assert len(setting.used_writes()) == 1  # unchanged: not written again
    setting.admit("a", 2)
    setting.admit("b", 3)
    await until(lambda: len(setting.used_writes()) == 2)
    assert setting.used_writes()[1] == ({c.GPU: "5", "cpu": "0", "memory": "0"}, None)
    stored = setting.fake.get(QUOTAS, "team-a", namespace="default")
    assert stored["status"]["used"] == {c.GPU: "5", "cpu": "0", "memory": "0"}
    assert stored["spec"]["max"][c.GPU] == "8"  # (the status write left the spec)
    setting.shared.engine.remove_unit("default/a")
    await until(lambda: len(setting.used_writes()) == 3)
    assert setting.fake.get(QUOTAS, "team-a", namespace="default")["status"]["used"][c.GPU] == "3"


async def test_a_failed_write_of_used_is_written_again(setting: Setting) -> None:
    await until(lambda: setting.used_writes())
    setting.fake.fail_next(ConnectionFailed("unreachable"), verb="patch_status", plural=QUOTAS.plural)
    setting.admit("a", 2)
    await until(lambda: len(setting.used_writes()) == 3)
    used = {c.GPU: "2", "cpu": "0", "memory": "0"}
    assert setting.used_writes()[1:] == [(used, "ConnectionFailed"), (used, None)]
    assert setting.fake.get(QUOTAS, "team-a", namespace="default")["status"]["used"] == used


def verbs(setting: Setting) -> list[tuple[str, str | None]]:
    """The writes of team-a's quota: (verb, what it failed with)."""
    return [(r.verb, type(r.error).__name__ if r.error else None) for r in setting.fake.writes(QUOTAS.plural, "team-a")]


async def test_without_a_status_subresource_used_is_written_with_the_quota(setting: Setting) -> None:
    """Koordinator's ElasticQuota CRD serves no /status: the 404 there, on a quota that is
    there, turns the writes to the object (once: /status is not tried again), and they keep
    its spec; when the CRD serves /status again, the object write's answer, without the
    status written, turns them back."""
    setting.fake.serve_status(QUOTAS.plural, False)
    await until(lambda: setting.used_writes())
    await until(lambda: len(verbs(setting)) == 2)
    assert verbs(setting) == [("patch_status", "NotFound"), ("patch", None)]
    setting.admit("a", 2)
    await until(lambda: len(verbs(setting)) == 3)
    await setting.rounds(5)
    assert verbs(setting)[2:] == [("patch", None)]
    stored = setting.fake.get(QUOTAS, "team-a", namespace="default")
    assert stored["status"]["used"] == {c.GPU: "2", "cpu": "0", "memory": "0"}
    assert stored["spec"]["max"][c.GPU] == "8"
    setting.fake.serve_status(QUOTAS.plural, True)
    setting.admit("b", 3)
    await until(lambda: len(verbs(setting)) == 5)
    assert verbs(setting)[3:] == [("patch", None), ("patch_status", None)]
    assert setting.fake.get(QUOTAS, "team-a", namespace="default")["status"]["used"][c.GPU] == "5"
    setting.shared.engine.remove_unit("default/a")
    await until(lambda: len(verbs(setting)) == 6)
    assert verbs(setting)[5:] == [("patch_status", None)]
    assert setting.fake.get(QUOTAS, "team-a", namespace="default")["status"]["used"][c.GPU] == "3"


async def test_a_quota_gone_is_not_taken_for_a_crd_without_status(setting: Setting) -> None:
    """A 404 on /status of a quota deleted before our view knew: the object write finds it
    gone too, and /status stays the way (the next quota's write goes there first)."""
    await until(lambda: setting.used_writes())
    setting.fake.objects.clear()  # deleted, the watch not told yet
    setting.admit("a", 2)
    await until(lambda: len(verbs(setting)) == 3)
    assert verbs(setting)[1:] == [("patch_status", "NotFound"), ("patch", "NotFound")]
    assert setting.writer.status_subresource
    await setting.rounds(3)
    assert verbs(setting)[3:5] == [("patch_status", "NotFound"), ("patch", "NotFound")]  # tried again
