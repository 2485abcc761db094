"""Kueue's scheduler-performance "baseline" shape, replayed through the simulator.

5 parent quotas (max 120 CPU, is-parent) x 6 children (min 20, max 120 CPU): 30 leaf
quotas, each with its own Queue. Per leaf: 350 small jobs (1 CPU, 0.2 s, priority 50,
one every 0.1 s), 100 medium (5 CPU, 0.5 s, priority 100, every 0.5 s), 50 large
(20 CPU, 1 s, priority 200, every 1.2 s): 15,000 PyTorchJobs on 600 CPU, no nodes.
The trace is built in memory, so YAML parsing is not measured.

    .venv/bin/python bench/kueue_sim.py            # the full shape
    .venv/bin/python bench/kueue_sim.py --small    # 1/10 of the jobs per leaf
    .venv/bin/python bench/kueue_sim.py --json     # figures as one JSON object
    .venv/bin/python bench/kueue_sim.py --profile  # plus the engine's cProfile top 25
    .venv/bin/python bench/kueue_sim.py --extra-hold 0.02  # each job holds its quota 20 ms past its end

It also prints a floor under the waits: the sum over jobs of cpu x runtime x wait to
admission that no scheduler admitting whole jobs without preemption can go below
(``work_weighted_floor``), next to the same sum for our waits and for the targets.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import pstats
import sys
import time
from dataclasses import dataclass
from typing import Any

from koordqueue.api.constants import (
    ANNOTATION_PRIORITY,
    ANNOTATION_QUEUE,
    CPU,
    ELASTIC_QUOTA_KIND,
    KUBEFLOW_API_VERSION,
    LABEL_QUOTA_IS_PARENT,
    LABEL_QUOTA_PARENT,
    PYTORCH_JOB_KIND,
    QUOTA_API_VERSION,
    TRUE,
)
from koordqueue.api.quantity import format_quantity, parse_quantity
from koordqueue.engine.model import CycleResult
from koordqueue.sim.report import percentile
from koordqueue.sim.simulator import SimResult, Simulator
from koordqueue.sim.trace import JobEntry, Trace

NAMESPACE = "bench"
PARENTS, CHILDREN = 5, 6
CLUSTER_CPU = "600"


@dataclass(frozen=True)
class JobClass:
    name: str
    count: int  # per leaf
    cpu: str
    runtime: float
    priority: int
    every: float  # seconds between two submissions in one leaf


CLASSES = (
    JobClass("small", 350, "1", 0.2, 50, 0.1),
    JobClass("medium", 100, "5", 0.5, 100, 0.5),
    JobClass("large", 50, "20", 1.0, 200, 1.2),
)
KUEUE = {"makespan": 351.0, "usage": 55.9, "large": 16.5, "medium": 76.8, "small": 215.5}
GREEDY = {"large": 4.6, "medium": 2.5, "small": 14.5}  # a naive greedy scheduler, as the issue reports it
TARGET = {"makespan": 67.0, "usage": 97.0, "large": 2.0, "medium": 5.0, "small": 20.0, "engine_cpu": 3.0}


def quota(name: str, min_cpu: str, max_cpu: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": QUOTA_API_VERSION,
        "kind": ELASTIC_QUOTA_KIND,
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {"min": {CPU: min_cpu}, "max": {CPU: max_cpu}},
    }


def job(name: str, leaf: str, kind: JobClass) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {CPU: kind.cpu}}}
    return {
        "apiVersion": KUBEFLOW_API_VERSION,
        "kind": PYTORCH_JOB_KIND,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {ANNOTATION_QUEUE: leaf, ANNOTATION_PRIORITY: str(kind.priority)},
        },
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [container]}}}}},
    }


def leaves() -> list[str]:
    return [f"leaf-{p}-{c}" for p in range(PARENTS) for c in range(CHILDREN)]


def build_trace(divisor: int = 1, extra_hold: float = 0.0) -> Trace:
    """The baseline shape with ``count // divisor`` jobs of each class per leaf; each job holds
    its quota ``extra_hold`` seconds beyond its runtime (what a real system's writes add)."""
    trace = Trace()
    for p in range(PARENTS):
        trace.objects.append(quota(f"parent-{p}", "120", "120", {LABEL_QUOTA_IS_PARENT: TRUE}))
        for c in range(CHILDREN):
            trace.objects.append(quota(f"leaf-{p}-{c}", "20", "120", {LABEL_QUOTA_PARENT: f"parent-{p}"}))
    for leaf in leaves():
        for kind in CLASSES:
            for i in range(kind.count // divisor):
                name = f"{leaf}-{kind.name}-{i}"
                trace.jobs.append(JobEntry(len(trace.jobs), i * kind.every, kind.runtime + extra_hold,
                                           job(name, leaf, kind)))
    return trace


class ProfiledSimulator(Simulator):
    """The simulator with cProfile switched on only inside the engine's cycles."""

    def __init__(self, trace: Trace, profile: cProfile.Profile) -> None:
        super().__init__(trace, capacity={CPU: parse_quantity(CLUSTER_CPU)}, time_engine=True)
        self.profile = profile

    def _cycle(self) -> float | None:
        self.profile.enable()
        try:
            result: CycleResult = self.engine.schedule(self.now)
        finally:
            self.profile.disable()
        self.engine.schedule = lambda now: result  # type: ignore[method-assign]
        try:
            return super()._cycle()
        finally:
            del self.engine.schedule


def work_weighted_floor(result: SimResult) -> float:
    """The least sum of cpu x runtime x wait-to-admission (CPU s^2) that any scheduler
    which does not preempt can reach on these arrivals.

    Per parent quota (its max is a hard limit for its jobs): the unfinished work U(t)
    is at least that of one server of the parent's capacity that never idles while work
    is left (U_min); and U is the work waiting to be admitted plus the rest of the work
    of running jobs, which sums, over a run, to cpu x runtime^2 / 2 per job whatever
    the order. So the sum over jobs of cpu x runtime x wait >= integral of U_min -
    sum of cpu x runtime^2 / 2, for every order of admission.
    """
    by_parent: dict[str, list[tuple[float, float, float]]] = {}
    for job in result.jobs:
        if job.quota is None or job.submitted is None or job.runtime is None:
            continue
        parent = result.quotas[job.quota].parent or job.quota
        cpu = job.request.get(CPU, 0) / 1000
        by_parent.setdefault(parent, []).append((job.submitted, cpu * job.runtime, cpu * job.runtime**2 / 2))
    floor = 0.0
    for parent, arrivals in by_parent.items():
        capacity = result.quotas[parent].max[CPU] / 1000
        arrivals.sort()
        unfinished = integral = last = 0.0
        for at, work, running in arrivals:
            drained = min(unfinished, capacity * (at - last))
            integral += (unfinished - drained / 2) * drained / capacity
            unfinished += work - drained
            last = at
            integral -= running
        integral += unfinished * unfinished / (2 * capacity)
        floor += integral
    return floor


def work_weighted(waits: dict[str, float]) -> float:
    """The sum of cpu x runtime x wait (CPU s^2) when each class waits ``waits[name]`` on average."""
    leaves = PARENTS * CHILDREN
    return sum(leaves * k.count * float(k.cpu) * k.runtime * waits[k.name] for k in CLASSES)


def figures(result: SimResult, wall: float) -> dict[str, Any]:
    jobs = result.jobs
    finished = [j.finished for j in jobs if j.finished is not None]
    makespan = max(finished) if finished else result.end
    leaf_usage = []
    for leaf in leaves():
        usage = result.usage.quotas.get(leaf)
        area = usage.area.get(CPU, 0.0) if usage else 0.0
        leaf_usage.append(area / (parse_quantity("20") * makespan) if makespan > 0 else 0.0)
    classes: dict[str, Any] = {}
    for kind in CLASSES:
        waits = [
            j.admitted - j.submitted
            for j in jobs
            if j.name and f"-{kind.name}-" in j.name and j.admitted is not None and j.submitted is not None
        ]
        classes[kind.name] = {
            "jobs": len(waits),
            "mean_wait": sum(waits) / len(waits) if waits else math.nan,
            "p90_wait": percentile(waits, 0.9) if waits else math.nan,
        }
    over_max = [
        f"{name}: peak {format_quantity(result.usage.quotas[name].peak.get(res, 0))} > max {format_quantity(limit)} {res}"
        for name, quota_info in result.quotas.items()
        if name in result.usage.quotas
        for res, limit in quota_info.max.items()
        if result.usage.quotas[name].peak.get(res, 0) > limit
    ]
    ours = work_weighted({name: c["mean_wait"] for name, c in classes.items()})
    return {
        "work_weighted_wait": {
            "ours": ours,
            "floor": work_weighted_floor(result),
            "targets": work_weighted({k.name: TARGET[k.name] for k in CLASSES}),
            "greedy": work_weighted(GREEDY),
        },
        "jobs": len(jobs),
        "unfinished": len(jobs) - len(finished),
        "makespan": makespan,
        "mean_usage_percent": 100 * sum(leaf_usage) / len(leaf_usage),
        "classes": classes,
        "preemptions": sum(j.preemptions for j in jobs),
        "engine_cpu_seconds": result.engine_seconds,
        "wall_seconds": wall,
        "quotas_over_max": over_max,
        "peak_used": {name: format_quantity(u.peak.get(CPU, 0)) for name, u in result.usage.quotas.items()},
        "warnings": result.warnings,
    }


def render(f: dict[str, Any]) -> str:
    def row(label: str, ours: str, kueue: str, target: str) -> str:
        return f"  {label:<26}{ours:>12}{kueue:>12}{target:>12}"

    lines = [
        f"Kueue baseline shape through the simulator: {f['jobs']} jobs, {f['unfinished']} unfinished, "
        f"{f['preemptions']} preemptions",
        row("", "ours", "Kueue", "target"),
        row("makespan (simulated s)", f"{f['makespan']:.1f}", f"{KUEUE['makespan']:.0f}", f"<= {TARGET['makespan']:.0f}"),
        row("mean quota usage", f"{f['mean_usage_percent']:.1f} %", f"{KUEUE['usage']} %", f">= {TARGET['usage']:.0f} %"),
    ]
    for kind in reversed(CLASSES):
        c = f["classes"][kind.name]
        lines.append(
            row(f"{kind.name}: mean to admission", f"{c['mean_wait']:.2f} s", f"{KUEUE[kind.name]} s", f"<= {TARGET[kind.name]:.0f} s")
        )
        lines.append(row(f"{kind.name}: p90 to admission", f"{c['p90_wait']:.2f} s", "-", "-"))
    lines.append(row("engine CPU", f"{f['engine_cpu_seconds']:.2f} s", "-", f"<= {TARGET['engine_cpu']:.0f} s"))
    w = f["work_weighted_wait"]
    lines.append(
        f"  sum of cpu x runtime x wait (CPU s^2): ours {w['ours']:,.0f}; greedy {w['greedy']:,.0f}; "
        f"the targets {w['targets']:,.0f}; no scheduler that does not preempt goes below {w['floor']:,.0f}"
    )
    lines.append(row("wall time of the run", f"{f['wall_seconds']:.2f} s", "-", "-"))
    if f["quotas_over_max"]:
        lines.append("QUOTA OVER MAX: " + "; ".join(f["quotas_over_max"]))
    lines += [f"warning: {w}" for w in f["warnings"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="1/10 of the jobs (a quick smoke run)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--profile", action="store_true", help="print the engine's cProfile top 25 too")
    parser.add_argument("--extra-hold", type=float, default=0.0, metavar="SECONDS",
                        help="every job holds its quota this much longer than it runs (how waits depend on it)")
    args = parser.parse_args(argv)
    trace = build_trace(10 if args.small else 1, args.extra_hold)
    profile = cProfile.Profile() if args.profile else None
    simulator = (
        ProfiledSimulator(trace, profile) if profile
        else Simulator(trace, capacity={CPU: parse_quantity(CLUSTER_CPU)}, time_engine=True)
    )
    start = time.perf_counter()
    result = simulator.run()
    f = figures(result, time.perf_counter() - start)
    print(json.dumps(f, indent=2) if args.json else render(f))
    if profile:
        pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
