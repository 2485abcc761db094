"""What the controller's parts share: the engine, our views of the cluster, what we remember
of each object, the Events' line, the job reconcilers' queue and the scheduler's wake-up.
Each part (quotasync, unitsync, reconciler, jobswitch, unitstatus, scheduler, messages,
quotastatus) keeps its own state besides and is given the parts it calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from koordqueue.api import constants as c
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.eventline import EventLine
from koordqueue.controller.informers import Informers
from koordqueue.controller.metrics import Metrics
from koordqueue.controller.records import Backoffs, OwedSuspensions, RecentDecisions, Records
from koordqueue.controller.views import Object
from koordqueue.engine import Engine
from koordqueue.engine.runtimes import RuntimeBook
from koordqueue.kube.api import KubeAPI
from koordqueue.kube.events import ObjectRef
from koordqueue.kube.workqueue import WorkQueue
from koordqueue.loader import Settings


class Shared:
    def __init__(self, client: KubeAPI, config: ControllerConfig, metrics: Metrics,
                 clock: Callable[[], float]) -> None:
        self.client = client
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.settings: Settings = config.settings  # how objects are loaded into the engine (loader.py)
        self.engine = Engine(self.settings.engine_config())
        self.records = Records()
        self.owed = OwedSuspensions(self.records)
        self.backoffs = Backoffs()
        self.recent = RecentDecisions()
        self.informers = Informers(client, config, self.records)
        self.events = EventLine(client)
        self.jobs_queue: WorkQueue[str] = WorkQueue()  # job items (kind/namespace/name) to reconcile
        self.wake = asyncio.Event()  # something changed: the scheduler runs a cycle
        self.sync_done = False  # the first sync is over (quotas settled, units loaded)
        self.initial_jobs: set[str] = set()  # the jobs there were then
        self.koordinator_seen = False  # one of Koordinator's own quotas is there (quotasync)
        # What jobs took, per quota and job-name pattern (the forecast's history; bounded).
        self.runtimes = RuntimeBook(config.default_expected_runtime_seconds)

    @property
    def beside_koordinator(self) -> bool:
        """Whether koord-scheduler schedules the pods (config.koordinator): admissions mark pod
        templates for it, and admit nothing past a quota's runtime as it computes it."""
        return self.settings.beside_koordinator(self.koordinator_seen)


class Part:
    """A part of the controller: its shared handles under short names."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.client = shared.client
        self.config = shared.config
        self.metrics = shared.metrics
        self.clock = shared.clock
        self.engine = shared.engine
        self.records = shared.records
        self.informers = shared.informers
        self.wake = shared.wake
        self.jobs_queue = shared.jobs_queue

    def _event(self, ref: ObjectRef | Object, event_type: c.EventType, reason: c.EventReason, message: str) -> None:
        self.shared.events.emit(ref, event_type, reason, message)

    def _remember(self, what: str, unit: str, quota: str | None, message: str) -> None:
        self.shared.recent.remember(self.clock(), what, unit, quota, message)

    def _waiting(self, key: str) -> bool:
        """Whether the engine has the unit and has not admitted it (queued or backing off)."""
        known = self.engine.unit(key)
        return known is not None and known.admitted_quota is None
