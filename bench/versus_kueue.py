"""Side by side with Kueue on the same real control plane, in one command.

Both queue controllers run on the real control plane (kube-apiserver 1.37, etcd,
kube-controller-manager, kube-scheduler and kwok, built from e2e/cluster), Kueue
built from its Go module (e2e/kueue, sigs.k8s.io/kueue v0.17.0):

1. Kueue's own scheduler performance test, as its maintainers run it in a cluster:
   its runner (test/performance/scheduler/runner, in-cluster mode, --qps=1000
   --burst=2000 as its Makefile's in-cluster target) with its baseline generator
   config, against its minimal manager (minimalkueue) started by us on the same
   kube-apiserver. Its summary: wall, quota usage, time to admission per class,
   checked against its rangespec.
2. Like for like, in pairs (a pair: one run of each runner; the order reversed every
   other pair: ours, Kueue tuned, Kueue as shipped, the floor, then the floor first ...),
   each run on a fresh cluster of the same build: one generator (ours, this process) creates the
   same stream of suspended batch Jobs (or PyTorchJobs: --kind) at Kueue's pacing (the baseline shape: per
   queue 350 small, 100 medium, 50 large; 5 x 6 queues), each Job labelled for
   Kueue's LocalQueue or annotated for our quota; Kueue runs as cmd/kueue with its
   batch/job integration (ClusterQueues in 5 cohorts, nominal 20, borrowing limit
   100, its preemption settings), ours as `koord-queue controller` (5 parent
   ElasticQuotas of 120 CPU x 6 children, min 20, max 120). Pods are real: made by
   kube-controller-manager's Job controller, bound by kube-scheduler to 10 kwok nodes
   of 60 CPU, run by kwok for their class's runtime. Both controllers get the same
   client rate (--qps/--burst; Kueue's default config has 50/100) and the same
   identity (a client certificate in system:masters); kube-apiserver's audit log
   records each one's requests, and nothing else's.

The runners, all with Kueue's baseline preemption settings (within a ClusterQueue by priority,
reclaim within a cohort; ours: Queues preempting lower priority within a quota, no protection
time, a parent's lent quota reclaimed as always):
- `ours`: `koord-queue controller` (16 job workers, client 5000/10000);
- `kueue`: Kueue tuned as its Configuration reference allows
  (https://kueue.sigs.k8s.io/docs/reference/kueue-config.v1beta2/): `controller.groupKindConcurrency`
  of its job reconciler (Job.batch) = ours' 16 workers, `clientConnection.qps`/`burst` = ours;
- `kueue_default`: Kueue as shipped (5 workers per reconciler, client 50/100);
- `floor`: bench/floor.py, a per-quota counter, FIFO, no policies: what the control plane allows.
Every ratio of the headline is computed within a pair; the table gives each figure's mean and
its spread (min-max) across pairs.

Figures, the same code for all: wall from the first Job's creation to the last
Job seen Complete; time to admission from a Job's creation to the generator's watch
seeing it unsuspended (and, second, to the system's own record of admission: a
Workload's QuotaReserved, a QueueUnit holding quota); quota usage as Kueue's test
computes it (integral of the quota each system holds, divided by the sum of nominal
quotas times the time from the first creation to the last release); CPU seconds of
the controller, kube-apiserver and etcd from /proc/PID/stat over the run; API
requests per admitted job from the audit log; peak RSS (VmHWM); invariants: no quota
(leaf or cohort/parent) over 120 CPU at any moment of the system's own accounting,
every Job Complete.

    .venv/bin/python bench/versus_kueue.py                 # the whole thing (about 30 minutes)
    .venv/bin/python bench/versus_kueue.py --divisor 10    # 1/10 of the jobs per queue
    .venv/bin/python bench/versus_kueue.py --no-perf --rounds 1 --json
    .venv/bin/python bench/versus_kueue.py --divisor 10 --rounds 3 --no-perf   # the headline at 1/10
    ... --systems ours,floor                                # some runners only
    KOORD_QUEUE_TOOLS=/work/main/.tools ...                # binaries built elsewhere
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import shutil
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import floor  # noqa: E402
import harness  # noqa: E402
import kueue_sim  # noqa: E402
from harness import dig, fmt, mib  # noqa: E402

from koordqueue import aio  # noqa: E402
from koordqueue.api import constants as c  # noqa: E402
from koordqueue.api.quantity import parse_quantity  # noqa: E402
from koordqueue.controller.config import ControllerConfig  # noqa: E402
from koordqueue.controller.views import parse_time  # noqa: E402
from koordqueue.jobs import KINDS  # noqa: E402
from koordqueue.kube.client import KubeClient, Resource  # noqa: E402
from koordqueue.kube.config import load_config  # noqa: E402
from koordqueue.kube.informer import Informer  # noqa: E402
from koordqueue.realcluster import kueue as kq  # noqa: E402
from koordqueue.realcluster.cluster import NodeShape, RealCluster, free_port, install_crds  # noqa: E402
from koordqueue.sim.report import percentile  # noqa: E402

FLAVOR = "rf"

JOBS = Resource("batch", "v1", "jobs")
PODS = Resource("", "v1", "pods")
WORKLOADS = Resource(kq.GROUP, "v1beta2", "workloads")
CLUSTER_QUEUES = Resource(kq.GROUP, "v1beta2", "clusterqueues", namespaced=False)
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
QUEUES = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, "queues")
HOLDING = {p.value for p in c.PHASES_HOLDING_QUOTA}

NODES, NODE_CPU = 10, "60"  # 600 CPU: the sum of the nominal quotas
MAX_CPU = parse_quantity("120")  # a leaf's nominal + borrowing limit; a cohort's (parent's) total
NOMINAL_CPU = parse_quantity("20")
PHYSICAL_LIMIT = 66.0  # 39,600 CPU-seconds of work on 600 CPU
CLIENT_QPS, CLIENT_BURST = 5000, 10000  # both controllers' client rate
# Kueue's shipped manager configuration (config/components/manager/controller_manager_config.yaml):
# clientConnection 50/100 and its reconcilers' default workers (kq.DEFAULT_CONCURRENCY).
KUEUE_SHIPPED_QPS, KUEUE_SHIPPED_BURST = 50, 100
OURS_JOB_WORKERS = ControllerConfig.job_workers  # ours reconciles this many Jobs at once (16)
COMPONENT_QPS = 2000  # kube-controller-manager's and kube-scheduler's (the cluster's default 200 throttles pods)
# kube-controller-manager's Job controller syncs 5 Jobs at once by default: with kube-apiserver's
# latency on a loaded machine (~0.2-0.4 s a write) that made Jobs take ~100 s from unsuspended to
# Complete, the same for both systems and far longer than their runtime.
JOB_SYNCS = 50
# kwok moves 4 pods through their stages at once by default: with 200 pods in flight a pod then
# waited ~2 s to start and ~2 s more to finish, holding its job's quota meanwhile.
KWOK_POD_WORKERS = 32
OURS_USER, KUEUE_USER, FLOOR_USER = "koord-queue-controller", "kueue", "koord-queue-floor"
CLASSES = {k.name: k for k in kueue_sim.CLASSES}
# Kueue's CI figures for its baseline (rangespec.yaml's averages of 5 runs) and its limits.
KUEUE_CI = {"wall_s": 351.1, "usage_percent": 58.7, "large": 6.7, "medium": 76.8, "small": 215.5}
KUEUE_RANGE = {"wall_s": 425.0, "usage_percent": 55.0, "large": 11.0, "medium": 90.0, "small": 260.0}


@dataclass(frozen=True)
class QuotaLayout:
    """Quotas both ways: `parents` cohorts (Kueue) / parent ElasticQuotas (ours) of `children`
    leaves each; a leaf has `nominal` CPU and may borrow `borrow` more (Kueue's nominalQuota and
    borrowingLimit; our min and max = nominal + borrow); a parent holds `parent` CPU. A leaf's
    jobs live in the leaf's namespace, or (`namespace_per_parent`) in its parent's."""

    parents: int
    children: int
    nominal: int
    borrow: int
    parent: int
    namespace_per_parent: bool = False

    def leaves(self) -> list[tuple[str, str, str]]:
        """(leaf, parent, namespace) of every leaf."""
        out = []
        for p in range(self.parents):
            for ch in range(self.children):
                leaf = f"leaf-{p}-{ch}"
                out.append((leaf, f"parent-{p}", f"parent-{p}" if self.namespace_per_parent else leaf))
        return out

    def namespaces(self) -> list[str]:
        return sorted({ns for _, _, ns in self.leaves()})


BASELINE = QuotaLayout(kueue_sim.PARENTS, kueue_sim.CHILDREN, nominal=20, borrow=100, parent=120)


def proc_cpu(pid: int) -> float:
    try:
        return harness.cpu_seconds(pid)
    except (FileNotFoundError, ProcessLookupError):
        return math.nan


def proc_peak_rss(pid: int) -> int:
    try:
        return harness.memory(pid)["VmHWM"]
    except (FileNotFoundError, ProcessLookupError, KeyError):
        return 0


def cluster_pids(cluster: RealCluster) -> dict[str, int]:
    """The control plane's processes (not Kueue's, counted as the controller)."""
    return {name: p.popen.pid for name, p in cluster.processes.items()
            if p.popen is not None and name not in kq.PROGRAMS}


def apply_all(cluster: RealCluster, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        cluster.apply(obj)


def wait_until(check: Any, what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(urllib.error.URLError, OSError, KeyError, ValueError):
            found = check()
            if found:
                return found
        time.sleep(0.2)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def audit_counts(cluster: RealCluster, user: str, since: float, until: float) -> dict[str, int]:
    """`user`'s requests received in [since, until] (epoch seconds), by `verb resource[/subresource]`;
    those refused apart, as `verb resource (refused CODE)` (a create of what exists already: 409)."""
    out: dict[str, int] = {}
    seen: set[str] = set()
    with contextlib.suppress(FileNotFoundError), open(cluster.audit_log) as f:
        for line in f:
            entry = json.loads(line)
            if entry.get("user", {}).get("username") != user or entry.get("auditID") in seen:
                continue
            received = dt.datetime.fromisoformat(entry["requestReceivedTimestamp"]).timestamp()
            if not since <= received <= until:
                continue
            seen.add(entry["auditID"])
            ref = entry.get("objectRef") or {}
            resource = ref.get("resource", entry.get("requestURI", "?"))
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            key = f"{entry.get('verb')} {resource}"
            code = (entry.get("responseStatus") or {}).get("code")
            if isinstance(code, int) and code >= 400:
                key += f" (refused {code})"
            out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


# --- the shape -------------------------------------------------------------------------------


@dataclass
class JobRecord:
    name: str
    leaf: str  # its LocalQueue and ClusterQueue, its leaf ElasticQuota
    parent: str  # the leaf's cohort / parent quota
    namespace: str
    kind: kueue_sim.JobClass
    cpu: int  # millicores
    due: float  # seconds after the start when Kueue's generator creates it
    submitted: float | None = None
    released: float | None = None  # first seen unsuspended
    completed: float | None = None  # first seen Complete
    admitted: float | None = None  # the system's own record: first seen holding quota
    holding_since: float | None = None
    held: list[tuple[float, float]] = field(default_factory=list)
    releases: int = 0  # times seen going from suspended to unsuspended (before it ended)
    resumed_ended: int = 0  # times seen unsuspended after it had ended (see World._job)
    suspended: bool = True

    @property
    def admissions(self) -> int:
        """Times the system gave it quota (its own record: a unit holding quota, a Workload's
        QuotaReserved), each holding interval one."""
        return len(self.held) + (self.holding_since is not None)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def plan(divisor: int) -> list[JobRecord]:
    """Kueue's generator's stream: in each queue, each class's i-th job after (i+1) intervals."""
    out = []
    for leaf, parent, namespace in BASELINE.leaves():
        for kind in kueue_sim.CLASSES:
            for i in range(kind.count // divisor):
                out.append(JobRecord(f"{kind.name}-{i}", leaf, parent, namespace, kind, parse_quantity(kind.cpu),
                                     (i + 1) * kind.every))
    return out


def priority_class(kind: kueue_sim.JobClass) -> dict[str, Any]:
    return {"apiVersion": c.SCHEDULING_API_VERSION, "kind": c.PRIORITY_CLASS_KIND,
            "metadata": {"name": f"bench-{kind.name}"}, "value": kind.priority, "preemptionPolicy": "Never",
            "description": f"the {kind.name} class of Kueue's baseline shape"}


def common_objects(shape: QuotaLayout) -> list[dict[str, Any]]:
    return [*(priority_class(k) for k in kueue_sim.CLASSES),
            *({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in shape.namespaces())]


def pod_template(record: JobRecord, container: str) -> dict[str, Any]:
    """The one pod of a job of the stream: its class's CPU, priority and runtime (kwok's)."""
    return {"metadata": {"annotations": {c.ANNOTATION_SIM_DURATION: f"{record.kind.runtime:g}"}},
            "spec": {"restartPolicy": "Never", "priorityClassName": f"bench-{record.kind.name}",
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": container, "image": "busybox",
                                     "resources": {"requests": {"cpu": record.kind.cpu}}}]}}


