"""Issue 29: the tenant of the suite, acting with only the role our docs give to users (the
chart's koord-queue-user, bound in its namespace; docs/security.md). It may queue jobs and read
its units; it may write no quota, Queue or unit, and its priority stays within its quota's bound."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.api.meta import INT32_MAX
from tests.chart.helmtool import render
from tests.controller.conftest import System, pytorch_job, quota
from tests.security.test_queue_knobs import queue

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

TENANT = "system:serviceaccount:t1:tenant"


def tenant_objects() -> list[dict[str, Any]]:
    """The chart's user role, and namespace t1's ServiceAccount bound to it there."""
    [role] = [o for o in render() if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "koord-queue-user"]
    return [role, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant", "namespace": "t1"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "tenant-user", "namespace": "t1"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
             "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": "t1"}]}]


async def test_a_tenant_with_the_user_role_queues_jobs_and_writes_no_policy(system: System) -> None:
    await system.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t1"}})
    await system.apply(quota("q-t1", 0, 8, namespace="t1", annotations={c.ANNOTATION_MAX_PRIORITY: "50"}))
    await system.apply(*tenant_objects())

    async def as_tenant(*args: str, stdin: str | None = None) -> str:
        return await system.akubectl(f"--as={TENANT}", *args, stdin=stdin, check=False)

    def dump(obj: dict[str, Any]) -> str:
        return yaml.safe_dump(obj)

    for obj in (quota("mine", 8, 64, namespace="t1"), queue("fast", "t1", "q-t1")):
        said = await as_tenant("create", "-f", "-", stdin=dump(obj))
        assert "forbidden" in said.lower(), said
    said = await as_tenant("create", "-f", "-", stdin=dump(pytorch_job("mine", gpus_per_pod=2, workers=0,
                                                                     namespace="t1", priority=INT32_MAX)))
    assert "created" in said, said
    await system.wait_phase("mine-py-qu", c.Phase.RUNNING, namespace="t1")
    listed = await as_tenant("get", "queueunits", "-n", "t1", "-o", "name")
    assert "mine-py-qu" in listed, listed
    said = await as_tenant("patch", "queueunit", "mine-py-qu", "-n", "t1", "--type=merge",
                           "-p", '{"spec": {"priority": 2147483647}}')
    assert "forbidden" in said.lower(), said

    async def capped() -> bool:
        return any(e["reason"] == c.EventReason.PRIORITY_CAPPED.value for e in await system.events("mine", "t1"))

    await system.wait_for(capped, what="the tenant's job told its priority is capped")
    assert system.controller.engine.unit("t1/mine-py-qu").priority == 50
