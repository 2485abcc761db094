"""What one visibility API request costs the controller's event loop, 100,000 pending units.

1,000 quotas (and their Queues) of 100 pending units each, plus one Queue of 10,000; the
request lists that Queue's first 1,000 units (the default limit). Cold: the queues' order is
worked out anew (engine.queue_positions, every queue); warm: reused (it is for a second, or
ten times as long as working it out took). Access reviews are answered at once (their round trip to kube-apiserver is not
the controller's CPU) and cached as in the server. Prints milliseconds per request (median of 5).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from types import SimpleNamespace
from typing import Any

from koordqueue.controller.visibility import Caller, VisibilityAPI
from koordqueue.engine import Engine
from koordqueue.engine.model import EngineConfig, QuotaInfo, UnitInfo, auto_queue_for

QUOTAS, PER_QUOTA, BIG = 1000, 100, 10_000
UNIT = 1000


class Reviews:
    """Allows everything cluster-wide for the admin, and namespace ns-0 only for the tenant."""

    async def create(self, _: Any, body: dict[str, Any]) -> dict[str, Any]:
        spec = body["spec"]
        attrs = spec["resourceAttributes"]
        allowed = spec["user"] == "admin" or attrs.get("group") != "scheduling.x-k8s.io" or \
            attrs.get("namespace") == "ns-0"
        return {"status": {"allowed": allowed}}


def engine_with_units() -> Engine:
    engine = Engine(EngineConfig(cluster_capacity={"cpu": 10 * UNIT}))
    serial = 0
    for q in range(QUOTAS + 1):
        name = f"q{q}"
        namespace = f"ns-{q % 10}"  # the big queue's in ns-0, the tenant's namespace
        quota = QuotaInfo(name, namespace, {"cpu": 0}, {"cpu": UNIT})
        engine.set_quota(quota)
        engine.set_queue(auto_queue_for(quota))
        for _ in range(BIG if q == QUOTAS else PER_QUOTA):
            serial += 1
            engine.set_unit(UnitInfo(namespace, f"u{serial}", serial % 3, float(serial),
                                     {"cpu": 2 * UNIT}, quota_name=name))
    engine.schedule(0.0)  # nothing fits (2 cpu each, 1 allowed): all stay pending
    return engine


async def main() -> None:
    engine = engine_with_units()
    controller = SimpleNamespace(
        sync_done=True, engine=engine, unit_informer={},
        shared=SimpleNamespace(informers=SimpleNamespace(queue={})), quota_sync=SimpleNamespace(quotas={}))
    api = VisibilityAPI(Reviews(), lambda: controller, "koord-queue")  # type: ignore[arg-type]
    tail = f"queues/q{QUOTAS}/queueunits"
    for who in ("admin", "tenant"):
        caller = Caller(who, ("system:authenticated",))
        for state in ("cold", "warm"):
            times = []
            for _ in range(5):
                if state == "cold":
                    api._cache.positions = None
                start = time.perf_counter()
                code, doc = await api.answer(tail, {}, caller)
                times.append(1000 * (time.perf_counter() - start))
                assert code == 200, doc
            print(f"{who:6} {state}: {statistics.median(times):7.1f} ms, {len(doc['items'])} items")


if __name__ == "__main__":
    asyncio.run(main())
