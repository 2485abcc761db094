"""Who writes the status of ElasticQuotas and Queues, every few seconds from the engine: a
quota's status.used (and its Prometheus gauges; with the object where the CRD has no status
subresource, as Koordinator's, whose koord-scheduler writes it too), a Queue's status.quota and Bound
condition, Koord-Queue's usage annotations on a Queue (alibabacloud.com/queue-used and the
others, when they change), and the positions of the units pending in each Queue
(status.queueItemDetails, refreshed at the Queue's own interval, unless the Queue has
koord-queue/disable-show-queue-items). Also has the waiting units told again why they wait
when their reason moved (messages.py writes it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import orjson

from koordqueue.api import constants as c
from koordqueue.api.objects import QueueSettings, QuotaInfo
from koordqueue.api.quantity import ResourceList, add, format_resource_list, sub
from koordqueue.controller import status as st
from koordqueue.controller.messages import MessageWriter
from koordqueue.controller.quotasync import QuotaSync
from koordqueue.controller.resources import QUEUES, QUOTAS
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.views import Object
from koordqueue.engine.model import QuotaStatus
from koordqueue.kube.errors import KubeError, NotFound

log = logging.getLogger(__name__)

QUEUE_ITEMS_WRITTEN = 200  # pending units listed in a Queue's status


class QuotaStatusWriter(Part):
    def __init__(self, shared: Shared, quotas: QuotaSync, messages: MessageWriter) -> None:
        super().__init__(shared)
        self.quotas = quotas
        self.messages = messages
        self.queue_bindings: dict[str, Object] = {}  # queue key -> the status.quota and Bound condition written
        self.usage_written: dict[str, dict[str, str]] = {}  # queue key -> usage annotations we wrote last
        self.status_subresource = True  # whether ElasticQuotas' CRD serves /status (Koordinator's does not)

    def wire(self) -> None:
        self.informers.queue.on_delete(self._queue_deleted)

    def _queue_deleted(self, obj: Object) -> None:
        meta = obj.get("metadata") or {}
        self.queue_bindings.pop(f"{meta.get('namespace')}/{meta.get('name')}", None)
        self.usage_written.pop(f"{meta.get('namespace')}/{meta.get('name')}", None)

    async def run(self) -> None:
        # quota name -> (the uid of the ElasticQuota, the status.used written to it): a quota
        # deleted and made again under its name is written to, though its usage is the same.
        last_used: dict[str, tuple[object, dict[str, str], dict[str, Any] | None]] = {}
        last_positions: dict[str, Any] = {}
        last_queue_write: dict[str, float] = {}
        last_reasons = self.clock()
        while True:
            await asyncio.sleep(self.config.quota_status_refresh_seconds)
            statuses = self.engine.quota_status()
            fairness = history_status(self.engine.fairness_status())
            for name, quota in statuses.items():
                for resource in set(quota.max) | set(quota.used) | set(quota.min):
                    for kind, amounts in (("min", quota.min), ("max", quota.max),
                                          ("runtime", quota.runtime), ("used", quota.used)):
                        self.metrics.quota.labels(name, resource, kind).set(amounts.get(resource, 0) / 1000)
                # Every resource of max, zeros included: a merge patch cannot drop keys by omission.
                used = format_resource_list({r: quota.used.get(r, 0) for r in set(quota.max) | set(quota.used)})
                namespace = self.quotas.quota_namespaces.get(name)
                if namespace is None:
                    continue
                obj = self.informers.quota.get(f"{namespace}/{name}")
                extra = fairness.get(name)
                written = ((obj or {}).get("metadata") or {}).get("uid"), used, extra
                if last_used.get(name) == written:
                    continue
                try:
                    if await self._write_used(name, namespace, used, extra):
                        last_used[name] = written
                except KubeError as e:
                    log.info("status.used of quota %s not written: %s", name, e)
            if self.shared.sync_done:
                usage = queue_usage(statuses, self.quotas.quotas)
                for key, bound in list(self.quotas.queue_quotas.items()):
                    await self._write_binding(key, bound)
                    await self._write_usage(key, usage.get(bound) if bound is not None else None)
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
                if c.ANNOTATION_DISABLE_SHOW_QUEUE_ITEMS in self._annotations(queue_key):
                    continue  # as Koord-Queue: no longer refreshed, what was written stays
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

    async def _write_used(self, name: str, namespace: str, used: dict[str, str],
                          extra: dict[str, Any] | None = None) -> bool:
        """A quota's status.used, through its status subresource while the CRD serves one, else
        through the object itself; whether it is written. Koordinator's ElasticQuota CRD has no
        status subresource: its /status answers 404 while the object exists, and a write of
        the object keeps its status. Decided from what the server answers, so a CRD replaced
        either way is followed: a 404 on /status of a quota that the object write then finds
        (a quota gone raises NotFound there), or an object write whose answer dropped the
        status (the subresource is back)."""
        body = {"status": {"used": used, **({c.STATUS_USAGE_HISTORY: extra} if extra else {})}}
        if self.status_subresource:
            try:
                await self.client.patch_status(QUOTAS, name, body, namespace=namespace)
                return True
            except NotFound:
                stored = await self.client.patch(QUOTAS, name, body, namespace=namespace)
                if not _kept(stored, used):
                    return False  # neither way took it (the CRD changing meanwhile): the next round tries again
                self.status_subresource = False
                log.info("status.used of ElasticQuotas is written with the object: their CRD has no status "
                         "subresource (as Koordinator's)")
                return True
        stored = await self.client.patch(QUOTAS, name, body, namespace=namespace)
        if _kept(stored, used):
            return True
        self.status_subresource = True
        log.info("status.used of ElasticQuotas is written through their status subresource again")
        await self.client.patch_status(QUOTAS, name, body, namespace=namespace)
        return True

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

    def _annotations(self, queue_key: str) -> dict[str, str]:
        obj = self.informers.queue.get(queue_key) or {}
        return (obj.get("metadata") or {}).get("annotations") or {}

    async def _write_usage(self, key: str, usage: dict[str, ResourceList] | None) -> None:
        """Koord-Queue's usage annotations on the Queue, when they changed (zeros aside, as it
        compares them). A resource written before stays, at 0, as Koord-Queue's do."""
        annotations = {**self._annotations(key), **self.usage_written.get(key, {})}  # (our watch may lag)
        patch: dict[str, str] = {}
        for annotation, amounts in (usage or {}).items():
            now = {name: -(-milli // 1000) for name, milli in amounts.items() if milli > 0}  # Quantity.Value()
            if now and annotations.get(annotation) == orjson.dumps(now, option=orjson.OPT_SORT_KEYS).decode():
                continue  # (the common case, without reading it)
            before = _read_usage(annotations.get(annotation))
            if before is not None and {k: v for k, v in before.items() if v} == now:
                continue
            if before is None and not now and annotation not in annotations:
                continue  # nothing used yet: Koord-Queue writes nothing either
            patch[annotation] = orjson.dumps({**dict.fromkeys(before or {}, 0), **now},
                                             option=orjson.OPT_SORT_KEYS).decode()
        if not patch:
            return
        namespace, _, name = key.partition("/")
        try:
            await self.client.patch(QUEUES, name, {"metadata": {"annotations": patch}}, namespace=namespace)
            self.usage_written.setdefault(key, {}).update(patch)
        except NotFound:
            pass
        except KubeError as e:
            log.info("usage annotations of queue %s not written: %s", key, e)

    def _refresh_seconds(self, queue_key: str, settings: QueueSettings) -> float:
        """The Queue's own refresh interval annotation, else the controller's setting."""
        annotations = self._annotations(queue_key)
        given = c.ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL in annotations
        return settings.refresh_seconds if given else self.config.queue_status_refresh_seconds


def queue_usage(statuses: Mapping[str, QuotaStatus], quotas: Mapping[str, QuotaInfo]) -> dict[str, dict[str, ResourceList]]:
    """Per quota, what Koord-Queue writes on its Queue: used by the quota and its descendants,
    by units charged to the quota itself, and by those charged to its descendants; the
    guaranteed variants are the same (no unit of ours is admitted oversold)."""
    children: dict[str, ResourceList] = {}
    for name, quota in quotas.items():
        if quota.parent is not None and name in statuses:
            children[quota.parent] = add(children.get(quota.parent, {}), statuses[name].used)
    out: dict[str, dict[str, ResourceList]] = {}
    for name, status in statuses.items():
        below = children.get(name, {})
        own = {k: v for k, v in sub(status.used, below).items() if v > 0}
        out[name] = {c.ANNOTATION_QUEUE_USED: status.used, c.ANNOTATION_QUEUE_GUARANTEED_USED: status.used,
                     c.ANNOTATION_QUEUE_SELF_USED: own, c.ANNOTATION_QUEUE_SELF_GUARANTEED_USED: own,
                     c.ANNOTATION_QUEUE_CHILDREN_USED: below, c.ANNOTATION_QUEUE_CHILDREN_GUARANTEED_USED: below}
    return out


def history_status(fairness: Mapping[str, Mapping[str, object]]) -> dict[str, dict[str, Any]]:
    """Per quota with a usage history, its ``status.usageHistory``: decayed usage and each
    budget's use within its window, in resource-hours to a tenth (so that a quota's status is
    written when a figure moves that much, not at every cycle)."""
    out: dict[str, dict[str, Any]] = {}
    for name, status in fairness.items():
        decayed = status.get("decayed")
        budgets = status.get("budgets")
        entry: dict[str, Any] = {}
        if isinstance(decayed, dict) and decayed:
            entry["decayedHours"] = {r: f"{hours:.1f}" for r, hours in sorted(decayed.items())}
        if isinstance(budgets, dict) and budgets:
            entry["budgets"] = {r: {"usedHours": f"{use['used']:.1f}", "budgetHours": f"{use['amount']:g}",
                                    "windowHours": f"{use['window'] / 3600:g}"} for r, use in sorted(budgets.items())}
        if entry:
            out[name] = entry
    return out


def _kept(stored: Object, used: dict[str, str]) -> bool:
    """Whether a write's answer holds the status.used it wrote."""
    status = stored.get("status")
    return isinstance(status, dict) and status.get("used") == used


def _read_usage(text: str | None) -> dict[str, int] | None:
    """A usage annotation as written (JSON object of integers); None when absent or not that."""
    if not text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, int) for v in value.values()):
        return None
    return {str(k): v for k, v in value.items()}
