"""An admission is written only while the engine still holds it: one that waits its turn to
be written (the admissions' line is full) while its unit is finished must not land after
that, on a unit whose quota the engine has given to another since.

The chaos run found it (issue 20, seed 151878639: quota team-10 holding 14 GPUs of max 12):
job-00483 ended while its unit, preempted just before, was admitted again by a cycle;
that admission waited its turn while the job's reconciler wrote the unit Succeed and the
engine let go of its quota; job-00517 was admitted into that room, and then the waiting
admission landed, on top of Succeed, so that both held quota in the objects. Here that
admission is held back before its turn, as a full line does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.kube.client import Resource

from .conftest import pytorch_job, quota, running_system
from .test_lagging_views import checked

pytestmark = pytest.mark.timeout(120)
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
ADMITTED = (c.Phase.DEQUEUED.value, c.Phase.RESERVED.value)


class HeldAdmissions:
    """Holds the admissions of unit `key` before their turn to be written (before the unit's
    lock, where a full line of admissions keeps them) until `let_go()`."""

    def __init__(self, writer: UnitStatusWriter, key: str) -> None:
        self.held = 0
        self.written: list[bool] = []  # what each held write returned once let go
        self._gate = asyncio.Event()
        real = writer.write

        async def write(key_: str, status: Any, **kwargs: Any) -> bool:
            if key_ != key or status.get("phase") not in ADMITTED or "lastAllocateTime" not in status:
                return await real(key_, status, **kwargs)
            self.held += 1
            await self._gate.wait()
            written = await real(key_, status, **kwargs)
            self.written.append(written)
            return written

        setattr(writer, "write", write)  # noqa: B010 (a method of the instance, replaced)

    def let_go(self) -> None:
        self._gate.set()


async def test_an_admission_waiting_its_turn_is_not_written_once_its_unit_finished(tmp_path: Path) -> None:
    """`first` is admitted into all of team's 4 GPUs; its admission waits its turn. Its job
    ends meanwhile (it had run before), so its unit is finished and the engine lets its
    quota go, to `second`. Then the waiting admission has its turn: it is not written, and
    team never holds more than its max."""
    async with running_system(tmp_path / "state") as system:
        checker = checked(system)
        ctl = system.controller
        held = HeldAdmissions(ctl.unit_status, "default/first-py-qu")
        await system.apply(quota("team", 4, 4))
        await system.apply(pytorch_job("first", gpus_per_pod=2, quota_name="team", duration=1.0))

        async def admission_waiting() -> bool:
            return held.held >= 1

        await system.wait_for(admission_waiting, 30, "first's admission to wait its turn")
        succeeded = {"type": c.KUBEFLOW_CONDITION_SUCCEEDED, "status": c.CONDITION_TRUE,
                     "reason": "PyTorchJobSucceeded", "lastTransitionTime": "2026-12-04T15:54:45Z"}
        await system.client.patch_status(JOBS, "first", {"status": {"conditions": [succeeded]}}, namespace="default")
        await system.wait_phase("first-py-qu", c.Phase.SUCCEED)
        await system.apply(pytorch_job("second", gpus_per_pod=2, quota_name="team", duration=1.0))

        async def second_admitted() -> bool:
            unit = checker.units.get("default/second-py-qu")
            return unit is not None and unit.epoch >= 1

        await system.wait_for(second_admitted, 30, "second to be admitted into the room first left")
        held.let_go()

        async def turn_had() -> bool:
            return bool(held.written)

        await system.wait_for(turn_had, 30, "first's admission to have its turn")
        await system.wait_phase("second-py-qu", c.Phase.SUCCEED, timeout=60)
        assert checker.violations == []
        assert held.written == [False], "first's admission was written after its unit finished"
        assert checker.units["default/first-py-qu"].epoch == 0
        assert await system.phase("first-py-qu") == c.Phase.SUCCEED.value
