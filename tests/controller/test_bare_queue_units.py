"""The QueueUnit as Koord-Queue's public contract (issue 30 item 1): a unit no job of ours
stands behind (a Koord-Queue job extension's, a platform's, one made by hand) is queued like
any, charged by its labels or namespace through the same tenancy rules as a job, Dequeued when
it fits, holding quota until it is deleted or its owner writes a final phase, and preempted by
the phase Preempted. Our own jobs' units keep taking everything from their jobs."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from koordqueue.api import constants as c

from .conftest import System, SystemFactory, quick_config
from .test_quota_tree import create, gpus, namespace, tree

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]


def bare_unit(name: str, namespace: str, gpu: int, priority: int = 100, queue: str | None = "default",
              labels: dict[str, str] | None = None, consumer: str = "ghost", pod_set: bool = False) -> dict[str, Any]:
    """A unit as a Koord-Queue user makes one: for a TFJob no extension here creates, named
    otherwise than ours would be (ours: <job>-tf-qu)."""
    spec: dict[str, Any] = {
        "consumerRef": {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": consumer, "namespace": namespace},
        "priority": priority,
    }
    if pod_set:  # its demand by its pods alone
        spec["podSet"] = [{"name": "worker", "count": gpu, "template": {"spec": {"containers": [
            {"name": "main", "resources": {"requests": {"cpu": "1", "memory": "100Mi", c.GPU: "1"}}}]}}}]
    else:
        spec["resource"] = {"cpu": "1", "memory": "100Mi", c.GPU: str(gpu)}
    if queue is not None:
        spec["queue"] = queue
    return {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_UNIT_KIND,
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "spec": spec}


async def write_phase(system: System, name: str, namespace: str, phase: str) -> None:
    """As an extension writes its unit's phase (the status subresource)."""
    body = json.dumps({"status": {"phase": phase, "message": phase}})
    await system.akubectl("patch", "queueunit", name, "-n", namespace, "--subresource=status", "--type", "merge",
                          "-p", body)


async def two_teams(system: System) -> None:
    await system.apply(namespace("bare-a"), namespace("bare-b"))
    await create(system, tree(gpus("team-a", 2, 4, namespaces=["bare-a"]), gpus("team-b", 2, 4, namespaces=["bare-b"])))


async def test_a_unit_made_by_hand_in_a_tree_bound_namespace_is_dequeued_and_holds_quota_until_it_ends(
        system: System) -> None:
    await two_teams(system)
    await system.apply(bare_unit("handmade", "bare-a", 3))
    await system.wait_phase("handmade", c.Phase.DEQUEUED, namespace="bare-a", timeout=15)
    unit = await system.unit("handmade", "bare-a")
    assert "team-a" in unit["status"]["message"], unit["status"]
    # It holds team-a's quota: another of 2 GPUs (by its podSet alone) waits past the max of 4.
    await system.apply(bare_unit("second", "bare-a", 2, consumer="other", pod_set=True))

    async def waits() -> str:
        status = (await system.unit("second", "bare-a")).get("status") or {}
        return str(status.get("message")) if status.get("phase") == c.Phase.ENQUEUED and "team-a" in str(
            status.get("message")) else ""

    await system.wait_for(waits, what="the second unit waiting for team-a's room")
    assert (await system.phase("second", "bare-a")) == c.Phase.ENQUEUED
    # Its owner says it is done: its quota goes to the next.
    await write_phase(system, "handmade", "bare-a", c.Phase.SUCCEED)
    await system.wait_phase("second", c.Phase.DEQUEUED, namespace="bare-a", timeout=15)
    assert (await system.phase("handmade", "bare-a")) == c.Phase.SUCCEED  # (left as its owner wrote it)


async def test_a_hand_made_unit_cannot_borrow_another_teams_quota(system: System) -> None:
    await two_teams(system)
    await system.apply(bare_unit("borrower", "bare-b", 1, labels={c.LABEL_QUOTA_NAME: "team-a"}))

    async def refused() -> str:
        status = (await system.unit("borrower", "bare-b")).get("status") or {}
        return str(status.get("message")) if "not bound to namespace bare-b" in str(status.get("message")) else ""

    message = await system.wait_for(refused, what="the borrower told team-a is not its namespace's")
    assert "quota team-a" in message
    assert (await system.phase("borrower", "bare-b")) == c.Phase.ENQUEUED


