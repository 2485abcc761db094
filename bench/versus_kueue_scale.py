"""Scale, both: many quotas and many pending Jobs, ours and Kueue on the same real control plane.

Each run is a fresh real cluster (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok; the build bench/versus_kueue.py uses) with one system, set up
through versus_kueue.py's `Ours` / `Kueue` classes:

- quotas: `--quotas Q` leaves in cohorts of 10, each with `nominal` 1 CPU and no
  borrowing (so that a wave is one admission per leaf and no reclaim or preemption
  follows): ours Q leaf ElasticQuotas (min = max = 1) under Q/10 parent ElasticQuotas
  (10 CPU); Kueue Q ClusterQueues in Q/10 cohorts, one LocalQueue each. A leaf's jobs
  live in the leaf's namespace (Q namespaces);
- jobs: `--jobs N` suspended batch Jobs of 1 CPU spread round robin over the leaves,
  all created (parallel POSTs) and kube-controller-manager settled BEFORE the
  controller first starts: creating them is in no figure. Only one per leaf fits, so
  Q are admitted in the first wave and N - Q stay pending. Their pods run on 10 kwok
  nodes of 200 CPU until deleted.

Measured, for the first start and for a restart (the controller stopped, every leaf's
nominal raised to 2 CPU while it is down, started again: it must load everything
again and admit the next wave of Q):

- ready: from the process start until it has made its record (QueueUnit / Workload) of
  all N jobs (first start only: they exist at a restart) and the wave is written (Q more
  Jobs seen unsuspended through a watch);
- its readiness endpoint (/readyz, and for ours every Queue made, for Kueue every
  ClusterQueue Active, as versus_kueue.py waits), the first admission, the wave's
  duration (first to last admission of the wave);
- the controller's peak RSS (VmHWM of that process), CPU seconds, scheduling cycle
  p50/p99 from its own histogram (ours: koord_queue_scheduling_cycle_seconds; Kueue:
  kueue_admission_attempt_duration_seconds, as versus_kueue.py's cycle_figures);
- the controller's API requests in each start (kube-apiserver's audit log, its user only);
- kube-apiserver's and etcd's RSS (now and peak), and no leaf over its nominal.

    KOORD_QUEUE_TOOLS=/work/main/.tools .venv/bin/python bench/versus_kueue_scale.py --jobs 10000
    ... --jobs 10000 --order kueue,ours          # the second A/B pair
    ... --jobs 100000 --rounds 2 --json         # the issue's size (hours on a loaded 2-core machine)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import kueue_sim  # noqa: E402
import versus_kueue as vk  # noqa: E402
from harness import dig, fmt, mib  # noqa: E402

from koordqueue import aio  # noqa: E402
from koordqueue.api import constants as c  # noqa: E402
from koordqueue.kube.client import KubeClient, Resource  # noqa: E402
from koordqueue.kube.config import load_config  # noqa: E402
from koordqueue.kube.errors import AlreadyExists, ConnectionFailed  # noqa: E402
from koordqueue.realcluster import kueue as kq  # noqa: E402
from koordqueue.realcluster.cluster import NodeShape, RealCluster, install_crds  # noqa: E402

COHORT = 10  # leaves per cohort / parent quota
NOMINAL, RAISED = 1, 2  # a leaf's CPU at the first start, and after it is raised for the restart
NODES, NODE_CPU = 10, "200"
CREATORS = 128  # parallel POSTs while setting up
MIN_FREE = 2 * 2**30  # give up a run when the machine has less memory available than this


def shape_of(quotas: int, nominal: int = NOMINAL) -> vk.QuotaLayout:
    return vk.QuotaLayout(parents=max(1, quotas // COHORT), children=min(quotas, COHORT), nominal=nominal, borrow=0,
                    parent=nominal * min(quotas, COHORT))


def resource_of(obj: dict[str, Any]) -> Resource:
    kind = obj["kind"]
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    return Resource.of(obj["apiVersion"], plural, namespaced=bool(obj["metadata"].get("namespace")))


async def create_all(client: KubeClient, objects: Any, parallel: int = CREATORS) -> int:
    """Create every object (an iterable, consumed lazily), `parallel` at a time; those that exist are left."""
    made = 0
    it = iter(objects)

    async def worker() -> None:
        nonlocal made
        for obj in it:
            with contextlib.suppress(AlreadyExists):
                await client.create(resource_of(obj), obj)
                made += 1

    await asyncio.gather(*(worker() for _ in range(parallel)))
    return made


def quota_objects(system: vk.System) -> list[dict[str, Any]]:
    shape = system.shape
    if isinstance(system, vk.Kueue):
        return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kq.NAMESPACE}},
                *vk.kueue_queues(shape)]
    out = [vk.quota(f"parent-{p}", c.SYSTEM_NAMESPACE, shape.parent, shape.parent,
                    {c.LABEL_QUOTA_IS_PARENT: c.TRUE}) for p in range(shape.parents)]
    out += [vk.quota(leaf, namespace, shape.nominal, shape.nominal + shape.borrow, {c.LABEL_QUOTA_PARENT: parent})
            for leaf, parent, namespace in shape.leaves()]
    return out


def job_objects(system: vk.System, jobs: int) -> Any:
    """The N suspended Jobs, round robin over the leaves, as the system's webhook would leave them."""
    leaves = system.shape.leaves()
    kind = kueue_sim.CLASSES[0]
    for i in range(jobs):
        leaf, parent, namespace = leaves[i % len(leaves)]
        record = vk.JobRecord(f"job-{i:06d}", leaf, parent, namespace, kind, 1000, 0.0)
        pod = {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "main", "image": "busybox",
                                        "resources": {"requests": {c.CPU: "1"}}}]}}
        yield {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": record.name, "namespace": namespace, **system.job_meta(record)},
               "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": pod}}


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def rss(pid: int) -> dict[str, int]:
    try:
        return harness.memory(pid)
    except (FileNotFoundError, ProcessLookupError):
        return {}


