"""The Kubernetes shell around the engine.

Informers feed the engine (quotas, queues, units, priority classes, nodes) and keep
small views of jobs and their pods; the job reconciler keeps every job and its
QueueUnit in step (suspend, create the unit, resume, admission checks, timeouts,
mirror the job's state); the scheduling loop runs a cycle when something changed and
writes its decisions, the unit's status first and the job after it. Every decision is
in the objects, so a restarted controller picks up where the last one stopped.

Who is right when: while the controller runs, the engine is the authority on which
unit holds quota; a unit it has never seen that says it holds quota (after a restart,
an upgrade from Koord-Queue, or a job that ran before us) is accounted as holding it.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson

from koordqueue import aio
from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.objects import QueueSettings, parse_queue
from koordqueue.api.quantity import QuantityError, format_resource_list, parse_resource_list
from koordqueue.controller import status as st
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.keyedlock import KeyedLock
from koordqueue.controller.metrics import Metrics
from koordqueue.controller.overview import Overview, explain, overview
from koordqueue.controller.pods import NodeUsage, PodIndex, PodView, pod_view
from koordqueue.controller.selectors import selector_matches
from koordqueue.controller.snapshot import (
    CONFIG_MAPS,
    FINISHED,
    HOLDING,
    NODES,
    ORPHAN,
    PRIORITY_CLASSES,
    QUEUES,
    QUOTAS,
    SENT_BACK,
    UNITS,
    hold,
    load_unit,
    orphan_reason,
    quota_age,
)
from koordqueue.controller.views import (
    JOB_PLURALS,
    JobView,
    Object,
    UnitView,
    adapter_of_kind,
    admitted_placement,
    job_view,
    missing_class_reason,
    orphan_info,
    priority_classes_changed,
    queue_unit_manifest,
    rfc3339,
    unit_info,
    unit_view,
    with_priority_classes,
)
from koordqueue.engine import Engine
from koordqueue.engine.model import (
    Admission,
    CycleResult,
    NodeInfo,
    Placement,
    QueueInfo,
    QuotaInfo,
    Standing,
    Taint,
    UnitInfo,
    auto_queue_for,
)
from koordqueue.jobs.base import JobAdapter, JobState
from koordqueue.jobs.placement import admission_patch, read_originals
from koordqueue.kube.client import KubeClient, PatchType, Resource
from koordqueue.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from koordqueue.kube.events import EventRecorder, ObjectRef
from koordqueue.kube.informer import Informer, trim
from koordqueue.kube.ratelimit import TokenBucket
from koordqueue.kube.workqueue import WorkQueue

log = logging.getLogger(__name__)

PODS = Resource("", "v1", "pods")
RUNNABLE = {c.Phase.DEQUEUED.value, c.Phase.RUNNING.value}
BATCH_SECONDS = 0.002  # after a wake, let a burst of events land in one cycle
MESSAGE_FLUSH_SECONDS = 1.0  # a waiting unit's message is written at most this often
# ... and, once it says why the unit does not fit, rewritten at most this often: under load
# a unit's reason moves with every admission and release (used amounts, a unit holding the
# free room, then none), each a write; `koord-queue explain` and the dashboard say it live.
MESSAGE_REFRESH_SECONDS = 10.0
MESSAGE_WRITERS = 8  # messages and Running written at once: they must not hold back admissions and releases
FAILED_SCHEDULING_EVERY = 60.0  # seconds between FailedScheduling events of one unit
QUEUE_ITEMS_WRITTEN = 200  # pending units listed in a Queue's status
EVENT_WRITERS = 8
# Events are advice: written at most EVENTS_PER_SECOND (bursts of EVENT_BURST), and past
# EVENT_BACKLOG waiting, new ones are dropped (and counted), as client-go's broadcaster
# drops them: a storm of 100k new jobs must neither become 100k tasks in memory nor take
# the API server's time from the writes that admit and release (under Kueue's baseline,
# events were a third of the controller's requests and saturated the machine with them).
EVENT_BACKLOG = 1_000
EVENTS_PER_SECOND = 100.0
EVENT_BURST = 500
RECENT_DECISIONS = 50
# A job we resumed whose view still says suspended: our watch has not brought the resume
# back yet. It is resumed again only after this long (someone suspended it since).
RESUME_AGAIN_AFTER_SECONDS = 5.0
BACKOFF_RECHECK_SECONDS = 0.5  # a unit out of back-off whose job is not suspended yet looks again after


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
        self.settings = self.config.settings  # how objects are loaded into the engine (loader.py)
        self.engine = Engine(self.settings.engine_config())
        self.events = EventRecorder(client, "koord-queue")
        self.priority_classes: dict[str, int] = {}
        self.pc_version = 0
        self.job_fingerprints: dict[str, int] = {}  # job item -> what its view was made from
        self.resumed_at: dict[str, float] = {}  # job item -> when we resumed it, until its view shows it
        # Job item -> a token, for each job whose unit we sent back (preempted, timed out) and
        # whose suspension we have not written since: it may still run from before, whatever
        # our views say (they may not show the send-back yet, nor our own resume of the job).
        # Its unit is not admitted again before that suspension is written.
        self.suspension_owed: dict[str, int] = {}
        self.suspensions_owed = 0  # tokens handed out
        self.warned_of_classes: dict[str, tuple[str, ...]] = {}  # job item -> missing PriorityClasses it was told of
        self.pc_informer = Informer(client, PRIORITY_CLASSES, project=_priority_value)
        self.node_informer = Informer(client, NODES, project=_node_info)
        self.quota_informer = Informer(client, QUOTAS, project=_without_status)
        self.queue_informer = Informer(client, QUEUES, project=_without_status)
        self.unit_informer = Informer(client, UNITS, project=unit_view)
        self.pod_informer = Informer(client, PODS, project=pod_view)
        self.job_informers: dict[str, Informer[JobView]] = {
            kind: Informer(client, job_resource(kind), project=self._project_job)
            for kind in sorted(self.config.job_kinds)
        }
        self.pods = PodIndex()
        self.node_usage = NodeUsage()  # what bound pods take on each node: the engine's, for node fit
        self.queue_settings: dict[str, QueueSettings] = {}  # queue key -> what the engine does not need
        self.quotas: dict[str, QuotaInfo] = {}  # parsed, for the overview's tree
        self.quota_namespaces: dict[str, str] = {}  # quota name -> its namespace, valid or not
        self.refused_twins: set[str] = set()  # namespace/name of quotas refused for a name taken
        self.queue_quotas: dict[str, str | None] = {}  # queue key -> the quota it is bound to
        self.queue_bindings: dict[str, Object] = {}  # queue key -> the status.quota and Bound condition written
        self.capacity: dict[str, int] | None = None
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_DECISIONS)  # for the dashboard
        self.jobs_queue: WorkQueue[str] = WorkQueue()
        self.wake = asyncio.Event()
        self.unit_rv: dict[str, str] = {}  # latest resourceVersion of each unit we know of
        self.unit_locks = KeyedLock()  # one status write per unit at a time
        # One suspension or release of a job at a time, each landing before the next is sent, and
        # a unit sent back only once its job's release on its way has landed: writes that take
        # long to land (retried after a 429 or a 500) must not land after what was decided later.
        self.job_locks = KeyedLock()
        self.written_messages: dict[str, str] = {}
        self.pending_messages: dict[str, str] = {}  # waiting units' new messages, not yet written
        self.message_written_at: dict[str, float] = {}  # when each waiting unit's message was written
        self.deferred_messages: dict[str, str] = {}  # messages kept until their unit may be told again
        self.messages_due: list[tuple[float, str]] = []  # (when, unit key) of the deferred messages
        self.running_writes: dict[str, asyncio.Task[None]] = {}  # unit key -> its Running write, in line
        self.admitting: set[asyncio.Task[None]] = set()  # cycles' admissions being written
        self.failed_scheduling_at: dict[str, float] = {}
        self.backoffs: list[tuple[float, str]] = []  # (requeue_at, unit key): back to Enqueued
        self.sync_done = False
        self.initial_jobs: set[str] = set()
        self.write_limit = asyncio.Semaphore(self.config.write_concurrency)
        self.message_limit = asyncio.Semaphore(MESSAGE_WRITERS)
        # The job reconcilers' unit writes (Running, podState, releases) have a line of their
        # own: a release frees quota for the admissions waiting in write_limit's line, and a
        # Running write waiting there would hold back its job's release behind it (the same
        # worker reconciles the job when it ends), so neither waits behind admissions (job
        # workers bound this line).
        self.job_line = asyncio.Semaphore(self.config.job_workers)
        self.event_queue: asyncio.Queue[tuple[ObjectRef | Object, c.EventType, c.EventReason, str]] = \
            asyncio.Queue(EVENT_BACKLOG)
        self.events_dropped = 0
        self.event_bucket = TokenBucket(EVENTS_PER_SECOND, EVENT_BURST)
        self.cycles = 0
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopped = asyncio.Event()

    # --- projections --------------------------------------------------------------

    def _project_job(self, obj: Object) -> JobView:
        """The job's view; when only its suspension or status changed (our resume, the operator's
        conditions), the last view with those refreshed: reading pod templates again costs
        50 times more."""
        kind = str(obj.get("kind") or "")
        adapter = adapter_of_kind(kind)
        meta = obj.get("metadata") or {}
        item = f"{kind}/{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        fingerprint = _job_fingerprint(obj, self.pc_version)
        old = self._job_view(item)
        if old is not None and old.invalid is None and self.job_fingerprints.get(item) == fingerprint:
            try:
                return replace(old, suspended=adapter.is_suspended(obj), state=adapter.status(obj),
                               deleting=bool(meta.get("deletionTimestamp")),
                               # a RayJob's pods are found by its status (its Ray cluster's name)
                               pods=next(iter(adapter.pod_selector(obj).items()), None))
            except InvalidObject:
                pass
        self.job_fingerprints[item] = fingerprint
        return job_view(obj, adapter, self.priority_classes)

    # --- running ------------------------------------------------------------------

    async def run(self) -> None:
        try:  # a replica that loses its lease while starting must not leave informers behind
            self._wire()
            self._tasks += [asyncio.create_task(self._event_writer(), name=f"event-writer-{i}")
                            for i in range(EVENT_WRITERS)]
            await self._publish_settings()
            await self._start_informers()
            await self._settle_quotas_and_queues()
            self._load_units()
            self.sync_done = True
            self.initial_jobs = {f"{kind}/{key}" for kind, inf in self.job_informers.items() for key, _ in inf.items()}
            for item in sorted(self.initial_jobs):
                self.jobs_queue.add(item)
            self._tasks += [asyncio.create_task(self.jobs_queue.serve(self._reconcile_job, "job"),
                                                name=f"job-worker-{i}") for i in range(self.config.job_workers)]
            self._tasks.append(asyncio.create_task(self._schedule_loop(), name="scheduler"))
            self._tasks.append(asyncio.create_task(self._status_loop(), name="status"))
            self._tasks.append(asyncio.create_task(self._message_loop(), name="messages"))
            self.wake.set()
            await self._stopped.wait()
        finally:
            await self._shutdown()

    def stop(self) -> None:
        self._stopped.set()

    async def _shutdown(self) -> None:
        self.jobs_queue.shutdown()
        tasks = [*self._tasks, *self.running_writes.values(), *self.admitting]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(i.stop() for i in self._informers()), return_exceptions=True)

    def _informers(self) -> list[Informer[Any]]:
        return [self.pc_informer, self.node_informer, self.quota_informer, self.queue_informer,
                self.unit_informer, self.pod_informer, *self.job_informers.values()]

    async def _start_informers(self) -> None:
        # Priority classes first: job projections read them.
        self.pc_informer.start()
        await self.pc_informer.wait_synced()
        rest = self._informers()[1:]
        for inf in rest:
            inf.start()
        for inf in rest:
            await inf.wait_synced()

    def _wire(self) -> None:
        def pcs_changed(*_: Any) -> None:
            self.pc_version += 1  # jobs' priorities may change: their next views are made afresh
            self.priority_classes.clear()
            self.priority_classes.update({k: v for k, v in self.pc_informer.items() if v is not None})
            self._priority_classes_changed()

        self.pc_informer.on_add(pcs_changed)
        self.pc_informer.on_update(pcs_changed)
        self.pc_informer.on_delete(pcs_changed)

        def nodes_changed() -> None:
            self.capacity = self.settings.capacity(node.allocatable for _name, node in self.node_informer.items())
            self.engine.set_cluster_capacity(self.capacity)
            self.wake.set()

        def node_set(node: NodeInfo) -> None:
            self.engine.set_node(node)  # where pods may go (node fit, topology)
            nodes_changed()

        def node_gone(node: NodeInfo) -> None:
            self.engine.remove_node(node.name)
            nodes_changed()

        self.node_informer.on_add(node_set)
        self.node_informer.on_update(lambda _old, new: node_set(new))
        self.node_informer.on_delete(node_gone)

        self.quota_informer.on_add(self._quota_changed)
        # Our own status writes (used, positions) come back as updates: only other changes count.
        self.quota_informer.on_update(lambda old, new: None if _same_spec(old, new) else self._quota_changed(new))
        self.quota_informer.on_delete(self._quota_deleted)
        self.queue_informer.on_add(self._queue_changed)
        self.queue_informer.on_update(lambda old, new: None if _same_spec(old, new) else self._queue_changed(new))
        self.queue_informer.on_delete(self._queue_deleted)
        self.unit_informer.on_add(self._unit_changed)
        self.unit_informer.on_update(lambda _old, new: self._unit_changed(new))
        self.unit_informer.on_delete(self._unit_deleted)
        self.pod_informer.on_add(self._pod_changed)
        self.pod_informer.on_update(lambda old, new: self._pod_changed(new, old))
        self.pod_informer.on_delete(self._pod_deleted)
        for kind, inf in self.job_informers.items():
            inf.on_add(lambda j, k=kind: self._job_changed(f"{k}/{j.key}", j))
            inf.on_update(lambda _o, j, k=kind: self._job_changed(f"{k}/{j.key}", j))
            inf.on_delete(self._job_deleted)

    def _event(self, ref: ObjectRef | Object, event_type: c.EventType, reason: c.EventReason, message: str) -> None:
        """Queue an Event for the event writers; nobody waits for it."""
        try:
            self.event_queue.put_nowait((ref, event_type, reason, message))
        except asyncio.QueueFull:
            self.events_dropped += 1
            if self.events_dropped % 1000 == 1:
                log.warning("%d events dropped so far: more than %d waiting to be written", self.events_dropped,
                            EVENT_BACKLOG)

    async def _event_writer(self) -> None:
        while True:
            ref, event_type, reason, message = await self.event_queue.get()
            await self.event_bucket.acquire()
            await self.events.record(ref, event_type, reason, message)

    async def _publish_settings(self) -> None:
        """Write the settings the objects are loaded with where `koord-queue status` and
        `explain` read them, so that they load them as this controller does."""
        data = self.settings.to_data()
        namespace = self.config.system_namespace
        try:
            try:
                await self.client.patch(CONFIG_MAPS, c.SETTINGS_CONFIG_MAP, {"data": data}, namespace=namespace)
            except NotFound:
                await self.client.create(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                    "name": c.SETTINGS_CONFIG_MAP, "namespace": namespace}, "data": data}, namespace=namespace)
        except KubeError as e:  # status and explain then say they assume the defaults
            log.warning("settings not published in ConfigMap %s/%s: %s", namespace, c.SETTINGS_CONFIG_MAP, e)

    # --- quotas and queues --------------------------------------------------------

    async def _settle_quotas_and_queues(self) -> None:
        """After the first sync: say which quotas are not used, make the Queues quotas lack and
        feed every Queue once. While the caches fill, each quota would redo this for all the
        others (and warn of Queues whose quota was merely not listed yet)."""
        for name, reason in self.engine.validation_errors().items():
            obj = self.quota_informer.get(f"{self.quota_namespaces.get(name)}/{name}")
            if obj is not None:
                self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, f"quota not used: {reason}")
        for quota in list(self.quotas.values()):
            if not quota.is_parent:
                await self._ensure_auto_queue(auto_queue_for(quota))
        for _, obj in self.queue_informer.items():
            await self._queue_changed(obj, settling=True)

    async def _quota_changed(self, obj: Object) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        in_use = self._quota_in_use(name)
        for twin in self._quota_twins(name):  # each told once why it is not used
            self._refuse_twin(twin, in_use)
        if in_use is not None and (in_use.get("metadata") or {}).get("namespace") != meta.get("namespace"):
            return  # another namespace's quota has this name: this one is refused
        self.quota_namespaces[name] = str(meta.get("namespace") or "")
        try:
            parsed = self.settings.quota(obj)
        except (InvalidObject, QuantityError) as e:
            self.engine.remove_quota(name)
            self.quotas.pop(name, None)
            self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, f"quota not used: {e}")
            self.wake.set()
            return
        quota = parsed.quota
        for warning in parsed.warnings:  # used all the same, with a fallback for what is wrong
            reason = c.EventReason.UNKNOWN_POLICY if warning == parsed.policy_warning else c.EventReason.INVALID_QUOTA
            self._event(obj, c.EventType.WARNING, reason, warning)
        self.engine.set_quota(quota)
        self.quotas[quota.name] = quota
        if not self.sync_done:
            return  # _settle_quotas_and_queues does the rest once for all
        reason = self.engine.validation_errors().get(quota.name)
        if reason:
            self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, f"quota not used: {reason}")
        if not quota.is_parent:
            await self._ensure_auto_queue(auto_queue_for(quota))
        self._refeed_queues()
        self.wake.set()

    def _quota_in_use(self, name: str) -> Object | None:
        """The ElasticQuota used under ``name``. Quota names are cluster-wide (Koordinator's
        webhook keeps them so); of quotas that share one in different namespaces the oldest
        is used and the others are refused, or one tenant could take another's quota (its
        max, its min, the namespaces bound to it) by naming a quota of its own alike."""
        same = [obj for _, obj in self.quota_informer.items() if (obj.get("metadata") or {}).get("name") == name]
        return min(same, key=quota_age, default=None)

    def _quota_twins(self, name: str) -> list[Object]:
        """The quotas named ``name`` that are not used (see ``_quota_in_use``)."""
        in_use = self._quota_in_use(name)
        return [obj for _, obj in self.quota_informer.items()
                if (obj.get("metadata") or {}).get("name") == name and obj is not in_use]

    def _refuse_twin(self, twin: Object, in_use: Object | None) -> None:
        meta = twin.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if in_use is None or key in self.refused_twins:
            return
        self.refused_twins.add(key)
        self._event(twin, c.EventType.WARNING, c.EventReason.INVALID_QUOTA,
                    f"quota not used: the name {meta.get('name')} is taken by the ElasticQuota in namespace "
                    f"{(in_use.get('metadata') or {}).get('namespace')} (quota names are cluster-wide)")

    async def _quota_deleted(self, obj: Object) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        self.refused_twins.discard(f"{meta.get('namespace')}/{name}")
        remaining = self._quota_in_use(name)
        if remaining is not None:  # one of a pair with the same name: the other one is used now
            self.refused_twins.discard(f"{(remaining.get('metadata') or {}).get('namespace')}/{name}")
            await self._quota_changed(remaining)
            return
        self.engine.remove_quota(name)
        self.quotas.pop(name, None)
        self.quota_namespaces.pop(name, None)
        auto = self.queue_informer.get(f"{self.config.system_namespace}/{name}")
        if auto is not None and _is_auto_queue(auto, name):
            try:
                await self.client.delete(QUEUES, name, namespace=self.config.system_namespace)
            except NotFound:
                pass
            except KubeError as e:
                log.warning("could not delete the Queue of quota %s: %s", name, e)
        self._refeed_queues()
        self.wake.set()

    async def _ensure_auto_queue(self, queue: QueueInfo) -> None:
        key = f"{self.config.system_namespace}/{queue.name}"
        existing = self.queue_informer.get(key)
        try:
            if existing is None:
                body = {
                    "apiVersion": c.QUEUE_API_VERSION,
                    "kind": c.QUEUE_KIND,
                    "metadata": {"name": queue.name, "namespace": self.config.system_namespace,
                                 "labels": {c.LABEL_QUOTA_NAME: queue.quota or queue.name}},
                    "spec": {"queuePolicy": queue.policy.value, "priority": queue.priority},
                }
                await self.client.create(QUEUES, body, namespace=self.config.system_namespace)
            elif _is_auto_queue(existing, queue.name) and \
                    (existing.get("spec") or {}).get("queuePolicy") != queue.policy.value:
                await self.client.patch(QUEUES, queue.name, {"spec": {"queuePolicy": queue.policy.value}},
                                        namespace=self.config.system_namespace)
        except AlreadyExists:
            pass
        except KubeError as e:
            log.warning("could not write Queue %s: %s", key, e)
        if existing is None:  # feed it now rather than wait for the watch: units may need it this cycle
            self.engine.set_queue(replace(queue, namespace=self.config.system_namespace))

    def _refeed_queues(self) -> None:
        for _, obj in self.queue_informer.items():
            self._feed_queue(obj)

    async def _write_binding(self, key: str, quota: str | None) -> None:
        """The Queue's status.quota and Bound condition, when they changed (from the status loop,
        never from an informer's handler: a slow write must not hold back its events)."""
        written = {"status": self.queue_bindings.get(key) or {}}  # (the cache keeps no status)
        status = st.queue_binding(written, quota, quota in self.quotas, self.clock())
        if status is None:
            return
        namespace, _, name = key.partition("/")
        try:
            await self.client.patch_status(QUEUES, name, {"status": status}, namespace=namespace)
            self.queue_bindings[key] = status
        except NotFound:
            pass
        except KubeError as e:
            log.info("binding of queue %s not written: %s", key, e)

    def _feed_queue(self, obj: Object, warn: bool = False) -> QueueInfo | None:
        """Parse a Queue into the engine; ``warn``: say which of its settings were not usable
        (unknown policy, bad annotations: the Queue works with the fallback each names)."""
        try:
            parsed = parse_queue(obj, list(self.quotas))
        except InvalidObject as e:
            meta = obj.get("metadata") or {}
            self.engine.remove_queue(f"{meta.get('namespace')}/{meta.get('name')}")
            self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUEUE, str(e))
            return None
        for warning in parsed.warnings if warn else ():
            self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUEUE, warning)
        self.engine.set_queue(parsed.queue)
        self.queue_settings[parsed.queue.key] = parsed.settings
        self.queue_quotas[parsed.queue.key] = parsed.queue.quota
        return parsed.queue

    async def _queue_changed(self, obj: Object, settling: bool = False) -> None:
        queue = self._feed_queue(obj, warn=self.sync_done or settling)
        if not self.sync_done and not settling:
            return  # its quota may not be listed yet: _settle_quotas_and_queues feeds it again
        if queue is not None and queue.quota is None:
            self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUEUE,
                        "bound to no ElasticQuota (label quota.scheduling.koordinator.sh/name, or a quota "
                        "of the same name): jobs sent to this queue wait")
        elif queue is not None and queue.quota not in self.quotas:
            self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUEUE,
                        f"bound to quota {queue.quota}, which does not exist: jobs sent to this queue wait")
        self.wake.set()

    async def _queue_deleted(self, obj: Object) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        self.engine.remove_queue(key)
        self.queue_settings.pop(key, None)
        self.queue_quotas.pop(key, None)
        self.queue_bindings.pop(key, None)
        self.wake.set()

    # --- units ----------------------------------------------------------------------

    def _load_units(self) -> None:
        """After the first sync: every unit as its object says (holding, backing off, waiting)."""
        now = self.clock()
        for _, unit in self.unit_informer.items():
            self.unit_rv[unit.key] = unit.resource_version
            orphan = self._orphan_reason(unit)
            if orphan is not None:
                self.engine.set_unit(orphan_info(unit, orphan))
                continue
            requeue_at = load_unit(self.engine, unit, self._unit_info(unit), now)
            if requeue_at is not None:
                heapq.heappush(self.backoffs, (requeue_at, unit.key))
            job = self._job_of(unit)
            if job is not None:
                self._tell_unit_pods(job)
            if unit.phase in SENT_BACK and job is not None and not job.suspended and not job.state.ended:
                self._owe_suspension(unit.job_key)  # the last controller stopped before suspending it
            if unit.phase not in FINISHED:
                self.written_messages[unit.key] = unit.message

    def _orphan_reason(self, unit: UnitView) -> str | None:
        return orphan_reason(unit, self.job_informers)

    def _unit_info(self, unit: UnitView) -> UnitInfo:
        """The engine's view of a unit: what its job asks for (see views.unit_info), or why it
        stands for no job."""
        orphan = self._orphan_reason(unit)
        job = self._job_of(unit)
        if orphan is not None or job is None:
            return orphan_info(unit, orphan or ORPHAN)
        return unit_info(unit, job)

    def _newer(self, key: str, rv: str) -> bool:
        mine = self.unit_rv.get(key)
        return mine is None or _rv(rv) >= _rv(mine)

    async def _unit_changed(self, unit: UnitView) -> None:
        if not self._newer(unit.key, unit.resource_version):
            return  # older than what we wrote ourselves: nothing new
        self.unit_rv[unit.key] = unit.resource_version
        if not self.sync_done:
            return
        current = self.engine.unit(unit.key)
        if unit.phase in FINISHED:
            if current is not None:
                self.engine.remove_unit(unit.key)
                self.wake.set()
        elif current is None:
            orphan = self._orphan_reason(unit)
            if orphan is not None:
                self.engine.set_unit(orphan_info(unit, orphan))
            elif unit.phase in HOLDING:
                hold(self.engine, self._unit_info(unit), unit.allocated_at or unit.created, admitted_placement(unit))
            else:
                self.engine.set_unit(self._unit_info(unit))
            job = self._job_of(unit)
            if job is not None:
                self._tell_unit_pods(job)
            self.wake.set()
        else:
            self._refresh_asks(unit, current)
        self._enqueue_job(unit.job_key, self._job_of(unit))

    def _refresh_asks(self, unit: UnitView, current: UnitInfo) -> None:
        """Give the engine what the unit's job asks for now, its admission state kept (the
        engine owns that while we run)."""
        info = self._unit_info(unit)
        if not _spec_changed(current, info):
            return
        info.admitted_quota, info.admitted_queue = current.admitted_quota, current.admitted_queue
        info.admitted_at, info.requeue_at = current.admitted_at, current.requeue_at
        info.attempts, info.placement = current.attempts, current.placement
        if current.admitted_quota is not None and info.invalid is not None:
            info.request = current.request  # its job unusable now: it holds what it was admitted with
        self.engine.set_unit(info)
        self.wake.set()

    async def _unit_deleted(self, unit: UnitView) -> None:
        self._remember_deletion(unit.key, f"QueueUnit {unit.key} was deleted")
        self.engine.remove_unit(unit.key)
        for cache in (self.unit_rv, self.written_messages, self.pending_messages, self.failed_scheduling_at,
                      self.message_written_at, self.deferred_messages):
            cache.pop(unit.key, None)
        self.jobs_queue.add(unit.job_key)
        self.wake.set()

    # --- pods -------------------------------------------------------------------------

    def _pod_changed(self, pod: PodView, old: PodView | None = None) -> None:
        self._pod_room(self.node_usage.put(pod), pod)
        if not pod.job_label or (old is not None and old.phase == pod.phase):
            return
        self.pods.put(pod)
        self._pod_owner_changed(pod)

    def _pod_deleted(self, pod: PodView) -> None:
        self._pod_room(self.node_usage.remove(pod), pod)
        if not pod.job_label:
            return
        self.pods.remove(pod)
        self._pod_owner_changed(pod)

    def _pod_room(self, nodes: set[str], pod: PodView) -> None:
        """A pod bound, ended or gone: the room on its node changed, and where its job's pods are."""
        if not nodes:
            return
        for node in nodes:
            self.engine.set_node_usage(node, self.node_usage.used.get(node, {}))
        if pod.job_label:
            for inf in self.job_informers.values():
                job = inf.get(f"{pod.namespace}/{pod.owner_name}")
                if job is not None and job.pods is not None and job.pods[0] == pod.job_label:
                    self._tell_unit_pods(job)
        self.wake.set()

    def _tell_unit_pods(self, job: JobView) -> None:
        """Where the pods of the job's unit are bound: the room they take is theirs, not the
        unbound pods' its admission planned."""
        if job.pods is not None:
            where = self.node_usage.bound((job.pods[0], job.namespace, job.pods[1]),
                                          tuple(ps.name for ps in job.pod_sets))
            self.engine.set_unit_pods(job.unit_key, where)

    def _pod_owner_changed(self, pod: PodView) -> None:
        for kind, inf in self.job_informers.items():
            job = inf.get(f"{pod.namespace}/{pod.owner_name}")
            if job is not None and job.pods is not None and job.pods[0] == pod.job_label:
                self.jobs_queue.add(f"{kind}/{job.key}")

    # --- jobs -----------------------------------------------------------------------

    def _priority_classes_changed(self) -> None:
        """The jobs naming a PriorityClass that came, went or changed: the engine gets their
        new priority (or holds them, or lets them go) now, their units are rewritten."""
        if not self.sync_done:
            return  # _load_units reads every job's view as it is then
        for kind, informer in self.job_informers.items():
            for key, job in informer.items():
                if job.priority_classes and priority_classes_changed(job, self.priority_classes):
                    self._job_changed(f"{kind}/{key}", with_priority_classes(job, self.priority_classes))

    def _job_changed(self, item: str, job: JobView) -> None:
        """What the job asks for goes to the engine at once (not through its unit's spec,
        which the job's reconciler rewrites later); then the job is reconciled."""
        unit = self.unit_informer.get(job.unit_key)
        current = self.engine.unit(job.unit_key) if self.sync_done else None
        if unit is not None and current is not None and unit.phase not in FINISHED:
            self._refresh_asks(unit, current)
        self._enqueue_job(item, job)

    def _enqueue_job(self, item: str, job: JobView | None) -> None:
        """A job that ended goes ahead of the others: reconciling it releases its quota, and
        it must not wait behind thousands of new jobs to be given units."""
        self.jobs_queue.add(item, urgent=job is not None and job.state.ended)

    def _job_deleted(self, job: JobView) -> None:
        self.job_fingerprints.pop(f"{job.kind}/{job.key}", None)
        self.resumed_at.pop(f"{job.kind}/{job.key}", None)
        self.suspension_owed.pop(f"{job.kind}/{job.key}", None)
        self.warned_of_classes.pop(f"{job.kind}/{job.key}", None)
        self._remember_deletion(job.unit_key, f"{job.kind} {job.key} was deleted")
        self.engine.remove_unit(job.unit_key)
        self.wake.set()

    async def _reconcile_job(self, item: str) -> None:
        kind = item.partition("/")[0]
        job = self._job_view(item)
        if job is None or job.deleting:
            return
        self._warn_of_missing_classes(item, job)
        adapter = adapter_of_kind(kind)
        unit = self.unit_informer.get(job.unit_key)
        if unit is None:
            if not job.state.ended:
                await self._create_unit(item, job, adapter)
            return
        if unit.consumer_name != job.name or unit.consumer_kind != job.kind:
            return  # a unit of that name belongs to another job: not ours to drive
        held = self.engine.unit(unit.key)
        if held is not None and held.invalid is not None and held.invalid.startswith(ORPHAN):
            await self._unit_changed(unit)  # made before its job: it stands for one now
        if job.state.ended and (held is not None or self._newer(unit.key, unit.resource_version)):
            # The job ended: its unit is finished whatever our view of it says (a view older than
            # our last write, a Running say, would wait for our watch to bring that write first).
            await self._finish(unit, job)
            return
        if item in self.suspension_owed:
            # We sent its unit back: its job stops now. Not from our views: the one of the unit
            # may not show the send-back yet (and we would wait for it below), the one of the job
            # may not show our resume yet (and take it for a job suspended already).
            await self._suspend(job, adapter)
            return  # the rest when our watch brings that suspension back
        if not self._newer(unit.key, unit.resource_version):
            return  # we wrote a newer version than our watch has brought: act on that one when it comes
        if unit.phase == c.Phase.RESERVED.value:
            await self._check_admission(unit, job)
        held = self.engine.unit(unit.key)
        may_run = held is not None and held.admitted_quota is not None and unit.phase in RUNNABLE
        if not job.suspended:
            self.resumed_at.pop(item, None)
        if may_run and job.suspended:
            await self._resume(job)
        elif not may_run and not job.suspended and unit.phase not in FINISHED and not (
                unit.phase in HOLDING and (held is None or held.admitted_quota is None)):
            # (A unit whose object still holds quota that the engine has taken back is being
            # preempted or sent back: its job is suspended once that status is written, never
            # before, or a write that fails would leave a job stopped and released again for nothing.)
            await self._suspend(job, adapter)
        elif not may_run and job.suspended and job.placed and unit.phase not in FINISHED:
            await self._put_back(job)
        if may_run:
            await self._follow_running(item, unit, job)
        if job.unit_spec is not None and unit.phase not in FINISHED and _unit_spec_drifted(unit, job):
            # The controller owns the unit's spec: a hand edit (say, of its priority) is reverted.
            spec = job.unit_spec if "queue" in job.unit_spec else {**job.unit_spec, "queue": None}
            await self.client.patch(UNITS, unit.name, {"spec": spec}, namespace=unit.namespace)
            self._event(_unit_ref(unit), c.EventType.WARNING, c.EventReason.SPEC_RESTORED,
                        "spec edited by hand; restored from the job (edit the job instead)")
        labels = _unit_labels_drifted(unit, job)
        if labels and job.unit_spec is not None and unit.phase not in FINISHED:
            # So are the labels the engine reads: the unit's quota is the one its job names.
            await self.client.patch(UNITS, unit.name, {"metadata": {"labels": labels}}, namespace=unit.namespace)
            said = ", ".join(f"{k}={v}" if v is not None else f"{k} removed" for k, v in sorted(labels.items()))
            self._event(_unit_ref(unit), c.EventType.WARNING, c.EventReason.SPEC_RESTORED,
                        f"labels set from the job: {said} (edit the job instead)")

    def _warn_of_missing_classes(self, item: str, job: JobView) -> None:
        """A Warning on the job, once for each set of PriorityClasses it is held for."""
        missing = job.missing_priority_classes if job.unit_spec is not None and not job.state.ended else ()
        if not missing:
            self.warned_of_classes.pop(item, None)
        elif self.warned_of_classes.get(item) != missing:
            self.warned_of_classes[item] = missing
            self._event(_job_ref(job), c.EventType.WARNING, c.EventReason.PRIORITY_CLASS_NOT_FOUND,
                        f"not admitted: {missing_class_reason(missing)}")

    async def _create_unit(self, item: str, job: JobView, adapter: JobAdapter) -> None:
        if job.invalid or job.unit_spec is None:
            self._event(_job_ref(job), c.EventType.WARNING, c.EventReason.INVALID_JOB,
                        f"not queued: {job.invalid or 'unreadable'}")
            if not job.suspended:
                await self._suspend(job, adapter)
            return
        body = queue_unit_manifest(job)
        # A job that already ran before we started is accounted, not disturbed; a later one is suspended.
        adopt = not job.suspended and item in self.initial_jobs and (
            job.state is JobState.RUNNING or self._pod_count(job).running > 0)
        if adopt:
            hold(self.engine, unit_info(unit_view(body), job), job.created)
        try:
            created = await self.client.create(UNITS, body, namespace=job.namespace)
        except AlreadyExists:
            return
        self.unit_rv[job.unit_key] = str(created["metadata"]["resourceVersion"])
        ref = ObjectRef.of(created)
        if adopt:
            await self._write_unit_status(job.unit_key, {**st.running(), "message": "adopted: it was already running"})
            return
        # No status yet: the engine says where the unit stands in the message it sends for
        # every new unit, and that message brings the phase Enqueued with it (one write, at
        # the next flush of messages); a unit admitted before then gets its phase from that.
        self._event(ref, c.EventType.NORMAL, c.EventReason.ENQUEUED, "queued")
        if not job.suspended:
            await self._suspend(job, adapter)

    async def _suspend(self, job: JobView, adapter: JobAdapter) -> None:
        """Suspend the job, and put back what its admission changed on it (the domain its
        pods were pinned to, an elastic role's replicas), in one write."""
        item = f"{job.kind}/{job.key}"
        self.resumed_at.pop(item, None)
        owed = self.suspension_owed.get(item)
        patch = _merged(adapter.suspend_patch({}), self._placement_patch(job, None) or {})
        async with self.job_locks.hold(item):
            await self.client.patch(job_resource(job.kind), job.name, patch, namespace=job.namespace)
        if owed is not None and self.suspension_owed.get(item) == owed:  # not owed anew while we wrote
            del self.suspension_owed[item]

    def _owe_suspension(self, item: str) -> None:
        """The job's unit was sent back: its job is to be suspended before it is admitted again."""
        self.suspensions_owed += 1
        self.suspension_owed[item] = self.suspensions_owed

    def _placement_patch(self, job: JobView, placement: Placement | None) -> dict[str, Any] | None:
        """The part of a job's patch that applies an admission's placement to it (pods pinned
        to their domain, an elastic role's replicas), or, with None, puts back what an earlier
        one changed; None when there is nothing to write."""
        try:
            before = read_originals(job.placed, f"{job.kind} {job.key}")
        except InvalidObject as e:
            log.warning("%s", e.reason)
            before = {}
        return admission_patch(adapter_of_kind(job.kind).role_patch, job.roles, before, placement)

    async def _put_back(self, job: JobView) -> None:
        """A suspended job whose admission's changes are still on it (suspended by someone
        else, or our suspension written from a view older than our resume): put them back,
        while its unit is not admitted."""
        patch = self._placement_patch(job, None)
        if patch is None:
            return
        async with self.job_locks.hold(f"{job.kind}/{job.key}"):
            held = self.engine.unit(job.unit_key)
            if held is not None and held.admitted_quota is not None:
                return  # admitted again meanwhile: its resume writes its own
            await self.client.patch(job_resource(job.kind), job.name, patch, namespace=job.namespace)

    async def _resume(self, job: JobView, placement: Placement | None = None) -> None:
        """Resume a job, once: the admission and the reconciler of its unit's admission may both
        find it suspended before our watch brings the first resume back. In its turn after the
        job's suspensions on their way, and only while its unit is still admitted then. Its
        admission's placement (``placement``, else what its unit's status says) goes into the
        same write: its pods pinned to their domain, an elastic role's replicas set."""
        item = f"{job.kind}/{job.key}"
        async with self.job_locks.hold(item):
            held = self.engine.unit(job.unit_key)
            if held is None or held.admitted_quota is None:
                return  # sent back while this waited for its turn
            if self.clock() - self.resumed_at.get(item, -RESUME_AGAIN_AFTER_SECONDS) < RESUME_AGAIN_AFTER_SECONDS:
                return
            self.resumed_at[item] = self.clock()
            if placement is None:
                unit = self.unit_informer.get(job.unit_key)
                placement = admitted_placement(unit) if unit is not None else None
            patch = _merged(adapter_of_kind(job.kind).resume_patch({}), self._placement_patch(job, placement) or {})
            try:
                await self.client.patch(job_resource(job.kind), job.name, patch, namespace=job.namespace)
            except KubeError:
                self.resumed_at.pop(item, None)
                raise

    async def _finish(self, unit: UnitView, job: JobView) -> None:
        if unit.phase in FINISHED:
            return
        succeeded = job.state is JobState.SUCCEEDED
        await self._write_unit_status(unit.key, st.finished(succeeded), limit=self.job_line)
        self.suspension_owed.pop(unit.job_key, None)  # it runs no more
        held = self.engine.unit(unit.key)
        self._remember("finished", unit.key, held.admitted_quota if held else None, f"the job {job.state.value}")
        self.engine.remove_unit(unit.key)
        self.message_written_at.pop(unit.key, None)
        self.deferred_messages.pop(unit.key, None)
        self.wake.set()
        reason = c.EventReason.SUCCEED if succeeded else c.EventReason.FAILED
        self._event(_unit_ref(unit), c.EventType.NORMAL if succeeded else c.EventType.WARNING, reason,
                    f"the job {job.state.value}; its quota is released")

    async def _check_admission(self, unit: UnitView, job: JobView) -> None:
        """Reserved: all checks Ready → Dequeued; any Retry or Rejected → back to the queue."""
        states = dict(unit.checks)
        failed = sorted(name for name, state in states.items()
                        if state in (c.AdmissionCheckState.RETRY, c.AdmissionCheckState.REJECTED))
        if failed:
            said = ", ".join(f"{name} said {states[name]}" for name in failed)
            await self._send_back(unit, job, c.Phase.TIMEOUT_BACKOFF, f"admission check {said}; quota released")
        elif states and all(state == c.AdmissionCheckState.READY for state in states.values()):
            await self._write_unit_status(unit.key, st.checks_passed(sorted(states)))
            self._event(_unit_ref(unit), c.EventType.NORMAL, c.EventReason.DEQUEUED, "admission checks passed")

    async def _follow_running(self, item: str, unit: UnitView, job: JobView) -> None:
        """An admitted job: Running when it runs, podState, and the wait-for-pods-running timeout."""
        pods = self._pod_count(job)
        change = st.pod_state(unit, pods)
        if job.state is JobState.RUNNING and unit.phase == c.Phase.DEQUEUED.value:
            self._mark_running(item, unit.key, {**st.running(), **(change or {})})
            return
        if change is not None and (pods.running or pods.pending or unit.pod_state):
            await self._write_unit_status(unit.key, change, touch=False, limit=self.job_line)
        if unit.phase != c.Phase.DEQUEUED.value:
            return
        held = self.engine.unit(unit.key)
        settings = self.queue_settings.get(held.admitted_queue or "") if held else None
        if settings is None or not settings.wait_for_pods_running:
            return
        since = unit.allocated_at or (held.admitted_at if held and held.admitted_at else self.clock())
        left = since + self.config.wait_for_pods_running_seconds - self.clock()
        if left > 0:
            self.jobs_queue.add_after(item, left + 0.05)
            return
        await self._send_back(unit, job, c.Phase.TIMEOUT_BACKOFF,
                              f"its pods were not all running {self.config.wait_for_pods_running_seconds:g} s "
                              f"after admission (running {pods.running}, pending {pods.pending}); quota released")

    def _mark_running(self, item: str, key: str, status: Object) -> None:
        """Write Running in the background, in the line of the messages: it only informs, so
        admissions and releases never wait behind it, nor does the job's worker (a job that
        ends meanwhile is released at once). Not written if the unit is no longer Dequeued as
        we last wrote it, nor for a job that ended meanwhile: its unit goes to Succeed next."""
        if key in self.running_writes:
            return

        def still() -> bool:
            held, view = self.engine.unit(key), self.unit_informer.get(key)
            return held is not None and held.admitted_quota is not None and view is not None and \
                view.phase == c.Phase.DEQUEUED.value and self._newer(key, view.resource_version) and \
                not self._job_ended(item)

        async def write() -> None:
            try:
                await self._write_unit_status(key, status, limit=self.message_limit, still=still)
            except KubeError as e:
                log.info("Running of %s not written: %s", key, e)
                self.jobs_queue.add_rate_limited(item)
            finally:
                self.running_writes.pop(key, None)

        self.running_writes[key] = asyncio.create_task(write(), name=f"running-{key}")

    def _job_ended(self, item: str) -> bool:
        """Whether our latest view of the job says it succeeded or failed."""
        job = self._job_view(item)
        return job is not None and job.state.ended

    def _job_view(self, item: str) -> JobView | None:
        """Our view of the job ``kind/namespace/name``, if we have one, as of the PriorityClasses
        there are now."""
        kind, _, key = item.partition("/")
        informer = self.job_informers.get(kind)
        job = informer.get(key) if informer is not None else None
        if job is not None and job.priority_classes and priority_classes_changed(job, self.priority_classes):
            job = with_priority_classes(job, self.priority_classes)
        return job

    def _pod_count(self, job: JobView) -> Any:
        label = job.pods[0] if job.pods else c.LABEL_JOB_NAME
        value = job.pods[1] if job.pods else job.name
        return self.pods.count(label, job.namespace, value)

    async def _send_back(self, unit: UnitView, job: JobView | None, phase: c.Phase, reason: str) -> None:
        """Release the unit's quota and back it off (timeout, failed admission check)."""
        held = self.engine.unit(unit.key)
        if held is None or held.admitted_quota is None:
            return  # already sent back (a second look at a stale view of the unit)
        requeue_at = self.engine.requeue(unit.key, self.clock(), reason)
        info = self.engine.unit(unit.key)
        try:
            async with self.job_locks.hold(unit.job_key):  # after its job's release on its way, if any
                await self._write_unit_status(unit.key, st.sent_back(phase, reason, info.attempts if info else 0,
                                                                      requeue_at))
        except KubeError:
            hold(self.engine, held, unit.allocated_at or unit.created, admitted_placement(unit))
            raise
        self._owe_suspension(unit.job_key)
        heapq.heappush(self.backoffs, (requeue_at, unit.key))
        self._remember("sent back", unit.key, info.admitted_quota if info else None, reason)
        self.metrics.requeues.labels(phase.value).inc()
        self._event(_unit_ref(unit), c.EventType.WARNING, c.EventReason.TIMEOUT_BACKOFF, reason)
        if job is not None:
            self._event(_job_ref(job), c.EventType.WARNING, c.EventReason.TIMEOUT_BACKOFF, reason)
        self.jobs_queue.add(unit.job_key)
        self.wake.set()

    # --- writing status ---------------------------------------------------------------

    async def _write_unit_status(self, key: str, status: Object, *, precondition: bool = False,
                                 touch: bool = True, limit: asyncio.Semaphore | None = None,
                                 still: Callable[[], bool] | None = None) -> bool:
        """One status patch; writes of one unit go one at a time, each on the latest version.
        ``limit``: how many such writes may be in flight (messages have a line of their own); a
        place in that line is had before the unit's lock, so that a write waiting for its turn
        never holds back another write of the same unit. ``still``: checked once the lock is
        held; the write is skipped (False) when it says the status is no longer to be written."""
        ns, _, name = key.partition("/")
        if touch:
            status = {**status, "lastUpdateTime": rfc3339(self.clock())}
        async with limit or self.write_limit, self.unit_locks.hold(key):
            if still is not None and not still():
                return False
            patch: Object = {"status": status}
            if precondition and key in self.unit_rv:
                patch["metadata"] = {"resourceVersion": self.unit_rv[key]}
            obj = await self.client.patch_status(UNITS, name, patch, namespace=ns, patch_type=PatchType.MERGE)
            rv = str(obj["metadata"]["resourceVersion"])
            if self._newer(key, rv):
                self.unit_rv[key] = rv
        self.metrics.unit_status_writes.inc()
        if "message" in status:
            self.written_messages[key] = status["message"]
            self.pending_messages.pop(key, None)
        return True

    # --- scheduling ------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        next_wakeup: float | None = None
        while True:
            timeout = None if next_wakeup is None else max(0.0, next_wakeup - self.clock())
            if self.backoffs:
                until = max(0.0, self.backoffs[0][0] - self.clock())
                timeout = until if timeout is None else min(timeout, until)
            await aio.wait_event(self.wake, timeout)
            self.wake.clear()
            await asyncio.sleep(BATCH_SECONDS)
            await self._release_backoffs()
            started = time.perf_counter()
            result = self.engine.schedule(self.clock())
            self.metrics.cycle_duration.observe(time.perf_counter() - started)
            self.cycles += 1
            next_wakeup = result.next_wakeup
            for admission in result.admitted:
                self.pending_messages.pop(admission.unit, None)
            self.pending_messages.update(result.messages)
            if result.preempted:
                # A victim may be a unit whose admission is still being written: its Preempted
                # must come after its Dequeued.
                await asyncio.gather(*self.admitting, return_exceptions=True)  # (each logs its own)
                await self._preempt_then_admit(result)
            elif result.admitted:
                # The next cycle need not wait for these writes: room freed meanwhile is used at once.
                task = asyncio.create_task(self._admit_all(result.admitted), name=f"admit-{self.cycles}")
                self.admitting.add(task)
                task.add_done_callback(self._admissions_written)

    async def _preempt_then_admit(self, result: CycleResult) -> None:
        """Victims first: the admissions of a cycle may need their room, so they are written
        only once every victim's unit says it holds no quota. Written together, a reader of the
        objects (or a controller restarted in between) would see a quota over its max."""
        written = await asyncio.gather(
            *(self._preempt(p.unit, p.reason, p.requeue_at, p.quota) for p in result.preempted))
        if not all(written):
            for admission in result.admitted:  # decided with room a victim still holds
                self.engine.revert_admission(admission.unit)
            self.wake.set()
            return
        # A unit admitted and then picked as a victim later in the same cycle is not admitted
        # at all: the engine has it backing off, and its Preempted status says why.
        victims = {p.unit for p in result.preempted}
        await self._admit_all([a for a in result.admitted if a.unit not in victims])

    async def _admit_all(self, admitted: list[Admission]) -> None:
        await asyncio.gather(*(self._admit(a.unit, a.quota, a.queue, a.placement) for a in admitted))

    def _admissions_written(self, task: asyncio.Task[None]) -> None:
        self.admitting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a cycle's admissions failed", exc_info=task.exception())

    async def _admit(self, key: str, quota: str, queue: str, placement: Placement | None = None) -> None:
        unit = self.unit_informer.get(key)
        info = self.engine.unit(key)
        if unit is None or info is None:
            self.engine.revert_admission(key)
            return
        if unit.job_key in self.suspension_owed:
            # Sent back, and its job not suspended since: admitted now, it would run on from
            # before. (The back-off's end is looked at before each cycle; the engine may still
            # let it go first, when that look took a while.)
            self.engine.revert_admission(key)
            self._look_again(key, unit)
            return
        job = self._job_of(unit)
        if job is None or job.unit_spec is None:  # gone or unusable since the cycle: its unit waits
            self.engine.revert_admission(key)
            self.wake.set()
            return
        now = self.clock()
        settings = self.queue_settings.get(queue)
        labels = dict(job.unit_labels)  # the job's: a unit's labels edited by hand would skip its checks
        checks = [check.name for check in (settings.admission_checks if settings else ())
                  if selector_matches(check.label_selector, labels)]
        status = st.admitted(job.unit_spec, quota, queue, checks, info.attempts + 1, now, placement)
        try:
            await self._write_unit_status(key, status, precondition=True)
        except (Conflict, NotFound) as e:
            log.info("admission of %s not written (%s); undone", key, e.reason)
            self.engine.revert_admission(key)
            self.wake.set()
            return
        except KubeError as e:
            log.warning("admission of %s not written: %s; undone", key, e)
            self.engine.revert_admission(key)
            self.wake.set()
            return
        self._remember("admitted", key, quota, status["message"])
        self.metrics.admissions.labels(queue, quota).inc()
        self.metrics.admission_wait.labels(queue).observe(max(0.0, now - unit.created))
        reason = c.EventReason.RESERVED if checks else c.EventReason.DEQUEUED
        self._event(_unit_ref(unit), c.EventType.NORMAL, reason, status["message"])
        if not checks:
            await self._release(unit, placement)
        self.jobs_queue.add(unit.job_key)

    async def _release(self, unit: UnitView, placement: Placement | None) -> None:
        """Let an admitted unit's job run now, rather than when our watch brings back the
        admission we just wrote (the job reconciler does it then, if this fails)."""
        job = self._job_of(unit)
        if job is None or not job.suspended or job.deleting:
            return
        try:
            await self._resume(job, placement)
        except KubeError as e:
            log.info("job %s not released yet: %s", job.key, e)

    async def _preempt(self, key: str, reason: str, requeue_at: float, quota: str) -> bool:
        """Write a victim's Preempted status; False (and the victim keeps its quota) if that failed."""
        unit = self.unit_informer.get(key)
        if unit is None:
            return True
        info = self.engine.unit(key)
        try:
            async with self.job_locks.hold(unit.job_key):  # after its job's release on its way, if any
                await self._write_unit_status(
                    key, st.sent_back(c.Phase.PREEMPTED, reason, info.attempts if info else 0, requeue_at))
        except KubeError as e:
            log.warning("preemption of %s not written: %s; it keeps its quota", key, e)
            if info is not None:  # its object still says it holds quota: so does the engine
                hold(self.engine, info, unit.allocated_at or unit.created, admitted_placement(unit))
            return False
        self._owe_suspension(unit.job_key)
        heapq.heappush(self.backoffs, (requeue_at, key))
        self._remember("preempted", key, quota, reason)
        self.metrics.preemptions.labels(quota).inc()
        self._event(_unit_ref(unit), c.EventType.WARNING, c.EventReason.PREEMPTED, reason)
        job = self._job_of(unit)
        if job is not None:
            self._event(_job_ref(job), c.EventType.WARNING, c.EventReason.PREEMPTED, reason)
        self.jobs_queue.add(unit.job_key)
        return True

    async def _release_backoffs(self) -> None:
        now = self.clock()
        while self.backoffs and self.backoffs[0][0] <= now:
            _, key = heapq.heappop(self.backoffs)
            if not self._waiting(key):
                continue  # admitted again since (an entry left from an earlier back-off), or gone
            unit = self.unit_informer.get(key)
            job = self._job_of(unit) if unit is not None else None
            if unit is not None and job is not None and not job.state.ended and (
                    unit.job_key in self.suspension_owed or (unit.phase in SENT_BACK and not job.suspended)):
                # Its job still runs from before (its suspension is not written yet): admitted
                # again now, it would run twice over without a suspension between. Wait for that.
                # (What we owe is known even when our views of the unit and the job lag.)
                self._look_again(key, unit, now)
                continue
            if unit is not None and unit.phase in SENT_BACK:
                # (Our view of the unit may lag: Preempted still, when we have since written its
                # new admission. Written then, this Enqueued would take back what its job was given.)
                try:
                    await self._write_unit_status(key, st.enqueued("back in the queue after a back-off"),
                                                  still=lambda key=key: self._waiting(key))
                except KubeError as e:
                    log.info("unit %s not requeued yet: %s", key, e)

    def _waiting(self, key: str) -> bool:
        """Whether the engine has the unit and has not admitted it (queued or backing off)."""
        held = self.engine.unit(key)
        return held is not None and held.admitted_quota is None

    def _look_again(self, key: str, unit: UnitView, now: float | None = None) -> None:
        """Keep a unit out of the queue a little longer, its job's suspension asked for again."""
        now = self.clock() if now is None else now
        held = self.engine.unit(key)
        if held is not None and held.admitted_quota is None:
            held.requeue_at = now + BACKOFF_RECHECK_SECONDS
            self.engine.set_unit(held)
        heapq.heappush(self.backoffs, (now + BACKOFF_RECHECK_SECONDS, key))
        self.jobs_queue.add(unit.job_key)

    def _job_of(self, unit: UnitView) -> JobView | None:
        return self._job_view(unit.job_key)

    def _remember_deletion(self, key: str, what: str) -> None:
        """A unit the engine still held leaves: its quota (if admitted) is freed, or its place in line."""
        held = self.engine.unit(key)
        if held is None:
            return  # already gone (the job's deletion took its unit with it), or finished
        quota = held.admitted_quota
        self._remember("deleted", key, quota, f"{what}; quota {quota} released" if quota
                       else f"{what}; it left the queue")

    def _remember(self, what: str, unit: str, quota: str | None, message: str) -> None:
        self.recent.appendleft({"time": self.clock(), "what": what, "unit": unit, "quota": quota,
                                "message": message})

    def overview(self) -> Overview:
        """The quota tree, the queues and the recent decisions (the dashboard's JSON)."""
        units = {key: unit for key, unit in self.unit_informer.items()}
        return overview(self.engine, self.quotas, units, self.capacity, self.clock(), self.recent,
                        queue_quotas=self.queue_quotas)

    def explain(self, key: str) -> dict[str, Any] | None:
        unit = self.unit_informer.get(key)
        return None if unit is None else explain(self.engine, self.quotas, unit, self.capacity)

    # --- why units wait: written at most once a second each ----------------------------

    async def _message_loop(self) -> None:
        while True:
            await asyncio.sleep(MESSAGE_FLUSH_SECONDS)
            batch, self.pending_messages = self.pending_messages, {}
            now = self.clock()
            while self.messages_due and self.messages_due[0][0] <= now:
                _, key = heapq.heappop(self.messages_due)
                message = self.deferred_messages.pop(key, None)
                if message is not None:
                    batch.setdefault(key, message)  # unless a newer one came meanwhile
            writes = [self._tell(key, message) for key, message in batch.items() if not self._defer(key, message, now)]
            if writes:
                await asyncio.gather(*writes)

    def _defer(self, key: str, message: str, now: float) -> bool:
        """Whether the message is not to be written now: it is written already, or the unit was
        told why it waits less than MESSAGE_REFRESH_SECONDS ago (then kept until that is over)."""
        last = self.written_messages.get(key)
        if last == message:
            self.deferred_messages.pop(key, None)
            return True
        if last is None or _waiting_its_turn(last):
            return False
        due = self.message_written_at.get(key, -MESSAGE_REFRESH_SECONDS) + MESSAGE_REFRESH_SECONDS
        if now >= due:
            return False
        if key not in self.deferred_messages:
            heapq.heappush(self.messages_due, (due, key))
        self.deferred_messages[key] = message
        return True

    async def _tell(self, key: str, message: str) -> None:
        if self.written_messages.get(key) == message:
            return
        unit = self.unit_informer.get(key)
        if not self._waiting(key) or (unit is not None and unit.phase in SENT_BACK):
            return  # admitted, gone, or backing off since: its own status says why
        if unit is None or not self._newer(key, unit.resource_version):
            # Created, but our watch has not brought it yet; or our view of it is older than our
            # own last write (an admission, a send-back), and would take it for a new unit: try
            # again at the next flush.
            self.pending_messages.setdefault(key, message)
            return
        first = not unit.phase  # a new unit: its first status is its phase and this message
        seen = unit.resource_version

        def still_waiting() -> bool:  # not admitted, nor written otherwise, while this write waited for its turn
            return self._waiting(key) and self.written_messages.get(key) != message and self._newer(key, seen)

        try:
            if first:
                written = await self._write_unit_status(key, st.enqueued(message), precondition=True,
                                                        limit=self.message_limit, still=still_waiting)
            else:
                written = await self._write_unit_status(key, {"message": message}, touch=False,
                                                        limit=self.message_limit, still=still_waiting)
            if not written:
                return
            self.message_written_at[key] = self.clock()
        except Conflict:  # our view of it is stale: look again at the next flush
            self.pending_messages.setdefault(key, message)
            return
        except KubeError as e:
            log.info("message of %s not written: %s", key, e)
            return
        now = self.clock()
        if _waiting_its_turn(message):
            return  # queued, not yet tried: no scheduling has failed
        if now - self.failed_scheduling_at.get(key, -FAILED_SCHEDULING_EVERY) >= FAILED_SCHEDULING_EVERY:
            self.failed_scheduling_at[key] = now
            self._event(_unit_ref(unit), c.EventType.WARNING, c.EventReason.FAILED_SCHEDULING, message)
            job = self._job_of(unit)
            if job is not None:
                self._event(_job_ref(job), c.EventType.WARNING, c.EventReason.FAILED_SCHEDULING, message)

    # --- periodic status: quotas' used, queues' positions --------------------------

    async def _status_loop(self) -> None:
        last_used: dict[str, dict[str, str]] = {}
        last_positions: dict[str, Any] = {}
        last_queue_write: dict[str, float] = {}
        last_reasons = self.clock()
        while True:
            await asyncio.sleep(self.config.quota_status_refresh_seconds)
            for name, quota in self.engine.quota_status().items():
                for resource in set(quota.max) | set(quota.used) | set(quota.min):
                    for kind, amounts in (("min", quota.min), ("max", quota.max),
                                          ("runtime", quota.runtime), ("used", quota.used)):
                        self.metrics.quota.labels(name, resource, kind).set(amounts.get(resource, 0) / 1000)
                # Every resource of max, zeros included: a merge patch cannot drop keys by omission.
                used = format_resource_list({r: quota.used.get(r, 0) for r in set(quota.max) | set(quota.used)})
                if last_used.get(name) == used:
                    continue
                namespace = self.quota_namespaces.get(name)
                if namespace is None:
                    continue
                try:
                    await self.client.patch_status(QUOTAS, name, {"status": {"used": used}}, namespace=namespace)
                    last_used[name] = used
                except KubeError as e:
                    log.info("status.used of quota %s not written: %s", name, e)
            if self.sync_done:
                for key, quota in list(self.queue_quotas.items()):
                    await self._write_binding(key, quota)
            now = self.clock()
            due = [key for key, settings in self.queue_settings.items()
                   if now - last_queue_write.get(key, -1e18) >= self._refresh_seconds(key, settings)]
            reasons_due = now - last_reasons >= self.config.reason_refresh_seconds
            if not due and not reasons_due:
                continue  # every queue's positions are fresh: not worth ordering every pending unit again
            positions = self.engine.queue_positions()  # 0.3 s with 100k pending units: only when some are due
            if reasons_due:
                last_reasons = now
                self._retell_reasons(positions)
            for queue_key, standings in positions.items():
                self.metrics.pending_units.labels(queue_key).set(len(standings))
                settings = self.queue_settings.get(queue_key, QueueSettings())
                if now - last_queue_write.get(queue_key, -1e18) < self._refresh_seconds(queue_key, settings):
                    continue
                depth = min(QUEUE_ITEMS_WRITTEN, settings.max_depth or QUEUE_ITEMS_WRITTEN)
                active = [
                    {"name": s.unit.partition("/")[2], "namespace": s.unit.partition("/")[0],
                     "priority": s.priority, "position": s.position or 0}
                    for s in standings[:depth]
                ]
                if last_positions.get(queue_key) == active:
                    last_queue_write[queue_key] = now  # looked at: fresh until its next refresh
                    continue
                ns, _, name = queue_key.partition("/")
                try:
                    await self.client.patch_status(
                        QUEUES, name, {"status": {"queueItemDetails": {"active": active}}}, namespace=ns)
                    last_positions[queue_key] = active
                    last_queue_write[queue_key] = now
                except NotFound:
                    last_queue_write[queue_key] = now  # a quota's Queue not created yet, or gone
                except KubeError as e:
                    log.info("positions of queue %s not written: %s", queue_key, e)

    def _retell_reasons(self, positions: dict[str, list[Standing]]) -> None:
        """Tell again the waiting units whose written reason moved since: the engine tells a
        unit why it waits when it looks at it, and amounts (what is used, what is held for
        whom) move with every admission elsewhere. A unit only queued so far ("waiting for
        its turn") keeps that until the engine tells it a reason: true, and with 100k
        pending units not worth 100k writes."""
        for standings in positions.values():
            for standing in standings:
                written = self.written_messages.get(standing.unit)
                if written is not None and standing.message and written != standing.message \
                        and not _waiting_its_turn(written):
                    self.pending_messages.setdefault(standing.unit, standing.message)

    def _refresh_seconds(self, queue_key: str, settings: QueueSettings) -> float:
        """The Queue's own refresh interval annotation, else the controller's setting."""
        obj = self.queue_informer.get(queue_key) or {}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        given = c.ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL in annotations
        return settings.refresh_seconds if given else self.config.queue_status_refresh_seconds



