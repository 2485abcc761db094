"""A GPU-hour budget on the embedded control plane, under a compressed clock (one real
second is a controller minute): the team stops being admitted when its window would be
exceeded, says when the budget frees up, and resumes when its use ages out; its usage
history is kept in a ConfigMap (docs/fairness.md)."""

from __future__ import annotations

import asyncio
import json

import pytest

from koordqueue.api import constants as c
from tests.controller.conftest import SystemFactory, pytorch_job, quick_config, quota

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

RATE = 60.0  # controller seconds per real second


def job(name: str) -> dict[str, object]:
    # One GPU for 2 real seconds (2 compressed minutes), and it says so.
    return pytorch_job(name, gpus_per_pod=1, workers=0, namespace="team", quota_name="team", duration=2.0,
                       annotations={c.ANNOTATION_EXPECTED_RUNTIME: "2m"})


async def test_a_budgeted_team_stops_and_resumes_under_a_compressed_clock(start_system: SystemFactory) -> None:
    # Timings in controller seconds: a resume may take 10 real minutes, not 1 real second.
    config = quick_config(clock_rate=RATE, resume_refused_seconds=600 * RATE,
                          wait_for_pods_running_seconds=600 * RATE)
    async with start_system(config=config) as system:
        await system.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}},
                           quota("team", 4, 4, namespace="team",
                                 annotations={c.ANNOTATION_BUDGET: "nvidia.com/gpu=4m/10m"}))
        await system.apply(job("one"), job("two"))  # 1 + 2 GPUs x 2 min: the whole budget
        await system.wait_phase("one-py-qu", c.Phase.RUNNING, namespace="team")
        await system.wait_phase("two-py-qu", c.Phase.RUNNING, namespace="team")
        started = asyncio.get_running_loop().time()
        await system.apply(job("three"))

        async def told() -> str:
            unit = await system.unit("three-py-qu", "team")
            message = str(unit.get("status", {}).get("message", ""))
            return message if "waits for the budget of quota team" in message else ""

        message = await system.wait_for(told, 20, "three told it waits for the budget")
        assert "(nvidia.com/gpu=4m/10m)" in message and "frees up in about" in message
        assert await system.phase("three-py-qu", "team") != c.Phase.RUNNING

        # The quota's status and the dashboard's overview show the budget's use.
        async def in_status() -> dict[str, object]:
            obj = await system.get_json("elasticquota", "team", "-n", "team")
            shown = obj.get("status", {}).get(c.STATUS_USAGE_HISTORY, {})
            return shown if "usedHours" in shown.get("budgets", {}).get(c.GPU, {}) else {}  # type: ignore[no-any-return]

        shown = await system.wait_for(in_status, 10, "the budget's use in the quota's status")
        assert shown["budgets"][c.GPU]["budgetHours"] == "0.0666667"  # type: ignore[index]
        row = next(q for q in system.controller.overview()["quotas"] if q["name"] == "team")
        assert row["history"]["budgets"][c.GPU]["amount"] == pytest.approx(4 / 60)
        assert row["history"]["decayed"][c.GPU] > 0 and row["history"]["budgets"][c.GPU]["used"] > 0
        # The first minutes of one's and two's use leave the 10-minute window some 10 real seconds on.
        await system.wait_phase("three-py-qu", c.Phase.RUNNING, namespace="team", timeout=40)
        waited = asyncio.get_running_loop().time() - started
        assert waited > 6.0, f"admitted after {waited:.1f} s: the budget did not hold it"

        async def kept() -> dict[str, object]:
            listed = await system.get_json("configmap", c.USAGE_HISTORY_CONFIG_MAP, "-n", config.system_namespace)
            return json.loads(listed["data"][c.USAGE_HISTORY_KEY])  # type: ignore[no-any-return]

        history = await system.wait_for(kept, 10, "the usage history kept in its ConfigMap")
        assert c.GPU in history["quotas"]["team"]["windows"]

