"""The unit's lifecycle beyond the happy path: admission checks, wait-for-pods-running
timeouts with back-off, and jobs that were running before the controller started."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.apiserver.server import APIServer
from koordqueue.controller.manager import Manager
from koordqueue.kube.client import KubeClient
from koordqueue.kube.config import load_config
from koordqueue.manifests import all_crds
from koordqueue.simcluster.cluster import SimCluster
from tests.simcluster.conftest import PODS, batch_job

from .conftest import System, SystemFactory, pytorch_job, quick_config, quota

pytestmark = pytest.mark.timeout(120)


def queue(name: str, quota_name: str, annotations: dict[str, str] | None = None,
          checks: list[dict[str, object]] | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"queuePolicy": "Priority", "priority": 10}
    if checks is not None:
        spec["admissionChecks"] = checks
    return {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
            "metadata": {"name": name, "namespace": c.SYSTEM_NAMESPACE, "labels": {c.LABEL_QUOTA_NAME: quota_name},
                         "annotations": annotations or {}},
            "spec": spec}


async def set_check(system: System, unit: str, name: str, state: str) -> None:
    body = json.dumps({"status": {"admissionChecks": [{"name": name, "state": state}]}})
    await system.akubectl("patch", "queueunit", unit, "--subresource=status", "--type", "merge", "-p", body)


@pytest.mark.both_control_planes
async def test_admission_checks_hold_a_unit_reserved_until_ready_and_retry_sends_it_back(system: System) -> None:
    await system.apply(quota("team-c", 4, 8))
    await system.apply(queue("checked", "team-c", checks=[
        {"name": "budget", "labelSelector": {"matchLabels": {"team": "c"}}},  # only units labelled team=c
    ]))
    await system.apply(pytorch_job("checked-job", queue="checked", labels={"team": "c"}),
                       pytorch_job("unchecked-job", queue="checked", labels={"team": "d"}))
    await system.wait_phase("unchecked-job-py-qu", c.Phase.RUNNING)  # no check applies to it
    await system.wait_phase("checked-job-py-qu", c.Phase.RESERVED)
    unit = await system.unit("checked-job-py-qu")
    assert [(a["name"], a["state"]) for a in unit["status"]["admissionChecks"]] == [("budget", "Pending")]
    job = await system.get_json("pytorchjob", "checked-job")
    assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE  # holds quota, does not run yet

    async def reserved_in_status() -> bool:  # status.used is written every quota_status_refresh_seconds
        used = ((await system.get_json("elasticquota", "team-c")).get("status") or {}).get("used") or {}
        return used.get(c.GPU) == "4"

    await system.wait_for(reserved_in_status, what="both jobs' 2 GPUs reserved in the quota's status.used")

    await set_check(system, "checked-job-py-qu", "budget", "Retry")
    await system.wait_phase("checked-job-py-qu", c.Phase.TIMEOUT_BACKOFF)
    unit = await system.unit("checked-job-py-qu")
    assert unit["status"]["message"] == "admission check budget said Retry; quota released"
    assert unit["status"]["requeueState"]["count"] == 1
    row = next(q for q in system.controller.overview()["queues"] if q["key"] == "koord-queue/checked")
    assert row["quota"] == "team-c"  # named though nobody is in line
    assert [b["unit"] for b in row["backing_off"]] == ["default/checked-job-py-qu"]
    # After the back-off it is queued and reserved again, with its checks pending anew.
    await system.wait_phase("checked-job-py-qu", c.Phase.RESERVED, timeout=15)
    await set_check(system, "checked-job-py-qu", "budget", "Ready")
    await system.wait_phase("checked-job-py-qu", c.Phase.RUNNING)


@pytest.mark.both_control_planes
async def test_pods_not_running_in_time_send_the_job_back_and_it_is_retried(start_system: SystemFactory) -> None:
    config = quick_config(wait_for_pods_running_seconds=1.5)
    async with start_system(config=config) as system:
        await system.apply(quota("team-w", 8, 16))
        # Admitted on quota alone (node fit would keep it out, saying no node has 9 GPUs).
        await system.apply(queue("patient", "team-w", annotations={c.ANNOTATION_WAIT_FOR_PODS_RUNNING: c.TRUE,
                                                                    c.ANNOTATION_NODE_FIT: c.FALSE}))
        # 9 GPUs per pod on 8-GPU nodes: quota lets it in, but its pods can never be placed.
        await system.apply(pytorch_job("unplaceable", gpus_per_pod=9, workers=0, queue="patient"))
        await system.wait_phase("unplaceable-py-qu", c.Phase.TIMEOUT_BACKOFF, timeout=20)
        unit = await system.unit("unplaceable-py-qu")
        assert "were not all running 1.5 s after admission" in unit["status"]["message"]
        job = await system.get_json("pytorchjob", "unplaceable")
        assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE

        async def no_pods() -> bool:
            return not (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=unplaceable"))["items"]

        await system.wait_for(no_pods, what="its pods removed with the suspension")
        reasons = [e["reason"] for e in await system.events("unplaceable")]
        assert c.EventReason.TIMEOUT_BACKOFF in reasons

        async def tried_again() -> bool:
            status = (await system.unit("unplaceable-py-qu"))["status"]
            return status.get("requeueState", {}).get("count", 0) >= 2

        await system.wait_for(tried_again, timeout=20, what="a second attempt after the back-off")


async def test_jobs_running_before_the_controller_starts_are_accounted_not_disturbed(tmp_path: Path) -> None:
    server = APIServer(tmp_path / "state", crds=all_crds())
    await server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig_path)), qps=1000, burst=2000) as client:
            sim = SimCluster(client, nodes=2, gpus_per_node=8)
            await sim.start()
            manager: Manager | None = None
            task = None
            try:
                system = System(server, client, None, sim)  # type: ignore[arg-type]
                await system.apply(quota("team-early", 2, 8))
                await system.apply(pytorch_job("early", gpus_per_pod=2, quota_name="team-early"))

                async def running() -> bool:
                    pods = (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=early"))["items"]
                    return len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)

                await system.wait_for(running, what="the job running with no queue at all")
                pods_before = sorted(p["metadata"]["uid"] for p in
                                     (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=early"))["items"])
                manager = Manager(client, quick_config(webhook=False))
                task = asyncio.create_task(manager.run())
                system.manager = manager
                await system.wait_phase("early-py-qu", c.Phase.RUNNING)

                async def charged() -> bool:
                    used = (await system.get_json("elasticquota", "team-early")).get("status", {}).get("used", {})
                    return used.get(c.GPU) == "4"

                await system.wait_for(charged, what="the running job charged to its quota")
                job = await system.get_json("pytorchjob", "early")
                assert c.ANNOTATION_SUSPEND not in job["metadata"].get("annotations", {})
                pods_after = sorted(p["metadata"]["uid"] for p in
                                    (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=early"))["items"])
                assert pods_after == pods_before  # not disturbed: the same pods
                # A job created now is queued as usual, against the quota the early one uses.
                await system.apply(pytorch_job("later", gpus_per_pod=3, quota_name="team-early"))

                async def waits() -> str | None:
                    status = (await system.unit("later-py-qu")).get("status", {})
                    return status.get("message") if "asks 6, used 4 of max 8" in str(status.get("message")) else None

                await system.wait_for(waits, what="the later job waiting behind the adopted one")
            finally:
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                await sim.stop()
    finally:
        await server.stop()


async def test_deleted_jobs_and_units_show_in_the_recent_decisions(system: System) -> None:
    """The dashboard's recent decisions say when a job (or its unit) is deleted, and what that freed."""
    await system.apply(quota("team-del", 2, 2))
    await system.apply(pytorch_job("runs", quota_name="team-del"), pytorch_job("waits", quota_name="team-del"))
    await system.wait_phase("runs-py-qu", c.Phase.RUNNING)
    await system.wait_phase("waits-py-qu", c.Phase.ENQUEUED)
    await system.akubectl("delete", "pytorchjob", "waits")
    await system.akubectl("delete", "pytorchjob", "runs")

    async def both_recorded() -> list[tuple[str, str | None, str]] | None:
        deleted = [(d["unit"], d["quota"], d["message"]) for d in system.controller.overview()["recent"]
                   if d["what"] == "deleted"]
        return deleted if len(deleted) >= 2 else None

    deleted = await system.wait_for(both_recorded, what="both deletions in the recent decisions")
    assert sorted(deleted) == [
        ("default/runs-py-qu", "team-del", "PyTorchJob default/runs was deleted; quota team-del released"),
        ("default/waits-py-qu", None, "PyTorchJob default/waits was deleted; it left the queue")]


