"""A start while the jobs still list (issue 36: the first admission after a start at 1,000
quotas and 10,000 pending came after every list AND then the 1,000 Queue writes, one phase
after the other): the quotas' Queues are written and fed while the jobs list, and are in
before the first cycle. What must never change: no cycle before every list is in (a running
job listed last still holds its quota)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.controller import Controller
from koordqueue.controller.informers import job_resource
from koordqueue.controller.resources import QUEUES, QUOTAS, UNITS
from koordqueue.controller.views import adapter_of_kind, job_view, queue_unit_manifest
from koordqueue.kube.client import Resource, WatchEvent

from .conftest import pytorch_job, quick_config, quota
from .fakeapi import Clock, FakeKube, merge_patch, until

KIND = "PyTorchJob"
JOBS = job_resource(KIND)
ADAPTER = adapter_of_kind(KIND)
LEAVES = 3


class HeldLists(FakeKube):
    """The fake API server whose lists of `held` plurals (by pages or streamed) wait until
    `release` is set."""

    def __init__(self, *held: str) -> None:
        super().__init__()
        self.held = set(held)
        self.release = asyncio.Event()
        self.listed: set[str] = set()  # held plurals whose list has answered

    async def list(self, resource: Resource, **kwargs: Any) -> Any:
        if resource.plural in self.held:
            await self.release.wait()
        answer = await super().list(resource, **kwargs)
        self.listed.add(resource.plural)
        return answer

    async def watch(self, resource: Resource, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        streamed = kwargs.get("send_initial_events", False)
        if streamed and resource.plural in self.held:
            await self.release.wait()
        async for event in super().watch(resource, **kwargs):
            if streamed and event.type == "BOOKMARK":
                self.listed.add(resource.plural)
            yield event


@pytest.fixture
async def fake() -> AsyncIterator[HeldLists]:
    fake = HeldLists(JOBS.plural)
    for i in range(LEAVES):
        fake.seed(QUOTAS, quota(f"team-{i}", 1, 1))
    yield fake


@asynccontextmanager
async def running(fake: HeldLists, controller: Controller) -> AsyncIterator[None]:
    task = asyncio.create_task(controller.run())
    try:
        yield
    finally:
        controller.stop()
        fake.release.set()
        await asyncio.wait_for(task, 10)


def resumed(fake: FakeKube, name: str) -> bool:
    return not ADAPTER.is_suspended(fake.get(JOBS, name, namespace="default"))


async def test_the_queues_are_written_and_fed_while_the_jobs_still_list(fake: HeldLists) -> None:
    fake.seed(JOBS, merge_patch(pytorch_job("a", quota_name="team-0", workers=0), ADAPTER.suspend_patch({})))
    controller = Controller(fake, quick_config(), clock=Clock())
    async with running(fake, controller):
        await until(lambda: len([w for w in fake.writes(QUEUES.plural) if w.verb == "create"]) == LEAVES)
        await until(lambda: all(f"{c.SYSTEM_NAMESPACE}/team-{i}" in controller.engine._queues
                                for i in range(LEAVES)))
        assert JOBS.plural not in fake.listed  # (before: nothing was written until every list was in)
        assert not controller.sync_done and not resumed(fake, "a")  # and no cycle yet
        fake.release.set()
        await until(lambda: resumed(fake, "a"))


async def test_the_queue_writes_begun_during_the_lists_are_in_before_the_first_cycle(fake: HeldLists) -> None:
    """Queue creates that hang past the lists: no cycle until they are in (the cycle's own
    writes would queue behind them at a busy API server), then the job is admitted."""
    fake.release.set()
    fake.seed(JOBS, merge_patch(pytorch_job("a", quota_name="team-1", workers=0), ADAPTER.suspend_patch({})))
    hang = asyncio.Event()
    real = fake.create

    async def create(resource: Resource, body: Any, **kwargs: Any) -> Any:
        if resource.plural == QUEUES.plural:
            await hang.wait()
        return await real(resource, body, **kwargs)

    setattr(fake, "create", create)  # noqa: B010 (a method of the instance, replaced)
    controller = Controller(fake, quick_config(), clock=Clock())
    async with running(fake, controller):
        await until(lambda: JOBS.plural in fake.listed and controller.quota_sync.queue_writes is not None)
        await asyncio.sleep(0.2)  # the rest of the start, had it not waited for the writes
        assert controller.scheduler.cycles == 0 and not controller.sync_done
        hang.set()
        await until(lambda: resumed(fake, "a"))
        assert len([w for w in fake.writes(QUEUES.plural) if w.verb == "create"]) == LEAVES


async def test_a_running_job_listed_last_still_holds_its_quota(fake: HeldLists) -> None:
    """team-0 fits one job, and "running" holds it; its job is listed last. A cycle on the
    state before its list (the unit would be an orphan, holding nothing) would admit "waiting"
    too: none runs before every list is in, and then "waiting" waits."""
    job = pytorch_job("running", quota_name="team-0", workers=0)
    fake.seed(JOBS, job)
    unit = queue_unit_manifest(job_view(fake.get(JOBS, "running", namespace="default"), ADAPTER, {}))
    unit["status"] = {"phase": c.Phase.RUNNING.value}
    fake.seed(UNITS, unit)
    fake.seed(JOBS, merge_patch(pytorch_job("waiting", quota_name="team-0", workers=0), ADAPTER.suspend_patch({})))
    controller = Controller(fake, quick_config(), clock=Clock())
    async with running(fake, controller):
        await until(lambda: len([w for w in fake.writes(QUEUES.plural) if w.verb == "create"]) == LEAVES)
        await asyncio.sleep(0.2)  # the rest of the start, had it not waited for the jobs
        assert controller.scheduler.cycles == 0
        fake.release.set()
        await until(lambda: controller.sync_done and controller.scheduler.cycles > 0)
        await until(lambda: controller.engine.unit("default/waiting-py-qu") is not None)
        controller.shared.wake.set()
        await until(lambda: controller.scheduler.cycles > 1)
        assert not resumed(fake, "waiting")
        held = controller.engine.unit(f"default/{unit['metadata']['name']}")
        assert held is not None and held.admitted_quota == "team-0"