async def settle(pids: dict[str, int], quiet: float = 0.15, window: float = 3.0, timeout: float = 900.0) -> float:
    """Until every one of `pids` uses less than `quiet` of a core over `window` seconds
    (kube-controller-manager's Job controller writing the new Jobs' status, kube-apiserver, etcd)."""
    started = time.monotonic()
    last = {n: vk.proc_cpu(p) for n, p in pids.items()}
    while time.monotonic() - started < timeout:
        await asyncio.sleep(window)
        now = {n: vk.proc_cpu(p) for n, p in pids.items()}
        if all((now[n] - last[n]) / window < quiet for n in pids):
            break
        last = now
    return time.monotonic() - started


@dataclass
class Observed:
    """What two watches see, with the monotonic time of each first sighting."""

    records: dict[str, float] = field(default_factory=dict)  # the system's record of a job: ns/job -> first seen
    released: dict[str, float] = field(default_factory=dict)  # ns/job -> first seen unsuspended
    per_leaf: dict[str, int] = field(default_factory=dict)  # namespace (= leaf) -> jobs unsuspended
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def job(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if kind != "DELETED" and not (obj.get("spec") or {}).get("suspend") and key not in self.released:
            self.released[key] = time.monotonic()
            self.per_leaf[meta["namespace"]] = self.per_leaf.get(meta["namespace"], 0) + 1
            self.changed.set()

    def holder(self, key: str) -> None:
        if key not in self.records:
            self.records[key] = time.monotonic()
            self.changed.set()


async def follow(client: KubeClient, resource: Resource, on_event: Callable[[str, dict[str, Any]], None]) -> None:
    """Every event of `resource` from now on, the watch resumed where it broke."""
    rv = (await client.list(resource, limit=1)).resource_version
    while True:
        try:
            async for event in client.watch(resource, resource_version=rv, timeout_seconds=900):
                rv = event.object["metadata"].get("resourceVersion") or rv
                if event.type != "BOOKMARK":
                    on_event(event.type, event.object)
        except ConnectionFailed:
            await asyncio.sleep(0.5)


async def first_admission(seen: Observed, before: int, profiler: harness.Profiler | None) -> None:
    """Stop `profiler` when this start's first admission is seen."""
    while len(seen.released) <= before:
        await asyncio.sleep(0.05)
    if profiler is not None:
        await asyncio.to_thread(profiler.stop)


class ReadyTimer:
    """The time from a start until the system's own readiness check passes."""

    def __init__(self) -> None:
        self.at = math.nan

    async def run(self, system: vk.System, cluster: RealCluster, client: KubeClient, t0: float,
                  timeout: float) -> None:
        await system.wait_ready(cluster, client, timeout)
        self.at = time.monotonic() - t0


async def one_run(system_class: type[vk.System], args: argparse.Namespace, base: Path, label: str) -> dict[str, Any]:
    here = vk.state_dir(base, label)
    system = system_class(here, shape_of(args.quotas))
    leaves = len(system.shape.leaves())
    cluster = RealCluster(here / "cluster", NodeShape(count=NODES, gpus=0, cpu=NODE_CPU, memory="1Ti", prefix="node"),
                          training_operator=False, audit_users=(system.user,), component_qps=args.component_qps,
                          controller_manager_flags=(f"--concurrent-job-syncs={vk.JOB_SYNCS}",))
    out: dict[str, Any] = {"system": system.name, "jobs": args.jobs, "leaves": leaves,
                           "parents": system.shape.parents, "load_average_before": harness.load_average()}
    await asyncio.to_thread(cluster.start)
    watchers: list[asyncio.Task[None]] = []
    try:
        client = KubeClient(load_config(str(cluster.kubeconfig_path)), qps=vk.CLIENT_QPS, burst=vk.CLIENT_BURST,
                            user_agent="versus-kueue-scale-bench", timeout=120)
        async with client:
            started = time.monotonic()
            await asyncio.to_thread(kq.install_crds if isinstance(system, vk.Kueue) else install_crds, cluster)
            await create_all(client, ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                                      for ns in system.shape.namespaces()))
            await create_all(client, quota_objects(system))
            out["quotas_setup_s"] = time.monotonic() - started
            started = time.monotonic()
            out["jobs_created"] = await create_all(client, job_objects(system, args.jobs))
            out["jobs_create_s"] = time.monotonic() - started
            pids = vk.cluster_pids(cluster)
            out["settle_s"] = await settle({n: pids[n] for n in ("kube-controller-manager", "kube-apiserver", "etcd")})
            out["apiserver_rss_before"] = rss(pids["kube-apiserver"]).get("VmRSS", 0)
            out["mem_available_before"] = mem_available()
            if out["mem_available_before"] < MIN_FREE:
                raise SystemExit(f"only {mib(out['mem_available_before'])} available: not starting {system.name}")

            seen = Observed()
            watchers.append(asyncio.create_task(follow(client, vk.JOBS, seen.job)))
            watchers.append(asyncio.create_task(follow(
                client, system.holders, lambda kind, obj: seen.holder(system.holder(obj)[0]) if kind == "ADDED"
                else None)))
            await asyncio.sleep(1.0)  # both watches open
            starts = (("first_start", True, 0), ("restart", False, leaves))
            for name, first, before in starts[:1] if args.first_only else starts:
                if not first:
                    system.stop()
                    await asyncio.to_thread(system.set_capacity, cluster, RAISED, 0, RAISED * system.shape.children)
                    await asyncio.sleep(2.0)
                process = system.start(cluster)
                t0, t0_epoch = time.monotonic(), time.time()
                profiler = harness.Profiler(process, here / f"{name}.collapsed", rate=100) \
                    if args.profile and system.name == "ours" else None
                # From the start to its first admission, waits included: what the first cycle waits for.
                to_first = harness.Profiler(process, here / f"{name}-to-first.collapsed", rate=100, idle=True) \
                    if args.profile_first and system.name == "ours" else None
                timer = ReadyTimer()
                timing = asyncio.create_task(timer.run(system, cluster, client, t0, args.timeout))
                first_seen = asyncio.create_task(first_admission(seen, before, to_first))
                figures = await measure(system, process, seen, jobs=args.jobs, before=before,
                                        wave=1 if args.first_only else leaves, first=first and not args.first_only,
                                        timeout=args.timeout, t0=t0)
                first_seen.cancel()
                if to_first is not None:
                    await asyncio.to_thread(to_first.stop)
                    figures["profile_to_first_admission"] = harness.top_functions(to_first.out, 40)
                if profiler is not None:
                    profiler.stop()
                    figures["profile_top"] = harness.top_functions(profiler.out, 30)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(timing, 60)
                figures["readyz_s"] = timer.at
                requests = await asyncio.to_thread(vk.audit_counts, cluster, system.user, t0_epoch, time.time())
                figures["requests_by_kind"] = requests
                figures["writes"] = sum(n for k, n in requests.items() if not k.startswith(("get ", "list ", "watch ")))
                figures["over_nominal"] = sum(1 for n in seen.per_leaf.values() if n > (NOMINAL if first else RAISED))
                out[name] = figures
                print(f"{label} {name}: ready {fmt(figures['ready_s'], ' s')}, wave {fmt(figures['wave_s'], ' s')}, "
                      f"peak RSS {mib(figures['controller_peak_rss'])}, load {harness.load_average()}",
                      file=sys.stderr, flush=True)
            out["apiserver_rss"] = rss(pids["kube-apiserver"]).get("VmRSS", 0)
            out["apiserver_peak_rss"] = rss(pids["kube-apiserver"]).get("VmHWM", 0)
            out["etcd_rss"] = rss(pids["etcd"]).get("VmRSS", 0)
            out["mem_available_after"] = mem_available()
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
    finally:
        for task in watchers:
            task.cancel()
        system.stop()
        await asyncio.to_thread(cluster.stop)
    out["load_average_after"] = harness.load_average()
    if not args.keep:
        shutil.rmtree(here, ignore_errors=True)
    return out


