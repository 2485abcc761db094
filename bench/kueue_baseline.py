"""Kueue's scheduler-performance "baseline" shape through the whole system.

The embedded API server and the controller run in processes of their own; this
process is the rest of the world: a generator that creates the 15,000 PyTorchJobs at
Kueue's pacing with its own client, a runner that marks each job Running as soon as
the controller releases it (its suspension removed) and Succeeded after its runtime
(no pods, as Kueue's runner does), and an observer that watches the QueueUnits and
checks, on every change the server makes, that no quota ever holds more than its max.

Shape (SEMANTICS.md §7): 5 parent ElasticQuotas (max 120 CPU, is-parent) x 6 children
(min 20, max 120 CPU); per child queue 350 small (1 CPU, 200 ms, priority 50, one every
100 ms), 100 medium (5 CPU, 500 ms, priority 100, every 500 ms), 50 large (20 CPU, 1 s,
priority 200, every 1.2 s). 39,600 CPU-seconds on 600 CPU: no scheduler can finish in
under 66 s.

Figures are measured as Kueue's performance test measures them: mean quota usage is
∫used dt ÷ (Σ min × elapsed), elapsed from the first job's creation to the last release;
time to admission from a job's creation to its unit holding quota. The same shape
through the simulator (engine only, virtual clock) is printed beside it: the
difference is the cost of our I/O.

    .venv/bin/python bench/kueue_baseline.py            # the whole shape (about 1.5 minutes)
    .venv/bin/python bench/kueue_baseline.py --small    # 1/10 of the jobs per queue
    .venv/bin/python bench/kueue_baseline.py --json     # figures as one JSON object
    .venv/bin/python bench/kueue_baseline.py --pods     # pods too: simulated nodes (600 CPU), operator, kubelet
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import kueue_sim  # noqa: E402
from harness import fmt, mib  # noqa: E402

from koordqueue import aio  # noqa: E402
from koordqueue.api import constants as c  # noqa: E402
from koordqueue.api.quantity import parse_quantity  # noqa: E402
from koordqueue.controller.views import adapter_of_kind  # noqa: E402
from koordqueue.jobs.base import JobState  # noqa: E402
from koordqueue.kube.client import KubeClient, Resource  # noqa: E402
from koordqueue.kube.errors import ApiError, NotFound  # noqa: E402
from koordqueue.kube.informer import Informer  # noqa: E402
from koordqueue.sim.report import percentile  # noqa: E402
from koordqueue.sim.simulator import Simulator  # noqa: E402

NS = kueue_sim.NAMESPACE
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", "pytorchjobs")
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
QUEUES = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, "queues")
EVENTS = Resource("", "v1", "events")
HOLDING = {p.value for p in c.PHASES_HOLDING_QUOTA}
ADAPTER = adapter_of_kind(c.PYTORCH_JOB_KIND)
MAX_CPU = parse_quantity("120")
MIN_CPU = parse_quantity("20")
PHYSICAL_LIMIT = 66.0
KUEUE = {"wall": 351.0, **kueue_sim.KUEUE}
TARGET = {"wall": 90.0, "usage": 75.0, "large": 5.0, "medium": 20.0, "small": 60.0, "rss": 300 * 2**20}
CONTROLLER_FLAGS = ("--qps", "5000", "--burst", "10000")
NODES, CPU_PER_NODE = 10, "60"


@dataclass
class JobRecord:
    name: str
    leaf: str
    parent: str
    kind: kueue_sim.JobClass
    cpu: int  # millicores
    due: float  # seconds after the start at which Kueue's pacing creates it
    submitted: float | None = None  # monotonic, when the create was sent
    admitted: float | None = None  # first seen holding quota
    released: float | None = None  # first seen unsuspended (the runner starts it)
    finished: float | None = None  # unit seen Succeed
    unit_seen: float | None = None  # its QueueUnit first seen
    enqueued: float | None = None  # its QueueUnit first seen with a phase
    ran: float | None = None  # the runner's Succeeded write returned
    ran_seen: float | None = None  # our watch brought the job's Succeeded back
    holding_since: float | None = None
    held: list[tuple[float, float]] = field(default_factory=list)  # intervals holding quota
    releases: int = 0
    runner: asyncio.Task[None] | None = None


def job_manifest(record: JobRecord, pods: bool) -> dict[str, Any]:
    """kueue_sim's job, created suspended as the admission webhook leaves a job."""
    manifest = kueue_sim.job(record.name, record.leaf, record.kind)
    manifest["metadata"]["annotations"][c.ANNOTATION_SUSPEND] = c.TRUE
    manifest["spec"]["runPolicy"] = {"suspend": True}
    for replica in manifest["spec"]["pytorchReplicaSpecs"].values():  # the training operator's webhook
        for container in replica["template"]["spec"]["containers"]:  # wants the container named pytorch
            container["name"] = "pytorch"
    if pods:
        manifest["metadata"]["annotations"][c.ANNOTATION_SIM_DURATION] = f"{record.kind.runtime}"
    return manifest


