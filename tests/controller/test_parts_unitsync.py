"""UnitSync alone, on the in-memory API server: once the first sync is over, a new unit waits
in the engine asking for what its job asks, its job queued for the reconciler; a unit the
engine never saw that says it holds quota is accounted as holding it; a finished unit and a
deleted job leave the engine."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.informers import job_resource
from koordqueue.controller.resources import PODS, UNITS
from koordqueue.controller.unitsync import UnitSync, grown
from koordqueue.controller.views import adapter_of_kind, job_view, queue_unit_manifest

from ..engine.builders import quota
from ..jobs.helpers import load
from ..jobs.test_app_kinds import RAY_CLUSTER
from .conftest import pytorch_job
from .fakeapi import Clock, FakeKube, merge_patch, shared_on, until

KIND = c.PYTORCH_JOB_KIND
ADAPTER = adapter_of_kind(KIND)
JOBS = job_resource(KIND)
ITEM = f"{KIND}/default/j"
KEY = "default/j-py-qu"


class Setting:
    """UnitSync wired to the informers of units and PyTorchJobs on the fake, the first sync over."""

    def __init__(self) -> None:
        self.fake = FakeKube()
        self.shared = shared = shared_on(self.fake, Clock())
        shared.engine.set_quota(quota("team-a", 4, 8))
        self.sync = UnitSync(shared)
        self.sync.wire()
        self.informers = [shared.informers.unit, shared.informers.jobs[KIND]]

    async def start(self) -> None:
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            await informer.wait_synced(5)
        self.shared.sync_done = True

    async def submit(self, status: dict[str, Any] | None = None) -> None:
        """A suspended job of 2 pods of 2 GPUs each, then, once our view shows the job, its unit
        (with ``status``, if given)."""
        job = merge_patch(pytorch_job("j", gpus_per_pod=2, quota_name="team-a"), ADAPTER.suspend_patch({}))
        self.fake.seed(JOBS, job)
        await until(lambda: self.shared.informers.job_view(ITEM) is not None)
        unit = queue_unit_manifest(job_view(self.fake.get(JOBS, "j", namespace="default"), ADAPTER, {}))
        if status is not None:
            unit["status"] = status
        self.fake.seed(UNITS, unit)


@pytest.fixture
async def setting() -> AsyncIterator[Setting]:
    s = Setting()
    await s.start()
    try:
        yield s
    finally:
        for informer in s.informers:
            await informer.stop()


async def test_a_new_unit_waits_with_its_jobs_ask_and_leaves_when_finished(setting: Setting) -> None:
    setting.shared.wake.clear()
    await setting.submit()
    await until(lambda: setting.shared.engine.unit(KEY) is not None)
    info = setting.shared.engine.unit(KEY)
    assert info is not None and info.admitted_quota is None and info.quota_name == "team-a"
    assert info.request[c.GPU] == 4000  # the job's two pods of 2 GPUs (milli-units)
    assert setting.shared.wake.is_set()
    await until(lambda: len(setting.shared.jobs_queue) >= 1)
    assert await setting.shared.jobs_queue.get() == ITEM
    await setting.fake.patch_status(UNITS, "j-py-qu", {"status": {"phase": c.Phase.SUCCEED.value}},
                                    namespace="default")
    await until(lambda: setting.shared.engine.unit(KEY) is None)


async def test_a_unit_that_says_it_holds_quota_is_accounted_as_holding_it(setting: Setting) -> None:
    """After a restart (or an upgrade): the engine never saw the unit, whose object says
    Running; it holds its quota in the engine, and is dropped when its job is deleted."""
    await setting.submit({"phase": c.Phase.RUNNING.value, "lastAllocateTime": "2026-12-04T15:00:00Z"})
    await until(lambda: setting.shared.engine.unit(KEY) is not None)
    info = setting.shared.engine.unit(KEY)
    assert info is not None and info.admitted_quota == "team-a"
    await setting.fake.delete(JOBS, "j", namespace="default")
    await until(lambda: setting.shared.engine.unit(KEY) is None)


RAY_ITEM = f"{c.RAY_JOB_KIND}/default/rayjob-sample"
UNIT = "default/rayjob-sample-ray-qu"


async def test_a_rayjobs_pods_reach_it_by_its_ray_clusters_name() -> None:
    """KubeRay labels a RayJob's pods with its Ray cluster only (ray.io/cluster; the RayJob is
    named on the RayCluster, not on them): a pod's change reaches the RayJob through the name
    of the cluster in its status, and its pods' nodes are told for its unit. Once KubeRay
    names another cluster (suspended, then run again), the old cluster's pods reach it no more."""
    fake = FakeKube()
    shared = shared_on(fake, Clock())
    told: dict[str, dict[tuple[str, str], int]] = {}  # what the engine was last told of each unit's bound pods
    shared.engine.set_unit_pods = lambda key, pods: told.__setitem__(key, dict(pods))  # type: ignore[method-assign]
    UnitSync(shared).wire()
    informers = [shared.informers.pod, shared.informers.jobs[c.RAY_JOB_KIND]]
    for informer in informers:
        informer.start()
    try:
        for informer in informers:
            await informer.wait_synced(5)
        shared.sync_done = True
        rayjobs = job_resource(c.RAY_JOB_KIND)
        job = {**load("rayjob.yaml"), "status": {"rayClusterName": "rayjob-sample-x7k2b"}}
        fake.seed(rayjobs, job)
        await until(lambda: shared.informers.job_view(RAY_ITEM) is not None)
        assert await shared.jobs_queue.get() == RAY_ITEM
        shared.jobs_queue.done(RAY_ITEM)

        def pod(name: str, cluster: str, group: str) -> dict[str, Any]:
            return {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default", "labels": {
                        c.LABEL_RAY_CLUSTER: cluster, c.LABEL_RAY_GROUP: group, c.LABEL_RAY_IS_RAY_NODE: "yes",
                        c.LABEL_RAY_NODE_TYPE: "head" if group == c.RAY_HEAD_GROUP else "worker"}},
                    "spec": {"nodeName": "node-1", "containers": [{"name": "ray", "resources": {
                        "requests": {"cpu": "1"}}}]},
                    "status": {"phase": "Running"}}

        fake.seed(PODS, pod("head", "rayjob-sample-x7k2b", c.RAY_HEAD_GROUP))
        assert await asyncio.wait_for(shared.jobs_queue.get(), 5) == RAY_ITEM  # the pod's change reached it
        shared.jobs_queue.done(RAY_ITEM)
        view = shared.informers.job_view(RAY_ITEM)
        assert view is not None and shared.informers.pod_count(view).running_by_role == {"head": 1}
        assert told.get(UNIT) == {("head", "node-1"): 1}

        # Suspended and run again: KubeRay's new cluster. A pod of the old one reaches it no more.
        await fake.patch_status(rayjobs, "rayjob-sample", {"status": {"rayClusterName": "rayjob-sample-q9w4z"}},
                                namespace="default")
        await until(lambda: (shared.informers.job_view(RAY_ITEM) or view).pods == (c.LABEL_RAY_CLUSTER,
                                                                                   "rayjob-sample-q9w4z"))
        assert await shared.jobs_queue.get() == RAY_ITEM
        shared.jobs_queue.done(RAY_ITEM)
        assert told.get(UNIT) == {}
        fake.seed(PODS, pod("old-worker", "rayjob-sample-x7k2b", "small-group"))
        fake.seed(PODS, pod("new-head", "rayjob-sample-q9w4z", c.RAY_HEAD_GROUP))
        assert await asyncio.wait_for(shared.jobs_queue.get(), 5) == RAY_ITEM
        shared.jobs_queue.done(RAY_ITEM)
        assert told.get(UNIT) == {("head", "node-1"): 1}
        assert len(shared.jobs_queue) == 0
    finally:
        for informer in informers:
            await informer.stop()


