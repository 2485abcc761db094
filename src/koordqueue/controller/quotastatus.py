"""Who writes the status of ElasticQuotas and Queues, every few seconds from the engine: a
quota's status.used (and its Prometheus gauges), a Queue's status.quota and Bound
condition, and the positions of the units pending in each Queue (status.queueItemDetails,
refreshed at the Queue's own interval). Also has the waiting units told again why they wait
when their reason moved (messages.py writes it)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.objects import QueueSettings
from koordqueue.api.quantity import format_resource_list
from koordqueue.controller import status as st
from koordqueue.controller.messages import MessageWriter
from koordqueue.controller.quotasync import QuotaSync
from koordqueue.controller.resources import QUEUES, QUOTAS
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.views import Object
from koordqueue.kube.errors import KubeError, NotFound

log = logging.getLogger(__name__)

QUEUE_ITEMS_WRITTEN = 200  # pending units listed in a Queue's status


class QuotaStatusWriter(Part):
    def __init__(self, shared: Shared, quotas: QuotaSync, messages: MessageWriter) -> None:
        super().__init__(shared)
        self.quotas = quotas
        self.messages = messages
        self.queue_bindings: dict[str, Object] = {}  # queue key -> the status.quota and Bound condition written

    def wire(self) -> None:
        self.informers.queue.on_delete(self._queue_deleted)

    def _queue_deleted(self, obj: Object) -> None:
        meta = obj.get("metadata") or {}
        self.queue_bindings.pop(f"{meta.get('namespace')}/{meta.get('name')}", None)

    async def run(self) -> None:
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
                namespace = self.quotas.quota_namespaces.get(name)
                if namespace is None:
                    continue
                try:
                    await self.client.patch_status(QUOTAS, name, {"status": {"used": used}}, namespace=namespace)
                    last_used[name] = used
                except KubeError as e:
                    log.info("status.used of quota %s not written: %s", name, e)
            if self.shared.sync_done:
                for key, bound in list(self.quotas.queue_quotas.items()):
                    await self._write_binding(key, bound)
            now = self.clock()
            due = [key for key, settings in self.quotas.queue_settings.items()
                   if now - last_queue_write.get(key, -1e18) >= self._refresh_seconds(key, settings)]
            reasons_due = now - last_reasons >= self.config.reason_refresh_seconds
            if not due and not reasons_due:
                continue  # every queue's positions are fresh: not worth ordering every pending unit again
            positions = self.engine.queue_positions()  # 0.3 s with 100k pending units: only when some are due
            if reasons_due:
                last_reasons = now
                self.messages.retell_reasons(positions)
            for queue_key, standings in positions.items():
                self.metrics.pending_units.labels(queue_key).set(len(standings))
                settings = self.quotas.queue_settings.get(queue_key, QueueSettings())
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

    async def _write_binding(self, key: str, quota: str | None) -> None:
        """The Queue's status.quota and Bound condition, when they changed (from the status loop,
        never from an informer's handler: a slow write must not hold back its events)."""
        written = {"status": self.queue_bindings.get(key) or {}}  # (the cache keeps no status)
        status = st.queue_binding(written, quota, quota in self.quotas.quotas, self.clock())
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

    def _refresh_seconds(self, queue_key: str, settings: QueueSettings) -> float:
        """The Queue's own refresh interval annotation, else the controller's setting."""
        obj = self.informers.queue.get(queue_key) or {}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        given = c.ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL in annotations
        return settings.refresh_seconds if given else self.config.queue_status_refresh_seconds
