"""Helpers to run the embedded API server inside tests, from any test directory.

`running_apiserver` runs it on the caller's event loop (async tests). `ThreadedAPIServer`
runs it on its own loop in a thread, for synchronous tests and for tests that block
(subprocesses such as kubectl), so a blocked test never blocks the server.
`APIClient` speaks plain HTTP(S) to it, so tests see exactly what the wire carries.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson

from koordqueue import aio
from koordqueue.apiserver.server import APIServer

T = TypeVar("T")


@asynccontextmanager
async def running_apiserver(state_dir: Path, **kwargs: Any) -> AsyncIterator[APIServer]:
    server = APIServer(state_dir, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class ThreadedAPIServer:
    """`with ThreadedAPIServer(dir) as s:` — the server on a private loop; `s.call(fn)` runs fn there."""

    def __init__(self, state_dir: Path, **kwargs: Any) -> None:
        self.server = APIServer(state_dir, **kwargs)
        self._loop = aio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="apiserver", daemon=True)

    def __enter__(self) -> ThreadedAPIServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn()` on the server's loop (e.g. `s.call(s.server.controls.compact)`) and return its result."""
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> str:
        return self.server.token

    @property
    def kubeconfig_path(self) -> Path:
        return self.server.kubeconfig_path


class APIClient:
    """Plain HTTP to the server for tests: status codes and bodies as the wire has them, no client library."""

    def __init__(self, server: APIServer, token: str | None = None) -> None:
        self.server = server
        self.token = server.token if token is None else token
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> APIClient:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.server.client_ssl_context()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    def _headers(self, headers: dict[str, str] | None, content_type: str | None) -> dict[str, str]:
        out = {"Accept": "application/json"}
        if self.token:
            out["Authorization"] = f"Bearer {self.token}"
        if content_type:
            out["Content-Type"] = content_type
        out.update(headers or {})
        return out

    async def request(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
        content_type: str | None = None, headers: dict[str, str] | None = None, params: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """(status, decoded JSON body or text, response headers)."""
        assert self._session is not None, "use `async with APIClient(server) as api`"
        data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        if data is not None and content_type is None:
            content_type = "application/json"
        async with self._session.request(method, self.server.url + path, data=data, params=params,
                                         headers=self._headers(headers, content_type)) as resp:
            text = await resp.read()
            try:
                decoded: Any = orjson.loads(text) if text else None
            except orjson.JSONDecodeError:
                decoded = text.decode()
            return resp.status, decoded, dict(resp.headers)

    async def get(self, path: str, **kw: Any) -> tuple[int, Any, dict[str, str]]:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, dict[str, str]]:
        return await self.request("POST", path, body, **kw)

    async def put(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, dict[str, str]]:
        return await self.request("PUT", path, body, **kw)

    async def patch(self, path: str, body: Any, content_type: str = "application/merge-patch+json",
                    **kw: Any) -> tuple[int, Any, dict[str, str]]:
        return await self.request("PATCH", path, body, content_type=content_type, **kw)

    async def delete(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, dict[str, str]]:
        return await self.request("DELETE", path, body, **kw)

    async def watch(self, path: str, params: dict[str, str] | None = None,
                    until: Callable[[list[dict[str, Any]]], bool] | None = None,
                    timeout: float = 10.0) -> list[dict[str, Any]]:
        """Open a watch and collect its events until `until(events)` holds or the server ends the stream."""
        assert self._session is not None
        events: list[dict[str, Any]] = []
        query = {"watch": "true", **(params or {})}

        async def read() -> None:
            assert self._session is not None
            async with self._session.get(self.server.url + path, params=query,
                                         headers=self._headers(None, None)) as resp:
                assert resp.status == 200, await resp.text()
                async for line in resp.content:
                    if line.strip():
                        events.append(orjson.loads(line))
                        if until is not None and until(events):
                            return

        async with asyncio.timeout(timeout):
            await read()
        return events

    async def open_watch(self, path: str, params: dict[str, str] | None = None) -> WatchStream:
        """A watch to read from step by step (`await stream.next()`); close it with `await stream.close()`."""
        assert self._session is not None
        resp = await self._session.get(self.server.url + path, params={"watch": "true", **(params or {})},
                                       headers=self._headers(None, None))
        assert resp.status == 200, await resp.text()
        return WatchStream(resp)


class WatchStream:
    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp

    async def next(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """The next event, or None when the server ended the stream."""
        while True:
            async with asyncio.timeout(timeout):
                line = await self._resp.content.readline()
            if not line:
                return None
            if line.strip():
                return dict(orjson.loads(line))

    async def close(self) -> None:
        self._resp.close()


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0, interval: float = 0.02) -> None:
    """Wait until `await check()` is true (for what the server does asynchronously, like garbage collection)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)
