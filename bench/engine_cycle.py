"""Scheduling cycles with 100,000 pending units over 1,000 quotas.

50 parent quotas x 20 leaves, 3 resources, a bounded cluster; units of 8 request
shapes and 3 priorities, queue policies mixed (Priority, Block, Intelligent). After a
first cycle that fills the cluster, every cycle sees 20 admitted units finish and 20
new units arrive (the steady state of a busy controller). Prints the first cycle, the
cycle p50/p99 in the steady state (target p99 <= 50 ms), a cycle with no change, the
cycle after a quota's max is edited (taken in place), and the cycle after a quota is
added (which derives everything again).
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, replace

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine import Engine
from koordqueue.engine.model import CycleResult, EngineConfig, QuotaInfo, UnitInfo, auto_queue_for

PARENTS, LEAVES, PER_QUOTA = 50, 20, 100
UNIT = 1000
GI = 1024**3 * 1000
SHAPES = [{"cpu": 8 * g * UNIT, "memory": 64 * g * GI, "nvidia.com/gpu": g * UNIT} for g in (1, 2, 4, 8)]
SHAPES += [{"cpu": c * UNIT, "memory": 4 * c * GI} for c in (1, 4, 16, 32)]
POLICIES = [QueuePolicy.PRIORITY] * 8 + [QueuePolicy.BLOCK, QueuePolicy.INTELLIGENT]


def leaf_limits(scale: int) -> dict[str, int]:
    return {"cpu": 64 * scale * UNIT, "memory": 512 * scale * GI, "nvidia.com/gpu": 8 * scale * UNIT}


@dataclass
class Churn:
    """What `churn` measured: the first cycle, then each steady cycle's seconds."""

    first_ms: float
    first: CycleResult
    times: list[float]
    admitted: int
    running: list[str]


def churn(engine: Engine, queues: list[str], per_queue: int, cycles: int, rng: random.Random) -> Churn:
    """Fill every queue with `per_queue` units, run a first cycle, then `cycles` cycles in each
    of which 20 admitted units finish and 20 new ones arrive (the steady state of a busy
    controller). Shared by engine_flavors.py so both benches churn alike."""
    serial = 0

    def new_unit(quota: str, now: float) -> UnitInfo:
        nonlocal serial
        serial += 1
        return UnitInfo(quota, f"job-{serial}", rng.choice((0, 10, 100)), now, dict(rng.choice(SHAPES)),
                        quota_name=quota)

    for quota in queues:
        for _ in range(per_queue):
            engine.set_unit(new_unit(quota, 0.0))
    start = time.perf_counter()
    first = engine.schedule(0.0)
    first_ms = 1000 * (time.perf_counter() - start)
    running = [a.unit for a in first.admitted]
    times: list[float] = []
    admitted = 0
    for cycle in range(1, cycles + 1):
        now = float(cycle)
        for _ in range(20):
            key = running.pop(rng.randrange(len(running)))
            engine.remove_unit(key)
            engine.set_unit(new_unit(rng.choice(queues), now))
        start = time.perf_counter()
        result = engine.schedule(now)
        times.append(time.perf_counter() - start)
        running.extend(a.unit for a in result.admitted)
        running = [k for k in running if k not in {p.unit for p in result.preempted}]
        admitted += len(result.admitted)
    return Churn(first_ms, first, times, admitted, running)


def main() -> None:
    rng = random.Random(7)
    total = leaf_limits(PARENTS * LEAVES * 3 // 2)
    engine = Engine(EngineConfig(cluster_capacity=total))
    leaves: list[str] = []
    infos: dict[str, QuotaInfo] = {}
    for p in range(PARENTS):
        parent = QuotaInfo(f"p{p}", "default", leaf_limits(LEAVES), leaf_limits(2 * LEAVES), is_parent=True)
        engine.set_quota(parent)
        for q in range(LEAVES):
            name = f"p{p}-q{q}"
            leaf = QuotaInfo(name, name, leaf_limits(1), leaf_limits(4), parent=parent.name, policy=rng.choice(POLICIES))
            engine.set_quota(leaf)
            engine.set_queue(auto_queue_for(leaf))
            infos[name] = leaf
            leaves.append(name)
    run = churn(engine, leaves, PER_QUOTA, 400, rng)
    first_ms, first, times, admitted, running = run.first_ms, run.first, run.times, run.admitted, run.running
    start = time.perf_counter()
    engine.schedule(401.0)
    idle_ms = 1000 * (time.perf_counter() - start)
    edits: list[float] = []
    rebuilds: list[float] = []
    for step in range(3):
        # An administrator edits a quota's max (taken in place), then adds a quota
        # (everything is derived again, every unit loaded anew).
        engine.set_quota(replace(infos[leaves[step * 97]], max=leaf_limits(5 + step)))
        start = time.perf_counter()
        engine.schedule(402.0 + 2 * step)
        edits.append(time.perf_counter() - start)
        name = f"p{step}-new"
        engine.set_quota(QuotaInfo(name, name, {}, leaf_limits(1), parent=f"p{step}"))
        start = time.perf_counter()
        engine.schedule(403.0 + 2 * step)
        rebuilds.append(time.perf_counter() - start)
    pending = sum(len(rows) for rows in engine.queue_positions().values())
    times.sort()
    print(f"pending units        {pending} over {len(leaves)} quotas ({len(running)} admitted)")
    print(f"first cycle          {first_ms:.0f} ms ({len(first.admitted)} admitted)")
    print(f"steady cycles        p50 {1000 * statistics.median(times):.1f} ms, "
          f"p99 {1000 * times[int(0.99 * len(times))]:.1f} ms, max {1000 * times[-1]:.1f} ms "
          f"({admitted / len(times):.1f} admitted per cycle)")
    print(f"cycle with no change {idle_ms:.2f} ms")
    print(f"cycle after a quota's max is edited  median {1000 * statistics.median(edits):.0f} ms")
    print(f"cycle after a quota is added (a rebuild) median {1000 * statistics.median(rebuilds):.0f} ms")


if __name__ == "__main__":
    main()