def _rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _job_fingerprint(obj: Object, pc_version: int) -> int:
    """A hash of what a job's unit is made from: all but its suspension and status."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if isinstance(spec, dict) and ("suspend" in spec or isinstance(spec.get("runPolicy"), dict)):
        spec = {k: v for k, v in spec.items() if k != "suspend"}
        if isinstance(spec.get("runPolicy"), dict):
            spec["runPolicy"] = {k: v for k, v in spec["runPolicy"].items() if k != "suspend"}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and c.ANNOTATION_SUSPEND in annotations:
        annotations = {k: v for k, v in annotations.items() if k != c.ANNOTATION_SUSPEND}
    try:
        return hash(orjson.dumps([meta.get("uid"), meta.get("creationTimestamp"), meta.get("labels"), annotations,
                                  spec, pc_version], option=orjson.OPT_SORT_KEYS))
    except TypeError:
        return id(obj)  # not JSON as we know it: never equal to another


def _waiting_its_turn(message: str) -> bool:
    """Whether the engine's message says only that a unit is queued (engine.messages.queued),
    not why it does not fit."""
    return message.startswith("queued in ")


def _without_status(obj: Object) -> Object:
    """Quotas and Queues as cached: their status is ours, written from the engine, never read."""
    obj = trim(obj)
    obj.pop("status", None)
    return obj


def _same_spec(old: Object, new: Object) -> bool:
    """Whether a change left spec, labels and annotations (all a quota or a Queue is read for) alone."""
    before, after = old.get("metadata") or {}, new.get("metadata") or {}
    return old.get("spec") == new.get("spec") and before.get("labels") == after.get("labels") and \
        before.get("annotations") == after.get("annotations")


def _is_auto_queue(obj: Object, quota: str) -> bool:
    """Whether a Queue in the system namespace is the one made for ``quota`` (by us)."""
    meta = obj.get("metadata") or {}
    return meta.get("name") == quota and (meta.get("labels") or {}).get(c.LABEL_QUOTA_NAME) == quota


def _spec_changed(current: UnitInfo, new: UnitInfo) -> bool:
    return (current.priority, current.request, current.queue_name, current.quota_name, current.preemptible,
            current.invalid, current.pod_sets) != (new.priority, new.request, new.queue_name, new.quota_name,
                                                   new.preemptible, new.invalid, new.pod_sets)


def _unit_spec_drifted(unit: UnitView, job: JobView) -> bool:
    """Whether the unit asks for something else than its job: priority, queue, total request
    (as amounts), pod sets (name, count, minCount). How pod templates are written is not
    compared: Koord-Queue copies whole templates where we keep only the requests, and a
    unit it wrote is not one edited by hand."""
    want = job.unit_spec
    assert want is not None
    if unit.spec.get("priority") != want.get("priority"):
        return True
    if "queue" in want and unit.spec.get("queue") != want["queue"]:
        return True
    if "queue" not in want and unit.spec.get("queue") not in (None, "", job_label(job, c.LABEL_QUOTA_NAME)):
        return True  # a queue given by hand (Koord-Queue writes the one of the job's quota: no change)
    return _amounts(unit.spec.get("resource")) != _amounts(want.get("resource")) or \
        _pod_set_shape(unit.spec.get("podSet")) != _pod_set_shape(want.get("podSet"))


UNIT_LABELS_OWNED = (c.LABEL_QUOTA_NAME, c.LABEL_PREEMPTIBLE)  # the unit's labels the engine reads


def job_label(job: JobView, name: str) -> str | None:
    return dict(job.unit_labels).get(name)


def _unit_labels_drifted(unit: UnitView, job: JobView) -> dict[str, str | None]:
    """The owned labels on which the unit and its job differ, as a merge patch to the job's values."""
    return {name: job_label(job, name) for name in UNIT_LABELS_OWNED
            if unit.label(name) != job_label(job, name)}


