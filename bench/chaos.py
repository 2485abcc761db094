"""Chaos run: PyTorchJobs over a tree of ElasticQuotas while the API server misbehaves
and the controller is killed, with a checker that replays every write the server makes.

What runs (`--control-plane embedded`, the default): the embedded API server and the
simulated cluster in this process, the controller (`koord-queue controller`) in a process
of its own. While jobs of random sizes, priorities and runtimes stream in, the server
fails a share of requests (500, 429 with Retry-After, 409 on writes), drops every watch
every few seconds and forgets its history (watches and lists resume with 410 Gone), and
the controller is killed with SIGKILL at random moments and started again. The checker
is a listener on the server's store: it sees every write, in order, as it is made.

With `--control-plane kube`, the same workload runs on the real control plane (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok's fake GPU nodes, the
Kubeflow training operator; `make e2e-tools` builds them): the controller is SIGKILLed as
above, and kube-apiserver is SIGKILLed and started again at random moments (etcd keeps
the state). kube-apiserver has no error injection. The checker reads every write from
etcd's own history (its JSON gateway, from revision 1, with each object's previous
version), which no restart of kube-apiserver disturbs: kube-apiserver runs with
`--etcd-compaction-interval=0` and stores objects as JSON.

The checker asserts, after each write:
- no quota, leaf or parent, has admitted usage (units in Reserved, Dequeued, Running)
  above its max, for any resource its max names;
- a job is released (its suspension lifted) only while its unit holds quota, at most
  once per admission; it is suspended only while its unit holds none (a send-back is
  written first); a unit is admitted only while its job is suspended, and not again
  while it holds quota; so between two releases of a job there is always a suspension;
- a unit's status.admissions names its pod sets while it holds quota, and nothing else;
- every status.used written lies between what the quota's units held all through, and
  what they held at any time, within USED_WINDOW seconds of that write;
- no pod of a job that was never released; a job's pods are gone (deleted or ended)
  POD_BOUND seconds after its unit stopped holding quota;
- no quota's bound pods (sampled every second, from the pods themselves, whoever owns
  them; a job's pods still going after its unit stopped holding quota are the check
  above's) ask more than its max for longer than the pod bound;
- non-preemptible units (quota.scheduling.koordinator.sh/preemptible: "false") are
  admitted only within min: they hold no more than a quota's min (issue 29, item 4).
At the end: every job ended Succeed, every job has exactly its unit and every unit its
job (none orphaned, none missing), and, with one long job running in every quota, the
`status.used` the controller writes equals the sum of the units holding quota, parents
included.

    .venv/bin/python bench/chaos.py [--jobs 2000] [--quotas 20] [--kills 10] [--seed N]
    .venv/bin/python bench/chaos.py --control-plane kube [--apiserver-restarts 1] ...

With `--tenant-attacks`, a tenant of quotas of its own (a parent `tenants` and five
leaves, on nodes added for them) attacks during the storm, as issue 29 tells: it flips a
queued job's spec.runPolicy.suspend to false and leaves the annotation; it scales an
admitted job's Worker replicas past its quota's max; it creates a batch Job of 8 GPUs
whose controller ownerReference names a PyTorchJob that does not exist; it borrows with
non-preemptible jobs; it puts a job that can never fit at the head of a Block queue,
whose jobs behind it must still be admitted within the pod bound. The checks above say
whether any of it got past a max or a min; a tenant's own releases and suspensions are
not the controller's, and are not judged as such.

The seed (printed) makes the workload, the fault schedule and the injected errors
reproducible; the timing of a multi-process run is not, so a replay with the same
seed is the same storm, not the same interleaving. bench/chaos_soak.py runs it over
many seeds and shapes.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
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
import urllib.error
import uuid
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
from koordqueue.api.quantity import QuantityError, parse_resource_list
from koordqueue.apiserver import errors as api_errors
from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.store import ADDED, DELETED, MODIFIED, Event
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.kube.errors import AlreadyExists, KubeError, NotFound
from koordqueue.manifests import all_crds
from koordqueue.realcluster.cluster import NodeShape, RealCluster, install_crds
from koordqueue.simcluster.cluster import SimCluster

UNITS_KEY = f"{c.QUEUE_GROUP}/{c.QUEUE_UNIT_PLURAL}"
JOBS_KEY = f"{c.KUBEFLOW_GROUP}/{c.PYTORCH_JOB_PLURAL}"
QUOTAS_KEY = f"{c.QUOTA_GROUP}/{c.ELASTIC_QUOTA_PLURAL}"
HOLDING = frozenset(p.value for p in c.PHASES_HOLDING_QUOTA)
QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
LEASES = Resource("coordination.k8s.io", "v1", "leases")
NAMESPACE = "default"
SEED_MANIFESTS = Path(koordqueue.__file__).parent / "examples" / "seed.yaml"
log = logging.getLogger("chaos")
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
    min: dict[str, int] = field(default_factory=dict)


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
    pinned: bool = False  # admitted as non-preemptible (its unit's label)


@dataclass(frozen=True)
class _BoundPod:
    """A live pod bound to a node: the quota it counts in (its own quota label, else its
    PyTorchJob's), what it asks for, and its PyTorchJob (None: owned by something else)."""

    quota: str | None
    request: dict[str, int]
    job: str | None


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

    def __init__(self, used_window: float = USED_WINDOW, pod_bound: float = POD_BOUND,
                 over_max_bound: float | None = None) -> None:
        self.used_window = used_window
        self.pod_bound = pod_bound
        # How long a quota's bound pods may ask more than its max: a job that grew, or was
        # released by its tenant, is suspended again and its pods go within the pod bound.
        self.over_max_bound = pod_bound if over_max_bound is None else over_max_bound
        self.tenant_jobs: set[str] = set()  # jobs a tenant tampers with: their releases are not the controller's
        self.job_quota: dict[str, str] = {}  # PyTorchJob key -> the quota it names
        self.bound: dict[str, _BoundPod] = {}  # pod key -> a live pod bound to a node
        self.over_max_since: dict[str, float] = {}  # quota -> since when its bound pods ask more than its max
        self.pods_over_max_peak: dict[str, int] = {}  # quota -> the most GPUs its bound pods asked past max
        self.pinned: dict[str, dict[str, int]] = {}  # quota -> what non-preemptible units hold of it
        self._next_sample = 0.0
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
        self.pods_seen = 0
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

    def tick(self, now: float | None = None) -> None:
        """Time passes with no write (the bound pods are sampled every second all the same)."""
        try:
            self.now = time.monotonic() if now is None else now
            self._settle(self.now)
        except Exception as e:  # as in feed
            self.violations.append(f"checker failed on a tick: {e!r}")

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
            minimum = parse_resource_list((event.obj.get("spec") or {}).get("min") or {})
        except QuantityError:
            maximum, minimum = {}, {}
        parent = (meta.get("labels") or {}).get(c.LABEL_QUOTA_PARENT) or None
        old = self.quotas.get(meta["name"])
        quota = self.quotas[meta["name"]] = _Quota(parent, maximum, old.used if old else None, minimum)
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
            if unit.pinned and node is not None:
                self._pin(unit, key, rv, node, name)

    def _pin(self, unit: _Unit, key: str, rv: int, node: _Quota, name: str) -> None:
        """A non-preemptible unit is admitted: what such units hold of `name` stays within its min
        (they are never preempted: what they held past min would never go back to its lender)."""
        pinned = self.pinned.setdefault(name, {})
        for resource, amount in unit.request.items():
            pinned[resource] = pinned.get(resource, 0) + amount
        for resource in node.max:
            held, floor = pinned.get(resource, 0), node.min.get(resource, 0)
            if held > floor:
                self._violation(
                    unit.job, f"rv {rv}: non-preemptible units hold {held / 1000:g} {resource} of quota {name}, past "
                    f"its min {floor / 1000:g} (after the write of unit {key})")

    def _release_quota(self, unit: _Unit) -> None:
        for held in unit.held:
            held.end = self.now
            used = self.used.setdefault(held.quota, {})
            for resource, amount in unit.request.items():
                used[resource] = used.get(resource, 0) - amount
            if unit.pinned:
                pinned = self.pinned.setdefault(held.quota, {})
                for resource, amount in unit.request.items():
                    pinned[resource] = pinned.get(resource, 0) - amount
        unit.held = []

    def _settle(self, until: float) -> None:
        """Check the status.used writes and pod deadlines whose time has come."""
        window = self.used_window
        while self.used_writes and self.used_writes[0].at + window <= until:
            self._check_used(self.used_writes.popleft())
        while self.pod_deadlines and self.pod_deadlines[0][0] <= until:
            _, key, epoch = heapq.heappop(self.pod_deadlines)
            self._check_pods_gone(key, epoch)
        if self.now >= self._next_sample or until == math.inf:
            self._next_sample = self.now + 1.0
            self._sample_bound_pods()
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
            unit.pinned = (meta.get("labels") or {}).get(c.LABEL_PREEMPTIBLE, "").lower() == c.FALSE
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
            self.job_quota.pop(key, None)
            return
        quota = (event.obj["metadata"].get("labels") or {}).get(c.LABEL_QUOTA_NAME)
        if quota:
            self.job_quota[key] = quota
        suspended = _suspended(event.obj)
        was = self.suspended.get(key, True)
        self.suspended[key] = suspended
        if was == suspended:
            return
        self._trail(key, event.rv, "job suspended" if suspended else "job released")
        if key in self.tenant_jobs:
            if not suspended:
                self.ever_released.add(key)
            return  # a tenant's own writes: the bound pods and the quotas' max judge what came of them
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
        self._bind(pod, event)
        job = self.pod_owner.get(pod)
        if job is None:
            owner = next((ref for ref in meta.get("ownerReferences") or ()
                          if ref.get("controller") and ref.get("kind") == c.PYTORCH_JOB_KIND), None)
            if owner is None:
                return
            job = self.pod_owner[pod] = f"{meta.get('namespace', '')}/{owner.get('name', '')}"
            self.pods_seen += 1
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
            if job not in self.ever_released and job not in self.tenant_jobs:
                self._violation(job, f"rv {event.rv}: pod {pod} exists, but its job {job} was never released",
                                once=("never released", pod))
        unit = self.units.get(self._unit_key(job))
        if unit is not None and not unit.holding and self.now - unit.unheld_at > self.pod_bound:
            self._violation(job, f"rv {event.rv}: pod {pod} lives {self.now - unit.unheld_at:.0f} s after its "
                            f"job's unit stopped holding quota (bound {self.pod_bound:g} s)",
                            once=("pod outlives", pod, str(unit.epoch)))

    def _bind(self, pod: str, event: Event) -> None:
        """Keep `bound`: the live pods on nodes, whoever made them."""
        obj = event.obj
        meta = obj["metadata"]
        phase = (obj.get("status") or {}).get("phase")
        node = (obj.get("spec") or {}).get("nodeName")
        if event.type == DELETED or meta.get("deletionTimestamp") or phase in (c.POD_SUCCEEDED, c.POD_FAILED) \
                or not node:
            self.bound.pop(pod, None)
            return
        if pod in self.bound:
            return
        owner = next((ref for ref in meta.get("ownerReferences") or ()
                      if ref.get("controller") and ref.get("kind") == c.PYTORCH_JOB_KIND), None)
        job = f"{meta.get('namespace', '')}/{owner.get('name', '')}" if owner is not None else None
        quota = (meta.get("labels") or {}).get(c.LABEL_QUOTA_NAME) or (self.job_quota.get(job) if job else None)
        request: dict[str, int] = {}
        for container in (obj.get("spec") or {}).get("containers") or ():
            try:
                asked = parse_resource_list(((container.get("resources") or {}).get("requests")) or {})
            except QuantityError:
                continue
            for resource, amount in asked.items():
                request[resource] = request.get(resource, 0) + amount
        self.bound[pod] = _BoundPod(quota, request, job)

    def _sample_bound_pods(self) -> None:
        """What each quota's bound pods ask for now, against its max; said once a quota has
        been over for longer than `over_max_bound`. A released job's pods that are still going
        are left to the pod bound's own check."""
        asked: dict[str, dict[str, int]] = {}
        for pod in self.bound.values():
            if pod.quota is None:
                continue
            if pod.job is not None and pod.job not in self.tenant_jobs:
                unit = self.units.get(self._unit_key(pod.job))
                if unit is not None and not unit.holding and pod.job in self.ever_released \
                        and self.now - unit.unheld_at <= self.pod_bound:
                    continue
            for name in self._chain(pod.quota):
                used = asked.setdefault(name, {})
                for resource, amount in pod.request.items():
                    used[resource] = used.get(resource, 0) + amount
        for name, node in self.quotas.items():
            used = asked.get(name, {})
            over = {r: used.get(r, 0) for r, limit in node.max.items() if used.get(r, 0) > limit}
            if not over:
                self.over_max_since.pop(name, None)
                continue
            since = self.over_max_since.setdefault(name, self.now)
            past = (over.get(c.GPU, 0) - node.max.get(c.GPU, 0)) // 1000
            self.pods_over_max_peak[name] = max(self.pods_over_max_peak.get(name, 0), past)
            if self.now - since > self.over_max_bound:
                words = ", ".join(f"{amount / 1000:g} {r} (max {node.max[r] / 1000:g})" for r, amount in sorted(
                    over.items()))
                self._violation(None, f"quota {name}: its bound pods ask {words}, over its max for "
                                f"{self.now - since:.0f} s (bound {self.over_max_bound:g} s)",
                                once=("bound pods over max", name, f"{since:.3f}"))

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
    """As the training operator reads it: runPolicy.suspend alone (the annotation left on a
    job whose field is false holds none of its pods)."""
    run_policy = (job.get("spec") or {}).get("runPolicy") or {}
    return run_policy.get("suspend") is True



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
    watch_drops: bool = True
    drop_watches_every: tuple[float, float] = (2.0, 5.0)
    compactions: bool = True
    compact_every: tuple[float, float] = (5.0, 12.0)
    tail_runtime: float = 12.0  # the long jobs that are running when status.used is compared
    # Leader election of the controller (duration, renew deadline, retry period): the
    # defaults of the chart; a replacement leads once the killed one's lease runs out.
    lease: tuple[float, float, float] = (10.0, 7.0, 2.0)
    control_plane: str = "embedded"  # or "kube": kube-apiserver, etcd, kwok and the training operator
    apiserver_restarts: int = 1  # kube-apiserver SIGKILLed and started again (kube only)
    tenant_attacks: bool = False  # a tenant of quotas of its own attacks them during the storm (the module doc)
    attacks: tuple[str, ...] = ()  # which ones (empty: all of ATTACKS)
    attack_every: tuple[float, float] = (1.0, 4.0)  # seconds between two attacks
    # How long a quota's bound pods may ask more than its max; None: the checker's pod bound.
    over_max_bound: float | None = None
    timeout: float = 1800.0  # seconds the storm and the checks after it may take
    state_dir: Path | None = None
    verbose: bool = True


@dataclass
class ChaosReport:
    seed: int
    control_plane: str
    jobs: int
    quotas: int
    seconds: float
    requests: int
    faults: Counter[str]
    restarts: int
    writes_checked: int
    used_checked: int
    pods: int
    admissions: int
    releases: int
    suspensions: int
    peak_gpus: dict[str, int]
    violations: list[str] = field(default_factory=list)
    over_max_peak: dict[str, int] = field(default_factory=dict)  # quota -> most GPUs its bound pods asked past max

    def figures(self) -> str:
        lines = [f"seed: {self.seed}",
                 f"control plane: {self.control_plane}",
                 f"jobs: {self.jobs} over {self.quotas} quotas, all checked in {self.seconds:.0f} s"]
        if self.control_plane == "kube":
            lines += [
                "errors injected: none (kube-apiserver has no error injection; that is the embedded server's "
                "test controls): the faults here are kube-apiserver restarts and controller SIGKILLs",
                f"kube-apiserver restarts (SIGKILL, etcd keeps the state): {self.faults['apiserver restarts']}, "
                f"down {self.faults['apiserver down seconds']:.0f} s in all",
            ]
        else:
            injected = sum(self.faults[k] for k in ("500", "429", "409"))
            share = injected / self.requests if self.requests else 0.0
            lines += [
                f"requests: {self.requests}, errors injected: {injected} ({share:.1%}): "
                f"500 x{self.faults['500']}, 429 x{self.faults['429']}, 409 x{self.faults['409']}",
                f"watch drops: {self.faults['watch drops']} ({self.faults['watches dropped']} streams), "
                f"compactions (410): {self.faults['compactions']}",
            ]
        attacks = {k.removeprefix("attack: "): n for k, n in sorted(self.faults.items()) if k.startswith("attack: ")}
        if attacks:
            past = {q: n for q, n in sorted(self.over_max_peak.items()) if n}
            lines.append(f"tenant attacks: {', '.join(f'{k} x{n}' for k, n in attacks.items())}; bound pods past a "
                         f"max at most (GPUs): {past or 'none'}")
        lines += [
            f"controller SIGKILLs: {self.faults['sigkill']}, restarts: {self.restarts}",
            f"writes checked: {self.writes_checked} (status.used writes: {self.used_checked}, pods: {self.pods}), "
            f"admissions: {self.admissions}, releases: {self.releases}, suspensions: {self.suspensions}",
            f"violations: {len(self.violations)}",
        ]
        lines += [f"  - {v}" for v in self.violations[:50]]
        if len(self.violations) > 50:
            lines.append(f"  ... and {len(self.violations) - 50} more")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "control_plane": self.control_plane, "jobs": self.jobs, "quotas": self.quotas,
                "seconds": round(self.seconds, 1), "requests": self.requests, "faults": dict(self.faults),
                "restarts": self.restarts, "writes_checked": self.writes_checked, "used_checked": self.used_checked,
                "pods": self.pods, "over_max_peak": self.over_max_peak, "violations": self.violations}


