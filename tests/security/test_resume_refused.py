"""Issue 29, item 12: a resume refused for good must not hold quota for ever. A tenant fills its
queued job's annotations up to the API server's size limit: every write that adds one (our
resume stamps when it was let run) is refused. Once admitted, the job cannot be resumed; after
the controller's bound its unit is sent back and the quota goes to the next job."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.kube.client import Resource
from tests.controller.conftest import System, SystemFactory, pytorch_job, quick_config, quota

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

PYTORCH_JOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
ANNOTATIONS_LIMIT = 256 * 1024  # kube-apiserver's total of annotations' keys and values
PAD = "example.com/pad"


async def _pad_annotations(system: System, name: str) -> None:
    """Annotations up to the limit, exactly: any write that adds a byte is refused."""
    job = await system.get_json("pytorchjob", name)
    annotations: dict[str, str] = job["metadata"].get("annotations") or {}
    used = sum(len(k) + len(v) for k, v in annotations.items())
    await system.client.patch(PYTORCH_JOBS, name, {"metadata": {"annotations": {
        PAD: "x" * (ANNOTATIONS_LIMIT - used - len(PAD))}}}, namespace="default")


async def _status(system: System, unit: str) -> dict[str, Any]:
    return dict((await system.unit(unit)).get("status") or {})


async def test_a_job_that_cannot_be_resumed_gives_its_quota_back(start_system: SystemFactory) -> None:
    async with start_system(config=quick_config(resume_refused_seconds=3.0)) as system:
        await system.apply(quota("team-r", 0, 2))
        await system.apply(pytorch_job("first", gpus_per_pod=2, workers=0, quota_name="team-r"))
        await system.wait_phase("first-py-qu", c.Phase.RUNNING)
        await system.apply(pytorch_job("stuck", gpus_per_pod=2, workers=0, quota_name="team-r", priority=5),
                           pytorch_job("next", gpus_per_pod=2, workers=0, quota_name="team-r", priority=1))
        await system.wait_phase("stuck-py-qu", c.Phase.ENQUEUED)
        await _pad_annotations(system, "stuck")
        await system.akubectl("delete", "pytorchjob", "first")

        async def sent_back() -> bool:
            status = await _status(system, "stuck-py-qu")
            return "its job could not be resumed for 3 s" in str(status.get("message"))

        await system.wait_for(sent_back, 60, "the unit whose job cannot be resumed sent back")
        await system.wait_phase("next-py-qu", c.Phase.RUNNING, timeout=60)
        stuck = await system.get_json("pytorchjob", "stuck")
        assert stuck["spec"]["runPolicy"]["suspend"] is True
        reasons = [e["reason"] for e in await system.events("stuck-py-qu")]
        assert c.EventReason.TIMEOUT_BACKOFF.value in reasons, reasons
