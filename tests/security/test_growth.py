"""Issue 29, item 2: a tenant grows its job after admission. The controller charged the new size
with no fit check: `kubectl patch pytorchjob c -n t2 --type=merge -p
'{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":7}}}}'` on a job admitted with 2 GPUs
left 8 bound and status.used 8 in a quota of max 4, nothing requeued. Now a grown job is
suspended and queued again at its new size (as Kueue stops a job that no longer matches its
Workload), never charged past max; one that shrinks runs on, charged its smaller size.

With the validating webhook (registered on both planes), a tenant's UPDATE growing a running
job is refused, as Kueue keeps a running job's pod sets as admitted, and told how to grow it
(suspend it in the same update, or submit it anew): no pod is made, bound pods are within max
from the first sample. Without it (off, or failing open) the controller is the fallback: the
job's operator makes the new pods as the controller learns of the change, and bound pods are
held to the max once the job is suspended, what is charged all along (see GpuSampler)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.webhook import growth, growth_refusal
from koordqueue.jobs.batchjob import BatchJobAdapter
from koordqueue.jobs.pytorchjob import PyTorchJobAdapter
from koordqueue.jobs.raycluster import RayClusterAdapter
from tests.controller.conftest import System, pytorch_job, quota
from tests.controller.test_app_kinds import ray_cluster
from tests.simcluster.conftest import batch_job

from .conftest import GpuSampler, Tenant, patch_through, refused, tenant, validating_webhook_off
from .test_suspend_field import in_quota, pods_of

pytestmark = pytest.mark.timeout(180)
both = pytest.mark.both_control_planes


def grown_by(job: dict[str, Any], change: Any) -> dict[str, Any]:
    new = copy.deepcopy(job)
    change(new)
    return new


def test_growth_is_what_a_running_job_asks_beyond_what_it_had() -> None:
    """Read from each role's pods now (an admission's lowered replicas count, not the ones it
    keeps in koord-queue/placed), suspended jobs left to the controller, never raising."""
    py, batch, ray = PyTorchJobAdapter(), BatchJobAdapter(), RayClusterAdapter()
    running = pytorch_job("c", gpus_per_pod=1, workers=1)
    running["spec"]["runPolicy"] = {"suspend": False}

    def workers(n: int) -> Any:
        return lambda job: job["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=n)

    assert growth(py, running, grown_by(running, workers(7))) == ["Worker 7 pods (had 1)"]
    assert growth(py, running, grown_by(running, workers(0))) == []  # shrinking is allowed
    assert growth(py, running, running) == []

    def gpus(n: int) -> Any:
        def change(job: dict[str, Any]) -> None:
            job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"] = {
                "requests": {c.GPU: str(n)}, "limits": {c.GPU: str(n)}}
        return change

    assert growth(py, running, grown_by(running, gpus(4))) == ["Master nvidia.com/gpu 4 a pod (had 1)"]
    suspended = grown_by(running, lambda job: job["spec"]["runPolicy"].update(suspend=True))
    assert growth(py, running, grown_by(suspended, workers(7))) == []  # suspended with it: the controller's
    assert growth(py, suspended, grown_by(running, workers(7))) == []  # a resume (the unsuspension is checked)
    assert growth(py, running, grown_by(running, lambda job: job.update(spec="broken"))) == []
    job = batch_job("b", parallelism=2, completions=8, gpus=1)
    assert growth(batch, job, grown_by(job, lambda j: j["spec"].update(parallelism=8))) == ["main 8 pods (had 2)"]
    assert growth(batch, job, grown_by(job, lambda j: j["spec"].update(completions=1))) == []
    cluster = ray_cluster("r")
    cluster["spec"]["suspend"] = False
    more = grown_by(cluster, lambda j: j["spec"]["workerGroupSpecs"][0].update(replicas=3))
    assert growth(ray, cluster, more) == ["small 3 pods (had 2)"]
    group = copy.deepcopy(cluster["spec"]["workerGroupSpecs"][0]) | {"groupName": "big"}
    assert growth(ray, cluster, grown_by(cluster, lambda j: j["spec"]["workerGroupSpecs"].append(group))) == \
        ["a new role big of 2 pods"]
    said = growth_refusal(py, grown_by(running, workers(7)) | {"metadata": {"name": "c", "namespace": "t2"}},
                          "c-py-qu", {"status": {"phase": "Running", "admissionSummary": "master=1,worker=1"}},
                          ["Worker 7 pods (had 1)"])
    assert said.startswith("PyTorchJob t2/c is running, its QueueUnit c-py-qu admitted (admitted with master=1,"
                           "worker=1): a running job may shrink but not grow, and this update asks for more "
                           "(Worker 7 pods (had 1)). Suspend it in the same update "
                           '({"spec":{"runPolicy":{"suspend":true}}})'), said


async def used_gpus(system: System, namespace: str, name: str) -> str:
    found = await system.get_json("elasticquota", name, "-n", namespace)
    return str(((found.get("status") or {}).get("used") or {}).get(c.GPU, "0"))


async def grown_and_sent_back(system: System, sampler: GpuSampler, namespace: str, kind: str, name: str,
                              unit: str, selector: str, suspended: Any, gpus: int) -> float:
    """The job `name` grown to `gpus` GPUs: its unit back in the queue, saying why and then that it
    waits for room; its job suspended, its pods gone; its quota charged nothing for it. Returns
    when (`sampler.now()`) its job was seen suspended, its pods gone."""
    async def sent_back() -> bool:
        job = await system.get_json(kind, name, "-n", namespace)
        return suspended(job) is True and not await pods_of(system, namespace, selector)

    await system.wait_for(sent_back, 60, f"{name} suspended, its pods gone")
    settled = sampler.now()
    told = [e for e in await system.events(unit, namespace) if e["reason"] == c.EventReason.SUSPENDED]
    assert told and f"nvidia.com/gpu {gpus} (admitted with" in told[0]["message"], told

    async def waits_at_its_new_size() -> bool:
        status = (await system.unit(unit, namespace)).get("status", {})
        assert status.get("phase") in (c.Phase.ENQUEUED, None), status
        return f"asks {gpus}" in status.get("message", "") and "max 4" in status.get("message", "")

    await system.wait_for(waits_at_its_new_size, 30, f"{unit} waiting at its new size")

    async def released() -> bool:
        return await used_gpus(system, namespace, "q-t2") == "0"

    await system.wait_for(released, 30, "q-t2's status.used back to 0")
    return settled


async def running_c(system: System) -> Tenant:
    """q-t2 max 4 GPUs; c admitted with Master 1 + Worker 1 (2 GPUs), running."""
    team = await tenant(system, "t2")
    await system.apply(quota("q-t2", 4, 4, namespace="t2"))
    await team.apply(in_quota(pytorch_job("c", gpus_per_pod=1, namespace="t2"), "t2", "q-t2"))
    await system.wait_phase("c-py-qu", c.Phase.RUNNING, namespace="t2")
    return team


async def running_batch_jobs(system: System) -> Tenant:
    """q-t2 max 4 GPUs; batch Jobs grows and shrinks admitted with parallelism 2 (1 GPU each), running."""
    team = await tenant(system, "t2")
    await system.apply(quota("q-t2", 4, 4, namespace="t2"))
    await team.apply(in_quota(batch_job("grows", parallelism=2, completions=8, gpus=1), "t2", "q-t2"),
                     in_quota(batch_job("shrinks", parallelism=2, completions=8, gpus=1), "t2", "q-t2"))
    for name in ("grows", "shrinks"):
        await system.wait_phase(name, c.Phase.RUNNING, namespace="t2")
    return team


async def shrink_one(system: System, team: Tenant) -> None:
    """The tenant lowers shrinks' parallelism from 2 to 1: q-t2 is charged 3 GPUs then."""
    await team.patch("job", "shrinks", {"spec": {"parallelism": 1}})

    async def charged_less() -> bool:
        return await used_gpus(system, "t2", "q-t2") == "3"

    await system.wait_for(charged_less, 30, "q-t2 charged 3 once shrinks asks 1")


