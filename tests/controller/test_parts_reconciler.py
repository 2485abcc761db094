"""JobReconciler alone, on the in-memory API server: a new job gets its QueueUnit (its job's
spec, owned by the job) and is suspended until admitted, and stays so when reconciled again;
a job that already ran before we started is adopted (its unit accounted as holding quota),
not stopped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller import status as st
from koordqueue.controller.informers import job_resource
from koordqueue.controller.jobswitch import JobSwitch
from koordqueue.controller.quotasync import QuotaSync
from koordqueue.controller.reconciler import UNIT_UNSEEN_SECONDS, JobReconciler
from koordqueue.controller.resources import UNITS
from koordqueue.controller.scheduler import Scheduler
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.controller.unitsync import UnitSync, count_as_admitted, load_unit
from koordqueue.controller.views import adapter_of_kind

from ..engine.builders import quota
from .conftest import pytorch_job
from .fakeapi import Clock, FakeKube, merge_patch, shared_on, until

KIND = c.PYTORCH_JOB_KIND
JOBS = job_resource(KIND)
ADAPTER = adapter_of_kind(KIND)
ITEM = f"{KIND}/default/j"
UNIT_KEY = "default/j-py-qu"


def held(job: dict[str, Any]) -> dict[str, Any]:
    """The job as the webhook leaves it: the annotation and runPolicy.suspend (the field its
    operator reads, and so the one that says whether it is suspended)."""
    return merge_patch(job, ADAPTER.suspend_patch({}))


class Setting:
    """The JobReconciler and the parts it is given, made as controller.py makes them, with the
    informers of units and PyTorchJobs running on the fake."""

    def __init__(self) -> None:
        self.fake = FakeKube()
        self.shared = shared = shared_on(self.fake, Clock())
        queue_settings = QuotaSync(shared).queue_settings
        status = UnitStatusWriter(shared)
        switch = JobSwitch(shared)
        scheduler = Scheduler(shared, status, switch, queue_settings)
        self.reconciler = JobReconciler(shared, UnitSync(shared), status, switch, scheduler, queue_settings)
        self.informers = [shared.informers.unit, shared.informers.jobs[KIND]]

    async def start(self) -> None:
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            await informer.wait_synced(5)

    async def caught_up(self) -> None:
        """Until our views show the unit and the job as they are on the server."""
        def shown() -> bool:
            unit, job = self.shared.informers.unit.get(UNIT_KEY), self.shared.informers.job_view(ITEM)
            return unit is not None and job is not None and \
                unit.resource_version == self.fake.get(UNITS, "j-py-qu", namespace="default")[
                    "metadata"]["resourceVersion"] and job.suspended == ADAPTER.is_suspended(self.job())

        await until(shown)

    def writes(self) -> list[str]:
        out = []
        for r in self.fake.writes():
            what = r.verb
            if r.plural == JOBS.plural and r.verb == "patch":
                suspend = (r.body.get("metadata") or {}).get("annotations", {}).get(c.ANNOTATION_SUSPEND)
                what = "suspend" if suspend == c.TRUE else "resume"
            out.append(f"{what} {r.plural} {r.name}")
        return out

    def job(self) -> dict[str, Any]:
        return self.fake.get(JOBS, "j", namespace="default")

    def events(self) -> list[tuple[str, str]]:
        """The Events emitted since the last call (reason, message), taken from the line."""
        queue, out = self.shared.events.queue, []
        while not queue.empty():
            _, _, reason, message = queue.get_nowait()
            out.append((str(reason), message))
        return out


async def adopt_a_running_job(setting: Setting) -> None:
    """A job of 2 pods of 2 GPUs that ran before we started, in the first sync: reconciled once."""
    job = pytorch_job("j", gpus_per_pod=2, quota_name="team-a")
    job["status"] = {"conditions": [{"type": c.KUBEFLOW_CONDITION_RUNNING, "status": c.CONDITION_TRUE,
                                     "reason": "PyTorchJobRunning", "lastTransitionTime": "2026-12-04T15:00:00Z"}]}
    setting.fake.seed(JOBS, job)
    setting.shared.engine.set_quota(quota("team-a", 4, 8))
    await setting.start()
    setting.shared.initial_jobs = {ITEM}
    await setting.reconciler.reconcile(ITEM)


@pytest.fixture
async def setting() -> AsyncIterator[Setting]:
    s = Setting()
    try:
        yield s
    finally:
        for informer in s.informers:
            await informer.stop()


async def test_a_new_job_gets_its_unit_and_stays_suspended(setting: Setting) -> None:
    """A job created while we run (not suspended by its author): its unit is created, with the
    job's spec and quota label and owned by the job, then the job is suspended. Reconciled
    again once our views show both: nothing more is written, the job stays suspended."""
    setting.fake.seed(JOBS, pytorch_job("j", gpus_per_pod=2, quota_name="team-a"))
    await setting.start()
    job_view = setting.shared.informers.job_view(ITEM)
    assert job_view is not None and not job_view.suspended
    await setting.reconciler.reconcile(ITEM)
    assert setting.writes() == [f"create {UNITS.plural} j-py-qu", f"suspend {JOBS.plural} j"]
    unit = setting.fake.get(UNITS, "j-py-qu", namespace="default")
    assert unit["spec"] == job_view.unit_spec
    assert unit["metadata"]["labels"][c.LABEL_QUOTA_NAME] == "team-a"
    assert [(o["kind"], o["name"], o["uid"]) for o in unit["metadata"]["ownerReferences"]] == [
        (KIND, "j", setting.job()["metadata"]["uid"])]
    assert "status" not in unit  # (its first status comes with the engine's first message)
    assert setting.shared.records.rv(UNIT_KEY) == unit["metadata"]["resourceVersion"]
    assert c.ANNOTATION_SUSPEND in setting.job()["metadata"]["annotations"]
    assert setting.shared.engine.unit(UNIT_KEY) is None  # (UnitSync tells the engine, from the unit's view)
    assert (str(c.EventReason.ENQUEUED), "queued") in setting.events()

    await setting.caught_up()
    for _ in range(2):
        await setting.reconciler.reconcile(ITEM)
    assert len(setting.writes()) == 2
    assert c.ANNOTATION_SUSPEND in setting.job()["metadata"]["annotations"]


async def test_a_job_suspended_by_its_author_gets_its_unit_and_no_write(setting: Setting) -> None:
    setting.fake.seed(JOBS, held(pytorch_job("j", quota_name="team-a")))
    await setting.start()
    await setting.reconciler.reconcile(ITEM)
    assert setting.writes() == [f"create {UNITS.plural} j-py-qu"]


async def test_a_job_that_ran_before_we_started_is_adopted_not_stopped(setting: Setting) -> None:
    """In the first sync's jobs and running: its unit is created, accounted in the engine as
    holding its quota, and written Running; the job is not suspended."""
    await adopt_a_running_job(setting)
    assert setting.writes() == [f"create {UNITS.plural} j-py-qu", f"patch_status {UNITS.plural} j-py-qu"]
    status = setting.fake.get(UNITS, "j-py-qu", namespace="default")["status"]
    assert status["phase"] == c.Phase.RUNNING.value and status["message"] == "adopted: it was already running"
    info = setting.shared.engine.unit(UNIT_KEY)
    assert info is not None and info.admitted_quota == "team-a"
    assert c.ANNOTATION_SUSPEND not in setting.job()["metadata"]["annotations"]


async def test_a_job_reconciled_again_before_our_watch_brings_its_unit_is_not_given_another(
        setting: Setting) -> None:
    """Under load our watch of units lags the job's own updates: a job reconciled again before
    its new unit comes through is not given one again (a create refused as AlreadyExists is a
    request for nothing; kube-apiserver's audit counted 302 creates for 300 jobs). Should the
    unit never come (created and deleted while our watch was away), the job gets one again
    after UNIT_UNSEEN_SECONDS."""
    setting.fake.seed(JOBS, held(pytorch_job("j", quota_name="team-a")))
    jobs = setting.shared.informers.jobs[KIND]  # (the units' informer not started: our watch never brings it)
    jobs.start()
    await jobs.wait_synced(5)
    for _ in range(3):
        await setting.reconciler.reconcile(ITEM)
    assert setting.writes() == [f"create {UNITS.plural} j-py-qu"]
    clock = setting.shared.clock
    assert isinstance(clock, Clock)
    clock.now += UNIT_UNSEEN_SECONDS - 1
    await setting.reconciler.reconcile(ITEM)
    assert len(setting.writes()) == 1
    clock.now += 1
    await setting.fake.delete(UNITS, "j-py-qu", namespace="default")  # gone, unseen
    await setting.reconciler.reconcile(ITEM)
    assert [w for w in setting.writes() if w.startswith("create")] == [f"create {UNITS.plural} j-py-qu"] * 2
    assert setting.fake.get(UNITS, "j-py-qu", namespace="default")["metadata"]["ownerReferences"]


async def test_a_queued_job_whose_field_is_set_to_false_is_suspended_again(setting: Setting) -> None:
    """Issue 29, item 1: a tenant sets runPolicy.suspend false on a queued job and leaves the
    annotation. The training operator reads only the field and makes its pods: the job is not
    suspended, whatever the annotation says, and is suspended again, told why."""
    setting.fake.seed(JOBS, held(pytorch_job("j", quota_name="team-a")))
    await setting.start()
    await setting.reconciler.reconcile(ITEM)
    assert setting.writes() == [f"create {UNITS.plural} j-py-qu"]
    setting.events()
    await setting.fake.patch(JOBS, "j", {"spec": {"runPolicy": {"suspend": False}}}, namespace="default")
    assert setting.job()["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
    await setting.caught_up()
    view = setting.shared.informers.job_view(ITEM)
    assert view is not None and not view.suspended
    await setting.reconciler.reconcile(ITEM)
    assert setting.writes()[2:] == [f"suspend {JOBS.plural} j"]  # (after the tenant's patch)
    assert setting.job()["spec"]["runPolicy"]["suspend"] is True
    assert [reason for reason, _ in setting.events()] == [str(c.EventReason.SUSPENDED)]


async def test_an_admitted_job_that_grew_is_sent_back_and_queued_at_its_new_size(setting: Setting) -> None:
    """Issue 29, item 2: a job admitted with 4 GPUs (Master 1 + Worker 1, 2 each) whose Worker
    replicas its tenant raises to 3 (8 GPUs, its quota's max 4): it is not charged 8 with no
    fit check; its unit is sent back (quota released) and its job suspended; the engine has it
    waiting at its new size."""
    engine = setting.shared.engine
    engine.set_quota(quota("team-a", 4, 4))
    setting.fake.seed(JOBS, held(pytorch_job("j", gpus_per_pod=2, quota_name="team-a")))
    await setting.start()
    await setting.reconciler.reconcile(ITEM)
    await setting.fake.patch_status(UNITS, "j-py-qu", {"status": {
        "phase": c.Phase.RUNNING.value, "lastAllocateTime": "2026-12-04T15:00:00Z"}}, namespace="default")
    await setting.fake.patch(JOBS, "j", ADAPTER.resume_patch({}), namespace="default")  # admitted, running
    await setting.caught_up()
    unit = setting.shared.informers.unit.get(UNIT_KEY)
    assert unit is not None
    count_as_admitted(engine, setting.shared.informers.unit_info(unit), 0.0)
    assert engine.quota_status()["team-a"].used[c.GPU] == 4000
    writes = len(setting.writes())
    await setting.reconciler.reconcile(ITEM)
    assert len(setting.writes()) == writes, "admitted and running as it was admitted: nothing to do"

    await setting.fake.patch(JOBS, "j", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}},
                             namespace="default")
    await setting.caught_up()

    def workers_shown() -> bool:
        view = setting.shared.informers.job_view(ITEM)
        return view is not None and [ps.count for ps in view.pod_sets] == [1, 3]

    await until(workers_shown)
    setting.events()
    await setting.reconciler.reconcile(ITEM)
    stored = setting.fake.get(UNITS, "j-py-qu", namespace="default")["status"]
    assert stored["phase"] == c.Phase.ENQUEUED.value
    assert stored["message"].startswith("it asks for more than it was admitted with: cpu 4 (admitted with 2), "
                                        "memory 4Gi (admitted with 2Gi), nvidia.com/gpu 8 (admitted with 4); "
                                        "suspended, quota released"), stored["message"]
    info = engine.unit(UNIT_KEY)
    assert info is not None and info.admitted_quota is None and info.request[c.GPU] == 8000
    assert engine.quota_status()["team-a"].used.get(c.GPU, 0) == 0
    assert str(c.EventReason.SUSPENDED) in [reason for reason, _ in setting.events()]
    await setting.reconciler.reconcile(ITEM)  # (owed: its job is suspended now)
    assert setting.writes()[-1] == f"suspend {JOBS.plural} j"
    assert setting.job()["spec"]["runPolicy"]["suspend"] is True


@pytest.mark.parametrize("grown", ["replicas", "per pod"])
async def test_a_job_that_grew_while_no_controller_ran_is_sent_back_once_one_does(setting: Setting,
                                                                                    grown: str) -> None:
    """After a restart the engine takes a running unit's size from its job as it is now (and
    its pods from its status's admissions). A job grown meanwhile, by its Worker replicas or
    by its pods' GPUs, is found by what its unit's status says was admitted, and sent back."""
    engine = setting.shared.engine
    engine.set_quota(quota("team-a", 4, 4))
    job = held(pytorch_job("j", gpus_per_pod=2, quota_name="team-a"))
    setting.fake.seed(JOBS, job)
    await setting.start()
    await setting.reconciler.reconcile(ITEM)  # its unit, as we made it
    spec = setting.fake.get(UNITS, "j-py-qu", namespace="default")["spec"]
    status = st.admitted(spec, "team-a", "koord-queue/team-a", [], 1, 0.0)
    await setting.fake.patch_status(UNITS, "j-py-qu", {"status": {**status, "phase": c.Phase.RUNNING.value}},
                                    namespace="default")
    change: dict[str, Any] = {"Worker": {"replicas": 3}} if grown == "replicas" else {
        "Worker": {"template": {"spec": {"containers": [
            {**job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0],
             "resources": {"requests": {c.GPU: "4"}, "limits": {c.GPU: "4"}}}]}}}}
    await setting.fake.patch(JOBS, "j", merge_patch(ADAPTER.resume_patch({}), {"spec": {"pytorchReplicaSpecs": change}}),
                             namespace="default")
    await setting.caught_up()

    def shown() -> bool:
        view = setting.shared.informers.job_view(ITEM)
        return view is not None and view.unit_spec is not None and view.unit_spec["resource"][c.GPU] != "4"

    await until(shown)
    unit = setting.shared.informers.unit.get(UNIT_KEY)
    assert unit is not None
    load_unit(engine, unit, setting.shared.informers.unit_info(unit), 0.0)  # as a controller starting does
    await setting.reconciler.reconcile(ITEM)
    stored = setting.fake.get(UNITS, "j-py-qu", namespace="default")["status"]
    assert stored["phase"] == c.Phase.ENQUEUED.value
    said = "worker 3 pods (admitted with 1)" if grown == "replicas" else "worker nvidia.com/gpu 4 a pod (admitted with 2)"
    assert said in stored["message"], stored["message"]
    info = engine.unit(UNIT_KEY)
    assert info is not None and info.admitted_quota is None


async def test_an_admitted_job_whose_pods_all_succeeded_is_told_to_the_engine_as_done(setting: Setting) -> None:
    """Its operator says the job ended seconds later under load: meanwhile the engine takes
    it for no victim (issue 36: ours preempted such jobs, which only delayed their end).
    A pod of it in any other phase, or made again, and it may be a victim again."""
    from koordqueue.controller.pods import pod_view

    await adopt_a_running_job(setting)
    view = setting.shared.informers.job_view(ITEM)
    assert view is not None
    label, namespace, name = setting.shared.informers.pods_key(view)

    def pod(role: str, phase: str) -> None:
        setting.shared.informers.pods.put(pod_view({
            "metadata": {"name": f"j-{role}-0", "namespace": namespace, "labels": {
                label: name, "training.kubeflow.org/replica-type": role}},
            "status": {"phase": phase}}))

    def done() -> bool:
        return UNIT_KEY in setting.shared.engine._ledger.done

    await setting.caught_up()
    for phases, expected in [(("Running", "Running"), False), (("Succeeded", "Running"), False),
                             (("Succeeded", "Succeeded"), True), (("Succeeded", "Failed"), False),
                             (("Succeeded", "Succeeded"), True), (("Succeeded", "Pending"), False)]:
        for role, phase in zip(("master", "worker"), phases, strict=True):
            pod(role, phase)
        await setting.reconciler.reconcile(ITEM)
        assert done() is expected, phases
