"""Pod-level resources (spec.resources, PodLevelResources: on since Kubernetes 1.34) are charged
as kube-scheduler reserves them, on both control planes: a Job whose pods ask 8 cpu at pod level
(1 in their container) waits against a quota of max 4 cpu, while one asking 2 runs; both API
servers keep the pod-level resources of its template."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.simcluster.conftest import batch_job

from .conftest import System, quota

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]


def pod_level_job(name: str, cpu: str) -> dict[str, Any]:
    job = batch_job(name, parallelism=1, completions=1, gpus=0)
    job["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: "plr"}
    job["spec"]["template"]["spec"]["resources"] = {"requests": {c.CPU: cpu}}
    return job


async def test_a_job_asking_more_cpu_at_pod_level_than_its_quota_has_waits(system: System) -> None:
    await system.apply(quota("plr", 1, 1))  # max 4 cpu
    await system.apply(pod_level_job("fits", "2"))
    await system.wait_phase("fits", c.Phase.RUNNING, timeout=60)
    await system.apply(pod_level_job("big", "8"))
    said = ""

    async def waits() -> bool:
        nonlocal said
        status = (await system.unit("big")).get("status", {})
        said = status.get("message", "")
        return status.get("phase") == c.Phase.ENQUEUED and "cpu asks 8" in said

    await system.wait_for(waits, 60, "big to wait for cpu")
    assert "max 4" in said, said
    big = await system.get_json("job", "big")
    assert big["spec"]["suspend"] is True
    # Both API servers keep pod-level resources on a pod template (kube-apiserver 1.37: PodLevelResources on).
    assert big["spec"]["template"]["spec"]["resources"] == {"requests": {c.CPU: "8"}}