def is_refused(said: str, job: str, grew: str) -> None:
    assert refused(said) and f"{job} is running" in said and f"this update asks for more ({grew})" in said and \
        "in the same update" in said and "or delete it and submit it anew" in said, said


@both
async def test_a_tenant_cannot_grow_a_running_pytorchjob_and_grows_it_by_suspending_it(system: System) -> None:
    """As the issue ran it: c's Worker replicas patched to 7 (8 GPUs): refused, c runs on with its
    2 pods. Then as the refusal says: suspended in the same update, it is queued at its new size."""
    team = await running_c(system)
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        workers = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 7}}}}
        is_refused(await team.try_patch("pytorchjob", "c", workers), "PyTorchJob t2/c", "Worker 7 pods (had 1)")
        job = await system.get_json("pytorchjob", "c", "-n", "t2")
        assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
        assert len(await pods_of(system, "t2", f"{c.LABEL_JOB_NAME}=c")) == 2
        assert await system.phase("c-py-qu", "t2") == c.Phase.RUNNING
        await team.patch("pytorchjob", "c", {"spec": {**workers["spec"], "runPolicy": {"suspend": True}}})
        await grown_and_sent_back(system, sampler, "t2", "pytorchjob", "c", "c-py-qu", f"{c.LABEL_JOB_NAME}=c",
                                  lambda job: job["spec"]["runPolicy"].get("suspend"), 8)
        await sampler.sample()
    sampler.assert_within_max()


