"""Scale: 1,000 ElasticQuotas in a 3-level tree, 100,000 pending PyTorchJobs, one admission wave.

The tree: 10 top quotas (is-parent) x 9 middle quotas (is-parent) x 10 leaves = 1,000
quotas, 900 of them leaves (min 0, max 10 CPU). Every leaf is full: 9,000 running jobs
(1 CPU each) hold all the quota, and 100,000 more wait. Then the running jobs all end
(their Succeeded condition written, as the training operator would): 9,000 units are
admitted in one wave as the capacity frees, while 91,000 keep waiting.

Creating 100,000 jobs, and the controller their 100,000 QueueUnits, over HTTP would take
this 2-core machine several minutes before anything is measured, so the jobs AND their
QueueUnits (as the controller writes them: spec from the job; phase Enqueued with the
engine's own "queued" message, or Running for the running ones) are PRELOADED into the API server's SQLite store, cloned
from one job and one unit made through the API. The output says so. Everything after
that goes through HTTP: the API server and the controller run in processes of their own.

Measured: the controller's first start on that state and a restart (time until /readyz,
i.e. every informer listed, every unit in the engine), the API requests each start made,
the controller's peak RSS, the wave (time from the first job's end until all 9,000
admissions are seen through a watch, checking on every change that no leaf holds more
than its max), and the scheduling cycle p50/p99 from the controller's histogram.

    .venv/bin/python bench/scale.py                 # 100,000 jobs (several minutes)
    .venv/bin/python bench/scale.py --jobs 5000     # smaller
    .venv/bin/python bench/scale.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from harness import fmt, mib  # noqa: E402

from koordqueue import aio  # noqa: E402
from koordqueue.api import constants as c  # noqa: E402
from koordqueue.controller import status as st  # noqa: E402
from koordqueue.controller.views import adapter_of_kind, job_view, queue_unit_manifest, rfc3339  # noqa: E402
from koordqueue.engine import messages  # noqa: E402
from koordqueue.kube.client import KubeClient, Resource  # noqa: E402

NS = "scale"
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", "pytorchjobs")
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
JOBS_KEY = f"{c.KUBEFLOW_GROUP}/pytorchjobs"
UNITS_KEY = f"{c.QUEUE_GROUP}/{c.QUEUE_UNIT_PLURAL}"
TOPS, MIDS, LEAVES = 10, 9, 10  # per parent: 10 + 90 + 900 = 1,000 quotas
TARGET = {"rss": 1.5 * 2**30, "resync": 60.0, "cycle_p99_ms": 50.0}
CONTROLLER_FLAGS = ("--qps", "5000", "--burst", "10000")
ADAPTER = adapter_of_kind(c.PYTORCH_JOB_KIND)
SUCCEEDED = [{"type": "Running", "status": "False", "reason": "PyTorchJobSucceeded", "message": "done"},
             {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded", "message": "done"}]


def quota(name: str, max_cpu: int, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"min": {c.CPU: "0"}, "max": {c.CPU: str(max_cpu)}}}


def tree(leaf_max: int) -> tuple[list[dict[str, Any]], list[str]]:
    objs, leaves = [], []
    for t in range(TOPS):
        top = f"top-{t}"
        objs.append(quota(top, leaf_max * LEAVES * MIDS, {c.LABEL_QUOTA_IS_PARENT: c.TRUE}))
        for m in range(MIDS):
            mid = f"mid-{t}-{m}"
            objs.append(quota(mid, leaf_max * LEAVES, {c.LABEL_QUOTA_IS_PARENT: c.TRUE, c.LABEL_QUOTA_PARENT: top}))
            for leaf_index in range(LEAVES):
                leaf = f"leaf-{t}-{m}-{leaf_index}"
                objs.append(quota(leaf, leaf_max, {c.LABEL_QUOTA_PARENT: mid}))
                leaves.append(leaf)
    return objs, leaves


def job(name: str, leaf: str, priority: int) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {c.CPU: "1"}}}
    return {
        "apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.PYTORCH_JOB_KIND,
        "metadata": {"name": name, "namespace": NS, "labels": {c.LABEL_QUOTA_NAME: leaf},
                     "annotations": {c.ANNOTATION_SUSPEND: c.TRUE, c.ANNOTATION_PRIORITY: str(priority)}},
        "spec": {"runPolicy": {"suspend": True},
                 "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [container]}}}}},
    }


async def samples(client: KubeClient, leaf: str, running: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """One job and its unit made through the API (waiting, or running and holding quota),
    as templates for the preload."""
    made = await client.create(JOBS, job("sample", leaf, 1), namespace=NS)
    unit = await client.create(UNITS, queue_unit_manifest(job_view(made, ADAPTER, {})), namespace=NS)
    name = unit["metadata"]["name"]
    if running:
        now = time.time()
        status = {**st.admitted(unit["spec"], leaf, f"{c.SYSTEM_NAMESPACE}/{leaf}", [], 1, now),
                  **st.running(), "lastUpdateTime": rfc3339(now)}
        await client.patch_status(UNITS, name, {"status": status}, namespace=NS)
        await client.patch(JOBS, "sample", ADAPTER.resume_patch({}), namespace=NS)
        await client.patch_status(JOBS, "sample", {"status": {"conditions": [
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning", "message": "running"}]}},
            namespace=NS)
    else:
        await client.patch_status(UNITS, name, {"status": {
            "phase": c.Phase.ENQUEUED.value, "lastUpdateTime": made["metadata"]["creationTimestamp"],
            "message": messages.queued(f"{c.SYSTEM_NAMESPACE}/{leaf}", leaf, c.QueuePolicy.PRIORITY)}},
            namespace=NS)
    made = await client.get(JOBS, "sample", namespace=NS)
    unit = await client.get(UNITS, name, namespace=NS)
    await client.delete(UNITS, name, namespace=NS)
    await client.delete(JOBS, "sample", namespace=NS)
    return made, unit


def preload(db_path: Path, templates: dict[bool, tuple[dict[str, Any], dict[str, Any]]], leaves: list[str],
            pending: int, running_per_leaf: int, seed: int = 7) -> list[str]:
    """Write the running jobs (``running_per_leaf`` in each leaf) and ``pending`` waiting ones,
    with their units, straight into the store (one transaction); the running jobs' names."""
    rng = random.Random(seed)
    db = sqlite3.connect(db_path)
    rv = int(db.execute("SELECT value FROM meta WHERE key='rv'").fetchone()[0])
    rows, running_names = [], []
    base = time.time() - 3600
    running = len(leaves) * running_per_leaf
    for i in range(running + pending):
        is_running = i < running
        template_job, template_unit = templates[is_running]
        leaf = leaves[i % len(leaves)]
        name = f"run-{i:06d}" if is_running else f"job-{i - running:06d}"
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + i * 0.01))
        uid = str(uuid.UUID(int=rng.getrandbits(128)))
        j = json.loads(json.dumps(template_job))
        meta = j["metadata"]
        rv += 1
        meta.update(name=name, uid=uid, resourceVersion=str(rv), creationTimestamp=created)
        meta["labels"][c.LABEL_QUOTA_NAME] = leaf
        meta.setdefault("annotations", {})[c.ANNOTATION_PRIORITY] = str(rng.randrange(4))
        u = json.loads(json.dumps(template_unit))
        umeta = u["metadata"]
        rv += 1
        umeta.update(name=ADAPTER.unit_name(j), uid=str(uuid.UUID(int=rng.getrandbits(128))), resourceVersion=str(rv),
                     creationTimestamp=created)
        umeta["labels"][c.LABEL_QUOTA_NAME] = leaf
        umeta["ownerReferences"][0].update(name=name, uid=uid)
        view = job_view(j, ADAPTER, {})
        assert view.unit_spec is not None
        u["spec"] = view.unit_spec
        if is_running:
            running_names.append(name)
            u["status"]["message"] = f"admitted into quota {leaf} through queue {c.SYSTEM_NAMESPACE}/{leaf}"
            u["status"]["lastAllocateTime"] = created
        else:
            u["status"]["message"] = messages.queued(f"{c.SYSTEM_NAMESPACE}/{leaf}", leaf, c.QueuePolicy.PRIORITY)
        u["status"]["lastUpdateTime"] = created
        rows.append((JOBS_KEY, NS, name, json.dumps(j, separators=(",", ":")).encode()))
        rows.append((UNITS_KEY, NS, umeta["name"], json.dumps(u, separators=(",", ":")).encode()))
    with db:
        db.executemany("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)", rows)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)", (str(rv),))
    db.close()
    return running_names