def quota_manifests(config: ChaosConfig, rng: random.Random) -> list[dict[str, Any]]:
    """`parents` parent quotas of `gpus_per_parent` GPUs, and `quotas` leaves spread under them."""
    eq = _quota_manifest
    leaves: list[list[tuple[str, int, int]]] = [[] for _ in range(config.parents)]
    for i in range(config.quotas):
        leaves[i % config.parents].append((f"team-{i:02d}", rng.randint(1, 4), rng.choice([8, 12, 16])))
    out = []
    for p, children in enumerate(leaves):
        parent = f"org-{p}"
        min_sum = sum(m for _, m, _ in children)
        if min_sum > config.gpus_per_parent:
            # Many children (20 quotas under 2 parents): their mins, scaled down, must fit in the
            # parent's max, or the parent is refused (min > max) and no job of its children runs.
            children = [(name, max(1, m * config.gpus_per_parent // min_sum), x) for name, m, x in children]
            min_sum = sum(m for _, m, _ in children)
        out.append(eq(parent, max(min_sum, config.gpus_per_parent // 2), config.gpus_per_parent,
                      {c.LABEL_QUOTA_IS_PARENT: c.TRUE}))
        for name, min_gpu, max_gpu in children:
            policy = rng.choice([c.QueuePolicy.PRIORITY, c.QueuePolicy.PRIORITY, c.QueuePolicy.BLOCK])
            out.append(eq(name, min_gpu, max_gpu,
                          {c.LABEL_QUOTA_PARENT: parent, c.LABEL_QUEUE_POLICY: policy.value}))
    return out


def node_count(config: ChaosConfig) -> int:
    """Nodes of 8 GPUs: the workload's parents' GPUs, and the tenant's when it attacks."""
    return config.parents * config.gpus_per_parent // 8 + (TENANT_NODES if config.tenant_attacks else 0)


def job_manifest(name: str, quota: str, gpus_per_pod: int, workers: int, runtime: float,
                 priority: int) -> dict[str, Any]:
    """The seed's PyTorchJob, resized, created suspended (as the admission webhook leaves it).
    Its run time is on the job (our simulated operator reads it there) and on its pod
    templates (the real training operator copies those to its pods, where kwok reads it)."""
    job: dict[str, Any] = copy.deepcopy([d for d in yaml.safe_load_all(SEED_MANIFESTS.read_text()) if d][2])
    duration = f"{runtime:.2f}"
    job["metadata"] = {"name": name, "namespace": NAMESPACE,
                       "labels": {c.LABEL_QUOTA_NAME: quota},
                       "annotations": {c.ANNOTATION_SUSPEND: c.TRUE, c.ANNOTATION_PRIORITY: str(priority),
                                       c.ANNOTATION_SIM_DURATION: duration}}
    job["spec"].setdefault("runPolicy", {})["suspend"] = True
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    if workers == 0:
        del specs["Worker"]
    for role in specs.values():
        role["template"].setdefault("metadata", {}).setdefault("annotations", {})[c.ANNOTATION_SIM_DURATION] = duration
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


# --- the tenant attacks (issue 29) --------------------------------------------------------

ATTACKS = ("flip-suspend", "scale-up", "forged-owner", "queued-owner", "non-preemptible", "never-fit")
TENANTS = "tenants"  # the tenant's parent quota
# Its leaves: (min GPUs, max GPUs, policy), one an attack, so that each is judged alone.
TENANT_QUOTAS = {"tenant-flip": (1, 4, c.QueuePolicy.PRIORITY), "tenant-grow": (1, 4, c.QueuePolicy.PRIORITY),
                 "tenant-forge": (1, 4, c.QueuePolicy.PRIORITY), "tenant-owner": (1, 4, c.QueuePolicy.PRIORITY),
                 "tenant-np": (2, 8, c.QueuePolicy.PRIORITY),
                 "tenant-block": (1, 4, c.QueuePolicy.BLOCK)}
TENANT_NODES = 5  # of 8 GPUs, added for the tenant: what it gets past a max is bound, not Pending
BATCH_JOBS = Resource("batch", "v1", c.BATCH_JOB_PLURAL)
TENANT_PREFIX = "atk-"  # the names of what the tenant creates (its units' too)


def _quota_manifest(name: str, min_gpu: int, max_gpu: int, labels: dict[str, str]) -> dict[str, Any]:
    def amounts(gpus: int) -> dict[str, str]:
        return {c.GPU: str(gpus), "cpu": str(gpus * 4), "memory": f"{gpus * 8}Gi"}

    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": {"min": amounts(min_gpu), "max": amounts(max_gpu)}}


def tenant_quota_manifests() -> list[dict[str, Any]]:
    mins = sum(m for m, _, _ in TENANT_QUOTAS.values())
    out = [_quota_manifest(TENANTS, mins, sum(x for _, x, _ in TENANT_QUOTAS.values()),
                           {c.LABEL_QUOTA_IS_PARENT: c.TRUE})]
    for name, (min_gpu, max_gpu, policy) in TENANT_QUOTAS.items():
        out.append(_quota_manifest(name, min_gpu, max_gpu,
                                   {c.LABEL_QUOTA_PARENT: TENANTS, c.LABEL_QUEUE_POLICY: policy.value}))
    return out


def forged_batch_job(name: str, quota: str, pods: int, runtime: float, owner_uid: str,
                     owner: str | None = None) -> dict[str, Any]:
    """A batch Job whose controller ownerReference names a PyTorchJob (`owner`, by default one
    that does not exist) so that it passes for a training job's child; not suspended (a
    tenant does not ask to be)."""
    duration = {c.ANNOTATION_SIM_DURATION: f"{runtime:.2f}"}
    each = {"cpu": "1", "memory": "1Gi", c.GPU: "1"}
    return {"apiVersion": c.BATCH_API_VERSION, "kind": c.BATCH_JOB_KIND,
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {c.LABEL_QUOTA_NAME: quota},
                         "annotations": dict(duration),
                         "ownerReferences": [{"apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.PYTORCH_JOB_KIND,
                                              "name": owner or f"{name}-ghost", "uid": owner_uid,
                                              "controller": True}]},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": {"metadata": {"labels": {c.LABEL_QUOTA_NAME: quota}, "annotations": dict(duration)},
                                  "spec": {"restartPolicy": "Never", "containers": [
                                      {"name": "main", "image": "busybox",
                                       "resources": {"requests": dict(each), "limits": dict(each)}}]}}}}


class TenantAttacks:
    """A tenant with write access to jobs in its namespace tries to get past its quotas while
    the storm goes on: each attack in a leaf of its own, one after another in a drawn order.
    An attack acts, then waits as long as the checker gives a quota's bound pods to come back
    within max, so that what got past is seen; the checker judges (the module doc). What
    cannot be set up, and Block jobs not admitted behind a never-fit one, are problems."""

    def __init__(self, run: ChaosRun, client: KubeClient) -> None:
        self.run = run
        self.client = client
        self.grace = run.checker.over_max_bound
        self.bound = 2 * run.checker.pod_bound  # to set an attack up: a kill, a lease, a sync
        self.runtime = self.grace + 30.0  # the pods of what a tenant gets past a max outlast the grace
        self.made: list[tuple[Resource, str]] = []  # what the tenant created, to delete at the end

    async def run_all(self, kinds: tuple[str, ...], stop: asyncio.Event) -> None:
        rng = self.run.rng
        order = rng.sample(list(kinds), len(kinds))
        tasks = []
        for kind in order:
            if await _wait(stop, rng.uniform(*self.run.config.attack_every)):
                break
            tasks.append(asyncio.create_task(self._one(kind), name=f"attack {kind}"))
        await asyncio.gather(*tasks)

    async def _one(self, kind: str) -> None:
        try:
            await {"flip-suspend": self._flip, "scale-up": self._grow, "forged-owner": self._forge,
                   "queued-owner": self._queued_owner, "non-preemptible": self._non_preemptible,
                   "never-fit": self._never_fit}[kind]()
        except TimeoutError as e:
            self.run.problems.append(f"tenant attack {kind}: {e}")

    def _did(self, kind: str) -> None:
        self.run.faults[f"attack: {kind}"] += 1
        self.run._say(f"tenant attack: {kind}")

    async def _create(self, resource: Resource, obj: dict[str, Any], tampered: bool = False) -> str:
        name = obj["metadata"]["name"]
        if tampered:
            self.run.checker.tenant_jobs.add(f"{NAMESPACE}/{name}")
        self.made.append((resource, name))
        while True:
            try:
                await self.client.create(resource, obj, namespace=NAMESPACE)
                return f"{NAMESPACE}/{name}-{c.UNIT_SUFFIX_PYTORCH}"
            except AlreadyExists:
                return f"{NAMESPACE}/{name}-{c.UNIT_SUFFIX_PYTORCH}"
            except KubeError:
                await asyncio.sleep(0.2)  # an injected error, or kube-apiserver restarting

    async def _patch(self, resource: Resource, name: str, patch: dict[str, Any]) -> None:
        while True:
            try:
                await self.client.patch(resource, name, patch, namespace=NAMESPACE)
                return
            except KubeError:
                await asyncio.sleep(0.2)

    async def _until(self, what: str, predicate: Callable[[], bool], seconds: float | None = None) -> None:
        deadline = time.monotonic() + (self.bound if seconds is None else seconds)
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not within {self.bound if seconds is None else seconds:g} s")
            await asyncio.sleep(0.2)

    def _phase(self, unit: str) -> str:
        return self.run.phases.get(unit, "")

    async def _observe(self) -> None:
        """Long enough for the checker to see a quota's bound pods past its max for too long."""
        await asyncio.sleep(self.grace + 5.0)

    async def _flip(self) -> None:
        """A queued job's own spec.runPolicy.suspend set to false, the annotation left (issue 29, item 1)."""
        quota = "tenant-flip"
        filler = await self._create(JOBS, job_manifest("atk-flip-filler", quota, 4, 0, self.runtime, 5))
        await self._until(f"{filler} admitted in an empty quota", lambda: self._phase(filler) in HOLDING)
        queued = await self._create(JOBS, job_manifest("atk-flip-queued", quota, 4, 0, self.runtime, 5), tampered=True)
        await self._until(f"{queued} queued behind {filler}", lambda: self._phase(queued) == c.Phase.ENQUEUED)
        await self._patch(JOBS, "atk-flip-queued", {"spec": {"runPolicy": {"suspend": False}}})
        self._did("flip-suspend")
        await self._observe()

    async def _grow(self) -> None:
        """An admitted job's Worker replicas scaled from 1 to 7: 8 GPUs in a quota of max 4 (item 2)."""
        unit = await self._create(JOBS, job_manifest("atk-grow", "tenant-grow", 1, 1, self.runtime, 5), tampered=True)
        await self._until(f"{unit} running", lambda: self._phase(unit) == c.Phase.RUNNING)
        await self._patch(JOBS, "atk-grow", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 7}}}})
        self._did("scale-up")
        await self._observe()

    async def _forge(self) -> None:
        """A batch Job of 8 GPUs in a quota of max 4, 'owned' by a PyTorchJob that does not exist (item 3)."""
        uid = str(uuid.UUID(int=self.run.rng.getrandbits(128)))
        await self._create(BATCH_JOBS, forged_batch_job("atk-forge", "tenant-forge", 8, self.runtime, uid),
                           tampered=True)
        self._did("forged-owner")
        await self._observe()

    async def _queued_owner(self) -> None:
        """The same Job 'owned' by the tenant's own PyTorchJob, which exists (so that no garbage
        collector takes the Job away) but is queued for good: a child of a job that holds no
        quota runs on none (item 3: Kueue suspends a child whose parent is not admitted)."""
        quota = "tenant-owner"
        parent = await self._create(JOBS, job_manifest("atk-owner", quota, 8, 0, 3600.0, 5))
        await self._until(f"{parent} queued", lambda: self._phase(parent) == c.Phase.ENQUEUED)
        while True:
            try:
                uid = (await self.client.get(JOBS, "atk-owner", namespace=NAMESPACE))["metadata"]["uid"]
                break
            except KubeError:
                await asyncio.sleep(0.2)
        await self._create(BATCH_JOBS, forged_batch_job("atk-owned", quota, 8, self.runtime, uid, "atk-owner"),
                           tampered=True)
        self._did("queued-owner")
        await self._observe()

    async def _non_preemptible(self) -> None:
        """Two non-preemptible jobs of its quota's whole min each: the second would borrow what
        is never given back (item 4). The checker says whether such units ever held past min."""
        units = []
        for i in (1, 2):
            job = job_manifest(f"atk-np-{i}", "tenant-np", 2, 0, 5.0, 5)
            job["metadata"]["labels"][c.LABEL_PREEMPTIBLE] = c.FALSE
            units.append(await self._create(JOBS, job))
        self._did("non-preemptible")
        await self._until("both non-preemptible jobs run in turn", lambda: all(
            self._phase(u) == c.Phase.SUCCEED for u in units), self.bound + 20.0)

    async def _never_fit(self) -> None:
        """A job of 8 GPUs at the head of a Block queue of max 4; jobs behind it must still go (item 9)."""
        quota = "tenant-block"
        huge = await self._create(JOBS, job_manifest("atk-huge", quota, 8, 0, 3600.0, 9))
        await self._until(f"{huge} queued", lambda: self._phase(huge) == c.Phase.ENQUEUED)
        self._did("never-fit")
        behind = [await self._create(JOBS, job_manifest(f"atk-behind-{i}", quota, 1, 0, 1.0, 1)) for i in (1, 2)]
        try:
            await self._until(f"{', '.join(behind)} behind the never-fit {huge} admitted (Block queue {quota})",
                              lambda: all(self._phase(u) in HOLDING or self._phase(u) == c.Phase.SUCCEED
                                          for u in behind))
        except TimeoutError as e:
            raise TimeoutError(f"admission stalled: {e}") from None

    async def end(self) -> None:
        """Delete what the tenant made and wait until its units are gone (the end checks count units)."""
        for resource, name in self.made:
            while True:
                try:
                    await self.client.delete(resource, name, namespace=NAMESPACE, propagation_policy="Background")
                    break
                except NotFound:
                    break
                except KubeError:
                    await asyncio.sleep(0.2)
        prefix = f"{NAMESPACE}/{TENANT_PREFIX}"
        try:
            await self._until("the tenant's units gone with its jobs", lambda: not any(
                key.startswith(prefix) for key in self.run.phases))
        except TimeoutError as e:
            self.run.problems.append(f"tenant attacks: {e}")


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