async def test_an_admitted_job_is_never_charged_more_than_it_was_admitted_with(setting: Setting) -> None:
    """Issue 29, item 2: a job admitted with 4 GPUs whose Worker replicas its tenant raises (8
    GPUs, past team-a's max) is still charged 4 (its reconciler sends it back to be queued at
    its new size); one that shrinks is charged its smaller size at once."""
    await setting.submit({"phase": c.Phase.RUNNING.value, "lastAllocateTime": "2026-12-04T15:00:00Z"})
    await until(lambda: setting.shared.engine.unit(KEY) is not None)
    engine = setting.shared.engine

    async def workers(n: int) -> None:
        await setting.fake.patch(JOBS, "j", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": n}}}},
                                 namespace="default")

        def shown() -> bool:
            view = setting.shared.informers.job_view(ITEM)
            return view is not None and [ps.count for ps in view.pod_sets] == [1, n]

        await until(shown)

    await workers(3)
    info = engine.unit(KEY)
    assert info is not None and info.admitted_quota == "team-a" and info.request[c.GPU] == 4000
    assert [ps.count for ps in info.pod_sets] == [1, 1]
    assert engine.quota_status()["team-a"].used[c.GPU] == 4000
    await workers(0)
    info = engine.unit(KEY)
    assert info is not None and info.admitted_quota == "team-a" and info.request[c.GPU] == 2000
    assert engine.quota_status()["team-a"].used[c.GPU] == 2000