@dataclass(frozen=True)
class JobType:
    """What the stream is made of: batch Jobs (run by kube-controller-manager's Job
    controller, as in Kueue's perf test) or PyTorchJobs (the Kubeflow training operator)."""
    kind: str  # ours' --job-kinds
    resource: Resource
    kueue_framework: str  # Kueue's integrations.frameworks
    kueue_group_kind: str  # its reconciler's key in Kueue's controller.groupKindConcurrency
    pod_job_label: str  # the label naming a pod's job
    training_operator: bool

    def manifest(self, record: JobRecord, meta: dict[str, Any]) -> dict[str, Any]:
        """One job of the stream, suspended, as the system's admission webhook would leave it."""
        metadata = {"name": record.name, "namespace": record.namespace, **meta}
        if self.kind == c.PYTORCH_JOB_KIND:
            return {"apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.PYTORCH_JOB_KIND, "metadata": metadata,
                    "spec": {"runPolicy": {"suspend": True, "backoffLimit": 0},
                             "pytorchReplicaSpecs": {c.REPLICA_MASTER: {
                                 "replicas": 1, "restartPolicy": "Never",
                                 "template": pod_template(record, c.PYTORCH_CONTAINER)}}}}
        return {"apiVersion": "batch/v1", "kind": c.BATCH_JOB_KIND, "metadata": metadata,
                "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0,
                         "template": pod_template(record, "main")}}

    def state(self, obj: dict[str, Any]) -> tuple[str, bool, bool, bool]:
        """(namespace/name, suspended, finished successfully, ended) of one job; ended: its
        controller has said how (a batch Job's SuccessCriteriaMet or FailureTarget come before
        Complete or Failed)."""
        meta, spec = obj["metadata"], obj.get("spec") or {}
        conditions = (obj.get("status") or {}).get("conditions") or []
        if self.kind == c.PYTORCH_JOB_KIND:
            suspended, done = bool((spec.get("runPolicy") or {}).get("suspend")), c.KUBEFLOW_REASON_SUCCEEDED
        else:
            suspended, done = bool(spec.get("suspend")), "Complete"
        complete = any(cond.get("type") == done and cond.get("status") == "True" for cond in conditions)
        ended = complete or JOB_KINDS[self.kind].status(obj).ended  # (when ours takes it for ended)
        return f"{meta['namespace']}/{meta['name']}", suspended, complete, ended