# --- the control planes ----------------------------------------------------------------------

Listener = Callable[..., None]  # (event) from the embedded store, (event, now) from etcd


class EmbeddedPlane:
    """The embedded API server and the simulated cluster in this process. The checker is a
    listener on the server's store: it sees every write as it is made. The server fails a
    share of requests, drops every watch every few seconds and forgets its history."""

    name = "embedded"

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.config = run.config
        self.server: APIServer | None = None
        self.sim: SimCluster | None = None
        self.client: KubeClient | None = None

    @property
    def kubeconfig(self) -> Path:
        assert self.server is not None
        return self.server.kubeconfig_path

    async def start(self, state: Path, listeners: list[Listener]) -> None:
        self.server = APIServer(state / "api", crds=all_crds(), seed=self.run.seed)
        await self.server.start()
        self.server.store.listeners.extend(listeners)
        self._count_requests(self.server)

    async def start_cluster(self, client: KubeClient) -> None:
        self.client = client
        self.sim = SimCluster(client, nodes=node_count(self.config), gpus_per_node=8)
        await self.sim.start()

    async def stop_cluster(self) -> None:
        """Stop the simulated cluster while its client is open: its webhook unregisters itself."""
        if self.sim is not None:
            await self.sim.stop()
            self.sim = None

    async def stop(self) -> None:
        await self.stop_cluster()
        if self.server is not None:
            await self.server.stop()

    def _count_requests(self, server: APIServer) -> None:
        """Wrap the server's error injection to count requests and the errors it injects."""
        check = server.controls.check

        def counting(verb: str, rt: Any, name: str) -> None:
            self.run.requests += 1
            try:
                check(verb, rt, name)
            except api_errors.APIError as e:
                self.run.faults[str(e.code)] += 1
                raise

        server.controls.check = counting  # type: ignore[method-assign]

    def storms(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """Errors injected, watches dropped and history compacted, until `stop` is set."""
        assert self.server is not None
        # 2 % each of 500 and 429 on every request, 409 on 2 % of writes (more than half the
        # requests): about 5 % in all, the share measured and printed.
        for code, verbs in ((500, None), (429, None), (409, {"update", "patch"})):
            self.server.controls.inject_errors(code, rate=self.config.error_rate * 0.4, verbs=verbs, retry_after=1)
        tasks = []
        if self.config.watch_drops:
            tasks.append(asyncio.create_task(self._drop_watches(self.server, stop)))
        if self.config.compactions:
            tasks.append(asyncio.create_task(self._compact(self.server, stop)))
        return tasks

    def calm(self) -> None:
        assert self.server is not None
        self.server.controls.clear_errors()

    async def _drop_watches(self, server: APIServer, stop: asyncio.Event) -> None:
        while not await _wait(stop, self.run.rng.uniform(*self.config.drop_watches_every)):
            self.run.faults["watch drops"] += 1
            self.run.faults["watches dropped"] += server.controls.drop_watches()

    async def _compact(self, server: APIServer, stop: asyncio.Event) -> None:
        while not await _wait(stop, self.run.rng.uniform(*self.config.compact_every)):
            server.controls.compact()
            self.run.faults["compactions"] += 1

    async def objects(self, key: str) -> list[dict[str, Any]]:
        assert self.server is not None
        return self.server.store.items(key, NAMESPACE)

    async def caught_up(self) -> None:
        """The checker has seen every write so far (it sees them as they are made)."""


class KubePlane:
    """The real control plane (kube-apiserver, etcd, kube-controller-manager, kube-scheduler,
    kwok's fake GPU nodes, the Kubeflow training operator). The checker reads every write
    from etcd's own history, through its JSON gateway: kube-apiserver never compacts it
    (`--etcd-compaction-interval=0`) and stores objects as JSON, and a restart of
    kube-apiserver does not disturb a watch on etcd. kube-apiserver is SIGKILLed and
    started again at random moments; it has no error injection."""

    name = "kube"

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.config = run.config
        self.cluster: RealCluster | None = None
        self.history: EtcdHistory | None = None
        self.client: KubeClient | None = None
        self.down = 0.0  # seconds kube-apiserver was down so far: the checker's clock stops meanwhile
        self.restarting_since: float | None = None
        self.syncs = 0

    @property
    def kubeconfig(self) -> Path:
        assert self.cluster is not None
        return self.cluster.kubeconfig_path

    def clock(self) -> float:
        """Time with kube-apiserver's restarts taken out (it stands still meanwhile): pods cannot
        be deleted while it is down. Never goes back."""
        now = time.monotonic() if self.restarting_since is None else self.restarting_since
        return now - self.down

    async def start(self, state: Path, listeners: list[Listener]) -> None:
        nodes = NodeShape(count=node_count(self.config), gpus=8)
        self.cluster = RealCluster(state / "kube", nodes=nodes, audit=False, full_history=True)
        try:
            await asyncio.to_thread(self.cluster.start, self.run._say)
            await asyncio.to_thread(install_crds, self.cluster)
            await self._served(f"/apis/{c.QUOTA_GROUP}/{c.QUOTA_VERSION}", c.ELASTIC_QUOTA_PLURAL)
            await self._served(f"/apis/{c.QUEUE_GROUP}/{c.QUEUE_VERSION}", c.QUEUE_UNIT_PLURAL)
        except BaseException:
            await asyncio.to_thread(self.cluster.stop)
            raise
        self.history = EtcdHistory(f"http://127.0.0.1:{self.cluster.etcd_port}", listeners, self.clock)
        self.history.start()

    async def _served(self, path: str, plural: str, timeout: float = 60.0) -> None:
        """Wait until kube-apiserver serves a CRD just created (it takes a moment to establish)."""
        assert self.cluster is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                found = await asyncio.to_thread(self.cluster.request, "GET", path)
                if plural in {r["name"] for r in found["resources"]}:
                    return
            except urllib.error.HTTPError:
                pass
            await asyncio.sleep(0.2)
        raise TimeoutError(f"{path}/{plural} not served within {timeout:g} s")

    async def start_cluster(self, client: KubeClient) -> None:
        self.client = client

    async def stop_cluster(self) -> None:
        pass  # the real cluster's components are stopped with it

    async def stop(self) -> None:
        if self.history is not None:
            await self.history.stop()
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.stop)

    def storms(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        return []  # kube-apiserver's restarts are scheduled with the kills (ChaosRun._storm)

    def calm(self) -> None:
        pass

    async def restart_apiserver(self) -> float:
        """SIGKILL kube-apiserver and start it again; the seconds it was down."""
        assert self.cluster is not None
        self.restarting_since = started = time.monotonic()
        try:
            await asyncio.to_thread(self.cluster.restart_apiserver, True)
        finally:
            down = time.monotonic() - started
            self.down += down
            self.restarting_since = None
        return down

    async def objects(self, key: str) -> list[dict[str, Any]]:
        assert self.client is not None
        resource = {QUOTAS_KEY: QUOTAS, UNITS_KEY: UNITS, JOBS_KEY: JOBS}[key]
        return list((await self.client.list_all(resource, namespace=NAMESPACE)).items)

    async def caught_up(self) -> None:
        """Wait until the checker has seen every write made so far: a Lease written now comes
        after them in etcd's history."""
        assert self.client is not None and self.history is not None
        self.syncs += 1
        name = f"chaos-sync-{self.syncs}"
        seen = self.history.expect(f"/registry/leases/{NAMESPACE}/{name}")
        await self.client.create(LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                          "metadata": {"name": name, "namespace": NAMESPACE}}, namespace=NAMESPACE)
        try:
            await asyncio.wait_for(seen.wait(), 60)
        except TimeoutError:
            raise TimeoutError(f"etcd's history did not bring Lease {name} within 60 s (last revision seen: "
                               f"{self.history.revision})") from None


