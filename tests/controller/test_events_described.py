"""Every Event the controller writes shows in `kubectl describe` of its object. kubectl finds
an object's Events by a field selector on involvedObject's name, namespace, kind and uid;
an Event without the uid is never shown ("Events: <none>"), on a real cluster as here."""

from __future__ import annotations

import re

import pytest

from koordqueue.api import constants as c

from .conftest import System, pytorch_job, quota

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]


def described_events(text: str) -> list[tuple[str, str]]:
    """(type, reason) of each row of the Events table `kubectl describe` printed."""
    _, found, table = text.partition("\nEvents:")
    assert found, text
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^\s+(Normal|Warning)\s+(\S+)", table, re.MULTILINE)]


async def shows(system: System, want: tuple[str, str], *target: str) -> None:
    async def listed() -> bool:
        return want in described_events(await system.akubectl("describe", *target))

    await system.wait_for(listed, what=f"kubectl describe {' '.join(target)} to list {want}")


async def test_kubectl_describe_shows_the_events_of_units_jobs_quotas_and_queues(system: System) -> None:
    await system.apply(quota("small", 1, 1))
    await system.apply(pytorch_job("runner", workers=0, quota_name="small"))
    await system.wait_phase("runner-py-qu", c.Phase.RUNNING)
    await system.apply(pytorch_job("wide", workers=1, quota_name="small"))  # 2 GPUs > max 1: waits
    broken = quota("broken", 4, 2)  # min over max
    nowhere = {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
               "metadata": {"name": "nowhere", "namespace": "default"}, "spec": {"queuePolicy": "Priority"}}
    await system.apply(broken, nowhere)

    normal, warning = c.EventType.NORMAL.value, c.EventType.WARNING.value
    await shows(system, (normal, c.EventReason.ENQUEUED.value), "queueunit", "runner-py-qu")
    await shows(system, (normal, c.EventReason.DEQUEUED.value), "queueunit", "runner-py-qu")
    await shows(system, (warning, c.EventReason.FAILED_SCHEDULING.value), "queueunit", "wide-py-qu")
    await shows(system, (warning, c.EventReason.FAILED_SCHEDULING.value), "pytorchjob", "wide")
    await shows(system, (warning, c.EventReason.INVALID_QUOTA.value), "elasticquota", "broken")
    await shows(system, (warning, c.EventReason.INVALID_QUEUE.value), "queue", "nowhere")
