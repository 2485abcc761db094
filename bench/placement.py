"""The engine's scheduling cycles with placement on and off (issue 18).

1,000 nodes of 8 GPUs in 3 topology levels (4 zones x 5 blocks x 10 racks x 5 nodes),
a tenth of them tainted and only tolerated by some jobs, half labelled a100 and half h100;
10,000 pending PyTorchJobs over 50 quotas whose max adds up to the cluster. Jobs are 1 to
8 pods of 1, 2, 4 or 8 GPUs; a fifth ask for their pods in one rack (required), a fifth
prefer one block, a tenth select an accelerator, a tenth are elastic (admitted with the
workers that fit), a tenth tolerate the taint.

Placement on: the engine knows the nodes, and each unit's pod sets; the pods of an admitted
unit are bound at once where the engine planned them (what the controller and the
simulator tell it: set_node_usage, set_unit_pods). Placement off: the same jobs as
requests alone, no nodes (Koord-Queue's admission on quota). A first cycle fills the
cluster; then every cycle 20 admitted jobs end (their pods gone) and 20 new ones arrive.
Rounds alternate on and off with the same jobs (seeded), so both see the same machine.

Prints, per mode, the first cycle, the steady cycles' p50/p99, and admissions per second
of engine time (the admissions of the steady cycles over their time). Checks as it goes:
no node gets more than its allocatable, no pod where its rules forbid it, no required
rack split.

    .venv/bin/python bench/placement.py              # --json for every figure
    .venv/bin/python bench/placement.py --cycles 30 --rounds 1 --modes on --clock cpu
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from koordqueue.api.constants import (
    LABEL_HOSTNAME,
    LABEL_TOPOLOGY_BLOCK,
    LABEL_TOPOLOGY_RACK,
    LABEL_TOPOLOGY_ZONE,
    PODS,
)
from koordqueue.engine import Engine
from koordqueue.engine.model import (
    EngineConfig,
    NodeInfo,
    PodSetInfo,
    QuotaInfo,
    Taint,
    Toleration,
    TopologyRequest,
    UnitInfo,
    auto_queue_for,
)

UNIT = 1000
CLOCK = [time.perf_counter]  # what cycles are timed by (--clock cpu: the process's CPU time)
GI = 1024**3 * 1000
GPU = "nvidia.com/gpu"
ACCELERATOR = "example.com/accelerator"
TAINT = Taint("dedicated", "inference", "NoSchedule")
NODE = {"cpu": 96 * UNIT, "memory": 1024 * GI, GPU: 8 * UNIT, PODS: 110 * UNIT}


@dataclass
class ClusterScale:
    """How big a cluster, how many jobs, how long."""

    zones: int = 4
    blocks: int = 5
    racks: int = 10
    per_rack: int = 5
    quotas: int = 50
    jobs: int = 10_000
    cycles: int = 200
    churn: int = 20  # jobs ending and arriving per steady cycle

    @property
    def nodes(self) -> int:
        return self.zones * self.blocks * self.racks * self.per_rack


def make_nodes(shape: ClusterScale) -> list[NodeInfo]:
    nodes = []
    index = 0
    for z in range(shape.zones):
        for b in range(shape.blocks):
            for r in range(shape.racks):
                for n in range(shape.per_rack):
                    name = f"n-{z}-{b}-{r}-{n}"
                    labels = {LABEL_TOPOLOGY_ZONE: f"z{z}", LABEL_TOPOLOGY_BLOCK: f"b{b}", LABEL_TOPOLOGY_RACK: f"r{r}",
                              LABEL_HOSTNAME: name, ACCELERATOR: "a100" if index % 2 else "h100"}
                    nodes.append(NodeInfo(name, dict(NODE), labels, (TAINT,) if index % 10 == 0 else ()))
                    index += 1
    return nodes


@dataclass
class Job:
    """One job as both modes see it: its request, and its pod sets for placement."""

    quota: str
    priority: int
    pod_sets: tuple[PodSetInfo, ...]
    request: dict[str, int] = field(default_factory=dict)


def make_job(rng: random.Random, quota: str) -> Job:
    gpus = rng.choice((1, 2, 4, 8))
    pods = rng.choice((1, 2, 2, 4, 4, 8))
    request = {"cpu": 8 * gpus * UNIT, "memory": 64 * gpus * GI, GPU: gpus * UNIT}
    kind = rng.random()
    topology = TopologyRequest(LABEL_TOPOLOGY_RACK, True) if kind < 0.2 else \
        TopologyRequest(LABEL_TOPOLOGY_BLOCK, False) if kind < 0.4 else None
    selector = ((ACCELERATOR, rng.choice(("a100", "h100"))),) if rng.random() < 0.1 else ()
    tolerations = (Toleration(TAINT.key, "Equal", TAINT.value, TAINT.effect),) if rng.random() < 0.1 else ()
    sets = [PodSetInfo("master", 1, request, None, selector, (), tolerations, topology)]
    if pods > 1:
        least = rng.randint(1, pods - 1) if rng.random() < 0.1 else None
        sets.append(PodSetInfo("worker", pods - 1, request, least, selector, (), tolerations, topology))
    total = {name: amount * pods for name, amount in request.items()}
    return Job(quota, rng.choice((0, 10, 100)), tuple(sets), total)


@dataclass
class Round:
    mode: str
    first_ms: float
    first_admitted: int
    cycles: list[float]
    admitted: int
    pending_at_end: int
    over_allocatable: list[str]
    misplaced: list[str]
    split: list[str]

    def figures(self) -> dict[str, Any]:
        times = sorted(self.cycles)
        return {"mode": self.mode, "first_cycle_ms": round(self.first_ms, 1), "first_admitted": self.first_admitted,
                "cycle_p50_ms": round(1000 * statistics.median(times), 2),
                "cycle_p99_ms": round(1000 * times[min(len(times) - 1, int(0.99 * len(times)))], 2),
                "steady_admitted": self.admitted,
                "admissions_per_second": round(self.admitted / sum(times), 1) if sum(times) else None,
                "pending_at_end": self.pending_at_end, "nodes_over_allocatable": self.over_allocatable,
                "pods_where_forbidden": self.misplaced, "required_racks_split": self.split}


def run_round(shape: ClusterScale, placement: bool, seed: int) -> Round:
    """One run of the workload, placement on or off; the jobs are the same for a seed."""
    rng = random.Random(seed)
    nodes = make_nodes(shape)
    by_name = {n.name: n for n in nodes}
    capacity = {name: amount * len(nodes) for name, amount in NODE.items()}
    engine = Engine(EngineConfig(cluster_capacity=capacity, node_fit=placement))
    if placement:
        for node in nodes:
            engine.set_node(node)
    leaf_max = {name: amount // shape.quotas for name, amount in capacity.items() if name != PODS}
    quotas = [f"q{i}" for i in range(shape.quotas)]
    for name in quotas:
        quota = QuotaInfo(name, name, {}, leaf_max)
        engine.set_quota(quota)
        engine.set_queue(auto_queue_for(quota))
    jobs: dict[str, Job] = {}
    serial = 0

    def submit(now: float) -> None:
        nonlocal serial
        serial += 1
        quota = rng.choice(quotas)
        job = make_job(rng, quota)
        key = f"{quota}/j{serial}"
        jobs[key] = job
        engine.set_unit(UnitInfo(quota, f"j{serial}", job.priority, now, job.request, quota_name=quota,
                                 pod_sets=job.pod_sets if placement else ()))

    used: dict[str, dict[str, int]] = {}
    bound: dict[str, list[tuple[str, str, int]]] = {}
    problems: dict[str, list[str]] = {"over": [], "misplaced": [], "split": []}

    def bind(key: str, planned: tuple[tuple[str, str, int], ...]) -> None:
        """The shell's part: the pods bound where planned, told back to the engine."""
        job = jobs[key]
        requests = {ps.name: ps for ps in job.pod_sets}
        pods: dict[tuple[str, str], int] = {}
        racks = set()
        for pod_set, node, count in planned:
            ps = requests[pod_set]
            info = by_name[node]
            if any(info.labels.get(k) != v for k, v in ps.node_selector) or \
                    (info.taints and not ps.tolerations):
                problems["misplaced"].append(f"{key}/{pod_set} on {node}")
            if ps.topology is not None and ps.topology.required:
                racks.add(tuple(info.labels[level] for level in
                                (LABEL_TOPOLOGY_ZONE, LABEL_TOPOLOGY_BLOCK, LABEL_TOPOLOGY_RACK)))
            room = used.setdefault(node, {})
            for name, amount in ps.request.items():
                room[name] = room.get(name, 0) + count * amount
            room[PODS] = room.get(PODS, 0) + count * UNIT
            if any(room.get(name, 0) > NODE.get(name, 0) for name in room):
                problems["over"].append(node)
            engine.set_node_usage(node, room)
            pods[pod_set, node] = pods.get((pod_set, node), 0) + count
        if len(racks) > 1:
            problems["split"].append(key)
        engine.set_unit_pods(key, pods)
        bound[key] = list(planned)

    def finish(key: str) -> None:
        job = jobs.pop(key)
        requests = {ps.name: ps.request for ps in job.pod_sets}
        for pod_set, node, count in bound.pop(key, ()):
            room = used[node]
            for name, amount in requests[pod_set].items():
                room[name] -= count * amount
            room[PODS] -= count * UNIT
            engine.set_node_usage(node, room)
        engine.remove_unit(key)

    for _ in range(shape.jobs):
        submit(0.0)
    gc.collect()
    start = CLOCK[0]()
    first = engine.schedule(0.0)
    first_ms = 1000 * (CLOCK[0]() - start)
    running: list[str] = []
    for admission in first.admitted:
        running.append(admission.unit)
        if placement and admission.placement is not None:
            bind(admission.unit, admission.placement.nodes)
    times: list[float] = []
    admitted = 0
    for cycle in range(1, shape.cycles + 1):
        now = float(cycle)
        for _ in range(min(shape.churn, len(running))):
            finish(running.pop(rng.randrange(len(running))))
            submit(now)
        start = CLOCK[0]()
        result = engine.schedule(now)
        times.append(CLOCK[0]() - start)
        gone = {p.unit for p in result.preempted}
        for key in gone:
            if key in bound:  # its pods go: its room comes back
                job = jobs[key]
                requests = {ps.name: ps.request for ps in job.pod_sets}
                for pod_set, node, count in bound.pop(key):
                    room = used[node]
                    for name, amount in requests[pod_set].items():
                        room[name] -= count * amount
                    room[PODS] -= count * UNIT
                    engine.set_node_usage(node, room)
                engine.set_unit_pods(key, {})
        running = [k for k in running if k not in gone]
        for admission in result.admitted:
            running.append(admission.unit)
            if placement and admission.placement is not None:
                bind(admission.unit, admission.placement.nodes)
        admitted += len(result.admitted)
    pending = sum(len(rows) for rows in engine.queue_positions().values())
    return Round("on" if placement else "off", first_ms, len(first.admitted), times, admitted, pending,
                 sorted(set(problems["over"])), problems["misplaced"], problems["split"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--racks", type=int, default=10, help="racks per block (5 nodes each, 4 zones x 5 blocks)")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="rounds per mode, alternating on and off")
    parser.add_argument("--modes", default="on,off", help="on, off or on,off: placement on, off, or both alternating")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="time cycles by the wall clock or by the process's CPU time (less disturbed by other load)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.clock == "cpu":
        CLOCK[0] = time.process_time
    modes = [mode == "on" for mode in args.modes.split(",")]
    shape = ClusterScale(racks=args.racks, jobs=args.jobs, cycles=args.cycles)
    rounds = []
    for index in range(args.rounds):
        for placement in (modes if index % 2 == 0 else modes[::-1]):
            rounds.append(run_round(shape, placement, seed=7))
    figures = [r.figures() for r in rounds]
    out = {"nodes": shape.nodes, "jobs": shape.jobs, "quotas": shape.quotas, "cycles": shape.cycles,
           "rounds": figures}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{shape.nodes} nodes, {shape.jobs} pending jobs over {shape.quotas} quotas, {shape.cycles} steady cycles "
          f"of {shape.churn} jobs ending and {shape.churn} arriving")
    print("mode  first cycle            steady p50   p99       admitted  admissions/s  pending at end")
    for f in figures:
        print(f"{f['mode']:<5} {f['first_cycle_ms']:>8.0f} ms ({f['first_admitted']:>5} adm)  "
              f"{f['cycle_p50_ms']:>7.2f} ms  {f['cycle_p99_ms']:>7.2f} ms  {f['steady_admitted']:>8}  "
              f"{f['admissions_per_second']:>12}  {f['pending_at_end']:>8}")
    problems = [(f["mode"], k) for f in figures for k in ("nodes_over_allocatable", "pods_where_forbidden",
                                                          "required_racks_split") if f[k]]
    print("checks: " + ("every node within its allocatable, every pod where it may go, no required rack split"
                        if not problems else f"FAILED {problems}"))


if __name__ == "__main__":
    main()
