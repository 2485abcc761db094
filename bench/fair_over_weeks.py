"""Fair sharing by usage history over four weeks: a bursty team and a steady team.

    python bench/fair_over_weeks.py            # the table: history off vs on
    python bench/fair_over_weeks.py --write    # (re)write examples/traces/fair-over-weeks.yaml

The trace (seeded, so always the same) runs on a 16-GPU cluster under one parent quota,
``research``, whose two children have the same min (4 GPUs), max (16) and weight: team
``steady`` submits a 2-GPU job of 4 hours about every 90 minutes all month (5.3 GPUs on average);
team ``bursty`` submits 60 jobs of 4 GPUs for 8 hours on the first day of weeks 1 and 3.
"History on" is the trace as written (``koord-queue/fair-sharing: usage-history`` on
``research``, half-life 168h); "off" is the same trace with the annotation set to ``none``.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
from pathlib import Path
from typing import Any

import yaml

from koordqueue.api.constants import ANNOTATION_FAIR_SHARING, FAIR_SHARING_NONE
from koordqueue.sim.simulator import SimResult, simulate
from koordqueue.sim.trace import parse_trace

TRACE = Path(__file__).parents[1] / "examples" / "traces" / "fair-over-weeks.yaml"
HOUR = 3600
DAY = 24 * HOUR
WEEKS = 4
GPU = "nvidia.com/gpu"
MIN_GPU = int(__import__("os").environ.get("MIN_GPU", "0"))
STEADY_GPUS = int(__import__("os").environ.get("STEADY_GPUS", "1"))
BURST_GPUS = int(__import__("os").environ.get("BURST_GPUS", "2"))
RUNTIMES = [h * HOUR for h in (1, 2, 3, 4)]
STEADY_DAY = float(__import__("os").environ.get("STEADY_DAY", "0.5"))
STEADY_NIGHT = float(__import__("os").environ.get("STEADY_NIGHT", "1.5"))
BURST_JOBS = int(__import__("os").environ.get("BURST_JOBS", "250"))
BURST_DAYS = float(__import__("os").environ.get("BURST_DAYS", "1"))

HEADER = """\
# Fair sharing by usage history over four weeks (docs/fairness.md): one bursty team and
# one steady team with the same min, max and weight on a 16-GPU cluster.
#
#   koord-queue simulate examples/traces/fair-over-weeks.yaml
#   python bench/fair_over_weeks.py     # history off vs on, side by side
#
# Written by bench/fair_over_weeks.py --write (seeded). team steady submits a 2-GPU job of
# 4 h about every 90 min; team bursty 60 jobs of 4 GPUs for 8 h on the first day of weeks 1
# and 3. With research's koord-queue/fair-sharing: usage-history, the spare GPUs past the
# mins go to each team by weight over its decayed usage (half-life 168h).
"""


def _quota(name: str, parent: str | None, min_gpu: int, max_gpu: int, annotations: dict[str, str] | None = None,
           is_parent: bool = False) -> dict[str, Any]:
    labels = {}
    if parent is not None:
        labels["quota.scheduling.koordinator.sh/parent"] = parent
    if is_parent:
        labels["quota.scheduling.koordinator.sh/is-parent"] = "true"
    meta: dict[str, Any] = {"name": name, "namespace": name if not is_parent else "kube-system"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota", "metadata": meta,
            "spec": {"min": {"cpu": str(8 * min_gpu), GPU: str(min_gpu)},
                     "max": {"cpu": str(8 * max_gpu), GPU: str(max_gpu)}}}


def _job(team: str, index: int, gpus: int) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "train", "image": "train:latest",
                                    "resources": {"requests": {"cpu": str(4 * gpus), GPU: str(gpus)}}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{team}-{index}", "namespace": team},
            "spec": {"parallelism": 1, "completions": 1, "template": pod}}


def build() -> dict[str, Any]:
    """The trace, as a YAML document."""
    rng = random.Random(35)
    jobs: list[dict[str, Any]] = []
    at, index = 0.0, 0
    while at < WEEKS * 7 * DAY:
        hour = (at % DAY) / HOUR
        busy = 8 <= hour < 20  # office hours: more submissions
        jobs.append({"at": round(at), "runtime": rng.choice(RUNTIMES), "manifest": _job("steady", index, STEADY_GPUS)})
        index += 1
        at += rng.expovariate(1 / ((STEADY_DAY if busy else STEADY_NIGHT) * HOUR))
    index = 0
    for week in (0, 2):
        for _ in range(BURST_JOBS):
            start = week * 7 * DAY + rng.uniform(0, BURST_DAYS * DAY)
            jobs.append({"at": round(start), "runtime": rng.choice(RUNTIMES), "manifest": _job("bursty", index, BURST_GPUS)})
            index += 1
    jobs.sort(key=lambda job: job["at"])
    return {
        "nodes": [{"name": "gpu", "count": 2, "allocatable": {"cpu": "128", "memory": "1Ti", GPU: "8"}}],
        "objects": [
            _quota("research", None, 16, 16, {ANNOTATION_FAIR_SHARING: "usage-history",
                                              "koord-queue/usage-half-life": "168h"}, is_parent=True),
            _quota("steady", "research", MIN_GPU, 16),
            _quota("bursty", "research", MIN_GPU, 16),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "steady"}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bursty"}},
        ],
        "jobs": jobs,
        "until": WEEKS * 7 * DAY,
    }


def _off(document: dict[str, Any]) -> dict[str, Any]:
    off = copy.deepcopy(document)
    off["objects"][0]["metadata"]["annotations"][ANNOTATION_FAIR_SHARING] = FAIR_SHARING_NONE
    return off


def _row(result: SimResult, team: str) -> tuple[float, int, int, int]:
    """Mean wait to first admission in hours (a job never admitted counts until the end),
    jobs, jobs admitted, preemptions."""
    mine = [job for job in result.jobs if job.quota == team and job.submitted is not None]
    waits = [(job.admitted if job.admitted is not None else result.end) - job.submitted for job in mine]
    admitted = sum(1 for job in mine if job.admitted is not None)
    return sum(waits) / len(waits) / HOUR if waits else 0.0, len(mine), admitted, sum(job.preemptions for job in mine)


def gpu_hours(result: SimResult, name: str = "research") -> float:
    usage = result.usage.quotas.get(name)
    return usage.area.get(GPU, 0) / 1000 / HOUR if usage is not None else 0.0


def done_hours(result: SimResult) -> float:
    return sum(job.request.get(GPU, 0) / 1000 * (job.runtime or 0) / HOUR for job in result.jobs
               if job.finished is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the trace to examples/traces")
    args = parser.parse_args()
    document = build()
    if args.write:
        TRACE.write_text(HEADER + yaml.safe_dump(document, sort_keys=False, width=200))
        print(f"wrote {TRACE} ({len(document['jobs'])} jobs)")
        return
    document = yaml.safe_load(TRACE.read_text()) if not __import__("os").environ.get("FRESH") else build()
    if __import__("os").environ.get("U0"):
        import koordqueue.engine.fairness as fairness
        fairness.U0 = float(__import__("os").environ["U0"])
    results = {"off": simulate(parse_trace(_off(document))), "on": simulate(parse_trace(document))}
    print("| history | team | jobs | admitted | mean wait (h) | preemptions | team GPU-hours |")
    print("|---|---|---|---|---|---|---|")
    for label, result in results.items():
        for team in ("steady", "bursty"):
            wait, count, admitted, preempted = _row(result, team)
            print(f"| {label} | {team} | {count} | {admitted} | {wait:.2f} | {preempted} | {gpu_hours(result, team):.0f} |")
    off, on = gpu_hours(results["off"]), gpu_hours(results["on"])
    capacity = 16 * WEEKS * 7 * 24
    print(f"\nGPU-hours held in the four weeks: off {off:.0f} ({100 * off / capacity:.1f} % of {capacity}), "
          f"on {on:.0f} ({100 * on / capacity:.1f} %): {100 * (on - off) / off:+.2f} %")
    done_off, done_on = done_hours(results["off"]), done_hours(results["on"])
    print(f"GPU-hours of work done (jobs finished, request x runtime): off {done_off:.0f}, on {done_on:.0f}: "
          f"{100 * (done_on - done_off) / done_off:+.2f} %; the rest of what is held is runs cut short by reclaim "
          "(a preempted job starts again from zero)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
