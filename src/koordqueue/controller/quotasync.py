"""ElasticQuotas (or the ElasticQuotaTree), Queues and nodes into the engine: quotas parsed
(twins that share a name refused), the Queue each leaf quota lacks made, Queues bound to
their quota, the cluster's capacity and each node's room. Also publishes the settings
objects are loaded with, and writes the tree's status.

A cluster writes its quotas one way or the other. While an ElasticQuotaTree exists in
kube-system it holds them all and the ElasticQuotas are set aside (each told so by an
event); when it goes, the ElasticQuotas are read again. Koord-Queue reads one or the
other, as its deployment's plugin says."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.objects import QueueSettings, is_koordinators_own, parse_queue
from koordqueue.api.quantity import QuantityError, add
from koordqueue.api.quotatree import ParsedTree, choose_tree, parse_quota_tree, tree_queue_prefix, tree_status
from koordqueue.controller.loading import quota_age
from koordqueue.controller.pods import PodView
from koordqueue.controller.resources import CONFIG_MAPS, QUEUES, QUOTA_TREES
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.systemquotas import Charging, SystemQuotaUsage, charging_inputs, shared_total
from koordqueue.controller.views import Object
from koordqueue.engine.model import NodeInfo, QueueInfo, QuotaInfo, auto_queue_for
from koordqueue.kube.errors import AlreadyExists, KubeError, NotFound
from koordqueue.kube.informer import key_of

log = logging.getLogger(__name__)


class QuotaSync(Part):
    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.quotas: dict[str, QuotaInfo] = {}  # parsed, for the overview's tree
        self.quota_namespaces: dict[str, str] = {}  # quota name -> its namespace, valid or not
        self.refused_twins: set[str] = set()  # namespace/name of quotas refused for a name taken
        self.queue_settings: dict[str, QueueSettings] = {}  # queue key -> what the engine does not need
        self.queue_quotas: dict[str, str | None] = {}  # queue key -> the quota it is bound to
        self.nodes_total: dict[str, int] | None = None  # the nodes' allocatable (times the oversell rate)
        self.capacity: dict[str, int] | None = None  # the cluster total the quotas share
        self.system_usage = SystemQuotaUsage()  # what Koordinator's system and default quotas use
        self.tree: ParsedTree | None = None  # the tree in use: while there is one, ElasticQuotas are not
        self.tree_key: str | None = None  # its namespace/name
        self.told: dict[str, set[str]] = {}  # tree (or set-aside ElasticQuota) key -> what its events said
        self.tree_status: dict[str, object] = {}  # tree key -> the status last written
        # Tree Queues we created (their names are the server's) that our watch may not show yet.
        self.tree_queues_made: dict[str, Object] = {}  # queue name -> the object created
        self._quota_keys_of: dict[str, set[str]] = {}  # quota name -> the keys of the ElasticQuotas so named
        self.queue_writes: asyncio.Future[Any] | None = None  # a start's Queue writes (_ensure_queues)

    def wire(self) -> None:
        informers = self.informers

        def with_devices(node: NodeInfo) -> NodeInfo:
            """The node as pods may go to it (node fit, topology): with the devices its ResourceSlices publish."""
            devices = informers.claims.node_devices().get(node.name)
            return replace(node, allocatable=add(node.allocatable, devices)) if devices else node

        def nodes_changed() -> None:
            self.nodes_total = self.shared.settings.capacity(
                with_devices(node).allocatable for _name, node in informers.node.items())
            self._set_capacity()
            self.wake.set()

        def node_set(node: NodeInfo) -> None:
            self.engine.set_node(with_devices(node))
            nodes_changed()

        def slices_changed(*_: object) -> None:
            for _name, node in informers.node.items():
                self.engine.set_node(with_devices(node))
            nodes_changed()

        if informers.claims.mappings:  # (ResourceSlices are read only then)
            informers.claims.slice.on_add(slices_changed)
            informers.claims.slice.on_update(slices_changed)
            informers.claims.slice.on_delete(slices_changed)

        def node_gone(node: NodeInfo) -> None:
            self.engine.remove_node(node.name)
            nodes_changed()

        informers.node.on_add(node_set)
        informers.node.on_update(lambda _old, new: node_set(new))
        informers.node.on_delete(node_gone)

        # Where each name is (first: the handlers below read it). Scanning every quota for a
        # name at each quota's event took 1,100 quotas 1.2 M steps twice each, 5 s of a start.
        informers.quota.on_add(self._index_quota)
        informers.quota.on_update(lambda _old, new: self._index_quota(new))
        informers.quota.on_delete(self._unindex_quota)
        informers.quota.on_add(self._quota_changed)
        # Our own status writes (used, positions) come back as updates: only other changes count.
        informers.quota.on_update(lambda old, new: None if _same_spec(old, new) else self._quota_changed(new))
        informers.quota.on_delete(self._quota_deleted)
        # Which quota koord-scheduler charges pods to (after the handlers above: ours are known).
        informers.quota.on_add(lambda _obj: self._charging_changed())
        informers.quota.on_update(
            lambda old, new: None if charging_inputs(old) == charging_inputs(new) else self._charging_changed())
        informers.quota.on_delete(lambda _obj: self._charging_changed())
        informers.pod.on_add(self._pod_changed)
        informers.pod.on_update(lambda _old, new: self._pod_changed(new))
        informers.pod.on_delete(self._pod_deleted)
        informers.tree.on_add(lambda _obj: self._trees_changed())
        informers.tree.on_update(lambda old, new: None if _same_spec(old, new) else self._trees_changed())
        informers.tree.on_delete(self._tree_deleted)
        informers.queue.on_add(self._queue_changed)
        informers.queue.on_update(lambda old, new: None if _same_spec(old, new) else self._queue_changed(new))
        informers.queue.on_delete(self._queue_deleted)

    def _set_capacity(self) -> None:
        """The cluster total the quotas share: the nodes' allocatable; beside koord-scheduler,
        less what Koordinator's system and default quotas use, as it does (systemquotas.py)."""
        nodes = self.nodes_total
        capacity = shared_total(nodes, self.system_usage.used) if self.shared.beside_koordinator else nodes
        if capacity != self.capacity:
            self.capacity = capacity
            self.engine.set_cluster_capacity(capacity)
            self.wake.set()

    def _pod_changed(self, pod: PodView) -> None:
        if self.system_usage.put(pod) and self.shared.beside_koordinator:
            self._set_capacity()

    def _pod_deleted(self, pod: PodView) -> None:
        if self.system_usage.remove(pod) and self.shared.beside_koordinator:
            self._set_capacity()

    def _charging_changed(self) -> None:
        """The quotas that decide where koord-scheduler charges pods changed (after the first
        sync: settle reads them once for all)."""
        if not self.shared.sync_done:
            return
        charging = Charging((obj for _, obj in self.informers.quota.items()), self.quotas)
        if self.system_usage.set_rules(charging) and self.shared.beside_koordinator:
            self._set_capacity()

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
        """After the first sync: settle_queues (its Queue writes awaited), then settle_usage."""
        await self.settle_queues()
        if self.queue_writes is not None:
            await self.queue_writes
        self.settle_usage()

    async def settle_queues(self) -> None:
        """Once the quotas, trees and Queues are listed (the jobs, units and pods may still be
        listing: nothing here reads them): say which quotas are not used, make the Queues quotas
        lack and feed every Queue once. While the caches fill, each quota would redo this for
        all the others (and warn of Queues whose quota was merely not listed yet)."""
        for name, reason in self.engine.validation_errors().items():
            obj = self.informers.quota.get(f"{self.quota_namespaces.get(name)}/{name}")
            if obj is not None:
                self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, f"quota not used: {reason}")
        self._tell_tree()
        await self._ensure_queues(list(self.quotas.values()))
        self._tell_flavor_problems(set(self.quotas))
        await self._prune_tree_queues()
        if self.tree is not None:  # the Queues of ElasticQuotas set aside while we were away
            for _, obj in self.informers.quota.items():
                name = str((obj.get("metadata") or {}).get("name", ""))
                if name not in self.quotas:
                    await self._delete_auto_queue(name)
        for _, obj in self.informers.queue.items():
            await self._queue_changed(obj, settling=True)

    def settle_usage(self) -> None:
        """After every list (the pods among them): what Koordinator's system and default quotas
        use, and so the capacity the first cycle shares."""
        self.system_usage.set_rules(Charging((obj for _, obj in self.informers.quota.items()), self.quotas))
        self._set_capacity()

    async def _quota_changed(self, obj: Object) -> None:
        if is_koordinators_own(obj):  # Koordinator's root, system and default quotas: no team's, no Queue
            if not self.shared.koordinator_seen:
                log.info("Koordinator's quota %s is there: admissions mark pods for koord-scheduler (%s)",
                         (obj.get("metadata") or {}).get("name"), self.config.koordinator)
            self.shared.koordinator_seen = True
            self._set_capacity()  # (auto mode on: less what its system and default quotas use)
            return
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        if self.tree is not None:
            self._tell_set_aside(obj)
            return
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
        if self._takes_jobs(quota):
            await self._ensure_auto_queue(auto_queue_for(quota))
        parent = self.quotas.get(quota.parent) if quota.parent is not None else None
        if quota.node_selector and parent is not None and parent.is_parent:  # a flavor: its parent takes jobs
            await self._ensure_auto_queue(auto_queue_for(parent))
        self._tell_flavor_problems({quota.name, *([quota.parent] if quota.parent else [])})
        self._refeed_queues()
        self.wake.set()

    def _takes_jobs(self, quota: QuotaInfo) -> bool:
        """A quota jobs may be charged to: a leaf, or a parent with flavors (docs/gpus.md)."""
        return not quota.is_parent or any(q.parent == quota.name and q.node_selector and not q.is_parent
                                          for q in self.quotas.values())

    def _tell_flavor_problems(self, names: set[str]) -> None:
        """A Warning event on each of these quotas whose flavors are set wrong (a flavor order
        naming no flavor of it): it is used all the same, the names ignored."""
        problems = self.engine.flavor_problems()
        for name in sorted(names & problems.keys()):
            obj = self.informers.quota.get(f"{self.quota_namespaces.get(name)}/{name}")
            if obj is not None:
                self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, problems[name])

    def _quota_in_use(self, name: str) -> Object | None:
        """The ElasticQuota used under ``name``. Quota names are cluster-wide (Koordinator's
        webhook keeps them so); of quotas that share one in different namespaces the oldest
        is used and the others are refused, or one tenant could take another's quota (its
        max, its min, the namespaces bound to it) by naming a quota of its own alike."""
        return min(self._quotas_named(name), key=quota_age, default=None)

    def _quota_twins(self, name: str) -> list[Object]:
        """The quotas named ``name`` that are not used (see ``_quota_in_use``)."""
        in_use = self._quota_in_use(name)
        return [obj for obj in self._quotas_named(name) if obj is not in_use]

    def _quotas_named(self, name: str) -> list[Object]:
        """The listed ElasticQuotas named ``name`` (in any namespace), by key."""
        found = (self.informers.quota.get(key) for key in sorted(self._quota_keys_of.get(name, ())))
        return [obj for obj in found if obj is not None]

    def _index_quota(self, obj: Object) -> None:
        self._quota_keys_of.setdefault(str((obj.get("metadata") or {}).get("name", "")), set()).add(key_of(obj))

    def _unindex_quota(self, obj: Object) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        keys = self._quota_keys_of.get(name)
        if keys is not None:
            keys.discard(key_of(obj))
            if not keys:
                del self._quota_keys_of[name]

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
        if self.tree is not None:
            self.told.pop(f"{c.ELASTIC_QUOTA_KIND}/{meta.get('namespace')}/{name}", None)
            return
        self.refused_twins.discard(f"{meta.get('namespace')}/{name}")
        remaining = self._quota_in_use(name)
        if remaining is not None:  # one of a pair with the same name: the other one is used now
            self.refused_twins.discard(f"{(remaining.get('metadata') or {}).get('namespace')}/{name}")
            await self._quota_changed(remaining)
            return
        self.engine.remove_quota(name)
        self.quotas.pop(name, None)
        self.quota_namespaces.pop(name, None)
        await self._delete_auto_queue(name)
        self._refeed_queues()
        self.wake.set()

    async def _delete_auto_queue(self, name: str) -> None:
        auto = self.informers.queue.get(f"{self.config.system_namespace}/{name}")
        if auto is not None and _is_auto_queue(auto, name):
            try:
                await self.client.delete(QUEUES, name, namespace=self.config.system_namespace)
            except NotFound:
                pass
            except KubeError as e:
                log.warning("could not delete the Queue of quota %s: %s", name, e)

    # --- the ElasticQuotaTree -----------------------------------------------------

    async def _trees_changed(self) -> None:
        """Read the tree in use (the oldest in kube-system) into the engine in place of the
        quotas there were: the ElasticQuotas', or the tree's before this change."""
        used, refused = choose_tree(obj for _, obj in self.informers.tree.items())
        for obj, why in refused:
            self._tell(obj, [why])
        if used is None:
            if self.tree is not None:
                await self._drop_tree()
            return
        meta = used.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            parsed = parse_quota_tree(used, self.shared.settings.quota)
        except InvalidObject as e:
            parsed = ParsedTree(f"{c.ELASTIC_QUOTA_TREE_KIND} {key}", problems=(f"not used: {e}",))
        before = dict(self.quotas) if self.tree is None else dict(self.tree.quotas)
        coming = self.tree is None
        self.tree, self.tree_key = parsed, key
        if coming:
            self._set_aside_elastic_quotas()
        gone = [name for name in before if name not in parsed.quotas]
        for name in gone:
            self.engine.remove_quota(name)
            self.quotas.pop(name, None)
        for quota in parsed.quotas.values():
            self.engine.set_quota(quota)
            self.quotas[quota.name] = quota
        if not self.shared.sync_done:
            self._tell(used, [*parsed.problems, *parsed.warnings])
            return  # settle says what the engine refuses, and makes the Queues
        self._tell_tree()
        for name in gone:
            await self._delete_auto_queue(name)
        for quota in parsed.quotas.values():
            if self._takes_jobs(quota):
                await self._ensure_queue_of(quota)
        self._tell_flavor_problems(set(parsed.quotas))
        await self._prune_tree_queues()
        self._refeed_queues()
        self._charging_changed()  # (the tree's quotas are ours: their pods are charged to them)
        self.wake.set()

    async def _tree_deleted(self, obj: Object) -> None:
        meta = obj.get("metadata") or {}
        self.told.pop(f"{c.ELASTIC_QUOTA_TREE_KIND}/{meta.get('namespace')}/{meta.get('name')}", None)
        self.tree_status.pop(f"{meta.get('namespace')}/{meta.get('name')}", None)
        await self._trees_changed()

    def _set_aside_elastic_quotas(self) -> None:
        """A tree came: the ElasticQuotas' quotas leave the engine, each quota told why."""
        for name in list(self.quota_namespaces):
            self.engine.remove_quota(name)
            self.quotas.pop(name, None)
        self.quota_namespaces.clear()
        self.refused_twins.clear()
        for _, obj in self.informers.quota.items():
            self._tell_set_aside(obj)

    async def _drop_tree(self) -> None:
        """The tree went: its quotas leave the engine and the ElasticQuotas are read again."""
        assert self.tree is not None
        names = list(self.tree.quotas)
        self.tree, self.tree_key = None, None
        for name in names:
            self.engine.remove_quota(name)
            self.quotas.pop(name, None)
        self.told = {k: v for k, v in self.told.items() if not k.startswith(f"{c.ELASTIC_QUOTA_KIND}/")}
        for _, obj in self.informers.quota.items():
            await self._quota_changed(obj)
        if self.shared.sync_done:
            for name in names:
                if name not in self.quotas:
                    await self._delete_auto_queue(name)
            await self._prune_tree_queues()
            self._refeed_queues()
            self._charging_changed()
            self.wake.set()

    def _tell_set_aside(self, obj: Object) -> None:
        self._tell(obj, [f"quota not used: {c.ELASTIC_QUOTA_TREE_KIND} {self.tree_key} holds the quotas "
                         f"(while a tree exists, ElasticQuotas are not read)"], kind=c.ELASTIC_QUOTA_KIND)

    def tree_problems(self) -> list[str]:
        """The tree's nodes not used and why: not read, or refused by the engine."""
        if self.tree is None:
            return []
        reasons = self.engine.validation_errors()
        return [*self.tree.problems, *(f"{self.tree.where}: quota {self.tree.paths[name]}: not used: {reason}"
                                       for name, reason in sorted(reasons.items()) if name in self.tree.quotas)]

    def _tell_tree(self) -> None:
        obj = self.informers.tree.get(self.tree_key) if self.tree_key else None
        if obj is not None and self.tree is not None:
            self._tell(obj, [*self.tree_problems(), *self.tree.warnings])

    def _tell(self, obj: Object, messages: list[str], kind: str = c.ELASTIC_QUOTA_TREE_KIND) -> None:
        """A Warning event for each message not said already about the object (all of them
        again after they were gone)."""
        meta = obj.get("metadata") or {}
        key = f"{kind}/{meta.get('namespace')}/{meta.get('name')}"
        said = self.told.get(key, set())
        for message in messages:
            if message not in said:
                self._event(obj, c.EventType.WARNING, c.EventReason.INVALID_QUOTA, message)
        self.told[key] = set(messages)

    async def run_tree_status(self) -> None:
        """Write the tree's status (what each node uses, the nodes not used) every few seconds."""
        while True:
            await asyncio.sleep(self.config.quota_status_refresh_seconds)
            await self.write_tree_status()

    async def write_tree_status(self) -> None:
        obj = self.informers.tree.get(self.tree_key) if self.tree_key else None
        if obj is None or self.tree is None or self.tree_key is None:
            return
        statuses = {name: s for name, s in self.engine.quota_status().items() if name in self.tree.quotas}
        status = tree_status(obj, self.tree, {n: s.used for n, s in statuses.items()},
                             {n: s.demand for n, s in statuses.items()}, self.tree_problems())
        key = self.tree_key
        if self.tree_status.get(key) == status:
            return
        namespace, _, name = key.partition("/")
        try:
            await self.client.patch_status(QUOTA_TREES, name, {"status": status}, namespace=namespace)
            self.tree_status[key] = status
        except NotFound:  # deleted meanwhile, or a CRD without the status subresource (ours has it)
            pass
        except KubeError as e:
            log.info("status of %s %s not written: %s", c.ELASTIC_QUOTA_TREE_KIND, key, e)

    async def _ensure_queues(self, quotas: list[QuotaInfo]) -> None:
        """The Queues of these quotas, at a start: the engine fed in the quotas' order, our
        missing ones written meanwhile in `queue_writes`, up to write_concurrency at once (one
        after another, 1,000 took 30 s on a loaded machine, before the first cycle); a tree's
        one by one. A missing Queue of ours is fed whether or not its write lands (as it always
        was: the write's outcome never decided it); the controller awaits `queue_writes` once
        every list is in, before its first cycle."""
        takes = [q for q in quotas if self._takes_jobs(q)]
        auto = [q for q in takes if not (self.tree is not None and q.name in self.tree.paths)]
        namespace = self.config.system_namespace
        missing = {q.name: self.informers.queue.get(f"{namespace}/{q.name}") is None for q in auto}
        limit = asyncio.Semaphore(self.config.write_concurrency)

        async def write(quota: QuotaInfo) -> None:
            async with limit:
                await self._write_auto_queue(auto_queue_for(quota))

        self.queue_writes = asyncio.ensure_future(asyncio.gather(*(write(q) for q in auto)))
        for quota in takes:
            if quota.name not in missing:
                await self._ensure_queue_of(quota)
            elif missing[quota.name]:
                self.engine.set_queue(replace(auto_queue_for(quota), namespace=namespace))

    async def _ensure_queue_of(self, quota: QuotaInfo) -> None:
        """The Queue of a leaf quota: Koord-Queue's for a tree's quota, else ours (named like it)."""
        if self.tree is not None and quota.name in self.tree.paths:
            await self._ensure_tree_queue(quota, self.tree.paths[quota.name])
        else:
            await self._ensure_auto_queue(auto_queue_for(quota))

    def _tree_queues(self) -> dict[str, list[Object]]:
        """The system namespace's Queues marked with a quota's full name (ours, Koord-Queue's
        or anyone's), by that name, oldest first."""
        namespace = self.config.system_namespace
        seen: dict[str, Object] = {}
        for _, obj in self.informers.queue.items():
            meta = obj.get("metadata") or {}
            if meta.get("namespace") == namespace:
                seen[str(meta.get("name"))] = obj
                self.tree_queues_made.pop(str(meta.get("name")), None)  # the watch has it now
        out: dict[str, list[Object]] = {}
        for obj in {**self.tree_queues_made, **seen}.values():
            path = ((obj.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_QUOTA_FULL_NAME)
            if path:
                out.setdefault(str(path), []).append(obj)
        for objs in out.values():
            objs.sort(key=lambda o: (str((o.get("metadata") or {}).get("creationTimestamp") or ""),
                                     str((o.get("metadata") or {}).get("name"))))
        return out

    async def _ensure_tree_queue(self, quota: QuotaInfo, path: str) -> None:
        """The Queue of a tree's leaf, as Koord-Queue makes it (generateName from the path,
        its label and annotations): made when there is none, one Koord-Queue made adopted
        (marked as ours too, its name kept), and the one an earlier version of ours made
        (named like the quota) removed. Never two: the one seen first is kept."""
        namespace = self.config.system_namespace
        prefix = tree_queue_prefix(path)
        labels = {c.LABEL_CREATED_BY_KOORD_QUEUE: c.TRUE, c.LABEL_QUOTA_NAME: quota.name}
        annotations = {c.ANNOTATION_QUOTA_FULL_NAME: path, c.ANNOTATION_PARENT_QUOTA_NAME: quota.parent or ""}
        queue = auto_queue_for(quota)
        existing = self._tree_queues().get(path, [])
        try:
            if not existing:
                body = {
                    "apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
                    "metadata": {"generateName": prefix, "namespace": namespace, "labels": labels,
                                 "annotations": annotations},
                    "spec": {"queuePolicy": queue.policy.value, "priority": queue.priority},
                }
                made = await self.client.create(QUEUES, body, namespace=namespace)
                self.tree_queues_made[str(made["metadata"]["name"])] = made
                self._feed_queue(made)  # now rather than at the watch: units may need it this cycle
            else:
                kept, *extra = existing
                meta = kept.get("metadata") or {}
                have_labels, have_annotations = meta.get("labels") or {}, meta.get("annotations") or {}
                if any(have_labels.get(k) != v for k, v in labels.items()) or \
                        any(have_annotations.get(k) != v for k, v in annotations.items()):
                    await self.client.patch(QUEUES, str(meta.get("name")),
                                            {"metadata": {"labels": labels, "annotations": annotations}},
                                            namespace=namespace)
                for twin in extra:  # made twice (two leaders a moment apart): only ever one
                    await self._delete_queue(twin, f"a second Queue for quota {path}")
        except KubeError as e:
            log.warning("could not write the Queue of quota %s: %s", path, e)
        await self._delete_auto_queue(quota.name)  # ours before Koord-Queue's names: renamed

    async def _prune_tree_queues(self) -> None:
        """Queues made for a tree's quotas (by us or Koord-Queue: label create-by-koordqueue)
        whose quota is no leaf of the tree in use (gone, a parent, or no tree): removed."""
        leaves = {path for name, path in self.tree.paths.items()
                  if name in self.tree.quotas and self._takes_jobs(self.tree.quotas[name])} if self.tree else set()
        for path, objs in self._tree_queues().items():
            if path in leaves:
                continue
            for obj in objs:
                if ((obj.get("metadata") or {}).get("labels") or {}).get(c.LABEL_CREATED_BY_KOORD_QUEUE) == c.TRUE:
                    await self._delete_queue(obj, f"quota {path} is no leaf of the tree in use")

    async def _delete_queue(self, obj: Object, why: str) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        self.tree_queues_made.pop(name, None)
        try:
            await self.client.delete(QUEUES, name, namespace=self.config.system_namespace)
            log.info("deleted Queue %s/%s: %s", self.config.system_namespace, name, why)
        except NotFound:
            pass
        except KubeError as e:
            log.warning("could not delete Queue %s: %s", name, e)

    async def _ensure_auto_queue(self, queue: QueueInfo) -> None:
        if await self._write_auto_queue(queue):  # feed it now rather than wait for the watch: units may need it this cycle
            self.engine.set_queue(replace(queue, namespace=self.config.system_namespace))

    async def _write_auto_queue(self, queue: QueueInfo) -> bool:
        """Make (or set the policy of) our Queue named like a quota; whether there was none."""
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
        return existing is None

    def _refeed_queues(self) -> None:
        for _, obj in self.informers.queue.items():
            self._feed_queue(obj)

    def _feed_queue(self, obj: Object, warn: bool = False) -> QueueInfo | None:
        """Parse a Queue into the engine; ``warn``: say which of its settings were not usable
        (unknown policy, bad annotations: the Queue works with the fallback each names)."""
        try:
            parsed = parse_queue(obj, list(self.quotas), {c.SYSTEM_NAMESPACE, self.config.system_namespace})
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
        _read_annotations(before) == _read_annotations(after)


def _read_annotations(meta: Object) -> dict[str, str]:
    """The annotations we read (not the usage ones we write on Queues, quotastatus.py)."""
    return {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(c.QUEUE_USAGE_PREFIX)}


def _is_auto_queue(obj: Object, quota: str) -> bool:
    """Whether a Queue in the system namespace is the one made for ``quota`` (by us)."""
    meta = obj.get("metadata") or {}
    return meta.get("name") == quota and (meta.get("labels") or {}).get(c.LABEL_QUOTA_NAME) == quota