class EtcdHistory:
    """Every write to the objects the checker reads, in etcd's order, from revision 1, fed
    to `listeners` as the embedded store's events: one watch (with the previous version of
    each object) on the keys from kubeflow.org's to scheduling.x-k8s.io's, which holds
    PyTorchJobs, pods, ElasticQuotas and QueueUnits (and leases, used to sync), resumed
    after the last revision seen should the stream end."""

    RANGE = ("/registry/kubeflow.org/", "/registry/scheduling.x-k8s.io0")
    KEYS = {f"/registry/{c.KUBEFLOW_GROUP}/{c.PYTORCH_JOB_PLURAL}/": JOBS_KEY,
            "/registry/pods/": PODS_KEY,
            f"/registry/{c.QUOTA_GROUP}/{c.ELASTIC_QUOTA_PLURAL}/": QUOTAS_KEY,
            f"/registry/{c.QUEUE_GROUP}/{c.QUEUE_UNIT_PLURAL}/": UNITS_KEY}

    def __init__(self, url: str, listeners: list[Listener], clock: Callable[[], float]) -> None:
        self.url = url
        self.listeners = listeners
        self.clock = clock
        self.revision = 0  # the last one seen
        self.events = 0
        self.undecodable = 0
        self._keys_seen: dict[str, asyncio.Event] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="etcd-history")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def expect(self, key: str) -> asyncio.Event:
        """An event set once a write of `key` (not yet made) is seen."""
        return self._keys_seen.setdefault(key, asyncio.Event())

    async def _run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as session:
            while True:
                request = {"create_request": {
                    "key": _b64(self.RANGE[0]), "range_end": _b64(self.RANGE[1]),
                    "start_revision": str(self.revision + 1), "prev_kv": True}}
                try:
                    async with session.post(f"{self.url}/v3/watch", json=request) as response:
                        response.raise_for_status()
                        buffer = b""
                        decoder = json.JSONDecoder()
                        async for chunk in response.content.iter_any():
                            buffer += chunk
                            text = buffer.decode(errors="replace")
                            position = 0
                            while True:
                                while position < len(text) and text[position].isspace():
                                    position += 1
                                try:
                                    message, end = decoder.raw_decode(text, position)
                                except json.JSONDecodeError:
                                    break
                                self._message(message)
                                position = end
                            buffer = text[position:].encode()
                except aiohttp.ClientError as e:
                    log.warning("etcd watch ended (%s); resuming after revision %d", e, self.revision)
                await asyncio.sleep(0.5)

    def _message(self, message: dict[str, Any]) -> None:
        result = message.get("result") or {}
        if "error" in message:
            raise RuntimeError(f"etcd watch failed: {message['error']}")
        for event in result.get("events") or ():
            self._event(event)

    def _event(self, raw: dict[str, Any]) -> None:
        kv = raw.get("kv") or {}
        revision = int(kv.get("mod_revision") or 0)
        if revision <= self.revision:
            return  # seen before the stream was resumed
        self.revision = revision
        key = base64.b64decode(kv.get("key") or "").decode()
        waiting = self._keys_seen.get(key)
        if waiting is not None:
            waiting.set()
        store_key = next((k for prefix, k in self.KEYS.items() if key.startswith(prefix)), None)
        if store_key is None:
            return
        prev = raw.get("prev_kv")
        try:
            old = json.loads(base64.b64decode(prev["value"])) if prev else None
            if raw.get("type") == "DELETE":
                if old is None:
                    self.undecodable += 1
                    return
                event = Event(revision, store_key, DELETED, old, old)
            else:
                obj = json.loads(base64.b64decode(kv.get("value") or ""))
                event = Event(revision, store_key, MODIFIED if old is not None else ADDED, obj, old)
        except ValueError:  # not JSON: kube-apiserver stores this one as protobuf
            self.undecodable += 1
            return
        self.events += 1
        now = self.clock()
        for listener in self.listeners:
            listener(event, now)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- the run -----------------------------------------------------------------------------


