"""A cache of one resource kept current by list + watch, with add/update/delete callbacks.

What it guarantees handlers, whatever the connection does:
- the cache and the callbacks agree: every key a handler was told about by `on_add`
  gets `on_update`s and finally one `on_delete`, in the order the server applied them;
- a dropped watch resumes from the last resourceVersion seen (bookmarks advance it),
  so nothing is replayed and nothing is missed;
- the state is taken by a streaming list (a watch with sendInitialEvents, as client-go's
  WatchList: the objects as ADDED events, then a bookmark marks their end, and the same
  stream goes on with the changes), served from kube-apiserver's watch cache in one
  response instead of pages read one after another; a server that refuses it, or sends
  anything but ADDED events before the end (one that does not know it), is listed by
  pages from then on;
- when that version is too old (410 Gone), it lists again and emits the difference
  against the cache: adds for new keys, updates for changed ones (resourceVersion
  differs), deletes for keys that vanished meanwhile;
- failed lists and watches are retried with jittered exponential backoff.

The cache holds `project(raw_object)`, not the object: the controller keeps 100k jobs,
so it stores only the fields it reads. The default keeps the raw dict minus
managedFields and the last-applied annotation, the two largest parts nobody reads. A
projection that returns None does not keep the object: the informer treats it as absent
(an object that stops being kept is deleted, handlers told with its last kept state). A
projection that raises (a malformed object) changes nothing: the last kept state stays.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Literal, TypeVar, overload

from koordqueue import aio
from koordqueue.api.constants import INITIAL_EVENTS_END_ANNOTATION
from koordqueue.kube.api import KubeAPI
from koordqueue.kube.client import ListResult, Resource
from koordqueue.kube.errors import BadRequest, Gone, Invalid, KubeError
from koordqueue.kube.ratelimit import exponential_backoff

log = logging.getLogger(__name__)

T = TypeVar("T")
Object = dict[str, Any]
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


class _Unreadable(enum.Enum):
    """What `_projection` gives for an object the projection raised on."""

    UNREADABLE = enum.auto()


UNREADABLE: Literal[_Unreadable.UNREADABLE] = _Unreadable.UNREADABLE


def trim(obj: Object) -> Object:
    """The default projection: the object without managedFields and last-applied config."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED_ANNOTATION, None)
    return obj


def _ends_initial_events(bookmark: Object) -> bool:
    annotations = (bookmark.get("metadata") or {}).get("annotations") or {}
    return annotations.get(INITIAL_EVENTS_END_ANNOTATION) == "true"


def key_of(obj: Object) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's MetaNamespaceKey)."""
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace"), meta.get("name", "")
    return f"{ns}/{name}" if ns else str(name)


