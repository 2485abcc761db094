"""QuotaSync at a start, on the in-memory API server: the Queues the quotas lack are written
several at once (one after another, 1,000 of them took 30 s on a loaded machine before the
first cycle could run) and the engine is fed them in the quotas' order, as before."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.quotasync import QuotaSync
from koordqueue.controller.resources import QUEUES, QUOTAS

from .conftest import quota
from .fakeapi import Clock, FakeKube, shared_on

LEAVES = 40


async def test_a_start_writes_the_missing_queues_several_at_once_and_feeds_them_in_order() -> None:
    fake = FakeKube()
    names = [f"team-{i:02d}" for i in range(LEAVES)]
    for name in names:
        fake.seed(QUOTAS, quota(name, 0, 8))
    fake.seed(QUEUES, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",  # one there already
                       "metadata": {"name": "team-00", "namespace": "koord-queue"}, "spec": {}})
    shared = shared_on(fake, Clock(), replace(ControllerConfig(), write_concurrency=8))
    sync = QuotaSync(shared)
    sync.wire()
    informers = [shared.informers.quota, shared.informers.queue]
    for informer in informers:
        informer.start()
    for informer in informers:
        await informer.wait_synced(5)
    in_flight, peak = 0, 0
    real = fake.create

    async def create(resource: Any, body: Any, **kwargs: Any) -> Any:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(0.01)  # a round trip to the API server
            return await real(resource, body, **kwargs)
        finally:
            in_flight -= 1

    setattr(fake, "create", create)  # noqa: B010 (a method of the instance, replaced)
    try:
        await sync.settle()
    finally:
        await asyncio.gather(*(i.stop() for i in informers))
    made = [w.name for w in fake.writes(QUEUES.plural) if w.verb == "create"]
    assert sorted(made) == names[1:]  # the missing ones, once each
    assert peak == 8  # write_concurrency at once, never more
    fed = [key.split("/")[1] for key in shared.engine._queues]
    assert fed[-(LEAVES - 1):] == names[1:]  # in the quotas' order