class ChaosRun:
    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**31)
        self.rng = random.Random(self.seed)
        self.checker = HistoryChecker(
            pod_bound=max(POD_BOUND, 2 * config.lease[0] + 20),  # a killed leader's lease, then a sync
            over_max_bound=config.over_max_bound)
        self.faults: Counter[str] = Counter()
        self.requests = 0
        self.phases: dict[str, str] = {}  # unit key -> phase, for progress
        self.problems: list[str] = []
        self.plane: EmbeddedPlane | KubePlane = KubePlane(self) if config.control_plane == "kube" \
            else EmbeddedPlane(self)

    def _say(self, text: str) -> None:
        if self.config.verbose:
            print(f"[chaos {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def _track_phases(self, event: Event, now: float | None = None) -> None:
        if event.key == UNITS_KEY:
            key = _key(event.obj)
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
        config, plane = self.config, self.plane
        started = time.monotonic()
        controller: Controller | None = None
        try:
            await plane.start(state, [self.checker.feed, self._track_phases])
            controller = Controller(plane.kubeconfig, state / "controller.log", config.lease)
            async with KubeClient(load_config(str(plane.kubeconfig)), qps=2000, burst=4000) as client:
                await plane.start_cluster(client)
                try:
                    await self._storm(client, controller, started)
                    await plane.caught_up()
                except TimeoutError as e:
                    self.problems.append(str(e) or "timed out")
                finally:
                    controller.stop()
                    await plane.stop_cluster()
        finally:
            await plane.stop()
            self.checker.finish(plane.clock() if isinstance(plane, KubePlane) else None)
        if self.problems and config.verbose:
            log = (state / "controller.log").read_text(errors="replace").splitlines()
            self._say("controller log, last lines:\n" + "\n".join(log[-30:]))
        return ChaosReport(
            seed=self.seed, control_plane=plane.name, jobs=config.jobs + config.quotas, quotas=config.quotas,
            seconds=time.monotonic() - started, requests=self.requests, faults=self.faults,
            restarts=controller.starts - 1 if controller else 0, writes_checked=self.checker.writes,
            used_checked=self.checker.used_checked, pods=self.checker.pods_seen, admissions=self.checker.admissions,
            releases=self.checker.releases, suspensions=self.checker.suspensions,
            peak_gpus=dict(self.checker.peak_gpus), violations=self.checker.violations + self.problems,
            over_max_peak=dict(self.checker.pods_over_max_peak))

    async def _storm(self, client: KubeClient, controller: Controller, started: float) -> None:
        config, rng, plane = self.config, self.rng, self.plane
        quotas = quota_manifests(config, rng)
        for obj in quotas + (tenant_quota_manifests() if config.tenant_attacks else []):
            await client.create(QUOTAS, obj, namespace=NAMESPACE)
        leaves = [q["metadata"]["name"] for q in quotas if c.LABEL_QUOTA_PARENT in q["metadata"]["labels"]]
        jobs = workload(config, rng, leaves)
        units = {f"{NAMESPACE}/{j['metadata']['name']}-{c.UNIT_SUFFIX_PYTORCH}" for j in jobs}
        # Kill at random points of the run: when a drawn share of the jobs is done, plus a jitter;
        # on the real control plane, restart kube-apiserver likewise.
        faults = sorted((rng.uniform(0.05, 0.9), "kill") for _ in range(config.kills))
        if isinstance(plane, KubePlane):
            faults = sorted(faults + [(rng.uniform(0.1, 0.8), "restart") for _ in range(config.apiserver_restarts)])
        deadline = time.monotonic() + config.timeout  # (the control plane is up by now)
        controller.start()
        self._say(f"seed {self.seed}: {len(jobs)} jobs over {len(leaves)} quotas on the {plane.name} control plane, "
                  f"{config.kills} kills" + (f" and {config.apiserver_restarts} kube-apiserver restarts"
                                             if isinstance(plane, KubePlane) else "") + " planned")
        stop = asyncio.Event()
        storms = plane.storms(stop)
        storms.append(asyncio.create_task(self._tick(stop)))
        attacks = TenantAttacks(self, client) if config.tenant_attacks else None
        attacking = asyncio.create_task(attacks.run_all(config.attacks or ATTACKS, stop)) if attacks else None
        creating = asyncio.create_task(self._create(client, jobs))
        session = aiohttp.ClientSession()
        try:
            for share, fault in faults:
                while self.succeeded(units) < share * len(jobs) or \
                        (fault == "kill" and not await controller.leading(session)):
                    self._check_deadline(deadline, units, f"the next {fault}")
                    await asyncio.sleep(0.1)
                await asyncio.sleep(rng.uniform(0.0, 1.0))
                if fault == "restart" and isinstance(plane, KubePlane):
                    down = await plane.restart_apiserver()
                    self.faults["apiserver restarts"] += 1
                    self.faults["apiserver down seconds"] += round(down)
                    self._say(f"kube-apiserver restart {self.faults['apiserver restarts']} at "
                              f"{self.succeeded(units)}/{len(jobs)} done: down {down:.1f} s")
                    continue
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
            if attacking is not None:
                await attacking  # each attack ends within its bounds
        finally:
            await session.close()
            stop.set()
            creating.cancel()
            if attacking is not None and not attacking.done():
                attacking.cancel()
            await asyncio.gather(creating, *storms, *([attacking] if attacking else []), return_exceptions=True)
            plane.calm()
        if attacks is not None:
            await attacks.end()
        await self._check_objects(jobs)
        await self._check_used(client, leaves, deadline)

    async def _tick(self, stop: asyncio.Event) -> None:
        """The checker's clock goes on between writes (it samples the bound pods every second)."""
        plane = self.plane
        while not await _wait(stop, 1.0):
            self.checker.tick(plane.clock() if isinstance(plane, KubePlane) else None)

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
            except KubeError:
                await asyncio.sleep(0.1)  # an injected 500 or 409, or kube-apiserver restarting

    async def _check_objects(self, jobs: list[dict[str, Any]]) -> None:
        """Every job Succeeded with its one unit Succeed; every unit owned by a job that exists."""
        stored_jobs = {obj["metadata"]["name"]: obj for obj in await self.plane.objects(JOBS_KEY)}
        stored_units = {obj["metadata"]["name"]: obj for obj in await self.plane.objects(UNITS_KEY)}
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

    async def _check_used(self, client: KubeClient, leaves: list[str], deadline: float) -> None:
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
            await self.plane.caught_up()
            expected = self.checker.holding_usage()
            written = {}
            for obj in await self.plane.objects(QUOTAS_KEY):
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
        await self._check_objects(tail)


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
    parser.add_argument("--control-plane", choices=("embedded", "kube"), default="embedded",
                        help="kube: the real control plane (built with `make e2e-tools`)")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--quotas", type=int, default=20)
    parser.add_argument("--parents", type=int, default=4)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--apiserver-restarts", type=int, default=1, help="kube: kube-apiserver SIGKILLed and "
                        "started again this many times")
    parser.add_argument("--error-rate", type=float, default=0.05, help="embedded: the share of requests failed")
    parser.add_argument("--no-watch-drops", action="store_true", help="embedded: never drop the watches")
    parser.add_argument("--no-compactions", action="store_true", help="embedded: never forget the history")
    parser.add_argument("--tenant-attacks", action="store_true", help="a tenant attacks quotas of its own meanwhile "
                        f"({', '.join(ATTACKS)})")
    parser.add_argument("--attacks", default="", help="with --tenant-attacks: only these (comma-separated)")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: a random one, printed)")
    parser.add_argument("--submit-per-second", type=float, default=25.0)
    parser.add_argument("--runtime", type=float, nargs=2, default=(0.5, 4.0), metavar=("MIN", "MAX"))
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--lease", type=float, nargs=3, default=(10.0, 7.0, 2.0),
                        metavar=("DURATION", "RENEW", "RETRY"), help="the controller's leader election timings")
    parser.add_argument("--state-dir", type=Path, default=None, help="keep the state (and controller.log) here")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress lines, only the figures")
    args = parser.parse_args(argv)
    # The simulated cluster and the event recorder log every refused write at length.
    logging.basicConfig(level=logging.ERROR)
    config = ChaosConfig(jobs=args.jobs, quotas=args.quotas, parents=args.parents, kills=args.kills,
                         error_rate=args.error_rate, seed=args.seed, submit_per_second=args.submit_per_second,
                         runtime=tuple(args.runtime), timeout=args.timeout, state_dir=args.state_dir,
                         lease=tuple(args.lease), control_plane=args.control_plane,
                         apiserver_restarts=args.apiserver_restarts, watch_drops=not args.no_watch_drops,
                         compactions=not args.no_compactions, verbose=not args.quiet,
                         tenant_attacks=args.tenant_attacks,
                         attacks=tuple(a for a in args.attacks.split(",") if a))
    result = run_chaos(config)
    report(result.figures())
    if args.json:
        report(json.dumps(result.as_json()))
    return 1 if result.violations else 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # so that a terminated run still stops its controller process


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    signal.signal(signal.SIGTERM, _interrupt)
    sys.exit(main())