class Informer(Generic[T]):
    """Register handlers, `start()` (or run `run()` as a task), then `await wait_synced()`.

    Handlers run one at a time in event order on the informer's task, so they should be
    quick (enqueue a key in a WorkQueue); an async handler delays the next event.
    """

    @overload
    def __init__(
        self: Informer[Object],
        client: KubeAPI,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
        base_delay: float = 0.2,
        max_delay: float = 30.0,
    ) -> None: ...

    @overload
    def __init__(
        self,
        client: KubeAPI,
        resource: Resource,
        *,
        project: Callable[[Object], T | None],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
        base_delay: float = 0.2,
        max_delay: float = 30.0,
    ) -> None: ...

    def __init__(
        self,
        client: KubeAPI,
        resource: Resource,
        *,
        project: Callable[[Object], Any] = trim,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
        base_delay: float = 0.2,
        max_delay: float = 30.0,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.yield_every = 25  # objects of a listed page read between two turns of the loop
        self.watch_timeout = watch_timeout
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._project: Callable[[Object], T | None] = project
        self._cache: dict[str, T] = {}
        self._versions: dict[str, str] = {}  # key -> resourceVersion, to see what a relist changed
        self._resource_version = ""
        self._synced = asyncio.Event()
        self._add_handlers: list[Callable[[T], Awaitable[None] | None]] = []
        self._update_handlers: list[Callable[[T, T], Awaitable[None] | None]] = []
        self._delete_handlers: list[Callable[[T], Awaitable[None] | None]] = []
        self._task: asyncio.Task[None] | None = None
        self.stream = True  # the state by a streaming list (False: by pages, once a server refused it)
        self.lists = 0  # completed lists (streamed or by pages): 1 + the relists after 410 Gone
        self.watches = 0  # watch requests opened

    # --- handlers (usable as decorators) ----------------------------------------------

    def on_add(self, handler: Callable[[T], Awaitable[None] | None]) -> Callable[[T], Awaitable[None] | None]:
        self._add_handlers.append(handler)
        return handler

    def on_update(
        self, handler: Callable[[T, T], Awaitable[None] | None]
    ) -> Callable[[T, T], Awaitable[None] | None]:
        """Called with (old, new)."""
        self._update_handlers.append(handler)
        return handler

    def on_delete(self, handler: Callable[[T], Awaitable[None] | None]) -> Callable[[T], Awaitable[None] | None]:
        """Called with the last state known: from the DELETED event, or the cache after a relist."""
        self._delete_handlers.append(handler)
        return handler

    # --- cache ------------------------------------------------------------------------

    def get(self, key: str) -> T | None:
        return self._cache.get(key)

    def items(self) -> list[tuple[str, T]]:
        """A snapshot of (key, projection) pairs."""
        return list(self._cache.items())

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, key: object) -> bool:
        return key in self._cache

    def version(self, key: str) -> str | None:
        """The resourceVersion of the kept object `key` (None: not kept)."""
        return self._versions.get(key) if key in self._cache else None

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (list, event or bookmark): where a watch resumes."""
        return self._resource_version

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Until the first list is in the cache and its handlers have run."""
        if not await aio.wait_event(self._synced, timeout):
            raise TimeoutError(f"{self.resource.plural}: not synced after {timeout} s")

    # --- running ----------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"informer-{self.resource.plural}")

    async def stop(self) -> None:
        """Cancel the list-and-watch and wait until it has ended. A stop that is itself
        cancelled while waiting raises CancelledError: catching it here would swallow the
        caller's cancel along with the informer's."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def run(self) -> None:
        """Take the state (streamed, else listed), then watch forever; take it again only
        when the server says 410 Gone."""
        failures = 0
        while True:
            try:
                if not self._resource_version and not self.stream:
                    await self._list_and_replace()
                    failures = 0
                await self._watch_once()  # (without a resourceVersion: a streaming list first)
                failures = 0  # a watch the server ended normally: resume at once
            except Gone:
                log.info("%s: resourceVersion %s expired; listing again", self.resource.plural, self._resource_version)
                self._resource_version = ""
            except KubeError as e:
                delay = exponential_backoff(failures, self.base_delay, self.max_delay, jitter=0.2)
                failures += 1
                log.warning("%s: %s; retrying in %.1fs", self.resource.plural, e, delay)
                await asyncio.sleep(delay)

    async def _list_and_replace(self) -> None:
        """List every page (from one snapshot), then bring the cache to it with diffs. The next
        page is asked for before this one is read, so the server serves it meanwhile (100,000
        Jobs are 200 pages, each tens of milliseconds of the server's and as much of ours)."""
        fresh: dict[str, tuple[str, T]] = {}  # new or changed keys only
        seen: set[str] = set()
        resource_version = ""
        coming = asyncio.ensure_future(self._page(None))
        try:
            while True:
                page = await coming
                token = page.continue_token
                if token:
                    coming = asyncio.ensure_future(self._page(token))
                resource_version = resource_version or page.resource_version
                await self._read_page(page.items, fresh, seen)
                if not token:
                    break
        finally:
            if not coming.done():
                coming.cancel()
                await asyncio.gather(coming, return_exceptions=True)
        await self._replace(fresh, seen, resource_version)

    async def _replace(self, fresh: dict[str, tuple[str, T]], seen: set[str], resource_version: str) -> None:
        """Bring the cache to a listed (or streamed) state: ``fresh`` its new or changed keys,
        ``seen`` every key it keeps; the others are deleted."""
        for key, (rv, new) in fresh.items():
            await self._store(key, rv, new)
        for key in [k for k in self._cache if k not in seen]:
            old = self._cache.pop(key)
            self._versions.pop(key, None)
            await self._emit(self._delete_handlers, old)
        self._resource_version = resource_version
        self.lists += 1
        self._synced.set()

    async def _page(self, token: str | None) -> ListResult:
        return await self.client.list(
            self.resource, namespace=self.namespace, label_selector=self.label_selector,
            field_selector=self.field_selector, limit=self.page_size, continue_token=token,
        )

    async def _read_page(self, items: list[Object], fresh: dict[str, tuple[str, T]], seen: set[str]) -> None:
        """A listed page's objects (``_read``); the loop is let run every ``yield_every``
        objects (the next page's request with it)."""
        for index, obj in enumerate(items):
            if index % self.yield_every == self.yield_every - 1:
                await asyncio.sleep(0)
            self._read(obj, fresh, seen)

    def _read(self, obj: Object, fresh: dict[str, tuple[str, T]], seen: set[str]) -> None:
        """A listed object: its key into ``seen`` if kept, into ``fresh`` if new or changed."""
        key = key_of(obj)
        rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
        if self._versions.get(key) == rv and key in self._cache:
            seen.add(key)
            return
        new = self._projection(obj)
        if new is None:
            return  # not kept: as though absent (deleted when the state is in, if it was kept)
        seen.add(key)
        if new is not UNREADABLE:
            fresh[key] = (rv, new)

    async def _watch_once(self) -> None:
        """One watch request, until the server ends it (timeout) or it breaks. Without a
        resourceVersion it is a streaming list: the ADDED events up to the bookmark that
        ends them are the state (read as a listed page is), the events after it changes."""
        self.watches += 1
        timeout = int(self.watch_timeout * (1 + random.random()))  # spread reconnects out
        initial = not self._resource_version
        fresh: dict[str, tuple[str, T]] = {}
        seen: set[str] = set()
        streamed = 0
        events = self.client.watch(
            self.resource, namespace=self.namespace, resource_version=self._resource_version,
            label_selector=self.label_selector, field_selector=self.field_selector,
            allow_bookmarks=True, timeout_seconds=timeout, send_initial_events=initial,
        )
        try:
            async for kind, obj in events:
                rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
                if initial:
                    if kind == "ADDED":
                        self._read(obj, fresh, seen)
                        streamed += 1
                        if streamed % self.yield_every == 0:
                            await asyncio.sleep(0)  # (the loop runs between a chunk's events)
                    elif kind == "BOOKMARK" and _ends_initial_events(obj):
                        initial = False
                        await self._replace(fresh, seen, rv)
                        fresh, seen = {}, set()  # (not held for the rest of a watch that may last long)
                    else:  # (a server that streams lists sends only ADDED before the mark)
                        log.info("%s: a %s event before the initial state's end: the server does not stream "
                                 "lists; listing by pages", self.resource.plural, kind)
                        self.stream = False
                        return
                    continue
                if kind == "BOOKMARK":
                    pass
                elif kind in ("ADDED", "MODIFIED"):
                    new = self._projection(obj)
                    if new is None:
                        await self._forget(key_of(obj), None)  # no longer kept
                    elif new is not UNREADABLE:
                        await self._store(key_of(obj), rv, new)
                elif kind == "DELETED":
                    new = self._projection(obj)
                    await self._forget(key_of(obj), None if new is UNREADABLE else new)
                else:
                    log.warning("%s: ignoring watch event of type %r", self.resource.plural, kind)
                    continue
                if rv:
                    self._resource_version = rv
        except (BadRequest, Invalid) as e:
            if not initial or streamed:
                raise
            log.info("%s: streaming list refused (%s); listing by pages", self.resource.plural, e)
            self.stream = False

    def _projection(self, obj: Object) -> T | None | Literal[_Unreadable.UNREADABLE]:
        """The projection (None: not kept), or UNREADABLE when it fails on a malformed object
        (logged): one bad object must not stop the informer for all the others."""
        try:
            return self._project(obj)
        except Exception:
            log.exception("%s: cannot project %s", self.resource.plural, key_of(obj))
            return UNREADABLE

    async def _forget(self, key: str, last: T | None) -> None:
        """Drop a cached key, telling the delete handlers its `last` state (the last kept
        one when None); nothing when the key was not kept."""
        if key not in self._cache:
            return
        old = self._cache.pop(key)
        self._versions.pop(key, None)
        await self._emit(self._delete_handlers, old if last is None else last)

    async def _store(self, key: str, rv: str, new: T) -> None:
        old = self._cache.get(key)
        self._cache[key] = new
        self._versions[key] = rv
        if old is None:
            await self._emit(self._add_handlers, new)
        else:
            await self._emit(self._update_handlers, old, new)

    async def _emit(self, handlers: list[Callable[..., Awaitable[None] | None]], *args: Any) -> None:
        """Run handlers in order; a failing handler is logged, never stops the informer."""
        for handler in handlers:
            try:
                result = handler(*args)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("%s: handler %r failed", self.resource.plural, handler)
