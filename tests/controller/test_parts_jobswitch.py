"""JobSwitch alone, on the in-memory API server: a job's suspensions and resumes land one at
a time in the order they were decided, even when the first is slow to land (a failed attempt
the client retries), and a suspension owed is paid only by one that landed."""

from __future__ import annotations

import asyncio
import copy

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.informers import job_resource
from koordqueue.controller.jobswitch import JobSwitch
from koordqueue.controller.views import JobView, adapter_of_kind, job_view
from koordqueue.engine.model import Placement, UnitInfo
from koordqueue.kube.errors import Conflict, ConnectionFailed

from ..engine.builders import quota
from .conftest import pytorch_job
from .fakeapi import Clock, FakeKube, shared_on, status_error, until

KIND = c.PYTORCH_JOB_KIND
ADAPTER = adapter_of_kind(KIND)
JOBS = job_resource(KIND)
ITEM = f"{KIND}/default/j"


def setting(clock: Clock | None = None) -> tuple[FakeKube, JobSwitch, JobView]:
    """A PyTorchJob `j`, running, whose unit the engine holds admitted in quota `q`."""
    fake = FakeKube()
    fake.seed(JOBS, pytorch_job("j"))
    shared = shared_on(fake, clock)
    switch = JobSwitch(shared)
    job = job_view(fake.get(JOBS, "j", namespace="default"), ADAPTER, {})
    ns, _, name = job.unit_key.partition("/")
    shared.engine.set_quota(quota("q", 8, 8))
    shared.engine.set_unit(UnitInfo(namespace=ns, name=name, priority=0, created=0.0, request={},
                                    quota_name="q", admitted_quota="q"))
    return fake, switch, job


