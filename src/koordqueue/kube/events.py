"""core/v1 Events about our objects, as `kubectl describe` shows them.

A controller says the same thing many times (a unit waiting for quota is retried
over and over), so a repeat of (object, type, reason, message) bumps `count` and
`lastTimestamp` on the Event already written instead of creating another, as
client-go's recorder does. The memory of what was written is a bounded LRU.

Events are advisory: recording never raises into the caller; failures are logged.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from koordqueue.kube.api import KubeAPI
from koordqueue.kube.client import Resource
from koordqueue.kube.errors import AlreadyExists, NotFound

log = logging.getLogger(__name__)

EVENTS = Resource("", "v1", "events")
MAX_MESSAGE_CHARS = 1024


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The involvedObject of an Event; build it from a raw object with `ObjectRef.of`. The uid
    is not optional: `kubectl describe` lists only the Events whose involvedObject.uid is
    its object's."""

    api_version: str
    kind: str
    name: str
    namespace: str  # "" for a cluster-scoped object
    uid: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(
            api_version=str(obj.get("apiVersion", "")),
            kind=str(obj.get("kind", "")),
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
        )


@dataclass(slots=True)
class _Written:
    """An Event we wrote, so a repeat can bump it."""

    name: str
    namespace: str
    count: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EventRecorder:
    def __init__(
        self, client: KubeAPI, component: str, *, host: str | None = None, cache_size: int = 4096
    ) -> None:
        self.client = client
        self.component = component
        self.host = host if host is not None else socket.gethostname()
        self.cache_size = cache_size
        self._written: OrderedDict[tuple[ObjectRef, str, str, str], _Written] = OrderedDict()

    async def record(self, obj: ObjectRef | dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Write an Event of `event_type` (Normal or Warning) about `obj`; never raises."""
        try:
            ref = obj if isinstance(obj, ObjectRef) else ObjectRef.of(obj)
            message = message[:MAX_MESSAGE_CHARS]
            key = (ref, event_type, reason, message)
            written = self._written.get(key)
            if written is None:
                written = _Written(name=_event_name(ref.name), namespace=ref.namespace or "default")
                self._written[key] = written
                while len(self._written) > self.cache_size:
                    self._written.popitem(last=False)
            else:
                self._written.move_to_end(key)
            async with written.lock:  # repeats of one event are written one after the other
                await self._write(written, ref, event_type, reason, message)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if isinstance(obj, ObjectRef):
                what = f"{obj.kind} {obj.namespace}/{obj.name}"
            else:  # name the object, never dump it: a job's whole spec would flood the log
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                meta = meta if isinstance(meta, dict) else {}
                what = f"{obj.get('kind') if isinstance(obj, dict) else '?'} {meta.get('namespace')}/{meta.get('name')}"
            log.warning("event %s/%s on %s not recorded: %s", event_type, reason, what, e)

    async def _write(self, written: _Written, ref: ObjectRef, event_type: str, reason: str, message: str) -> None:
        now = _now()
        if written.count:
            try:
                await self.client.patch(
                    EVENTS, written.name, {"count": written.count + 1, "lastTimestamp": now},
                    namespace=written.namespace,
                )
                written.count += 1
                return
            except NotFound:  # expired (events live an hour) or deleted: start over
                written.name = _event_name(ref.name)
        try:
            await self.client.create(EVENTS, self._event(written, ref, event_type, reason, message, now))
        except AlreadyExists as e:
            if not e.after_retry:  # someone else's Event of that name
                raise
            # else: our create went through, only its answer was lost
        written.count = 1

    def _event(
        self, written: _Written, ref: ObjectRef, event_type: str, reason: str, message: str, now: str
    ) -> dict[str, Any]:
        involved = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
        if ref.namespace:
            involved["namespace"] = ref.namespace
        if ref.uid:
            involved["uid"] = ref.uid
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": written.name, "namespace": written.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": event_type,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event_name(involved: str) -> str:
    """``<object name>.<time in hex>``, as client-go names events, cut to the 253 characters
    a name may have: the Event of an object with a long name is refused otherwise."""
    suffix = f".{time.time_ns():x}"
    return involved[: 253 - len(suffix)].rstrip("-.") + suffix