JOB_KINDS = {k.adapter.kind: k.adapter for k in KINDS}  # the project's own reading of each kind
JOB_TYPES = {t.kind: t for t in (
    JobType(c.BATCH_JOB_KIND, JOBS, "batch/job", "Job.batch", c.LABEL_BATCH_JOB_NAME, training_operator=False),
    JobType(c.PYTORCH_JOB_KIND, Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL), "kubeflow.org/pytorchjob",
            f"{c.PYTORCH_JOB_KIND}.{c.KUBEFLOW_GROUP}", c.LABEL_JOB_NAME, training_operator=True))}


# --- the two systems ---------------------------------------------------------------------------


class Proc(Protocol):
    """A system's controller process: ours (harness.Process) or Kueue's (a process of the cluster)."""

    @property
    def pid(self) -> int: ...
    def alive(self) -> bool: ...
    def stop(self) -> None: ...
    def tail(self, lines: int = 30) -> str: ...


class System:
    name = ""
    user = ""
    holders: Resource

    def __init__(self, base: Path, shape: QuotaLayout = BASELINE, job_type: JobType | None = None) -> None:
        self.base = base
        self.shape = shape
        self.job_type = job_type or JOB_TYPES[c.BATCH_JOB_KIND]
        self.process: Proc | None = None

    def install(self, cluster: RealCluster) -> None: ...
    def set_capacity(self, cluster: RealCluster, nominal: int, borrow: int, parent: int) -> None:
        """Change every leaf's (and parent's) quota in place."""
        raise NotImplementedError

    def start(self, cluster: RealCluster) -> Proc: ...
    async def wait_ready(self, cluster: RealCluster, client: KubeClient, timeout: float) -> None: ...
    def job_meta(self, record: JobRecord) -> dict[str, Any]: ...
    def holder(self, obj: dict[str, Any]) -> tuple[str, bool]:
        """(the job's namespace/name, holding quota now) of one of the system's records."""
        raise NotImplementedError

    async def cycle_figures(self) -> dict[str, float]:
        return {}

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


class Ours(System):
    name, user, holders = "ours", OURS_USER, UNITS
    # Kueue's baseline perf-test settings (withinClusterQueue: LowerPriority, reclaimWithinCohort: Any):
    # ours preempts lower priority within a quota, and reclaims a parent's lent quota (always on),
    # with no protection time; `--no-preempt-within-quota` / `--protect-seconds` for the shipped ones.
    preempt_within_quota = True
    protect_seconds: float | None = 0.0  # the controller's own default (60) when None
    source: str | None = None  # --ours-src: the controller's code from this src directory (an A/B)

    def install(self, cluster: RealCluster) -> None:
        install_crds(cluster)
        shape, objects = self.shape, []
        for p in range(shape.parents):
            objects.append(quota(f"parent-{p}", c.SYSTEM_NAMESPACE, shape.parent, shape.parent,
                                 {c.LABEL_QUOTA_IS_PARENT: c.TRUE}))
        for leaf, parent, namespace in shape.leaves():
            objects.append(quota(leaf, namespace, shape.nominal, shape.nominal + shape.borrow,
                                 {c.LABEL_QUOTA_PARENT: parent}))
        apply_all(cluster, objects)

    def set_capacity(self, cluster: RealCluster, nominal: int, borrow: int, parent: int) -> None:
        path = f"/apis/{c.QUOTA_API_VERSION}/namespaces/{{}}/{c.ELASTIC_QUOTA_PLURAL}/{{}}"
        for p in range(self.shape.parents):
            cluster.request("PATCH", path.format(c.SYSTEM_NAMESPACE, f"parent-{p}"),
                            {"spec": {"min": {c.CPU: str(parent)}, "max": {c.CPU: str(parent)}}},
                            content_type="application/merge-patch+json")
        for leaf, _, namespace in self.shape.leaves():
            cluster.request("PATCH", path.format(namespace, leaf),
                            {"spec": {"min": {c.CPU: str(nominal)}, "max": {c.CPU: str(nominal + borrow)}}},
                            content_type="application/merge-patch+json")

    def start(self, cluster: RealCluster) -> Proc:
        kubeconfig = cluster.kubeconfig_for(self.user, ("system:masters",))
        self.metrics_port = free_port()
        self.process = harness.Process(
            [sys.executable, "-m", "koordqueue.cli", "controller", "--kubeconfig", str(kubeconfig),
             "--no-leader-elect", "--metrics-port", str(self.metrics_port), "--job-kinds", self.job_type.kind,
             "--log-level", "warning", "--qps", str(CLIENT_QPS), "--burst", str(CLIENT_BURST),
             *(["--protect-seconds", str(self.protect_seconds)] if self.protect_seconds is not None else [])],
            self.base / "koord-queue.log",
            env={**os.environ, "PYTHONPATH": self.source} if self.source else None)
        self.process.start()
        return self.process

    async def wait_ready(self, cluster: RealCluster, client: KubeClient, timeout: float) -> None:
        def ready() -> bool:
            assert self.process is not None
            if not self.process.alive():
                raise SystemExit(f"our controller exited:\n{self.process.tail()}")
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=2) as r:
                return r.status == 200 and "leading" in r.read().decode()

        await asyncio.to_thread(wait_until, ready, "our controller's /readyz", timeout)
        leaves = len(self.shape.leaves())
        deadline = time.monotonic() + timeout
        while len((await client.list(QUEUES, namespace=c.SYSTEM_NAMESPACE)).items) < leaves:
            if time.monotonic() > deadline:
                raise SystemExit("our controller did not make the quotas' Queues")
            await asyncio.sleep(0.2)
        if self.preempt_within_quota:
            for queue in (await client.list(QUEUES, namespace=c.SYSTEM_NAMESPACE)).items:
                await client.patch(QUEUES, queue["metadata"]["name"], {"metadata": {"annotations": {
                    c.ANNOTATION_ENABLE_PREEMPTION: c.TRUE}}}, namespace=c.SYSTEM_NAMESPACE)

    def job_meta(self, record: JobRecord) -> dict[str, Any]:
        return {"annotations": {c.ANNOTATION_QUEUE: record.leaf, c.ANNOTATION_SUSPEND: c.TRUE}}

    def holder(self, obj: dict[str, Any]) -> tuple[str, bool]:
        ref = (obj.get("spec") or {}).get("consumerRef") or {}
        phase = (obj.get("status") or {}).get("phase") or ""
        return f"{obj['metadata']['namespace']}/{ref.get('name', '')}", phase in HOLDING

    async def cycle_figures(self) -> dict[str, float]:
        import aiohttp

        async with aiohttp.ClientSession() as session, \
                session.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as response:
            text = await response.text()
        cycles = histogram(text, "koord_queue_scheduling_cycle_seconds")
        return {"cycles": cycles.count, "cycle_p50_ms": 1000 * cycles.quantile(0.5),
                "cycle_p99_ms": 1000 * cycles.quantile(0.99)}


def quota(name: str, namespace: str, min_cpu: int, max_cpu: int, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"min": {c.CPU: str(min_cpu)}, "max": {c.CPU: str(max_cpu)}}}


