"""The web dashboard: one page, the JSON it is drawn from, and a live stream of it.

The page (koordqueue/dashboard/static, plain HTML/CSS/JS, no build step and nothing
from the network) draws `/api/overview`, the same data `koord-queue status` prints,
and asks `/api/explain/{namespace}/{name}` why a unit waits, as `koord-queue explain`
does. `POST /api/dry-run` (the "Will it run?" panel) answers for a pasted job manifest what
`koord-queue explain -f` does (controller/dryrun.py), from the leader's live state and
without creating anything. `/api/stream` sends the overview as server-sent events about once a second.

Only the leader holds the engine: a follower (or a leader still loading the cluster)
answers 503 with a message in words, so nobody reads stale numbers as the truth.

On loopback (the default; `koord-queue up`, `kubectl port-forward`) anyone who can reach
it is the machine's user and no token is asked. Bound anywhere else (the chart's
`controller.dashboard.expose`), every request brings a bearer token, in an Authorization
header or in the session cookie the login form sets: a TokenReview says who it is, a
SubjectAccessReview whether they may `get queues.visibility.koord-queue.x-k8s.io` (who may
read the visibility API may open the dashboard), and the units shown are those of the
namespaces where they may `list queueunits`, as the visibility API shows them. Event
streams are capped (`max_streams`, and a quarter of them for one user, so that one tenant
cannot take them all): one more is answered 429, and the page retries. A dry run answers
only for a namespace where the caller may create that kind of job or list QueueUnits
(else 403); at most MAX_DRY_RUNS run at once (one more: 429).
"""

from __future__ import annotations

import asyncio
import html
import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from koordqueue import aio
from koordqueue.api import constants as c
from koordqueue.controller.access import AccessReviewer, Caller
from koordqueue.controller.controller import Controller
from koordqueue.controller.dryrun import MAX_MANIFEST_BYTES, DryRunError, parse_job
from koordqueue.jobs import kind_named

STATIC = Path(__file__).resolve().parent.parent / "dashboard" / "static"
STREAM_INTERVAL = 1.0  # seconds between two overviews on the stream
OVERVIEW_MIN_AGE = 1.0  # an overview this fresh is served again instead of built anew...
OVERVIEW_BUDGET = 0.1  # ...and, with a long queue, building it takes at most this share of the loop
STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".html": "text/html"}
DEFAULT_MAX_STREAMS = 16  # event streams open at once; one more is answered 429
STREAM_RETRY_SECONDS = 5
SESSION_COOKIE = "koord-queue-dashboard"
SESSION_SECONDS = 8 * 3600  # a login lasts this long (its token is reviewed again every few seconds)
MAX_SESSIONS = 10_000
CALLER = web.RequestKey("caller", Caller)
MAX_DRY_RUNS = 2  # dry runs at once (each clones the engine and plays the forecast: CPU)


