"""Who writes a QueueUnit's status: one patch at a time per unit, each on the latest version
we know of, in one of three lines so that no write waits behind writes it must not: the
cycles' admissions and send-backs (write_limit), the job reconcilers' writes that free quota
or only inform (job_line: releases, podState), and the messages and Running (message_limit).
Each write that starts or ends a run moves the unit's execution clock (status.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from koordqueue.controller import status as st
from koordqueue.controller.keyedlock import KeyedLock
from koordqueue.controller.resources import UNITS
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.views import Object, rfc3339
from koordqueue.kube.client import PatchType

MESSAGE_WRITERS = 8  # messages and Running written at once: they must not hold back admissions and releases


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

    def reset_clock(self, key: str) -> None:
        """The unit's next write that ends its run empties the time it ran (it ran past its
        maximum execution time: made active again, it gets a new budget)."""
        self.clock_resets.add(key)

    async def write(self, key: str, status: Object, *, precondition: bool = False, touch: bool = True,
                    limit: asyncio.Semaphore | None = None, still: Callable[[], bool] | None = None) -> bool:
        """One status patch; writes of one unit go one at a time, each on the latest version.
        ``limit``: how many such writes may be in flight (messages have a line of their own); a
        place in that line is had before the unit's lock, so that a write waiting for its turn
        never holds back another write of the same unit. ``still``: checked once the lock is
        held; the write is skipped (False) when it says the status is no longer to be written."""
        ns, _, name = key.partition("/")
        if touch:
            status = {**status, "lastUpdateTime": rfc3339(self.clock())}
        async with limit or self.write_limit, self.unit_locks.hold(key):
            if still is not None and not still():
                return False
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
