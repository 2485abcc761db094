"""Test controls: make the server misbehave the way real API servers do, on purpose.

Clients must survive 500s, 429s with Retry-After, write conflicts, dropped watches,
compacted history (410 Gone) and a server that stops answering for a while. Tests
drive these from Python (`server.controls`) or over HTTP under `/_test/`, a prefix
no Kubernetes client ever requests, behind the same bearer token; the HTTP routes are
served only by a server started with `test_controls=True` (`--test-controls`).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from koordqueue.apiserver import errors
from koordqueue.apiserver.registry import ResourceType
from koordqueue.apiserver.store import Store
from koordqueue.apiserver.watch import WatchHub

PREFIX = "/_test"
INJECTABLE = (409, 429, 500)


@dataclass(frozen=True, slots=True)
class Access:
    """One kind of request a user made, as RBAC sees it."""

    verb: str
    group: str
    resource: str
    subresource: str = ""


@dataclass
class ErrorRule:
    code: int
    rate: float = 1.0
    verbs: frozenset[str] | None = None  # get, list, watch, create, update, patch, delete, deletecollection
    resources: frozenset[str] | None = None  # plural ("pods") or plural.group ("queues.scheduling.x-k8s.io")
    remaining: int | None = None  # fire this many times, then retire; None: forever
    retry_after: int = 1

    def applies(self, verb: str, rt: ResourceType) -> bool:
        if self.verbs is not None and verb not in self.verbs:
            return False
        if self.resources is not None and rt.plural not in self.resources and \
                errors.qualified_resource(rt) not in self.resources:
            return False
        return True


class Controls:
    def __init__(self, store: Store, hub: WatchHub, seed: int | None = None) -> None:
        self._store = store
        self._hub = hub
        self._random = random.Random(seed)
        self._rules: list[ErrorRule] = []
        self._running = asyncio.Event()
        self._running.set()
        self.bookmark_interval = 5.0  # seconds between BOOKMARK events on watches that allow them
        self._allowed: dict[str, set[Access]] = {}
        self._denied: dict[str, set[Access]] = {}
        self._streamed: dict[str, set[Access]] = {}
        self._counts: dict[str, Counter[Access]] = {}  # allowed requests per user, for benchmarks

    # --- who asked for what ------------------------------------------------------------
    def record(self, user: str, access: Access, allowed: bool) -> None:
        (self._allowed if allowed else self._denied).setdefault(user, set()).add(access)
        if allowed:
            self._counts.setdefault(user, Counter())[access] += 1

    def request_counts(self, user: str) -> dict[Access, int]:
        """How many resource requests of each kind a user was allowed (a watch counts once)."""
        return dict(self._counts.get(user, {}))

    def requests_by(self, user: str) -> set[Access]:
        """The (verb, group, resource, subresource) a user was allowed, e.g.
        "system:serviceaccount:koord-queue:koord-queue-controller": to hold against its ClusterRole."""
        return set(self._allowed.get(user, ()))

    def streamed_by(self, user: str) -> set[Access]:
        """The lists a user took as streaming lists (a watch with sendInitialEvents, authorized
        as the watch it is): each as the list Access it reads what a list reads for. Its list
        grant is what a server without streaming lists is listed by pages with."""
        return set(self._streamed.get(user, ()))

    def record_streamed(self, user: str, access: Access) -> None:
        self._streamed.setdefault(user, set()).add(access)

    def denied_to(self, user: str) -> set[Access]:
        """What a user asked for and was refused (403)."""
        return set(self._denied.get(user, ()))

    # --- error injection ---------------------------------------------------------------
    def inject_errors(
        self, code: int, rate: float = 1.0, verbs: set[str] | None = None, resources: set[str] | None = None,
        count: int | None = None, retry_after: int = 1,
    ) -> ErrorRule:
        """Fail a fraction `rate` of matching API requests with `code` (409, 429 or 500)."""
        if code not in INJECTABLE:
            raise ValueError(f"can inject only {INJECTABLE}, not {code}")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], not {rate}")
        rule = ErrorRule(code, rate, frozenset(verbs) if verbs else None, frozenset(resources) if resources else None,
                         count, retry_after)
        self._rules.append(rule)
        return rule

    def clear_errors(self) -> None:
        self._rules.clear()

    def check(self, verb: str, rt: ResourceType, name: str) -> None:
        """Raise the injected error for this request, if a rule fires."""
        for rule in self._rules:
            if not rule.applies(verb, rt) or self._random.random() >= rule.rate:
                continue
            if rule.remaining is not None:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._rules.remove(rule)
            if rule.code == 429:
                raise errors.too_many_requests(rule.retry_after)
            if rule.code == 409:
                raise errors.conflict(rt, name, errors.STALE_OBJECT)
            raise errors.internal("injected by the test controls")

    # --- watches and history -------------------------------------------------------------
    def drop_watches(self) -> int:
        """End every open watch stream, as an API server restart or a load balancer does."""
        return self._hub.close_all()

    def compact(self) -> int:
        """Forget the change history: watches and list continues from before now get 410 Gone."""
        self._store.compact()
        return self._store.rv

    # --- pause ---------------------------------------------------------------------------
    def pause(self) -> None:
        """Hold every API request (not `/_test/`) until `resume()`."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    async def wait_running(self) -> None:
        await self._running.wait()

    # --- HTTP ----------------------------------------------------------------------------
    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(f"{PREFIX}/errors", self._http_inject)
        app.router.add_delete(f"{PREFIX}/errors", self._http_clear)
        app.router.add_post(f"{PREFIX}/drop-watches", self._http_drop)
        app.router.add_post(f"{PREFIX}/compact", self._http_compact)
        app.router.add_post(f"{PREFIX}/pause", self._http_pause)
        app.router.add_post(f"{PREFIX}/resume", self._http_resume)
        app.router.add_post(f"{PREFIX}/bookmarks", self._http_bookmarks)
        app.router.add_get(f"{PREFIX}/state", self._http_state)
        app.router.add_get(f"{PREFIX}/requests", self._http_requests)

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as e:
            raise errors.bad_request(f"invalid JSON: {e}") from None
        if not isinstance(body, dict):
            raise errors.bad_request("body must be a JSON object")
        return body

    async def _http_inject(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        try:
            self.inject_errors(
                int(body.get("code", 500)), float(body.get("rate", 1.0)),
                set(body["verbs"]) if body.get("verbs") else None,
                set(body["resources"]) if body.get("resources") else None,
                int(body["count"]) if body.get("count") is not None else None,
                int(body.get("retryAfter", 1)),
            )
        except (TypeError, ValueError) as e:
            raise errors.bad_request(str(e)) from None
        return _json({"rules": len(self._rules)}, 201)

    async def _http_clear(self, request: web.Request) -> web.Response:
        self.clear_errors()
        return _json({"rules": 0})

    async def _http_drop(self, request: web.Request) -> web.Response:
        return _json({"dropped": self.drop_watches()})

    async def _http_compact(self, request: web.Request) -> web.Response:
        return _json({"resourceVersion": str(self.compact())})

    async def _http_pause(self, request: web.Request) -> web.Response:
        self.pause()
        return _json({"paused": True})

    async def _http_resume(self, request: web.Request) -> web.Response:
        self.resume()
        return _json({"paused": False})

    async def _http_bookmarks(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        try:
            interval = float(body["interval"])
        except (KeyError, TypeError, ValueError):
            raise errors.bad_request("interval (seconds) is required") from None
        if interval <= 0:
            raise errors.bad_request("interval must be positive")
        self.bookmark_interval = interval
        return _json({"interval": interval})

    async def _http_state(self, request: web.Request) -> web.Response:
        return _json({
            "paused": self.paused,
            "rules": [{"code": r.code, "rate": r.rate, "remaining": r.remaining} for r in self._rules],
            "watches": self._hub.count(),
            "resourceVersion": str(self._store.rv),
            "compactedResourceVersion": str(self._store.compacted_rv),
            "bookmarkInterval": self.bookmark_interval,
        })


    async def _http_requests(self, request: web.Request) -> web.Response:
        """`GET /_test/requests?user=NAME`: what the user was allowed and refused, and how often."""
        user = request.query.get("user")
        if not user:
            raise errors.bad_request("the user query parameter is required")

        def rows(accesses: set[Access]) -> list[dict[str, str]]:
            return [{"verb": a.verb, "group": a.group, "resource": a.resource, "subresource": a.subresource}
                    for a in _sorted(accesses)]

        counts = [{**row, "count": self._counts[user][access]}
                  for row, access in zip(rows(self.requests_by(user)), _sorted(self.requests_by(user)), strict=True)]
        return _json({"user": user, "allowed": rows(self.requests_by(user)), "denied": rows(self.denied_to(user)),
                      "counts": counts})


def _sorted(accesses: set[Access]) -> list[Access]:
    return sorted(accesses, key=lambda a: (a.group, a.resource, a.subresource, a.verb))


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
