"""Why a unit waits is written from a view of the unit at least as new as our own last
write of it: a view that lags takes an admitted unit for a new one, whose first status
is Enqueued.

Found by the chaos run on the real control plane: a new unit was admitted before the
first message flush (Dequeued) and picked as a victim in the next cycle; while its
Preempted waited for its admission's release of the job to land, the flush wrote the
engine's message for it ("preempted: ...; queued again") as a new unit's first status,
phase Enqueued, over its Dequeued, its admissions still listed. Here the watch of the
unit is held back after it brought the new unit, and the release on its way, as a slow
request is.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from koordqueue.kube.informer import Informer

from .conftest import running_system
from .test_job_writes_in_order import SlowJobWrites
from .test_lagging_views import all_done_and_checked, checked, high_job, low_job, pool_of_two_teams

pytestmark = pytest.mark.timeout(120)


class LagAfterFirst:
    """Lets the first watch event of one object into an informer's cache and holds back
    the later ones until `release()`."""

    def __init__(self, informer: Informer[Any], key: str) -> None:
        self.held: list[tuple[str, str, Any]] = []
        self._store = informer._store
        self._seen = False

        async def store(k: str, rv: str, new: Any) -> None:
            if k == key and self._seen:
                self.held.append((k, rv, new))
                return
            self._seen = self._seen or k == key
            await self._store(k, rv, new)

        setattr(informer, "_store", store)  # noqa: B010 (a method of the instance, replaced)

    async def release(self) -> None:
        while self.held:
            await self._store(*self.held.pop(0))
        self._seen = False


async def test_a_victim_seen_as_new_is_not_written_enqueued_before_its_preemption(tmp_path: Path) -> None:
    async with running_system(tmp_path / "state") as system:
        checker = checked(system)
        ctl = system.controller
        await pool_of_two_teams(system)
        lag = LagAfterFirst(ctl.unit_informer, "default/low-py-qu")
        slow = SlowJobWrites(system.client, "low", suspend=False)
        slow.armed = True
        await system.apply(low_job())

        async def release_on_its_way() -> bool:
            return slow.held >= 1

        await system.wait_for(release_on_its_way, 30, "low to be admitted and its job's release sent")
        assert checker.units["default/low-py-qu"].holding
        view = ctl.unit_informer.get("default/low-py-qu")
        assert view is not None and view.phase == "", view  # our view: a new unit, no status yet
        await system.apply(high_job())

        async def preemption_decided() -> bool:
            held = ctl.engine.unit("default/low-py-qu")
            return held is not None and held.admitted_quota is None

        await system.wait_for(preemption_decided, 30, "high to preempt low")

        async def message_written() -> bool:  # at the next flushes of messages, or never
            return "preempted" in (ctl.shared.records.written_message("default/low-py-qu") or "")

        with contextlib.suppress(AssertionError):
            await system.wait_for(message_written, 3, "the message of low to be written")
        slow.let_go()
        await lag.release()
        await all_done_and_checked(system, checker)
