"""The quotas' usage history (engine/history.py) kept across restarts, and shown.

Kept in one ConfigMap in the controller's namespace (``koord-queue-usage-history``, key
``history.json``), written every ``EVERY_SECONDS`` when it changed and read back once at
start-up, before the first cycle. Bounded: the history keeps one figure per quota and
resource and at most 240 buckets per budget; a copy past ``MAX_BYTES`` (far more quotas
with budgets than a cluster has) is not written, and said. The ConfigMap lives where
only cluster admins write; a copy that cannot be read is said and the history starts afresh.
Also sets the gauges ``koord_queue_quota_usage_history``.
"""

from __future__ import annotations

import asyncio
import logging

import orjson

from koordqueue.api import constants as c
from koordqueue.controller.resources import CONFIG_MAPS
from koordqueue.controller.shared import Part
from koordqueue.kube.errors import KubeError, NotFound

log = logging.getLogger(__name__)

EVERY_SECONDS = 60.0  # the history's resolution
MAX_BYTES = 900_000  # a ConfigMap holds at most 1 MiB


class UsageHistoryKeeper(Part):
    async def load(self) -> None:
        """Read the history kept before a restart into the engine."""
        namespace = self.config.system_namespace
        try:
            # An empty merge patch answers the object as it is (one verb, patch, in the Role).
            obj = await self.client.patch(CONFIG_MAPS, c.USAGE_HISTORY_CONFIG_MAP, {}, namespace=namespace)
        except NotFound:
            return
        except KubeError as e:
            log.warning("usage history not read from ConfigMap %s/%s: %s; it starts afresh", namespace,
                        c.USAGE_HISTORY_CONFIG_MAP, e)
            return
        text = ((obj.get("data") or {}) if isinstance(obj, dict) else {}).get(c.USAGE_HISTORY_KEY)
        if not isinstance(text, str):
            return
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            log.warning("usage history in ConfigMap %s/%s is not JSON (%s); it starts afresh", namespace,
                        c.USAGE_HISTORY_CONFIG_MAP, e)
            return
        problem = self.engine.load_usage_history(data)
        if problem is not None:
            log.warning("ConfigMap %s/%s: %s", namespace, c.USAGE_HISTORY_CONFIG_MAP, problem)

    async def run(self) -> None:
        written: bytes | None = None
        while True:
            await asyncio.sleep(EVERY_SECONDS / self.config.clock_rate)
            written = await self.save(written)

    async def save(self, written: bytes | None = None) -> bytes | None:
        """Write the history when it changed since ``written``; returns what is written."""
        self.gauges()
        dump = self.engine.usage_history()
        if not dump.get("quotas") and written is None:
            return written  # nothing to keep (no budget, no sharing by history)
        text = orjson.dumps(dump, option=orjson.OPT_SORT_KEYS)
        if text == written:
            return written
        namespace = self.config.system_namespace
        if len(text) > MAX_BYTES:
            log.warning("usage history not kept: %d bytes, more than a ConfigMap holds", len(text))
            return written
        data = {c.USAGE_HISTORY_KEY: text.decode()}
        try:
            try:
                await self.client.patch(CONFIG_MAPS, c.USAGE_HISTORY_CONFIG_MAP, {"data": data}, namespace=namespace)
            except NotFound:
                await self.client.create(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                    "name": c.USAGE_HISTORY_CONFIG_MAP, "namespace": namespace}, "data": data}, namespace=namespace)
        except KubeError as e:
            log.info("usage history not written: %s", e)
            return written
        return text

    def gauges(self) -> None:
        gauge = self.metrics.quota_history
        for name, status in self.engine.fairness_status().items():
            decayed = status["decayed"]
            assert isinstance(decayed, dict)
            for resource, hours in decayed.items():
                gauge.labels(name, resource, "decayed").set(hours)
            budgets = status["budgets"]
            assert isinstance(budgets, dict)
            for resource, use in budgets.items():
                gauge.labels(name, resource, "budget_used").set(use["used"])
                gauge.labels(name, resource, "budget").set(use["amount"])
