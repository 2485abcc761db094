"""Helpers to run the embedded API server inside tests, from any test directory.

`running_apiserver` runs it on the caller's event loop (async tests). `ThreadedAPIServer`
runs it on its own loop in a thread, for synchronous tests and for tests that block
(subprocesses such as kubectl), so a blocked test never blocks the server.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from koordqueue.localcluster.server import APIServer

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
        self._loop = asyncio.new_event_loop()
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