async def measure(system: vk.System, process: vk.Proc, seen: Observed, *, jobs: int, before: int, wave: int,
                  first: bool, timeout: float, t0: float) -> dict[str, Any]:
    """The controller started at `t0`: wait until it has a record of every job (first start) and
    `wave` more admissions than `before`; its figures."""
    deadline = t0 + timeout
    while len(seen.released) < before + wave or (first and len(seen.records) < jobs):
        if time.monotonic() > deadline:
            break
        if not process.alive():
            raise SystemExit(f"{system.name} exited:\n{process.tail()}")
        seen.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(seen.changed.wait(), 1.0)
    done = time.monotonic()
    await asyncio.sleep(5)  # nothing more may be admitted: one job per leaf's CPU
    times = sorted(t for t in seen.released.values() if t >= t0)
    records = sorted(t for t in seen.records.values() if t >= t0)
    mem = rss(process.pid)
    cpu = vk.proc_cpu(process.pid)
    cycles = await system.cycle_figures()
    return {
        "ready_s": done - t0,
        "records_s": (records[-1] - t0) if records else math.nan,
        "records_made": len(records),
        "first_admission_s": (times[0] - t0) if times else math.nan,
        "wave_s": (times[wave - 1] - times[0]) if len(times) >= wave else math.nan,
        "admitted": len(times),
        "expected": wave,
        "controller_peak_rss": mem.get("VmHWM", 0),
        "controller_rss": mem.get("VmRSS", 0),
        "controller_cpu_s": cpu,
        **cycles,
    }