class Kueue(System):
    """Kueue tuned as a user who reads its Configuration reference would: its job reconciler's
    workers (`controller.groupKindConcurrency`) equal to ours' job workers, its client rate
    (`clientConnection.qps`/`burst`) equal to ours."""
    name, user, holders = "kueue", KUEUE_USER, WORKLOADS
    qps, burst = CLIENT_QPS, CLIENT_BURST
    manager: kq.Kueue | None = None

    @property
    def concurrency(self) -> dict[str, int]:
        """Over its default configuration's workers per kind: the reconciler of the stream's kind."""
        return {self.job_type.kueue_group_kind: OURS_JOB_WORKERS}

    async def cycle_figures(self) -> dict[str, float]:
        """Its admission attempts (one per scheduling cycle), from its metrics endpoint."""
        manager = self.manager
        assert manager is not None

        def scrape() -> str:
            request = urllib.request.Request(f"https://127.0.0.1:{manager.metrics_port}/metrics",
                                             headers={"Authorization": f"Bearer {manager.metrics_token}"})
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # its own self-signed one
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                return str(response.read().decode())

        cycles = histogram(await asyncio.to_thread(scrape), "kueue_admission_attempt_duration_seconds")
        return {"cycles": cycles.count, "cycle_p50_ms": 1000 * cycles.quantile(0.5),
                "cycle_p99_ms": 1000 * cycles.quantile(0.99)}

    def install(self, cluster: RealCluster) -> None:
        kq.install_crds(cluster)
        apply_all(cluster, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kq.NAMESPACE}},
                            *kueue_queues(self.shape)])

    def set_capacity(self, cluster: RealCluster, nominal: int, borrow: int, parent: int) -> None:
        """`parent` is what the cohort's leaves' nominal quotas add up to: nothing to write."""
        for leaf, _, _ in self.shape.leaves():
            cluster.request("PATCH", f"/apis/{kq.API}/clusterqueues/{leaf}", [
                {"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0", "value": {
                    "name": "cpu", "nominalQuota": str(nominal), "borrowingLimit": str(borrow)}}],
                content_type="application/json-patch+json")

    def start(self, cluster: RealCluster) -> Proc:
        if self.manager is None:
            self.manager = kq.start(cluster, self.user, qps=self.qps, burst=self.burst,
                                    concurrency=self.concurrency, frameworks=(self.job_type.kueue_framework,))
        else:  # a restart: the same configuration
            self.manager.process.start()
        self.process = self.manager.process
        return self.process

    async def wait_ready(self, cluster: RealCluster, client: KubeClient, timeout: float) -> None:
        manager = self.manager
        assert manager is not None
        await asyncio.to_thread(wait_until, manager.ready, "Kueue's /readyz", timeout)
        deadline = time.monotonic() + timeout
        while True:
            queues = (await client.list(CLUSTER_QUEUES)).items
            active = [q for q in queues if any(cond.get("type") == "Active" and cond.get("status") == "True"
                                               for cond in (q.get("status") or {}).get("conditions") or [])]
            if len(active) == len(self.shape.leaves()):
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(active)} of Kueue's ClusterQueues became Active")
            await asyncio.sleep(0.2)

    def job_meta(self, record: JobRecord) -> dict[str, Any]:
        return {"labels": {kq.QUEUE_LABEL: record.leaf}}

    def holder(self, obj: dict[str, Any]) -> tuple[str, bool]:
        owners = obj["metadata"].get("ownerReferences") or [{}]
        conditions = {cond.get("type"): cond.get("status") for cond in (obj.get("status") or {}).get("conditions") or []}
        holding = conditions.get("QuotaReserved") == "True" and conditions.get("Finished") != "True"
        return f"{obj['metadata']['namespace']}/{owners[0].get('name', '')}", holding


class KueueDefault(Kueue):
    """Kueue at its shipped defaults: 5 workers per reconciler, client rate 50/100."""
    name = "kueue_default"
    qps, burst = KUEUE_SHIPPED_QPS, KUEUE_SHIPPED_BURST

    @property
    def concurrency(self) -> dict[str, int]:
        return {}


class Floor(System):
    """bench/floor.py: a per-quota counter, FIFO, resuming Jobs as their quota has room (batch
    Jobs only). It holds a Job's quota from its resume until it completes: its record is the Job."""
    name, user, holders = "floor", FLOOR_USER, JOBS

    def start(self, cluster: RealCluster) -> Proc:
        if self.job_type.kind != c.BATCH_JOB_KIND:
            raise SystemExit("the floor runs batch Jobs only")
        kubeconfig = cluster.kubeconfig_for(self.user, ("system:masters",))
        self.log = self.base / "floor.log"
        self.process = harness.Process(
            [sys.executable, str(Path(floor.__file__)), "--kubeconfig", str(kubeconfig),
             "--qps", str(CLIENT_QPS), "--burst", str(CLIENT_BURST),
             "--leaf-cpu", str(self.shape.nominal + self.shape.borrow), "--parent-cpu", str(self.shape.parent)],
            self.log)
        self.process.start()
        return self.process

    async def wait_ready(self, cluster: RealCluster, client: KubeClient, timeout: float) -> None:
        def ready() -> bool:
            assert self.process is not None
            if not self.process.alive():
                raise SystemExit(f"the floor exited:\n{self.process.tail()}")
            return self.log.exists() and floor.READY in self.log.read_text()

        await asyncio.to_thread(wait_until, ready, "the floor's ready line", timeout)

    def job_meta(self, record: JobRecord) -> dict[str, Any]:
        return {"annotations": {floor.QUOTA: record.leaf, floor.PARENT: record.parent}}

    def holder(self, obj: dict[str, Any]) -> tuple[str, bool]:
        job = floor.project(obj)
        if job is None:
            return "", False
        return job.key, not job.suspended and not job.finished


SYSTEMS: dict[str, type[System]] = {s.name: s for s in (Ours, Kueue, KueueDefault, Floor)}


def kueue_queues(shape: QuotaLayout) -> list[dict[str, Any]]:
    """What Kueue's generator makes for the baseline (generateQueue), under our leaf names."""
    out: list[dict[str, Any]] = [{"apiVersion": kq.API, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
                                  "spec": {}}]
    for leaf, parent, namespace in shape.leaves():
        out.append({"apiVersion": kq.API, "kind": "ClusterQueue", "metadata": {"name": leaf}, "spec": {
            "cohortName": parent,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": FLAVOR, "resources": [
                {"name": "cpu", "nominalQuota": str(shape.nominal), "borrowingLimit": str(shape.borrow)}]}]}],
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        }})
        out.append({"apiVersion": kq.API, "kind": "LocalQueue", "metadata": {"name": leaf, "namespace": namespace},
                    "spec": {"clusterQueue": leaf}})
    return out


def histogram(text: str, name: str) -> harness.Histogram:
    """A Prometheus histogram summed over its label sets (buckets by `le`)."""
    buckets: dict[float, float] = {}
    for labels, value in harness.samples(text, f"{name}_bucket"):
        le = float(labels["le"])
        buckets[le] = buckets.get(le, 0.0) + value
    return harness.Histogram(sorted(buckets.items()), harness.counter_total(text, f"{name}_count"),
                             harness.counter_total(text, f"{name}_sum"))



# --- the world: generator and observers ------------------------------------------------------


