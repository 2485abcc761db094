"""Fire-and-forget work of the simulated cluster (events), kept so that `stop` can end it; and
the workers each of its controllers (kubelet, operators, workload controllers) serves its
work queue with."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any, TypeVar

from koordqueue.kube.workqueue import WorkQueue

log = logging.getLogger(__name__)
T = TypeVar("T", bound=Hashable)


def serve(queue: WorkQueue[T], sync: Callable[[T], Awaitable[None]], what: str, name: str,
          workers: int) -> list[asyncio.Task[None]]:
    """``workers`` tasks taking ``queue``'s items to ``sync``, named ``name-0``, ``name-1``, ..."""
    return [asyncio.create_task(queue.serve(sync, what), name=f"{name}-{i}") for i in range(workers)]


async def stop_serving(queue: WorkQueue[T], tasks: list[asyncio.Task[None]]) -> None:
    """Shut ``queue`` down and end ``tasks`` (its workers, and any other task of the controller)."""
    queue.shutdown()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Background:
    """Tasks nobody awaits: their failures are logged, and `close` cancels what is left."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("background task failed: %r", task.exception())

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
