"""Scheduler alone, on the in-memory API server: a cycle's admission is written to its unit's
status and its job resumed after it; an admission whose unit was finished while it waited
its turn is not written; a victim's Preempted lands before the admission that needs its room,
however long it takes to land; a victim finished before its Preempted is written is neither
written Preempted nor charged again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.informers import job_resource
from koordqueue.controller.jobswitch import JobSwitch
from koordqueue.controller.pods import PodView, pod_view
from koordqueue.controller.resources import UNITS
from koordqueue.controller.scheduler import Scheduler
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.controller.views import adapter_of_kind, job_view, queue_unit_manifest
from koordqueue.engine.model import auto_queue_for

from ..engine.builders import parent
from ..engine.builders import quota as engine_quota
from .conftest import pytorch_job
from .fakeapi import Clock, FakeKube, merge_patch, shared_on, status_error, until

KIND = c.PYTORCH_JOB_KIND
ADAPTER = adapter_of_kind(KIND)
JOBS = job_resource(KIND)
ADMITTED = (c.Phase.DEQUEUED.value, c.Phase.RESERVED.value)


class Setting:
    """Quotas `a` and `b` (4 GPUs each, 8 to borrow) under `pool` (8 GPUs) in the engine; the
    Scheduler made as controller.py makes it, with the informers of units and PyTorchJobs
    running on the fake. `submit` does what the job reconciler and UnitSync would: a
    suspended job, its QueueUnit, and the engine told of it."""

    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.fake = FakeKube()
        self.clock = Clock()
        self.shared = shared = shared_on(self.fake, self.clock, config)
        for q in (parent("pool", 8, 8), engine_quota("a", 4, 8, "pool"), engine_quota("b", 4, 8, "pool")):
            shared.engine.set_quota(q)
            if not q.is_parent:
                shared.engine.set_queue(auto_queue_for(q))
        self.status = UnitStatusWriter(shared)
        self.scheduler = Scheduler(shared, self.status, JobSwitch(shared, self.status), {})
        self.informers = [shared.informers.unit, shared.informers.jobs[KIND]]

    async def submit(self, name: str, quota: str, gpus: int) -> str:
        """A job of 2 pods of ``gpus``/2 GPUs each; returns its unit's key."""
        job = merge_patch(pytorch_job(name, gpus_per_pod=gpus // 2, quota_name=quota), ADAPTER.suspend_patch({}))
        self.fake.seed(JOBS, job)
        view = job_view(self.fake.get(JOBS, name, namespace="default"), ADAPTER, {})
        created = self.fake.seed(UNITS, queue_unit_manifest(view))
        self.shared.records.saw(view.unit_key, created["metadata"]["resourceVersion"])
        await until(lambda: view.unit_key in self.shared.informers.unit
                    and self.shared.informers.job_view(f"{KIND}/default/{name}") is not None)
        unit = self.shared.informers.unit.get(view.unit_key)
        assert unit is not None
        info = self.shared.informers.unit_info(unit)
        assert info.invalid is None and info.quota_name == quota
        self.shared.engine.set_unit(info)
        return view.unit_key

    def unit_status(self, key: str) -> dict[str, Any]:
        return self.fake.get(UNITS, key.partition("/")[2], namespace="default").get("status") or {}

    def suspended(self, name: str) -> bool:
        return ADAPTER.is_suspended(self.fake.get(JOBS, name, namespace="default"))

    def landed(self) -> list[str]:
        """The writes that landed, in order: ``unit <name> <phase>`` or ``job <name> suspend|resume``."""
        out = []
        for r in self.fake.writes():
            if r.error is not None:
                continue
            if r.plural == UNITS.plural and r.verb == "patch_status":
                out.append(f"unit {r.name} {r.body['status'].get('phase')}")
            elif r.plural == JOBS.plural and r.verb == "patch":
                suspend = r.body["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
                out.append(f"job {r.name} {'suspend' if suspend else 'resume'}")
        return out


@pytest.fixture
async def running() -> AsyncIterator[Callable[..., Any]]:
    """Makes a Setting and runs its informers and scheduling loop until the test ends."""
    tasks: list[asyncio.Task[None]] = []
    settings: list[Setting] = []

    async def start(config: ControllerConfig | None = None) -> Setting:
        s = Setting(config)
        for informer in s.informers:
            informer.start()
        for informer in s.informers:
            await informer.wait_synced(5)
        tasks.append(asyncio.create_task(s.scheduler.run()))
        settings.append(s)
        return s

    try:
        yield start
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in settings:
            await asyncio.gather(*s.scheduler.admitting, return_exceptions=True)
            for informer in s.informers:
                await informer.stop()


async def test_an_admission_is_written_to_its_unit_then_its_job_resumed(running: Callable[..., Any]) -> None:
    s: Setting = await running()
    key = await s.submit("j", "a", 4)
    s.shared.wake.set()
    await until(lambda: not s.suspended("j"))
    status = s.unit_status(key)
    assert status["phase"] == c.Phase.DEQUEUED.value
    assert status["message"].startswith("admitted into quota a through queue ")
    assert [(a["name"], a["replicas"]) for a in status["admissions"]] == [("master", 1), ("worker", 1)]
    assert s.landed() == ["unit j-py-qu Dequeued", "job j resume"]
    info = s.shared.engine.unit(key)
    assert info is not None and info.admitted_quota == "a"
    # (the status was written on the version we knew, and the version it made is remembered)
    [write] = s.fake.writes(UNITS.plural)
    assert write.body["metadata"]["resourceVersion"] is not None
    assert s.shared.records.rv(key) == write.resource_version


async def test_an_admission_whose_unit_finished_while_it_waited_is_not_written(
        running: Callable[..., Any]) -> None:
    """The admissions' line is full (held here), so the cycle's admission of `j` waits its
    turn; meanwhile its job ends and the engine lets its unit go (as the reconciler's _finish
    does). When its turn comes it is not written, nor is the job resumed."""
    s: Setting = await running(replace(ControllerConfig(), write_concurrency=1))
    key = await s.submit("j", "a", 4)
    asked: list[str] = []
    real = s.status.write

    async def write(key_: str, status: Any, **kwargs: Any) -> bool:
        asked.append(key_)
        return await real(key_, status, **kwargs)

    setattr(s.status, "write", write)  # noqa: B010 (a method of the instance, replaced)
    await s.status.write_limit.acquire()  # the line is full
    s.shared.wake.set()
    await until(lambda: asked == [key])  # the admission waits its turn
    info = s.shared.engine.unit(key)
    assert info is not None and info.admitted_quota == "a"
    s.shared.engine.remove_unit(key)  # finished meanwhile
    s.status.write_limit.release()
    await asyncio.gather(*s.scheduler.admitting)
    assert s.landed() == []
    assert "phase" not in s.unit_status(key)
    assert s.suspended("j")


async def test_a_victims_preempted_lands_before_the_admission_that_needs_its_room(
        running: Callable[..., Any]) -> None:
    """`victim` borrows all 8 GPUs of pool through b; `claim` asks for a's 4 back. The victim's
    Preempted fails once with a 500 and lands 50 ms later: the claim's admission waits for it
    (written together, the objects would show pool holding 12 GPUs of 8)."""
    s: Setting = await running()
    victim = await s.submit("victim", "b", 8)
    s.shared.wake.set()
    await until(lambda: not s.suspended("victim"))
    s.clock.now += 3600  # (past any protection of a recent admission)
    s.fake.requests.clear()
    s.fake.fail_next(status_error(500, "InternalError"), verb="patch_status", name="victim-py-qu",
                     retried_after=0.05)
    claim = await s.submit("claim", "a", 4)
    s.shared.wake.set()
    await until(lambda: s.unit_status(claim).get("phase") in ADMITTED and not s.suspended("claim"))
    assert s.unit_status(victim)["phase"] == c.Phase.PREEMPTED.value
    assert s.landed() == ["unit victim-py-qu Preempted", "unit claim-py-qu Dequeued", "job claim resume"]
    assert s.fake.writes(UNITS.plural, "victim-py-qu")[0].error is not None  # (the slow first attempt)
    assert f"{KIND}/default/victim" in s.shared.owed  # its job is to be suspended (by the reconciler)


def victim_pods(s: Setting, job: str, n: int) -> list[PodView]:
    """``n`` running pods of ``job``, in the pod index (as UnitSync puts them there)."""
    pods = []
    for i in range(n):
        view = pod_view({"metadata": {"name": f"{job}-worker-{i}", "namespace": "default",
                                      "labels": {c.LABEL_JOB_NAME: job, c.LABEL_REPLICA_TYPE: "Worker"}},
                         "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
        assert view is not None
        s.shared.informers.pods.put(view)
        pods.append(view)
    return pods


@pytest.mark.parametrize("pods_go", [True, False])
async def test_a_preemptors_job_waits_for_its_victims_pods_and_its_message_says_so(
        running: Callable[..., Any], pods_go: bool) -> None:
    """`claim` preempts `victim`, whose 2 pods still run: `claim` is admitted (Dequeued, its
    quota held) but its job is not resumed, and its message says what it waits for. Once the
    pods are gone (or the bound, their grace period of 30 s + the 30 s margin, has passed),
    its job is resumed and its message says why."""
    s: Setting = await running()
    victim = await s.submit("victim", "b", 8)
    s.shared.wake.set()
    await until(lambda: not s.suspended("victim"))
    pods = victim_pods(s, "victim", 2)
    s.clock.now += 3600  # (past any protection of a recent admission)
    claim = await s.submit("claim", "a", 4)
    s.shared.wake.set()
    await until(lambda: s.unit_status(claim).get("phase") in ADMITTED)
    admitted = "admitted into quota a through queue koord-queue/a"
    assert s.unit_status(claim)["message"] == (
        f"{admitted}; waiting for 2 pods of preempted unit {victim} to terminate; its job is resumed once they "
        "have, or after 1m at most (their grace period and a margin)")
    job = s.shared.informers.job_view(f"{KIND}/default/claim")
    assert job is not None
    await s.scheduler.switch.resume(job)  # (the job reconciler's look: the pods are still there)
    assert s.suspended("claim")
    admitted_at = s.shared.engine.unit(claim).admitted_at  # type: ignore[union-attr]
    assert s.scheduler.switch.pods_timed_from(claim, admitted_at, 0.0) is None  # (no pods to time yet)
    if pods_go:
        for pod in pods:
            s.shared.informers.pods.remove(pod)
        said = f"{admitted}; the pods of preempted unit {victim} have terminated: its job is resumed"
    else:
        s.clock.now += 59
        await s.scheduler.switch.resume(job)
        assert s.suspended("claim")  # (1 s short of the bound)
        s.clock.now += 1
        said = (f"{admitted}; its job is resumed though 2 pods of preempted unit {victim} had not terminated "
                "after 1m (their grace period and a margin)")
    await s.scheduler.switch.resume(job)
    assert not s.suspended("claim")
    assert s.unit_status(claim)["message"] == said
    # wait-for-pods-running times its pods from now on, not from its admission
    assert s.scheduler.switch.pods_timed_from(claim, admitted_at, 0.0) == s.clock.now
    assert s.unit_status(claim)["phase"] == c.Phase.DEQUEUED.value


@pytest.mark.parametrize("preemption_fails", [True, False], ids=["preemption-conflicts", "preemption-lands"])
async def test_a_victim_finished_before_its_preempted_is_written_holds_no_quota(
        running: Callable[..., Any], preemption_fails: bool) -> None:
    """The chaos run found it (seed 20261204, quota team-05 charged 8 GPUs by units all
    Succeed): a controller restarted before it wrote job-00210's Succeed took its unit for
    running and preempted it; its job's reconciler wrote Succeed first (the engine let go of
    it), then the Preempted write failed (409) and the scheduler charged the unit again, as
    if its object still held quota. Nothing let go of it after that: its quota charged 8 GPUs
    for good. Here `victim`'s unit is finished while its Preempted waits for the unit's lock:
    the Preempted is not written on top of Succeed, and the engine charges nothing for it."""
    s: Setting = await running()
    victim = await s.submit("victim", "b", 8)
    s.shared.wake.set()
    await until(lambda: not s.suspended("victim"))
    s.clock.now += 3600  # (past any protection of a recent admission)
    real = s.status.write
    staged: list[str] = []

    async def write(key: str, status: Any, **kwargs: Any) -> bool:
        if key == victim and status.get("phase") == c.Phase.PREEMPTED.value and not staged:
            staged.append(key)
            # Its job's reconciler has the unit's lock first: Succeed written, the unit let go
            # of (as Reconciler._finish does).
            await real(key, {"phase": c.Phase.SUCCEED.value, "message": "the job succeeded"})
            s.shared.engine.remove_unit(key)
            if preemption_fails:
                s.fake.fail_next(status_error(409, "Conflict"), verb="patch_status", name="victim-py-qu")
        return await real(key, status, **kwargs)

    setattr(s.status, "write", write)  # noqa: B010 (a method of the instance, replaced)
    claim = await s.submit("claim", "a", 4)
    s.shared.wake.set()
    await until(lambda: s.unit_status(claim).get("phase") in ADMITTED)
    assert s.unit_status(victim)["phase"] == c.Phase.SUCCEED.value
    assert s.shared.engine.unit(victim) is None, "the finished victim is charged again"
    used = s.shared.engine.quota_status()
    assert used["b"].used.get(c.GPU, 0) == 0
    assert used["a"].used.get(c.GPU, 0) == 4000
    assert f"{KIND}/default/victim" not in s.shared.owed  # (its job ended: no suspension owed)