def plan(divisor: int) -> list[JobRecord]:
    records = []
    for leaf in kueue_sim.leaves():
        parent = "parent-" + leaf.split("-")[1]
        for kind in kueue_sim.CLASSES:
            for i in range(kind.count // divisor):
                records.append(JobRecord(f"{leaf}-{kind.name}-{i}", leaf, parent, kind,
                                         parse_quantity(kind.cpu), i * kind.every))
    return records


def _condition(kind: str, status: str, reason: str) -> dict[str, str]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"type": kind, "status": status, "reason": reason, "message": f"bench: {reason}",
            "lastUpdateTime": now, "lastTransitionTime": now}


class World:
    """The generator, the runner and the observer, on one client."""

    def __init__(self, client: KubeClient, records: list[JobRecord], pods: bool) -> None:
        self.client = client
        self.records = {r.name: r for r in records}
        self.pods = pods
        self.used: dict[str, int] = {}  # quota name -> millicores held, as the server's order of changes says
        self.peak: dict[str, int] = {}
        self.violations: list[str] = []
        self.finished = 0
        self.done = asyncio.Event()
        self.start = 0.0
        self.lateness: list[float] = []
        self.write_errors: list[str] = []
        self.timeline: list[dict[str, Any]] = []
        self.units = Informer(client, UNITS, project=_unit, namespace=NS)
        self.jobs = Informer(client, JOBS, project=_job, namespace=NS)
        self.units.on_add(self._unit)
        self.units.on_update(lambda _old, new: self._unit(new))
        self.jobs.on_add(self._job)
        self.jobs.on_update(lambda _old, new: self._job(new))

    async def watch(self) -> None:
        for informer in (self.units, self.jobs):
            informer.start()
            await informer.wait_synced()

    async def stop(self) -> None:
        await asyncio.gather(self.units.stop(), self.jobs.stop())
        for record in self.records.values():
            if record.runner is not None:
                record.runner.cancel()

    # --- the generator -------------------------------------------------------------

    async def generate(self) -> None:
        """One task per (queue, class) stream: each creates its jobs in order, at Kueue's pacing."""
        streams: dict[tuple[str, str], list[JobRecord]] = {}
        for record in self.records.values():
            streams.setdefault((record.leaf, record.kind.name), []).append(record)
        self.start = time.monotonic()
        await asyncio.gather(*(self._stream(s) for s in streams.values()))

    async def _stream(self, records: list[JobRecord]) -> None:
        for record in sorted(records, key=lambda r: r.due):
            delay = self.start + record.due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            record.submitted = time.monotonic()
            self.lateness.append(record.submitted - self.start - record.due)
            await self.client.create(JOBS, job_manifest(record, self.pods), namespace=NS)

    # --- the observer ----------------------------------------------------------------

    def _unit(self, unit: tuple[str, str]) -> None:
        name, phase = unit
        record = self.records.get(name)
        if record is None:
            return
        now = time.monotonic()
        if record.unit_seen is None:
            record.unit_seen = now
        if phase and record.enqueued is None:
            record.enqueued = now
        holding = phase in HOLDING
        if holding and record.holding_since is None:
            record.holding_since = now
            if record.admitted is None:
                record.admitted = now
            for quota in (record.leaf, record.parent):
                used = self.used[quota] = self.used.get(quota, 0) + record.cpu
                self.peak[quota] = max(self.peak.get(quota, 0), used)
                if used > MAX_CPU:
                    self.violations.append(f"quota {quota} held {used / 1000:g} CPU, over its max 120")
        elif not holding and record.holding_since is not None:
            record.held.append((record.holding_since, now))
            record.holding_since = None
            for quota in (record.leaf, record.parent):
                self.used[quota] -= record.cpu
        if phase == c.Phase.SUCCEED.value and record.finished is None:
            record.finished = now
            self.finished += 1
            if self.finished == len(self.records):
                self.done.set()

    # --- the runner -------------------------------------------------------------------

    def _job(self, job: tuple[str, bool, bool]) -> None:
        name, suspended, succeeded = job
        record = self.records.get(name)
        if record is None:
            return
        if succeeded:
            if record.ran_seen is None:
                record.ran_seen = time.monotonic()
            return
        if suspended:
            if record.runner is not None and not record.runner.done():
                record.runner.cancel()  # suspended again (preempted): it starts over when released
                record.runner = None
            return
        if record.runner is None:
            record.releases += 1
            if record.released is None:
                record.released = time.monotonic()
            if not self.pods:  # with --pods the simulated operator and kubelet run it
                record.runner = asyncio.create_task(self._run(record))

    async def _run(self, record: JobRecord) -> None:
        try:
            await self.client.patch_status(
                JOBS, record.name, {"status": {"conditions": [_condition("Running", "True", "PyTorchJobRunning")]}},
                namespace=NS)
            # It runs from the moment it was released (as its pods would), not from our write.
            assert record.released is not None
            await asyncio.sleep(max(0.0, record.released + record.kind.runtime - time.monotonic()))
            await self.client.patch_status(
                JOBS, record.name, {"status": {"conditions": [
                    _condition("Running", "False", "PyTorchJobSucceeded"),
                    _condition("Succeeded", "True", "PyTorchJobSucceeded")]}}, namespace=NS)
            record.ran = time.monotonic()
        except (ApiError, NotFound) as e:
            self.write_errors.append(f"{record.name}: {e}")


