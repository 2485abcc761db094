"""Koord-Queue's ElasticQuotaV2 plugin's Queue-per-quota tests
(pkg/framework/plugins/elasticquotav1alpha1/elasticquota_handler_test.go, TestMakeNewestQueueCr),
translated case by case: the Queue made for an ElasticQuota, and kept in step with it. The
cases that do not carry over are in docs/migration.md."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c

from .conftest import System, quota

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]


async def queue_of(system: System, name: str) -> dict[str, Any]:
    return await system.get_json("queue", name, "-n", c.SYSTEM_NAMESPACE)


async def test_make_newest_queue_cr_create(system: System) -> None:
    """TestMakeNewestQueueCr, create (its "Priority" case): a quota gets a Queue named like it
    in Koord-Queue's namespace, with the quota's policy and priority 1000."""
    await system.apply(quota("quota1", 1, 2, policy="Priority"))

    async def made() -> dict[str, Any]:
        return await queue_of(system, "quota1")

    queue = await system.wait_for(made, what="the quota's Queue")
    assert queue["metadata"]["namespace"] == c.SYSTEM_NAMESPACE
    assert queue["spec"] == {"queuePolicy": "Priority", "priority": c.AUTO_QUEUE_PRIORITY}


async def test_make_newest_queue_cr_update(system: System) -> None:
    """TestMakeNewestQueueCr, update: the quota's policy label changed, its Queue's policy
    follows (Block to Priority, as its third case; and back)."""
    await system.apply(quota("quota1", 1, 2, policy="Block"))

    async def policy(expected: str) -> bool:
        return (await queue_of(system, "quota1"))["spec"]["queuePolicy"] == expected

    await system.wait_for(lambda: policy("Block"), what="the Queue's policy Block")
    await system.apply(quota("quota1", 1, 2, policy="Priority"))
    await system.wait_for(lambda: policy("Priority"), what="the Queue's policy following the quota's")
