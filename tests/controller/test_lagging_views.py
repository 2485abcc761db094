"""A preempted job is suspended before its unit is admitted again, however far behind the
controller's watches are: its views of the unit and of the job may not show its own last
writes yet (a dropped watch resuming, a relist after 410 Gone), and the job it stopped
must not be taken for one already stopped, nor the unit for one still running.

The API server's writes are checked as bench/chaos.py checks them (a unit is admitted
only while its job is suspended: between two releases of a job there is a suspension);
these are the two stories behind its "admitted while its job still runs from before",
seen once in tests/reliability/test_chaos.py, made deterministic by holding back one
object's watch events.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.kube.informer import Informer

from ..reliability.conftest import load_chaos
from .conftest import System, pytorch_job, quota, running_system

pytestmark = pytest.mark.timeout(120)


class Lag:
    """Holds back the watch events of one object in an informer (its cache keeps the last
    version it let through) until `release()`, which lets them through in order."""

    def __init__(self, informer: Informer[Any], key: str) -> None:
        self.held: list[tuple[str, str, Any]] = []
        self.holding = False
        self._store = informer._store

        async def store(k: str, rv: str, new: Any) -> None:
            if k == key and self.holding:
                self.held.append((k, rv, new))
                return
            await self._store(k, rv, new)

        setattr(informer, "_store", store)  # noqa: B010 (a method of the instance, replaced)

    def hold(self) -> None:
        self.holding = True

    async def release(self) -> None:
        while self.held:
            await self._store(*self.held.pop(0))
        self.holding = False


def checked(system: System) -> Any:
    """The chaos run's checker, fed every write of the server from now on."""
    checker = load_chaos().HistoryChecker()
    system.server.store.listeners.append(checker.feed)
    return checker


async def pool_of_two_teams(system: System) -> None:
    """8 GPUs shared by team-a and team-b (4 each): team-b's job `low` borrows all of them,
    team-a's `high` reclaims its half, runs briefly and ends, so that `low` has its room
    back when its back-off is over."""
    await system.apply(quota("pool", 8, 8, is_parent=True))
    await system.apply(quota("team-a", 4, 8, parent="pool"), quota("team-b", 4, 8, parent="pool"))


def low_job() -> dict[str, Any]:
    """team-b's job that borrows team-a's half of the pool until `high` reclaims it."""
    return pytorch_job("low", gpus_per_pod=4, quota_name="team-b", duration=4.0)


def high_job() -> dict[str, Any]:
    """team-a's job that reclaims its half of the pool from `low`, runs briefly and ends."""
    return pytorch_job("high", gpus_per_pod=2, quota_name="team-a", duration=0.3, priority=100)


async def high_preempts_then_low_returns(system: System, checker: Any, lag: Lag) -> None:
    """`high` preempts `low` and ends; `low` is admitted again in the store while our view
    lags; then the lag is let go, and both must end with no violation."""
    await system.apply(high_job())
    await system.wait_phase("high-py-qu", c.Phase.SUCCEED)

    async def readmitted() -> bool:  # in the store, past our lagging view of it
        return bool(checker.units["default/low-py-qu"].epoch >= 2)

    await system.wait_for(readmitted, 30, "low to be admitted again")
    await asyncio.sleep(0.5)
    await lag.release()
    await all_done_and_checked(system, checker)


async def all_done_and_checked(system: System, checker: Any) -> None:
    await system.wait_phase("low-py-qu", c.Phase.SUCCEED, timeout=60)
    await system.wait_phase("high-py-qu", c.Phase.SUCCEED, timeout=30)
    assert checker.violations == []
    assert checker.suspensions >= 1, "low was preempted: its job was suspended"


async def test_a_preempted_job_is_suspended_while_the_watch_of_its_unit_lags(tmp_path: Path) -> None:
    """Our view of `low`'s unit still says Running after we wrote Preempted: the job is
    stopped all the same, and the unit is not admitted again before it is."""
    async with running_system(tmp_path / "state") as system:
        checker = checked(system)
        await pool_of_two_teams(system)
        await system.apply(low_job())
        await system.wait_phase("low-py-qu", c.Phase.RUNNING)
        lag = Lag(system.controller.unit_informer, "default/low-py-qu")
        lag.hold()
        await high_preempts_then_low_returns(system, checker, lag)


async def test_a_preempted_job_is_suspended_while_the_watch_of_the_job_lags(tmp_path: Path) -> None:
    """Our view of `low` still says suspended after we resumed it (the watch has not brought
    the resume back): preempted then, it is stopped all the same, and its unit is not
    admitted again before it is."""
    async with running_system(tmp_path / "state") as system:
        checker = checked(system)
        await system.apply(low_job())

        async def queued() -> bool:  # its quota is not there yet: it waits, suspended
            return bool(await system.phase("low-py-qu"))

        await system.wait_for(queued, 30, "low's unit to be queued")
        lag = Lag(system.controller.job_informers[c.PYTORCH_JOB_KIND], "default/low")
        lag.hold()
        await pool_of_two_teams(system)

        async def released() -> bool:
            return bool(checker.releases >= 1 and not checker.suspended["default/low"])

        await system.wait_for(released, 30, "low to be released")
        await high_preempts_then_low_returns(system, checker, lag)


async def test_a_back_off_left_over_does_not_take_back_a_new_admission_from_a_lagging_view(tmp_path: Path) -> None:
    """`low` was preempted, backed off and was admitted and released again. Our views of its
    unit (Preempted) and of its job (suspended) lag behind that. A back-off entry for it that is
    still due (left from its earlier back-off) does not write it Enqueued: the engine has it
    admitted, and that Enqueued would take its quota away while its job runs."""
    async with running_system(tmp_path / "state") as system:
        checker = checked(system)
        ctl = system.controller
        await pool_of_two_teams(system)
        await system.apply(low_job())
        await system.wait_phase("low-py-qu", c.Phase.RUNNING)
        unit_lag = Lag(ctl.unit_informer, "default/low-py-qu")
        job_lag = Lag(ctl.job_informers[c.PYTORCH_JOB_KIND], "default/low")
        await system.apply(high_job())

        async def view_preempted() -> bool:
            view = ctl.unit_informer.get("default/low-py-qu")
            return view is not None and view.phase == c.Phase.PREEMPTED.value

        await system.wait_for(view_preempted, 30, "our view of low's unit to say Preempted")
        unit_lag.hold()

        async def view_suspended() -> bool:
            view = ctl.shared.informers.job_view(f"{c.PYTORCH_JOB_KIND}/default/low")
            return view is not None and view.suspended

        await system.wait_for(view_suspended, 30, "our view of low's job to say suspended")
        job_lag.hold()

        async def readmitted_and_released() -> bool:
            return bool(checker.units["default/low-py-qu"].epoch >= 2 and not checker.suspended["default/low"])

        await system.wait_for(readmitted_and_released, 30, "low to be admitted and released again")
        ctl.shared.backoffs.push(0.0, "default/low-py-qu")
        ctl.shared.wake.set()
        await asyncio.sleep(1.0)
        assert await system.phase("low-py-qu") in (c.Phase.DEQUEUED.value, c.Phase.RUNNING.value)
        await unit_lag.release()
        await job_lag.release()
        await all_done_and_checked(system, checker)
