"""Quotas on the cluster: tenants kept apart, borrowed GPUs reclaimed, Queues made for
quotas, bad quotas reported, a hand edit of a unit undone."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.controller.loading import look_now, take_snapshot

from .conftest import System, pytorch_job, quota

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]


def namespace(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def test_a_job_naming_another_tenants_quota_is_refused_with_a_clear_message(system: System) -> None:
    await system.apply(namespace("team-a"), namespace("team-b"))
    await system.apply(quota("team-a", 2, 8, namespace="team-a"), quota("team-b", 2, 8, namespace="team-b"))
    # By label, and by the annotation naming the other tenant's Queue.
    await system.apply(pytorch_job("sneaky", namespace="team-b", quota_name="team-a"),
                       pytorch_job("sneaky-queue", namespace="team-b", queue="team-a"),
                       pytorch_job("honest", namespace="team-b"))
    await system.wait_phase("honest-py-qu", c.Phase.RUNNING, namespace="team-b")
    expected = "quota team-a is not bound to namespace team-b (it belongs to namespace team-a)"
    for name in ("sneaky", "sneaky-queue"):
        async def refused(name: str = name) -> bool:
            status = (await system.unit(f"{name}-py-qu", "team-b")).get("status", {})
            assert status.get("message") == expected and status.get("phase") == c.Phase.ENQUEUED, status
            return True

        await system.wait_for(refused, what=f"{name} refused")
        job = await system.get_json("pytorchjob", name, "-n", "team-b")
        assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
        warnings = [e for e in await system.events(name, "team-b") if e["type"] == c.EventType.WARNING]
        assert [e["message"] for e in warnings] == [expected]
    quota_a = await system.get_json("elasticquota", "team-a", "-n", "team-a")
    assert quota_a["status"]["used"][c.GPU] == "0"


async def test_a_quota_under_its_min_reclaims_borrowed_gpus_from_another(system: System) -> None:
    """32 GPUs in the cluster; team-b borrows all of them, then team-a (min 16) comes."""
    await system.apply(quota("pool", 32, 32, is_parent=True))
    await system.apply(quota("team-a", 16, 32, parent="pool"), quota("team-b", 16, 32, parent="pool"))
    await system.apply(*[pytorch_job(f"b{i}", gpus_per_pod=4, quota_name="team-b") for i in range(4)])
    for i in range(4):
        await system.wait_phase(f"b{i}-py-qu", c.Phase.RUNNING)
    await system.apply(pytorch_job("a0", gpus_per_pod=4, priority=100, quota_name="team-a"))
    await system.wait_phase("a0-py-qu", c.Phase.RUNNING)
    phases = [await system.phase(f"b{i}-py-qu") for i in range(4)]
    # One victim is enough (8 GPUs); it is told why and goes back to the queue.
    victims = [f"b{i}" for i, p in enumerate(phases) if p != c.Phase.RUNNING]
    assert len(victims) == 1, phases
    # Told why on the unit's Preempted event (its status moves on to the back-off, then the queue).
    preempted = [e for e in await system.events(f"{victims[0]}-py-qu") if e["reason"] == c.EventReason.PREEMPTED]
    assert preempted and "team-b" in preempted[0]["message"] and "reclaimed" in preempted[0]["message"], preempted
    assert [e for e in await system.events(victims[0]) if e["reason"] == c.EventReason.PREEMPTED], \
        "the job is told it was preempted"
    job = await system.get_json("pytorchjob", victims[0])
    assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE and job["spec"]["runPolicy"]["suspend"]

    async def no_pods() -> bool:  # the training operator deletes them once the job is suspended again
        return not (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}={victims[0]}"))["items"]

    await system.wait_for(no_pods, what="the victim's pods deleted")


async def test_the_jobs_of_a_quota_made_invalid_while_they_run_still_count_in_its_parent(system: System) -> None:
    """Seen on the real control plane: team-a's max edited below its min while two of its
    jobs ran; pool, max 16, then admitted team-b's jobs up to 24 GPUs."""
    await system.apply(quota("pool", 16, 16, is_parent=True))
    await system.apply(quota("team-a", 8, 16, parent="pool"), quota("team-b", 8, 16, parent="pool"))
    await system.apply(*[pytorch_job(f"a{i}", gpus_per_pod=2, duration=600, quota_name="team-a") for i in range(2)])
    for i in range(2):
        await system.wait_phase(f"a{i}-py-qu", c.Phase.RUNNING)
    await system.apply(quota("team-a", 8, 4, parent="pool"))

    async def invalid() -> bool:
        return any("more than its max" in e["message"] for e in await system.events("team-a"))

    await system.wait_for(invalid, what="team-a reported invalid")
    await system.apply(*[pytorch_job(f"b{i}", gpus_per_pod=2, duration=600, quota_name="team-b") for i in range(4)])
    for i in range(2):
        await system.wait_phase(f"b{i}-py-qu", c.Phase.RUNNING)

    async def pool_full() -> bool:  # b2 and b3 told why they wait: a0 and a1 still count in pool
        for i in (2, 3):
            status = (await system.unit(f"b{i}-py-qu")).get("status", {})
            assert status.get("phase") in (None, c.Phase.ENQUEUED), status
            if not status.get("message", "").startswith("waiting for quota team-b: nvidia.com/gpu asks 4; "
                                                          "its parent quota pool has used 16 of max 16"):
                raise AssertionError(i, status)
        return True

    await system.wait_for(pool_full, what="b2 and b3 waiting for pool")
    pool = await system.get_json("elasticquota", "pool")
    assert pool["status"]["used"][c.GPU] == "16", pool["status"]
    # Loaded from the objects, as a controller started again (and `koord-queue status`)
    # loads them: a0 and a1 still count in pool, and b2 does not fit.
    snap = await take_snapshot(system.client)
    assert snap.engine.quota_status()["pool"].used[c.GPU] == 16_000
    assert look_now(snap, time.time()) == {}, "the controller's next cycle would admit none"


