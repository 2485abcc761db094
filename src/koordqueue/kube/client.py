"""A small async Kubernetes REST client over aiohttp that speaks raw dicts.

Raw dicts (parsed by orjson) instead of generated model classes: the controller keeps
only small projections of 100k objects, so building full typed objects first would
cost time and memory for nothing. Every request goes through one token bucket
(qps/burst, as the chart configures) and one retry policy:
- 429 and failures to connect are retried for every verb (nothing was applied);
- 5xx and connections broken mid-request are retried only where repeating is
  harmless: reads, PUT, DELETE, merge and strategic patches, and creates with a fixed
  name. A repeat of a request that may already have been applied is flagged on the
  error it ends in (`ApiError.after_retry`), so an AlreadyExists after a retried
  create is not mistaken for someone else's object.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, NamedTuple

import aiohttp
import orjson
import yarl

from koordqueue.kube.config import ClusterConfig
from koordqueue.kube.errors import ConnectionFailed, error_from_status
from koordqueue.kube.ratelimit import TokenBucket, exponential_backoff

log = logging.getLogger(__name__)

Object = dict[str, Any]
Body = Object | list[Object]  # a JSON patch is a list of operations

RETRYABLE_5XX = frozenset({500, 502, 503, 504})
_PLAIN_PATH = re.compile(r"[A-Za-z0-9/._:-]*")
WATCH_READ_SLACK_SECONDS = 30.0  # a watch silent this long past its timeoutSeconds is dead


@dataclass(frozen=True, slots=True)
class Resource:
    """How a kind is addressed over REST: group, version, plural, and whether namespaced."""

    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool = True

    @classmethod
    def of(cls, api_version: str, plural: str, namespaced: bool = True) -> Resource:
        """From an object's apiVersion ("v1", "batch/v1") and the resource's plural."""
        group, _, version = api_version.rpartition("/")
        return cls(group, version, plural, namespaced)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path; a namespaced resource without a namespace means all namespaces."""
        if namespace and not self.namespaced:
            raise ValueError(f"{self.plural} is cluster-scoped; no namespace expected")
        if name and self.namespaced and not namespace:
            raise ValueError(f"{self.plural} is namespaced; a namespace is needed for {name!r}")
        parts = ["/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"]
        if namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


class PatchType(StrEnum):
    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"


class WatchEvent(NamedTuple):
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: Object


@dataclass(slots=True)
class ListResult:
    items: list[Object]
    resource_version: str
    continue_token: str | None = None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 6  # in all, the first included
    base_delay: float = 0.1
    max_delay: float = 5.0
    max_retry_after: float = 60.0  # never wait longer than this for a Retry-After


