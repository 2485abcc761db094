"""A job whose pods name a PriorityClass that does not exist is held, not run at priority 0:
on a cluster the API server refuses such pods, so admitted it would hold quota with no pod.
It says so (the unit's message, a Warning on the job) and is admitted, at the class's
priority, once the class is created; a class deleted holds the waiting jobs naming it."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c

from .conftest import System, pytorch_job, quota

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]


def missing(name: str) -> str:
    return f"its pods name PriorityClass {name}, which does not exist (the API server would refuse them); " \
        "it is queued once created"


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def naming_class(name: str, priority_class_name: str, **kwargs: Any) -> dict[str, Any]:
    job = pytorch_job(name, workers=0, quota_name="q", **kwargs)
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["priorityClassName"] = priority_class_name
    return job


async def told(system: System, unit: str, message: str) -> None:
    async def said() -> bool:
        status = (await system.unit(unit)).get("status", {})
        return bool(status.get("phase") == c.Phase.ENQUEUED and status.get("message") == message)

    await system.wait_for(said, what=f"{unit} told: {message}")


async def test_a_job_naming_a_missing_priority_class_waits_until_it_is_created(system: System) -> None:
    await system.apply(quota("q", 2, 2))
    await system.apply(naming_class("held", "urgent"))
    await told(system, "held-py-qu", f"the job cannot be queued: {missing('urgent')}")

    async def warned() -> bool:
        return any(e["type"] == c.EventType.WARNING and e["reason"] == c.EventReason.PRIORITY_CLASS_NOT_FOUND
                   and e["message"] == f"not admitted: {missing('urgent')}"
                   for e in await system.events("held"))

    await system.wait_for(warned, what="a Warning on the held job")
    job = await system.get_json("pytorchjob", "held")
    assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
    # Held, it keeps nobody out: a later job with room runs.
    await system.apply(pytorch_job("later", workers=0, quota_name="q"))
    await system.wait_phase("later-py-qu", c.Phase.RUNNING)
    assert await system.phase("held-py-qu") == c.Phase.ENQUEUED

    await system.apply(priority_class("urgent", 50))
    await system.wait_phase("held-py-qu", c.Phase.RUNNING)
    assert (await system.unit("held-py-qu"))["spec"]["priority"] == 50


async def test_a_deleted_priority_class_holds_the_waiting_jobs_naming_it(system: System) -> None:
    await system.apply(priority_class("high", 100))
    await system.apply(quota("q", 1, 1))
    await system.apply(pytorch_job("runner", workers=0, quota_name="q"))
    await system.wait_phase("runner-py-qu", c.Phase.RUNNING)
    await system.apply(naming_class("waiter", "high"))

    async def ranked() -> bool:
        unit = await system.unit("waiter-py-qu")
        return bool(unit["spec"]["priority"] == 100 and "quota q" in unit.get("status", {}).get("message", ""))

    await system.wait_for(ranked, what="the waiter at priority 100, waiting for room")
    await system.akubectl("delete", "priorityclass", "high")
    await told(system, "waiter-py-qu", f"the job cannot be queued: {missing('high')}")
    await system.akubectl("delete", "pytorchjob", "runner")
    await system.apply(pytorch_job("next", workers=0, quota_name="q"))
    await system.wait_phase("next-py-qu", c.Phase.RUNNING)  # the room goes past the held job
    assert await system.phase("waiter-py-qu") == c.Phase.ENQUEUED
