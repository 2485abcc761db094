"""Issue 29, item 3: a tenant opts out of the queue by claiming its job was made by another.

A batch Job or a RayCluster that a job we queue made for itself (KubeRay's, for a RayJob)
is queued through that job, not on its own. The claim is an ownerReference or a label the
tenant writes: trusted only when the owner is there with that uid and is of a kind that
makes such jobs; else the job is queued as any (suspended as it is created, a unit of its
own, admitted only as its quota allows)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.controller.conftest import System, SystemFactory, pytorch_job, quota
from tests.controller.test_app_kinds import ray_cluster
from tests.simcluster.conftest import batch_job
from tests.simcluster.test_rayjob import rayjob

pytestmark = pytest.mark.timeout(120)

QUOTA = "q-forge"  # max 4 GPUs


def gpu_job(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A batch Job of 8 pods of 1 GPU in QUOTA, made by the tenant with ``owner`` as its controller."""
    job = batch_job(name, parallelism=8, completions=8)
    del job["spec"]["suspend"]  # the tenant says nothing of suspension
    job["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: QUOTA}
    job["metadata"]["ownerReferences"] = [{**owner, "controller": True, "blockOwnerDeletion": True}]
    return job


async def create(system: System, obj: dict[str, Any]) -> dict[str, Any]:
    """Create as the tenant does; the object as the create request stored it."""
    return dict(json.loads(await system.akubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(obj))))


async def units(system: System) -> list[str]:
    return sorted(u["metadata"]["name"] for u in (await system.get_json("queueunits"))["items"])


async def pods_of_job(system: System, name: str) -> list[dict[str, Any]]:
    return list((await system.get_json("pods", "-l", f"{c.LABEL_BATCH_JOB_NAME}={name}"))["items"])


