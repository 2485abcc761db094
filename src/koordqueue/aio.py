"""How every koord-queue process runs: on uvloop, with the garbage collector tuned, and
each task's stack logged on SIGUSR1 (`kill -USR1 <pid>`: where a hung process waits).

libuv's loop, and its TLS transport above all, costs less CPU per request than
asyncio's own loop, whose TLS layer is written in Python. Every request the
controller makes pays it twice (once in the API server), so the choice is made here,
once, for every entry point (see bench/RESULTS.md for the figures).
"""

from __future__ import annotations

import asyncio
import gc
import io
import logging
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")
log = logging.getLogger(__name__)


# Young-generation collections every 50,000 allocations instead of Python's 700.
#
# Our processes keep many long-lived objects: the API server's store and history, and the
# controller's informer caches. They also make millions of short-lived ones, such as the
# JSON of each request and watch event. At 700, short-lived objects were caught alive and
# promoted to the old generation. Its full collections then walked the whole heap:
# 0.3 s each, with the loop stopped, and some 15 % of each process's CPU in Kueue's
# baseline. Cyclic garbage is still collected, only in larger batches.
GC_THRESHOLDS = (50_000, 20, 100)


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for `event` at most `timeout` seconds (None: no limit); True if it is set.

    Never `asyncio.wait_for` in code that is cancelled to stop (ruff bans it): before
    Python 3.12, a cancel that comes as the awaited thing finishes is swallowed, and the
    task goes on as if never cancelled. A controller's scheduler did, when its lease
    was lost as it was woken, and the replica hung stepping down for good."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a uvloop loop, with the collector tuned as above."""
    gc.set_threshold(*GC_THRESHOLDS)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        if threading.current_thread() is threading.main_thread():  # where signals are handled
            runner.get_loop().add_signal_handler(signal.SIGUSR1, log_task_stacks)
        return runner.run(main)


def log_task_stacks() -> None:
    """Log where every task of the running loop waits."""
    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    for task in tasks:
        print(f"--- {task.get_name()}{' (cancelling)' if task.cancelling() else ''}", file=out)
        task.print_stack(file=out)
    log.warning("%d tasks:\n%s", len(tasks), out.getvalue())


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A loop for a thread of its own (the test server's)."""
    return uvloop.new_event_loop()
