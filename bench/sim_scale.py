"""`koord-queue simulate` on a generated 1,000,000-job trace over 1,000 quotas.

The quotas are bench/scale.py's tree: 10 top quotas x 9 middle ones x 10 leaves (1,000
quotas, 900 leaves; leaf min 8 CPU, max 16), so leaves lend and borrow under their
parents' max. Jobs are PyTorchJobs of 1, 2 or 4 CPU (one pod) running 30 to 600 s, one
in ten of priority 100 (it may preempt what borrows), spread over the leaves and
arriving at random (seeded) at 85 % of the leaves' mins: a busy cluster that keeps up
(its backlog stays at 30-55 waiting jobs). At 90 % (``--load 0.9``) it does not (its
running jobs hold some 96 % of the 7,200 CPU, and preempted jobs lose their work): the
backlog grows with the run (67 waiting after 10,000 jobs, 1,708 after 90,000), and so
does the engine's work per job (more queues wait at the parents, each scanned again on
every release there), which made run time grow faster than the jobs. The trace is written in the order of the jobs' arrival, as a generator
writes one, so the simulator reads each job when its clock reaches it.

Measured: the whole command, `koord-queue simulate TRACE --json` as a user runs it,
in a process of its own: wall time, CPU time and peak RSS, with the output read as it
comes (counted, not kept).

    .venv/bin/python bench/sim_scale.py                   # 1,000,000 jobs, JSON
    .venv/bin/python bench/sim_scale.py --format yaml
    .venv/bin/python bench/sim_scale.py --jobs 20000      # smaller
    .venv/bin/python bench/sim_scale.py --json            # figures as one JSON object
    .venv/bin/python bench/sim_scale.py --load 0.9        # a cluster that falls behind
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from koordqueue.api import constants as c

TOPS, MIDS, LEAVES = 10, 9, 10
LEAF_MIN, LEAF_MAX = 8, 16
SIZES = (1, 1, 2, 2, 4)  # CPU of a job, drawn evenly
HIGH_SHARE, HIGH_PRIORITY = 0.1, 100
LOAD = 0.85  # arrivals as a share of what the leaves' mins can run (0.9: the backlog grows without end)
NS = "sim-scale"
COMMAND = [str(Path(sys.executable).parent / "koord-queue"), "simulate", "--json"]
# A small process starts the run and reports its figures (a child forked straight from
# this one would count this process's memory in its peak RSS).
LAUNCHER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
process = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
counts = {"bytes": 0, "jobs": 0, "succeeded": 0, "never_admitted": 0, "preempted": 0}
tail = b""
while chunk := process.stdout.read(1 << 20):
    text = tail + chunk
    cut = text.rfind(b"\\n") + 1
    whole, tail = text[:cut], text[cut:]
    counts["bytes"] += len(chunk)
    counts["jobs"] += whole.count(b'"kind": ')
    counts["succeeded"] += whole.count(b'"phase": "Succeed"')
    counts["never_admitted"] += whole.count(b'"admitted": null')
    counts["preempted"] += whole.count(b'"preemptions": ') - whole.count(b'"preemptions": 0,')
code = process.wait()
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": code, "wall_seconds": wall, "cpu_seconds": usage.ru_utime + usage.ru_stime,
                  "peak_rss_mib": usage.ru_maxrss / 1024, "output": counts}), file=sys.stderr)
"""


def quota(name: str, min_cpu: int, max_cpu: int, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"min": {c.CPU: str(min_cpu)}, "max": {c.CPU: str(max_cpu)}}}


def quotas() -> tuple[list[dict[str, Any]], list[str]]:
    objects, leaves = [], []
    for t in range(TOPS):
        top = f"top-{t}"
        objects.append(quota(top, LEAF_MIN * LEAVES * MIDS, LEAF_MIN * LEAVES * MIDS, {c.LABEL_QUOTA_IS_PARENT: c.TRUE}))
        for m in range(MIDS):
            mid = f"mid-{t}-{m}"
            objects.append(quota(mid, LEAF_MIN * LEAVES, LEAF_MAX * LEAVES,
                                 {c.LABEL_QUOTA_IS_PARENT: c.TRUE, c.LABEL_QUOTA_PARENT: top}))
            for leaf in range(LEAVES):
                name = f"leaf-{t}-{m}-{leaf}"
                objects.append(quota(name, LEAF_MIN, LEAF_MAX, {c.LABEL_QUOTA_PARENT: mid}))
                leaves.append(name)
    return objects, leaves


