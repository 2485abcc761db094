"""The Kubernetes shell around the engine.

Informers feed the engine (quotas, queues, units, priority classes, nodes); the job
reconciler keeps every job and its QueueUnit in step (suspend, create the unit, resume,
mirror the job's state); the scheduling loop runs a cycle when something changed and
writes its decisions, the unit's status first and the job after it. Every decision is
in the objects, so a restarted controller picks up where the last one stopped.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.objects import parse_elastic_quota, parse_queue
from koordqueue.api.quantity import QuantityError, format_resource_list, parse_resource_list
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.metrics import Metrics
from koordqueue.controller.views import (
    JOB_PLURALS,
    JobView,
    Object,
    UnitView,
    adapter_of_kind,
    job_view,
    queue_unit_manifest,
    rfc3339,
    unit_view,
)
from koordqueue.engine import Engine
from koordqueue.engine.model import CycleResult, EngineConfig, QueueInfo, auto_queue_for
from koordqueue.jobs.base import JobState
from koordqueue.kube.client import KubeClient, PatchType, Resource
from koordqueue.kube.errors import AlreadyExists, ApiError, Conflict, NotFound
from koordqueue.kube.events import EventRecorder
from koordqueue.kube.informer import Informer, trim
from koordqueue.kube.workqueue import WorkQueue

log = logging.getLogger(__name__)

QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
QUEUES = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_PLURAL)
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
NODES = Resource("", "v1", "nodes", namespaced=False)
HOLDING = {p.value for p in c.PHASES_HOLDING_QUOTA}
FINISHED = {p.value for p in c.PHASES_FINISHED}
RUNNABLE = {c.Phase.DEQUEUED.value, c.Phase.RUNNING.value}


def job_resource(kind: str) -> Resource:
    return Resource.of(adapter_of_kind(kind).api_version, JOB_PLURALS[kind])


class Controller:
    """Run with `await controller.run()`; `stop()` ends it."""

    def __init__(
        self,
        client: KubeClient,
        config: ControllerConfig | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.config = config or ControllerConfig()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.engine = Engine(
            EngineConfig(
                protect_seconds=self.config.protect_seconds,
                backoff_base=self.config.backoff_base,
                backoff_cap=self.config.backoff_cap,
            )
        )
        self.events = EventRecorder(client, "koord-queue")
        self.priority_classes: dict[str, int] = {}
        self.pc_informer = Informer(client, PRIORITY_CLASSES, project=_priority_value)
        self.node_informer = Informer(client, NODES, project=_allocatable)
        self.quota_informer = Informer(client, QUOTAS, project=trim)
        self.queue_informer = Informer(client, QUEUES, project=trim)
        self.unit_informer = Informer(client, UNITS, project=unit_view)
        self.job_informers: dict[str, Informer[JobView]] = {
            kind: Informer(client, job_resource(kind), project=self._project_job)
            for kind in sorted(self.config.job_kinds)
        }
        self.jobs_queue: WorkQueue[str] = WorkQueue()
        self.wake = asyncio.Event()
        self.unit_rv: dict[str, str] = {}  # our latest write of each unit, for preconditions
        self.written_messages: dict[str, str] = {}
        self.backoffs: list[tuple[float, str]] = []  # (requeue_at, unit key): back to Enqueued
        self.sync_done = False
        self.initial_jobs: set[str] = set()
        self.write_limit = asyncio.Semaphore(self.config.write_concurrency)
        self.cycles = 0
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopped = asyncio.Event()

    # --- projections --------------------------------------------------------------

    def _project_job(self, obj: Object) -> JobView:
        kind = str(obj.get("kind") or "")
        return job_view(obj, adapter_of_kind(kind), self.priority_classes)

    # --- running ------------------------------------------------------------------

    async def run(self) -> None:
        self._wire()
        await self._start_informers()
        self._load_admitted_units()
        self.sync_done = True
        self.initial_jobs = {job.key for inf in self.job_informers.values() for _, job in inf.items()}
        for kind, inf in self.job_informers.items():
            for key, _ in inf.items():
                self.jobs_queue.add(f"{kind}/{key}")
        self._tasks += [
            asyncio.create_task(self._job_worker(), name=f"job-worker-{i}") for i in range(4)
        ]
        self._tasks.append(asyncio.create_task(self._schedule_loop(), name="scheduler"))
        self._tasks.append(asyncio.create_task(self._status_loop(), name="status"))
        self.wake.set()
        try:
            await self._stopped.wait()
        finally:
            await self._shutdown()

    def stop(self) -> None:
        self._stopped.set()

    async def _shutdown(self) -> None:
        self.jobs_queue.shutdown()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        informers = [self.pc_informer, self.node_informer, self.quota_informer, self.queue_informer,
                     self.unit_informer, *self.job_informers.values()]
        await asyncio.gather(*(i.stop() for i in informers), return_exceptions=True)

    async def _start_informers(self) -> None:
        # Priority classes first: job projections read them.
        self.pc_informer.start()
        await self.pc_informer.wait_synced()
        rest = [self.node_informer, self.quota_informer, self.queue_informer, self.unit_informer,
                *self.job_informers.values()]
        for inf in rest:
            inf.start()
        for inf in rest:
            await inf.wait_synced()

    def _wire(self) -> None:
        def pcs_changed(*_: Any) -> None:
            self.priority_classes.clear()
            self.priority_classes.update(
                {k: v for k, v in self.pc_informer.items() if v is not None}
            )

        for hook in (self.pc_informer.on_add, self.pc_informer.on_delete):
            hook(pcs_changed)
        self.pc_informer.on_update(pcs_changed)

        def nodes_changed(*_: Any) -> None:
            total: dict[str, int] = {}
            for _, alloc in self.node_informer.items():
                for r, v in alloc.items():
                    total[r] = total.get(r, 0) + v
            self.engine.set_cluster_capacity(total or None)
            self.wake.set()

        self.node_informer.on_add(nodes_changed)
        self.node_informer.on_update(nodes_changed)
        self.node_informer.on_delete(nodes_changed)

        self.quota_informer.on_add(self._quota_changed)
        self.quota_informer.on_update(lambda _old, new: self._quota_changed(new))
        self.quota_informer.on_delete(self._quota_deleted)
        self.queue_informer.on_add(self._queue_changed)
        self.queue_informer.on_update(lambda _old, new: self._queue_changed(new))
        self.queue_informer.on_delete(self._queue_deleted)
        self.unit_informer.on_add(self._unit_changed)
        self.unit_informer.on_update(lambda _old, new: self._unit_changed(new))
        self.unit_informer.on_delete(self._unit_deleted)
        for kind, inf in self.job_informers.items():
            inf.on_add(lambda j, k=kind: self.jobs_queue.add(f"{k}/{j.key}"))
            inf.on_update(lambda _o, j, k=kind: self.jobs_queue.add(f"{k}/{j.key}"))
            inf.on_delete(lambda j: self._job_deleted(j))

    # --- quotas and queues --------------------------------------------------------

    async def _quota_changed(self, obj: Object) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        try:
            parsed = parse_elastic_quota(obj)
        except (InvalidObject, QuantityError) as e:
            self.engine.remove_quota(name)
            await self.events.record(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, str(e))
            self.wake.set()
            return
        for warning in parsed.warnings:
            await self.events.record(obj, c.EventType.WARNING, c.EventReason.UNKNOWN_POLICY, warning)
        self.engine.set_quota(parsed.quota)
        reason = self.engine.validation_errors().get(parsed.quota.name)
        if reason:
            await self.events.record(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, reason)
        if not parsed.quota.is_parent:
            await self._ensure_auto_queue(auto_queue_for(parsed.quota))
        self._refeed_queues()
        self.wake.set()

    async def _quota_deleted(self, obj: Object) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        self.engine.remove_quota(name)
        try:
            await self.client.delete(QUEUES, name, namespace=self.config.system_namespace)
        except NotFound:
            pass
        except ApiError as e:
            log.warning("could not delete the Queue of quota %s: %s", name, e)
        self.wake.set()

    async def _ensure_auto_queue(self, queue: QueueInfo) -> None:
        existing = self.queue_informer.get(queue.key)
        body = {
            "apiVersion": c.QUEUE_API_VERSION,
            "kind": c.QUEUE_KIND,
            "metadata": {
                "name": queue.name,
                "namespace": queue.namespace,
                "labels": {c.LABEL_QUOTA_NAME: queue.quota or queue.name},
            },
            "spec": {"queuePolicy": queue.policy.value, "priority": queue.priority},
        }
        try:
            if existing is None:
                await self.client.create(QUEUES, body, namespace=queue.namespace)
            elif (existing.get("spec") or {}).get("queuePolicy") != queue.policy.value:
                await self.client.patch(
                    QUEUES, queue.name, {"spec": {"queuePolicy": queue.policy.value}},
                    namespace=queue.namespace,
                )
        except AlreadyExists:
            pass
        except ApiError as e:
            log.warning("could not write Queue %s: %s", queue.key, e)
        # Feed it now rather than waiting for the watch: units may need it this cycle.
        if existing is None:
            self.engine.set_queue(queue)

    def _refeed_queues(self) -> None:
        for _, obj in self.queue_informer.items():
            self._feed_queue(obj)

    def _feed_queue(self, obj: Object) -> None:
        quota_names = [s.name for s in self.engine.quota_status().values()]
        try:
            parsed = parse_queue(obj, quota_names)
        except InvalidObject as e:
            log.warning("queue unusable: %s", e)
            return
        self.engine.set_queue(parsed.queue)

    async def _queue_changed(self, obj: Object) -> None:
        self._feed_queue(obj)
        self.wake.set()

    async def _queue_deleted(self, obj: Object) -> None:
        meta = obj.get("metadata") or {}
        self.engine.remove_queue(f"{meta.get('namespace')}/{meta.get('name')}")
        self.wake.set()

    # --- units ----------------------------------------------------------------------

    def _load_admitted_units(self) -> None:
        """After the first sync: units that hold quota hold it again in the engine."""
        for _, unit in self.unit_informer.items():
            if unit.phase in FINISHED:
                continue
            info = unit.unit_info()
            self.engine.set_unit(info)
            if unit.phase in HOLDING:
                standing = self.engine.standing(unit.key)
                if standing and standing.quota:
                    info.admitted_quota = standing.quota
                    info.admitted_queue = standing.queue
                    info.admitted_at = unit.created
                    self.engine.set_unit(info)
            self.unit_rv[unit.key] = unit.resource_version

    def _newer(self, key: str, rv: str) -> bool:
        mine = self.unit_rv.get(key)
        return mine is None or _rv(rv) >= _rv(mine)

    async def _unit_changed(self, unit: UnitView) -> None:
        if self._newer(unit.key, unit.resource_version):
            self.unit_rv[unit.key] = unit.resource_version
        if not self.sync_done:
            return
        current = self.engine.unit(unit.key)
        if unit.phase in FINISHED:
            if current is not None:
                self.engine.remove_unit(unit.key)
                self.wake.set()
        else:
            info = unit.unit_info()
            if current is not None:
                # The engine owns admission state while we run; the object only its spec.
                info.admitted_quota = current.admitted_quota
                info.admitted_queue = current.admitted_queue
                info.admitted_at = current.admitted_at
                info.requeue_at = current.requeue_at
                info.attempts = current.attempts
            if current is None or _spec_changed(current, info):
                self.engine.set_unit(info)
                self.wake.set()
        self.jobs_queue.add(unit.job_key)

    async def _unit_deleted(self, unit: UnitView) -> None:
        self.engine.remove_unit(unit.key)
        self.unit_rv.pop(unit.key, None)
        self.written_messages.pop(unit.key, None)
        self.jobs_queue.add(unit.job_key)
        self.wake.set()

    # --- jobs -----------------------------------------------------------------------

    def _job_deleted(self, job: JobView) -> None:
        self.engine.remove_unit(job.unit_key)
        self.wake.set()

    async def _job_worker(self) -> None:
        while True:
            item = await self.jobs_queue.get()
            try:
                await self._reconcile_job(item)
                self.jobs_queue.forget(item)
            except ApiError as e:
                log.info("job %s: %s; will retry", item, e)
                self.jobs_queue.add_rate_limited(item)
            except Exception:
                log.exception("job %s: reconcile failed", item)
                self.jobs_queue.add_rate_limited(item)
            finally:
                self.jobs_queue.done(item)

    async def _reconcile_job(self, item: str) -> None:
        kind, _, key = item.partition("/")
        informer = self.job_informers.get(kind)
        if informer is None:
            return
        job = informer.get(key)
        if job is None or job.deleting:
            return
        adapter = adapter_of_kind(kind)
        resource = job_resource(kind)
        unit = self.unit_informer.get(job.unit_key)
        if unit is None:
            await self._create_unit(job, resource, adapter)
            return
        engine_unit = self.engine.unit(unit.key)
        if job.state in (JobState.SUCCEEDED, JobState.FAILED):
            if unit.phase not in FINISHED:
                phase = c.Phase.SUCCEED if job.state is JobState.SUCCEEDED else c.Phase.FAILED
                await self._write_unit_status(unit.key, {"phase": phase.value, "message": f"job {job.state.value}"})
                self.engine.remove_unit(unit.key)
                self.wake.set()
                reason = c.EventReason.SUCCEED if phase is c.Phase.SUCCEED else c.EventReason.FAILED
                await self.events.record(_unit_ref(unit), c.EventType.NORMAL, reason, f"job {job.state.value}")
            return
        may_run = engine_unit is not None and engine_unit.admitted_quota is not None and unit.phase in RUNNABLE
        if may_run and job.suspended:
            await self.client.patch(resource, job.name, adapter.resume_patch({}), namespace=job.namespace)
        elif not may_run and not job.suspended and unit.phase not in FINISHED:
            await self._suspend(job, resource, adapter)
        if may_run and job.state is JobState.RUNNING and unit.phase == c.Phase.DEQUEUED.value:
            await self._write_unit_status(unit.key, {"phase": c.Phase.RUNNING.value, "message": "job is running"})
        if job.unit_spec is not None and _unit_spec_drifted(unit, job):
            # The controller owns the unit's spec: a hand edit (say, of its priority) is reverted.
            await self.client.patch(UNITS, unit.name, {"spec": job.unit_spec}, namespace=unit.namespace)

    async def _create_unit(self, job: JobView, resource: Resource, adapter: Any) -> None:
        if job.invalid or job.unit_spec is None:
            await self.events.record(_job_ref(job), c.EventType.WARNING, c.EventReason.INVALID_JOB, job.invalid or "")
            if not job.suspended:
                await self._suspend(job, resource, adapter)
            return
        body = queue_unit_manifest(job)
        # A job that already ran before we started is accounted, not disturbed; a later one is suspended.
        adopt = not job.suspended and job.state is JobState.RUNNING and job.key in self.initial_jobs
        try:
            created = await self.client.create(UNITS, body, namespace=job.namespace)
        except AlreadyExists:
            return
        self.unit_rv[job.unit_key] = str(created["metadata"]["resourceVersion"])
        if adopt:
            await self._write_unit_status(job.unit_key, {"phase": c.Phase.RUNNING.value, "message": "adopted: already running"})
        else:
            await self._write_unit_status(job.unit_key, {"phase": c.Phase.ENQUEUED.value, "message": "queued"})
            await self.events.record(_unit_ref_of(job), c.EventType.NORMAL, c.EventReason.ENQUEUED, "job queued")
            if not job.suspended:
                await self._suspend(job, resource, adapter)

    async def _suspend(self, job: JobView, resource: Resource, adapter: Any) -> None:
        await self.client.patch(resource, job.name, adapter.suspend_patch({}), namespace=job.namespace)

    # --- writing status ---------------------------------------------------------------

    async def _write_unit_status(self, key: str, status: Object, *, precondition: bool = False) -> None:
        ns, _, name = key.partition("/")
        status = {**status, "lastUpdateTime": rfc3339(self.clock())}
        patch: Object = {"status": status}
        if precondition and key in self.unit_rv:
            patch["metadata"] = {"resourceVersion": self.unit_rv[key]}
        async with self.write_limit:
            obj = await self.client.patch_status(UNITS, name, patch, namespace=ns, patch_type=PatchType.MERGE)
        self.unit_rv[key] = str(obj["metadata"]["resourceVersion"])
        if "message" in status:
            self.written_messages[key] = status["message"]

    # --- scheduling ------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        next_wakeup: float | None = None
        while True:
            timeout = None if next_wakeup is None else max(0.0, next_wakeup - self.clock())
            if self.backoffs:
                until = max(0.0, self.backoffs[0][0] - self.clock())
                timeout = until if timeout is None else min(timeout, until)
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except TimeoutError:
                pass
            self.wake.clear()
            await asyncio.sleep(0.01)  # let a burst of events land in one cycle
            await self._release_backoffs()
            started = time.perf_counter()
            result = self.engine.schedule(self.clock())
            self.metrics.cycle_duration.observe(time.perf_counter() - started)
            self.cycles += 1
            next_wakeup = result.next_wakeup
            await self._apply(result)

    async def _apply(self, result: CycleResult) -> None:
        writes = [self._admit(a.unit, a.quota, a.queue) for a in result.admitted]
        writes += [self._preempt(p.unit, p.reason, p.requeue_at, p.quota) for p in result.preempted]
        writes += [self._tell(key, msg) for key, msg in result.messages.items()]
        if writes:
            await asyncio.gather(*writes)

    async def _admit(self, key: str, quota: str, queue: str) -> None:
        unit = self.unit_informer.get(key)
        info = self.engine.unit(key)
        if unit is None or info is None:
            self.engine.revert_admission(key)
            return
        now = self.clock()
        status = {
            "phase": c.Phase.DEQUEUED.value,
            "message": f"admitted into quota {quota} through queue {queue}",
            "lastAllocateTime": rfc3339(now),
            "admissions": [
                {"name": ps.get("name", ""), "replicas": ps.get("count", 0), "running": 0,
                 "resources": ps.get("template", {}).get("spec", {}).get("containers", [{}])[0]
                 .get("resources", {}).get("requests", {})}
                for ps in unit.spec.get("podSet") or []
            ],
        }
        try:
            await self._write_unit_status(key, status, precondition=True)
        except (Conflict, NotFound) as e:
            log.info("admission of %s not written (%s); undone", key, e.reason)
            self.engine.revert_admission(key)
            self.wake.set()
            return
        except ApiError as e:
            log.warning("admission of %s not written: %s; undone", key, e)
            self.engine.revert_admission(key)
            self.wake.set()
            return
        self.metrics.admissions.labels(queue, quota).inc()
        self.metrics.admission_wait.labels(queue).observe(max(0.0, now - unit.created))
        await self.events.record(_unit_ref(unit), c.EventType.NORMAL, c.EventReason.DEQUEUED, status["message"])
        self.jobs_queue.add(unit.job_key)

    async def _preempt(self, key: str, reason: str, requeue_at: float, quota: str) -> None:
        unit = self.unit_informer.get(key)
        if unit is None:
            return
        info = self.engine.unit(key)
        status = {
            "phase": c.Phase.PREEMPTED.value,
            "message": reason,
            "requeueState": {"count": info.attempts if info else 0, "requeueAt": rfc3339(requeue_at)},
        }
        try:
            await self._write_unit_status(key, status)
        except ApiError as e:
            log.warning("preemption of %s not written: %s", key, e)
        heapq.heappush(self.backoffs, (requeue_at, key))
        self.metrics.preemptions.labels(quota).inc()
        await self.events.record(_unit_ref(unit), c.EventType.WARNING, c.EventReason.PREEMPTED, reason)
        self.jobs_queue.add(unit.job_key)

    async def _release_backoffs(self) -> None:
        now = self.clock()
        while self.backoffs and self.backoffs[0][0] <= now:
            _, key = heapq.heappop(self.backoffs)
            unit = self.unit_informer.get(key)
            if unit is not None and unit.phase in (c.Phase.PREEMPTED.value, c.Phase.TIMEOUT_BACKOFF.value):
                try:
                    await self._write_unit_status(key, {"phase": c.Phase.ENQUEUED.value, "message": "back in the queue"})
                except ApiError as e:
                    log.info("unit %s not requeued yet: %s", key, e)

    async def _tell(self, key: str, message: str) -> None:
        if self.written_messages.get(key) == message:
            return
        unit = self.unit_informer.get(key)
        if unit is None:
            return
        try:
            await self._write_unit_status(key, {"message": message})
        except ApiError as e:
            log.info("message of %s not written: %s", key, e)
            return
        await self.events.record(_unit_ref(unit), c.EventType.WARNING, c.EventReason.FAILED_SCHEDULING, message)

    # --- periodic status: quotas' used, queues' positions --------------------------

    async def _status_loop(self) -> None:
        last_used: dict[str, dict[str, str]] = {}
        last_positions: dict[str, Any] = {}
        last_queue_write = 0.0
        while True:
            await asyncio.sleep(self.config.quota_status_refresh_seconds)
            for name, status in self.engine.quota_status().items():
                used = format_resource_list(status.used)
                for resource in set(status.max) | set(status.used):
                    for kind, amounts in (("min", status.min), ("max", status.max),
                                          ("runtime", status.runtime), ("used", status.used)):
                        self.metrics.quota.labels(name, resource, kind).set(amounts.get(resource, 0) / 1000)
                if last_used.get(name) == used:
                    continue
                obj = self._quota_object(name)
                if obj is None:
                    continue
                meta = obj["metadata"]
                try:
                    await self.client.patch_status(QUOTAS, name, {"status": {"used": used}}, namespace=meta["namespace"])
                    last_used[name] = used
                except ApiError as e:
                    log.info("status.used of quota %s not written: %s", name, e)
            positions = self.engine.queue_positions()
            for queue_key, standings in positions.items():
                self.metrics.pending_units.labels(queue_key).set(len(standings))
            if self.clock() - last_queue_write < self.config.queue_status_refresh_seconds and last_queue_write:
                continue
            last_queue_write = self.clock()
            for queue_key, standings in positions.items():
                active = [
                    {"name": s.unit.partition("/")[2], "namespace": s.unit.partition("/")[0],
                     "priority": s.priority, "position": s.position or 0}
                    for s in standings[:200]
                ]
                if last_positions.get(queue_key) == active:
                    continue
                ns, _, name = queue_key.partition("/")
                try:
                    await self.client.patch_status(
                        QUEUES, name, {"status": {"queueItemDetails": {"active": active}}}, namespace=ns
                    )
                    last_positions[queue_key] = active
                except ApiError as e:
                    log.info("positions of queue %s not written: %s", queue_key, e)

    def _quota_object(self, name: str) -> Object | None:
        for _, obj in self.quota_informer.items():
            if (obj.get("metadata") or {}).get("name") == name:
                return obj
        return None


def _rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _spec_changed(current: Any, new: Any) -> bool:
    return (current.priority, current.request, current.queue_name, current.quota_name, current.preemptible,
            current.invalid) != (new.priority, new.request, new.queue_name, new.quota_name, new.preemptible,
                                 new.invalid)


def _unit_spec_drifted(unit: UnitView, job: JobView) -> bool:
    assert job.unit_spec is not None
    return any(unit.spec.get(k) != v for k, v in job.unit_spec.items() if k in ("priority", "queue", "resource"))


def _unit_ref(unit: UnitView) -> Object:
    return {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_UNIT_KIND,
            "metadata": {"name": unit.name, "namespace": unit.namespace}}


def _unit_ref_of(job: JobView) -> Object:
    return {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_UNIT_KIND,
            "metadata": {"name": job.unit_name, "namespace": job.namespace}}


def _job_ref(job: JobView) -> Object:
    return {"apiVersion": job.api_version, "kind": job.kind,
            "metadata": {"name": job.name, "namespace": job.namespace, "uid": job.uid}}


def _priority_value(obj: Object) -> int | None:
    value = obj.get("value")
    return value if isinstance(value, int) else None


def _allocatable(obj: Object) -> dict[str, int]:
    alloc = (obj.get("status") or {}).get("allocatable") or {}
    try:
        return parse_resource_list(alloc)
    except QuantityError:
        return {}