class World:
    def __init__(self, client: KubeClient, records: list[JobRecord], system: System) -> None:
        self.client = client
        self.system = system
        self.records = {r.key: r for r in records}
        self.used: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.over_quota = 0
        self.violations: list[str] = []
        self.completed = 0
        self.done = asyncio.Event()
        self.start = 0.0
        self.start_epoch = 0.0
        self.lateness: list[float] = []
        self.create_errors: list[str] = []
        self.jobs = Informer(client, system.job_type.resource, project=system.job_type.state)
        self.holders = Informer(client, system.holders, project=system.holder)
        self.jobs.on_add(self._job)
        self.jobs.on_update(lambda _old, new: self._job(new))
        self.holders.on_add(self._holder)
        self.holders.on_update(lambda _old, new: self._holder(new))

    async def watch(self) -> None:
        for informer in (self.jobs, self.holders):
            informer.start()
            await informer.wait_synced()

    async def stop(self) -> None:
        await asyncio.gather(self.jobs.stop(), self.holders.stop())

    async def generate(self) -> None:
        streams: dict[tuple[str, str], list[JobRecord]] = {}
        for record in self.records.values():
            streams.setdefault((record.leaf, record.kind.name), []).append(record)
        self.start = time.monotonic()
        self.start_epoch = time.time()
        await asyncio.gather(*(self._stream(s) for s in streams.values()))

    async def _stream(self, records: list[JobRecord]) -> None:
        for record in sorted(records, key=lambda r: r.due):
            delay = self.start + record.due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            record.submitted = time.monotonic()
            self.lateness.append(record.submitted - self.start - record.due)
            try:
                await self.client.create(self.system.job_type.resource,
                                         self.system.job_type.manifest(record, self.system.job_meta(record)),
                                         namespace=record.namespace)
            except Exception as e:  # noqa: BLE001 - counted and shown: a job never made is unfinished
                self.create_errors.append(f"{record.key}: {e}")

    def _job(self, job: tuple[str, bool, bool, bool]) -> None:
        key, suspended, complete, ended = job
        record = self.records.get(key)
        if record is None:
            return
        now = time.monotonic()
        if record.suspended and not suspended and ended:
            record.resumed_ended += 1  # suspended after its pod had succeeded: resumed to be marked Complete
        elif record.suspended and not suspended:
            record.releases += 1
            if record.released is None:
                record.released = now
        record.suspended = suspended
        if complete and record.completed is None:
            record.completed = now
            self.completed += 1
            if self.completed == len(self.records):
                self.done.set()

    def _holder(self, holder: tuple[str, bool]) -> None:
        key, holding = holder
        record = self.records.get(key)
        if record is None:
            return
        now = time.monotonic()
        if holding and record.holding_since is None:
            record.holding_since = now
            if record.admitted is None:
                record.admitted = now
            for name in (record.leaf, record.parent):
                used = self.used[name] = self.used.get(name, 0) + record.cpu
                self.peak[name] = max(self.peak.get(name, 0), used)
                if used > MAX_CPU:
                    self.over_quota += 1
                    self.violations.append(f"{name} held {used / 1000:g} CPU, over 120")
        elif not holding and record.holding_since is not None:
            record.held.append((record.holding_since, now))
            record.holding_since = None
            for name in (record.leaf, record.parent):
                self.used[name] -= record.cpu

    def holding(self) -> int:
        return sum(1 for r in self.records.values() if r.holding_since is not None)



# --- one like-for-like run ---------------------------------------------------------------------


def state_dir(base: Path, label: str) -> Path:
    path = base / label
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


async def like_for_like(system_class: type[System], args: argparse.Namespace, base: Path, label: str) -> dict[str, Any]:
    here = state_dir(base, label)
    system = system_class(here, job_type=JOB_TYPES[args.kind])
    if isinstance(system, Ours):
        system.preempt_within_quota = args.preempt_within_quota
        system.protect_seconds = None if args.protect_seconds < 0 else args.protect_seconds
        system.source = getattr(args, "ours_src", None)
    records = plan(args.divisor)
    # --trace: every user's requests in the audit log, with the bodies of pod creates and of pod and
    # Job writes, and the Job controller's syncs in kube-controller-manager's log (bench/hold_timeline.py).
    trace = bool(getattr(args, "trace", False))
    cluster = RealCluster(here / "cluster", NodeShape(count=NODES, gpus=0, cpu=NODE_CPU, memory="1Ti", prefix="node"),
                          training_operator=system.job_type.training_operator,
                          audit_users=() if trace else (system.user,), audit_pods=trace, audit_jobs=trace,
                          component_qps=args.component_qps,
                          controller_manager_flags=(f"--concurrent-job-syncs={args.job_syncs}",
                                                    *(("--vmodule=job_controller=4",) if trace else ())),
                          pod_workers=args.kwok_workers)
    load_before = harness.load_average()
    await asyncio.to_thread(cluster.start)
    try:
        await asyncio.to_thread(apply_all, cluster, common_objects(system.shape))
        await asyncio.to_thread(system.install, cluster)
        started = time.monotonic()
        process = system.start(cluster)
        client = KubeClient(load_config(str(cluster.kubeconfig_path)), qps=CLIENT_QPS, burst=CLIENT_BURST,
                            user_agent="versus-kueue-bench")
        async with client:
            await system.wait_ready(cluster, client, timeout=180)
            ready_s = time.monotonic() - started
            world = World(client, records, system)
            await world.watch()
            pids = {"controller": process.pid, **cluster_pids(cluster)}
            cpu_before = {name: proc_cpu(pid) for name, pid in pids.items()}
            generating = asyncio.create_task(world.generate())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(world.done.wait(), args.timeout)
            # The last releases of quota follow the last completions.
            drain = time.monotonic() + 30
            while world.holding() and time.monotonic() < drain:
                await asyncio.sleep(0.1)
            end, end_epoch = time.monotonic(), time.time()
            cpu_after = {name: proc_cpu(pid) for name, pid in pids.items()}
            peak_rss = proc_peak_rss(process.pid)
            cycles = await system.cycle_figures()
            if not generating.done():
                generating.cancel()
            await world.stop()
            pod_hops = await pods_hops(client, world, here / "pods.json" if args.keep else None)
    finally:
        system.stop()
        await asyncio.to_thread(cluster.stop)
    requests = await asyncio.to_thread(audit_counts, cluster, system.user, world.start_epoch, end_epoch)
    out = figures(world, end, args.divisor)
    out["pod_hops_mean_s"] = pod_hops
    admitted = out["admitted"] or 1
    cpu = {name: cpu_after[name] - cpu_before[name] for name in pids}
    out.update({
        "system": system.name,
        "job_kind": system.job_type.kind,
        "ready_s": ready_s,
        "requests": sum(requests.values()),
        "requests_per_job": sum(requests.values()) / admitted,
        "requests_by_kind": requests,
        "controller_cpu_s": cpu["controller"],
        "controller_cpu_ms_per_job": 1000 * cpu["controller"] / admitted,
        "apiserver_cpu_s": cpu.get("kube-apiserver", math.nan),
        "etcd_cpu_s": cpu.get("etcd", math.nan),
        "shared_cpu_s": {k: v for k, v in cpu.items() if k not in ("controller", "kube-apiserver", "etcd")},
        "controller_peak_rss": peak_rss,
        **cycles,
        "load_average_before": load_before,
        "load_average_after": harness.load_average(),
    })
    if not args.keep:
        shutil.rmtree(here, ignore_errors=True)
    return out


