"""Where a Job's hold of quota goes, from kube-apiserver's audit log of a traced run.

`bench/versus_kueue.py --keep DIR --trace` keeps every user's requests, with the bodies of pod
creates and of pod and Job writes. From them, per batch Job: its resume (the queue's write that
set spec.suspend false), the Job controller's pod create, kube-scheduler's binding, kwok's status
writes (Running, Succeeded), the Job controller's status write with Complete; and every write to
the Job and its pods by whom, with the ones refused (409: a write from a stale copy, which the
Job controller retries after a back-off). Times are the audit log's stageTimestamp (when
kube-apiserver answered), to the microsecond.

    .venv/bin/python bench/versus_kueue.py --divisor 10 --rounds 1 --no-perf --systems ours,kueue \\
        --keep /tmp/trace --trace
    .venv/bin/python bench/hold_timeline.py /tmp/trace/0-ours /tmp/trace/1-kueue
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
SCHEDULER = "system:kube-scheduler"
GENERATOR = "kubernetes-admin"  # the bench's own client (it creates the Jobs); kwok's too
QUEUES = ("koord-queue-controller", "kueue", "koord-queue-floor")
JOB_NAME = "batch.kubernetes.io/job-name"


@dataclass
class Timeline:
    created: float = math.nan
    resumed: float = math.nan  # the queue's write with spec.suspend false (the first)
    suspended_again: int = 0  # the queue's writes with spec.suspend true after a resume
    pod_created: float = math.nan
    bound: float = math.nan
    running: float = math.nan
    succeeded: float = math.nan
    complete: float = math.nan  # the Job controller's status write with Complete True
    writes: Counter[str] = field(default_factory=Counter)  # "user verb resource (code)"
    resumes: int = 0  # the queue's writes with spec.suspend false
    redundant_resumes: int = 0  # of them, sent while the Job was not suspended (by its last write)
    suspended: bool = True  # by the last spec write that landed
    last_other_write: tuple[float, str] = (math.nan, "")  # the last write to the Job not the Job controller's
    last_controller_write: float = math.nan  # the Job controller's last write to the Job that landed
    conflicts_after: Counter[str] = field(default_factory=Counter)  # the Job controller's 409s, by who wrote between
    status_writes_between: int = 0  # the Job controller's status writes between resume and Complete


def when(entry: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(entry["stageTimestamp"]).timestamp()


def short(user: str) -> str:
    return {JOB_CONTROLLER: "job-controller", SCHEDULER: "scheduler", GENERATOR: "bench/kwok"}.get(user, user)


def conditions_true(obj: dict[str, Any]) -> set[str]:
    return {cond.get("type", "") for cond in (obj.get("status") or {}).get("conditions") or []
            if cond.get("status") == "True"}


def read(audit: Path) -> tuple[dict[str, Timeline], Counter[str], list[tuple[float, str, float]]]:
    """(per-Job timelines, requests refused by user and kind, (time, user, latency) of every
    write to Jobs and pods)."""
    jobs: dict[str, Timeline] = {}
    pod_job: dict[str, str] = {}
    refused: Counter[str] = Counter()
    latencies: list[tuple[float, str, float]] = []
    seen: set[str] = set()
    with open(audit) as f:
        for line in f:
            e = json.loads(line)
            if e.get("stage") != "ResponseComplete" or e["auditID"] in seen:
                continue
            seen.add(e["auditID"])
            ref = e.get("objectRef") or {}
            resource = ref.get("resource", "")
            if resource not in ("jobs", "pods") or e["verb"] in ("get", "list", "watch"):
                continue
            user, verb, code = e["user"]["username"], e["verb"], (e.get("responseStatus") or {}).get("code", 0)
            full = resource + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            t = when(e)
            received = dt.datetime.fromisoformat(e["requestReceivedTimestamp"]).timestamp()
            latencies.append((t, f"{short(user)} {verb} {full}", t - received))
            if code >= 400:
                refused[f"{short(user)} {verb} {full} ({code})"] += 1
            namespace = ref.get("namespace", "")
            if resource == "jobs":
                key = f"{namespace}/{ref.get('name') or (e.get('requestObject') or {}).get('metadata', {}).get('name', '')}"
                tl = jobs.setdefault(key, Timeline())
                tl.writes[f"{short(user)} {verb} {full}" + (f" ({code})" if code >= 400 else "")] += 1
                if code == 409 and user == JOB_CONTROLLER:
                    at, who = tl.last_other_write
                    between = not math.isnan(at) and (math.isnan(tl.last_controller_write) or at > tl.last_controller_write)
                    tl.conflicts_after[who if between else "the Job controller's own earlier write"] += 1
                if code >= 400:
                    continue
                body = e.get("requestObject") or {}
                if user == JOB_CONTROLLER:
                    tl.last_controller_write = t
                elif verb != "create":
                    suspend = (body.get("spec") or {}).get("suspend")
                    what = {False: "resume", True: "suspend"}.get(suspend, "other") if full == "jobs" else full
                    tl.last_other_write = (t, f"{short(user)} {verb} {full} ({what})")
                if verb == "create":
                    tl.created = t
                elif full == "jobs" and user in QUEUES:
                    suspend = (body.get("spec") or {}).get("suspend")
                    if suspend is False:
                        tl.resumes += 1
                        tl.redundant_resumes += not tl.suspended
                        tl.suspended = False
                        if math.isnan(tl.resumed):
                            tl.resumed = t
                    elif suspend is True:
                        tl.suspended = True
                        if not math.isnan(tl.resumed):
                            tl.suspended_again += 1
                elif full == "jobs/status" and user == JOB_CONTROLLER:
                    if not math.isnan(tl.resumed) and math.isnan(tl.complete):
                        tl.status_writes_between += 1
                    if "Complete" in conditions_true(body) and math.isnan(tl.complete):
                        tl.complete = t
                continue
            # pods
            if code >= 400:
                continue
            if verb == "create" and not ref.get("subresource"):
                meta = (e.get("responseObject") or e.get("requestObject") or {}).get("metadata") or {}
                job = (meta.get("labels") or {}).get(JOB_NAME)
                if job is None:
                    continue
                key = f"{namespace}/{job}"
                pod_job[f"{namespace}/{meta.get('name')}"] = key
                tl = jobs.setdefault(key, Timeline())
                tl.writes[f"{short(user)} create pods"] += 1
                if math.isnan(tl.pod_created):
                    tl.pod_created = t
                continue
            key = pod_job.get(f"{namespace}/{ref.get('name')}", "")
            if not key:
                continue
            tl = jobs[key]
            tl.writes[f"{short(user)} {verb} {full}"] += 1
            if full == "pods/binding" and math.isnan(tl.bound):
                tl.bound = t
            elif full == "pods/status":
                phase = ((e.get("requestObject") or {}).get("status") or {}).get("phase")
                if phase == "Running" and math.isnan(tl.running):
                    tl.running = t
                elif phase == "Succeeded" and math.isnan(tl.succeeded):
                    tl.succeeded = t
    return jobs, refused, latencies


STEPS = (("resumed -> pod created (Job controller)", "resumed", "pod_created"),
         ("pod created -> bound (scheduler)", "pod_created", "bound"),
         ("bound -> Running (kwok)", "bound", "running"),
         ("Running -> Succeeded (kwok: runtime)", "running", "succeeded"),
         ("Succeeded -> Complete written (Job controller)", "succeeded", "complete"),
         ("resumed -> Complete written", "resumed", "complete"))


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    values = sorted(values)
    q = [values[min(len(values) - 1, int(p * len(values)))] for p in (0.5, 0.9, 0.99)]
    return f"mean {sum(values) / len(values):6.2f}  p50 {q[0]:6.2f}  p90 {q[1]:6.2f}  p99 {q[2]:6.2f} s  (n {len(values)})"


def in_flight(jobs: dict[str, Timeline]) -> tuple[int, float]:
    """The most Jobs resumed and not yet Complete at once, and the mean over the time any was."""
    edges = sorted([(t.resumed, 1) for t in jobs.values() if not math.isnan(t.resumed)]
                   + [(t.complete, -1) for t in jobs.values() if not math.isnan(t.resumed) and not math.isnan(t.complete)])
    now = peak = 0
    area = 0.0
    last = edges[0][0] if edges else 0.0
    for t, d in edges:
        area += now * (t - last)
        last = t
        now += d
        peak = max(peak, now)
    span = edges[-1][0] - edges[0][0] if edges else 1.0
    return peak, area / span if span else 0.0


def sync_errors(log: Path) -> Counter[str]:
    """The Job controller's syncs ("syncs") and its failed ones (each requeued after a back-off:
    1 s, doubled at each failure in a row), by cause, from kube-controller-manager's log.
    (Failed syncs are logged after each attempt; "syncs" counts those logged as finished.)"""
    out: Counter[str] = Counter()
    if not log.exists():
        return out
    with open(log, errors="replace") as f:
        for line in f:
            if "job_controller.go" not in line:
                continue
            if "Finished syncing job" in line:
                out["syncs"] += 1
                continue
            if "syncing job:" not in line:
                continue
            if "the object has been modified" in line:
                out["a write refused: the Job changed since its copy (409)"] += 1
            elif "is not as new as written version" in line:
                out["its informer behind its own last write"] += 1
            else:
                out["other"] += 1
    return out


def report(run: Path) -> dict[str, Any]:
    audit = run / "cluster" / "logs" / "audit.log"
    jobs, refused, latencies = read(audit)
    done = {k: t for k, t in jobs.items() if not math.isnan(t.resumed) and not math.isnan(t.complete)}
    once = {k: t for k, t in done.items() if t.suspended_again == 0}
    steps = {}
    for label, a, b in STEPS:
        steps[label] = [getattr(t, b) - getattr(t, a) for t in once.values()
                        if not math.isnan(getattr(t, a)) and not math.isnan(getattr(t, b))]
    writes: Counter[str] = Counter()
    for t in jobs.values():
        writes.update(t.writes)
    by_writer: dict[str, list[float]] = {}
    for _, who, latency in latencies:
        by_writer.setdefault(who, []).append(latency)
    peak, mean_flight = in_flight(jobs)
    conflicts: Counter[str] = Counter()
    for t in jobs.values():
        conflicts.update(t.conflicts_after)
    return {"run": str(run), "jobs": len(jobs), "resumed_and_complete": len(done), "resumed_once": len(once),
            "suspended_again": sum(1 for t in done.values() if t.suspended_again),
            "steps": steps, "writes": writes, "refused": refused, "latency": by_writer,
            "status_writes_between": [t.status_writes_between for t in once.values()],
            "resumes": sum(t.resumes for t in jobs.values()),
            "redundant_resumes": sum(t.redundant_resumes for t in jobs.values()),
            "jobs_resumed_redundantly": sum(1 for t in jobs.values() if t.redundant_resumes),
            "conflicts_after": conflicts,
            "sync_errors": sync_errors(run / "cluster" / "logs" / "kube-controller-manager.log"),
            "in_flight_peak": peak, "in_flight_mean": mean_flight}


def render(r: dict[str, Any]) -> str:
    lines = [f"{r['run']}: {r['jobs']} Jobs, {r['resumed_and_complete']} resumed and Complete, "
             f"{r['resumed_once']} of them resumed once (the steps below), {r['suspended_again']} suspended again",
             f"  Jobs resumed and not Complete at once: peak {r['in_flight_peak']}, mean {r['in_flight_mean']:.1f}"]
    for label, values in r["steps"].items():
        lines.append(f"  {label:<48} {quantiles(values)}")
    sw = r["status_writes_between"]
    lines.append(f"  Job controller's status writes per Job between resume and Complete: "
                 f"mean {sum(sw) / max(len(sw), 1):.2f}")
    n = max(r["jobs"], 1)
    lines.append("  writes to Jobs and their pods, per Job:")
    for k, v in sorted(r["writes"].items(), key=lambda kv: -kv[1]):
        lines.append(f"    {v / n:6.2f}  {k}  ({v})")
    lines.append(f"  the queue's resume writes: {r['resumes']}, of them {r['redundant_resumes']} to a Job its "
                 f"last write had resumed already ({r['jobs_resumed_redundantly']} Jobs)")
    lines.append("  the Job controller's writes refused (409), by who wrote the Job since its last write: "
                 + (", ".join(f"{k} {v}" for k, v in r["conflicts_after"].most_common()) or "none"))
    lines.append("  the Job controller's failed syncs (each retried after a back-off of 1 s or more): "
                 + (", ".join(f"{k} {v}" for k, v in r["sync_errors"].most_common()) or "none"))
    lines.append("  refused: " + (", ".join(f"{k} {v}" for k, v in r["refused"].most_common()) or "none"))
    lines.append("  write latency at kube-apiserver (received -> answered):")
    for who, values in sorted(r["latency"].items(), key=lambda kv: -len(kv[1])):
        if len(values) >= 20:
            lines.append(f"    {who:<40} {quantiles(values)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories kept by versus_kueue.py --keep --trace")
    args = parser.parse_args(argv)
    for run in args.runs:
        print(render(report(Path(run))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