@both
async def test_a_running_pytorchjob_is_not_grown_through_its_scale_subresource(system: System) -> None:
    """`kubectl scale pytorchjob c --replicas=7` (or a HorizontalPodAutoscaler the tenant points
    at its job: the HPA controller may scale anything) on the real control plane, where the
    PyTorchJob CRD has a scale subresource: refused as any growth; scaling down passes. The
    embedded API server serves no scale subresource."""
    team = await running_c(system)
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        said = await system.akubectl("scale", "pytorchjob", "c", "-n", "t2", "--replicas=7", check=False)
        if system.sim is not None:  # (no scale subresource: no way there)
            assert "NotFound" in said, said
            job = await system.get_json("pytorchjob", "c", "-n", "t2")
            assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
            return
        is_refused(said, "PyTorchJob t2/c", "Worker 7 pods (had 1) through its scale subresource")
        assert "Patch the job instead, suspending it in the same update" in said, said
        assert len(await pods_of(system, "t2", f"{c.LABEL_JOB_NAME}=c")) == 2
        await system.akubectl("scale", "pytorchjob", "c", "-n", "t2", "--replicas=0")
        job = await system.get_json("pytorchjob", "c", "-n", "t2")
        assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 0
        assert await system.phase("c-py-qu", "t2") == c.Phase.RUNNING
        await sampler.sample()
    sampler.assert_within_max()
    assert team.namespace == "t2"


@both
async def test_a_tenant_cannot_raise_a_running_batch_jobs_parallelism_but_may_lower_it(system: System) -> None:
    """A batch Job admitted with parallelism 2 (1 GPU each) raised to 8: refused. Another
    lowered from 2 to 1 runs on, charged 1."""
    team = await running_batch_jobs(system)
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        await shrink_one(system, team)
        is_refused(await team.try_patch("job", "grows", {"spec": {"parallelism": 8}}), "Job t2/grows",
                   "main 8 pods (had 2)")
        is_refused(await team.try_patch("job", "shrinks", {"spec": {"parallelism": 2}}), "Job t2/shrinks",
                   "main 2 pods (had 1)")  # (what it gave back is not its own any more)
        assert (await system.get_json("job", "grows", "-n", "t2"))["spec"]["parallelism"] == 2
        await sampler.sample()
    sampler.assert_within_max()
    for name in ("grows", "shrinks"):
        assert await system.phase(name, "t2") == c.Phase.RUNNING


@both
async def test_a_tenant_cannot_raise_an_elastic_pytorchjob_admitted_in_part(system: System) -> None:
    """Master + 3 Workers of 1 GPU, at least 1 Worker, in q-t2 of max 3: admitted with 2 Workers
    (its Worker replicas set to 2 by the admission). Its tenant sets them back to 3: refused."""
    team = await tenant(system, "t2")
    await system.apply(quota("q-t2", 3, 3, namespace="t2"))
    flex = in_quota(pytorch_job("flex", gpus_per_pod=1, workers=3, namespace="t2"), "t2", "q-t2")
    flex["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    await team.apply(flex)
    await system.wait_phase("flex-py-qu", c.Phase.RUNNING, namespace="t2", timeout=60)
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        said = await team.try_patch("pytorchjob", "flex", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}})
        is_refused(said, "PyTorchJob t2/flex", "Worker 3 pods (had 2)")
        assert "(admitted with master=1,worker=2)" in said, said
        await sampler.sample()
    sampler.assert_within_max()
    assert (await system.unit("flex-py-qu", "t2"))["status"]["phase"] == c.Phase.RUNNING


