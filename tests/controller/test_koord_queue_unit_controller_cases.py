"""Koord-Queue's queue-unit controller tests (pkg/controllers/queueunitcontroller_test.go),
translated case by case: what a Reserved unit's admission checks, as their controllers
write them in status.admissionChecks, make of its phase. Koord-Queue's Backoff is our
TimeoutBackoff (the quota released, the unit back in line after its back-off); its Dequeued
is ours, and the job then runs. The cases that do not carry over are in docs/migration.md."""

from __future__ import annotations

import json

import pytest

from koordqueue.api import constants as c

from .conftest import System, pytorch_job, quota
from .test_lifecycle import queue

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]

CHECKS = ("ad1", "ad2", "ad3")


async def reserved_with_checks(system: System) -> str:
    """A job in a Queue with three admission checks, Reserved with all three Pending."""
    await system.apply(quota("kq-checks", 4, 8))
    await system.apply(queue("kq-checked", "kq-checks", checks=[{"name": name} for name in CHECKS]))
    await system.apply(pytorch_job("checked", queue="kq-checked"))
    unit = "checked-py-qu"
    await system.wait_phase(unit, c.Phase.RESERVED)
    return unit


async def write_checks(system: System, unit: str, states: tuple[str, ...]) -> None:
    """What the checks' controllers write (each its own entry; here all at once)."""
    body = json.dumps({"status": {"admissionChecks": [{"name": n, "state": s} for n, s in zip(CHECKS, states, strict=True)]}})
    await system.akubectl("patch", "queueunit", unit, "--subresource=status", "--type", "merge", "-p", body)


@pytest.mark.parametrize(("states", "phase"), [
    pytest.param(("Ready", "Ready", "Rejected"), c.Phase.TIMEOUT_BACKOFF,
                 id="rejected by admission check controllers"),
    pytest.param(("Ready", "Ready", "Ready"), c.Phase.RUNNING, id="marked ready by admission check controllers"),
])
async def test_update_queue_unit_status(system: System, states: tuple[str, ...], phase: c.Phase) -> None:
    """Test_updateQueueUnitStatus: one check rejecting sends the unit back (Koord-Queue:
    Backoff); all ready dequeue it (and its job runs)."""
    unit = await reserved_with_checks(system)
    await write_checks(system, unit, states)
    said = "admission check ad3 said Rejected; quota released" if phase == c.Phase.TIMEOUT_BACKOFF else None

    async def reached() -> bool:
        status = (await system.unit(unit)).get("status") or {}
        return status.get("phase") == phase and (said is None or status.get("message") == said)

    await system.wait_for(reached, what=f"{unit} {phase} ({said or 'its job running'})")


async def test_update_queue_unit_status_some_ready_others_pending(system: System) -> None:
    """Test_updateQueueUnitStatus/"some of the admission checks are ready and others are
    pending" (its Reserved case): the unit stays Reserved, holding its quota, its job held.
    A second unit whose checks are all written Ready afterwards, and so dequeued, shows the
    controller has read the first's."""
    unit = await reserved_with_checks(system)
    await system.apply(pytorch_job("witness", queue="kq-checked"))
    await system.wait_phase("witness-py-qu", c.Phase.RESERVED)
    await write_checks(system, unit, ("Ready", "Pending", "Ready"))
    await write_checks(system, "witness-py-qu", ("Ready", "Ready", "Ready"))
    await system.wait_phase("witness-py-qu", c.Phase.RUNNING)
    status = (await system.unit(unit))["status"]
    assert status["phase"] == c.Phase.RESERVED
    assert [a["state"] for a in status["admissionChecks"]] == ["Ready", "Pending", "Ready"]
    job = await system.get_json("pytorchjob", "checked")
    assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
