"""How every koord-queue process runs: on uvloop, with the garbage collector tuned.

libuv's loop, and its TLS transport above all, costs less CPU per request than
asyncio's own loop, whose TLS layer is written in Python. Every request the
controller makes pays it twice (once in the API server), so the choice is made here,
once, for every entry point (see bench/RESULTS.md for the figures).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


# Young-generation collections every 50,000 allocations instead of Python's 700.
#
# Our processes keep many long-lived objects: the API server's store and history, and the
# controller's informer caches. They also make millions of short-lived ones, such as the
# JSON of each request and watch event. At 700, short-lived objects were caught alive and
# promoted to the old generation. Its full collections then walked the whole heap:
# 0.3 s each, with the loop stopped, and some 15 % of each process's CPU in Kueue's
# baseline. Cyclic garbage is still collected, only in larger batches.
GC_THRESHOLDS = (50_000, 20, 100)


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a uvloop loop, with the collector tuned as above."""
    gc.set_threshold(*GC_THRESHOLDS)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A loop for a thread of its own (the test server's)."""
    return uvloop.new_event_loop()