class KubeClient:
    """One aiohttp session to one API server; use as `async with KubeClient(cfg) as c`."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        qps: float = 50.0,
        burst: int = 100,
        retry: RetryPolicy | None = None,
        timeout: float = 30.0,
        user_agent: str = "koord-queue",
    ) -> None:
        self.config = config
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.user_agent = user_agent
        self.request_count: Counter[str] = Counter()  # HTTP requests sent, by verb, retries included
        self._bucket = TokenBucket(qps, burst)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeClient:
        connector = aiohttp.TCPConnector(limit=256, ssl=self.config.ssl_context or True)
        self._session = aiohttp.ClientSession(
            connector=connector, headers={"User-Agent": self.user_agent, "Accept": "application/json"}
        )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- reads ------------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Object:
        return await self._call("GET", "get", resource.path(namespace, name))

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
        """One page; pass the returned continue_token back for the next one."""
        params = _selectors(label_selector, field_selector)
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        body = await self._call("GET", "list", resource.path(namespace), params=params)
        meta = body.get("metadata") or {}
        items = body.get("items") or []
        # kube-apiserver leaves kind and apiVersion out of a built-in kind's items (a JobList's
        # Jobs), as every decoder of a typed list expects: put them back from the list's own.
        list_kind, api_version = str(body.get("kind") or ""), body.get("apiVersion")
        if list_kind.endswith("List") and api_version:
            for item in items:
                if "kind" not in item:
                    item["kind"] = list_kind[:-4]
                    item["apiVersion"] = item.get("apiVersion") or api_version
        return ListResult(
            items=items,
            resource_version=str(meta.get("resourceVersion") or ""),
            continue_token=meta.get("continue") or None,
        )

    async def list_all(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> ListResult:
        """Every page of a list; the resourceVersion is the snapshot all pages come from."""
        first = await self.list(
            resource, namespace=namespace, label_selector=label_selector,
            field_selector=field_selector, limit=page_size,
        )
        token = first.continue_token
        while token:
            page = await self.list(
                resource, namespace=namespace, label_selector=label_selector,
                field_selector=field_selector, limit=page_size, continue_token=token,
            )
            first.items.extend(page.items)
            token = page.continue_token
        first.continue_token = None
        return first

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
        """Events until the server ends the watch; ERROR events are raised (410 as `Gone`).

        A connection broken mid-stream raises `ConnectionFailed`; resume with a new watch
        from the last resourceVersion seen. ``send_initial_events``: a streaming list (the
        objects there are, as ADDED, then a BOOKMARK annotated INITIAL_EVENTS_END, then the
        changes), from a state at least as new as ``resource_version`` (none: the newest).
        """
        params = _selectors(label_selector, field_selector)
        params["watch"] = "true"
        if resource_version:
            params["resourceVersion"] = resource_version
        if send_initial_events:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if timeout_seconds:
            params["timeoutSeconds"] = str(timeout_seconds)
        read_timeout = timeout_seconds + WATCH_READ_SLACK_SECONDS if timeout_seconds else None
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=read_timeout)
        resp, _ = await self._send(
            "GET", "watch", resource.path(namespace), params=params, safe=True, stream=True, timeout=timeout
        )
        try:
            buf = bytearray()
            async for chunk in resp.content.iter_any():
                scan_from = len(buf)
                buf += chunk
                while (nl := buf.find(b"\n", scan_from)) >= 0:
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    scan_from = 0
                    if line.strip():
                        yield _watch_event(line)
            if buf.strip():
                yield _watch_event(bytes(buf))
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ConnectionFailed(f"watch of {resource.plural} broke: {e!r}") from e
        finally:
            resp.close()

    # --- writes -----------------------------------------------------------------------

    async def create(self, resource: Resource, body: Object, *, namespace: str | None = None,
                     field_validation: str | None = None) -> Object:
        """field_validation: the server's check of unknown fields, Strict (refused, as kubectl
        asks), Warn (the server's default) or Ignore."""
        meta = body.get("metadata") or {}
        ns = (namespace or meta.get("namespace")) if resource.namespaced else None
        # With generateName a repeated create would make a second object: only retry
        # what surely was not applied.
        safe = bool(meta.get("name"))
        params = {"fieldValidation": field_validation} if field_validation else None
        return await self._call("POST", "create", resource.path(ns), params=params, body=body, safe=safe)

    async def replace(self, resource: Resource, body: Object) -> Object:
        """PUT the whole object; with metadata.resourceVersion set, a stale one is a Conflict."""
        return await self._call("PUT", "update", self._object_path(resource, body), body=body)

    async def replace_status(self, resource: Resource, body: Object) -> Object:
        return await self._call("PUT", "update", self._object_path(resource, body, "status"), body=body)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Body,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
    ) -> Object:
        return await self._patch(resource.path(namespace, name), patch, patch_type)

    async def patch_status(
        self,
        resource: Resource,
        name: str,
        patch: Body,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
    ) -> Object:
        return await self._patch(resource.path(namespace, name, "status"), patch, patch_type)

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
        """Returns the object (when finalizers keep it) or a Status.

        propagation_policy: Orphan, Background or Foreground; preconditions:
        {"uid": ..., "resourceVersion": ...} so we delete only the object we saw.
        """
        options: Object = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        return await self._call("DELETE", "delete", resource.path(namespace, name), body=options)

    # --- plumbing ---------------------------------------------------------------------

    def _object_path(self, resource: Resource, body: Object, subresource: str | None = None) -> str:
        meta = body.get("metadata") or {}
        return resource.path(meta.get("namespace") if resource.namespaced else None, meta.get("name"), subresource)

    async def _patch(self, path: str, patch: Body, patch_type: PatchType) -> Object:
        # A JSON patch (add to a list, ...) may not be repeatable; merge patches are.
        safe = patch_type is not PatchType.JSON
        return await self._call("PATCH", "patch", path, body=patch, content_type=patch_type, safe=safe)

    async def _call(
        self,
        method: str,
        verb: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Body | None = None,
        content_type: str = "application/json",
        safe: bool = True,
    ) -> Object:
        _, data = await self._send(method, verb, path, params=params, body=body, content_type=content_type, safe=safe)
        result: Object = orjson.loads(data) if data else {}
        return result

    async def _send(
        self,
        method: str,
        verb: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Body | None = None,
        content_type: str = "application/json",
        safe: bool = True,
        stream: bool = False,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        """Send with rate limiting and retries. Returns the response and, unless
        streaming, its body; a streamed response is left open for the caller to close."""
        if self._session is None:
            raise RuntimeError("KubeClient is not open; use `async with KubeClient(...)`")
        # A path of plain characters (API names always are) needs no quoting: taken as encoded,
        # it is not parsed and normalized again at every request.
        url: str | yarl.URL = self.config.server + path
        if _PLAIN_PATH.fullmatch(path):
            url = yarl.URL(url, encoded=True)
        data = orjson.dumps(body) if body is not None else None
        timeout = timeout or aiohttp.ClientTimeout(total=self.timeout)
        attempt = 0
        maybe_applied = False  # an earlier attempt may have taken effect
        refreshed_auth = False
        while True:
            await self._bucket.acquire()
            self.request_count[verb] += 1
            headers = {"Content-Type": content_type} if data is not None else {}
            auth = await self.config.credentials.authorization()
            if auth:
                headers["Authorization"] = auth
            try:
                resp = await self._session.request(
                    method, url, params=params, data=data, headers=headers, timeout=timeout,
                    server_hostname=self.config.tls_server_name,
                )
            except aiohttp.ClientConnectorError as e:  # never reached the server
                attempt = await self._retry_or_raise(attempt, None, ConnectionFailed(f"{method} {path}: {e}"))
                continue
            except (aiohttp.ClientError, TimeoutError) as e:
                failure = ConnectionFailed(f"{method} {path}: {e!r}")
                if not safe:
                    raise failure from e
                maybe_applied = True
                attempt = await self._retry_or_raise(attempt, None, failure)
                continue
            if resp.status < 400 and stream:
                return resp, b""
            try:
                payload = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as e:
                failure = ConnectionFailed(f"{method} {path}: reading the answer: {e!r}")
                if not safe:
                    raise failure from e
                maybe_applied = True
                attempt = await self._retry_or_raise(attempt, None, failure)
                continue
            finally:
                resp.release()
            if resp.status < 400:
                return resp, payload
            error = error_from_status(resp.status, _json_or_none(payload), after_retry=maybe_applied)
            if resp.status == 401 and not refreshed_auth:  # a rotated token: reload once
                refreshed_auth = True
                self.config.credentials.invalidate()
                continue
            retryable = resp.status == 429 or (resp.status in RETRYABLE_5XX and safe)
            if not retryable:
                raise error
            if resp.status != 429:
                maybe_applied = True
            retry_after = _retry_after(resp.headers.get("Retry-After")) or error.retry_after
            attempt = await self._retry_or_raise(attempt, retry_after, error)

    async def _retry_or_raise(self, attempt: int, retry_after: float | None, error: Exception) -> int:
        """Sleep before the next attempt, or raise `error` when attempts are used up."""
        if attempt + 1 >= self.retry.attempts:
            raise error
        if retry_after is not None:
            delay = min(retry_after, self.retry.max_retry_after)
        else:
            delay = exponential_backoff(attempt, self.retry.base_delay, self.retry.max_delay, jitter=0.5)
        log.debug("retrying in %.2fs after %s", delay, error)
        await asyncio.sleep(delay)
        return attempt + 1


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


def _watch_event(line: bytes) -> WatchEvent:
    try:
        event = orjson.loads(line)
        kind, obj = event["type"], event["object"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as e:
        raise ConnectionFailed(f"malformed watch event: {line[:200]!r}") from e
    if kind == "ERROR":
        raise error_from_status(int(obj.get("code") or 500), obj)
    return WatchEvent(kind, obj)


def _json_or_none(data: bytes) -> Object | None:
    try:
        value = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _retry_after(header: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not used by Kubernetes)."""
    if not header:
        return None
    try:
        value = float(header)
    except ValueError:
        return None
    return value if value >= 0 else None

