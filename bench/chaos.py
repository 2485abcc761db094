"""Chaos run: PyTorchJobs over a tree of ElasticQuotas while the API server misbehaves
and the controller is killed, with a checker that replays every write the server makes.

What runs: the embedded API server and the simulated cluster in this process, the
controller (`koord-queue controller`) in a process of its own. While jobs of random
sizes, priorities and runtimes stream in, the server fails a share of requests (500,
429 with Retry-After, 409 on writes), drops every watch every few seconds and forgets
its history (watches and lists resume with 410 Gone), and the controller is killed
with SIGKILL at random moments and started again.

The checker is a listener on the server's store: it sees every write, in order, as it
is made (no watch to lose, no history to compact away) and asserts after each one:
- no quota, leaf or parent, has admitted usage (units in Reserved, Dequeued, Running)
  above its max, for any resource its max names;
- a job is released (its suspension lifted) only while its unit holds quota, at most
  once per admission; and a unit is admitted only while its job is suspended, so
  between two releases of a job there is always a suspension (preemption is one).
At the end: every job ended Succeed, every job has exactly its unit and every unit its
job (none orphaned, none missing), and, with one long job running in every quota, the
`status.used` the controller writes equals the sum of the units holding quota, parents
included.

    .venv/bin/python bench/chaos.py [--jobs 2000] [--quotas 20] [--kills 10] [--seed N]

The seed (printed) makes the workload, the fault schedule and the injected errors
reproducible; the timing of a multi-process run is not, so a replay with the same
seed is the same storm, not the same interleaving.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import logging
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

import koordqueue  # noqa: E402
from koordqueue import aio
from koordqueue.api import constants as c
from koordqueue.api.crds import all_crds
from koordqueue.api.quantity import QuantityError, parse_resource_list
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.kube.errors import AlreadyExists, ApiError
from koordqueue.localcluster import errors as api_errors
from koordqueue.localcluster.server import APIServer
from koordqueue.localcluster.simcluster import SimCluster
from koordqueue.localcluster.store import DELETED, Event

UNITS_KEY = f"{c.QUEUE_GROUP}/{c.QUEUE_UNIT_PLURAL}"
JOBS_KEY = f"{c.KUBEFLOW_GROUP}/{c.PYTORCH_JOB_PLURAL}"
QUOTAS_KEY = f"{c.QUOTA_GROUP}/{c.ELASTIC_QUOTA_PLURAL}"
HOLDING = frozenset(p.value for p in c.PHASES_HOLDING_QUOTA)
QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
NAMESPACE = "default"
SEED_MANIFESTS = Path(koordqueue.__file__).parent / "examples" / "seed.yaml"


# --- the checker -------------------------------------------------------------------------


@dataclass
class _Quota:
    parent: str | None
    max: dict[str, int]


@dataclass
class _Unit:
    quota: str | None
    request: dict[str, int]
    job: str  # namespace/name of the job it stands for
    holding: bool = False
    epoch: int = 0  # admissions so far
    released_in: int = -1  # the admission epoch in which its job was last released


class HistoryChecker:
    """Replays the store's writes in order and records every broken invariant."""

    def __init__(self) -> None:
        self.quotas: dict[str, _Quota] = {}
        self.units: dict[str, _Unit] = {}
        self.suspended: dict[str, bool] = {}  # job key -> suspended now
        self.used: dict[str, dict[str, int]] = {}  # quota (leaf or parent) -> admitted usage
        self.peak_gpus: dict[str, int] = {}
        self.violations: list[str] = []
        self.writes = 0
        self.admissions = 0
        self.releases = 0
        self.suspensions = 0

    def prime(self, quotas: list[dict[str, Any]], units: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
        """Start from objects that exist already (a cluster taken over): their state, no verdicts."""
        for obj in quotas:
            self.feed(Event(0, QUOTAS_KEY, "ADDED", obj, None))
        for obj in units:
            self.feed(Event(0, UNITS_KEY, "ADDED", obj, None))
        for obj in jobs:
            meta = obj["metadata"]
            key = f"{meta.get('namespace', '')}/{meta['name']}"
            self.suspended[key] = _suspended(obj)
            unit = self.units.get(f"{key}-{c.UNIT_SUFFIX_PYTORCH}")
            if unit is not None and unit.holding and not self.suspended[key]:
                unit.released_in = unit.epoch
        self.admissions = self.writes = 0

    # Called by the store for every write, inside the server: never raise.
    def feed(self, event: Event) -> None:
        try:
            self.writes += 1
            if event.key == QUOTAS_KEY:
                self._quota(event)
            elif event.key == UNITS_KEY:
                self._unit(event)
            elif event.key == JOBS_KEY:
                self._job(event)
        except Exception as e:  # a checker bug must not become a server bug
            self.violations.append(f"checker failed on {event.type} {event.key} rv {event.rv}: {e!r}")

    def _quota(self, event: Event) -> None:
        meta = event.obj["metadata"]
        if event.type == DELETED:
            self.quotas.pop(meta["name"], None)
            return
        try:
            maximum = parse_resource_list((event.obj.get("spec") or {}).get("max") or {})
        except QuantityError:
            maximum = {}
        parent = (meta.get("labels") or {}).get(c.LABEL_QUOTA_PARENT) or None
        self.quotas[meta["name"]] = _Quota(parent, maximum)

    def _chain(self, quota: str | None) -> list[str]:
        chain: list[str] = []
        while quota is not None and quota not in chain:
            chain.append(quota)
            node = self.quotas.get(quota)
            quota = node.parent if node else None
        return chain

    def _charge(self, unit: _Unit, sign: int) -> None:
        for name in self._chain(unit.quota):
            used = self.used.setdefault(name, {})
            for resource, amount in unit.request.items():
                used[resource] = used.get(resource, 0) + sign * amount

    def _check_max(self, quota: str | None, rv: int, unit_key: str) -> None:
        for name in self._chain(quota):
            used = self.used.get(name, {})
            self.peak_gpus[name] = max(self.peak_gpus.get(name, 0), used.get(c.GPU, 0) // 1000)
            node = self.quotas.get(name)
            if node is None:
                continue
            for resource, limit in node.max.items():
                if used.get(resource, 0) > limit:
                    self.violations.append(
                        f"rv {rv}: quota {name} holds {used[resource] / 1000:g} {resource}, over its max "
                        f"{limit / 1000:g} (after the write of unit {unit_key})")

    def _unit(self, event: Event) -> None:
        meta = event.obj["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        unit = self.units.get(key)
        if unit is None:
            spec = event.obj.get("spec") or {}
            try:
                request = parse_resource_list(spec.get("resource") or {})
            except QuantityError:
                request = {}
            ref = spec.get("consumerRef") or {}
            unit = _Unit((meta.get("labels") or {}).get(c.LABEL_QUOTA_NAME), request,
                         f"{ref.get('namespace') or meta.get('namespace', '')}/{ref.get('name', '')}")
            self.units[key] = unit
        phase = str((event.obj.get("status") or {}).get("phase") or "")
        older = c.KOORD_QUEUE_OLDER_PHASES.get(phase)  # a unit Koord-Queue wrote
        holding = event.type != DELETED and (older.value if older else phase) in HOLDING
        if holding == unit.holding:
            return
        if holding:
            if unit.quota is None:
                self.violations.append(f"rv {event.rv}: unit {key} holds quota but names none")
            if not self.suspended.get(unit.job, True):
                self.violations.append(
                    f"rv {event.rv}: unit {key} admitted while its job {unit.job} still runs from before "
                    "(released twice without a suspension between)")
            unit.epoch += 1
            self.admissions += 1
        unit.holding = holding
        self._charge(unit, 1 if holding else -1)
        if holding:
            self._check_max(unit.quota, event.rv, key)
        if event.type == DELETED:
            del self.units[key]

    def _job(self, event: Event) -> None:
        meta = event.obj["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        if event.type == DELETED:
            self.suspended.pop(key, None)
            return
        suspended = _suspended(event.obj)
        was = self.suspended.get(key, True)
        self.suspended[key] = suspended
        if was and not suspended:
            self.releases += 1
            unit = self.units.get(f"{key}-{c.UNIT_SUFFIX_PYTORCH}")
            if unit is None or not unit.holding:
                self.violations.append(f"rv {event.rv}: job {key} released while its unit holds no quota")
            elif unit.released_in == unit.epoch:
                self.violations.append(
                    f"rv {event.rv}: job {key} released twice in one admission (no suspension and "
                    "re-admission between)")
            else:
                unit.released_in = unit.epoch
        elif suspended and not was:
            self.suspensions += 1

    def holding_usage(self) -> dict[str, dict[str, int]]:
        """Admitted usage of every quota now, parents included (a copy)."""
        return {name: dict(used) for name, used in self.used.items()}


def _suspended(job: dict[str, Any]) -> bool:
    annotations = job["metadata"].get("annotations") or {}
    run_policy = (job.get("spec") or {}).get("runPolicy") or {}
    return annotations.get(c.ANNOTATION_SUSPEND) == c.TRUE or run_policy.get("suspend") is True


# --- the workload ------------------------------------------------------------------------


@dataclass
class ChaosConfig:
    jobs: int = 2000
    quotas: int = 20
    parents: int = 4
    kills: int = 10
    error_rate: float = 0.05  # of all API requests: 500 and 429 (every verb), 409 (writes only)
    seed: int | None = None
    gpus_per_parent: int = 24
    runtime: tuple[float, float] = (0.5, 4.0)  # seconds a job's pods run
    submit_per_second: float = 25.0
    drop_watches_every: tuple[float, float] = (2.0, 5.0)
    compact_every: tuple[float, float] = (5.0, 12.0)
    tail_runtime: float = 12.0  # the long jobs that are running when status.used is compared
    # Leader election of the controller (duration, renew deadline, retry period): the
    # defaults of the chart; a replacement leads once the killed one's lease runs out.
    lease: tuple[float, float, float] = (10.0, 7.0, 2.0)
    timeout: float = 1800.0
    state_dir: Path | None = None
    verbose: bool = True


@dataclass
class ChaosReport:
    seed: int
    jobs: int
    quotas: int
    seconds: float
    requests: int
    faults: Counter[str]
    restarts: int
    writes_checked: int
    admissions: int
    releases: int
    suspensions: int
    peak_gpus: dict[str, int]
    violations: list[str] = field(default_factory=list)

    def figures(self) -> str:
        injected = sum(self.faults[k] for k in ("500", "429", "409"))
        share = injected / self.requests if self.requests else 0.0
        lines = [
            f"seed: {self.seed}",
            f"jobs: {self.jobs} over {self.quotas} quotas, all checked in {self.seconds:.0f} s",
            f"requests: {self.requests}, errors injected: {injected} ({share:.1%}): "
            f"500 x{self.faults['500']}, 429 x{self.faults['429']}, 409 x{self.faults['409']}",
            f"watch drops: {self.faults['watch drops']} ({self.faults['watches dropped']} streams), "
            f"compactions (410): {self.faults['compactions']}",
            f"controller SIGKILLs: {self.faults['sigkill']}, restarts: {self.restarts}",
            f"writes checked: {self.writes_checked}, admissions: {self.admissions}, releases: {self.releases}, "
            f"suspensions: {self.suspensions}",
            f"violations: {len(self.violations)}",
        ]
        lines += [f"  - {v}" for v in self.violations[:50]]
        if len(self.violations) > 50:
            lines.append(f"  ... and {len(self.violations) - 50} more")
        return "\n".join(lines)


def quota_manifests(config: ChaosConfig, rng: random.Random) -> list[dict[str, Any]]:
    """`parents` parent quotas of `gpus_per_parent` GPUs, and `quotas` leaves spread under them."""
    def eq(name: str, min_gpu: int, max_gpu: int, labels: dict[str, str]) -> dict[str, Any]:
        def amounts(gpus: int) -> dict[str, str]:
            return {c.GPU: str(gpus), "cpu": str(gpus * 4), "memory": f"{gpus * 8}Gi"}

        return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                "spec": {"min": amounts(min_gpu), "max": amounts(max_gpu)}}

    leaves: list[list[tuple[str, int, int]]] = [[] for _ in range(config.parents)]
    for i in range(config.quotas):
        leaves[i % config.parents].append((f"team-{i:02d}", rng.randint(1, 4), rng.choice([8, 12, 16])))
    out = []
    for p, children in enumerate(leaves):
        parent = f"org-{p}"
        min_sum = sum(m for _, m, _ in children)
        out.append(eq(parent, max(min_sum, config.gpus_per_parent // 2), config.gpus_per_parent,
                      {c.LABEL_QUOTA_IS_PARENT: c.TRUE}))
        for name, min_gpu, max_gpu in children:
            policy = rng.choice([c.QueuePolicy.PRIORITY, c.QueuePolicy.PRIORITY, c.QueuePolicy.BLOCK])
            out.append(eq(name, min_gpu, max_gpu,
                          {c.LABEL_QUOTA_PARENT: parent, c.LABEL_QUEUE_POLICY: policy.value}))
    return out


def job_manifest(name: str, quota: str, gpus_per_pod: int, workers: int, runtime: float,
                 priority: int) -> dict[str, Any]:
    """The seed's PyTorchJob, resized, created suspended (as the admission webhook leaves it)."""
    job: dict[str, Any] = copy.deepcopy([d for d in yaml.safe_load_all(SEED_MANIFESTS.read_text()) if d][2])
    job["metadata"] = {"name": name, "namespace": NAMESPACE,
                       "labels": {c.LABEL_QUOTA_NAME: quota},
                       "annotations": {c.ANNOTATION_SUSPEND: c.TRUE, c.ANNOTATION_PRIORITY: str(priority),
                                       c.ANNOTATION_SIM_DURATION: f"{runtime:.2f}"}}
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    if workers == 0:
        del specs["Worker"]
    for role in specs.values():
        res = role["template"]["spec"]["containers"][0]["resources"]
        for part in ("requests", "limits"):
            res[part] = {"cpu": "1", "memory": "1Gi", c.GPU: str(gpus_per_pod)}
    return job


def workload(config: ChaosConfig, rng: random.Random, quotas: list[str]) -> list[dict[str, Any]]:
    jobs = []
    for i in range(config.jobs):
        jobs.append(job_manifest(f"job-{i:05d}", rng.choice(quotas), gpus_per_pod=rng.choice([1, 1, 2]),
                                 workers=rng.randint(0, 3), runtime=rng.uniform(*config.runtime),
                                 priority=rng.randint(0, 9)))
    return jobs


# --- the controller as a process ---------------------------------------------------------


class Controller(harness.Process):
    """`koord-queue controller` in a process of its own; each start is a new replica identity."""

    def __init__(self, kubeconfig: Path, log: Path, lease: tuple[float, float, float]) -> None:
        super().__init__([], log)
        self.kubeconfig = kubeconfig
        self.lease = lease
        self.starts = 0
        self.metrics_port = 0

    def start(self) -> None:
        self.starts += 1
        self.metrics_port = harness.free_port()
        self.args = [sys.executable, "-m", "koordqueue.cli", "controller", "--kubeconfig", str(self.kubeconfig),
                     "--identity", f"chaos-{self.starts}", "--metrics-port", str(self.metrics_port),
                     "--lease-duration", str(self.lease[0]), "--renew-deadline", str(self.lease[1]),
                     "--retry-period", str(self.lease[2]),
                     "--protect-seconds", "0", "--backoff-base", "1", "--backoff-cap", "4", "--log-format", "json"]
        super().start()

    async def leading(self, session: aiohttp.ClientSession) -> bool:
        """Whether this replica leads (its metrics say so): a kill before that would hit a
        process still waiting for the killed one's lease, which tests nothing new."""
        try:
            async with session.get(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                   timeout=aiohttp.ClientTimeout(total=1)) as response:
                return "koord_queue_leader 1.0" in await response.text()
        except (aiohttp.ClientError, TimeoutError):
            return False

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


# --- the run -----------------------------------------------------------------------------


class ChaosRun:
    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**31)
        self.rng = random.Random(self.seed)
        self.checker = HistoryChecker()
        self.faults: Counter[str] = Counter()
        self.requests = 0
        self.phases: dict[str, str] = {}  # unit key -> phase, for progress
        self.problems: list[str] = []

    def _say(self, text: str) -> None:
        if self.config.verbose:
            print(f"[chaos {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def _count_requests(self, server: APIServer) -> None:
        """Wrap the server's error injection to count requests and the errors it injects."""
        check = server.controls.check

        def counting(verb: str, rt: Any, name: str) -> None:
            self.requests += 1
            try:
                check(verb, rt, name)
            except api_errors.APIError as e:
                self.faults[str(e.code)] += 1
                raise

        server.controls.check = counting  # type: ignore[method-assign]

    def _track_phases(self, event: Event) -> None:
        if event.key == UNITS_KEY:
            meta = event.obj["metadata"]
            key = f"{meta.get('namespace', '')}/{meta['name']}"
            if event.type == DELETED:
                self.phases.pop(key, None)
            else:
                self.phases[key] = str((event.obj.get("status") or {}).get("phase") or "")

    def succeeded(self, names: set[str]) -> int:
        return sum(1 for key in names if self.phases.get(key) == c.Phase.SUCCEED)

    async def run(self) -> ChaosReport:
        if self.config.state_dir is not None:
            return await self._run(self.config.state_dir)
        with tempfile.TemporaryDirectory(prefix="kq-chaos-") as tmp:
            return await self._run(Path(tmp))

    async def _run(self, state: Path) -> ChaosReport:
        config = self.config
        started = time.monotonic()
        server = APIServer(state / "api", crds=all_crds(), seed=self.seed)
        await server.start()
        server.store.listeners.append(self.checker.feed)
        server.store.listeners.append(self._track_phases)
        self._count_requests(server)
        controller = Controller(server.kubeconfig_path, state / "controller.log", config.lease)
        try:
            async with KubeClient(load_config(str(server.kubeconfig_path)), qps=2000, burst=4000) as client:
                nodes = config.parents * config.gpus_per_parent // 8
                sim = SimCluster(client, nodes=nodes, gpus_per_node=8)
                await sim.start()
                try:
                    await self._storm(server, client, controller, started)
                except TimeoutError as e:
                    self.problems.append(str(e))
                finally:
                    controller.stop()
                    await sim.stop()
        finally:
            await server.stop()
        if self.problems and config.verbose:
            log = (state / "controller.log").read_text(errors="replace").splitlines()
            self._say("controller log, last lines:\n" + "\n".join(log[-30:]))
        return ChaosReport(
            seed=self.seed, jobs=config.jobs + config.quotas, quotas=config.quotas,
            seconds=time.monotonic() - started, requests=self.requests, faults=self.faults,
            restarts=controller.starts - 1, writes_checked=self.checker.writes,
            admissions=self.checker.admissions, releases=self.checker.releases,
            suspensions=self.checker.suspensions, peak_gpus=dict(self.checker.peak_gpus),
            violations=self.checker.violations + self.problems)

    async def _storm(self, server: APIServer, client: KubeClient, controller: Controller, started: float) -> None:
        config, rng = self.config, self.rng
        quotas = quota_manifests(config, rng)
        for obj in quotas:
            await client.create(QUOTAS, obj, namespace=NAMESPACE)
        leaves = [q["metadata"]["name"] for q in quotas if c.LABEL_QUOTA_PARENT in q["metadata"]["labels"]]
        jobs = workload(config, rng, leaves)
        units = {f"{NAMESPACE}/{j['metadata']['name']}-{c.UNIT_SUFFIX_PYTORCH}" for j in jobs}
        # Kill at random points of the run: when a drawn share of the jobs is done, plus a jitter.
        kill_at = sorted(rng.uniform(0.05, 0.9) for _ in range(config.kills))
        deadline = started + config.timeout
        controller.start()
        self._say(f"seed {self.seed}: {len(jobs)} jobs over {len(leaves)} quotas, {config.kills} kills planned")
        # 2 % each of 500 and 429 on every request, 409 on 2 % of writes (more than half the
        # requests): about 5 % in all, the share measured and printed.
        for code, verbs in ((500, None), (429, None), (409, {"update", "patch"})):
            server.controls.inject_errors(code, rate=config.error_rate * 0.4, verbs=verbs, retry_after=1)
        stop = asyncio.Event()
        storms = [asyncio.create_task(self._drop_watches(server, stop)),
                  asyncio.create_task(self._compact(server, stop))]
        creating = asyncio.create_task(self._create(client, jobs))
        session = aiohttp.ClientSession()
        try:
            for share in kill_at:
                while self.succeeded(units) < share * len(jobs) or not await controller.leading(session):
                    self._check_deadline(deadline, units, "the next kill")
                    await asyncio.sleep(0.1)
                await asyncio.sleep(rng.uniform(0.0, 1.0))
                controller.kill()
                self.faults["sigkill"] += 1
                self._say(f"SIGKILL {self.faults['sigkill']} at {self.succeeded(units)}/{len(jobs)} done")
                await asyncio.sleep(rng.uniform(0.2, 2.0))
                controller.start()
            await creating
            last_said = time.monotonic()
            while self.succeeded(units) < len(jobs):
                self._check_deadline(deadline, units, "every job to end")
                if time.monotonic() - last_said > 30:
                    last_said = time.monotonic()
                    self._say(f"{self.succeeded(units)}/{len(jobs)} done")
                if not controller.alive():
                    self.problems.append("the controller process died on its own")
                    controller.start()
                await asyncio.sleep(0.2)
            self._say(f"all {len(jobs)} jobs done in {time.monotonic() - started:.0f} s")
        finally:
            await session.close()
            stop.set()
            creating.cancel()
            await asyncio.gather(creating, *storms, return_exceptions=True)
            server.controls.clear_errors()
        self._check_objects(server, jobs)
        await self._check_used(server, client, leaves, deadline)

    def _check_deadline(self, deadline: float, units: set[str], what: str) -> None:
        if time.monotonic() > deadline:
            stuck = Counter(self.phases.get(key, "(no unit)") for key in units)
            raise TimeoutError(f"timed out waiting for {what}; units by phase: {dict(stuck)}")

    async def _create(self, client: KubeClient, jobs: list[dict[str, Any]]) -> None:
        for job in jobs:
            await self._create_one(client, job)
            await asyncio.sleep(self.rng.expovariate(self.config.submit_per_second))

    @staticmethod
    async def _create_one(client: KubeClient, job: dict[str, Any]) -> None:
        while True:
            try:
                await client.create(JOBS, job, namespace=NAMESPACE)
                return
            except AlreadyExists:
                return  # an earlier try went through
            except ApiError:
                await asyncio.sleep(0.1)  # an injected 500 or 409: nothing was written

    async def _drop_watches(self, server: APIServer, stop: asyncio.Event) -> None:
        while not await _wait(stop, self.rng.uniform(*self.config.drop_watches_every)):
            self.faults["watch drops"] += 1
            self.faults["watches dropped"] += server.controls.drop_watches()

    async def _compact(self, server: APIServer, stop: asyncio.Event) -> None:
        while not await _wait(stop, self.rng.uniform(*self.config.compact_every)):
            server.controls.compact()
            self.faults["compactions"] += 1

    def _check_objects(self, server: APIServer, jobs: list[dict[str, Any]]) -> None:
        """Every job Succeeded with its one unit Succeed; every unit owned by a job that exists."""
        stored_jobs = {obj["metadata"]["name"]: obj for obj in server.store.items(JOBS_KEY, NAMESPACE)}
        stored_units = {obj["metadata"]["name"]: obj for obj in server.store.items(UNITS_KEY, NAMESPACE)}
        for job in jobs:
            name = job["metadata"]["name"]
            stored = stored_jobs.get(name)
            if stored is None:
                self.problems.append(f"job {name} is lost")
                continue
            conditions = (stored.get("status") or {}).get("conditions") or []
            if not any(x.get("type") == c.KUBEFLOW_CONDITION_SUCCEEDED and x.get("status") == c.CONDITION_TRUE
                       for x in conditions):
                self.problems.append(f"job {name} did not end Succeeded")
            unit = stored_units.get(f"{name}-{c.UNIT_SUFFIX_PYTORCH}")
            if unit is None:
                self.problems.append(f"job {name} has no QueueUnit")
                continue
            phase = (unit.get("status") or {}).get("phase")
            if phase != c.Phase.SUCCEED:
                self.problems.append(f"unit of job {name} ended {phase}, not Succeed")
        uids = {obj["metadata"]["uid"] for obj in stored_jobs.values()}
        for name, unit in stored_units.items():
            owners = [o.get("uid") for o in unit["metadata"].get("ownerReferences") or ()]
            if not owners or not set(owners) <= uids:
                self.problems.append(f"unit {name} is orphaned (owners {owners})")

    async def _check_used(self, server: APIServer, client: KubeClient, leaves: list[str],
                          deadline: float) -> None:
        """One long job per quota; once all run, status.used must equal the admitted units' sum."""
        tail = [job_manifest(f"tail-{q}", q, 1, 0, self.config.tail_runtime, 0) for q in leaves]
        names = {f"{NAMESPACE}/{j['metadata']['name']}-{c.UNIT_SUFFIX_PYTORCH}" for j in tail}
        for job in tail:
            await self._create_one(client, job)
        while sum(1 for key in names if self.phases.get(key) in HOLDING) < len(names):
            self._check_deadline(deadline, names, "the long jobs to be admitted")
            await asyncio.sleep(0.1)
        expected: dict[str, dict[str, int]] = {}
        written: dict[str, dict[str, int]] = {}
        settle = time.monotonic() + 10.0
        while time.monotonic() < settle:
            expected = self.checker.holding_usage()
            written = {}
            for obj in server.store.items(QUOTAS_KEY, NAMESPACE):
                try:
                    written[obj["metadata"]["name"]] = parse_resource_list(
                        (obj.get("status") or {}).get("used") or {})
                except QuantityError as e:
                    written[obj["metadata"]["name"]] = {"unreadable": 0}
                    self.problems.append(f"quota {obj['metadata']['name']}: status.used unreadable: {e}")
            if _same_usage(expected, written):
                break
            await asyncio.sleep(0.25)
        else:
            for name in sorted(written):
                want = {r: v for r, v in expected.get(name, {}).items() if v}
                got = {r: v for r, v in written[name].items() if v}
                if want != got:
                    self.problems.append(f"quota {name}: status.used {got} but its running units hold {want}")
        while self.succeeded(names) < len(names):
            self._check_deadline(deadline, names, "the long jobs to end")
            await asyncio.sleep(0.2)
        self._check_objects(server, tail)


def _same_usage(expected: dict[str, dict[str, int]], written: dict[str, dict[str, int]]) -> bool:
    for name in set(expected) | set(written):
        want = {r: v for r, v in expected.get(name, {}).items() if v}
        got = {r: v for r, v in written.get(name, {}).items() if v}
        if want != got:
            return False
    return True


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    """Sleep for `seconds` or until `event` is set; whether it is set."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        pass
    return event.is_set()


def run_chaos(config: ChaosConfig) -> ChaosReport:
    return aio.run(ChaosRun(config).run())


def main(argv: list[str] | None = None, report: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--quotas", type=int, default=20)
    parser.add_argument("--parents", type=int, default=4)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--error-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: a random one, printed)")
    parser.add_argument("--submit-per-second", type=float, default=25.0)
    parser.add_argument("--runtime", type=float, nargs=2, default=(0.5, 4.0), metavar=("MIN", "MAX"))
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--lease", type=float, nargs=3, default=(10.0, 7.0, 2.0),
                        metavar=("DURATION", "RENEW", "RETRY"), help="the controller's leader election timings")
    parser.add_argument("--state-dir", type=Path, default=None, help="keep the state (and controller.log) here")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON object")
    args = parser.parse_args(argv)
    # The simulated cluster and the event recorder log every refused write at length.
    logging.basicConfig(level=logging.ERROR)
    config = ChaosConfig(jobs=args.jobs, quotas=args.quotas, parents=args.parents, kills=args.kills,
                         error_rate=args.error_rate, seed=args.seed, submit_per_second=args.submit_per_second,
                         runtime=tuple(args.runtime), timeout=args.timeout, state_dir=args.state_dir,
                         lease=tuple(args.lease))
    result = run_chaos(config)
    report(result.figures())
    if args.json:
        report(json.dumps({"seed": result.seed, "jobs": result.jobs, "quotas": result.quotas,
                           "seconds": round(result.seconds, 1), "requests": result.requests,
                           "faults": dict(result.faults), "restarts": result.restarts,
                           "writes_checked": result.writes_checked, "violations": result.violations}))
    return 1 if result.violations else 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # so that a terminated run still stops its controller process


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    signal.signal(signal.SIGTERM, _interrupt)
    sys.exit(main())
