"""Issue 29, item 12: QueueUnit names are the job's name plus its kind's suffix, so a batch Job
named `train-py-qu` wants PyTorchJob `train`'s unit. The second job is told
(`QueueUnitNameTaken`) and kept suspended, even when its tenant unsuspends it by hand; it gets a
unit of its own once the name is free."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.controller.conftest import System, pytorch_job, quota
from tests.simcluster.conftest import batch_job

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]


async def _told(system: System) -> list[str]:
    return [e["message"] for e in await system.events("train-py-qu")
            if e["involvedObject"]["kind"] == c.BATCH_JOB_KIND
            and e["reason"] == c.EventReason.QUEUE_UNIT_NAME_TAKEN.value]


async def test_a_job_whose_unit_name_is_taken_waits_suspended_and_says_so(system: System) -> None:
    await system.apply(quota("team-n", 0, 8))
    await system.apply(pytorch_job("train", gpus_per_pod=2, workers=0, quota_name="team-n"))
    await system.wait_phase("train-py-qu", c.Phase.RUNNING)
    job = batch_job("train-py-qu", parallelism=8, completions=8, suspend=True)
    job["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: "team-n"}
    await system.apply(job)

    told = await system.wait_for(lambda: _told(system), what="the Job told its unit's name is taken")
    assert told == ["not queued: its QueueUnit train-py-qu is the unit of PyTorchJob default/train; this job "
                    "waits, suspended, until that unit is gone (rename one of the two jobs)"]
    unit = await system.unit("train-py-qu")
    assert (unit["spec"]["consumerRef"]["kind"], unit["spec"]["consumerRef"]["name"]) == (c.PYTORCH_JOB_KIND, "train")

    # Its tenant lets it run by hand (the webhook may refuse that: then nothing changes either).
    patch = {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: None}}, "spec": {"suspend": False}}
    await system.akubectl("patch", "job", "train-py-qu", "--type=merge", "-p", json.dumps(patch), check=False)

    async def suspended_without_pods() -> bool:
        found = await system.get_json("job", "train-py-qu")
        pods = await system.get_json("pods", "-l", f"{c.LABEL_BATCH_JOB_NAME}=train-py-qu")
        live = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
        return found["spec"].get("suspend") is True and not live

    await system.wait_for(suspended_without_pods, what="the Job suspended again, with no pod")
    assert len(await _told(system)) == 1  # told once

    # The name freed, the Job gets its own unit and runs.
    await system.akubectl("delete", "pytorchjob", "train")

    async def its_own_unit() -> dict[str, Any] | None:
        found = await system.unit("train-py-qu")
        return found if found["spec"]["consumerRef"]["kind"] == c.BATCH_JOB_KIND else None

    await system.wait_for(its_own_unit, 60, "the Job's own unit")
    await system.wait_phase("train-py-qu", c.Phase.RUNNING, timeout=60)