def _unit(obj: dict[str, Any]) -> tuple[str, str]:
    ref = (obj.get("spec") or {}).get("consumerRef") or {}
    return str(ref.get("name", "")), str((obj.get("status") or {}).get("phase") or "")


def _job(obj: dict[str, Any]) -> tuple[str, bool, bool]:
    succeeded = ADAPTER.status(obj) is JobState.SUCCEEDED
    return str(obj["metadata"]["name"]), ADAPTER.is_suspended(obj), succeeded


async def sample(world: World, processes: dict[str, harness.Process], every: float = 1.0) -> None:
    """Once a second: each process's CPU share, and how many jobs are created, admitted, done."""
    last = {name: p.usage()["cpu_seconds"] for name, p in processes.items()}
    last_self = harness.self_usage()["cpu_seconds"]
    while True:
        await asyncio.sleep(every)
        row: dict[str, Any] = {"t": round(time.monotonic() - world.start, 1)}
        for name, process in processes.items():
            cpu = process.usage()["cpu_seconds"]
            row[f"{name}_cpu"] = round((cpu - last[name]) / every, 2)
            last[name] = cpu
        cpu = harness.self_usage()["cpu_seconds"]
        row["bench_cpu"], last_self = round((cpu - last_self) / every, 2), cpu
        records = world.records.values()
        row["created"] = sum(1 for r in records if r.submitted is not None)
        row["admitted"] = sum(1 for r in records if r.admitted is not None)
        row["done"] = world.finished
        world.timeline.append(row)


async def event_reasons(client: KubeClient) -> dict[str, int]:
    """Events in the jobs' namespace, by reason (what the controller told people)."""
    listed = await client.list_all(EVENTS, namespace=NS, page_size=5000)
    out: dict[str, int] = {}
    for event in listed.items:
        kind = f"{event.get('reason')} on {(event.get('involvedObject') or {}).get('kind')}"
        out[kind] = out.get(kind, 0) + int(event.get("count") or 1)
    return dict(sorted(out.items()))


