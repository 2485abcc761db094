"""A job that can never fit at the head of a Block queue (issue 29, item 9).

A tenant (or a typo) asks more than its quota's max: under Block it used to stop every job
behind it for good. It is passed over now, and its unit says it can never fit and why.
"""

from __future__ import annotations

import pytest

from koordqueue.api import constants as c
from tests.controller.conftest import System, pytorch_job, quota

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]


@pytest.mark.parametrize("policy", ["Block", "Intelligent"])
async def test_a_job_that_can_never_fit_does_not_hold_up_a_block_queue(system: System, policy: str) -> None:
    team = f"nf-{policy.lower()}"
    await system.apply(quota(team, 0, 4, policy=policy))
    # 8 GPUs (one pod of 8: a node could hold it) in a quota of max 4, first in line (priority 9 >= 4:
    # Intelligent's high band too), then a small one.
    await system.apply(pytorch_job(f"{team}-huge", gpus_per_pod=8, workers=0, quota_name=team, priority=9))
    await system.apply(pytorch_job(f"{team}-small", gpus_per_pod=2, workers=0, quota_name=team, priority=1))
    await system.wait_phase(f"{team}-small-py-qu", c.Phase.RUNNING)

    async def huge_says_never() -> str:
        got = dict((await system.unit(f"{team}-huge-py-qu")).get("status") or {})
        assert got.get("phase") == c.Phase.ENQUEUED, got
        message = str(got.get("message"))
        assert message.startswith(f"can never fit quota {team}"), message
        return message

    said = await system.wait_for(huge_says_never, what="the huge job to say it can never fit")
    assert said == f"can never fit quota {team}: nvidia.com/gpu asks 8, more than its max 4"