def _raised(job: dict[str, Any], *path: Any) -> dict[str, Any]:
    """`job` with the count at `path` raised by 3."""
    out = copy.deepcopy(job)
    at = out
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = at.get(path[-1], 1) + 3
    return out


@pytest.mark.parametrize(("job", "path"), [
    (pytorch_job("p", gpus_per_pod=1), ("spec", "pytorchReplicaSpecs", "Worker", "replicas")),
    (merge_patch(load("batchjob.yaml"), {"spec": {"completions": 10}}), ("spec", "parallelism")),
    (RAY_CLUSTER, ("spec", "workerGroupSpecs", 0, "replicas")),
], ids=["PyTorchJob Worker replicas", "Job parallelism", "RayCluster worker group"])
def test_the_growths_the_issue_names_are_growths(job: dict[str, Any], path: tuple[Any, ...]) -> None:
    """Issue 29, item 2: each is seen as asking for more than before (and so never charged
    without a fit check once admitted)."""
    adapter = adapter_of_kind(job["kind"])
    before, after = adapter.demand(job), adapter.demand(_raised(job, *path))
    assert grown(before, after), (before, after)
    assert not grown(after, before)  # (shrinking is no growth)


async def test_an_admitted_jobs_pods_all_succeeded_reach_the_engine_from_the_pods_event() -> None:
    """Not when the job's worker comes to it (under load, after the preemption it is to
    prevent): the pod's own event tells the engine the unit is done, and a pod made
    again that it is not."""
    setting = Setting()
    pods = setting.shared.informers.pod
    setting.informers.append(pods)
    await setting.start()
    try:
        await setting.submit({"phase": c.Phase.RUNNING.value, "lastAllocateTime": "2026-12-04T15:00:00Z"})
        await until(lambda: setting.shared.engine.unit(KEY) is not None)

        def pod(role: str, phase: str) -> dict[str, Any]:
            return {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"j-{role}-0", "namespace": "default", "labels": {
                        "training.kubeflow.org/job-name": "j", "training.kubeflow.org/replica-type": role}},
                    "spec": {"containers": [{"name": "pytorch"}]}, "status": {"phase": phase}}

        def done() -> bool:
            return KEY in setting.shared.engine._ledger.done

        setting.fake.seed(PODS, pod("master", "Succeeded"))
        setting.fake.seed(PODS, pod("worker", "Running"))
        await until(lambda: setting.shared.informers.pods.count(
            "training.kubeflow.org/job-name", "default", "j").running == 1)
        assert not done()
        await setting.fake.patch_status(PODS, "j-worker-0", {"status": {"phase": "Succeeded"}}, namespace="default")
        await until(done)
        setting.fake.seed(PODS, pod("worker-again", "Pending"))
        await until(lambda: not done())
    finally:
        for informer in setting.informers:
            await informer.stop()
