"""The web dashboard: one page, the JSON it is drawn from, and a live stream of it.

The page (koordqueue/dashboard/static, plain HTML/CSS/JS, no build step and nothing
from the network) draws `/api/overview`, the same data `koord-queue status` prints,
and asks `/api/explain/{namespace}/{name}` why a unit waits, as `koord-queue explain`
does. `/api/stream` sends the overview as server-sent events about once a second.

Only the leader holds the engine: a follower (or a leader still loading the cluster)
answers 503 with a message in words, so nobody reads stale numbers as the truth.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from koordqueue import aio
from koordqueue.controller.controller import Controller

STATIC = Path(__file__).resolve().parent.parent / "dashboard" / "static"
STREAM_INTERVAL = 1.0  # seconds between two overviews on the stream
OVERVIEW_MIN_AGE = 1.0  # an overview this fresh is served again instead of built anew...
OVERVIEW_BUDGET = 0.1  # ...and, with a long queue, building it takes at most this share of the loop
STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".html": "text/html"}


class NotServing(Exception):
    """This replica cannot answer with current data; the message says why."""


class Dashboard:
    """Serves the dashboard of one replica; `controller_of()` is the controller while leading."""

    def __init__(self, controller_of: Callable[[], Controller | None], host: str, port: int,
                 identity: str = "") -> None:
        self.controller_of = controller_of
        self.host = host
        self.requested_port = port
        self.identity = identity
        self.port = 0  # the port bound (port 0 asks for any free one)
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._cached: tuple[float, bytes] | None = None
        self._max_age = OVERVIEW_MIN_AGE

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/overview", self._overview)
        app.router.add_get("/api/explain/{namespace}/{name}", self._explain)
        app.router.add_get("/api/stream", self._stream)
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

    async def _overview(self, _: web.Request) -> web.Response:
        try:
            return _json_bytes(self.overview_bytes())
        except NotServing as e:
            return _unavailable(str(e))

    async def _explain(self, request: web.Request) -> web.Response:
        key = f"{request.match_info['namespace']}/{request.match_info['name']}"
        try:
            why = self._leader().explain(key)
        except NotServing as e:
            return _unavailable(str(e))
        if why is None:
            return _json({"error": "not-found", "message": f"There is no QueueUnit {key} (it may have ended "
                          "and been deleted with its job)."}, status=404)
        return _json(why)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: `overview` with the data, or `unavailable` with the reason.

        Always 200 with an event stream, even when not leading: a browser's EventSource
        treats any other answer as a failed connection and stops listening.
        """
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        while not self._closing.is_set():
            try:
                event, data = b"overview", self.overview_bytes()
            except NotServing as e:
                event, data = b"unavailable", orjson.dumps({"error": "unavailable", "message": str(e)})
            try:
                await response.write(b"event: " + event + b"\ndata: " + data + b"\n\n")
            except (ConnectionResetError, RuntimeError):
                break  # the browser went away
            await aio.wait_event(self._closing, STREAM_INTERVAL)
        return response


def _json(body: Any, status: int = 200) -> web.Response:
    return _json_bytes(orjson.dumps(body), status)


def _json_bytes(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json",
                        headers={"Cache-Control": "no-store"})


def _unavailable(message: str) -> web.Response:
    return _json({"error": "unavailable", "message": message}, status=503)
