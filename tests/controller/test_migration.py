"""Moving over from Koord-Queue (docs/migration.md, "Key by key"): what a Koord-Queue
install leaves behind is there before our controller starts, and is read as the table
says. Its quota (with Koordinator's root as the parent koord-manager writes), its Queue
with Koord-Queue's annotations, one PyTorchJob and its QueueUnit in each of Koord-Queue's
phases, a job naming its quota by the ASI label, and an inactive one; then jobs of every
other kind Koord-Queue queues, created once we run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.views import unit_spec
from koordqueue.jobs import adapter_for

from .conftest import System, SystemFactory, pytorch_job, quota
from .test_app_kinds import mpi_v1alpha1, ray_cluster, spark_app, workflow

pytestmark = [pytest.mark.timeout(300), pytest.mark.both_control_planes]

TEAM = "mig-team"
# Koord-Queue's phase -> what the job was doing when Koord-Queue left it.
LEFT = {
    c.Phase.ENQUEUED: "suspended",
    c.Phase.RESERVED: "suspended",
    c.Phase.DEQUEUED: "running",
    c.Phase.RUNNING: "running",
    c.Phase.SUCCEED: "succeeded",
    c.Phase.FAILED: "failed",
    c.Phase.TIMEOUT_BACKOFF: "suspended",
    c.Phase.PREEMPTED: "suspended",
}


def job_in(phase: c.Phase) -> dict[str, Any]:
    state = LEFT[phase]
    job = pytorch_job(f"mig-{phase.value.lower()}", gpus_per_pod=1, workers=0, quota_name=TEAM,
                      duration=1 if state in ("succeeded", "failed") else None)
    if state == "failed":
        job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["annotations"][
            c.ANNOTATION_SIM_FAIL] = c.TRUE
        job["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = "Never"
    if state == "suspended":  # as Koord-Queue's job extension holds a PyTorchJob
        job["spec"].setdefault("runPolicy", {})["suspend"] = True
    return job


async def koord_queue_left_behind(system: System) -> None:
    # The quota as koord-manager's webhook leaves it: its parent Koordinator's root.
    team = quota(TEAM, 4, 8, labels={c.LABEL_QUOTA_PARENT: c.KOORDINATOR_ROOT_QUOTA}, policy="Priority")
    queue = {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
             "metadata": {"name": TEAM, "namespace": c.SYSTEM_NAMESPACE, "annotations": {
                 c.ANNOTATION_MAX_DEPTH: "3",
                 c.ANNOTATION_QUEUE_ARGS: "podInitialBackoffSeconds: '1'\npodMaxBackoffSeconds: '2'\n",
                 c.ANNOTATION_DISABLE_SHOW_QUEUE_ITEMS: c.TRUE}},
             "spec": {"queuePolicy": "Priority", "priority": 100}}
    await system.apply(team, queue)
    adapter = adapter_for(c.KUBEFLOW_API_VERSION, c.PYTORCH_JOB_KIND)
    assert adapter is not None
    for phase in LEFT:
        await system.apply(job_in(phase))
    for phase, state in LEFT.items():
        name = f"mig-{phase.value.lower()}"
        if state in ("succeeded", "failed"):
            want = "Succeeded" if state == "succeeded" else "Failed"

            async def ended(name: str = name, want: str = want) -> bool:
                conditions = (await system.get_json("pytorchjob", name)).get("status", {}).get("conditions", [])
                return any(k["type"] == want and k["status"] == "True" for k in conditions)

            await system.wait_for(ended, 60, f"{name} {want} before we start")
        job = await system.get_json("pytorchjob", name)
        unit = {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_UNIT_KIND,
                "metadata": {"name": adapter.unit_name(job), "namespace": "default", "ownerReferences": [
                    {"apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.PYTORCH_JOB_KIND, "name": name,
                     "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
                "spec": unit_spec(job, adapter, {})}
        await system.apply(unit)
        await system.akubectl("patch", "queueunit", unit["metadata"]["name"], "--subresource=status",
                              "--type=merge", "-p", json.dumps({"status": {"phase": phase.value}}))
    asi = pytorch_job("mig-asi", gpus_per_pod=1, workers=0)
    asi["metadata"]["labels"][c.LABEL_ASI_QUOTA_NAME] = TEAM
    inactive = pytorch_job("mig-inactive", gpus_per_pod=1, workers=0, quota_name=TEAM,
                           annotations={c.ANNOTATION_ACTIVE: "false"})
    for job in (asi, inactive):
        job["spec"].setdefault("runPolicy", {})["suspend"] = True
    await system.apply(asi, inactive)


async def test_what_koord_queue_left_is_read_as_the_migration_table_says(start_system: SystemFactory,
                                                                         control_plane: str) -> None:
    async with start_system(prepare=koord_queue_left_behind) as system:
        # Held quota stays held, finished stays finished, the rest is queued again and runs:
        # 2 GPUs held (Dequeued, Running), 4 queued again (Enqueued, Reserved, TimeoutBackoff,
        # Preempted) and the ASI-labelled job: 7 of the quota's 8; the inactive one waits.
        for phase in (c.Phase.DEQUEUED, c.Phase.RUNNING):
            await system.wait_phase(f"mig-{phase.value.lower()}-py-qu", c.Phase.RUNNING, timeout=60)
        for phase in (c.Phase.SUCCEED, c.Phase.FAILED):
            assert await system.phase(f"mig-{phase.value.lower()}-py-qu") == phase.value

        last: dict[str, str] = {}

        async def admitted() -> list[str] | None:
            units = (await system.get_json("queueunits", "-n", "default"))["items"]
            last.update({u["metadata"]["name"]: u.get("status", {}).get("phase") for u in units})
            holding = sorted(n for n, p in last.items() if p in {x.value for x in c.PHASES_HOLDING_QUOTA})
            return holding if len(holding) == 7 else None

        try:
            holding = await system.wait_for(admitted, 90, "the 7 one-GPU jobs to hold quota")
        except AssertionError as e:
            raise AssertionError(f"{e}; phases: {last}") from None
        assert "mig-inactive-py-qu" not in holding and "mig-asi-py-qu" in holding
        for phase in (c.Phase.SUCCEED, c.Phase.FAILED):
            assert await system.phase(f"mig-{phase.value.lower()}-py-qu") == phase.value

        async def used() -> bool:
            return (await system.get_json("elasticquota", TEAM)).get("status", {}).get("used", {}).get(c.GPU) == "7"

        await system.wait_for(used, 30, "the quota's used: 7, the finished jobs not counted")
        # The inactive job is never admitted, and says why (a waiting unit's message is written
        # at the message writer's pace, after its phase).

        async def says_inactive() -> bool:
            status = (await system.unit("mig-inactive-py-qu")).get("status", {})
            return status.get("phase") == c.Phase.ENQUEUED and "inactive" in status.get("message", "")

        await system.wait_for(says_inactive, 30, "the inactive job's unit to say so")
        # The ASI label named the quota: its unit was admitted there.
        reasons = [e["message"] for e in await system.events("mig-asi-py-qu") if e["reason"] == "Dequeued"]
        assert any(f"quota {TEAM}" in m for m in reasons), reasons
        # The Queue: its items not shown (disable-show-queue-items), Koord-Queue's usage annotations written.
        queue = await system.get_json("queue", TEAM, "-n", c.SYSTEM_NAMESPACE)
        assert not queue.get("status", {}).get("queueItemDetails")

        async def usage() -> dict[str, Any] | None:
            annotations = (await system.get_json("queue", TEAM, "-n", c.SYSTEM_NAMESPACE))["metadata"].get(
                "annotations", {})
            text = annotations.get(c.ANNOTATION_QUEUE_USED)
            return json.loads(text) if text and json.loads(text).get(c.GPU) == 7 else None

        await system.wait_for(usage, 30, "the Queue's alibabacloud.com/queue-used annotation")

        # Jobs of the other kinds Koord-Queue queues, under its unit names, admitted here.
        await system.apply(quota("mig-apps", 8, 8))
        apps = [spark_app("mig-spark", None), workflow("mig-flow", None), ray_cluster("mig-ray")]
        names = ["mig-spark-spark-qu", "mig-flow", "mig-ray-raycluster-qu"]
        if control_plane == "embedded":  # the training operator's MPIJob CRD serves v1 only
            apps.append(mpi_v1alpha1("mig-mpi", None))
            names.append("mig-mpi-mpi-qu")
        for app in apps:
            app["metadata"]["labels"][c.LABEL_QUOTA_NAME] = "mig-apps"
        await system.apply(*apps)

        async def all_admitted() -> bool:
            phases = [await system.phase(name) for name in names]
            return all(p in (c.Phase.DEQUEUED, c.Phase.RUNNING) for p in phases)

        await system.wait_for(all_admitted, 60, f"{names} admitted into mig-apps")