async def pods_hops(client: KubeClient, world: World, keep: Path | None = None) -> dict[str, dict[str, float]]:
    """Where a job's time between its resume and its Complete went, by its pod's own timestamps
    (whole seconds: means good to some 0.5 s), for all jobs ("all") and by class: resumed -> pod
    created (the Job controller), created -> scheduled (kube-scheduler), scheduled -> started and
    started -> finished (kwok), finished -> Complete seen (the Job controller)."""
    to_epoch = world.start_epoch - world.start  # monotonic -> epoch
    hops: dict[str, dict[str, list[float]]] = {}
    pods = await client.list_all(PODS)
    job_label = world.system.job_type.pod_job_label
    if keep is not None:
        keep.write_bytes(json.dumps(pods.items).encode())
    for pod in pods.items:
        meta, status = pod["metadata"], pod.get("status") or {}
        record = world.records.get(f"{meta.get('namespace')}/{(meta.get('labels') or {}).get(job_label, '')}")
        if record is None or record.released is None or record.completed is None or record.admissions != 1:
            continue  # (preempted and run again: its first pod is gone)
        scheduled = next((parse_time(cond.get("lastTransitionTime")) for cond in status.get("conditions") or ()
                          if cond.get("type") == "PodScheduled" and cond.get("status") == "True"), 0.0)
        ended = next((cs["state"]["terminated"] for cs in status.get("containerStatuses") or ()
                      if (cs.get("state") or {}).get("terminated")), {})
        created, finished = parse_time(meta.get("creationTimestamp")), parse_time(ended.get("finishedAt"))
        if not (created and scheduled and finished):
            continue
        started = parse_time(ended.get("startedAt")) or scheduled
        steps = {"resumed -> pod created": created - (record.released + to_epoch),
                 "created -> scheduled": scheduled - created, "scheduled -> started": started - scheduled,
                 "started -> finished": finished - started,
                 "finished -> Complete seen": record.completed + to_epoch - finished}
        for group in ("all", record.kind.name):
            for step, seconds in steps.items():
                hops.setdefault(group, {}).setdefault(step, []).append(seconds)
    return {group: {step: _mean(values) for step, values in by_step.items()} for group, by_step in hops.items()}


def figures(world: World, end: float, divisor: int) -> dict[str, Any]:
    records = list(world.records.values())
    start = world.start
    for record in records:  # still holding at the end: count it held until then
        if record.holding_since is not None:
            record.held.append((record.holding_since, end))
            record.holding_since = None
    last_release = max((b for r in records for _, b in r.held), default=end)
    elapsed = max(last_release - start, 1e-9)
    area = sum(r.cpu * (b - a) for r in records for a, b in r.held)
    nominal = NOMINAL_CPU * len(BASELINE.leaves())

    def waits(kind: str, attr: str) -> list[float]:
        return [getattr(r, attr) - r.submitted for r in records
                if r.kind.name == kind and getattr(r, attr) is not None and r.submitted is not None]

    mean = {k: _mean(waits(k, "released")) for k in CLASSES}
    p90 = {k: percentile(waits(k, "released"), 0.9) if waits(k, "released") else math.nan for k in CLASSES}
    own = {k: _mean(waits(k, "admitted")) for k in CLASSES}
    completed = [r.completed for r in records if r.completed is not None]

    def hop(a: str, b: str) -> float:
        return _mean([getattr(r, b) - getattr(r, a) for r in records
                      if getattr(r, a) is not None and getattr(r, b) is not None])

    released_quota = [(r, r.held[-1][1]) for r in records if r.held and r.completed is not None]
    hops = {"created -> admitted (own)": hop("submitted", "admitted"),
            "admitted -> unsuspended": hop("admitted", "released"),
            "unsuspended -> Complete": hop("released", "completed"),
            "Complete -> quota released": _mean([end - r.completed for r, end in released_quota
                                                 if r.completed is not None])}
    return {
        "hops_mean_s": hops,
        "jobs": len(records),
        "divisor": divisor,
        "wall_s": (max(completed) - start) if completed else math.nan,
        "physical_limit_s": PHYSICAL_LIMIT / divisor,
        "mean_admission_s": mean,
        "p90_admission_s": p90,
        "mean_own_admission_s": own,
        "usage_percent": 100 * area / (nominal * elapsed),
        "admitted": sum(1 for r in records if r.admitted is not None),
        "released": sum(1 for r in records if r.released is not None),
        "unfinished": len(records) - len(completed),
        "over_quota": world.over_quota,
        "violations": world.violations[:5],
        **release_counts(records),
        "peak_used_cpu": {q: v / 1000 for q, v in sorted(world.peak.items()) if q.startswith("parent")},
        "generator_late_p99_s": percentile(world.lateness, 0.99) if world.lateness else 0.0,
        "create_errors": world.create_errors[:5],
    }