# --- the whole command -------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"jobs": args.jobs, "quotas": args.quotas, "load_average_start": harness.load_average()}
    with tempfile.TemporaryDirectory(prefix="versus-kueue-scale-") as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        order: list[type[vk.System]] = []
        for i in range(args.rounds):
            pair: list[type[vk.System]] = [vk.Ours, vk.Kueue] if i % 2 == 0 else [vk.Kueue, vk.Ours]
            order += [s for s in pair if args.only in (None, s.name)]
        if args.order:
            order = [{"ours": vk.Ours, "kueue": vk.Kueue}[name] for name in args.order.split(",")]
        runs = []
        for n, system in enumerate(order):
            runs.append(await one_run(system, args, base, f"{n}-{system.name}"))
            if args.keep:  # a long run's figures survive the runs after it
                (base / f"{n}-{system.name}.json").write_text(json.dumps(runs[-1], indent=1))
        result["runs"] = runs
        for name in ("ours", "kueue"):
            mine = [r for r in runs if r["system"] == name]
            if mine:
                result[name] = mean_runs(mine)
    result["load_average_end"] = harness.load_average()
    return result


def mean_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = {k: _mean([r[key][k] for r in runs]) if isinstance(v, int | float) else v
                        for k, v in value.items() if k != "requests_by_kind"}
        elif isinstance(value, int | float) and not isinstance(value, bool):
            values = [r[key] for r in runs]
            out[key] = value if all(v == value for v in values) else _mean(values)
        else:
            out[key] = value
    return out


def _mean(values: list[Any]) -> float:
    return sum(values) / len(values) if values else math.nan


