"""Koord-Queue's keys on a running controller (issue 19): the oversell rate, a Queue's
max-depth, wait-for-pods-running and queue-args, each read as Koord-Queue reads it."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from koordqueue.api import constants as c

from .conftest import System, SystemFactory, pytorch_job, quick_config, quota
from .test_lifecycle import queue

pytestmark = pytest.mark.timeout(120)


async def message(system: System, unit: str) -> str:
    return str(((await system.unit(unit)).get("status") or {}).get("message") or "")


@pytest.mark.both_control_planes
async def test_oversell_rate_lets_a_quota_use_its_max_times_the_rate(start_system: SystemFactory) -> None:
    """Max 4 GPUs at rate 1.5: three jobs of 2 GPUs run (6 <= 6), the fourth waits and says why."""
    async with start_system(config=quick_config(oversell_rate=1.5)) as system:
        await system.apply(quota("team-o", 0, 4))
        await system.apply(*(pytorch_job(f"o{i}", gpus_per_pod=2, workers=0, quota_name="team-o",
                                         annotations={c.ANNOTATION_PRIORITY: str(10 - i)}) for i in range(4)))
        for i in range(3):
            await system.wait_phase(f"o{i}-py-qu", c.Phase.RUNNING)

        async def says_why() -> bool:
            return "nvidia.com/gpu asks 2, used 6 of max 4 x oversellrate 1.5 = 6" in await message(system, "o3-py-qu")

        await system.wait_for(says_why, what="the fourth job waiting at max 4 x 1.5")
        assert await system.phase("o3-py-qu") == c.Phase.ENQUEUED


@pytest.mark.both_control_planes
async def test_max_depth_keeps_the_scan_to_the_first_units(system: System) -> None:
    """Depth 1: a job that can never fit stops the scan at the first place; the small job
    behind it waits, saying so, and runs once the first is gone."""
    await system.apply(quota("team-d", 0, 4))
    await system.apply(queue("shallow", "team-d", annotations={c.ANNOTATION_MAX_DEPTH: "1"}))
    await system.apply(pytorch_job("huge", gpus_per_pod=8, workers=0, queue="shallow", priority=5))
    await system.apply(pytorch_job("small", gpus_per_pod=1, workers=0, queue="shallow", priority=1))

    async def beyond() -> bool:
        return "considers only its first 1 pending jobs (koord-queue/max-depth)" in await message(system, "small-py-qu")

    await system.wait_for(beyond, what="the small job told it is beyond the queue's depth")
    assert await system.phase("small-py-qu") == c.Phase.ENQUEUED
    await system.akubectl("delete", "pytorchjob", "huge")
    await system.wait_phase("small-py-qu", c.Phase.RUNNING)


@pytest.mark.both_control_planes
async def test_wait_for_pods_running_holds_the_queue_until_timeout(start_system: SystemFactory) -> None:
    """The first job's pods can never be placed: nothing more is admitted from its Queue,
    and the next job says why, until the timeout sends the first back; then it runs."""
    async with start_system(config=quick_config(wait_for_pods_running_seconds=6.0)) as system:
        await system.apply(quota("team-p", 8, 16))
        await system.apply(queue("careful", "team-p", annotations={c.ANNOTATION_WAIT_FOR_PODS_RUNNING: c.TRUE,
                                                                    c.ANNOTATION_NODE_FIT: c.FALSE}))
        await system.apply(pytorch_job("stuck", gpus_per_pod=9, workers=0, queue="careful", priority=5))
        await system.wait_phase("stuck-py-qu", c.Phase.DEQUEUED)
        await system.apply(pytorch_job("next", gpus_per_pod=1, workers=0, queue="careful", priority=1))

        async def held() -> bool:
            return ("queue koord-queue/careful waits for the pods of default/stuck-py-qu to run"
                    in await message(system, "next-py-qu"))

        await system.wait_for(held, what="the next job held by the first one's pods")
        assert await system.phase("next-py-qu") == c.Phase.ENQUEUED
        await system.wait_phase("stuck-py-qu", c.Phase.TIMEOUT_BACKOFF, timeout=20)
        await system.wait_phase("next-py-qu", c.Phase.RUNNING)


@pytest.mark.both_control_planes
async def test_queue_args_set_the_back_off_of_the_queues_units(start_system: SystemFactory) -> None:
    """podInitialBackoffSeconds 30 on the Queue: the job sent back by the timeout is queued
    again 30 s later (± the jitter), not after the controller's 1 s."""
    async with start_system(config=quick_config(wait_for_pods_running_seconds=1.0)) as system:
        await system.apply(quota("team-b", 8, 16))
        args = f'{c.QUEUE_ARG_INITIAL_BACKOFF}: "30"\n{c.QUEUE_ARG_MAX_BACKOFF}: "60"\n'
        await system.apply(queue("slow-retry", "team-b", annotations={
            c.ANNOTATION_WAIT_FOR_PODS_RUNNING: c.TRUE, c.ANNOTATION_NODE_FIT: c.FALSE,
            c.ANNOTATION_QUEUE_ARGS: args}))
        await system.apply(pytorch_job("stuck", gpus_per_pod=9, workers=0, queue="slow-retry"))
        await system.wait_phase("stuck-py-qu", c.Phase.TIMEOUT_BACKOFF, timeout=20)
        sent_back = time.time()
        requeue_at = (await system.unit("stuck-py-qu"))["status"]["requeueState"]["requeueAt"]
        delay = datetime.fromisoformat(requeue_at.replace("Z", "+00:00")).timestamp() - sent_back
        assert 25.0 <= delay <= 34.0, delay
