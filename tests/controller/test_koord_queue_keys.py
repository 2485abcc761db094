"""Koord-Queue's job and Queue keys, read and written as Koord-Queue does (issue 19): the
quota label fallback, active and the maximum execution time, disable-show-queue-items, the
Queue usage annotations and the job enqueue/dequeue annotations."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import pytest

from koordqueue.api import constants as c

from .conftest import System, SystemFactory, pytorch_job, quick_config, quota

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]

GO_TIME = "%Y-%m-%d %H:%M:%S.%f %z %Z"  # Koord-Queue's layout, 2006-01-02 15:04:05.999999999 -0700 MST


def go_time(text: str) -> dt.datetime:
    """A time as Koord-Queue's job extensions parse it (fraction optional, as Go's .999999999)."""
    if "." not in text.split(" ")[1]:
        text = text.replace(" +", ".0 +", 1)
    return dt.datetime.strptime(text, GO_TIME)


async def annotate(system: System, job: str, key: str, value: str | None) -> None:
    await system.akubectl("annotate", "pytorchjob", job, f"{key}={value}" if value is not None else f"{key}-",
                          "--overwrite")


async def test_the_asi_quota_label_is_read_when_the_koordinator_one_is_absent(system: System) -> None:
    await system.apply(quota("asi", 1, 4), quota("other", 1, 4))
    asi_only = pytorch_job("asi-only", labels={c.LABEL_ASI_QUOTA_NAME: "asi"})
    both = pytorch_job("both", quota_name="other", labels={c.LABEL_ASI_QUOTA_NAME: "asi"})
    await system.apply(asi_only, both)
    await system.wait_phase("asi-only-py-qu", c.Phase.RUNNING)  # (two quotas in its namespace: it must name one)
    await system.wait_phase("both-py-qu", c.Phase.RUNNING)

    async def used(name: str) -> bool:  # 2 GPUs each: the Koordinator label first, then the ASI one
        return (await system.get_json("elasticquota", name)).get("status", {}).get("used", {}).get(c.GPU) == "2"

    await system.wait_for(lambda: used("asi"), what="asi-only charged to quota asi")
    await system.wait_for(lambda: used("other"), what="both charged to quota other")


async def test_disable_show_queue_items_stops_refreshing_the_queue_items(system: System) -> None:
    await system.apply(quota("narrow", 0, 2))
    await system.apply(pytorch_job("holder", quota_name="narrow", duration=600))
    await system.wait_phase("holder-py-qu", c.Phase.RUNNING)
    await system.apply(pytorch_job("first", quota_name="narrow"))

    async def listed() -> list[str]:
        queue = await system.get_json("queue", "narrow", "-n", c.SYSTEM_NAMESPACE)
        return [item["name"] for item in queue.get("status", {}).get("queueItemDetails", {}).get("active") or ()]

    async def lists(names: list[str]) -> bool:
        return await listed() == names

    await system.wait_for(lambda: lists(["first-py-qu"]), what="the first pending job listed")
    await system.akubectl("annotate", "queue", "narrow", "-n", c.SYSTEM_NAMESPACE,
                          f"{c.ANNOTATION_DISABLE_SHOW_QUEUE_ITEMS}=")
    await asyncio.sleep(1.0)  # the controller's view has the annotation
    await system.apply(pytorch_job("second", quota_name="narrow"))
    await system.wait_phase("second-py-qu", c.Phase.ENQUEUED)
    await asyncio.sleep(2.0)  # four refresh intervals
    assert await listed() == ["first-py-qu"], "not refreshed while disabled; what was written stays"
    await system.akubectl("annotate", "queue", "narrow", "-n", c.SYSTEM_NAMESPACE,
                          f"{c.ANNOTATION_DISABLE_SHOW_QUEUE_ITEMS}-")
    await system.wait_for(lambda: lists(["first-py-qu", "second-py-qu"]), what="refreshed again")


async def test_an_inactive_job_is_not_admitted_until_made_active(system: System) -> None:
    await system.apply(quota("solo", 0, 2))
    await system.apply(pytorch_job("sleeper", quota_name="solo", annotations={c.ANNOTATION_ACTIVE: "false"}),
                       pytorch_job("other", quota_name="solo"))
    await system.wait_phase("other-py-qu", c.Phase.RUNNING)  # the inactive one leaves the quota free

    async def told() -> bool:
        unit = await system.unit("sleeper-py-qu")
        status = unit.get("status", {})
        assert status.get("phase") == c.Phase.ENQUEUED and "inactive" in status.get("message", ""), status
        assert unit["spec"].get("active") is False, unit["spec"]
        return True

    await system.wait_for(told, what="the inactive job told why it waits")
    await system.akubectl("delete", "pytorchjob", "other")
    await annotate(system, "sleeper", c.ANNOTATION_ACTIVE, "t")  # Go's ParseBool spelling
    await system.wait_phase("sleeper-py-qu", c.Phase.RUNNING)
    assert (await system.unit("sleeper-py-qu"))["spec"]["active"] is True


async def test_a_running_job_made_inactive_is_suspended_and_its_quota_released(start_system: SystemFactory) -> None:
    # A back-off far longer than the test: made active again, the job is queued at once, not backed off.
    async with start_system(config=quick_config(backoff_base=300.0, backoff_cap=300.0)) as system:
        await system.apply(quota("solo", 0, 2))
        await system.apply(pytorch_job("runner", quota_name="solo", duration=600))
        await system.wait_phase("runner-py-qu", c.Phase.RUNNING)
        await annotate(system, "runner", c.ANNOTATION_ACTIVE, "false")
        await system.wait_phase("runner-py-qu", c.Phase.ENQUEUED)

        async def suspended() -> bool:
            job = await system.get_json("pytorchjob", "runner")
            return job["metadata"]["annotations"].get(c.ANNOTATION_SUSPEND) == c.TRUE and \
                job["spec"]["runPolicy"]["suspend"] is True

        await system.wait_for(suspended, what="the job suspended")
        assert [e for e in await system.events("runner") if e["reason"] == c.EventReason.DEACTIVATED]
        await system.apply(pytorch_job("next", quota_name="solo"))
        await system.wait_phase("next-py-qu", c.Phase.RUNNING)  # its quota was released
        assert "inactive" in (await system.unit("runner-py-qu"))["status"]["message"]
        await system.akubectl("delete", "pytorchjob", "next")
        await annotate(system, "runner", c.ANNOTATION_ACTIVE, "true")
        await system.wait_phase("runner-py-qu", c.Phase.RUNNING)


async def test_a_job_past_its_maximum_execution_time_is_stopped_counting_earlier_runs(system: System) -> None:
    limit = 10
    await system.apply(quota("timed", 0, 2))
    await system.apply(pytorch_job("bounded", quota_name="timed", duration=600,
                                   annotations={c.ANNOTATION_MAX_EXEC_TIME_SECONDS: str(limit)}))
    await system.wait_phase("bounded-py-qu", c.Phase.RUNNING)
    assert (await system.unit("bounded-py-qu"))["spec"]["maximumExecutionTimeSeconds"] == limit
    await asyncio.sleep(5)
    await annotate(system, "bounded", c.ANNOTATION_ACTIVE, "false")  # stopped after ~5 s: the time it ran is kept

    async def banked() -> int:
        status = (await system.unit("bounded-py-qu")).get("status", {})
        return int(status.get("phase") == c.Phase.ENQUEUED and status.get("accumulatedPastExecutionTimeSeconds") or 0)

    ran = await system.wait_for(banked, what="the time it ran kept on its unit")
    assert 4 <= ran <= 7, ran
    await annotate(system, "bounded", c.ANNOTATION_ACTIVE, None)  # its unit's spec.active (false) stands
    await asyncio.sleep(1.0)
    assert await system.phase("bounded-py-qu") == c.Phase.ENQUEUED
    # Made active on its unit, as Koord-Queue lets one do: it runs again, on what is left of its budget.
    await system.akubectl("patch", "queueunit", "bounded-py-qu", "--type", "merge", "-p",
                          json.dumps({"spec": {"active": True}}))
    await system.wait_phase("bounded-py-qu", c.Phase.RUNNING)
    started = asyncio.get_running_loop().time()
    await system.wait_phase("bounded-py-qu", c.Phase.ENQUEUED, timeout=limit + 5)
    second_run = asyncio.get_running_loop().time() - started
    assert second_run < limit - ran + 2.5 and second_run < limit - 1, (second_run, ran)
    unit = await system.unit("bounded-py-qu")
    assert unit["spec"]["active"] is False, "made inactive"
    assert "accumulatedPastExecutionTimeSeconds" not in unit["status"], "a new budget if made active again"
    assert "maximum execution time" in unit["status"]["message"]  # (the send-back, then why it waits)
    assert [e for e in await system.events("bounded") if e["reason"] == c.EventReason.MAX_EXEC_TIME_EXCEEDED]
    job = await system.get_json("pytorchjob", "bounded")
    assert job["spec"]["runPolicy"]["suspend"] is True, "suspended, not deleted"


async def test_queues_carry_koord_queue_usage_annotations(system: System) -> None:
    await system.apply(quota("pool", 8, 8, is_parent=True))
    await system.apply(quota("leaf", 4, 8, parent="pool"))
    # A Queue bound to the parent quota: its usage is its children's.
    await system.apply({"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
                        "metadata": {"name": "pool-view", "namespace": c.SYSTEM_NAMESPACE,
                                     "labels": {c.LABEL_QUOTA_NAME: "pool"}},
                        "spec": {"queuePolicy": "Priority", "priority": 1}})
    await system.apply(pytorch_job("user", quota_name="leaf", duration=600))  # master + worker: 2 cpu, 2Gi, 2 GPUs
    await system.wait_phase("user-py-qu", c.Phase.RUNNING)
    held = '{"cpu":2,"memory":2147483648,"nvidia.com/gpu":2}'  # Go's json.Marshal of Quantity.Value()s

    async def annotations(queue: str) -> dict[str, Any]:
        return dict((await system.get_json("queue", queue, "-n", c.SYSTEM_NAMESPACE))["metadata"]["annotations"])

    async def written(queue: str, want: dict[str, str], absent: tuple[str, ...] = ()) -> bool:
        got = await annotations(queue)
        assert {k: got.get(k) for k in want} == want and not set(absent) & set(got), got
        return True

    await system.wait_for(lambda: written("leaf", {
        c.ANNOTATION_QUEUE_USED: held, c.ANNOTATION_QUEUE_GUARANTEED_USED: held,
        c.ANNOTATION_QUEUE_SELF_USED: held, c.ANNOTATION_QUEUE_SELF_GUARANTEED_USED: held},
        absent=(c.ANNOTATION_QUEUE_CHILDREN_USED, c.ANNOTATION_QUEUE_CHILDREN_GUARANTEED_USED)),
        what="the leaf's Queue annotated")
    await system.wait_for(lambda: written("pool-view", {
        c.ANNOTATION_QUEUE_USED: held, c.ANNOTATION_QUEUE_CHILDREN_USED: held,
        c.ANNOTATION_QUEUE_CHILDREN_GUARANTEED_USED: held},
        absent=(c.ANNOTATION_QUEUE_SELF_USED,)), what="the parent's Queue annotated")
    await system.akubectl("delete", "pytorchjob", "user")
    zeros = '{"cpu":0,"memory":0,"nvidia.com/gpu":0}'  # released: the resources stay, at 0, as Koord-Queue's
    await system.wait_for(lambda: written("leaf", {c.ANNOTATION_QUEUE_USED: zeros, c.ANNOTATION_QUEUE_SELF_USED: zeros}),
                          what="the leaf's usage back to 0")


async def test_a_job_says_when_it_was_queued(system: System) -> None:
    await system.apply(quota("stamps", 0, 2))
    await system.apply(pytorch_job("stamped", quota_name="stamps", duration=600))
    await system.wait_phase("stamped-py-qu", c.Phase.RUNNING)
    annotations = (await system.get_json("pytorchjob", "stamped"))["metadata"]["annotations"]
    assert annotations[c.ANNOTATION_JOB_HAS_ENQUEUED] == c.TRUE
    queued = go_time(annotations[c.ANNOTATION_JOB_ENQUEUE_TIMESTAMP])
    assert abs((dt.datetime.now(dt.UTC) - queued).total_seconds()) < 60
    assert annotations[c.ANNOTATION_JOB_ENQUEUE_TIMESTAMP].endswith(" +0000 UTC")


async def test_a_job_says_when_it_was_let_run_and_not_once_suspended(system: System) -> None:
    await system.apply(quota("stamps", 0, 2))
    await system.apply(pytorch_job("stamped", quota_name="stamps", duration=600))
    await system.wait_phase("stamped-py-qu", c.Phase.RUNNING)
    annotations = (await system.get_json("pytorchjob", "stamped"))["metadata"]["annotations"]
    run = go_time(annotations[c.ANNOTATION_JOB_DEQUEUE_TIMESTAMP])
    assert run >= go_time(annotations[c.ANNOTATION_JOB_ENQUEUE_TIMESTAMP])
    await annotate(system, "stamped", c.ANNOTATION_ACTIVE, "false")

    async def emptied() -> bool:
        job = await system.get_json("pytorchjob", "stamped")
        return job["metadata"]["annotations"].get(c.ANNOTATION_JOB_DEQUEUE_TIMESTAMP) == ""

    await system.wait_for(emptied, what="the dequeue time emptied when suspended")
