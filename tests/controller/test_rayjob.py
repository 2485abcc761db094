"""A RayJob under the controller, end to end: suspended on create by the webhook, queued as
`<name>-ray-qu`, admitted against its quota, run by the simulated KubeRay operator on its Ray
cluster, and its quota released when it is deleted or completes (the next RayJob then runs).

The first and third RayJobs run until deleted: what the test checks of them is checked with
no clock running (a short job could end before a loaded machine wrote its pod counts, or
before the test looked for it waiting)."""

from __future__ import annotations

import pytest

from koordqueue.api import constants as c
from tests.simcluster.test_rayjob import rayjob

from .conftest import System, quota

pytestmark = pytest.mark.timeout(120)


def queued_rayjob(name: str, duration: float | None) -> dict[str, object]:
    job = rayjob(name, duration=duration)
    job["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: "ray-team"}
    return job


async def test_rayjobs_queue_run_on_their_ray_cluster_and_release_their_quota(system: System) -> None:
    await system.apply(quota("ray-team", 2, 2))  # 8 CPUs: one sample RayJob (5 CPUs) at a time
    await system.apply(queued_rayjob("first", duration=None))
    await system.wait_phase("first-ray-qu", c.Phase.RUNNING)
    await system.apply(queued_rayjob("second", duration=1))
    await system.wait_phase("second-ray-qu", c.Phase.ENQUEUED)
    second = await system.get_json("rayjob", "second")
    assert second["spec"]["suspend"] is True  # held by the webhook and the controller while it waits
    assert "status" not in second or not second["status"].get("rayClusterName")

    first = await system.get_json("rayjob", "first")
    assert first["status"]["jobDeploymentStatus"] == "Running" and first["spec"]["suspend"] is False
    pods = await system.get_json("pods", "-l", f"{c.LABEL_RAY_CLUSTER}={first['status']['rayClusterName']}")
    assert len(pods["items"]) == 3
    unit = await system.unit("first-ray-qu")
    assert unit["spec"]["consumerRef"]["kind"] == c.RAY_JOB_KIND
    assert unit["status"]["admissionSummary"] == "head=1,small-group=2"

    async def pods_counted() -> bool:  # found by the cluster's name in the RayJob's status, per role
        status = (await system.unit("first-ray-qu"))["status"]
        return status.get("podState") == {"running": 3, "pending": 0} and \
            [a["running"] for a in status["admissions"]] == [1, 2]

    await system.wait_for(pods_counted, what="the Ray cluster's pods counted on the unit, head and workers")
    # The third runs until deleted too: had it taken the quota before second, second would
    # never run. (It ran 1 s, and on a loaded machine it had run and ended by the time the
    # test looked for it waiting.)
    await system.apply(queued_rayjob("third", duration=None))
    await system.wait_phase("third-ray-qu", c.Phase.ENQUEUED)  # behind second, the quota held by first
    await system.akubectl("delete", "rayjob", "first")
    # The quota freed went to second: it ran (for 1 s, too short to be sure to see it Running).
    await system.wait_phase("second-ray-qu", c.Phase.SUCCEED, timeout=30)
    done = await system.get_json("rayjob", "second")
    assert done["status"]["jobStatus"] == "SUCCEEDED"
    await system.wait_phase("third-ray-qu", c.Phase.RUNNING, timeout=30)  # the quota a completed job freed