async def settle(controller: harness.ControllerProcess, quiet: float = 0.05, window: float = 2.0,
                 timeout: float = 300.0) -> float:
    """Until the controller uses less than ``quiet`` of a core over ``window`` seconds."""
    started = time.monotonic()
    last = controller.usage()["cpu_seconds"]
    while time.monotonic() - started < timeout:
        await asyncio.sleep(window)
        now = controller.usage()["cpu_seconds"]
        if (now - last) / window < quiet:
            break
        last = now
    return time.monotonic() - started


async def start_and_sync(controller: harness.ControllerProcess, client: KubeClient) -> dict[str, Any]:
    before = await harness.request_counts(client, harness.CONTROLLER_USER)
    controller.start()
    ready = await controller.wait_ready(timeout=600)
    ready_usage = controller.usage()
    settled = await settle(controller)
    after = await harness.request_counts(client, harness.CONTROLLER_USER)
    writes = {k: v - before.get(k, 0) for k, v in after.items()
              if v - before.get(k, 0) and not k.startswith(("list ", "watch ", "get "))}
    return {"ready_seconds": ready, "rss_when_ready": ready_usage["rss"], "settled_after_ready_seconds": settled,
            "writes_while_syncing": writes}


async def wave(client: KubeClient, controller: harness.ControllerProcess, running: list[str], leaf_max: int,
               expected: int, timeout: float) -> dict[str, Any]:
    """End every running job; count admissions through a watch until ``expected`` are seen,
    checking on every change that no leaf holds more than its max."""
    page = await client.list(UNITS, namespace=NS, limit=1)
    holding_phases = {p.value for p in c.PHASES_HOLDING_QUOTA}
    held = {ADAPTER.unit_name({"metadata": {"name": name}}) for name in running}  # units holding quota
    used: dict[str, int] = {}  # leaf -> CPU held; every leaf starts full
    over: list[str] = []
    admitted: set[str] = set()
    done = asyncio.Event()
    metrics_before = await controller.metrics()

    async def watch() -> None:
        async for event in client.watch(UNITS, namespace=NS, resource_version=page.resource_version,
                                        timeout_seconds=int(timeout) + 60):
            obj = event.object
            if event.type not in ("ADDED", "MODIFIED"):
                continue
            name = obj["metadata"]["name"]
            leaf = obj["metadata"]["labels"][c.LABEL_QUOTA_NAME]
            holds = (obj.get("status") or {}).get("phase") in holding_phases
            if name in held and not holds:  # ended (or sent back)
                held.discard(name)
                used[leaf] = used.get(leaf, leaf_max) - 1
            elif name not in held and holds:
                held.add(name)
                admitted.add(name)
                used[leaf] = used.get(leaf, leaf_max) + 1
                if used[leaf] > leaf_max:
                    over.append(f"{leaf} holds {used[leaf]} CPU > max {leaf_max}")
                if len(admitted) >= expected:
                    done.set()
                    return

    watching = asyncio.create_task(watch())
    await asyncio.sleep(0.5)
    started = time.monotonic()
    sem = asyncio.Semaphore(32)

    async def end(name: str) -> None:
        async with sem:
            await client.patch_status(JOBS, name, {"status": {"conditions": SUCCEEDED}}, namespace=NS)

    ending = asyncio.gather(*(end(name) for name in running))
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        pass
    took = time.monotonic() - started
    await ending
    watching.cancel()
    await asyncio.gather(watching, return_exceptions=True)
    await asyncio.sleep(0.5)
    cycles = harness.Histogram.parse(await controller.metrics(), "koord_queue_scheduling_cycle_seconds").minus(
        harness.Histogram.parse(metrics_before, "koord_queue_scheduling_cycle_seconds"))
    return {"ended": len(running), "admitted": len(admitted), "expected": expected, "seconds": took,
            "quotas_over_max": over, "cycles": cycles.count, "cycle_p50_ms": 1000 * cycles.quantile(0.5),
            "cycle_p99_ms": 1000 * cycles.quantile(0.99), "cycle_mean_ms": 1000 * cycles.mean}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    leaf_max = args.running_per_leaf
    objs, leaves = tree(leaf_max)
    out: dict[str, Any] = {"jobs": args.jobs, "running": len(leaves) * leaf_max, "quotas": len(objs),
                           "leaves": len(leaves),
                           "preloaded": "jobs and QueueUnits written straight into the API server's SQLite store",
                           "load_average_before": harness.load_average()}
    with tempfile.TemporaryDirectory(prefix="kq-scale-") as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        server = harness.ServerProcess(base / "state")
        server.start()
        async with harness.open_client(server.kubeconfig) as client:
            await harness.ensure_namespace(client, NS)
            await harness.controller_kubeconfig(client, server.kubeconfig, base / "controller.kubeconfig")
            sem = asyncio.Semaphore(16)

            async def create(obj: dict[str, Any]) -> None:
                async with sem:
                    await client.create(QUOTAS, obj, namespace=NS)

            await asyncio.gather(*(create(o) for o in objs))
            templates = {True: await samples(client, leaves[0], True), False: await samples(client, leaves[0], False)}
        server.stop()
        started = time.monotonic()
        running = preload(base / "state" / "state.db", templates, leaves, args.jobs, leaf_max)
        out["preload_seconds"] = time.monotonic() - started
        started = time.monotonic()
        server.start()
        out["apiserver_start_seconds"] = time.monotonic() - started
        controller = harness.ControllerProcess(base / "controller.kubeconfig", base / "controller.log",
                                               *CONTROLLER_FLAGS)
        try:
            async with harness.open_client(server.kubeconfig) as client:
                out["first_start"] = await start_and_sync(controller, client)
                controller.stop()
                out["restart"] = await start_and_sync(controller, client)
                expected = min(args.jobs, len(running))
                out["wave"] = await wave(client, controller, running, leaf_max, expected, args.timeout)
                usage = controller.usage()
                out["controller"] = {"peak_rss": usage["peak_rss"], "cpu_seconds": usage["cpu_seconds"],
                                     "flags": " ".join(CONTROLLER_FLAGS)}
                out["apiserver"] = {"peak_rss": server.usage()["peak_rss"]}
        finally:
            controller.stop()
            server.stop()
    out["load_average_after"] = harness.load_average()
    return out