def render(result: dict[str, Any]) -> str:
    ours, kueue = result.get("ours"), result.get("kueue")
    any_ = ours or kueue
    assert any_ is not None
    lines = [f"Scale: {any_['leaves']} leaf quotas in {any_['parents']} cohorts (ours: + {any_['parents']} parent "
             f"ElasticQuotas; Kueue: ClusterQueues + LocalQueues), {result['jobs']} suspended batch Jobs made before "
             f"the controller starts, one job per leaf fits; mean of {any_['runs']} run(s) each",
             f"  {'':<44}{'ours':>12}{'Kueue':>12}{'ratio':>8}"]

    def row(label: str, *path: str, unit: str = "", digits: int = 1, scale: float = 1.0) -> None:
        a, b = dig(ours, *path), dig(kueue, *path)
        a = a / scale if isinstance(a, int | float) else a
        b = b / scale if isinstance(b, int | float) else b
        ratio = a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else math.nan
        lines.append(f"  {label:<44}{fmt(a, unit, digits):>12}{fmt(b, unit, digits):>12}{fmt(ratio, '', 2):>8}")

    for name, title in (("first_start", "first start"), ("restart", "restart (nominal raised while down)")):
        if name not in any_:
            continue  # (--first-only)
        lines.append(f"  {title}:")
        row("ready (records of all jobs + wave written)", name, "ready_s", unit=" s")
        row("readiness endpoint", name, "readyz_s", unit=" s")
        if name == "first_start":
            row("records (QueueUnit / Workload) of all jobs", name, "records_s", unit=" s")
        row("first admission", name, "first_admission_s", unit=" s")
        row("wave: first to last admission", name, "wave_s", unit=" s")
        row("wave: admitted / expected", name, "admitted", digits=0)
        row("scheduling cycle p50", name, "cycle_p50_ms", unit=" ms")
        row("scheduling cycle p99", name, "cycle_p99_ms", unit=" ms")
        row("cycles", name, "cycles", digits=0)
        row("controller peak RSS (MiB)", name, "controller_peak_rss", digits=0, scale=2**20)
        row("controller CPU", name, "controller_cpu_s", unit=" s")
        row("API writes (audit log)", name, "writes", digits=0)
        row("leaves over their nominal", name, "over_nominal", digits=0)
    row("kube-apiserver RSS at the end (MiB)", "apiserver_rss", digits=0, scale=2**20)
    row("kube-apiserver peak RSS (MiB)", "apiserver_peak_rss", digits=0, scale=2**20)
    row("etcd RSS at the end (MiB)", "etcd_rss", digits=0, scale=2**20)
    row("setup: jobs created in", "jobs_create_s", unit=" s")
    for r in result["runs"]:
        lines.append(f"  run {r['system']}: ready {fmt(r['first_start']['ready_s'], ' s')} / restart "
                     f"{fmt(dig(r, 'restart', 'ready_s'), ' s')}, peak RSS {mib(r['first_start']['controller_peak_rss'])}"
                     f" / {mib(dig(r, 'restart', 'controller_peak_rss') or 0)}, {r['jobs_created']} jobs in "
                     f"{fmt(r['jobs_create_s'], ' s')}, load {r['load_average_before']} -> {r['load_average_after']}")
        for p in ("first_start", "restart") if "restart" in r else ("first_start",):
            lines.append(f"    {p} requests: " + ", ".join(f"{k} {v}" for k, v in r[p]["requests_by_kind"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="pending suspended batch Jobs")
    parser.add_argument("--quotas", type=int, default=1000, help="leaf quotas (ClusterQueues), in cohorts of 10")
    parser.add_argument("--rounds", type=int, default=1, help="A/B pairs (alternating which goes first)")
    parser.add_argument("--only", choices=("ours", "kueue"), help="run one system only")
    parser.add_argument("--order", help="the runs, in order, e.g. kueue,ours (instead of --rounds / --only)")
    parser.add_argument("--component-qps", type=int, default=vk.COMPONENT_QPS,
                        help="kube-controller-manager's and kube-scheduler's client rate")
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up on a start after this many seconds")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy ours' controller in each start (100 Hz): DIR/N-ours/<start>.collapsed with --keep")
    parser.add_argument("--profile-first", action="store_true",
                        help="ours: py-spy (idle samples included) from each start to its first admission")
    parser.add_argument("--first-only", action="store_true",
                        help="the first start only, until its first admission (no wave, no restart)")
    parser.add_argument("--keep", help="keep each run's state and logs in this directory")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    result = aio.run(run(args))
    print(json.dumps(result, indent=2, default=str) if args.json else render(result))
    if args.first_only:  # the first admission seen, and (in the 5 s after it) no leaf over its nominal
        bad = [r for r in result["runs"] if not r["first_start"]["admitted"] or r["first_start"]["over_nominal"]]
    else:
        bad = [r for r in result["runs"] for p in ("first_start", "restart")
               if r[p]["admitted"] != r[p]["expected"] or r[p]["over_nominal"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