@pytest.mark.both_control_planes
async def test_a_deleted_jobs_unit_is_deleted_by_the_controller_not_left_to_the_garbage_collector(
        system: System) -> None:
    """Deleted with --cascade=orphan, a job leaves its unit to no garbage collector (the
    ownerReference is taken off it): the controller deletes it, as Koord-Queue does. (With the
    default cascade, kube-controller-manager's collector deletes a new CRD's objects only after
    its next discovery, up to 30 s; the controller does not wait for it either.)"""
    await system.apply(quota("team-orphan", 2, 2))
    await system.apply(pytorch_job("orphaned", gpus_per_pod=2, quota_name="team-orphan"))  # 4 > max 2: waits
    await system.wait_phase("orphaned-py-qu", c.Phase.ENQUEUED)
    await system.akubectl("delete", "pytorchjob", "orphaned", "--cascade=orphan")

    async def unit_gone() -> bool:
        units = await system.get_json("queueunit")
        return "orphaned-py-qu" not in [u["metadata"]["name"] for u in units["items"]]

    await system.wait_for(unit_gone, 20, "the unit of the deleted job deleted")
    jobs = await system.get_json("pytorchjob")
    assert "orphaned" not in [j["metadata"]["name"] for j in jobs["items"]]


async def test_what_is_kept_of_a_job_and_its_unit_goes_when_they_are_deleted(system: System) -> None:
    """All the controller keeps of a unit, and of a job, is one record each
    (controller/records.py), dropped when the object is deleted: none is left behind."""
    await system.apply(quota("team-gone", 2, 2))
    await system.apply(pytorch_job("gone", quota_name="team-gone"))
    await system.wait_phase("gone-py-qu", c.Phase.RUNNING)
    records = system.controller.shared.records
    unit, job = "default/gone-py-qu", f"{c.PYTORCH_JOB_KIND}/default/gone"
    assert records.unit(unit) is not None and records.job(job) is not None
    await system.akubectl("delete", "pytorchjob", "gone")

    async def dropped() -> bool | None:
        return True if records.unit(unit) is None and records.job(job) is None else None

    await system.wait_for(dropped, what="the records of the job and its unit dropped")
    assert unit not in records.pending_messages


