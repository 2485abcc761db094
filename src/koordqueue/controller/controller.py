"""The Kubernetes shell around the engine, made of parts with one job each (their files):

- informers.py: our views of the cluster (one informer per kind, small projections);
- quotasync.py: ElasticQuotas, Queues and nodes into the engine;
- unitsync.py: QueueUnits, jobs' asks, PriorityClasses and pods into the engine;
- reconciler.py: the job reconciler, keeping every job and its QueueUnit in step;
- jobswitch.py: who suspends and resumes jobs, one write of a job at a time;
- scheduler.py: the scheduling loop, running the engine's cycles and writing their decisions
  (admissions, preemptions), send-backs and the ends of back-offs;
- unitstatus.py: the one writer of QueueUnits' status;
- messages.py: why waiting units wait (status.message, FailedScheduling);
- quotastatus.py: ElasticQuotas' and Queues' status (used, binding, positions);
- records.py: what we remember of each unit and job (one record each), the suspensions
  owed, the back-offs, the recent decisions; eventline.py: Events.

Every decision is in the objects, so a restarted controller picks up where the last one
stopped. Who is right when: while the controller runs, the engine is the authority on
which unit holds quota; a unit it has never seen that says it holds quota (after a
restart, an upgrade from Koord-Queue, or a job that ran before us) is accounted as holding it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.dryrun import dry_run
from koordqueue.controller.eventline import EVENT_WRITERS
from koordqueue.controller.forecaster import Forecaster
from koordqueue.controller.jobswitch import JobSwitch
from koordqueue.controller.loading import Snapshot
from koordqueue.controller.messages import MessageWriter
from koordqueue.controller.metrics import Metrics
from koordqueue.controller.overview import Overview, explain, overview
from koordqueue.controller.podgroups import WORKERS as POD_GROUP_WORKERS
from koordqueue.controller.podgroups import PodGroups
from koordqueue.controller.quotastatus import QuotaStatusWriter
from koordqueue.controller.quotasync import QuotaSync
from koordqueue.controller.reconciler import JobReconciler
from koordqueue.controller.scheduler import Scheduler
from koordqueue.controller.shared import Shared
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.controller.unitsync import UnitSync
from koordqueue.controller.usagehistory import UsageHistoryKeeper
from koordqueue.controller.views import JobView, UnitView
from koordqueue.engine import Engine
from koordqueue.engine.forecast import clone
from koordqueue.kube.api import KubeAPI
from koordqueue.kube.informer import Informer


class Controller:
    """Run with `await controller.run()`; `stop()` ends it. Makes the parts and runs them."""

    def __init__(
        self,
        client: KubeAPI,
        config: ControllerConfig | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.shared = shared = Shared(client, config or ControllerConfig(), metrics or Metrics(), clock)
        self.quota_sync = QuotaSync(shared)
        self.unit_sync = UnitSync(shared)
        self.unit_status = UnitStatusWriter(shared)
        self.switch = JobSwitch(shared, self.unit_status)
        queue_settings = self.quota_sync.queue_settings
        self.scheduler = Scheduler(shared, self.unit_status, self.switch, queue_settings)
        self.reconciler = JobReconciler(shared, self.unit_sync, self.unit_status, self.switch, self.scheduler,
                                        queue_settings)
        self.messages = MessageWriter(shared, self.unit_status)
        self.quota_status = QuotaStatusWriter(shared, self.quota_sync, self.messages)
        # Workloads queued by a scheduling gate (podgroups.py), when any is (the chart's extension.pod, ...).
        self.pod_groups = PodGroups(shared) if shared.config.workload_kinds else None
        self.usage_history = UsageHistoryKeeper(shared)
        self.forecaster = Forecaster(shared, self.unit_status, lambda: self.scheduler.cycles)
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopped = asyncio.Event()

    # --- what the manager, the dashboard and tests read --------------------------------

    @property
    def client(self) -> KubeAPI:
        return self.shared.client

    @property
    def engine(self) -> Engine:
        return self.shared.engine

    @property
    def sync_done(self) -> bool:
        return self.shared.sync_done

    @property
    def unit_informer(self) -> Informer[UnitView]:
        return self.shared.informers.unit

    @property
    def job_informers(self) -> dict[str, Informer[JobView]]:
        return self.shared.informers.jobs

    @property
    def recent(self) -> deque[dict[str, Any]]:
        return self.shared.recent.entries

    # --- running ------------------------------------------------------------------

    async def run(self) -> None:
        shared = self.shared
        try:  # a replica that loses its lease while starting must not leave informers behind
            self.quota_sync.wire()
            self.unit_sync.wire()
            self.switch.wire()  # (after unit_sync: it reads the pod index unit_sync keeps)
            self.quota_status.wire()
            if self.pod_groups is not None:
                self.pod_groups.wire()
            self._tasks += [asyncio.create_task(shared.events.writer(), name=f"event-writer-{i}")
                            for i in range(EVENT_WRITERS)]
            await self.quota_sync.publish_settings()
            await self.usage_history.load()
            # The Queues a start makes are written while the jobs still list (settle_queues), and
            # are all in before the first cycle: the cycle's writes would otherwise queue behind
            # them at a busy API server (the embedded one serves one request at a time).
            await shared.informers.start(self.quota_sync.settle_queues)
            if self.quota_sync.queue_writes is not None:
                await self.quota_sync.queue_writes
            if self.pod_groups is not None:
                await self.pod_groups.start()
            self.quota_sync.settle_usage()
            self.unit_sync.load_units()
            shared.sync_done = True
            shared.initial_jobs = {f"{kind}/{key}" for kind, inf in shared.informers.jobs.items()
                                   for key, _ in inf.items()}
            for item in sorted(shared.initial_jobs):
                shared.jobs_queue.add(item)
            self._tasks += [asyncio.create_task(shared.jobs_queue.serve(self.reconciler.reconcile, "job"),
                                                name=f"job-worker-{i}") for i in range(shared.config.job_workers)]
            self._tasks.append(asyncio.create_task(self.scheduler.run(), name="scheduler"))
            self._tasks.append(asyncio.create_task(self.quota_status.run(), name="status"))
            self._tasks.append(asyncio.create_task(self.usage_history.run(), name="usage-history"))
            self._tasks.append(asyncio.create_task(self.quota_sync.run_tree_status(), name="tree-status"))
            self._tasks.append(asyncio.create_task(self.messages.run(), name="messages"))
            if self.pod_groups is not None:
                groups = self.pod_groups
                self._tasks += [asyncio.create_task(groups.queue.serve(groups.sync, "pod group"),
                                                    name=f"pod-group-worker-{i}") for i in range(POD_GROUP_WORKERS)]
            self._tasks.append(asyncio.create_task(self.forecaster.run(), name="forecast"))
            shared.wake.set()
            await self._stopped.wait()
        finally:
            await self._shutdown()

    def stop(self) -> None:
        self._stopped.set()

    async def _shutdown(self) -> None:
        self.shared.jobs_queue.shutdown()
        if self.pod_groups is not None:
            self.pod_groups.queue.shutdown()
        writes = self.quota_sync.queue_writes
        tasks = [*self._tasks, *self.unit_status.inform_tasks, *self.scheduler.admitting,
                 *([writes] if writes is not None else [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(i.stop() for i in self._informers()), return_exceptions=True)

    def _informers(self) -> list[Informer[Any]]:
        return [*self.shared.informers.all(), *([self.pod_groups.pods] if self.pod_groups is not None else [])]

    # --- the dashboard's -------------------------------------------------------------

    def overview(self) -> Overview:
        """The quota tree, the queues and the recent decisions (the dashboard's JSON)."""
        units = {key: unit for key, unit in self.unit_informer.items()}
        return overview(self.engine, self.quota_sync.quotas, units, self.quota_sync.capacity, self.shared.clock(),
                        self.recent, queue_quotas=self.quota_sync.queue_quotas, forecast=self.forecaster.current)

    async def dry_run(self, obj: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
        """What the job (dryrun.parse_job's) would meet if submitted now, from the live state:
        the engine is cloned on the loop, the rest runs in a thread on the copy; nothing is
        created. DryRunError when it cannot be queued."""
        snap = Snapshot(engine=clone(self.engine), quotas=dict(self.quota_sync.quotas),
                        units=dict(self.unit_informer.items()), capacity=self.quota_sync.capacity,
                        priority_classes=dict(self.shared.informers.priority_classes))
        jobs = {key: self.forecaster.job_runtime(key) for key in self.engine._ledger.units}
        return await asyncio.to_thread(dry_run, snap, obj, kind, self.shared.clock(), self.shared.runtimes.copy(),
                                       jobs.get, where)

    def explain(self, key: str) -> dict[str, Any] | None:
        unit = self.unit_informer.get(key)
        if unit is None:
            return None
        return explain(self.engine, self.quota_sync.quotas, unit, self.quota_sync.capacity,
                       forecast=self.forecaster.current, now=self.shared.clock(),
                       runtime_problem=self.forecaster.problems.get(key))
