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
import heapq
import json
import logging
import math
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter, deque
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
from koordqueue.localcluster.store import ADDED, DELETED, Event

UNITS_KEY = f"{c.QUEUE_GROUP}/{c.QUEUE_UNIT_PLURAL}"
JOBS_KEY = f"{c.KUBEFLOW_GROUP}/{c.PYTORCH_JOB_PLURAL}"
QUOTAS_KEY = f"{c.QUOTA_GROUP}/{c.ELASTIC_QUOTA_PLURAL}"
HOLDING = frozenset(p.value for p in c.PHASES_HOLDING_QUOTA)
QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
NAMESPACE = "default"
SEED_MANIFESTS = Path(koordqueue.__file__).parent / "examples" / "seed.yaml"
PODS_KEY = "/pods"
TRAIL = 12  # a job's last transitions said with its violations
# A status.used written at t must lie between what the quota's units held all through
# [t - W, t + W] and what they held at any time in it (the controller's view runs ahead
# of the objects by the admissions it is writing, and behind them by the releases it has
# not seen yet).
USED_WINDOW = 15.0
# A job's pods are gone (deleted, or ended) this long after its unit stopped holding quota:
# a killed controller's successor waits out the lease, syncs, then suspends the job.
POD_BOUND = 40.0


# --- the checker -------------------------------------------------------------------------


@dataclass
class _Quota:
    parent: str | None
    max: dict[str, int]
    used: dict[str, int] | None = None  # status.used as last written


@dataclass(eq=False)
class _Held:
    """One stretch of time during which a unit held quota (charged to `quota`)."""

    quota: str
    unit: str
    request: dict[str, int]
    start: float
    end: float = math.inf


@dataclass
class _Unit:
    quota: str | None
    request: dict[str, int]
    job: str  # namespace/name of the job it stands for
    holding: bool = False
    epoch: int = 0  # admissions so far
    released_in: int = -1  # the admission epoch in which its job was last released
    phase: str = ""
    allocated: object = None  # status.lastAllocateTime of its current admission
    held: list[_Held] = field(default_factory=list)  # its current admission, in each quota it is charged to
    unheld_at: float = 0.0  # when it last stopped holding quota (or was first seen)
    inherited: bool = False  # its admission was made before the checker looked (Koord-Queue's, say)


@dataclass(frozen=True)
class _UsedWrite:
    rv: int
    quota: str
    at: float
    used: dict[str, int]