async def wait_for_queues(client: KubeClient, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = await client.list(QUEUES, namespace=c.SYSTEM_NAMESPACE)
        if len(listed.items) >= count:
            return
        await asyncio.sleep(0.1)
    raise SystemExit(f"the controller did not make the {count} Queues of the quotas in {timeout:.0f} s")


# --- figures ---------------------------------------------------------------------------


def figures(world: World, end: float) -> dict[str, Any]:
    records = list(world.records.values())
    start = world.start
    unfinished = [r.name for r in records if r.finished is None]
    last_release = max((b for r in records for _, b in r.held), default=end)
    elapsed = max(last_release - start, 1e-9)
    area = sum(r.cpu * (b - a) for r in records for a, b in r.held)
    leaves = kueue_sim.leaves()
    classes = {}
    for kind in kueue_sim.CLASSES:
        waits = [r.admitted - r.submitted for r in records
                 if r.kind is kind and r.admitted is not None and r.submitted is not None]
        classes[kind.name] = {"jobs": len(waits), "mean_wait": sum(waits) / len(waits) if waits else math.nan,
                              "p90_wait": percentile(waits, 0.9) if waits else math.nan}
    return {
        "jobs": len(records),
        "unfinished": len(unfinished),
        "wall_seconds": (max((r.finished for r in records if r.finished), default=end)) - start,
        "mean_usage_percent": 100 * area / (MIN_CPU * len(leaves) * elapsed),
        # What ran, not what was reserved: quota is held from admission until the controller
        # has seen the job end, so the I/O on both sides counts as used above.
        "work_share_percent": 100 * sum(r.cpu * r.kind.runtime for r in records if r.finished)
        / (MIN_CPU * len(leaves) * elapsed),
        "classes": classes,
        "released_more_than_once": sorted(r.name for r in records if r.releases > 1),
        "quotas_over_max": world.violations,
        "peak_used_cpu": {q: v / 1000 for q, v in sorted(world.peak.items())},
        "generator_late_p99_seconds": percentile(world.lateness, 0.99) if world.lateness else 0.0,
        "runner_write_errors": world.write_errors[:10],
        "hops_mean_seconds": hops(records),
        "hops_mean_seconds_by_class": {k.name: hops([r for r in records if r.kind is k]) for k in kueue_sim.CLASSES},
        "timeline": world.timeline,
    }


def hops(records: list[JobRecord]) -> dict[str, float]:
    """Where a job's time goes, hop by hop (means over the jobs that made the hop)."""
    steps = [("created -> unit seen", "submitted", "unit_seen"), ("unit seen -> has a phase", "unit_seen", "enqueued"),
             ("created -> admitted", "submitted", "admitted"), ("admitted -> released", "admitted", "released"),
             ("released -> ran (runner)", "released", "ran"), ("ran -> seen ran", "ran", "ran_seen"),
             ("ran -> quota released", "ran", "finished")]
    out = {}
    for label, a, b in steps:
        spans = [getattr(r, b) - getattr(r, a) for r in records
                 if getattr(r, a) is not None and getattr(r, b) is not None]
        out[label] = sum(spans) / len(spans) if spans else math.nan
    return out


def simulator_figures(divisor: int) -> dict[str, Any]:
    trace = kueue_sim.build_trace(divisor)
    started = time.perf_counter()
    result = Simulator(trace, capacity={c.CPU: parse_quantity(kueue_sim.CLUSTER_CPU)}, time_engine=True).run()
    return kueue_sim.figures(result, time.perf_counter() - started)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    divisor = 10 if args.small else args.divisor
    records = plan(divisor)
    load_before = harness.load_average()
    with tempfile.TemporaryDirectory(prefix="kueue-baseline-") as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        server = harness.ServerProcess(base / "state")
        server.start()
        controller: harness.ControllerProcess | None = None
        sim = None
        try:
            async with harness.open_client(server.kubeconfig) as client:
                await harness.ensure_namespace(client, NS)
                user = await harness.controller_kubeconfig(client, server.kubeconfig, base / "controller.kubeconfig")
                trace = kueue_sim.build_trace(divisor)
                for obj in trace.objects:
                    await client.create(QUOTAS, obj, namespace=NS)
                if args.pods:
                    from koordqueue.simcluster.cluster import SimCluster

                    sim = SimCluster(client, nodes=NODES, gpus_per_node=0, cpu_per_node=CPU_PER_NODE,
                                     memory_per_node="1Ti", pods_per_node=1000, record_events=False)
                    await sim.start()
                controller = harness.ControllerProcess(base / "controller.kubeconfig", base / "controller.log",
                                                       *CONTROLLER_FLAGS)
                controller.start()
                ready_seconds = await controller.wait_ready()
                profilers = [harness.Profiler(proc, base / f"{name}.collapsed")
                             for name, proc in (("controller", controller), ("apiserver", server))] \
                    if args.profile else []
                await wait_for_queues(client, len(kueue_sim.leaves()))
                world = World(client, records, args.pods)
                await world.watch()
                metrics_before = await controller.metrics()
                usage_before = controller.usage()
                server_before = server.usage()
                bench_before = harness.self_usage()
                generating = asyncio.create_task(world.generate())
                sampling = asyncio.create_task(sample(world, {"controller": controller, "apiserver": server}))
                try:
                    await asyncio.wait_for(world.done.wait(), args.timeout)
                except TimeoutError:
                    pass
                end = time.monotonic()
                sampling.cancel()
                await asyncio.wait_for(generating, 10) if not generating.done() else None
                metrics_after = await controller.metrics()
                usage_after = controller.usage()
                server_after = server.usage()
                bench_after = harness.self_usage()
                requests = await harness.request_counts(client, user)
                events = await event_reasons(client)
                await world.stop()
                for profiler in profilers:
                    profiler.stop()
                if sim is not None:
                    await sim.stop()
        finally:
            if controller is not None:
                controller.stop()
            server.stop()
        out = figures(world, end)
        cycles = harness.Histogram.parse(metrics_after, "koord_queue_scheduling_cycle_seconds").minus(
            harness.Histogram.parse(metrics_before, "koord_queue_scheduling_cycle_seconds"))
        out.update({
            "mode": "pods" if args.pods else "no pods",
            "divisor": divisor,
            "controller": {
                "cpu_seconds": usage_after["cpu_seconds"] - usage_before["cpu_seconds"],
                "cpu_seconds_with_startup": usage_after["cpu_seconds"],
                "peak_rss": usage_after["peak_rss"],
                "ready_seconds": ready_seconds,
                "api_requests": sum(requests.values()),
                "api_requests_by_kind": requests,
                "events_by_reason": events,
                "cycles": cycles.count,
                "cycle_p50_ms": 1000 * cycles.quantile(0.5),
                "cycle_p99_ms": 1000 * cycles.quantile(0.99),
                "flags": " ".join(CONTROLLER_FLAGS),
            },
            "apiserver": {"cpu_seconds": server_after["cpu_seconds"] - server_before["cpu_seconds"],
                          "peak_rss": server_after["peak_rss"]},
            "bench_process": {"cpu_seconds": bench_after["cpu_seconds"] - bench_before["cpu_seconds"],
                              "peak_rss": bench_after["peak_rss"]},
            "load_average_before": load_before,
            "load_average_after": harness.load_average(),
        })
    if not args.no_sim:
        out["simulator"] = simulator_figures(divisor)
    return out


def render(f: dict[str, Any]) -> str:
    def row(label: str, ours: str, sim: str, kueue: str, target: str) -> str:
        return f"  {label:<28}{ours:>14}{sim:>12}{kueue:>10}{target:>10}"

    ctl = f["controller"]
    sim = f.get("simulator") or {}
    sim_classes = sim.get("classes") or {}
    scale = f" (1/{f['divisor']} of the jobs: Kueue's figures are for the whole shape)" if f["divisor"] > 1 else ""
    lines = [
        f"Kueue baseline shape through the whole system, {f['mode']}{scale}: {f['jobs']} PyTorchJobs, "
        f"{f['unfinished']} unfinished",
        row("", "system", "simulator", "Kueue", "target"),
        row("wall time", fmt(f["wall_seconds"], " s"), fmt(sim.get("makespan"), " s"), f"{KUEUE['wall']:.0f} s",
            f"<= {TARGET['wall']:.0f} s"),
        row("  physical limit", f"{PHYSICAL_LIMIT / f['divisor']:.1f} s" if f["divisor"] > 1 else "66 s",
            "", "", ""),
        row("mean quota usage", fmt(f["mean_usage_percent"], " %"), fmt(sim.get("mean_usage_percent"), " %"),
            f"{KUEUE['usage']} %", f">= {TARGET['usage']:.0f} %"),
        row("  of it, running", fmt(f["work_share_percent"], " %"), "", "", ""),
    ]
    for kind in reversed(kueue_sim.CLASSES):
        ours, theirs = f["classes"][kind.name], sim_classes.get(kind.name, {})
        lines.append(row(f"{kind.name}: mean to admission", fmt(ours["mean_wait"], " s", 2),
                         fmt(theirs.get("mean_wait"), " s", 2), f"{KUEUE[kind.name]} s",
                         f"<= {TARGET[kind.name]:.0f} s"))
        lines.append(row(f"{kind.name}: p90 to admission", fmt(ours["p90_wait"], " s", 2),
                         fmt(theirs.get("p90_wait"), " s", 2), "-", "-"))
    lines += [
        row("controller API requests", str(ctl["api_requests"]), "-", "-", "-"),
        row("controller CPU", fmt(ctl["cpu_seconds"], " s"), fmt(sim.get("engine_cpu_seconds"), " s", 2),
            "-", "-"),
        row("controller peak RSS", mib(ctl["peak_rss"]), "-", "-", f"<= {mib(TARGET['rss'])}"),
        row("scheduling cycles", f"{ctl['cycles']:.0f}", "-", "-", "-"),
        row("cycle p50 / p99", f"{ctl['cycle_p50_ms']:.1f}/{ctl['cycle_p99_ms']:.1f} ms", "-", "-", "-"),
        row("API server CPU", fmt(f["apiserver"]["cpu_seconds"], " s"), "-", "-", "-"),
        row("bench process CPU", fmt(f["bench_process"]["cpu_seconds"], " s"), "-", "-", "-"),
        f"  controller flags: {ctl['flags']}; generator late p99 {f['generator_late_p99_seconds']:.2f} s; "
        f"load average before {f['load_average_before']}, after {f['load_average_after']}",
        "  controller requests: " + ", ".join(f"{k} {v}" for k, v in ctl["api_requests_by_kind"].items()),
        "  events: " + ", ".join(f"{k} {v}" for k, v in ctl["events_by_reason"].items()),
        "  mean hops: " + ", ".join(f"{k} {v:.3f} s" for k, v in f["hops_mean_seconds"].items()),
    ]
    if f["quotas_over_max"]:
        lines.append("QUOTA OVER MAX: " + "; ".join(f["quotas_over_max"][:5]))
    if f["released_more_than_once"]:
        lines.append(f"released more than once: {len(f['released_more_than_once'])} jobs")
    if f["runner_write_errors"]:
        lines.append("runner write errors: " + "; ".join(f["runner_write_errors"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="1/10 of the jobs per queue")
    parser.add_argument("--divisor", type=int, default=1, help="1/N of the jobs per queue (--small is 10)")
    parser.add_argument("--pods", action="store_true", help="simulated nodes (600 CPU), operator and kubelet")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--no-sim", action="store_true", help="skip the simulator's run of the same shape")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    parser.add_argument("--keep", help="keep the state, kubeconfigs and logs in this directory")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy the controller and the API server (with --keep: DIR/*.collapsed)")
    args = parser.parse_args(argv)
    figures_ = aio.run(run(args))
    print(json.dumps(figures_, indent=2) if args.json else render(figures_))
    ok = not figures_["unfinished"] and not figures_["quotas_over_max"] and not figures_["released_more_than_once"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