def write_trace(path: Path, jobs: int, fmt: str, seed: int = 1, load: float = LOAD) -> None:
    """The trace, written a job at a time (the generator keeps nothing either)."""
    rng = random.Random(seed)
    objects, leaves = quotas()
    mean_work = sum(SIZES) / len(SIZES) * (30 + 600) / 2
    rate = load * LEAF_MIN * len(leaves) / mean_work  # jobs per second
    at = 0.0
    with path.open("w") as out:
        if fmt == "json":
            out.write('{"objects": ' + json.dumps(objects) + ', "jobs": [')
        else:
            out.write("objects:\n" + "".join(f"- {json.dumps(obj)}\n" for obj in objects) + "jobs:\n")
        for index in range(jobs):
            at += rng.expovariate(rate)
            priority = HIGH_PRIORITY if rng.random() < HIGH_SHARE else 0
            container = {"name": "main", "image": "busybox", "resources": {"requests": {c.CPU: str(rng.choice(SIZES))}}}
            manifest = {
                "apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.PYTORCH_JOB_KIND,
                "metadata": {"name": f"job-{index}", "namespace": NS,
                             "annotations": {c.ANNOTATION_QUEUE: rng.choice(leaves), c.ANNOTATION_PRIORITY: str(priority)}},
                "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1,
                                                            "template": {"spec": {"containers": [container]}}}}},
            }
            entry = json.dumps({"at": round(at, 3), "runtime": rng.randint(30, 600), "manifest": manifest})
            if fmt == "json":
                out.write(("" if index == 0 else ",\n") + entry)
            else:
                out.write(f"- {entry}\n")
        if fmt == "json":
            out.write("]}\n")


def run(path: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", LAUNCHER, *COMMAND, str(path)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=True)
    figures: dict[str, Any] = json.loads(done.stderr)
    if figures.pop("code") != 0:
        raise SystemExit(f"koord-queue simulate {path} failed")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--format", choices=("json", "yaml"), default="json")
    parser.add_argument("--load", type=float, default=LOAD, help="arrivals as a share of the leaves' mins")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--keep", metavar="FILE", help="write the trace here and leave it")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(args.keep or Path(scratch) / f"trace.{args.format}")
        start = time.perf_counter()
        write_trace(path, args.jobs, args.format, load=args.load)
        written = time.perf_counter() - start
        before = os.getloadavg()[0]
        figures = run(path)
        figures.update(jobs=args.jobs, load_share=args.load, quotas=TOPS * (1 + MIDS * (1 + LEAVES)), format=args.format,
                       trace_bytes=path.stat().st_size, write_seconds=written, load=(before, os.getloadavg()[0]))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        out = figures["output"]
        print(f"{figures['jobs']:,} jobs over {figures['quotas']:,} quotas at {args.load:.0%} of their mins, "
              f"{figures['format']} trace of "
              f"{figures['trace_bytes'] / 1e6:,.0f} MB (written in {written:.0f} s)\n"
              f"koord-queue simulate --json: wall {figures['wall_seconds']:,.1f} s, CPU {figures['cpu_seconds']:,.1f} s, "
              f"peak RSS {figures['peak_rss_mib']:,.0f} MiB\n"
              f"output: {out['bytes'] / 1e6:,.0f} MB, {out['jobs']:,} jobs, {out['succeeded']:,} finished, "
              f"{out['never_admitted']:,} never admitted, {out['preempted']:,} preempted at least once\n"
              f"load (1 min) before -> after: {figures['load'][0]:.2f} -> {figures['load'][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