def landed(fake: FakeKube) -> list[str]:
    """The job's writes as the server took them: suspend or resume, and how each attempt ended."""
    out = []
    for r in fake.writes(JOBS.plural, "j"):
        suspend = r.body["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
        out.append(("suspend" if suspend else "resume") + (f" failed ({type(r.error).__name__})" if r.error else ""))
    return out


@pytest.mark.parametrize("first", ["suspend", "resume"])
async def test_a_write_slow_to_land_lands_before_the_one_decided_after_it(first: str) -> None:
    """The first write's first attempt fails with a 500 and is retried 50 ms later; the other
    is decided meanwhile. It waits for the first to land: the job ends as the last decision
    says, and the server saw the writes in the order decided."""
    fake, switch, job = setting()
    if first == "resume":
        # (the job starts running: suspend it first, out of the log, for the resume to change it)
        await fake.patch(JOBS, "j", ADAPTER.suspend_patch({}), namespace="default")
        fake.requests.clear()
        job = job_view(fake.get(JOBS, "j", namespace="default"), ADAPTER, {})
    second = "resume" if first == "suspend" else "suspend"

    def decide(what: str) -> asyncio.Task[None]:
        return asyncio.create_task(switch.suspend(job, ADAPTER) if what == "suspend" else switch.resume(job))

    fake.fail_next(status_error(500, "InternalError"), verb="patch", name="j", retried_after=0.05)
    one = decide(first)
    await until(lambda: len(fake.requests) == 1)  # the first attempt failed; the retry is on its way
    two = decide(second)
    await asyncio.gather(one, two)
    assert landed(fake) == [f"{first} failed (ServerError)", first, second]
    assert ADAPTER.is_suspended(fake.get(JOBS, "j", namespace="default")) == (second == "suspend")


async def test_a_suspension_owed_is_paid_only_by_one_that_landed() -> None:
    """The job's unit was sent back: a suspension is owed. The first one fails (the server
    could not be reached): still owed. The reconciler's next one lands: paid."""
    fake, switch, job = setting()
    switch.shared.owed.owe(ITEM)
    fake.fail_next(ConnectionFailed("unreachable"), verb="patch", name="j")
    with pytest.raises(ConnectionFailed):
        await switch.suspend(job, ADAPTER)
    assert ITEM in switch.shared.owed
    assert not ADAPTER.is_suspended(fake.get(JOBS, "j", namespace="default"))
    await switch.suspend(job, ADAPTER)
    assert ITEM not in switch.shared.owed
    assert ADAPTER.is_suspended(fake.get(JOBS, "j", namespace="default"))
    assert landed(fake) == ["suspend failed (ConnectionFailed)", "suspend"]


async def test_a_suspension_owed_anew_while_one_was_on_its_way_stays_owed() -> None:
    """Sent back twice: the suspension sent for the first debt pays that one only."""
    fake, switch, job = setting()
    owed = switch.shared.owed
    owed.owe(ITEM)
    fake.fail_next(status_error(503, "ServiceUnavailable"), verb="patch", name="j", retried_after=0.05)
    writing = asyncio.create_task(switch.suspend(job, ADAPTER))
    await until(lambda: len(fake.requests) == 1)
    owed.owe(ITEM)
    await writing
    assert ITEM in owed
    await switch.suspend(job, ADAPTER)
    assert ITEM not in owed


async def test_a_job_is_resumed_once_and_not_when_its_unit_was_sent_back() -> None:
    """Two resumes of the same admission (the cycle's and the reconciler's) write once; a
    resume that finds the unit no longer admitted writes nothing."""
    clock = Clock()
    fake, switch, job = setting(clock)
    await fake.patch(JOBS, "j", ADAPTER.suspend_patch({}), namespace="default")
    fake.requests.clear()
    job = job_view(fake.get(JOBS, "j", namespace="default"), ADAPTER, {})
    await asyncio.gather(switch.resume(job), switch.resume(job))
    assert landed(fake) == ["resume"]
    switch.engine.revert_admission(job.unit_key)
    clock.now += 60  # (past the wait before a resume not seen yet is sent again)
    await switch.resume(job)
    assert landed(fake) == ["resume"]


async def test_a_resume_our_view_does_not_show_yet_is_not_written_again() -> None:
    """Our view of the job lags behind our resume (a loaded kube-apiserver's watch, 5 s and
    more): the job is not resumed again while the view is older than what the resume wrote. A
    second resume, with a new dequeue time, landed while the Job controller wrote the Job's
    status from the first and made it retry after a back-off (bench/hold_timeline.py: 51 of
    260 resumes in a loaded 1/10 run, each Job controller 409 on those Jobs after one of
    ours). Once the view is newer than our resume and says suspended (someone suspended it
    since), it is resumed again at once."""
    clock = Clock()
    fake, switch, job = setting(clock)
    informer = switch.informers.jobs[KIND]

    async def seen() -> JobView:  # our watch brings the job as the server has it now
        obj = fake.get(JOBS, "j", namespace="default")
        view = job_view(obj, ADAPTER, {})
        await informer._store("default/j", obj["metadata"]["resourceVersion"], view)
        return view

    await fake.patch(JOBS, "j", ADAPTER.suspend_patch({}), namespace="default")
    job = await seen()
    fake.requests.clear()
    await switch.resume(job)
    assert landed(fake) == ["resume"]
    clock.now += 60  # the watch has not brought the resume in a minute
    await switch.resume(job)
    assert landed(fake) == ["resume"]
    await fake.patch(JOBS, "j", ADAPTER.suspend_patch({}), namespace="default")  # someone else's suspension
    job = await seen()
    await switch.resume(job)
    assert landed(fake) == ["resume", "suspend", "resume"]


async def test_a_suspension_or_a_finishing_resume_our_view_does_not_show_yet_is_not_written_again() -> None:
    """The same for our other writes of a job's suspension, decided again from a view older
    than the last one (in a loaded 1/10 run: preempted jobs suspended twice, ended ones resumed
    twice for their controller to mark them finished): not written again while no suspension
    is owed. A suspension owed is written whatever the view says."""
    fake, switch, job = setting()
    informer = switch.informers.jobs[KIND]
    obj = fake.get(JOBS, "j", namespace="default")
    await informer._store("default/j", obj["metadata"]["resourceVersion"], job)  # running, as seen
    await switch.suspend(job, ADAPTER)
    await switch.suspend(job, ADAPTER)  # the view still says running: ours is on its way back
    assert landed(fake) == ["suspend"]
    await switch.let_finish(job, ADAPTER)
    await switch.let_finish(job, ADAPTER)
    assert landed(fake) == ["suspend", "resume"]
    switch.shared.owed.owe(ITEM)
    await switch.suspend(job, ADAPTER)
    assert landed(fake) == ["suspend", "resume", "suspend"]


async def test_a_resume_decided_from_a_view_older_than_the_newest_one_is_not_written() -> None:
    """A caller decided from a view taken before our resume came back (the reconciler awaits
    between reading the view and resuming): our newest view shows the job running, so the resume
    is not written again, however long after (a loaded 1/50 run resumed 11 Jobs twice so)."""
    clock = Clock()
    fake, switch, job = setting(clock)
    informer = switch.informers.jobs[KIND]
    await fake.patch(JOBS, "j", ADAPTER.suspend_patch({}), namespace="default")
    obj = fake.get(JOBS, "j", namespace="default")
    stale = job_view(obj, ADAPTER, {})
    await informer._store("default/j", obj["metadata"]["resourceVersion"], stale)
    fake.requests.clear()
    await switch.resume(stale)
    obj = fake.get(JOBS, "j", namespace="default")  # our watch brings the resume back
    await informer._store("default/j", obj["metadata"]["resourceVersion"], job_view(obj, ADAPTER, {}))
    clock.now += 60
    await switch.resume(stale)
    assert landed(fake) == ["resume"]


RAY_CLUSTERS = job_resource(c.RAY_CLUSTER_KIND)


def ray_setting() -> tuple[FakeKube, JobSwitch, JobView, Placement]:
    """A suspended RayCluster `rc` (a head, worker groups gpu and cpu) whose unit the engine holds
    admitted into flavor `a100`, and the admission's placement: every role pinned to A100."""
    from tests.jobs.test_app_kinds import RAY_CLUSTER

    fake = FakeKube()
    cluster = copy.deepcopy(RAY_CLUSTER)
    cluster["spec"]["suspend"] = True
    fake.seed(RAY_CLUSTERS, cluster)
    shared = shared_on(fake, None)
    switch = JobSwitch(shared)
    adapter = adapter_of_kind(c.RAY_CLUSTER_KIND)
    job = job_view(fake.get(RAY_CLUSTERS, "rc", namespace="default"), adapter, {})
    ns, _, name = job.unit_key.partition("/")
    shared.engine.set_quota(quota("a100", 8, 8))
    shared.engine.set_unit(UnitInfo(namespace=ns, name=name, priority=0, created=0.0, request={},
                                    quota_name="a100", admitted_quota="a100"))
    pins = (("nvidia.com/gpu.product", "A100"),)
    placement = Placement(domains=tuple((role, c.FLAVOR_LEVEL, pins) for role in ("head", "gpu", "cpu")))
    return fake, switch, job, placement


async def test_a_ray_clusters_resume_pins_its_head_and_each_worker_group_over_the_version_read() -> None:
    """A merge patch writes the worker groups' list whole: the resume reads the RayCluster, pins
    each group's template in that list, and writes it over that version only."""
    fake, switch, job, placement = ray_setting()
    version = fake.get(RAY_CLUSTERS, "rc", namespace="default")["metadata"]["resourceVersion"]
    await switch.resume(job, placement)
    (write,) = fake.writes(RAY_CLUSTERS.plural, "rc")
    assert write.body["metadata"]["resourceVersion"] == version
    spec = fake.get(RAY_CLUSTERS, "rc", namespace="default")["spec"]
    assert spec["suspend"] is False
    templates = [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
    assert [t["spec"]["nodeSelector"] for t in templates] == [{"nvidia.com/gpu.product": "A100"}] * 3
    assert [g["groupName"] for g in spec["workerGroupSpecs"]] == ["gpu", "cpu"]


async def test_a_ray_cluster_whose_worker_group_went_since_our_view_is_not_resumed_unpinned() -> None:
    fake, switch, job, placement = ray_setting()
    await fake.patch(RAY_CLUSTERS, "rc", {"spec": {"workerGroupSpecs": [
        fake.get(RAY_CLUSTERS, "rc", namespace="default")["spec"]["workerGroupSpecs"][0]]}}, namespace="default")
    fake.requests.clear()
    with pytest.raises(Conflict, match="cpu to pin are no longer in workerGroupSpecs"):
        await switch.resume(job, placement)
    assert fake.writes(RAY_CLUSTERS.plural, "rc") == []
    assert fake.get(RAY_CLUSTERS, "rc", namespace="default")["spec"]["suspend"] is True
