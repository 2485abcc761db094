"""A replica that loses its Lease stops its controller completely, and leads again.

Losing the Lease cancels the leader's work (LeaderElector._lead) and waits for it to end
before campaigning again: a controller that does not end when cancelled hangs the
replica for good, renewing nothing and leading nothing (a chaos run saw it for 18 min).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from koordqueue.controller.controller import Controller

from .conftest import System, SystemFactory, quick_config

CONFIG = replace(quick_config(), leader_election=True, lease_duration=3.0, renew_deadline=2.0, retry_period=0.5)
STEP_DOWN_SECONDS = 5.0


def leader_work() -> asyncio.Task[None]:
    """The task LeaderElector runs the controller in while leading."""
    return next(t for t in asyncio.all_tasks() if t.get_name() == f"leader-{CONFIG.lease_name}")


async def new_controller(system: System, old: Controller) -> Controller:
    """The controller of the replica's next term, as soon as it is made."""
    async with asyncio.timeout(STEP_DOWN_SECONDS):
        while system.manager.controller is None or system.manager.controller is old:
            await asyncio.sleep(0)
    return system.manager.controller


def stopped(controller: Controller) -> bool:
    """Every task the controller started has ended, its informers' included."""
    informers: list[Any] = controller._informers()
    return (all(inf._task is None or inf._task.done() for inf in informers)
            and all(t.done() for t in controller._tasks))


async def test_a_lease_lost_as_the_scheduler_wakes_still_stops_the_controller(start_system: SystemFactory) -> None:
    """The cancel comes in the very loop step that wakes the scheduler. asyncio.wait_for
    (Python 3.11) swallowed such a cancel: the scheduler went on, the controller's
    shut-down waited on it forever, and so did the replica's elector."""
    async with start_system(config=CONFIG) as system:
        old = system.controller
        # A unit backing off makes the scheduler wait with a deadline, as it does under load
        # (this key names no unit: when due, it is dropped).
        old.shared.backoffs.push(old.shared.clock() + 60.0, "default/backing-off")
        old.shared.wake.set()
        await asyncio.sleep(0.5)  # the scheduler's cycle runs; it waits again, until woken or due
        work = leader_work()
        old.shared.wake.set()
        work.cancel()  # what losing the Lease does, in the same step
        async with asyncio.timeout(STEP_DOWN_SECONDS):
            await asyncio.gather(work, return_exceptions=True)
        assert work.cancelled()
        assert stopped(old)

        fresh = await new_controller(system, old)
        async with asyncio.timeout(10):
            while not fresh.sync_done:
                await asyncio.sleep(0.05)


async def test_a_lease_lost_while_the_controller_starts_leaves_no_informer_running(
        start_system: SystemFactory) -> None:
    async with start_system(config=CONFIG) as system:
        leader_work().cancel()  # step down; the replica campaigns again at once
        fresh = await new_controller(system, system.controller)
        async with asyncio.timeout(STEP_DOWN_SECONDS):
            while fresh.shared.informers.node._task is None:  # started: it waits for the first lists
                await asyncio.sleep(0)
        assert not fresh.sync_done
        work = leader_work()
        work.cancel()
        async with asyncio.timeout(STEP_DOWN_SECONDS):
            await asyncio.gather(work, return_exceptions=True)
        assert stopped(fresh)  # its event writers too