def render(f: dict[str, Any]) -> str:
    def row(label: str, ours: str, target: str) -> str:
        return f"  {label:<44}{ours:>16}{target:>14}"

    first, restart, wave_ = f["first_start"], f["restart"], f["wave"]
    lines = [
        f"Scale: {f['quotas']} quotas ({f['leaves']} leaves) in 3 levels, {f['running']} running and "
        f"{f['jobs']} pending PyTorchJobs "
        f"(PRELOADED: {f['preloaded']}, {f['preload_seconds']:.0f} s; API server start {f['apiserver_start_seconds']:.0f} s)",
        row("", "measured", "target"),
        row("controller peak RSS", mib(f["controller"]["peak_rss"]), f"<= {mib(TARGET['rss'])}"),
        row("first start: ready (listed, units in the engine)", fmt(first["ready_seconds"], " s"), "-"),
        row("restart: full resync until ready", fmt(restart["ready_seconds"], " s"), f"<= {TARGET['resync']:.0f} s"),
        row("restart: busy after ready", fmt(restart["settled_after_ready_seconds"], " s"), "-"),
        row("wave: running jobs ended", str(wave_["ended"]), "-"),
        row("wave: admissions seen", f"{wave_['admitted']}/{wave_['expected']}", "-"),
        row("wave: seconds from the first end until all seen", fmt(wave_["seconds"], " s"), "-"),
        row("wave: scheduling cycles", f"{wave_['cycles']:.0f}", "-"),
        row("wave: cycle p50 / p99", f"{wave_['cycle_p50_ms']:.1f} / {wave_['cycle_p99_ms']:.1f} ms",
            f"p99 <= {TARGET['cycle_p99_ms']:.0f} ms"),
        f"  writes at first start: {first['writes_while_syncing']}",
        f"  writes at restart: {restart['writes_while_syncing']}",
        f"  controller flags: {f['controller']['flags']}; load average before {f['load_average_before']}, "
        f"after {f['load_average_after']}",
    ]
    if wave_["quotas_over_max"]:
        lines.append("QUOTA OVER MAX: " + "; ".join(wave_["quotas_over_max"][:5]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="pending jobs")
    parser.add_argument("--running-per-leaf", type=int, default=10,
                        help="running jobs per leaf quota, whose max it is (900 leaves)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the wave")
    parser.add_argument("--keep", help="keep the state and logs in this directory")
    args = parser.parse_args(argv)
    figures = aio.run(run(args))
    print(json.dumps(figures, indent=2) if args.json else render(figures))
    wave_ = figures["wave"]
    return 0 if wave_["admitted"] == wave_["expected"] and not wave_["quotas_over_max"] else 1


if __name__ == "__main__":
    sys.exit(main())
