"""LeaderElector between replicas sharing one embedded API server."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest

from koordqueue.kube.client import KubeClient
from koordqueue.kube.leader import LEASES, LeaderElector

if TYPE_CHECKING:
    from koordqueue.apiserver.server import APIServer

LEASE, RENEW, RETRY = 2.0, 1.4, 0.2


class Replica:
    """One elector plus the record of what its callbacks saw."""

    def __init__(self, client: KubeClient, identity: str, *, release_on_cancel: bool = True) -> None:
        self.elector = LeaderElector(client, "default", "koord-queue", identity, lease_duration=LEASE,
                                     renew_deadline=RENEW, retry_period=RETRY, release_on_cancel=release_on_cancel)
        self.started = 0
        self.stopped = 0
        self.work_cancelled = 0
        self.task: asyncio.Task[None] | None = None

    async def _work(self) -> None:
        self.started += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.work_cancelled += 1
            raise

    def _stopped(self) -> None:
        self.stopped += 1

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run(self._work, self._stopped))

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def watch_leaders(replicas: list[Replica], seconds: float, both: list[float]) -> None:
    """Sample is_leader; record any moment at which two replicas believed they led."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if sum(r.elector.is_leader for r in replicas) > 1:
            both.append(time.monotonic())
        await asyncio.sleep(0.01)


async def until(check: object, timeout: float) -> float:
    began = time.monotonic()
    async with asyncio.timeout(timeout):
        while not check():  # type: ignore[operator]
            await asyncio.sleep(0.01)
    return time.monotonic() - began


async def test_one_leads_and_the_other_takes_over_when_it_stops_renewing(client: KubeClient) -> None:
    a = Replica(client, "a", release_on_cancel=False)  # stops as a crashed process would
    b = Replica(client, "b")
    a.start()
    await until(lambda: a.elector.is_leader, 3)
    b.start()
    both: list[float] = []
    try:
        await watch_leaders([a, b], 1.5, both)  # several renew periods
        assert a.elector.is_leader and not b.elector.is_leader and a.started == 1 and b.started == 0
        lease = await client.get(LEASES, "koord-queue", namespace="default")
        assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 2
        assert b.elector.holder == "a"

        await a.stop()
        took = await until(lambda: b.elector.is_leader, LEASE + 2)
        # b saw a's last renewal at most one (jittered) retry after it, waits the lease out,
        # then needs at most one more retry to notice; plus slack for the requests.
        assert took <= LEASE + 2 * RETRY * 1.2 + 0.3
        # The leader's work starts as a task right after it wins: give it a moment to run.
        await until(lambda: b.started == 1, 1)
        lease = await client.get(LEASES, "koord-queue", namespace="default")
        assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
        assert both == []
    finally:
        await a.stop()
        await b.stop()


async def test_a_leader_that_stops_releases_the_lease_at_once(client: KubeClient) -> None:
    a, b = Replica(client, "a"), Replica(client, "b")
    a.start()
    await until(lambda: a.elector.is_leader, 3)
    b.start()
    try:
        await asyncio.sleep(RETRY * 2)
        await a.stop()
        assert a.stopped == 1 and a.work_cancelled == 1
        took = await until(lambda: b.elector.is_leader, 2)
        assert took < 1.0  # no need to wait for the lease to expire
    finally:
        await b.stop()


async def test_a_leader_that_cannot_renew_steps_down_before_anyone_else_leads(
        server: APIServer, client: KubeClient) -> None:
    a, b = Replica(client, "a"), Replica(client, "b")
    a.start()
    await until(lambda: a.elector.is_leader, 3)
    b.start()
    both: list[float] = []
    try:
        await asyncio.sleep(RETRY * 2)
        server.controls.inject_errors(500, resources={"leases"})
        lost = await until(lambda: not a.elector.is_leader, RENEW + 1)
        assert lost <= RENEW + RETRY
        await until(lambda: a.stopped == 1, 2)
        assert a.work_cancelled == 1 and not b.elector.is_leader
        server.controls.clear_errors()
        await watch_leaders([a, b], LEASE + 1.5, both)
        assert sum(r.elector.is_leader for r in (a, b)) == 1  # someone leads again
        assert both == []
    finally:
        await a.stop()
        await b.stop()


async def test_run_returns_when_the_work_is_done_and_raises_its_error(client: KubeClient) -> None:
    elector = LeaderElector(client, "default", "once", "a", lease_duration=LEASE, renew_deadline=RENEW,
                            retry_period=RETRY)
    done: list[str] = []

    async def work() -> None:
        done.append("worked")

    await asyncio.wait_for(elector.run(work, lambda: done.append("stopped")), 5)
    assert done == ["worked", "stopped"] and not elector.is_leader
    lease = await client.get(LEASES, "once", namespace="default")
    assert lease["spec"]["holderIdentity"] == ""  # released for the next replica

    async def broken() -> None:
        raise RuntimeError("controller crashed")

    with pytest.raises(RuntimeError, match="controller crashed"):
        await asyncio.wait_for(elector.run(broken), 5)


def test_timings_must_leave_room_for_renewal(client: KubeClient) -> None:
    with pytest.raises(ValueError):
        LeaderElector(client, "default", "x", "a", lease_duration=10, renew_deadline=10, retry_period=2)
    with pytest.raises(ValueError):
        LeaderElector(client, "default", "x", "a", lease_duration=15, renew_deadline=2, retry_period=2)


async def test_a_stop_during_clean_up_after_losing_the_lease_is_not_swallowed(
        server: APIServer, client: KubeClient) -> None:
    """Losing the Lease cancels the work; if the replica is stopped while that work is
    still winding down, it must stop, not campaign again (a hang CI once saw)."""
    elector = LeaderElector(client, "default", "slow-stop", "a", lease_duration=LEASE, renew_deadline=RENEW,
                            retry_period=RETRY)
    winding_down = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            winding_down.set()
            await asyncio.sleep(0.5)  # a slow clean-up
            raise

    task = asyncio.create_task(elector.run(work))
    try:
        await until(lambda: elector.is_leader, 3)
        server.controls.inject_errors(500, resources={"leases"})
        async with asyncio.timeout(RENEW + 2):
            await winding_down.wait()
        server.controls.clear_errors()
        task.cancel()
        async with asyncio.timeout(3):
            await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
    finally:
        server.controls.clear_errors()
        task.cancel()
