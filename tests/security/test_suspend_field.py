"""Issue 29, item 1: a tenant sets its queued job's own suspend field to false, the annotation
`scheduling.x-k8s.io/suspend: "true"` left. The job's operator (the real training operator,
kube-controller-manager's Job controller) reads only the field and makes the pods; the
controller took the annotation for a suspension and let them run: 8 GPUs bound in a quota of
max 4. Now the field alone says whether a job is suspended: the job is suspended again, its
pods go, and it waits its turn. The operator may make its pods before the suspension lands
(both see the tenant's write at once): bound pods are held to the max from then on, what is
charged all along; a webhook refusing the UPDATE (issue 29, item 10) closes the rest."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.controller.conftest import System, pytorch_job, quota
from tests.simcluster.conftest import batch_job

from .conftest import GpuSampler, Tenant, tenant

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]


def in_quota(job: dict[str, Any], namespace: str, quota_name: str) -> dict[str, Any]:
    job["metadata"]["namespace"] = namespace
    job["metadata"].setdefault("labels", {})[c.LABEL_QUOTA_NAME] = quota_name
    return job


async def pods_of(system: System, namespace: str, selector: str) -> list[dict[str, Any]]:
    return list((await system.get_json("pods", "-n", namespace, "-l", selector))["items"])


async def flip_and_check(system: System, team: Tenant, kind: str, name: str, unit: str, field: dict[str, Any],
                         suspended: Any, selector: str) -> None:
    """The tenant sets the queued job `name`'s own suspend field to false (annotation left); while
    the sampler runs: the job is suspended again, told why, its pods gone, its unit still queued."""
    async with GpuSampler(system, [(team.namespace, "q-t1")]) as sampler:
        await team.patch(kind, name, field)

        async def suspended_again() -> bool:
            job = await system.get_json(kind, name, "-n", team.namespace)
            assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
            return suspended(job) is True and not await pods_of(system, team.namespace, selector)

        await system.wait_for(suspended_again, 60, f"{name} suspended again, its pods gone")
        settled = sampler.now()  # (before it, the operator may have made its pods: see GpuSampler)
        # (kube-controller-manager's Job controller writes Suspended events of its own)
        warned = [e["message"] for e in await system.events(name, team.namespace)
                  if e["reason"] == c.EventReason.SUSPENDED and e["type"] == c.EventType.WARNING]
        assert warned and all("not admitted" in message for message in warned), warned
        assert await system.phase(unit, team.namespace) == c.Phase.ENQUEUED
        await sampler.sample()
    sampler.assert_within_max(bound_after=settled)


async def test_a_queued_pytorchjob_whose_runpolicy_a_tenant_unsuspends_is_suspended_again(system: System) -> None:
    """As the issue ran it: a queued 4-GPU PyTorchJob behind a running one in a quota of max 4,
    then `kubectl patch pytorchjob b -n t1 --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}'`."""
    team = await tenant(system, "t1")
    await system.apply(quota("q-t1", 4, 4, namespace="t1"))
    await team.apply(in_quota(pytorch_job("a", gpus_per_pod=2, namespace="t1"), "t1", "q-t1"))
    await system.wait_phase("a-py-qu", c.Phase.RUNNING, namespace="t1")
    await team.apply(in_quota(pytorch_job("b", gpus_per_pod=2, namespace="t1"), "t1", "q-t1"))

    async def waiting() -> bool:
        status = (await system.unit("b-py-qu", "t1")).get("status", {})
        return status.get("phase") == c.Phase.ENQUEUED and "max 4" in status.get("message", "")

    await system.wait_for(waiting, what="b waiting for q-t1")
    await flip_and_check(system, team, "pytorchjob", "b", "b-py-qu", {"spec": {"runPolicy": {"suspend": False}}},
                         lambda job: job["spec"]["runPolicy"].get("suspend"), f"{c.LABEL_JOB_NAME}=b")
    assert await system.phase("a-py-qu", "t1") == c.Phase.RUNNING


async def test_a_queued_batch_job_whose_spec_suspend_a_tenant_unsuspends_is_suspended_again(system: System) -> None:
    """The same with a batch Job (`spec.suspend`, read by kube-controller-manager's Job controller)."""
    team = await tenant(system, "t1")
    await system.apply(quota("q-t1", 4, 4, namespace="t1"))
    await team.apply(in_quota(batch_job("a", parallelism=4, completions=4, gpus=1), "t1", "q-t1"))
    await system.wait_phase("a", c.Phase.RUNNING, namespace="t1")
    await team.apply(in_quota(batch_job("b", parallelism=4, completions=4, gpus=1), "t1", "q-t1"))
    await system.wait_phase("b", c.Phase.ENQUEUED, namespace="t1")
    await flip_and_check(system, team, "job", "b", "b", {"spec": {"suspend": False}},
                         lambda job: job["spec"].get("suspend"), f"{c.LABEL_BATCH_JOB_NAME}=b")
    assert await system.phase("a", "t1") == c.Phase.RUNNING