@both
async def test_without_the_webhook_a_pytorchjob_whose_workers_a_tenant_raises_past_max_is_sent_back(
        system: System) -> None:
    """The fallback, as the issue ran it: c's Worker replicas patched to 7 (8 GPUs) with the
    validating webhook off. Its operator may make the new pods before the suspension lands."""
    team = await running_c(system)
    await validating_webhook_off(system)
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        await patch_through(system, team, "pytorchjob", "c",
                            {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 7}}}})
        settled = await grown_and_sent_back(system, sampler, "t2", "pytorchjob", "c", "c-py-qu",
                                            f"{c.LABEL_JOB_NAME}=c", lambda job: job["spec"]["runPolicy"].get("suspend"),
                                            8)
        await sampler.sample()
    sampler.assert_within_max(bound_after=settled)
    job = await system.get_json("pytorchjob", "c", "-n", "t2")
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 7, "the tenant's size is kept"


@both
async def test_without_the_webhook_a_batch_job_whose_parallelism_a_tenant_raises_is_sent_back(
        system: System) -> None:
    """The fallback: a batch Job admitted with parallelism 2 (1 GPU each) raised to 8 with the
    validating webhook off: sent back. Another shrunk from 2 to 1 runs on, charged 1."""
    team = await running_batch_jobs(system)
    await validating_webhook_off(system)
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        await shrink_one(system, team)
        await patch_through(system, team, "job", "grows", {"spec": {"parallelism": 8}})

        async def released() -> bool:
            return await used_gpus(system, "t2", "q-t2") == "1"

        async def sent_back() -> bool:
            job = await system.get_json("job", "grows", "-n", "t2")
            return job["spec"].get("suspend") is True and not await pods_of(
                system, "t2", f"{c.LABEL_BATCH_JOB_NAME}=grows")

        await system.wait_for(sent_back, 60, "grows suspended, its pods gone")
        settled = sampler.now()
        await system.wait_for(released, 30, "q-t2 charged only shrinks' 1")
        status = (await system.unit("grows", "t2")).get("status", {})
        assert status.get("phase") in (c.Phase.ENQUEUED, None), status
        await sampler.sample()
    sampler.assert_within_max(bound_after=settled)
    assert await system.phase("shrinks", "t2") == c.Phase.RUNNING


@both
async def test_without_the_webhook_an_elastic_pytorchjob_admitted_in_part_whose_workers_a_tenant_raises_is_sent_back(
        system: System) -> None:
    """The fallback, with the validating webhook off: Master + 3 Workers of 1 GPU, at least 1 Worker, in q-t2 of max 3: admitted with 2 Workers
    (its Worker replicas set to 2 by the admission, 3 kept in koord-queue/placed). Its tenant
    sets them back to 3: 4 GPUs would be bound, charged 3. It is sent back (its unit's
    podSet still asks 3 Workers: nothing of what it asks grew but its pods), and admitted again
    in part."""
    team = await tenant(system, "t2")
    await system.apply(quota("q-t2", 3, 3, namespace="t2"))
    flex = in_quota(pytorch_job("flex", gpus_per_pod=1, workers=3, namespace="t2"), "t2", "q-t2")
    flex["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    await team.apply(flex)
    await system.wait_phase("flex-py-qu", c.Phase.RUNNING, namespace="t2", timeout=60)
    status = (await system.unit("flex-py-qu", "t2"))["status"]
    assert status["admissionSummary"] == "master=1,worker=2"
    await validating_webhook_off(system)
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        await patch_through(system, team, "pytorchjob", "flex",
                            {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}})

        async def told() -> bool:
            return any(e["reason"] == c.EventReason.SUSPENDED and "worker 3 pods (admitted with 2)" in e["message"]
                       for e in await system.events("flex-py-qu", "t2"))

        await system.wait_for(told, 60, "flex sent back for its raised Workers")

        async def suspended() -> bool:
            job = await system.get_json("pytorchjob", "flex", "-n", "t2")
            return job["spec"]["runPolicy"].get("suspend") is True and not await pods_of(
                system, "t2", f"{c.LABEL_JOB_NAME}=flex")

        await system.wait_for(suspended, 60, "flex suspended, its pods gone")
        settled = sampler.now()
        await system.wait_phase("flex-py-qu", c.Phase.RUNNING, namespace="t2", timeout=60)
        assert (await system.unit("flex-py-qu", "t2"))["status"]["admissionSummary"] == "master=1,worker=2"
        await sampler.sample()
    sampler.assert_within_max(bound_after=settled)
