"""A de-duplicating, rate-limited work queue with client-go's semantics, for asyncio.

Handlers enqueue keys, workers reconcile them. The rules that make this safe:
- an item added while it waits is not queued twice (one reconcile covers both);
- an item added while a worker processes it is queued again once that worker calls
  `done`, never handed to a second worker at the same time;
- `add_after` keeps only the earliest pending delay per item;
- `add_rate_limited` delays by the item's own exponential backoff (reset by `forget`),
  and by an overall token bucket so that a mass failure does not retry in a storm;
- `add(item, urgent=True)` puts it ahead of the items that are not urgent (an item
  already waiting moves ahead): a job that ended frees quota, and must not wait behind
  thousands of new jobs.

One deliberate difference from client-go: after `shutdown`, `get` raises `ShutDown` at
once instead of draining what is queued, because a controller that lost leadership
must stop writing, not finish the backlog.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from koordqueue.kube.errors import KubeError
from koordqueue.kube.ratelimit import TokenBucket, exponential_backoff

log = logging.getLogger(__name__)

T = TypeVar("T", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down; workers should return."""


class WorkQueue(Generic[T]):
    def __init__(
        self,
        *,
        base_delay: float = 0.005,
        max_delay: float = 1000.0,
        qps: float = 10.0,
        burst: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` paces the overall bucket (tests pass their loop's virtual clock)."""
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._bucket = TokenBucket(qps, burst, clock)
        self._queue: deque[T] = deque()
        self._urgent: deque[T] = deque()  # served first; either line may hold stale copies, skipped
        self._urgent_items: set[T] = set()  # items in the urgent line
        self._urgent_after_done: set[T] = set()  # added urgently while being processed
        self._dirty: set[T] = set()  # queued (or to be queued again after processing)
        self._processing: set[T] = set()
        self._failures: dict[T, int] = {}
        self._waiting: dict[T, tuple[float, asyncio.TimerHandle]] = {}  # add_after: (due, timer)
        self._nonempty = asyncio.Event()
        self._shutting_down = False

    def add(self, item: T, urgent: bool = False) -> None:
        if self._shutting_down:
            return
        if item in self._dirty:
            if urgent:
                if item in self._processing:
                    self._urgent_after_done.add(item)
                elif item not in self._urgent_items:
                    self._push_urgent(item)  # its copy in the other line is skipped when reached
            return
        self._dirty.add(item)
        if item in self._processing:
            if urgent:
                self._urgent_after_done.add(item)
            return  # `done` will queue it again
        if urgent:
            self._push_urgent(item)
        else:
            self._queue.append(item)
            self._nonempty.set()

    def _push_urgent(self, item: T) -> None:
        self._urgent.append(item)
        self._urgent_items.add(item)
        self._nonempty.set()

    def add_after(self, item: T, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        pending = self._waiting.get(item)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        self._waiting[item] = (due, loop.call_at(due, self._fire, item))

    def add_rate_limited(self, item: T) -> None:
        """Requeue after this item's backoff (base * 2**failures), at least the overall pacing."""
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        delay = exponential_backoff(failures, self.base_delay, self.max_delay)
        self.add_after(item, max(delay, self._bucket.reserve()))

    def forget(self, item: T) -> None:
        """The item succeeded: its next failure starts from the base delay again."""
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)

    async def get(self) -> T:
        """The next item (urgent ones first); the caller must call `done(item)` when finished with it."""
        while True:
            while not self._queue and not self._urgent:
                if self._shutting_down:
                    raise ShutDown
                self._nonempty.clear()
                await self._nonempty.wait()
            if self._shutting_down:
                raise ShutDown
            if self._urgent:
                item = self._urgent.popleft()
                self._urgent_items.discard(item)
            else:
                item = self._queue.popleft()
            if item in self._dirty and item not in self._processing:
                break
            # else: a copy left in one line when the item moved ahead, handed out since
        self._processing.add(item)
        self._dirty.discard(item)
        return item

    async def serve(self, handle: Callable[[T], Awaitable[None]], what: str) -> None:
        """A worker: handle items until shut down; a success forgets the item's failures,
        a failure (an API error logged briefly, anything else with its traceback) requeues
        it with backoff. Run several as tasks for concurrency (never one item twice)."""
        while True:
            try:
                item = await self.get()
            except ShutDown:
                return
            try:
                await handle(item)
                self.forget(item)
            except KubeError as e:
                log.info("%s %s: %s; retrying", what, item, e)
                self.add_rate_limited(item)
            except Exception:
                log.exception("%s %s failed", what, item)
                self.add_rate_limited(item)
            finally:
                self.done(item)

    def done(self, item: T) -> None:
        self._processing.discard(item)
        urgent = item in self._urgent_after_done
        self._urgent_after_done.discard(item)
        if item in self._dirty and not self._shutting_down:
            if urgent:
                self._push_urgent(item)
            else:
                self._queue.append(item)
                self._nonempty.set()

    def shutdown(self) -> None:
        self._shutting_down = True
        for _, timer in self._waiting.values():
            timer.cancel()
        self._waiting.clear()
        self._nonempty.set()  # wake every waiting worker so it sees ShutDown

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def __len__(self) -> int:
        """Items waiting to be handed out (not those in progress or delayed)."""
        return len(self._dirty) - sum(1 for item in self._processing if item in self._dirty)

    def _fire(self, item: T) -> None:
        self._waiting.pop(item, None)
        self.add(item)