def release_counts(records: list[JobRecord]) -> dict[str, int]:
    """Jobs let run more than once, told apart by the system's own record of quota: a job
    preempted (its quota taken back to reclaim a cohort's or for a higher priority) and
    admitted again is released once per admission, as it should be; a job released more times
    than it was admitted was suspended and resumed again while it held its quota: a defect."""
    return {
        "readmitted": sum(1 for r in records if r.admissions > 1),
        "released_again_when_readmitted": sum(1 for r in records if 1 < r.releases <= r.admissions),
        "released_twice_in_one_admission": sum(1 for r in records if r.releases > max(r.admissions, 1)),
        "resumed_after_it_ended": sum(1 for r in records if r.resumed_ended),
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


# --- Kueue's own performance test --------------------------------------------------------------


async def kueue_perf(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    here = state_dir(base, "kueue-perf")
    binaries = kq.binaries()
    cluster = RealCluster(here / "cluster", NodeShape(count=1, gpus=0, cpu="1", prefix="idle"),
                          training_operator=False, audit_users=(KUEUE_USER,))
    load_before = harness.load_average()
    await asyncio.to_thread(cluster.start)
    out_dir = here / "artifacts"
    out_dir.mkdir()
    generator = kq.source() / "test" / "performance" / "scheduler" / "configs" / "baseline" / "generator.yaml"
    config = generator
    if args.divisor > 1:  # fewer workloads per set, the same pacing
        shape = yaml.safe_load(generator.read_text())
        for cohort in shape["cohorts"]:
            for queues in cohort["queuesSets"]:
                for workloads in queues["workloadsSets"]:
                    workloads["count"] //= args.divisor
        config = here / "generator.yaml"
        config.write_text(yaml.safe_dump(shape))
    runner: harness.Process | None = None
    try:
        await asyncio.to_thread(kq.install_crds, cluster)
        runner_config = cluster.kubeconfig_for("kueue-perf-runner", ("system:masters",))
        minimal = kq.start_minimal(cluster, KUEUE_USER)
        pids = {"controller": minimal.pid, **cluster_pids(cluster)}
        cpu_before = {name: proc_cpu(pid) for name, pid in pids.items()}
        started, started_epoch = time.monotonic(), time.time()
        os.environ["KUBECONFIG"] = str(runner_config)
        try:
            # The Makefile's run-performance-scheduler-in-cluster arguments.
            runner = harness.Process([str(binaries["kueue-perf-runner"]), "--o", str(out_dir),
                                      f"--generatorConfig={config}", "--qps=1000", "--burst=2000",
                                      f"--timeout={int(args.timeout)}s"], here / "runner.log")
            runner.start()
        finally:
            del os.environ["KUBECONFIG"]
        summary = out_dir / "summary.yaml"
        while not summary.exists():
            if not runner.alive():
                raise SystemExit(f"Kueue's runner exited without a summary:\n{runner.tail()}")
            if not minimal.alive():
                raise SystemExit(f"minimalkueue exited:\n{minimal.tail()}")
            await asyncio.sleep(0.2)
        wall = time.monotonic() - started
        end_epoch = time.time()
        cpu_after = {name: proc_cpu(pid) for name, pid in pids.items()}
        peak_rss = proc_peak_rss(minimal.pid)
        await asyncio.sleep(0.5)  # the summary is written in one go; let the file close
        data = yaml.safe_load(summary.read_text())
    finally:
        if runner is not None:
            runner.stop()
        await asyncio.to_thread(cluster.stop)  # minimalkueue with it
    requests = await asyncio.to_thread(audit_counts, cluster, KUEUE_USER, started_epoch, end_epoch)
    cq = data["clusterQueueClasses"]["cq"]
    classes = data["workloadClasses"]
    jobs = sum(v["count"] for v in classes.values())
    out = {
        "wall_s": wall,
        "usage_percent": 100 * cq["cpuAverageUsage"] / cq["nominalQuota"] if cq["nominalQuota"] else math.nan,
        "mean_admission_s": {k: v["averageTimeToAdmissionMs"] / 1000 for k, v in classes.items()},
        "evictions": sum(v["totalEvictions"] for v in classes.values()),
        "workloads": jobs,
        "dropped_events": data.get("droppedWorkloadEvents", 0),
        "requests": sum(requests.values()),
        "requests_per_job": sum(requests.values()) / max(jobs, 1),
        "requests_by_kind": requests,
        "controller_cpu_s": cpu_after["controller"] - cpu_before["controller"],
        "apiserver_cpu_s": cpu_after["kube-apiserver"] - cpu_before["kube-apiserver"],
        "etcd_cpu_s": cpu_after["etcd"] - cpu_before["etcd"],
        "controller_peak_rss": peak_rss,
        "divisor": args.divisor,
        "load_average_before": load_before,
        "load_average_after": harness.load_average(),
    }
    if args.divisor == 1:
        out["within_rangespec"] = {
            "wall": out["wall_s"] <= KUEUE_RANGE["wall_s"],
            "usage": out["usage_percent"] >= KUEUE_RANGE["usage_percent"],
            **{k: out["mean_admission_s"].get(k, math.inf) <= KUEUE_RANGE[k] for k in CLASSES},
        }
    if not args.keep:
        shutil.rmtree(here, ignore_errors=True)
    return out


# --- the whole command -------------------------------------------------------------------------


def mean_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of one system averaged (numbers, and numbers by class); counts summed where they are defects."""
    out: dict[str, Any] = {"runs": len(runs)}
    for key, value in runs[0].items():
        if isinstance(value, bool) or key in ("divisor", "jobs", "pair"):
            out[key] = value
        elif isinstance(value, int | float):
            out[key] = _mean([float(r[key]) for r in runs])
        elif isinstance(value, dict) and value and all(isinstance(v, int | float) for v in value.values()) \
                and key not in ("requests_by_kind", "peak_used_cpu", "shared_cpu_s", "hops_mean_s"):
            out[key] = {k: _mean([float(r[key][k]) for r in runs]) for k in value}
        else:
            out[key] = value
    out["spread"] = {label: spread([dig(r, *path) for r in runs]) for label, path in HEADLINE}
    for key in ("admitted", "unfinished", "over_quota", "readmitted", "released_again_when_readmitted",
                "released_twice_in_one_admission", "resumed_after_it_ended"):
        out[key] = sum(int(r[key]) for r in runs) if key != "admitted" else min(int(r[key]) for r in runs)
    return out


# What the headline compares, each ratio computed within a pair (the runs of one round).
HEADLINE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("wall", ("wall_s",)),
    ("large: mean to admission", ("mean_admission_s", "large")),
    ("medium: mean to admission", ("mean_admission_s", "medium")),
    ("small: mean to admission", ("mean_admission_s", "small")),
    ("quota usage", ("usage_percent",)),
    ("API requests per admitted job", ("requests_per_job",)),
    ("controller CPU per admitted job", ("controller_cpu_ms_per_job",)),
    ("controller peak RSS", ("controller_peak_rss",)),
)
RATIOS = (("ours", "kueue"), ("ours", "kueue_default"), ("ours", "floor"), ("kueue", "floor"),
          ("kueue_default", "floor"))


def spread(values: list[float]) -> dict[str, float]:
    """Mean, min and max of figures across pairs (NaN left out)."""
    found = [v for v in values if isinstance(v, int | float) and not math.isnan(v)]
    if not found:
        return {"mean": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {"mean": _mean(found), "min": min(found), "max": max(found), "n": len(found)}


def pair_ratios(pairs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each headline figure's ratios a/b, one per pair (a and b run in the same round), with their
    mean and spread: never a ratio of means."""
    out: dict[str, dict[str, Any]] = {}
    for label, path in HEADLINE:
        by_ratio: dict[str, Any] = {}
        for a, b in RATIOS:
            values = []
            for pair in pairs:
                if a in pair and b in pair:
                    x, y = dig(pair[a], *path), dig(pair[b], *path)
                    ok = isinstance(x, int | float) and isinstance(y, int | float) and y
                    values.append(x / y if ok else math.nan)
            if values:
                by_ratio[f"{a}/{b}"] = {**spread(values), "pairs": values}
        out[label] = by_ratio
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"load_average_start": harness.load_average()}
    names = [n for n in args.systems.split(",") if args.only in (None, n)]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"no system {unknown[0]}; the systems are {', '.join(SYSTEMS)}")
    with tempfile.TemporaryDirectory(prefix="versus-kueue-") as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        if not args.no_perf:
            result["kueue_perf"] = await kueue_perf(args, base)
        runs: list[dict[str, Any]] = []
        pairs: list[dict[str, dict[str, Any]]] = []
        total = args.rounds * len(names)
        for i in range(args.rounds):
            pair: dict[str, dict[str, Any]] = {}
            for name in names if i % 2 == 0 else names[::-1]:  # A/B alternating which goes first
                r = await like_for_like(SYSTEMS[name], args, base, f"{len(runs)}-{name}")
                r["pair"] = i
                runs.append(pair.setdefault(name, r))
                print(f"run {len(runs)}/{total}: {name} wall {fmt(r['wall_s'], ' s')}, "
                      f"load {r['load_average_after']}", file=sys.stderr, flush=True)
            pairs.append(pair)
        for name in names:
            mine = [r for r in runs if r["system"] == name]
            if mine:
                result[name] = mean_run(mine)
        result["ratios"] = pair_ratios(pairs)
        result["runs"] = runs
    result["load_average_end"] = harness.load_average()
    return result


