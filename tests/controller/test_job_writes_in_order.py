"""A job's suspensions and releases land in the order they were decided in, however long
each takes to reach the API server (a 429 waits out its Retry-After, a 500 is retried
with back-off): a suspension decided before the job's unit was admitted again must not
land after that admission's release, nor a release after the unit was sent back.

The chaos run found the first ("released twice in one admission", issue 20): after a
preemption, a second suspension of the job, decided from a view of the job that did not
show the first one yet, was still on its way when the unit was admitted again and the
job released; it landed then, stopping a job whose unit held quota, which the next
reconcile released once more. Here that suspension is held back on its way, as a slow
request is.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.kube.client import KubeClient
from koordqueue.kube.errors import ConnectionFailed

from .conftest import running_system
from .test_lagging_views import Lag, all_done_and_checked, checked, high_job, low_job, pool_of_two_teams

pytestmark = pytest.mark.timeout(120)


class SlowJobWrites:
    """Holds the job `name`'s suspensions (or releases) on their way to the server, once
    armed, until `let_go()`: they were sent, and land late. With `fail` set, the first
    one armed fails instead (the server could not be reached) and the next ones are held."""

    def __init__(self, client: KubeClient, name: str, suspend: bool, fail: bool = False) -> None:
        self.armed = False
        self.failed = 0 if fail else 1
        self.held = 0
        self._gate = asyncio.Event()
        real = client.patch

        async def patch(resource: Any, name_: str, body: Any, **kwargs: Any) -> Any:
            annotations = ((body.get("metadata") or {}).get("annotations") or {}) if isinstance(body, dict) else {}
            if self.armed and resource.plural == c.PYTORCH_JOB_PLURAL and name_ == name and \
                    c.ANNOTATION_SUSPEND in annotations and (annotations[c.ANNOTATION_SUSPEND] == c.TRUE) == suspend:
                if not self.failed:
                    self.failed += 1
                    raise ConnectionFailed(f"PATCH {name_}: the API server cannot be reached")
                self.held += 1
                await self._gate.wait()
            return await real(resource, name_, body, **kwargs)

        setattr(client, "patch", patch)  # noqa: B010 (a method of the instance, replaced)

    def let_go(self) -> None:
        self._gate.set()


async def test_a_suspension_on_its_way_lands_before_the_next_release(tmp_path: Path) -> None:
    """`low` is preempted and suspended; our view of its job does not show that suspension
    yet when the view of its unit shows Preempted. Issue 20's second suspension, decided from
    that view, is no longer sent: the view is older than the suspension we wrote
    (jobswitch.py compares resourceVersions; the order of writes that are sent is
    tests/controller/test_parts_jobswitch.py's). Meanwhile the job's view catches up, `low`
    is admitted again and released, and no write of ours stops it after that release."""
    async with running_system(tmp_path / "state") as system:
        checker = checked(system)
        ctl = system.controller
        await pool_of_two_teams(system)
        await system.apply(low_job())
        await system.wait_phase("low-py-qu", c.Phase.RUNNING)
        unit_lag = Lag(ctl.unit_informer, "default/low-py-qu")
        job_lag = Lag(ctl.job_informers[c.PYTORCH_JOB_KIND], "default/low")
        unit_lag.hold()
        job_lag.hold()
        slow = SlowJobWrites(system.client, "low", suspend=True)
        await system.apply(high_job())

        async def preempted_and_suspended() -> bool:  # the suspension the preemption owes, from no view
            return bool(checker.suspensions >= 1 and checker.suspended["default/low"])

        await system.wait_for(preempted_and_suspended, 30, "low to be preempted and suspended")
        slow.armed = True
        switch = ctl.switch
        real_suspend = switch.suspend
        decided = 0

        async def suspend(job: Any, adapter: Any) -> None:  # a suspension decided (sent or not)
            nonlocal decided
            decided += 1
            await real_suspend(job, adapter)

        setattr(switch, "suspend", suspend)  # noqa: B010 (a method of the instance, replaced)
        await unit_lag.release()  # our view of the unit says Preempted; of the job, still running

        async def second_suspension_decided() -> bool:
            return decided >= 1

        await system.wait_for(second_suspension_decided, 30, "a second suspension of low to be decided")
        await job_lag.release()  # our view of the job catches up: low may be admitted again

        async def readmitted() -> bool:
            return bool(checker.units["default/low-py-qu"].epoch >= 2)

        await system.wait_for(readmitted, 30, "low to be admitted again")
        slow.let_go()
        await all_done_and_checked(system, checker)
        assert slow.held == 0, "a second suspension was sent from a view older than the first"


async def test_a_release_on_its_way_lands_before_the_unit_is_sent_back(tmp_path: Path) -> None:
    """`low` is admitted; its release right after fails, and the reconciler's release after
    it is slow. Meanwhile `high` preempts `low`: its unit says Preempted only once that
    release has landed, and its job is suspended after, never left running without quota."""
    async with running_system(tmp_path / "state") as system:
        checker = checked(system)
        ctl = system.controller
        slow = SlowJobWrites(system.client, "low", suspend=False, fail=True)
        slow.armed = True
        await pool_of_two_teams(system)
        await system.apply(low_job())

        async def release_sent_again() -> bool:
            return slow.held >= 1

        await system.wait_for(release_sent_again, 30, "low's release to be sent again, after the first failed")
        assert checker.units["default/low-py-qu"].holding and checker.suspended["default/low"]
        await system.apply(high_job())

        async def preemption_decided() -> bool:
            held = ctl.engine.unit("default/low-py-qu")
            return held is not None and held.admitted_quota is None

        await system.wait_for(preemption_decided, 30, "high to preempt low")
        with contextlib.suppress(AssertionError):  # (or not yet: after the slow release, which lands now)
            await system.wait_phase("low-py-qu", c.Phase.PREEMPTED, timeout=3)
        slow.let_go()
        await all_done_and_checked(system, checker)
