"""A write the controller could not send at all is undone like one the API server refused.

When the API server cannot be reached past the client's retries, the client raises
ConnectionFailed, which is not an API error. An admission that could not be written
is taken back, and a victim whose Preempted could not be written keeps its quota.
Scheduling goes on in both cases. Before, the admission stayed in the engine with
nothing written, so its quota was held by a unit that never ran, and a failed preemption
ended the scheduling loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.kube.errors import ConnectionFailed

from .conftest import System, pytorch_job, quota, running_system
from .test_lagging_views import all_done_and_checked, checked, high_job, low_job, pool_of_two_teams

pytestmark = pytest.mark.timeout(120)


def lose_first_write(system: System, unit: str, phase: c.Phase) -> list[str]:
    """The controller's first status write of `unit` with `phase` fails to connect; returns
    the list the lost write's unit name is put in."""
    client = system.controller.client
    real = client.patch_status
    lost: list[str] = []

    async def patch_status(resource: Any, name: str, patch: Any, **kwargs: Any) -> Any:
        if name == unit and not lost and (patch.get("status") or {}).get("phase") == phase.value:
            lost.append(name)
            raise ConnectionFailed(f"PATCH {name}/status: the API server cannot be reached")
        return await real(resource, name, patch, **kwargs)

    client.patch_status = patch_status
    return lost


async def test_an_admission_that_cannot_be_written_is_undone_and_scheduling_goes_on(tmp_path: Path) -> None:
    async with running_system(tmp_path / "state") as system:
        checker = checked(system)
        lost = lose_first_write(system, "first-py-qu", c.Phase.DEQUEUED)
        await system.apply(quota("team", 4, 4))
        await system.apply(pytorch_job("first", gpus_per_pod=2, quota_name="team", duration=0.3))  # master + worker: 4
        await system.wait_phase("first-py-qu", c.Phase.SUCCEED)
        assert lost == ["first-py-qu"]
        await system.apply(pytorch_job("second", gpus_per_pod=2, quota_name="team", duration=0.3))
        await system.wait_phase("second-py-qu", c.Phase.SUCCEED)  # all of the quota: none was left held
        assert checker.violations == []


async def test_a_preemption_that_cannot_be_written_keeps_the_victim_and_scheduling_goes_on(tmp_path: Path) -> None:
    async with running_system(tmp_path / "state") as system:
        checker = checked(system)
        await pool_of_two_teams(system)
        await system.apply(low_job())
        await system.wait_phase("low-py-qu", c.Phase.RUNNING)
        lost = lose_first_write(system, "low-py-qu", c.Phase.PREEMPTED)
        await system.apply(high_job())
        await system.wait_phase("high-py-qu", c.Phase.SUCCEED)  # low was preempted at the next try
        assert lost == ["low-py-qu"]
        await all_done_and_checked(system, checker)
