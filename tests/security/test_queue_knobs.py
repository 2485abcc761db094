"""Issue 29, item 7: a Queue's knobs that act on other teams (its priority among all queues,
preemption, held room, admission past the nodes' room) are honoured only on Queues in the
system namespace, which cluster admins write. A tenant's own Queue setting them works with the
defaults and says so (a Warning event, InvalidQueue)."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.objects import TENANT_QUEUE_IGNORES, parse_queue
from tests.controller.conftest import System, pytorch_job, quota

pytestmark = pytest.mark.timeout(180)

KNOBS = {c.ANNOTATION_ENABLE_PREEMPTION: c.TRUE, c.ANNOTATION_HOLD_ROOM_AFTER: "0s", c.ANNOTATION_NODE_FIT: c.FALSE}


def queue(name: str, namespace: str, quota_name: str, priority: int = 1_000_000) -> dict[str, Any]:
    return {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
            "metadata": {"name": name, "namespace": namespace, "labels": {c.LABEL_QUOTA_NAME: quota_name},
                         "annotations": dict(KNOBS)},
            "spec": {"queuePolicy": "Priority", "priority": priority}}


def test_a_tenants_queue_gets_the_defaults_and_a_warning() -> None:
    tenants = parse_queue(queue("fast", "t1", "q-t1"), {"q-t1"})
    q = tenants.queue
    assert (q.priority, q.preemption, q.hold_room_after, q.node_fit) == (0, False, c.DEFAULT_HOLD_ROOM_AFTER_SECONDS,
                                                                          None)
    assert tenants.warnings == (
        f"Queue t1/fast: {', '.join(TENANT_QUEUE_IGNORES)} ignored: honoured only on Queues in namespace "
        f"{c.SYSTEM_NAMESPACE}, which cluster admins write (a tenant's Queue must not order, preempt or hold room "
        "against other teams)",)
    admins = parse_queue(queue("fast", c.SYSTEM_NAMESPACE, "q-t1"), {"q-t1"})
    a = admins.queue
    assert (a.priority, a.preemption, a.hold_room_after, a.node_fit) == (1_000_000, True, 0.0, False)
    assert admins.warnings == ()


def test_a_tenants_queue_keeping_to_its_own_settings_is_not_warned() -> None:
    plain = queue("mine", "t1", "q-t1", priority=0)
    plain["metadata"]["annotations"] = {c.ANNOTATION_MAX_DEPTH: "5"}
    parsed = parse_queue(plain, {"q-t1"})
    assert parsed.warnings == () and parsed.queue.max_depth == 5


@pytest.mark.both_control_planes
async def test_a_tenants_queue_cannot_switch_node_fit_off(system: System) -> None:
    """Through its own Queue with node-fit "false", a tenant's job whose pod fits no node (9 GPUs,
    nodes of 8) would hold quota with pods that never run; it waits, and the Queue is warned."""
    await system.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t1"}})
    await system.apply(quota("q-t1", 0, 16, namespace="t1"))
    await system.apply(queue("fast", "t1", "q-t1"))

    async def warned() -> bool:
        return any(e["reason"] == c.EventReason.INVALID_QUEUE.value and e["type"] == c.EventType.WARNING.value
                   and "ignored: honoured only on Queues in namespace" in e["message"]
                   for e in await system.events("fast", "t1"))

    await system.wait_for(warned, what="the tenant's Queue warned that its knobs are ignored")
    await system.apply(pytorch_job("big", gpus_per_pod=9, workers=0, namespace="t1", queue="fast"))

    async def waits_for_nodes() -> str:
        status = (await system.unit("big-py-qu", "t1")).get("status") or {}
        assert status.get("phase") in (None, c.Phase.ENQUEUED.value), status
        message = str(status.get("message") or "")
        return message if "no node" in message else ""

    said = await system.wait_for(waits_for_nodes, what="the job waiting for the nodes")
    assert "nvidia.com/gpu" in said
    assert await system.phase("big-py-qu", "t1") == c.Phase.ENQUEUED