@pytest.mark.both_control_planes
async def test_a_job_whose_owner_is_not_there_is_suspended_as_it_is_created(system: System) -> None:
    """The issue's repro: a Job of parallelism 8 whose controller is a PyTorchJob that does not
    exist ran 6 GPUs past a quota of 4 (kube-controller-manager's garbage collector deletes it
    some time later; nothing of ours stopped it)."""
    await system.apply(quota(QUOTA, 4, 4))
    ghost = {"apiVersion": "kubeflow.org/v1", "kind": c.PYTORCH_JOB_KIND, "name": "ghost", "uid": str(uuid.uuid4())}
    stored = await create(system, gpu_job("forged", ghost))
    assert stored["spec"]["suspend"] is True
    assert stored["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
    # A RayCluster claiming, by KubeRay's label alone, to be a RayJob's: suspended too.
    cluster = ray_cluster("labelled")
    cluster["metadata"]["labels"].update({c.LABEL_RAY_ORIGINATED_FROM_CRD: c.RAY_JOB_KIND,
                                          c.LABEL_RAY_ORIGINATED_FROM_CR_NAME: "ghost", c.LABEL_QUOTA_NAME: QUOTA})
    stored = await create(system, cluster)
    assert stored["spec"]["suspend"] is True
    await system.wait_for(lambda: system.unit("labelled-raycluster-qu"), what="the RayCluster's own unit")


@pytest.mark.both_control_planes
async def test_a_job_claiming_a_real_owner_of_a_kind_that_makes_no_jobs_is_queued(system: System) -> None:
    """The owner is there, with its uid (any tenant reads it), but a PyTorchJob makes no batch
    Jobs: the Job is queued on its own, waits (8 GPUs can never fit a max of 4), and no pod
    of it is made."""
    await system.apply(quota(QUOTA, 4, 4), pytorch_job("pt", workers=0, quota_name=QUOTA, duration=600))
    uid = (await system.get_json("pytorchjob", "pt"))["metadata"]["uid"]
    stored = await create(system, gpu_job("borrowed", {"apiVersion": "kubeflow.org/v1", "kind": c.PYTORCH_JOB_KIND,
                                                      "name": "pt", "uid": uid}))
    assert stored["spec"]["suspend"] is True
    await system.wait_phase("borrowed", c.Phase.ENQUEUED)
    await system.wait_phase("pt-py-qu", c.Phase.RUNNING)  # the controller keeps admitting
    job = await system.get_json("job", "borrowed")
    assert job["spec"]["suspend"] is True
    assert await pods_of_job(system, "borrowed") == []


@pytest.mark.both_control_planes
async def test_a_job_claiming_its_tenants_own_queued_rayjob_is_queued_and_kept_suspended(system: System) -> None:
    """A RayJob is there, with its uid, and does make Jobs: but KubeRay makes them only once
    it runs. One claiming a RayJob still queued (suspended) is the tenant's own, to run beside
    it: suspended as it is created, and not let run by the tenant (as Kueue keeps a child
    suspended while its parent is not admitted)."""
    owner = rayjob("rj")
    owner["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: "no-such-quota"}  # it waits for ever
    await system.apply(owner)
    await system.wait_phase("rj-ray-qu", c.Phase.ENQUEUED)
    uid = (await system.get_json("rayjob", "rj"))["metadata"]["uid"]
    stored = await create(system, gpu_job("rj", {"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_JOB_KIND,
                                                 "name": "rj", "uid": uid}))
    assert stored["spec"]["suspend"] is True
    await system.wait_phase("rj", c.Phase.ENQUEUED)  # queued on its own: not the submitter KubeRay makes
    said = await system.akubectl("patch", "job", "rj", "--type=merge", "-p", '{"spec":{"suspend":false}}', check=False)
    assert "denied the request" in said and "Job default/rj is queued (QueueUnit rj is " in said, said
    assert await pods_of_job(system, "rj") == []


async def running_rayjob(system: System) -> dict[str, Any]:
    """A RayJob "rj" of QUOTA (5 CPUs, no GPU) admitted and let run, as a tenant's; as an owner
    reference names it."""
    await system.apply(quota(QUOTA, 4, 4))
    owner = rayjob("rj", duration=600)
    owner["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: QUOTA}
    await system.apply(owner)

    async def let_run() -> bool:  # (no KubeRay on the real control plane: it runs no pod)
        return (await system.get_json("rayjob", "rj"))["spec"].get("suspend") is False

    await system.wait_for(let_run, what="the RayJob admitted and let run")
    uid = (await system.get_json("rayjob", "rj"))["metadata"]["uid"]
    return {"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_JOB_KIND, "name": "rj", "uid": uid}


@pytest.mark.both_control_planes
async def test_a_job_claiming_a_running_rayjob_is_queued_unless_it_is_the_submitter_kuberay_makes(
        system: System) -> None:
    """A RayJob that runs is there with its uid, and does make Jobs: a tenant's Job of 8 GPUs
    naming it as its controller ran unqueued past a quota of 4. KubeRay makes one Job for it,
    named as the RayJob and as small as its default submitter: any other is queued as any,
    suspended as it is created, waiting (8 GPUs never fit a max of 4), no pod of it made."""
    owner = await running_rayjob(system)
    for name in ("free", "rj"):  # another name; the submitter's name, asking more than a submitter
        stored = await create(system, gpu_job(name, owner))
        assert stored["spec"]["suspend"] is True, name
        await system.wait_phase(name, c.Phase.ENQUEUED)
        assert await pods_of_job(system, name) == [], name
    await system.akubectl("delete", "job", "rj", "--wait=true")
    submitter = gpu_job("rj", owner)  # as KubeRay makes it: its default submitter's requests
    submitter["spec"].update(parallelism=1, completions=1)
    submitter["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    stored = await create(system, submitter)
    assert not stored["spec"].get("suspend"), "KubeRay's submitter is run by its RayJob's admission"
    assert "rj-ray-qu" in await units(system) and "rj" not in await units(system)


@pytest.mark.both_control_planes
async def test_a_raycluster_claiming_a_running_rayjob_is_queued_unless_named_and_sized_as_its_own(
        system: System) -> None:
    """KubeRay names the RayJob's cluster in its status (which a tenant cannot write) and makes
    it from the RayJob's rayClusterSpec: a RayCluster under another name, or asking more than
    the RayJob, is the tenant's own and queued as any."""
    owner = await running_rayjob(system)
    await system.akubectl("patch", "rayjob", "rj", "--subresource=status", "--type=merge",
                          "-p", json.dumps({"status": {"rayClusterName": "rj-abcde"}}))
    for name, workers in (("rj-other", 2), ("rj-abcde", 8)):  # not its name; its name, 4x the workers
        cluster = ray_cluster(name)
        cluster["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: QUOTA}
        cluster["spec"]["workerGroupSpecs"][0]["replicas"] = workers
        cluster["spec"]["workerGroupSpecs"][0]["maxReplicas"] = workers
        cluster["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
        stored = await create(system, cluster)
        assert stored["spec"]["suspend"] is True, name
        await system.wait_for(lambda n=name: system.unit(f"{n}-raycluster-qu"), what=f"{name}'s own unit")
        await system.akubectl("delete", "raycluster", name, "--wait=true")


@pytest.mark.both_control_planes
async def test_kuberays_own_cluster_found_at_start_is_not_queued(start_system: SystemFactory) -> None:
    """At a start, a RayJob's own RayCluster is judged once the RayJobs are known (their
    informer synced first): else its owner would look missing and the cluster be queued."""
    async def prepare(system: System) -> None:
        await system.apply(rayjob("rj"))
        await system.akubectl("patch", "rayjob", "rj", "--subresource=status", "--type=merge",
                              "-p", json.dumps({"status": {"rayClusterName": "rj-raycluster-abcde"}}))
        uid = (await system.get_json("rayjob", "rj"))["metadata"]["uid"]
        made = ray_cluster("rj-raycluster-abcde")
        made["metadata"]["ownerReferences"] = [{"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_JOB_KIND,
                                                "name": "rj", "uid": uid, "controller": True}]
        await system.apply(made)

    async with start_system(prepare=prepare) as system:
        await system.wait_for(lambda: system.unit("rj-ray-qu"), what="the RayJob's unit")
        assert await units(system) == ["rj-ray-qu"]
