"""Fair sharing by usage history over four weeks: a bursty team and a steady team.

    python bench/fair_over_weeks.py            # the table: history off vs on
    python bench/fair_over_weeks.py --write    # (re)write examples/traces/fair-over-weeks.yaml

    python bench/fair_over_weeks.py --u0 0.05  # the same with another U0

The trace (seeded, so always the same) runs on a 16-GPU cluster under one parent quota,
``research``, whose two children have the same min (0), max (16) and weight, and jobs of
1 to 4 hours (so the cluster turns over often): team ``steady`` submits a 1-GPU job about
every 21 minutes from 8:00 to 20:00 and every hour at night, all month (about 5 GPUs on
average, often more than half the cluster by day); team ``bursty`` floods 400 jobs of
2 GPUs (about 2,000 GPU-hours) on the first day of weeks 1 and 3.
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
from koordqueue.engine import fairness
from koordqueue.sim.simulator import SimResult, simulate
from koordqueue.sim.trace import parse_trace

TRACE = Path(__file__).parents[1] / "examples" / "traces" / "fair-over-weeks.yaml"
HOUR = 3600
DAY = 24 * HOUR
WEEKS = 4
GPU = "nvidia.com/gpu"
MIN_GPU = 0  # no min: the spare capacity, and the turns for it, are all there is
STEADY_GPUS, BURST_GPUS = 1, 2
RUNTIMES = [h * HOUR for h in (1, 2, 3, 4)]  # short jobs: the cluster turns over often
STEADY_DAY, STEADY_NIGHT = 0.35, 1.0  # steady's mean hours between jobs, 8:00-20:00 and at night
BURST_JOBS, BURST_DAYS = 400, 1.0  # bursty's jobs in each flood, and over how many days

HEADER = """\
# Fair sharing by usage history over four weeks (docs/fairness.md): one bursty team and
# one steady team with the same min (0), max and weight on a 16-GPU cluster.
#
#   koord-queue simulate examples/traces/fair-over-weeks.yaml
#   python bench/fair_over_weeks.py     # history off vs on, side by side
#
# Written by bench/fair_over_weeks.py --write (seeded). Jobs of 1 to 4 h. team steady
# submits a 1-GPU job about every 21 min by day (8:00-20:00) and every hour at night;
# team bursty floods 400 jobs of 2 GPUs on the first day of weeks 1 and 3. With research's
# koord-queue/fair-sharing: usage-history, the GPUs go to each team by weight over its
# decayed usage (half-life 168h), and so do the turns when GPUs free up.
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
    parser.add_argument("--u0", type=float, help=f"U0 of w / (u + U0) for this run (built: {fairness.U0})")
    args = parser.parse_args()
    document = build()
    if args.write:
        TRACE.write_text(HEADER + yaml.safe_dump(document, sort_keys=False, width=200))
        print(f"wrote {TRACE} ({len(document['jobs'])} jobs)")
        return
    document = yaml.safe_load(TRACE.read_text())
    if args.u0 is not None:  # (a measurement: the engine's U0 is a constant)
        fairness.U0 = args.u0
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