async def test_a_bare_unit_is_preempted_by_its_phase_and_requeued(start_system: SystemFactory) -> None:
    """A higher-priority unit reclaims team-a's min from a bare unit borrowing it: the borrower's
    phase is set to Preempted (as Koord-Queue's job extensions read it: suspend, then Enqueued)."""
    async with start_system() as system:
        await system.apply(namespace("bare-a"), namespace("bare-b"))
        await create(system, tree(gpus("team-a", 2, 4, namespaces=["bare-a"]),
                                  gpus("team-b", 2, 4, namespaces=["bare-b"]), root_gpus=4))
        await system.apply(bare_unit("borrower", "bare-b", 4, priority=1))
        await system.wait_phase("borrower", c.Phase.DEQUEUED, namespace="bare-b", timeout=15)
        await system.apply(bare_unit("owner", "bare-a", 2, priority=1))

        async def preempted() -> bool:
            return await system.phase("borrower", "bare-b") == c.Phase.PREEMPTED

        await system.wait_for(preempted, what="the borrower preempted")
        await system.wait_phase("owner", c.Phase.DEQUEUED, namespace="bare-a", timeout=15)


async def test_bare_units_off_wait_and_say_so(start_system: SystemFactory) -> None:
    async with start_system(config=replace(quick_config(), bare_queue_units=False)) as system:
        await two_teams(system)
        await system.apply(bare_unit("handmade", "bare-a", 1))

        async def told() -> str:
            message = str(((await system.unit("handmade", "bare-a")).get("status") or {}).get("message"))
            return message if "--no-bare-queue-units" in message else ""

        message = await system.wait_for(told, what="the unit told bare units are off")
        assert "stands for no job" in message
        assert (await system.phase("handmade", "bare-a")) == c.Phase.ENQUEUED


async def test_a_bare_unit_grown_after_its_admission_is_sent_back_and_queued_at_its_new_size(
        system: System) -> None:
    """As a Koord-Queue extension raises its unit's request when its job's replicas grow: charged
    only what it was admitted with, it would run past its quota's max; it is Preempted instead."""
    await two_teams(system)
    await system.apply(bare_unit("growing", "bare-a", 2))
    await system.wait_phase("growing", c.Phase.DEQUEUED, namespace="bare-a", timeout=15)
    await system.akubectl("patch", "queueunit", "growing", "-n", "bare-a", "--type", "merge", "-p",
                          json.dumps({"spec": {"resource": {"cpu": "1", "memory": "100Mi", c.GPU: "6"}}}))

    async def sent_back() -> str:
        status = (await system.unit("growing", "bare-a")).get("status") or {}
        return str(status.get("message")) if status.get("phase") == c.Phase.PREEMPTED else ""

    message = await system.wait_for(sent_back, what="the grown unit sent back")
    assert "it asks for more than it was admitted with: nvidia.com/gpu 6 (admitted with 2)" in message

    async def never_fits() -> str:
        status = (await system.unit("growing", "bare-a")).get("status") or {}
        return str(status.get("message")) if "can never fit" in str(status.get("message")) else ""

    assert "more than its max 4" in await system.wait_for(never_fits, what="the grown unit told it never fits")


async def test_a_bare_unit_made_inactive_gives_its_quota_back_and_comes_back_once_active(system: System) -> None:
    await two_teams(system)
    await system.apply(bare_unit("paused", "bare-a", 2))
    await system.wait_phase("paused", c.Phase.DEQUEUED, namespace="bare-a", timeout=15)
    await system.akubectl("patch", "queueunit", "paused", "-n", "bare-a", "--type", "merge", "-p",
                          json.dumps({"spec": {"active": False}}))

    async def sent_back() -> str:
        status = (await system.unit("paused", "bare-a")).get("status") or {}
        return str(status.get("message")) if status.get("phase") == c.Phase.PREEMPTED else ""

    assert "it is inactive" in await system.wait_for(sent_back, what="the inactive unit sent back")
    await system.akubectl("patch", "queueunit", "paused", "-n", "bare-a", "--type", "merge", "-p",
                          json.dumps({"spec": {"active": True}}))
    await system.wait_phase("paused", c.Phase.DEQUEUED, namespace="bare-a", timeout=20)
