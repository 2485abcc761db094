"""Kubernetes Events, written by a few writers from a bounded queue; nobody waits for them.

Events are advice: written at most EVENTS_PER_SECOND (bursts of EVENT_BURST), and past
EVENT_BACKLOG waiting, new ones are dropped (and counted), as client-go's broadcaster
drops them: a storm of 100k new jobs must neither become 100k tasks in memory nor take
the API server's time from the writes that admit and release (under Kueue's baseline,
events were a third of the controller's requests and saturated the machine with them).
"""

from __future__ import annotations

import asyncio
import logging

from koordqueue.api import constants as c
from koordqueue.controller.views import JobView, Object, UnitView
from koordqueue.kube.api import KubeAPI
from koordqueue.kube.events import EventRecorder, ObjectRef
from koordqueue.kube.ratelimit import TokenBucket

log = logging.getLogger(__name__)

EVENT_WRITERS = 8
EVENT_BACKLOG = 1_000
EVENTS_PER_SECOND = 100.0
EVENT_BURST = 500

Event = tuple[ObjectRef | Object, c.EventType, c.EventReason, str]


class EventLine:
    def __init__(self, client: KubeAPI) -> None:
        self.recorder = EventRecorder(client, "koord-queue")
        self.queue: asyncio.Queue[Event] = asyncio.Queue(EVENT_BACKLOG)
        self.dropped = 0
        self.bucket = TokenBucket(EVENTS_PER_SECOND, EVENT_BURST)

    def emit(self, ref: ObjectRef | Object, event_type: c.EventType, reason: c.EventReason, message: str) -> None:
        """Queue an Event for the writers."""
        try:
            self.queue.put_nowait((ref, event_type, reason, message))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("%d events dropped so far: more than %d waiting to be written", self.dropped,
                            EVENT_BACKLOG)

    async def writer(self) -> None:
        while True:
            ref, event_type, reason, message = await self.queue.get()
            await self.bucket.acquire()
            await self.recorder.record(ref, event_type, reason, message)


def unit_ref(unit: UnitView) -> ObjectRef:
    return ObjectRef(c.QUEUE_API_VERSION, c.QUEUE_UNIT_KIND, unit.name, unit.namespace, unit.uid)


def job_ref(job: JobView) -> ObjectRef:
    return ObjectRef(job.api_version, job.kind, job.name, job.namespace, job.uid)