async def test_a_quota_deleted_and_made_again_while_its_job_runs_gets_its_usage_written(system: System) -> None:
    """Seen on the real control plane: made again, the quota's status.used was never written
    (what it had to say was what had been written to the one deleted)."""
    await system.apply(quota("team-a", 0, 8))
    await system.apply(pytorch_job("a0", gpus_per_pod=2, duration=600, quota_name="team-a"))
    await system.wait_phase("a0-py-qu", c.Phase.RUNNING)

    async def used_written() -> bool:
        made = await system.get_json("elasticquota", "team-a")
        assert made["status"]["used"][c.GPU] == "4", made.get("status")
        return True

    await system.wait_for(used_written, what="team-a's usage written")
    await system.akubectl("delete", "elasticquota", "team-a")
    await system.apply(quota("team-a", 0, 8))
    await system.wait_for(used_written, what="team-a's usage written again")


async def test_queues_follow_their_quotas_and_a_bad_quota_is_reported(system: System) -> None:
    await system.apply(quota("team-x", 2, 8, policy="Block"))

    async def queue_made() -> bool:
        queue = await system.get_json("queue", "team-x", "-n", c.SYSTEM_NAMESPACE)
        return queue["spec"]["queuePolicy"] == "Block" and queue["spec"]["priority"] == c.AUTO_QUEUE_PRIORITY

    await system.wait_for(queue_made, what="the quota's Queue")
    await system.akubectl("label", "elasticquota", "team-x", f"{c.LABEL_QUEUE_POLICY}=Intelligent", "--overwrite")

    async def queue_follows() -> bool:
        queue = await system.get_json("queue", "team-x", "-n", c.SYSTEM_NAMESPACE)
        return queue["spec"]["queuePolicy"] == "Intelligent"

    await system.wait_for(queue_follows, what="the Queue's policy to follow the label")
    await system.akubectl("delete", "elasticquota", "team-x")

    async def queue_gone() -> bool:
        out = await system.akubectl("get", "queue", "team-x", "-n", c.SYSTEM_NAMESPACE, check=False)
        return "NotFound" in out

    await system.wait_for(queue_gone, what="the Queue deleted with its quota")

    bad = quota("upside-down", 8, 2)
    await system.apply(bad)

    async def warned() -> str | None:
        events = [e for e in await system.events("upside-down") if e["reason"] == c.EventReason.INVALID_QUOTA]
        return events[0]["message"] if events else None

    message = await system.wait_for(warned, what="an InvalidQuota event")
    assert message == "quota not used: min of cpu (32) is more than its max (8)"
    await system.apply(pytorch_job("in-bad-quota", quota_name="upside-down"))

    async def parked() -> str | None:
        status = (await system.unit("in-bad-quota-py-qu")).get("status", {})
        return status.get("message") if "not usable" in str(status.get("message")) else None

    assert "upside-down" in await system.wait_for(parked, what="the job told its quota is unusable")


