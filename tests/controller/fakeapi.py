"""An in-memory API server behind the `KubeAPI` Protocol (koordqueue/kube/api.py), so that a
part of the controller is tested alone, without the embedded server.

What it keeps as the API server does: objects by (resource, namespace, name), one
resourceVersion counter for all of them, a write with a stale metadata.resourceVersion
refused with Conflict, NotFound and AlreadyExists where the real client raises them, merge
patches (RFC 7386: null deletes a key, a list is replaced whole) on the object or on its
status alone, a patch that changes nothing leaving the version as it was, and watches that
replay what changed after a version, and a CRD without the status subresource (`without_status`:
its /status answers 404, a write of the object keeps its status, as Koordinator's
ElasticQuota CRD is served). What it adds for tests: `requests`, every request in
the order it was made (attempts that failed included), and `fail_next`, which makes the
next matching requests fail, either to the caller or as a failed attempt the client
retries itself (as KubeClient does after a 5xx or a 429), so a test can hold a write up
and see what lands first. Only merge patches: the parts send no others.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from koordqueue.aio import wait_event
from koordqueue.api import constants as c
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.metrics import Metrics
from koordqueue.controller.shared import Shared
from koordqueue.kube.api import KubeAPI
from koordqueue.kube.client import Body, ListResult, Object, PatchType, Resource, WatchEvent
from koordqueue.kube.errors import ApiError, KubeError, error_from_status

Key = tuple[str, str, str, str]  # group, plural, namespace ("" when cluster-scoped), name


async def until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Poll ``condition()`` every millisecond until it holds; fail after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.001)


def status_error(code: int, reason: str = "", message: str = "") -> ApiError:
    """The error KubeClient raises for an HTTP status (its class: NotFound, Conflict, ...)."""
    return error_from_status(code, {"kind": "Status", "code": code, "reason": reason, "message": message})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``target`` (neither is changed)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass(slots=True)
class Request:
    """One request as the server saw it (one attempt of it, when the client retried)."""

    verb: str  # list, watch, create, patch, patch_status, delete
    plural: str
    namespace: str | None
    name: str | None
    body: Any = None  # a copy of what was sent
    error: KubeError | None = None  # what it failed with; None: it was applied
    resource_version: str | None = None  # the object's after a write (or the list's)


@dataclass(slots=True)
class _Fault:
    error: KubeError
    times: int
    verb: str | None
    plural: str | None
    name: str | None
    retried_after: float | None

    def matches(self, verb: str, plural: str, name: str | None) -> bool:
        return (self.verb in (None, verb) and self.plural in (None, plural)
                and (self.name is None or self.name == name))


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[Key, Object] = {}
        self.requests: list[Request] = []
        self._rv = 0
        self._uids = itertools.count(1)
        self._changes: list[tuple[int, Key, str, Object]] = []  # (rv, key, event type, object)
        self._news = asyncio.Event()  # set (and replaced) at every change, for the watches
        self._faults: list[_Fault] = []
        self.without_status: set[str] = set()  # plurals whose CRD has no status subresource

    # --- for tests ----------------------------------------------------------------------

    def serve_status(self, plural: str, served: bool) -> None:
        """The CRD of ``plural`` changed to have (or not) the status subresource."""
        (self.without_status.discard if served else self.without_status.add)(plural)

    def fail_next(self, error: KubeError, *, times: int = 1, verb: str | None = None, plural: str | None = None,
                  name: str | None = None, retried_after: float | None = None) -> None:
        """The next ``times`` requests matching (verb, plural, name; None matches any) fail
        with ``error``. With ``retried_after`` the caller does not see it: the attempt fails
        (it is in `requests`) and the request is made again that many seconds later, as
        KubeClient retries a 5xx or a 429, so the write lands late."""
        self._faults.append(_Fault(error, times, verb, plural, name, retried_after))

    def seed(self, resource: Resource, obj: Object) -> Object:
        """Store an object as if created earlier (not in `requests`)."""
        return self._create(resource, obj, None)

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Object:
        """A copy of the stored object (not a request: tests read the server's state)."""
        obj = self.objects.get(self._key(resource, namespace, name))
        if obj is None:
            raise status_error(404, "NotFound", f"{resource.plural} {name!r} not found")
        return copy.deepcopy(obj)

    def writes(self, plural: str | None = None, name: str | None = None) -> list[Request]:
        """The write requests (failed attempts included), in order, of a kind and name."""
        return [r for r in self.requests if r.verb in ("create", "patch", "patch_status", "delete")
                and plural in (None, r.plural) and name in (None, r.name)]

    # --- reads --------------------------------------------------------------------------

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ListResult:
        """Sorted by namespace and name; pages by ``limit``, the token being an offset."""
        request = await self._begin("list", resource, namespace, None, None)
        selected = [copy.deepcopy(obj) for key, obj in sorted(self.objects.items())
                    if self._selects(resource, namespace, label_selector, field_selector, key, obj)]
        start = int(continue_token or 0)
        end = start + limit if limit else len(selected)
        request.resource_version = str(self._rv)
        return ListResult(selected[start:end], str(self._rv), str(end) if end < len(selected) else None)

    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
        send_initial_events: bool = False,
    ) -> AsyncIterator[WatchEvent]:
        """The changes after ``resource_version`` (without one: the objects there are, as
        ADDED, and with ``send_initial_events`` the bookmark that ends them), then the changes
        as they come, until ``timeout_seconds``."""
        await self._begin("watch", resource, namespace, None, None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds if timeout_seconds else None
        if resource_version:
            seen = int(resource_version)
        else:
            seen = self._rv
            for key, obj in sorted(self.objects.items()):
                if self._selects(resource, namespace, label_selector, field_selector, key, obj):
                    yield WatchEvent("ADDED", copy.deepcopy(obj))
            if send_initial_events:
                yield WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": str(seen), "annotations": {
                    c.INITIAL_EVENTS_END_ANNOTATION: "true"}}})
        while True:
            news = self._news
            for rv, key, kind, obj in self._changes[self._first_after(seen):]:
                seen = rv
                if self._selects(resource, namespace, label_selector, field_selector, key, obj):
                    yield WatchEvent(kind, copy.deepcopy(obj))
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return
            # (Not asyncio.wait_for: before Python 3.12 it swallows a cancel that comes as the
            # news does, and an informer's stop() then waits for a watch that goes on forever.)
            if not await wait_event(news, left):
                return

    # --- writes -------------------------------------------------------------------------

    async def create(self, resource: Resource, body: Object, *, namespace: str | None = None,
                     field_validation: str | None = None) -> Object:
        meta = body.get("metadata") or {}
        ns = (namespace or meta.get("namespace")) if resource.namespaced else None
        request = await self._begin("create", resource, ns, meta.get("name"), body)
        try:
            obj = self._create(resource, body, namespace)
        except KubeError as e:
            request.error = e
            raise
        request.name = obj["metadata"]["name"]
        request.resource_version = obj["metadata"]["resourceVersion"]
        return obj

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Body,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
    ) -> Object:
        return await self._patch("patch", resource, name, patch, namespace, patch_type)

    async def patch_status(
        self,
        resource: Resource,
        name: str,
        patch: Body,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
    ) -> Object:
        return await self._patch("patch_status", resource, name, patch, namespace, patch_type)

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        preconditions: dict[str, str] | None = None,
        grace_period_seconds: int | None = None,
    ) -> Object:
        """Gone at once (no finalizers, no grace); returns the object as it was."""
        request = await self._begin("delete", resource, namespace, name, preconditions)
        try:
            key = self._key(resource, namespace, name)
            obj = self._stored(key, resource, name)
            meta = obj["metadata"]
            for field in ("uid", "resourceVersion"):
                if preconditions and field in preconditions and preconditions[field] != meta.get(field):
                    raise status_error(409, "Conflict", f"precondition failed: {field} is {meta.get(field)}")
        except KubeError as e:
            request.error = e
            raise
        del self.objects[key]
        request.resource_version = self._changed(key, "DELETED", copy.deepcopy(obj))
        return copy.deepcopy(obj)

    # --- plumbing -----------------------------------------------------------------------

    async def _begin(self, verb: str, resource: Resource, namespace: str | None, name: str | None,
                     body: Any) -> Request:
        """Log the request, after the failed attempts the faults armed make of it."""
        while True:
            request = Request(verb, resource.plural, namespace, name, copy.deepcopy(body))
            self.requests.append(request)
            fault = next((f for f in self._faults if f.matches(verb, resource.plural, name)), None)
            if fault is None:
                return request
            fault.times -= 1
            if fault.times <= 0:
                self._faults.remove(fault)
            request.error = fault.error
            if fault.retried_after is None:
                raise fault.error
            await asyncio.sleep(fault.retried_after)

    def _key(self, resource: Resource, namespace: str | None, name: str) -> Key:
        if resource.namespaced and not namespace:
            raise status_error(400, "BadRequest", f"{resource.plural} is namespaced; no namespace given")
        return (resource.group, resource.plural, (namespace or "") if resource.namespaced else "", name)

    def _stored(self, key: Key, resource: Resource, name: str) -> Object:
        obj = self.objects.get(key)
        if obj is None:
            raise status_error(404, "NotFound", f"{resource.plural} {name!r} not found")
        return obj

    def _changed(self, key: Key, kind: str, obj: Object) -> str:
        """A change the watches are told of: ``obj`` is given a new resourceVersion."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._changes.append((self._rv, key, kind, copy.deepcopy(obj)))
        self._news.set()
        self._news = asyncio.Event()
        return str(self._rv)

    def _first_after(self, rv: int) -> int:
        """The index of the first change newer than ``rv``."""
        lo, hi = 0, len(self._changes)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._changes[mid][0] <= rv:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _create(self, resource: Resource, body: Object, namespace: str | None) -> Object:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        ns = (namespace or meta.get("namespace")) if resource.namespaced else None
        name = meta.get("name") or (f"{meta['generateName']}{next(self._uids):05d}" if meta.get("generateName")
                                    else None)
        if not name:
            raise status_error(422, "Invalid", "metadata.name or generateName is required")
        key = self._key(resource, ns, name)
        if key in self.objects:
            raise status_error(409, "AlreadyExists", f"{resource.plural} {name!r} already exists")
        meta.update(name=name, uid=f"uid-{next(self._uids)}", generation=1,
                    creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        if ns:
            meta["namespace"] = ns
        self.objects[key] = obj
        self._changed(key, "ADDED", obj)
        return copy.deepcopy(obj)

    async def _patch(self, verb: str, resource: Resource, name: str, patch: Body, namespace: str | None,
                     patch_type: PatchType) -> Object:
        request = await self._begin(verb, resource, namespace, name, patch)
        try:
            if patch_type is not PatchType.MERGE or not isinstance(patch, dict):
                raise NotImplementedError(f"the fake takes merge patches only, not {patch_type}")
            if verb == "patch_status" and resource.plural in self.without_status:  # (as kube-apiserver answers)
                raise status_error(404, "NotFound", f'{resource.plural}.{resource.group} "{name}" not found')
            key = self._key(resource, namespace, name)
            old = self._stored(key, resource, name)
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and str(wanted) != old["metadata"]["resourceVersion"]:
                raise status_error(409, "Conflict", f"the object has been modified; resourceVersion is "
                                   f"{old['metadata']['resourceVersion']}, not {wanted}")
        except KubeError as e:
            request.error = e
            raise
        # A status patch changes the status only; a patch of the object never its status
        # (but where the CRD has no status subresource).
        if verb == "patch_status":
            change: Object = {"status": patch["status"]} if "status" in patch else {}
        else:
            change = {k: v for k, v in patch.items() if k != "status" or resource.plural in self.without_status}
            if isinstance(change.get("metadata"), dict):  # (a precondition, and what cannot change)
                change["metadata"] = {k: v for k, v in change["metadata"].items()
                                      if k not in ("resourceVersion", "uid", "name", "namespace")}
        new: Object = copy.deepcopy(merge_patch(old, change))
        if new != old:
            if new.get("spec") != old.get("spec"):
                new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1
            self.objects[key] = new
            self._changed(key, "MODIFIED", new)
        request.resource_version = new["metadata"]["resourceVersion"]
        return copy.deepcopy(new)

    @staticmethod
    def _selects(resource: Resource, namespace: str | None, label_selector: str | None,
                 field_selector: str | None, key: Key, obj: Object) -> bool:
        if key[:2] != (resource.group, resource.plural) or (namespace and key[2] != namespace):
            return False
        labels = (obj.get("metadata") or {}).get("labels") or {}
        fields = {"metadata.name": key[3], "metadata.namespace": key[2]}
        return all(_matches(term, labels) for term in (label_selector or "").split(",") if term) and \
            all(_matches(term, fields) for term in (field_selector or "").split(",") if term)


def _matches(term: str, values: dict[str, str]) -> bool:
    """One term of a selector: k=v, k==v, k!=v, k, !k (set-based ones are not taken)."""
    if " in " in term or " notin " in term or "(" in term:
        raise NotImplementedError(f"the fake takes equality selectors only, not {term!r}")
    if "!=" in term:
        k, v = term.split("!=", 1)
        return values.get(k.strip()) != v.strip()
    if "=" in term:
        k, v = term.replace("==", "=").split("=", 1)
        return values.get(k.strip()) == v.strip()
    term = term.strip()
    return term[1:] not in values if term.startswith("!") else term in values


class Clock:
    """A clock that moves when a test says so."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def shared_on(fake: FakeKube, clock: Clock | None = None, config: ControllerConfig | None = None) -> Shared:
    """What the parts share, made as controller.py makes it, on the fake (informers not started)."""
    return Shared(fake, config or ControllerConfig(), Metrics(), clock or Clock())


def _conforms(fake: FakeKube) -> KubeAPI:
    """Never called: mypy checks here that the fake meets the Protocol."""
    return fake
