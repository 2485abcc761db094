"""The cycle's cost with GPU flavors (issue 32): each team quota with 3 flavors (one leaf
per GPU model, docs/gpus.md), against the same teams as plain leaves.

20 parents x 10 teams, 3 resources, a bounded cluster (no reclaim: the cycle's own cost,
not victims'); 50 pending units per team, of 8
request shapes and 3 priorities. ``--flavors 3``: each team is a parent with 3 flavor
leaves (min and max split in three, a node selector each, in an order), its units charged
to the team; ``--flavors 0``: each team is a plain leaf of the same min and max. After a
first cycle that fills the cluster, every cycle sees 20 admitted units finish and 20 new
ones arrive. Prints the first cycle and the steady-state cycle p50/p99 (ms), one line.

    python bench/engine_flavors.py --flavors 3
    python bench/engine_flavors.py --flavors 0
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

from koordqueue.engine import Engine
from koordqueue.engine.model import EngineConfig, QuotaInfo, auto_queue_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cycle import churn  # noqa: E402  (the churn both engine benches share)

PARENTS, TEAMS, PER_TEAM, CYCLES = 20, 10, 50, 100
UNIT = 1000
GI = 1024**3 * 1000
MODELS = ("h100", "a100", "l40s")


def limits(scale: int) -> dict[str, int]:
    return {"cpu": 192 * scale * UNIT, "memory": 1536 * scale * GI, "nvidia.com/gpu": 24 * scale * UNIT}


def third(amounts: dict[str, int]) -> dict[str, int]:
    return {name: amount // 3 for name, amount in amounts.items()}


def build(flavors: int) -> tuple[Engine, list[str]]:
    engine = Engine(EngineConfig(cluster_capacity=limits(PARENTS * TEAMS * 3 // 2), reclaim=False))
    teams: list[str] = []
    for p in range(PARENTS):
        engine.set_quota(QuotaInfo(f"p{p}", "default", limits(TEAMS), limits(2 * TEAMS), is_parent=True))
        for t in range(TEAMS):
            name = f"p{p}-t{t}"
            teams.append(name)
            if not flavors:
                team = QuotaInfo(name, name, limits(1), limits(4), parent=f"p{p}")
                engine.set_quota(team)
                engine.set_queue(auto_queue_for(team))
                continue
            team = QuotaInfo(name, name, limits(1), limits(4), parent=f"p{p}", is_parent=True,
                             flavor_order=tuple(f"{name}-{m}" for m in MODELS[:flavors]))
            engine.set_quota(team)
            engine.set_queue(auto_queue_for(team))
            for model in MODELS[:flavors]:
                engine.set_quota(QuotaInfo(f"{name}-{model}", name, third(limits(1)), third(limits(4)), parent=name,
                                           node_selector=(("nvidia.com/gpu.product", model),)))
    return engine, teams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flavors", type=int, choices=(0, 3), default=3)
    args = parser.parse_args()
    rng = random.Random(7)
    engine, teams = build(args.flavors)
    run = churn(engine, teams, PER_TEAM, CYCLES, rng)
    first_ms, first, times, admitted = run.first_ms, run.first, run.times, run.admitted
    times.sort()
    p50 = 1000 * statistics.median(times)
    p99 = 1000 * times[int(0.99 * len(times)) - 1]
    print(f"flavors={args.flavors} units={len(teams) * PER_TEAM} first_cycle_ms={first_ms:.1f} "
          f"first_admitted={len(first.admitted)} steady_p50_ms={p50:.2f} steady_p99_ms={p99:.2f} "
          f"steady_admitted={admitted}")


if __name__ == "__main__":
    main()
