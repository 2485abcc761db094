"""A unit admitted by preempting another holds its quota at once, but its job is resumed only
once the victim's pods have terminated (issue 21: resumed before, its pods waited ~170 s for
the room the victim's terminating pods still held), or at the latest after their grace period
plus a margin. The victim's pods are made to linger with a finalizer of the test's own, which
neither the simulated cluster nor kube-apiserver and kwok remove."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from koordqueue.api import constants as c

from .conftest import System, SystemFactory, pytorch_job, quick_config, quota

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

LINGER = "koord-queue.test/linger"  # the victim's pods stay (terminating) while they carry it


def low_job(grace: int | None = None) -> dict[str, Any]:
    """team-b's job: 2 pods of 4 GPUs borrowing team-a's half of the pool; runs until deleted."""
    job = pytorch_job("low", gpus_per_pod=4, quota_name="team-b")
    if grace is not None:
        for role in job["spec"]["pytorchReplicaSpecs"].values():
            role["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    return job


def high_job() -> dict[str, Any]:
    """team-a's job that reclaims its half of the pool from `low`."""
    return pytorch_job("high", gpus_per_pod=2, quota_name="team-a", duration=0.3, priority=100)


async def pods_of(system: System, job: str) -> list[dict[str, Any]]:
    return list((await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}={job}"))["items"])


async def set_linger(system: System, job: str, on: bool) -> None:
    finalizers = [LINGER] if on else None
    for pod in await pods_of(system, job):
        await system.akubectl("patch", "pod", pod["metadata"]["name"], "--type", "merge", "-p",
                              json.dumps({"metadata": {"finalizers": finalizers}}), check=on)


async def suspended(system: System, job: str) -> bool:
    annotations = (await system.get_json("pytorchjob", job))["metadata"].get("annotations") or {}
    return annotations.get(c.ANNOTATION_SUSPEND) == c.TRUE


async def low_runs_with_lingering_pods(system: System) -> None:
    await system.apply(quota("pool", 8, 8, is_parent=True))
    await system.apply(quota("team-a", 4, 8, parent="pool"), quota("team-b", 4, 8, parent="pool"))
    await system.wait_phase("low-py-qu", c.Phase.RUNNING, timeout=60)

    async def two_running() -> bool:
        pods = await pods_of(system, "low")
        return len(pods) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

    await system.wait_for(two_running, 60, "low's 2 pods to run")
    await set_linger(system, "low", True)


async def high_admitted_waiting(system: System) -> float:
    """`high` reclaims its half: Preempted `low`, `high` holding quota, its job still suspended
    and its message saying what it waits for; when `high` was made (the loop's time)."""
    made = asyncio.get_running_loop().time()
    await system.apply(high_job())
    await system.wait_phase("low-py-qu", c.Phase.PREEMPTED)

    async def high_admitted() -> bool:
        return await system.phase("high-py-qu") in (c.Phase.DEQUEUED, c.Phase.RUNNING, c.Phase.SUCCEED)

    await system.wait_for(high_admitted, 30, "high to be admitted")
    assert await suspended(system, "high"), "high's job was resumed while low's pods still run"

    async def low_deleting() -> bool:
        pods = await pods_of(system, "low")
        return len(pods) == 2 and all(p["metadata"].get("deletionTimestamp") for p in pods)

    await system.wait_for(low_deleting, 30, "low's pods to be deleted (and linger)")
    unit = await system.unit("high-py-qu")
    assert "waiting for 2 pods of preempted unit default/low-py-qu to terminate" in unit["status"]["message"], unit
    assert await suspended(system, "high")
    return made


async def test_the_preemptor_job_is_resumed_once_the_victims_pods_are_gone(start_system: SystemFactory) -> None:
    async with start_system() as system:
        await system.apply(low_job())
        try:
            await low_runs_with_lingering_pods(system)
            await high_admitted_waiting(system)
            lingering = {p["metadata"]["uid"] for p in await pods_of(system, "low")}
            for _ in range(10):  # 2 s: its job stays suspended while low's pods linger
                assert await suspended(system, "high")
                assert await system.phase("high-py-qu") == c.Phase.DEQUEUED.value
                await asyncio.sleep(0.2)
            await set_linger(system, "low", False)
        finally:
            await set_linger(system, "low", False)

        async def gone() -> bool:  # (low, admitted again once high has ended, may have new ones)
            return not {p["metadata"]["uid"] for p in await pods_of(system, "low")} & lingering

        await system.wait_for(gone, 30, "low's lingering pods to go")
        await system.wait_phase("high-py-qu", c.Phase.SUCCEED, timeout=60)
        said = [e["message"] for e in await system.events("high-py-qu") if e["reason"] == c.EventReason.DEQUEUED]
        assert any("waiting for 2 pods of preempted unit default/low-py-qu" in m for m in said), said


async def test_a_victim_pod_that_never_goes_holds_the_preemptor_back_only_until_the_bound(
        start_system: SystemFactory) -> None:
    """low's pods have a grace period of 1 s and the margin is 2 s: high's job is resumed 3 s
    after its admission though they are still there."""
    config = replace(quick_config(), victim_wait_margin_seconds=2.0)
    async with start_system(config=config) as system:
        await system.apply(low_job(grace=1))
        try:
            await low_runs_with_lingering_pods(system)
            made = await high_admitted_waiting(system)

            async def resumed() -> bool:
                return not await suspended(system, "high")

            await system.wait_for(resumed, 30, "high's job to be resumed by the bound")
            waited = asyncio.get_running_loop().time() - made
            assert 3.0 <= waited < 10.0, waited  # (admitted just after it was made: resumed 3 s after that)
            assert len(await pods_of(system, "low")) == 2  # still there: resumed by the bound alone
            await system.wait_phase("high-py-qu", c.Phase.SUCCEED, timeout=60)
        finally:
            await set_linger(system, "low", False)