@pytest.mark.both_control_planes
async def test_a_job_whose_pods_succeeded_while_it_was_suspended_is_resumed_to_be_marked_complete(
        system: System) -> None:
    """A Job's pod that succeeds before a suspension of the Job lands (ours, preempting it:
    seen on the real control plane with preemption and no protection) leaves it SuccessCriteriaMet
    but suspended, and kube-controller-manager writes Complete only once it is resumed (a suspended
    Job has no startTime, and kube-apiserver refuses a finished Job without one). Its unit is
    finished, and the controller resumes it: Complete, and no more pods. Here the Job waits (2 GPUs
    against max 1) while a pod it owns, made by hand, runs and succeeds."""
    await system.apply(quota("team-ended", 1, 1))
    job = batch_job("ended", parallelism=1, completions=1, suspend=True, gpus=2)
    job["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: "team-ended"}
    await system.apply(job)
    await system.wait_phase("ended", c.Phase.ENQUEUED)
    uid = (await system.get_json("job", "ended"))["metadata"]["uid"]
    labels = {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
              c.LABEL_BATCH_JOB_NAME: "ended", "job-name": "ended"}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "ended", "uid": uid, "controller": True,
             "blockOwnerDeletion": True}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "ended-by-hand", "namespace": "default",
                        "annotations": {c.ANNOTATION_SIM_DURATION: "0.2"}},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}

    async def pod_succeeded() -> bool:
        found = await system.get_json("pod", "ended-by-hand")
        return found.get("status", {}).get("phase") == "Succeeded"

    # The pod is made the Job's only once it has ended (a suspended Job's pods that have not are
    # deleted), in one write, with the finalizer kube-controller-manager counts a pod by (and takes
    # off once counted). (Stopping kube-controller-manager while an owned pod ran was not enough:
    # resumed, it could sync the Job before its informer had the pod's end, and delete it.)
    await system.client.create(PODS, pod, namespace="default")
    await system.wait_for(pod_succeeded, 30, "the pod made by hand to succeed")
    await system.client.patch(PODS, "ended-by-hand", {"metadata": {
        "labels": labels, "ownerReferences": [owner], "finalizers": ["batch.kubernetes.io/job-tracking"]}},
        namespace="default")

    async def complete() -> dict[str, Any] | None:
        found = await system.get_json("job", "ended")
        conditions = {cond["type"]: cond["status"] for cond in found.get("status", {}).get("conditions") or []}
        return found if conditions.get(c.BATCH_CONDITION_COMPLETE) == c.CONDITION_TRUE else None

    found = await system.wait_for(complete, 30, "the Job marked Complete")
    assert found["spec"]["suspend"] is False
    assert found["status"].get("succeeded") == 1
    assert await system.phase("ended") == c.Phase.SUCCEED.value
    pods = await system.get_json("pods", "-l", f"{c.LABEL_BATCH_JOB_NAME}=ended")
    assert [p["metadata"]["name"] for p in pods["items"]] == ["ended-by-hand"]

    async def ours_on_the_job() -> list[tuple[str, str]]:
        return [(e["type"], e["message"]) for e in await system.events("ended")
                if e["involvedObject"]["kind"] == c.BATCH_JOB_KIND and e["reason"] == c.EventReason.RESUMED.value
                and e["source"].get("component") == "koord-queue"]

    said = await system.wait_for(ours_on_the_job, 10, "our event on the Job")
    assert said == [(c.EventType.NORMAL.value, "it ended while suspended (its pods had finished before the suspension "
                     "landed): resumed so that its controller marks it finished; no pod is made for it")]
