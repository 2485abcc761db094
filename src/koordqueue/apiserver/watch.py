"""Watch fan-out: store events to open watch streams, filtered and encoded once.

Each watch is a `Watcher` with its own filter. An update that makes an object leave
a watcher's selector reaches it as DELETED, and one that makes it enter as ADDED,
as the Kubernetes watch cache does. Lines are appended to a buffer that the HTTP
handler drains, so a burst of writes is one socket write per watcher.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from koordqueue.apiserver.store import ADDED, DELETED, MODIFIED, Event

Filter = Callable[[dict[str, Any]], bool]
# (event type, object) -> one newline-terminated JSON line; None: the standard encoding.
Encoder = Callable[[str, dict[str, Any]], bytes]

MAX_BUFFERED = 100_000  # a watcher this far behind is closed, as a real server drops slow watchers


def encode_event(event_type: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": event_type, "object": obj}) + b"\n"


class Watcher:
    def __init__(
        self, key: str, namespace: str | None, accept: Filter | None, api_version: str,
        encoder: Encoder | None = None,
    ) -> None:
        self.key = key
        self.namespace = namespace
        self.accept = accept
        self.api_version = api_version
        self.encoder = encoder
        self.buffer: list[bytes] = []
        self.ready = asyncio.Event()
        self.closed = False

    def matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace", "") != self.namespace:
            return False
        return self.accept is None or self.accept(obj)

    def translate(self, event: Event) -> str | None:
        """The event type this watcher sees for `event`, or None if it sees nothing."""
        if event.type == ADDED:
            return ADDED if self.matches(event.obj) else None
        if event.type == DELETED:
            return DELETED if self.matches(event.old) else None
        was, now = self.matches(event.old), self.matches(event.obj)
        if was and now:
            return MODIFIED
        if was:
            return DELETED
        return ADDED if now else None

    def line(self, event_type: str, obj: dict[str, Any], cache: dict[str, bytes] | None = None) -> bytes:
        if self.encoder is not None:
            return self.encoder(event_type, obj)
        if obj.get("apiVersion") != self.api_version:
            obj = {**obj, "apiVersion": self.api_version}
        if cache is None:
            return encode_event(event_type, obj)
        tag = f"{event_type}|{self.api_version}"
        data = cache.get(tag)
        if data is None:
            data = cache[tag] = encode_event(event_type, obj)
        return data

    def offer(self, event: Event) -> None:
        event_type = self.translate(event)
        if event_type is not None:
            self.push(self.line(event_type, event.obj, event.encoded))

    def push(self, line: bytes) -> None:
        if self.closed:
            return
        self.buffer.append(line)
        if len(self.buffer) > MAX_BUFFERED:
            self.close()
        self.ready.set()

    def close(self) -> None:
        self.closed = True
        self.ready.set()


class WatchHub:
    """All open watchers, by storage key. Registered as a store listener."""

    def __init__(self) -> None:
        self._by_key: dict[str, set[Watcher]] = {}

    def add(self, watcher: Watcher) -> None:
        self._by_key.setdefault(watcher.key, set()).add(watcher)

    def discard(self, watcher: Watcher) -> None:
        watchers = self._by_key.get(watcher.key)
        if watchers is not None:
            watchers.discard(watcher)
            if not watchers:
                del self._by_key[watcher.key]

    def __call__(self, event: Event) -> None:
        for watcher in self._by_key.get(event.key, ()):
            watcher.offer(event)

    def count(self) -> int:
        return sum(len(w) for w in self._by_key.values())

    def close_all(self, key: str | None = None) -> int:
        """Close every watcher (of one resource, if given); returns how many."""
        keys = [key] if key is not None else list(self._by_key)
        n = 0
        for k in keys:
            for watcher in self._by_key.get(k, ()):
                watcher.close()
                n += 1
        return n
