"""Object storage: in-memory indexes in front of SQLite, one global resourceVersion.

Every write is applied to memory at once (so reads and watches see it in the same
event-loop tick) and queued for SQLite, which commits the writes of each 20 ms in one
transaction in WAL mode: a burst of writes costs one commit (committing every tick cost
a tenth of the server's time under load). SQLite is the truth after a restart; memory is
the truth while running. Objects handed out are never mutated afterwards, so they
are shared by lists, watch events and history without copying.
"""

from __future__ import annotations

import asyncio
import bisect
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from koordqueue.apiserver import errors

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
HISTORY_LIMIT = 50_000
# A write reaches SQLite at most this long after it is made (close() flushes at once); an
# object written several times meanwhile (a QueueUnit admitted, running and done within
# a second) is serialized and stored once.
FLUSH_SECONDS = 0.1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (resource, namespace, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(slots=True)
class Event:
    """One change, as watches see it. `old` is the previous state (None on ADDED)."""

    rv: int
    key: str
    type: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    encoded: dict[str, bytes] = field(default_factory=dict)  # api version -> watch-event line

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace", ""))


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


class Store:
    def __init__(self, path: Path, history_limit: int = HISTORY_LIMIT) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._objects: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        self._uids: dict[str, tuple[str, str, str]] = {}
        self._pending: dict[tuple[str, str, str], dict[str, Any] | None] = {}  # None: deleted
        self._flush_timer: asyncio.TimerHandle | None = None
        # (storage key, namespace or None for all) -> its objects' (namespace, name), sorted;
        # made when asked for, dropped when a name comes or goes there (updates keep it).
        self._sorted: dict[tuple[str, str | None], list[tuple[str, str]]] = {}
        self.history: list[Event] = []
        self.history_limit = history_limit
        self.listeners: list[Callable[[Event], None]] = []
        self.rv = 0
        self._load()
        self.compacted_rv = self.rv

    def _load(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key='rv'").fetchone()
        self.rv = int(row[0]) if row else 0
        for resource, ns, name, data in self._db.execute("SELECT resource, namespace, name, data FROM objects"):
            obj = orjson.loads(data)
            self._objects.setdefault(resource, {}).setdefault(ns, {})[name] = obj
            self._uids[obj["metadata"]["uid"]] = (resource, ns, name)
            self.rv = max(self.rv, int(obj["metadata"]["resourceVersion"]))

    # --- reads ---------------------------------------------------------------------
    def get(self, key: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get(key, {}).get(namespace, {}).get(name)

    def items(self, key: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of one resource (in one namespace, or all), sorted by (namespace, name)."""
        by_ns = self._objects.get(key, {})
        return [by_ns[ns][name] for ns, name in self.sorted_names(key, namespace)]

    def sorted_names(self, key: str, namespace: str | None = None) -> list[tuple[str, str]]:
        """(namespace, name) of one resource's objects (in one namespace, or all), sorted; shared:
        do not modify. Kept between calls, so that each page of a long list does not sort again."""
        cached = self._sorted.get((key, namespace))
        if cached is None:
            by_ns = self._objects.get(key, {})
            if namespace is not None:
                cached = [(namespace, n) for n in sorted(by_ns.get(namespace, ()))]
            else:
                cached = [(ns, n) for ns in sorted(by_ns) for n in sorted(by_ns[ns])]
            self._sorted[(key, namespace)] = cached
        return cached

    def _names_changed(self, key: str, namespace: str) -> None:
        self._sorted.pop((key, namespace), None)
        self._sorted.pop((key, None), None)

    def namespace_has_objects(self, namespace: str) -> Iterator[str]:
        """Storage keys with at least one object in `namespace`."""
        for key, by_ns in self._objects.items():
            if by_ns.get(namespace):
                yield key

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        where = self._uids.get(uid)
        return self.get(*where) if where else None

    def key_of_uid(self, uid: str) -> str | None:
        where = self._uids.get(uid)
        return where[0] if where else None

    def all_objects(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for key, by_ns in self._objects.items():
            for objs in by_ns.values():
                for obj in objs.values():
                    yield key, obj

    # --- writes --------------------------------------------------------------------
    def put(self, key: str, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        """Store a new or changed object, giving it the next resourceVersion."""
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        ns, name = object_key(obj)
        objs = self._objects.setdefault(key, {}).setdefault(ns, {})
        if name not in objs:
            self._names_changed(key, ns)
        objs[name] = obj
        self._uids[meta["uid"]] = (key, ns, name)
        self._persist(key, ns, name, obj)
        self._record(Event(self.rv, key, MODIFIED if old is not None else ADDED, obj, old))
        return obj

    def remove(self, key: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Delete an object; the DELETED event carries the deletion's resourceVersion."""
        ns, name = object_key(obj)
        by_ns = self._objects.get(key, {})
        by_ns.get(ns, {}).pop(name, None)
        self._names_changed(key, ns)
        if not by_ns.get(ns, True):
            del by_ns[ns]
        self._uids.pop(obj["metadata"]["uid"], None)
        self.rv += 1
        gone = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        self._persist(key, ns, name, None)
        self._record(Event(self.rv, key, DELETED, gone, obj))
        return gone

    def _record(self, event: Event) -> None:
        self.history.append(event)
        if len(self.history) > self.history_limit * 2:
            cut = len(self.history) - self.history_limit
            self.compacted_rv = self.history[cut - 1].rv
            del self.history[:cut]
        for listener in self.listeners:
            listener(event)

    def compact(self) -> None:
        """Forget all history: watches and continues from before now get 410 Gone."""
        self.history.clear()
        self.compacted_rv = self.rv

    def events_since(self, rv: int) -> list[Event]:
        if rv < self.compacted_rv:
            raise errors.too_old_resource_version(rv, self.compacted_rv + 1)
        start = bisect.bisect_right(self.history, rv, key=lambda e: e.rv)
        return self.history[start:]

    # --- persistence ---------------------------------------------------------------
    def _persist(self, key: str, ns: str, name: str, obj: dict[str, Any] | None) -> None:
        self._pending[(key, ns, name)] = obj  # stored objects are never changed: serialized at the flush
        if self._flush_timer is None:
            try:
                self._flush_timer = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self.flush)
            except RuntimeError:  # no loop (start-up): flush now
                self.flush()

    def flush(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        upserts = [(k, ns, n, orjson.dumps(d)) for (k, ns, n), d in pending.items() if d is not None]
        deletes = [(k, ns, n) for (k, ns, n), d in pending.items() if d is None]
        db = self._db
        db.execute("BEGIN")
        if upserts:
            db.executemany("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)", upserts)
        if deletes:
            db.executemany("DELETE FROM objects WHERE resource=? AND namespace=? AND name=?", deletes)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)", (str(self.rv),))
        db.execute("COMMIT")

    def close(self) -> None:
        self.flush()
        self._db.close()
