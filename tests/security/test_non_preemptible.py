"""A tenant labels its jobs non-preemptible to keep what it borrows (issue 29, item 4).

Non-preemptible jobs are never preempted, so what they borrow past their quota's min would
never come back to the quota that lent it. As Koord-Queue, they are admitted only within
min: the tenant gets its min that way, borrows only preemptibly beyond it, and the lender
takes its min back by reclaim.
"""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.controller.conftest import System, pytorch_job, quota

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

NON_PREEMPTIBLE = {c.LABEL_PREEMPTIBLE: c.FALSE}


async def status(system: System, job: str) -> dict[str, Any]:
    return dict((await system.unit(f"{job}-py-qu")).get("status") or {})


async def test_non_preemptible_jobs_get_min_and_the_lender_takes_its_min_back(system: System) -> None:
    await system.apply(quota("np-pool", 8, 8, is_parent=True),
                       quota("np-lender", 4, 8, parent="np-pool"), quota("np-tenant", 4, 8, parent="np-pool"))
    # The tenant asks for the whole pool non-preemptibly (2 GPUs a job, Master only).
    for name in ("np-1", "np-2", "np-3"):
        await system.apply(pytorch_job(name, gpus_per_pod=2, workers=0, quota_name="np-tenant",
                                       labels=NON_PREEMPTIBLE, priority=5))
    for name in ("np-1", "np-2"):
        await system.wait_phase(f"{name}-py-qu", c.Phase.RUNNING)

    async def third_waits_for_min() -> str:
        got = await status(system, "np-3")
        assert got.get("phase") == c.Phase.ENQUEUED, got
        message = str(got.get("message"))
        assert "non-preemptible jobs" in message and "they use 4 of its min 4" in message, message
        return message

    said = await system.wait_for(third_waits_for_min, what="np-3 to wait for the tenant's min")
    assert said.startswith("waiting for quota np-tenant: nvidia.com/gpu asks 2; ")
    # Borrowing preemptibly is still allowed: the idle half of the pool is used.
    await system.apply(pytorch_job("np-borrow", gpus_per_pod=4, workers=0, quota_name="np-tenant", priority=1))
    await system.wait_phase("np-borrow-py-qu", c.Phase.RUNNING)
    assert (await status(system, "np-3")).get("phase") == c.Phase.ENQUEUED
    # The lender wants its min: it takes the preemptible borrower's room, never a non-preemptible job's.
    await system.apply(pytorch_job("np-lend", gpus_per_pod=4, workers=0, quota_name="np-lender"))
    await system.wait_phase("np-lend-py-qu", c.Phase.RUNNING, timeout=60)
    for name in ("np-1", "np-2"):
        assert (await status(system, name)).get("phase") == c.Phase.RUNNING
    borrower = await status(system, "np-borrow")
    assert borrower.get("phase") in (c.Phase.PREEMPTED, c.Phase.TIMEOUT_BACKOFF, c.Phase.ENQUEUED), borrower
    assert (await status(system, "np-3")).get("phase") == c.Phase.ENQUEUED
