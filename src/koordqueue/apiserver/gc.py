"""Garbage collection: ownerReferences, propagation policies and namespace deletion.

As in Kubernetes, this runs after the fact and asynchronously: the owner's DELETED
event comes first, its dependents' follow. Background (the default) deletes
dependents whose owners are all gone and drops dangling references from the rest;
Foreground deletes dependents first and then the owner (finalizer
`foregroundDeletion`); Orphan removes the references and keeps the dependents
(finalizer `orphan`). A terminating namespace is emptied and then removed.
Events expire an hour after they last happened, as etcd's TTL makes them on a real
cluster, so a long-running local cluster does not fill up with them.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from koordqueue.apiserver import errors
from koordqueue.apiserver.builtin import NAMESPACE_FINALIZER, NAMESPACE_KEY
from koordqueue.apiserver.operations import (
    BACKGROUND,
    FOREGROUND_FINALIZER,
    ORPHAN_FINALIZER,
    DeleteOptions,
    Operations,
)
from koordqueue.apiserver.patch import deep_copy
from koordqueue.apiserver.registry import ResourceType
from koordqueue.apiserver.store import DELETED, Event

log = logging.getLogger(__name__)

EVENT_KEYS = ("/events", "events.k8s.io/events")
EVENT_TTL = 3600.0
EVENT_SWEEP_INTERVAL = 60.0

Where = tuple[str, str, str]  # storage key, namespace, name


def _owner_uids(obj: dict[str, Any] | None) -> set[str]:
    if obj is None:
        return set()
    return {r["uid"] for r in obj["metadata"].get("ownerReferences") or () if isinstance(r, dict) and "uid" in r}


class GarbageCollector:
    def __init__(self, ops: Operations) -> None:
        self._ops = ops
        self._store = ops.store
        self._dependents: dict[str, set[Where]] = {}  # owner uid -> dependents
        self._work: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self.event_ttl = EVENT_TTL
        for key, obj in self._store.all_objects():
            self._index(key, obj, None)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run()), loop.create_task(self._sweep_events_periodically())]
        self.resync()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _sweep_events_periodically(self) -> None:
        while True:
            await asyncio.sleep(EVENT_SWEEP_INTERVAL)
            self.sweep_events()

    def sweep_events(self, now: datetime | None = None) -> int:
        """Delete events whose last occurrence is older than `event_ttl`; returns how many."""
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=self.event_ttl)
        expired = 0
        for key in EVENT_KEYS:
            rt = self._rt(key)
            if rt is None:
                continue
            for obj in self._store.items(key):
                if _last_seen(obj) < cutoff:
                    meta = obj["metadata"]
                    self._ops.delete(rt, meta.get("namespace", ""), meta["name"], DeleteOptions())
                    expired += 1
        return expired

    def resync(self) -> None:
        """Look at everything once (after a restart nothing else would wake us)."""
        for _key, obj in list(self._store.all_objects()):
            self._consider(obj)

    async def idle(self) -> None:
        """Wait until every queued piece of work is done (for tests)."""
        await self._work.join()

    # --- events --------------------------------------------------------------------------
    def _index(self, key: str, obj: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
        where = (key, *_where(obj or old))  # type: ignore[arg-type]
        for uid in _owner_uids(old) - _owner_uids(obj):
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.discard(where)
                if not deps:
                    del self._dependents[uid]
        for uid in _owner_uids(obj):
            self._dependents.setdefault(uid, set()).add(where)

    def __call__(self, event: Event) -> None:
        if event.type == DELETED:
            self._index(event.key, None, event.old)
            uid = event.obj["metadata"]["uid"]
            if uid in self._dependents:
                self._work.put_nowait(("owner-gone", uid))
            for owner in _owner_uids(event.old):
                self._work.put_nowait(("dependent-gone", owner))
            ns = self._store.get(NAMESPACE_KEY, "", event.namespace) if event.namespace else None
            if ns is not None and ns["metadata"].get("deletionTimestamp"):
                self._work.put_nowait(("namespace", event.namespace))
            return
        meta = event.obj["metadata"]
        if event.old is not None and not meta.get("deletionTimestamp") and \
                meta.get("ownerReferences") == event.old["metadata"].get("ownerReferences"):
            return  # the same owners, not being deleted: nothing to index or to consider again
        self._index(event.key, event.obj, event.old)
        self._consider(event.obj)

    def _consider(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            if obj.get("kind") == "Namespace" and obj.get("apiVersion") == "v1":
                self._work.put_nowait(("namespace", meta["name"]))
            finalizers = meta.get("finalizers") or ()
            if FOREGROUND_FINALIZER in finalizers:
                self._work.put_nowait(("foreground", meta["uid"]))
            if ORPHAN_FINALIZER in finalizers:
                self._work.put_nowait(("orphan", meta["uid"]))
        if any(self._store.by_uid(uid) is None for uid in _owner_uids(obj)):
            self._work.put_nowait(("check", meta["uid"]))

    # --- work ------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            kind, arg = await self._work.get()
            try:
                self._do(kind, arg)
            except errors.APIError as e:  # the object changed under us; its next event brings us back
                log.debug("garbage collector: %s %s: %s", kind, arg, e.message)
            except Exception:
                log.exception("garbage collector: %s %s", kind, arg)
            finally:
                self._work.task_done()

    def _do(self, kind: str, arg: str) -> None:
        if kind == "namespace":
            self._purge_namespace(arg)
        elif kind in ("owner-gone", "foreground"):
            for where in list(self._dependents.get(arg, ())):
                self._check_dependent(where, deleting_owner=arg if kind == "foreground" else None)
            if kind == "foreground":
                self._finish_foreground(arg)
        elif kind == "dependent-gone":
            self._finish_foreground(arg)
        elif kind == "orphan":
            self._orphan(arg)
        elif kind == "check":
            obj = self._store.by_uid(arg)
            key = self._store.key_of_uid(arg)
            if obj is not None and key is not None:
                self._check_dependent((key, *_where(obj)), None)

    def _rt(self, key: str) -> ResourceType | None:
        versions = self._ops.registry.versions_of(key)
        return versions[0] if versions else None

    def _check_dependent(self, where: Where, deleting_owner: str | None) -> None:
        key, ns, name = where
        obj, rt = self._store.get(key, ns, name), self._rt(key)
        if obj is None or rt is None:
            return
        refs = obj["metadata"].get("ownerReferences") or []
        alive = [r for r in refs if r.get("uid") != deleting_owner and self._store.by_uid(r.get("uid", "")) is not None]
        if not alive:
            if not obj["metadata"].get("deletionTimestamp"):
                self._ops.delete(rt, ns, name, DeleteOptions(propagation=BACKGROUND))
        elif len(alive) < len(refs):
            new = deep_copy(obj)
            new["metadata"]["ownerReferences"] = alive
            self._ops.write_system(rt, obj, new)

    def _finish_foreground(self, owner_uid: str) -> None:
        owner = self._store.by_uid(owner_uid)
        key = self._store.key_of_uid(owner_uid)
        if owner is None or key is None or FOREGROUND_FINALIZER not in (owner["metadata"].get("finalizers") or ()):
            return
        if not owner["metadata"].get("deletionTimestamp") or self._dependents.get(owner_uid):
            return
        self._drop_finalizer(key, owner, FOREGROUND_FINALIZER)

    def _orphan(self, owner_uid: str) -> None:
        owner = self._store.by_uid(owner_uid)
        key = self._store.key_of_uid(owner_uid)
        if owner is None or key is None:
            return
        for dkey, ns, name in list(self._dependents.get(owner_uid, ())):
            dep, rt = self._store.get(dkey, ns, name), self._rt(dkey)
            if dep is not None and rt is not None:
                new = deep_copy(dep)
                new["metadata"]["ownerReferences"] = [
                    r for r in dep["metadata"].get("ownerReferences") or () if r.get("uid") != owner_uid]
                if not new["metadata"]["ownerReferences"]:
                    del new["metadata"]["ownerReferences"]
                self._ops.write_system(rt, dep, new)
        self._drop_finalizer(key, owner, ORPHAN_FINALIZER)

    def _drop_finalizer(self, key: str, obj: dict[str, Any], finalizer: str) -> None:
        rt = self._rt(key)
        if rt is None:
            return
        new = deep_copy(obj)
        new["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or () if f != finalizer]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        self._ops.write_system(rt, obj, new)

    def _purge_namespace(self, namespace: str) -> None:
        ns = self._store.get(NAMESPACE_KEY, "", namespace)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        for key in list(self._store.namespace_has_objects(namespace)):
            rt = self._rt(key)
            for obj in self._store.items(key, namespace):
                if rt is not None and not obj["metadata"].get("deletionTimestamp"):
                    self._ops.delete(rt, namespace, obj["metadata"]["name"], DeleteOptions(propagation=BACKGROUND))
        if any(True for _ in self._store.namespace_has_objects(namespace)):
            return  # objects with finalizers are left; their removal brings us back
        rt = self._rt(NAMESPACE_KEY)
        if rt is None:
            return
        new = deep_copy(ns)
        spec = new.setdefault("spec", {})
        spec["finalizers"] = [f for f in spec.get("finalizers") or () if f != NAMESPACE_FINALIZER]
        if not spec["finalizers"]:
            del spec["finalizers"]
        self._ops.write_system(rt, ns, new)


def _last_seen(event: dict[str, Any]) -> datetime:
    times = []
    for value in (event.get("lastTimestamp"), event.get("eventTime"), (event.get("series") or {}).get(
            "lastObservedTime"), event["metadata"].get("creationTimestamp")):
        if isinstance(value, str):
            try:
                times.append(datetime.fromisoformat(value.replace("Z", "+00:00")))
            except ValueError:
                continue
    return max(times, default=datetime.now(UTC))


def _where(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