async def test_a_hand_edit_of_a_units_priority_is_undone(system: System) -> None:
    await system.apply(quota("team-e", 0, 1))
    await system.apply(pytorch_job("big", gpus_per_pod=1, workers=3, quota_name="team-e", priority=3))

    async def queued() -> bool:
        return (await system.unit("big-py-qu")).get("status", {}).get("phase") == c.Phase.ENQUEUED

    await system.wait_for(queued, what="the unit waiting")
    await system.akubectl("patch", "queueunit", "big-py-qu", "--type", "merge", "-p", '{"spec":{"priority":1000}}')

    async def restored() -> bool:
        return (await system.unit("big-py-qu"))["spec"]["priority"] == 3

    await system.wait_for(restored, what="the priority restored from the job")
    reasons = [e["reason"] for e in await system.events("big-py-qu")]
    assert c.EventReason.SPEC_RESTORED in reasons


def with_master_cpu(job: dict[str, Any], cpu: str) -> dict[str, Any]:
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["requests"][
        "cpu"] = cpu
    return job


async def test_an_invalid_job_is_suspended_and_told_why(system: System) -> None:
    """A negative cpu request passes the CRD's quantity pattern (on both control planes the job is
    created); the controller refuses it, keeps it suspended and says why."""
    await system.apply(quota("team-i", 2, 8))
    await system.apply(with_master_cpu(pytorch_job("negative-cpu", quota_name="team-i"), "-1"))
    await system.apply(pytorch_job("fine", quota_name="team-i"))
    await system.wait_phase("fine-py-qu", c.Phase.RUNNING)

    async def told() -> str | None:
        events = [e for e in await system.events("negative-cpu") if e["reason"] == c.EventReason.INVALID_JOB]
        return events[0]["message"] if events else None

    message = await system.wait_for(told, what="an InvalidJob event")
    assert message == ("not queued: PyTorchJob default/negative-cpu: Master: containers[0] (pytorch): "
                       "resources.requests: cpu: quantity '-1' is negative; only amounts >= 0 are allowed")
    bad = await system.get_json("pytorchjob", "negative-cpu")
    assert bad["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
    assert not (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=negative-cpu"))["items"]
    units = (await system.get_json("queueunits"))["items"]
    assert [u["metadata"]["name"] for u in units] == ["fine-py-qu"]


async def test_a_quantity_that_is_not_a_number_is_refused_by_the_api_server(system: System) -> None:
    """The PyTorchJob CRD's quantity pattern: the server refuses "4 cores" whether kubectl
    checks the schema first or not, with kube-apiserver's message, and nothing is created."""
    await system.apply(quota("team-q", 2, 8))
    job = yaml.safe_dump(with_master_cpu(pytorch_job("bad-quantity", quota_name="team-q"), "4 cores"))
    field = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.requests.cpu"
    expected = (f'The PyTorchJob "bad-quantity" is invalid: {field}: Invalid value: "4 cores": {field} in body '
                "should match '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                "([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$'")
    for validate in ("--validate=true", "--validate=false"):
        out = await system.akubectl("apply", validate, "-f", "-", stdin=job, check=False)
        assert expected in out, (validate, out)
    out = await system.akubectl("get", "pytorchjob", "bad-quantity", check=False)
    assert "NotFound" in out