def _amounts(resources: object) -> dict[str, int] | None:
    try:
        return parse_resource_list(resources or {})
    except QuantityError:
        return None


def _pod_set_shape(pod_sets: object) -> list[tuple[Any, ...]] | None:
    if not isinstance(pod_sets, list):
        return None
    return sorted((str(p.get("name")), p.get("count"), p.get("minCount")) if isinstance(p, dict) else ("?",)
                  for p in pod_sets)


def _unit_ref(unit: UnitView) -> ObjectRef:
    return ObjectRef(c.QUEUE_API_VERSION, c.QUEUE_UNIT_KIND, unit.name, unit.namespace, unit.uid)


def _job_ref(job: JobView) -> ObjectRef:
    return ObjectRef(job.api_version, job.kind, job.name, job.namespace, job.uid)


def _priority_value(obj: Object) -> int | None:
    value = obj.get("value")
    return value if isinstance(value, int) else None


def _node_info(obj: Object) -> NodeInfo:
    """A node as node fit needs it: allocatable ({} when unreadable), labels, taints, cordon."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    try:
        allocatable = parse_resource_list((obj.get("status") or {}).get("allocatable") or {})
    except QuantityError:
        allocatable = {}
    labels = meta.get("labels") or {}
    taints = tuple(Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                   for t in spec.get("taints") or () if isinstance(t, dict))
    return NodeInfo(str(meta.get("name", "")), allocatable,
                    {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
                    taints, bool(spec.get("unschedulable")))


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two merge patches as one (``b`` wins where both set a value)."""
    out = dict(a)
    for key, value in b.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out