def is_loopback(host: str) -> bool:
    """Whether a bind address is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class NotServing(Exception):
    """This replica cannot answer with current data; the message says why."""


class Dashboard:
    """Serves the dashboard of one replica; `controller_of()` is the controller while leading."""

    def __init__(self, controller_of: Callable[[], Controller | None], host: str, port: int,
                 identity: str = "", access: AccessReviewer | None = None,
                 max_streams: int = DEFAULT_MAX_STREAMS) -> None:
        """``access``: how tokens and grants are reviewed; required unless ``host`` is loopback
        (there, None: no token is asked)."""
        if access is None and not is_loopback(host):
            raise ValueError(f"the dashboard on {host} (not loopback) needs token review: pass access")
        self.controller_of = controller_of
        self.host = host
        self.requested_port = port
        self.identity = identity
        self.access = access
        self.max_streams = max_streams
        self.port = 0  # the port bound (port 0 asks for any free one)
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._cached: tuple[float, bytes] | None = None
        self._max_age = OVERVIEW_MIN_AGE
        self._streams = 0
        self._streams_of: dict[str, int] = {}  # open streams per user (when tokens are asked)
        self._sessions: dict[str, tuple[float, str]] = {}  # session id -> (expiry, bearer token)
        self._dry_runs = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._authenticate] if self.access is not None else [])
        app.router.add_get("/login", self._login_page)
        app.router.add_post("/login", self._login)
        app.router.add_get("/", self._page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/overview", self._overview)
        app.router.add_get("/api/explain/{namespace}/{name}", self._explain)
        app.router.add_get("/api/stream", self._stream)
        app.router.add_post("/api/dry-run", self._dry_run)
        return app

    async def start(self) -> None:
        self._closing.clear()
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.requested_port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        self._closing.set()  # open streams end at their next tick
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- data -------------------------------------------------------------------------

    def _leader(self) -> Controller:
        controller = self.controller_of()
        who = f" ({self.identity})" if self.identity else ""
        if controller is None:
            raise NotServing(f"This replica{who} is not the leader, so it holds no current queue state. "
                             "Open the dashboard of the leading replica (the holder of the controller's Lease).")
        if not controller.sync_done:
            raise NotServing(f"This replica{who} has just become the leader and is still loading the "
                             "cluster's objects; the dashboard fills in a moment.")
        return controller

    def overview_bytes(self) -> bytes:
        """The overview as JSON, built once for everyone who asks within its age.

        Building it runs on the controller's event loop (100k pending units take about
        0.2 s), so a slow build is kept for longer: the scheduler keeps the loop.
        """
        controller = self._leader()
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] >= self._max_age:
            body = orjson.dumps(controller.overview())
            built = time.monotonic()
            self._max_age = max(OVERVIEW_MIN_AGE, (built - now) / OVERVIEW_BUDGET)
            self._cached = (built, body)
        return self._cached[1]

    # --- handlers ---------------------------------------------------------------------

    async def _page(self, _: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def _static(self, request: web.Request) -> web.StreamResponse:
        path = STATIC / request.match_info["name"]
        if path.suffix not in STATIC_TYPES or path.parent != STATIC or not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path, headers={"Content-Type": STATIC_TYPES[path.suffix],
                                               "Cache-Control": "no-cache"})

    async def _overview(self, request: web.Request) -> web.Response:
        try:
            return _json_bytes(await self._visible_overview(request))
        except NotServing as e:
            return _unavailable(str(e))

    async def _explain(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        key = f"{namespace}/{name}"
        caller = request.get(CALLER)
        if caller is not None and self.access is not None and not await self.access.allowed(
                caller, "get", c.QUEUE_GROUP, c.QUEUE_UNIT_PLURAL, namespace=namespace, name=name):
            return _json({"error": "forbidden", "message": f"{caller.user} may not read QueueUnit {key}."},
                         status=403)
        try:
            why = self._leader().explain(key)
        except NotServing as e:
            return _unavailable(str(e))
        if why is None:
            return _json({"error": "not-found", "message": f"There is no QueueUnit {key} (it may have ended "
                          "and been deleted with its job)."}, status=404)
        return _json(why)

    async def _dry_run(self, request: web.Request) -> web.Response:
        """The body: one job's YAML (or JSON); ``?namespace=`` overrides the manifest's. 400 with
        the reason when it cannot be read or queued, 403 when the caller may neither create
        that kind of job nor list QueueUnits in its namespace."""
        text = await _read_capped(request, MAX_MANIFEST_BYTES)
        if text is None:
            return _json({"error": "too-large", "message": f"The manifest is over {MAX_MANIFEST_BYTES} bytes, "
                          "the most a dry run reads."}, status=413)
        try:
            obj, kind = parse_job(text, request.query.get("namespace") or None, "the manifest")
        except DryRunError as e:
            return _json({"error": "bad-manifest", "message": str(e)}, status=400)
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        caller = request.get(CALLER)
        if caller is not None and self.access is not None:
            job_kind = kind_named(kind)
            if not (await self.access.allowed(caller, "create", job_kind.group, job_kind.plural, namespace=namespace)
                    or await self.access.allowed(caller, "list", c.QUEUE_GROUP, c.QUEUE_UNIT_PLURAL,
                                                 namespace=namespace)):
                return _json({"error": "forbidden", "message": f"{caller.user} may neither create "
                              f"{job_kind.plural}.{job_kind.group} nor list QueueUnits in namespace "
                              f"{namespace}, so the dashboard does not say what a job there would meet."},
                             status=403)
        if self._dry_runs >= MAX_DRY_RUNS:
            return _json({"error": "busy", "message": f"{self._dry_runs} dry runs are under way, the most at "
                          "once; try again in a moment."}, status=429, headers={"Retry-After": "1"})
        self._dry_runs += 1
        try:
            why = await self._leader().dry_run(obj, kind, f"{kind}/{namespace}/{name}")
        except NotServing as e:
            return _unavailable(str(e))
        except DryRunError as e:
            return _json({"error": "bad-manifest", "message": str(e)}, status=400)
        finally:
            self._dry_runs -= 1
        return _json(why)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: `overview` with the data, or `unavailable` with the reason.

        Always 200 with an event stream, even when not leading: a browser's EventSource
        treats any other answer as a failed connection and stops listening.
        """
        user = caller.user if (caller := request.get(CALLER)) is not None else ""
        mine = self._streams_of.get(user, 0)
        if self._streams >= self.max_streams or (user and mine >= max(1, self.max_streams // 4)):
            whose = "" if self._streams >= self.max_streams else f" of {user}'s"
            return _json({"error": "too-many-streams", "message": f"{mine if whose else self._streams} event "
                          f"streams{whose} are open, the most this dashboard serves; try again in "
                          f"{STREAM_RETRY_SECONDS} s."}, status=429, headers={"Retry-After": str(STREAM_RETRY_SECONDS)})
        self._streams += 1
        self._streams_of[user] = mine + 1
        try:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await response.prepare(request)
            while not self._closing.is_set():
                try:
                    event, data = b"overview", await self._visible_overview(request)
                except NotServing as e:
                    event, data = b"unavailable", orjson.dumps({"error": "unavailable", "message": str(e)})
                try:
                    await response.write(b"event: " + event + b"\ndata: " + data + b"\n\n")
                except (ConnectionResetError, RuntimeError):
                    break  # the browser went away
                await aio.wait_event(self._closing, STREAM_INTERVAL)
            return response
        finally:
            self._streams -= 1
            self._streams_of[user] -= 1
            if not self._streams_of[user]:
                del self._streams_of[user]

    async def _visible_overview(self, request: web.Request) -> bytes:
        """The overview, with only the units of namespaces the caller may list QueueUnits in."""
        body = self.overview_bytes()
        caller = request.get(CALLER)
        if caller is None or self.access is None:
            return body
        doc = orjson.loads(body)
        allowed = await self.access.unit_namespaces(caller, unit_namespaces(doc))
        return body if allowed is None else orjson.dumps(only_namespaces(doc, allowed))

    # --- authentication (not on loopback) ------------------------------------------------

    @web.middleware
    async def _authenticate(self, request: web.Request,
                            handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.path == "/login" or request.path.startswith("/static/"):
            return await handler(request)  # the form, and the page's code (no data in either)
        token = self._token(request)
        if token is None:
            return self._refused(request, 401, "A bearer token is needed: log in with one (kubectl create token ...).")
        caller, why = await self._review(token)
        if caller is None:
            return self._refused(request, 401 if why == "unauthorized" else 403, why)
        request[CALLER] = caller
        return await handler(request)

    def _token(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and header[7:].strip():
            return header[7:].strip()
        session = self._sessions.get(request.cookies.get(SESSION_COOKIE, ""))
        if session is None or session[0] < time.monotonic():
            return None
        return session[1]

    async def _review(self, token: str) -> tuple[Caller | None, str]:
        """(who the token is, "") if they may open the dashboard; else (None, why not)."""
        assert self.access is not None
        caller = await self.access.authenticate(token)
        if caller is None:
            return None, "unauthorized"
        if not await self.access.allowed(caller, "get", c.VISIBILITY_GROUP, "queues"):
            return None, (f"{caller.user} may not open the dashboard: it needs get on "
                          f"queues.{c.VISIBILITY_GROUP} (as the visibility API does).")
        return caller, ""

    def _refused(self, request: web.Request, status: int, message: str) -> web.Response:
        if request.path.startswith("/api/"):
            return _json({"error": "unauthorized" if status == 401 else "forbidden", "message": message}, status)
        return _login_form(message if status == 403 else "", status)

    async def _login_page(self, _: web.Request) -> web.Response:
        return _login_form("", 200)

    async def _login(self, request: web.Request) -> web.Response:
        """The form's token, reviewed; a session cookie (HttpOnly, SameSite=Strict) when accepted."""
        if self.access is None:
            raise web.HTTPSeeOther("/")
        token = str((await request.post()).get("token", "")).strip()
        caller, why = await self._review(token) if token else (None, "unauthorized")
        if caller is None:
            return _login_form("That token was not accepted." if why == "unauthorized" else why,
                               401 if why == "unauthorized" else 403)
        now = time.monotonic()
        self._sessions = {k: v for k, v in self._sessions.items() if v[0] > now}
        if len(self._sessions) >= MAX_SESSIONS:
            self._sessions.clear()
        session = secrets.token_urlsafe(32)
        self._sessions[session] = (now + SESSION_SECONDS, token)
        response = web.Response(status=303, headers={"Location": "/", "Cache-Control": "no-store"})
        response.set_cookie(SESSION_COOKIE, session, max_age=SESSION_SECONDS, httponly=True, samesite="Strict",
                            path="/")
        return response


def unit_namespaces(doc: dict[str, Any]) -> set[str]:
    """The namespaces of the units an overview names."""
    keys = [p["unit"] for q in doc.get("queues") or ()
            for p in [*(q.get("pending") or ()), *(q.get("backing_off") or ()), *(q.get("running") or ())]]
    keys += [r["unit"] for r in doc.get("recent") or () if r.get("unit")]
    return {str(k).partition("/")[0] for k in keys}


def only_namespaces(doc: dict[str, Any], allowed: set[str]) -> dict[str, Any]:
    """The overview with only the units of ``allowed`` namespaces (queues keep their counts)."""
    def shown(unit: object) -> bool:
        return str(unit).partition("/")[0] in allowed

    for queue in doc.get("queues") or ():
        queue["pending"] = [p for p in queue.get("pending") or () if shown(p["unit"])]
        queue["backing_off"] = [b for b in queue.get("backing_off") or () if shown(b["unit"])]
        queue["running"] = [r for r in queue.get("running") or () if shown(r["unit"])]  # (the forecast's timeline)
    doc["recent"] = [r for r in doc.get("recent") or () if r.get("unit") and shown(r["unit"])]
    return doc


LOGIN_FORM = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Koord-Queue dashboard: log in</title>
<link rel="icon" href="data:,"><link rel="stylesheet" href="static/dashboard.css"></head>
<body><main><h1>Koord-Queue</h1>
<form method="post" action="login">
<p><label for="token">Bearer token</label> <input id="token" name="token" type="password" autocomplete="off"
 required> <button type="submit">Log in</button></p>
<p class="muted">A token of yours, e.g. <code>kubectl create token NAME -n NAMESPACE</code>: you see the units of
the namespaces where you may list QueueUnits.</p>
{message}
</form></main></body></html>
"""


def _login_form(message: str, status: int) -> web.Response:
    shown = f'<p class="warning" role="alert">{html.escape(message)}</p>' if message else ""
    return web.Response(text=LOGIN_FORM.format(message=shown), status=status, content_type="text/html",
                        headers={"Cache-Control": "no-store"})


async def _read_capped(request: web.Request, limit: int) -> str | None:
    """The body as text, None when it is over ``limit`` bytes (read no further than that)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    body = bytearray()
    while chunk := await request.content.read(limit + 1 - len(body)):
        body += chunk
        if len(body) > limit:
            return None
    return body.decode("utf-8", "replace")


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return _json_bytes(orjson.dumps(body), status, headers)


def _json_bytes(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json",
                        headers={"Cache-Control": "no-store", **(headers or {})})


def _unavailable(message: str) -> web.Response:
    return _json({"error": "unavailable", "message": message}, status=503)
