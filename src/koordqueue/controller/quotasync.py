"""ElasticQuotas, Queues and nodes into the engine: quotas parsed (twins that share a name
refused), the Queue each leaf quota lacks made, Queues bound to their quota, the cluster's
capacity and each node's room. Also publishes the settings objects are loaded with."""

from __future__ import annotations

import logging
from dataclasses import replace

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.objects import QueueSettings, is_koordinators_own, parse_queue
from koordqueue.api.quantity import QuantityError
from koordqueue.controller.loading import quota_age
from koordqueue.controller.resources import CONFIG_MAPS, QUEUES
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.views import Object
from koordqueue.engine.model import NodeInfo, QueueInfo, QuotaInfo, auto_queue_for
from koordqueue.kube.errors import AlreadyExists, KubeError, NotFound

log = logging.getLogger(__name__)


class QuotaSync(Part):
    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.quotas: dict[str, QuotaInfo] = {}  # parsed, for the overview's tree
        self.quota_namespaces: dict[str, str] = {}  # quota name -> its namespace, valid or not
        self.refused_twins: set[str] = set()  # namespace/name of quotas refused for a name taken
        self.queue_settings: dict[str, QueueSettings] = {}  # queue key -> what the engine does not need
        self.queue_quotas: dict[str, str | None] = {}  # queue key -> the quota it is bound to
        self.capacity: dict[str, int] | None = None

    def wire(self) -> None:
        informers = self.informers

        def nodes_changed() -> None:
            self.capacity = self.shared.settings.capacity(node.allocatable for _name, node in informers.node.items())
            self.engine.set_cluster_capacity(self.capacity)
            self.wake.set()

        def node_set(node: NodeInfo) -> None:
            self.engine.set_node(node)  # where pods may go (node fit, topology)
            nodes_changed()

        def node_gone(node: NodeInfo) -> None:
            self.engine.remove_node(node.name)
            nodes_changed()

        informers.node.on_add(node_set)
        informers.node.on_update(lambda _old, new: node_set(new))
        informers.node.on_delete(node_gone)

        informers.quota.on_add(self._quota_changed)
        # Our own status writes (used, positions) come back as updates: only other changes count.
        informers.quota.on_update(lambda old, new: None if _same_spec(old, new) else self._quota_changed(new))
        informers.quota.on_delete(self._quota_deleted)
        informers.queue.on_add(self._queue_changed)
        informers.queue.on_update(lambda old, new: None if _same_spec(old, new) else self._queue_changed(new))
        informers.queue.on_delete(self._queue_deleted)

    async def publish_settings(self) -> None:
        """Write the settings the objects are loaded with where `koord-queue status` and
        `explain` read them, so that they load them as this controller does."""
        data = self.shared.settings.to_data()
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

    async def settle(self) -> None:
        """After the first sync: say which quotas are not used, make the Queues quotas lack and
        feed every Queue once. While the caches fill, each quota would redo this for all the
        others (and warn of Queues whose quota was merely not listed yet)."""
        for name, reason in self.engine.validation_errors().items():
            obj = self.informers.quota.get(f"{self.quota_namespaces.get(name)}/{name}")
            if obj is not None:
                self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, f"quota not used: {reason}")
        for quota in list(self.quotas.values()):
            if not quota.is_parent:
                await self._ensure_auto_queue(auto_queue_for(quota))
        for _, obj in self.informers.queue.items():
            await self._queue_changed(obj, settling=True)

    async def _quota_changed(self, obj: Object) -> None:
        if is_koordinators_own(obj):  # Koordinator's root, system and default quotas: no team's, no Queue
            if not self.shared.koordinator_seen:
                log.info("Koordinator's quota %s is there: admissions mark pods for koord-scheduler (%s)",
                         (obj.get("metadata") or {}).get("name"), self.config.koordinator)
            self.shared.koordinator_seen = True
            return
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        in_use = self._quota_in_use(name)
        for twin in self._quota_twins(name):  # each told once why it is not used
            self._refuse_twin(twin, in_use)
        if in_use is not None and (in_use.get("metadata") or {}).get("namespace") != meta.get("namespace"):
            return  # another namespace's quota has this name: this one is refused
        self.quota_namespaces[name] = str(meta.get("namespace") or "")
        try:
            parsed = self.shared.settings.quota(obj)
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
        if not self.shared.sync_done:
            return  # settle does the rest once for all
        invalid = self.engine.validation_errors().get(quota.name)
        if invalid:
            self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, f"quota not used: {invalid}")
        if not quota.is_parent:
            await self._ensure_auto_queue(auto_queue_for(quota))
        self._refeed_queues()
        self.wake.set()

    def _quota_in_use(self, name: str) -> Object | None:
        """The ElasticQuota used under ``name``. Quota names are cluster-wide (Koordinator's
        webhook keeps them so); of quotas that share one in different namespaces the oldest
        is used and the others are refused, or one tenant could take another's quota (its
        max, its min, the namespaces bound to it) by naming a quota of its own alike."""
        same = [obj for _, obj in self.informers.quota.items() if (obj.get("metadata") or {}).get("name") == name]
        return min(same, key=quota_age, default=None)

    def _quota_twins(self, name: str) -> list[Object]:
        """The quotas named ``name`` that are not used (see ``_quota_in_use``)."""
        in_use = self._quota_in_use(name)
        return [obj for _, obj in self.informers.quota.items()
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
        auto = self.informers.queue.get(f"{self.config.system_namespace}/{name}")
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
        existing = self.informers.queue.get(key)
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
        for _, obj in self.informers.queue.items():
            self._feed_queue(obj)

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
        queue = self._feed_queue(obj, warn=self.shared.sync_done or settling)
        if not self.shared.sync_done and not settling:
            return  # its quota may not be listed yet: settle feeds it again
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
        self.wake.set()


def _same_spec(old: Object, new: Object) -> bool:
    """Whether a change left spec, labels and annotations (all a quota or a Queue is read for) alone."""
    before, after = old.get("metadata") or {}, new.get("metadata") or {}
    return old.get("spec") == new.get("spec") and before.get("labels") == after.get("labels") and \
        before.get("annotations") == after.get("annotations")


def _is_auto_queue(obj: Object, quota: str) -> bool:
    """Whether a Queue in the system namespace is the one made for ``quota`` (by us)."""
    meta = obj.get("metadata") or {}
    return meta.get("name") == quota and (meta.get("labels") or {}).get(c.LABEL_QUOTA_NAME) == quota