class HistoryChecker:
    """Replays the store's writes in order and records every broken invariant.

    `now` is when a write was made (seconds, monotonic); the checks of a status.used and of
    pods outliving their quota are settled `used_window` and `pod_bound` seconds later, by
    the writes that come after, or by `finish()`.
    """

    def __init__(self, used_window: float = USED_WINDOW, pod_bound: float = POD_BOUND) -> None:
        self.used_window = used_window
        self.pod_bound = pod_bound
        self.quotas: dict[str, _Quota] = {}
        self.units: dict[str, _Unit] = {}
        self.unit_of: dict[str, str] = {}  # job key -> its unit's key
        self.suspended: dict[str, bool] = {}  # job key -> suspended now
        self.ever_released: set[str] = set()  # jobs released at least once
        self.used: dict[str, dict[str, int]] = {}  # quota (leaf or parent) -> admitted usage
        self.peak_gpus: dict[str, int] = {}
        self.held: dict[str, list[_Held]] = {}  # quota -> the stretches its units held it, recent ones
        self.used_writes: deque[_UsedWrite] = deque()  # status.used written, not yet settled
        self.pods: dict[str, set[str]] = {}  # job key -> its live pods (not ended, not being deleted)
        self.pod_owner: dict[str, str] = {}  # pod key -> its job's key
        self.pod_deadlines: list[tuple[float, str, int]] = []  # (when, unit key, epoch): its pods gone by then
        self.violations: list[str] = []
        self.said: set[tuple[str, ...]] = set()  # violations that are said once (per unit and admission)
        # Job key -> its last suspensions, releases, unit phases and pods (rv and what): said
        # with each violation of that job, so that a violation read alone says how it came about.
        self.trails: dict[str, deque[str]] = {}
        self.now = 0.0
        self.writes = 0
        self.admissions = 0
        self.releases = 0
        self.suspensions = 0
        self.used_checked = 0
        self._priming = False

    def prime(self, quotas: list[dict[str, Any]], units: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
        """Start from objects that exist already (a cluster taken over): their state, no verdicts."""
        self._priming = True
        try:
            for obj in quotas:
                self.feed(Event(0, QUOTAS_KEY, ADDED, obj, None))
            for obj in units:
                self.feed(Event(0, UNITS_KEY, ADDED, obj, None))
            for obj in jobs:
                key = _key(obj)
                self.suspended[key] = _suspended(obj)
                unit = self.units.get(self._unit_key(key))
                if not self.suspended[key]:
                    self.ever_released.add(key)
                    if unit is not None and unit.holding:
                        unit.released_in = unit.epoch
        finally:
            self._priming = False
        self.admissions = self.writes = 0

    # Called by the store for every write, inside the server: never raise.
    def feed(self, event: Event, now: float | None = None) -> None:
        try:
            self.now = time.monotonic() if now is None else now
            self.writes += 1
            if event.key == QUOTAS_KEY:
                self._quota(event)
            elif event.key == UNITS_KEY:
                self._unit(event)
            elif event.key == JOBS_KEY:
                self._job(event)
            elif event.key == PODS_KEY:
                self._pod(event)
            self._settle(self.now)
        except Exception as e:  # a checker bug must not become a server bug
            self.violations.append(f"checker failed on {event.type} {event.key} rv {event.rv}: {e!r}")

    def finish(self, now: float | None = None) -> None:
        """Settle what waits for later writes: the run is over, nothing more comes."""
        self.now = time.monotonic() if now is None else now
        self._settle(math.inf)

    def _violation(self, job: str | None, text: str, once: tuple[str, ...] | None = None) -> None:
        """Record a violation (of `job`'s, with what its job and unit did last)."""
        if self._priming or (once is not None and once in self.said):
            return
        if once is not None:
            self.said.add(once)
        trail = self.trails.get(job) if job else None
        self.violations.append(f"{text} [history: {', '.join(trail)}]" if trail else text)

    def _trail(self, job: str, rv: int, what: str) -> None:
        self.trails.setdefault(job, deque(maxlen=TRAIL)).append(f"{rv} {what}")

    def _unit_key(self, job: str) -> str:
        return self.unit_of.get(job) or f"{job}-{c.UNIT_SUFFIX_PYTORCH}"

    # --- quotas: max and status.used ---------------------------------------------------

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
        old = self.quotas.get(meta["name"])
        quota = self.quotas[meta["name"]] = _Quota(parent, maximum, old.used if old else None)
        written = (event.obj.get("status") or {}).get("used")
        if written is None:
            return
        try:
            used = parse_resource_list(written)
        except QuantityError as e:
            self._violation(None, f"rv {event.rv}: quota {meta['name']}: status.used unreadable: {e}")
            return
        if used != quota.used:
            quota.used = used
            if not self._priming:
                self.used_writes.append(_UsedWrite(event.rv, meta["name"], self.now, used))

    def _chain(self, quota: str | None) -> list[str]:
        chain: list[str] = []
        while quota is not None and quota not in chain:
            chain.append(quota)
            node = self.quotas.get(quota)
            quota = node.parent if node else None
        return chain

    def _admit(self, unit: _Unit, key: str, rv: int) -> None:
        """Charge the unit's request to its quota and the parents above it; none over max."""
        unit.held = [_Held(name, key, unit.request, self.now) for name in self._chain(unit.quota)]
        for held in unit.held:
            name = held.quota
            self.held.setdefault(name, []).append(held)
            used = self.used.setdefault(name, {})
            for resource, amount in unit.request.items():
                used[resource] = used.get(resource, 0) + amount
            self.peak_gpus[name] = max(self.peak_gpus.get(name, 0), used.get(c.GPU, 0) // 1000)
            node = self.quotas.get(name)
            for resource, limit in (node.max if node else {}).items():
                if used.get(resource, 0) > limit:
                    self._violation(
                        unit.job, f"rv {rv}: quota {name} holds {used[resource] / 1000:g} {resource}, over its max "
                        f"{limit / 1000:g} (after the write of unit {key})")

    def _release_quota(self, unit: _Unit) -> None:
        for held in unit.held:
            held.end = self.now
            used = self.used.setdefault(held.quota, {})
            for resource, amount in unit.request.items():
                used[resource] = used.get(resource, 0) - amount
        unit.held = []

    def _settle(self, until: float) -> None:
        """Check the status.used writes and pod deadlines whose time has come."""
        window = self.used_window
        while self.used_writes and self.used_writes[0].at + window <= until:
            self._check_used(self.used_writes.popleft())
        while self.pod_deadlines and self.pod_deadlines[0][0] <= until:
            _, key, epoch = heapq.heappop(self.pod_deadlines)
            self._check_pods_gone(key, epoch)
        if self.writes % 1000 == 0:  # forget stretches no write left to check can see
            horizon = (self.used_writes[0].at if self.used_writes else self.now) - window
            for name, stretches in self.held.items():
                self.held[name] = [h for h in stretches if h.end >= horizon]

    def _check_used(self, write: _UsedWrite) -> None:
        """status.used written at t lies, for each resource, between what the quota's units held
        all through [t - W, t + W] and what they held at any time in it: the controller writes
        its own view, which may be ahead of the objects (admissions being written) or behind
        them (releases not yet seen), but never by more than W."""
        self.used_checked += 1
        start, end = write.at - self.used_window, min(write.at + self.used_window, self.now)
        low: dict[str, int] = {}
        high: dict[str, int] = {}
        for held in self.held.get(write.quota, ()):
            if held.start <= end and held.end >= start:
                for resource, amount in held.request.items():
                    high[resource] = high.get(resource, 0) + amount
                    if held.start <= start and held.end >= end:
                        low[resource] = low.get(resource, 0) + amount
        for resource in sorted(set(write.used) | set(high)):
            got = write.used.get(resource, 0)
            if not low.get(resource, 0) <= got <= high.get(resource, 0):
                self._violation(
                    None, f"rv {write.rv}: quota {write.quota} status.used {resource} {got / 1000:g}, but its units "
                    f"held {low.get(resource, 0) / 1000:g} all through and {high.get(resource, 0) / 1000:g} at most "
                    f"within {self.used_window:g} s of that write")

    # --- units -------------------------------------------------------------------------

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
            unit = _Unit(None, request, f"{ref.get('namespace') or meta.get('namespace', '')}/{ref.get('name', '')}",
                         unheld_at=self.now)
            self.units[key] = unit
            self.unit_of[unit.job] = key
        status = event.obj.get("status") or {}
        phase = str(status.get("phase") or "")
        deleted = event.type == DELETED
        if phase != unit.phase or deleted:
            self._trail(unit.job, event.rv, "unit deleted" if deleted else f"unit {phase}")
        older = c.KOORD_QUEUE_OLDER_PHASES.get(phase)  # a unit Koord-Queue wrote
        holding = not deleted and (older.value if older else phase) in HOLDING
        allocated = status.get("lastAllocateTime")
        if holding and unit.holding:
            if allocated != unit.allocated or (unit.phase == c.Phase.RUNNING and phase != unit.phase):
                self._violation(unit.job, f"rv {event.rv}: unit {key} admitted again while it holds quota "
                                f"({unit.phase} to {phase}, allocated at {allocated}; no release between)")
        elif holding:
            unit.quota = (meta.get("labels") or {}).get(c.LABEL_QUOTA_NAME)
            if unit.quota is None:
                self._violation(unit.job, f"rv {event.rv}: unit {key} holds quota but names none")
            if not self.suspended.get(unit.job, True):
                self._violation(
                    unit.job, f"rv {event.rv}: unit {key} admitted while its job {unit.job} still runs from before "
                    "(released twice without a suspension between)")
            unit.epoch += 1
            self.admissions += 1
            unit.inherited = self._priming
            self._admit(unit, key, event.rv)
        elif unit.holding:
            self._release_quota(unit)
            unit.unheld_at = self.now
            heapq.heappush(self.pod_deadlines, (self.now + self.pod_bound, key, unit.epoch))
        unit.holding = holding
        unit.allocated = allocated
        unit.phase = phase
        if phase and not deleted and not (holding and unit.inherited):
            admissions = status.get("admissions")
            if holding != bool(isinstance(admissions, list) and admissions):
                self._violation(unit.job, f"rv {event.rv}: unit {key} is {phase} but its status.admissions is "
                                f"{json.dumps(admissions)}", once=("admissions", key, str(unit.epoch), str(holding)))
        if deleted:
            del self.units[key]
            self.unit_of.pop(unit.job, None)

    # --- jobs and their pods --------------------------------------------------------------

    def _job(self, event: Event) -> None:
        key = _key(event.obj)
        if event.type == DELETED:
            self.suspended.pop(key, None)
            return
        suspended = _suspended(event.obj)
        was = self.suspended.get(key, True)
        self.suspended[key] = suspended
        if was == suspended:
            return
        self._trail(key, event.rv, "job suspended" if suspended else "job released")
        unit = self.units.get(self._unit_key(key))
        if not suspended:
            self.releases += 1
            self.ever_released.add(key)
            if unit is None or not unit.holding:
                self._violation(key, f"rv {event.rv}: job {key} released while its unit holds no quota")
            elif unit.released_in == unit.epoch:
                self._violation(
                    key, f"rv {event.rv}: job {key} released twice in one admission (no suspension and "
                    "re-admission between)")
            else:
                unit.released_in = unit.epoch
        else:
            self.suspensions += 1
            if unit is not None and unit.holding:
                self._violation(key, f"rv {event.rv}: job {key} suspended while its unit holds quota (a "
                                "suspension is for a unit sent back, after its status says so)")

    def _pod(self, event: Event) -> None:
        meta = event.obj["metadata"]
        pod = f"{meta.get('namespace', '')}/{meta['name']}"
        job = self.pod_owner.get(pod)
        if job is None:
            owner = next((ref for ref in meta.get("ownerReferences") or ()
                          if ref.get("controller") and ref.get("kind") == c.PYTORCH_JOB_KIND), None)
            if owner is None:
                return
            job = self.pod_owner[pod] = f"{meta.get('namespace', '')}/{owner.get('name', '')}"
        phase = (event.obj.get("status") or {}).get("phase")
        live = event.type != DELETED and not meta.get("deletionTimestamp") and \
            phase not in (c.POD_SUCCEEDED, c.POD_FAILED)
        pods = self.pods.setdefault(job, set())
        if not live:
            if event.type == DELETED:
                self.pod_owner.pop(pod, None)
            if pod in pods:
                pods.discard(pod)
                self._trail(job, event.rv, f"pod {meta['name']} {'deleted' if event.type == DELETED else 'gone'}")
            return
        if pod not in pods:
            pods.add(pod)
            self._trail(job, event.rv, f"pod {meta['name']} {phase or 'created'}")
            if job not in self.ever_released:
                self._violation(job, f"rv {event.rv}: pod {pod} exists, but its job {job} was never released",
                                once=("never released", pod))
        unit = self.units.get(self._unit_key(job))
        if unit is not None and not unit.holding and self.now - unit.unheld_at > self.pod_bound:
            self._violation(job, f"rv {event.rv}: pod {pod} lives {self.now - unit.unheld_at:.0f} s after its "
                            f"job's unit stopped holding quota (bound {self.pod_bound:g} s)",
                            once=("pod outlives", pod, str(unit.epoch)))

    def _check_pods_gone(self, key: str, epoch: int) -> None:
        unit = self.units.get(key)
        if unit is None or unit.holding or unit.epoch != epoch:
            return  # gone, or admitted again since
        pods = sorted(self.pods.get(unit.job, ()))
        if pods:
            self._violation(unit.job, f"job {unit.job}: pods {', '.join(pods)} still live {self.pod_bound:g} s "
                            f"after its unit stopped holding quota", once=("pods outlive", key, str(epoch)))

    def holding_usage(self) -> dict[str, dict[str, int]]:
        """Admitted usage of every quota now, parents included (a copy)."""
        return {name: dict(used) for name, used in self.used.items()}


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


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
            self.checker.finish()
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
