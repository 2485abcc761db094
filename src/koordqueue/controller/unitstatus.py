"""Who writes a QueueUnit's status: one patch at a time per unit, each on the latest version
we know of, in one of three lines so that no write waits behind writes it must not: the
cycles' admissions and send-backs (write_limit), the job reconcilers' writes that free quota
(job_line: releases), and the messages, Running and podState (message_limit).
Each write that starts or ends a run moves the unit's execution clock (status.py).

What only informs of an admitted unit's run (podState) is not written at once: it waits up to
INFORM_SECONDS (PENDING_INFORM_SECONDS for pods that are only pending), later news merged into
it, so that pods created, then running, then done make one write, not three; Running goes at
once, with the news waiting; a write that changes the unit's phase otherwise (its job
finished, it was sent back) takes the news' place."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from koordqueue import aio
from koordqueue.controller import status as st
from koordqueue.controller.keyedlock import KeyedLock
from koordqueue.controller.resources import UNITS
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.views import Object, rfc3339
from koordqueue.kube.client import PatchType
from koordqueue.kube.errors import KubeError

log = logging.getLogger(__name__)

MESSAGE_WRITERS = 8  # messages and Running written at once: they must not hold back admissions and releases
INFORM_SECONDS = 5.0  # how long podState waits for news to be written with (its lag)
# ... and when its pods are only pending, none run nor ran: they usually run within these
# seconds, and then Running is written with them (pods pending a while are written then)
PENDING_INFORM_SECONDS = 15.0


@dataclass(slots=True)
class _Inform:
    """A unit's news not yet written: the status fields (later news win) and what must still
    hold for them to be written."""

    status: Object
    touch: bool
    due: float  # when it is written (the event loop's time)
    still: list[Callable[[], bool]] = field(default_factory=list)
    failed: list[Callable[[KubeError], None]] = field(default_factory=list)
    sooner: asyncio.Event = field(default_factory=asyncio.Event)  # set when ``due`` is brought forward


class UnitStatusWriter(Part):
    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.unit_locks = KeyedLock()  # one status write per unit at a time
        self.write_limit = asyncio.Semaphore(self.config.write_concurrency)
        self.message_limit = asyncio.Semaphore(MESSAGE_WRITERS)
        # The job reconcilers' unit writes (Running, podState, releases) have a line of their
        # own: a release frees quota for the admissions waiting in write_limit's line, and a
        # Running write waiting there would hold back its job's release behind it (the same
        # worker reconciles the job when it ends), so neither waits behind admissions (job
        # workers bound this line).
        self.job_line = asyncio.Semaphore(self.config.job_workers)
        self.clock_resets: set[str] = set()  # units whose next run-ending write empties their run time
        self.informs: dict[str, _Inform] = {}  # unit key -> its news waiting to be written
        self.inform_tasks: set[asyncio.Task[None]] = set()

    def reset_clock(self, key: str) -> None:
        """The unit's next write that ends its run empties the time it ran (it ran past its
        maximum execution time: made active again, it gets a new budget)."""
        self.clock_resets.add(key)

    async def write(self, key: str, status: Object, *, precondition: bool = False, touch: bool = True,
                    limit: asyncio.Semaphore | None = None, still: Callable[[], bool] | None = None,
                    informing: bool = False) -> bool:
        """One status patch; writes of one unit go one at a time, each on the latest version.
        ``limit``: how many such writes may be in flight (messages have a line of their own); a
        place in that line is had before the unit's lock, so that a write waiting for its turn
        never holds back another write of the same unit. ``still``: checked once the lock is
        held; the write is skipped (False) when it says the status is no longer to be written.
        A write of a phase drops the unit's news not yet written, unless it is that news
        (``informing``)."""
        ns, _, name = key.partition("/")
        async with limit or self.write_limit, self.unit_locks.hold(key):
            if still is not None and not still():
                return False
            if touch:
                status = {**status, "lastUpdateTime": rfc3339(self.clock())}
            if "phase" in status and not informing:
                self.informs.pop(key, None)  # news of the run this write ends or starts anew
            # Its execution clock: started at Running, stopped (its run time added) when it leaves it.
            status = st.execution_clock(self.informers.unit.get(key), status, self.clock(),
                                        reset=key in self.clock_resets and "phase" in status)
            patch: Object = {"status": status}
            mine = self.records.rv(key)
            if precondition and mine is not None:
                patch["metadata"] = {"resourceVersion": mine}
            obj = await self.client.patch_status(UNITS, name, patch, namespace=ns, patch_type=PatchType.MERGE)
            self.records.saw(key, str(obj["metadata"]["resourceVersion"]))
            if "phase" in status:
                self.clock_resets.discard(key)
        self.metrics.unit_status_writes.inc()
        if "message" in status:
            self.records.unit_to_write(key).written_message = status["message"]
            self.records.pending_messages.pop(key, None)
        return True

    def inform(self, key: str, status: Object, *, touch: bool = True, still: Callable[[], bool] | None = None,
               failed: Callable[[KubeError], None] | None = None, within: float | None = None) -> None:
        """Write ``status`` (news of an admitted unit's run) ``within`` seconds (INFORM_SECONDS
        unless said) with whatever news comes meanwhile, at once if it has a phase; the
        earliest time any of the news asks for is kept. Nobody waits for it. ``still``: checked
        when it is written (all news dropped if one says no); ``failed``: told of an error of
        the write."""
        due = asyncio.get_running_loop().time() + (INFORM_SECONDS if within is None else within)
        news = self.informs.get(key)
        if news is None:
            news = self.informs[key] = _Inform(dict(status), touch, due)
            task = asyncio.create_task(self._write_news(key, news), name=f"inform-{key}")
            self.inform_tasks.add(task)
            task.add_done_callback(self.inform_tasks.discard)
        else:
            news.status.update(status)
            news.touch = news.touch or touch
        if still is not None:
            news.still.append(still)
        if failed is not None:
            news.failed.append(failed)
        if "phase" in status:
            due = 0.0
        if due < news.due:
            news.due = due
            news.sooner.set()

    async def _write_news(self, key: str, news: _Inform) -> None:
        loop = asyncio.get_running_loop()
        while (left := news.due - loop.time()) > 0:
            news.sooner.clear()
            await aio.wait_event(news.sooner, left)

        def current() -> bool:  # not taken over by a write of the unit's phase, and still true
            if self.informs.get(key) is not news:
                return False
            del self.informs[key]  # news from now on makes a write of its own
            return all(check() for check in news.still)

        try:
            await self.write(key, news.status, touch=news.touch, limit=self.message_limit, still=current,
                             informing=True)
        except KubeError as e:
            log.info("news of %s not written: %s", key, e)
            for failed in news.failed:
                failed(e)