def render(result: dict[str, Any]) -> str:
    lines: list[str] = []
    perf = result.get("kueue_perf")
    if perf:
        scale = f" (1/{perf['divisor']} of the workloads)" if perf["divisor"] > 1 else ""
        lines += [f"Kueue's own scheduler performance test{scale} (runner + minimalkueue, baseline config) "
                  f"on this control plane; its CI's averages beside it:",
                  f"  {'':<30}{'here':>12}{'Kueue CI':>12}{'limit':>10}"]
        rows = [("wall", perf["wall_s"], KUEUE_CI["wall_s"], f"<= {KUEUE_RANGE['wall_s']:.0f}", " s"),
                ("quota usage", perf["usage_percent"], KUEUE_CI["usage_percent"],
                 f">= {KUEUE_RANGE['usage_percent']:.0f}", " %")]
        rows += [(f"{k}: mean to admission", perf["mean_admission_s"].get(k), KUEUE_CI[k], f"<= {KUEUE_RANGE[k]:.0f}",
                  " s") for k in ("large", "medium", "small")]
        for label, here, ci, limit, unit in rows:
            lines.append(f"  {label:<30}{fmt(here, unit):>12}{fmt(ci, unit):>12}{limit:>10}")
        lines.append(f"  minimalkueue CPU {fmt(perf['controller_cpu_s'], ' s')}, peak RSS "
                     f"{mib(perf['controller_peak_rss'])}; kube-apiserver CPU {fmt(perf['apiserver_cpu_s'], ' s')}, "
                     f"etcd {fmt(perf['etcd_cpu_s'], ' s')}; {perf['requests_per_job']:.1f} requests per workload; "
                     f"evictions {perf['evictions']}; load {perf['load_average_before']} -> "
                     f"{perf['load_average_after']}")
        lines.append("")
    shown = [n for n in SYSTEMS if result.get(n)]
    if not shown:
        return "\n".join(lines)
    any_ = result[shown[0]]
    scale = f", 1/{any_['divisor']} of the jobs" if any_["divisor"] > 1 else ""
    jobs = "batch Jobs" if any_["job_kind"] == c.BATCH_JOB_KIND else f"{any_['job_kind']}s"
    heads = {"ours": "ours", "kueue": "Kueue tuned", "kueue_default": "Kueue dflt", "floor": "floor"}
    lines += [f"Like for like: {any_['jobs']} {jobs} at Kueue's pacing, real pods on 10 kwok nodes "
              f"(600 CPU){scale}; both preempting as Kueue's baseline; mean of {any_['runs']} pair(s), "
              f"each system's order alternating; [min-max] across pairs",
              f"  {'':<34}" + "".join(f"{heads[n]:>20}" for n in shown)]

    def row(label: str, *path: str, unit: str = "", digits: int = 1, scale_by: float = 1.0) -> None:
        cells = []
        for n in shown:
            value = dig(result[n], *path)
            cell = fmt(value / scale_by if isinstance(value, int | float) else value, unit, digits)
            figure = next((lb for lb, p in HEADLINE if p == path), None)
            sp = dig(result[n], "spread", figure) if figure else None
            if sp and sp["n"] > 1:
                cell += f" [{fmt(sp['min'] / scale_by, '', digits)}-{fmt(sp['max'] / scale_by, '', digits)}]"
            cells.append(f"{cell:>20}")
        lines.append(f"  {label:<34}" + "".join(cells))

    row("wall", "wall_s", unit=" s")
    for k in ("large", "medium", "small"):
        row(f"{k}: mean to admission", "mean_admission_s", k, unit=" s", digits=2)
        row(f"{k}: p90 to admission", "p90_admission_s", k, unit=" s", digits=2)
        row(f"{k}: mean to own admission", "mean_own_admission_s", k, unit=" s", digits=2)
    row("quota usage (Kueue's formula)", "usage_percent", unit=" %")
    row("controller CPU", "controller_cpu_s", unit=" s")
    row("  per admitted job", "controller_cpu_ms_per_job", unit=" ms", digits=2)
    row("kube-apiserver CPU", "apiserver_cpu_s", unit=" s")
    row("etcd CPU", "etcd_cpu_s", unit=" s")
    row("API requests per admitted job", "requests_per_job", digits=2)
    row("controller peak RSS (MiB)", "controller_peak_rss", digits=0, scale_by=2**20)
    row("ready after start", "ready_s", unit=" s")
    for key in ("admitted", "unfinished", "over_quota", "readmitted", "released_again_when_readmitted",
                "released_twice_in_one_admission", "resumed_after_it_ended"):
        row(key.replace("_", " "), key)
    ratios = result.get("ratios") or {}
    names = [f"{a}/{b}" for a, b in RATIOS if a in shown and b in shown]
    if ratios and names:
        lines += ["  ratios, each within a pair: mean [min-max]",
                  f"  {'':<34}" + "".join(f"{n.replace('kueue_default', 'kdflt'):>20}" for n in names)]
        for label, _ in HEADLINE:
            cells = []
            for n in names:
                r = ratios.get(label, {}).get(n)
                cell = "-" if r is None else fmt(r["mean"], "", 2) + (
                    f" [{fmt(r['min'], '', 2)}-{fmt(r['max'], '', 2)}]" if r["n"] > 1 else "")
                cells.append(f"{cell:>20}")
            lines.append(f"  {label:<34}" + "".join(cells))
    for r in result.get("runs", []):
        lines.append(f"  run {r['system']} (pair {r.get('pair', 0) + 1}): wall {fmt(r['wall_s'], ' s')}, small/medium/large "
                     + "/".join(fmt(r["mean_admission_s"][k], "", 2) for k in ("small", "medium", "large"))
                     + f" s, CPU {fmt(r['controller_cpu_s'], ' s')}, {r['requests_per_job']:.2f} req/job, "
                     f"load {r['load_average_before']} -> {r['load_average_after']}")
        lines.append("    hops: " + ", ".join(f"{k} {fmt(v, ' s', 2)}" for k, v in r["hops_mean_s"].items()))
        for group, by_step in (r.get("pod_hops_mean_s") or {}).items():
            lines.append(("    pods: " if group == "all" else f"      {group}: ")
                         + ", ".join(f"{k} {fmt(v, ' s', 2)}" for k, v in by_step.items()))
        lines.append("    requests: " + ", ".join(f"{k} {v}" for k, v in r["requests_by_kind"].items()))
        if r["violations"] or r["create_errors"]:
            lines.append(f"    DEFECTS: {r['violations']} {r['create_errors']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--divisor", type=int, default=1, help="1/N of the jobs per queue")
    parser.add_argument("--rounds", type=int, default=2, help="A/B pairs (alternating which goes first)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="the runners of each pair, comma-separated: ours, kueue (tuned: its job "
                             "reconciler's workers and client rate at ours'), kueue_default (its shipped "
                             "configuration), floor (bench/floor.py: a per-quota counter, FIFO)")
    parser.add_argument("--only", choices=tuple(SYSTEMS), help="run one system only")
    parser.add_argument("--no-perf", action="store_true", help="skip Kueue's own performance test")
    parser.add_argument("--component-qps", type=int, default=COMPONENT_QPS,
                        help="kube-controller-manager's and kube-scheduler's client rate")
    parser.add_argument("--job-syncs", type=int, default=JOB_SYNCS,
                        help="kube-controller-manager's --concurrent-job-syncs")
    parser.add_argument("--kind", choices=sorted(JOB_TYPES), default=c.BATCH_JOB_KIND,
                        help="the jobs of the stream: batch Jobs (Kueue's perf test) or PyTorchJobs "
                             "(run by the Kubeflow training operator)")
    parser.add_argument("--kwok-workers", type=int, default=KWOK_POD_WORKERS,
                        help="how many pods kwok moves through their stages at once (kwok's default: 4)")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up on a run after this many seconds")
    parser.add_argument("--keep", help="keep each run's state, logs and audit log in this directory")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--ours-src", help="run ours' controller from this src directory (say another "
                                           "commit's, from `git archive COMMIT src`): an A/B of ours' code")
    parser.add_argument("--trace", action="store_true",
                        help="with --keep: audit every user's requests (pod creates and pod and Job writes with "
                             "their bodies) and log the Job controller's syncs, for bench/hold_timeline.py "
                             "(costs kube-apiserver some CPU: not for headline figures)")
    parser.add_argument("--preempt-within-quota", action=argparse.BooleanOptionalAction, default=True,
                        help="ours' Queues preempt lower priority inside a quota "
                             "(koord-queue/enable-queueunit-preemption), as Kueue's baseline does within a "
                             "ClusterQueue (the default: like settings)")
    parser.add_argument("--protect-seconds", type=float, default=0.0,
                        help="ours: admitted units younger than this are never preempted (0 here, as Kueue's "
                             "baseline; -1: the controller's own default, 60)")
    args = parser.parse_args(argv)
    if args.trace and not args.keep:
        parser.error("--trace needs --keep (the logs are read after the run)")
    result = aio.run(run(args))
    print(json.dumps(result, indent=2, default=str) if args.json else render(result))
    bad = [r for r in result.get("runs", []) if r["unfinished"] or r["over_quota"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
