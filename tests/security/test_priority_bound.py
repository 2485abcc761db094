"""Issue 29, item 8: priority is whatever a tenant writes (any int32 in the annotation, any
PriorityClass). A quota's `koord-queue/max-priority` bounds it: a job asking more is queued at
the bound and told (PriorityCapped). And priority never takes another quota's min: a quota
within its min reclaims from a borrower whatever the borrower's priority."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.meta import INT32_MAX
from koordqueue.api.objects import parse_elastic_quota
from tests.controller.conftest import System, pytorch_job, quota
from tests.controller.test_lifecycle import queue
from tests.engine.builders import engine_with, keys, parent, unit, used
from tests.engine.builders import quota as engine_quota

pytestmark = pytest.mark.timeout(180)


def test_the_bound_is_read_from_the_quota() -> None:
    bounded = quota("q", 0, 4, annotations={c.ANNOTATION_MAX_PRIORITY: "100"})
    assert parse_elastic_quota(bounded).quota.max_priority == 100
    assert parse_elastic_quota(quota("q", 0, 4)).quota.max_priority is None
    bad = parse_elastic_quota(quota("q", 0, 4, annotations={c.ANNOTATION_MAX_PRIORITY: "high"}))
    assert bad.quota.max_priority is None and any(c.ANNOTATION_MAX_PRIORITY in w for w in bad.warnings)


def test_a_borrowers_top_priority_does_not_keep_another_quota_from_its_min() -> None:
    """b borrows a's half with units of the highest priority there is; a, within its min,
    takes it back with a unit of priority 0."""
    engine = engine_with(parent("pool", 8, 8), engine_quota("a", 4, 8, "pool"), engine_quota("b", 4, 8, "pool"),
                         protect_seconds=0.0)
    for i in range(4):
        engine.set_unit(unit(f"b{i}", 2, "b", priority=INT32_MAX, created=float(i)))
    engine.schedule(10.0)
    assert used(engine)["b"] == 8
    engine.set_unit(unit("a1", 4, "a", priority=0, created=20.0))
    result = engine.schedule(20.0)
    assert keys(result.admitted) == ["default/a1"]
    assert len(result.preempted) == 2 and used(engine) == {"pool": 8, "a": 4, "b": 4}


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def _capped(system: System, name: str, namespace: str) -> list[str]:
    return [e["message"] for e in await system.events(name, namespace)
            if e["reason"] == c.EventReason.PRIORITY_CAPPED.value and e["type"] == c.EventType.WARNING.value]


@pytest.mark.both_control_planes
async def test_a_tenant_cannot_preempt_a_co_tenant_by_writing_a_huge_priority(system: System) -> None:
    """Quota `shared` (t2's, lent to t1) bounds priority at 100; its Queue lets higher priority
    preempt. t2's job runs at 100; t1's job asks for 2147483647: it is queued at 100, which
    preempts nobody of 100, and waits."""
    await system.apply(namespace("t1"), namespace("t2"))
    await system.apply(quota("shared", 0, 4, namespace="t2", annotations={
        c.ANNOTATION_MAX_PRIORITY: "100", c.ANNOTATION_QUOTA_NAMESPACES: json.dumps(["t1"])}))
    await system.apply(queue("shared", "shared", annotations={c.ANNOTATION_ENABLE_PREEMPTION: c.TRUE}))
    await system.apply(pytorch_job("settled", gpus_per_pod=4, workers=0, namespace="t2", quota_name="shared",
                                   priority=100))
    await system.wait_phase("settled-py-qu", c.Phase.RUNNING, namespace="t2")
    await system.apply(pytorch_job("bully", gpus_per_pod=4, workers=0, namespace="t1", quota_name="shared",
                                   priority=INT32_MAX))

    told = await system.wait_for(lambda: _capped(system, "bully", "t1"), what="the bully told its priority is capped")
    assert told == [f"priority {INT32_MAX} capped at 100, the most quota shared allows "
                    f"(annotation {c.ANNOTATION_MAX_PRIORITY})"]

    async def waits() -> str:
        status = (await system.unit("bully-py-qu", "t1")).get("status") or {}
        assert status.get("phase") in (None, c.Phase.ENQUEUED.value), status
        return str(status.get("message") or "")

    said = await system.wait_for(waits, what="the bully waiting, saying why")
    assert "shared" in said, said
    assert system.controller.engine.unit("t1/bully-py-qu").priority == 100
    assert await system.phase("settled-py-qu", "t2") == c.Phase.RUNNING
    events = [e["reason"] for e in await system.events("settled-py-qu", "t2")]
    assert c.EventReason.PREEMPTED.value not in events

    # The bound lifted: its priority is its own again, and it preempts.
    await system.akubectl("annotate", "elasticquota", "shared", "-n", "t2", f"{c.ANNOTATION_MAX_PRIORITY}-")
    await system.wait_phase("bully-py-qu", c.Phase.RUNNING, namespace="t1", timeout=60)
