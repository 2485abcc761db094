"""The event loop every koord-queue process runs on: uvloop.

libuv's loop, and its TLS transport above all, costs less CPU per request than
asyncio's own loop, whose TLS layer is written in Python. Every request the
controller makes pays it twice (once in the API server), so the choice is made here,
once, for every entry point (see bench/RESULTS.md for the figures).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a uvloop loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A loop for a thread of its own (the test server's)."""
    return uvloop.new_event_loop()
