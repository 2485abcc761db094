"""Issue 29, item 1: a tenant sets its queued job's own suspend field to false, the annotation
`scheduling.x-k8s.io/suspend: "true"` left. The job's operator (the real training operator,
kube-controller-manager's Job controller) reads only the field and makes the pods; the
controller took the annotation for a suspension and let them run: 8 GPUs bound in a quota of
max 4. Now the validating webhook refuses the tenant's UPDATE (as Kueue's ValidateUpdate): no
pod is made, bound pods are within max from the first sample. Without the webhook (off, or
failing open), the field alone says whether a job is suspended: the controller suspends the
job again, its pods go, and it waits its turn; there the operator may make its pods before
the suspension lands (both see the tenant's write at once): bound pods are held to the max
once it has, what is charged all along."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.controller.conftest import System, pytorch_job, quota
from tests.simcluster.conftest import batch_job

from .conftest import GpuSampler, Tenant, patch_through, refused, tenant, validating_webhook_off

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]


def in_quota(job: dict[str, Any], namespace: str, quota_name: str) -> dict[str, Any]:
    job["metadata"]["namespace"] = namespace
    job["metadata"].setdefault("labels", {})[c.LABEL_QUOTA_NAME] = quota_name
    return job


async def pods_of(system: System, namespace: str, selector: str) -> list[dict[str, Any]]:
    return list((await system.get_json("pods", "-n", namespace, "-l", selector))["items"])


async def flip_and_check(system: System, team: Tenant, kind: str, name: str, unit: str, field: dict[str, Any],
                         suspended: Any, selector: str) -> None:
    """The tenant sets the queued job `name`'s own suspend field to false (annotation left): the
    validating webhook refuses it, saying why; nothing of it is bound, ever, its unit queued."""
    async with GpuSampler(system, [(team.namespace, "q-t1")]) as sampler:
        said = await team.try_patch(kind, name, field)
        assert refused(said) and f"{team.namespace}/{name} is queued (QueueUnit {unit} is Enqueued)" in said, said
        job = await system.get_json(kind, name, "-n", team.namespace)
        assert suspended(job) is True
        assert not await pods_of(system, team.namespace, selector)
        assert await system.phase(unit, team.namespace) == c.Phase.ENQUEUED
        await sampler.sample()
    sampler.assert_within_max()


async def flip_without_webhook(system: System, team: Tenant, kind: str, name: str, unit: str,
                               field: dict[str, Any], suspended: Any, selector: str) -> None:
    """The same with the validating webhook off: the patch lands; the controller suspends the job
    again, tells why, its pods go, its unit still queued. Bound pods are held to the max once
    it has (the operator may have made them before: the window only the webhook closes)."""
    await validating_webhook_off(system)
    async with GpuSampler(system, [(team.namespace, "q-t1")]) as sampler:
        await patch_through(system, team, kind, name, field)

        async def suspended_again() -> bool:
            job = await system.get_json(kind, name, "-n", team.namespace)
            assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
            return suspended(job) is True and not await pods_of(system, team.namespace, selector)

        await system.wait_for(suspended_again, 60, f"{name} suspended again, its pods gone")
        settled = sampler.now()
        # (kube-controller-manager's Job controller writes Suspended events of its own)
        warned = [e["message"] for e in await system.events(name, team.namespace)
                  if e["reason"] == c.EventReason.SUSPENDED and e["type"] == c.EventType.WARNING]
        assert warned and all("not admitted" in message for message in warned), warned
        assert await system.phase(unit, team.namespace) == c.Phase.ENQUEUED
        await sampler.sample()
    sampler.assert_within_max(bound_after=settled)


@pytest.mark.parametrize("webhook", [True, False], ids=["webhook", "fallback"])
async def test_a_queued_pytorchjob_whose_runpolicy_a_tenant_unsuspends_stays_suspended(system: System,
                                                                                      webhook: bool) -> None:
    """As the issue ran it: a queued 4-GPU PyTorchJob behind a running one in a quota of max 4,
    then `kubectl patch pytorchjob b -n t1 --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}'`:
    refused; without the webhook, suspended again."""
    team = await tenant(system, "t1")
    await system.apply(quota("q-t1", 4, 4, namespace="t1"))
    await team.apply(in_quota(pytorch_job("a", gpus_per_pod=2, namespace="t1"), "t1", "q-t1"))
    await system.wait_phase("a-py-qu", c.Phase.RUNNING, namespace="t1")
    await team.apply(in_quota(pytorch_job("b", gpus_per_pod=2, namespace="t1"), "t1", "q-t1"))

    async def waiting() -> bool:
        status = (await system.unit("b-py-qu", "t1")).get("status", {})
        return status.get("phase") == c.Phase.ENQUEUED and "max 4" in status.get("message", "")

    await system.wait_for(waiting, what="b waiting for q-t1")
    attack = flip_and_check if webhook else flip_without_webhook
    await attack(system, team, "pytorchjob", "b", "b-py-qu", {"spec": {"runPolicy": {"suspend": False}}},
                 lambda job: job["spec"]["runPolicy"].get("suspend"), f"{c.LABEL_JOB_NAME}=b")
    assert await system.phase("a-py-qu", "t1") == c.Phase.RUNNING


@pytest.mark.parametrize("webhook", [True, False], ids=["webhook", "fallback"])
async def test_a_queued_batch_job_whose_spec_suspend_a_tenant_unsuspends_stays_suspended(system: System,
                                                                                        webhook: bool) -> None:
    """The same with a batch Job (`spec.suspend`, read by kube-controller-manager's Job controller)."""
    team = await tenant(system, "t1")
    await system.apply(quota("q-t1", 4, 4, namespace="t1"))
    await team.apply(in_quota(batch_job("a", parallelism=4, completions=4, gpus=1), "t1", "q-t1"))
    await system.wait_phase("a", c.Phase.RUNNING, namespace="t1")
    await team.apply(in_quota(batch_job("b", parallelism=4, completions=4, gpus=1), "t1", "q-t1"))
    await system.wait_phase("b", c.Phase.ENQUEUED, namespace="t1")
    attack = flip_and_check if webhook else flip_without_webhook
    await attack(system, team, "job", "b", "b", {"spec": {"suspend": False}},
                 lambda job: job["spec"].get("suspend"), f"{c.LABEL_BATCH_JOB_NAME}=b")
    assert await system.phase("a", "t1") == c.Phase.RUNNING
