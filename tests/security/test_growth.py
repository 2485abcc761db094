"""Issue 29, item 2: a tenant grows its job after admission. The controller charged the new size
with no fit check: `kubectl patch pytorchjob c -n t2 --type=merge -p
'{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":7}}}}'` on a job admitted with 2 GPUs
left 8 bound and status.used 8 in a quota of max 4, nothing requeued. Now a grown job is
suspended and queued again at its new size (as Kueue stops a job that no longer matches its
Workload), never charged past max; one that shrinks runs on, charged its smaller size. The
job's operator makes the new pods as the controller learns of the change: bound pods are held
to the max once the job is suspended, what is charged all along (see GpuSampler)."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.controller.conftest import System, pytorch_job, quota
from tests.simcluster.conftest import batch_job

from .conftest import GpuSampler, tenant
from .test_suspend_field import in_quota, pods_of

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]


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


async def test_a_pytorchjob_whose_workers_a_tenant_raises_past_max_is_sent_back(system: System) -> None:
    """As the issue ran it: q-t2 max 4 GPUs; c admitted with Master 1 + Worker 1 (2 GPUs), then
    its Worker replicas patched to 7 (8 GPUs)."""
    team = await tenant(system, "t2")
    await system.apply(quota("q-t2", 4, 4, namespace="t2"))
    await team.apply(in_quota(pytorch_job("c", gpus_per_pod=1, namespace="t2"), "t2", "q-t2"))
    await system.wait_phase("c-py-qu", c.Phase.RUNNING, namespace="t2")
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        await team.patch("pytorchjob", "c", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 7}}}})
        settled = await grown_and_sent_back(system, sampler, "t2", "pytorchjob", "c", "c-py-qu",
                                            f"{c.LABEL_JOB_NAME}=c", lambda job: job["spec"]["runPolicy"].get("suspend"),
                                            8)
        await sampler.sample()
    sampler.assert_within_max(bound_after=settled)
    job = await system.get_json("pytorchjob", "c", "-n", "t2")
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 7, "the tenant's size is kept"


async def test_a_batch_job_whose_parallelism_a_tenant_raises_is_sent_back_and_one_shrunk_runs_on(
        system: System) -> None:
    """A batch Job admitted with parallelism 2 (1 GPU each) raised to 8: sent back. Another shrunk
    from 2 to 1 runs on, charged 1."""
    team = await tenant(system, "t2")
    await system.apply(quota("q-t2", 4, 4, namespace="t2"))
    await team.apply(in_quota(batch_job("grows", parallelism=2, completions=8, gpus=1), "t2", "q-t2"),
                     in_quota(batch_job("shrinks", parallelism=2, completions=8, gpus=1), "t2", "q-t2"))
    for name in ("grows", "shrinks"):
        await system.wait_phase(name, c.Phase.RUNNING, namespace="t2")
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        await team.patch("job", "shrinks", {"spec": {"parallelism": 1}})

        async def charged_less() -> bool:
            return await used_gpus(system, "t2", "q-t2") == "3"

        await system.wait_for(charged_less, 30, "q-t2 charged 3 once shrinks asks 1")
        await team.patch("job", "grows", {"spec": {"parallelism": 8}})

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


async def test_an_elastic_pytorchjob_admitted_in_part_whose_workers_a_tenant_raises_is_sent_back(
        system: System) -> None:
    """Master + 3 Workers of 1 GPU, at least 1 Worker, in q-t2 of max 3: admitted with 2 Workers
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
    async with GpuSampler(system, [("t2", "q-t2")]) as sampler:
        await team.patch("pytorchjob", "flex", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}})

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
