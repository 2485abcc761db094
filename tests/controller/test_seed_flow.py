"""The seed guide's flow end to end: kubectl, the embedded API server, the simulated
cluster and the controller, all over HTTP."""

from __future__ import annotations

import re

import pytest

from koordqueue.api import constants as c

from .conftest import SEED, System, pytorch_job, seed_docs

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]
SEED_UNIT = "pytorch-training-job-py-qu"


async def test_seed_manifests_verbatim_run_to_pods_and_quota_is_charged_then_released(system: System) -> None:
    out = await system.akubectl("apply", "-f", str(SEED))
    assert "elasticquota.scheduling.sigs.k8s.io/pytorch-team-a created" in out
    assert "queue.scheduling.x-k8s.io/pytorch-training-queue created" in out
    assert "pytorchjob.kubeflow.org/pytorch-training-job created" in out
    # The webhook suspended the job as it was created: the stored object never ran unsuspended.
    created = await system.get_json("pytorchjob", "pytorch-training-job")
    assert created["metadata"]["generation"] >= 1
    await system.wait_phase(SEED_UNIT, c.Phase.RUNNING)
    unit = await system.unit(SEED_UNIT)
    assert unit["spec"]["priority"] == 10 and unit["spec"]["queue"] == "pytorch-team-a"
    assert unit["metadata"]["ownerReferences"][0]["kind"] == c.PYTORCH_JOB_KIND
    job = await system.get_json("pytorchjob", "pytorch-training-job")
    assert c.ANNOTATION_SUSPEND not in job["metadata"].get("annotations", {})
    assert job["spec"]["runPolicy"]["suspend"] is False
    pods = await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=pytorch-training-job")
    names = sorted(p["metadata"]["name"] for p in pods["items"])
    assert names == ["pytorch-training-job-master-0", "pytorch-training-job-worker-0"]
    # As the real training operator makes them: its labels, and its env after the seed's own
    # (the last of a name wins), so RANK and MASTER_ADDR hold whatever the seed's fieldRefs read.
    worker = next(p for p in pods["items"] if p["metadata"]["name"].endswith("worker-0"))
    assert worker["metadata"]["labels"] == {
        c.LABEL_JOB_NAME: "pytorch-training-job", c.LABEL_OPERATOR_NAME: "pytorchjob-controller",
        c.LABEL_REPLICA_INDEX: "0", c.LABEL_REPLICA_TYPE: "worker"}
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert (env["RANK"], env["MASTER_ADDR"], env["WORLD_SIZE"]) == ("1", "pytorch-training-job-master-0", "2")

    async def pods_counted() -> bool:
        status = (await system.unit(SEED_UNIT))["status"]
        return status.get("podState") == {"running": 2, "pending": 0} and \
            [a["running"] for a in status["admissions"]] == [1, 1]

    await system.wait_for(pods_counted, what="podState and admissions[].running")

    async def used() -> str | None:
        described = await system.akubectl("describe", "elasticquota", "pytorch-team-a")
        return described if "nvidia.com/gpu:  2" in described.replace('"', "") else None

    described = await system.wait_for(used, what="status.used on the quota")
    assert "Used" in described
    table = await system.akubectl("get", "queueunit", "-A")
    header = table.splitlines()[0].split()
    assert header[:6] == ["NAMESPACE", "NAME", "PHASE", "PRIORITY", "ADMISSIONS", "JOBTYPE"]
    row = next(line for line in table.splitlines() if SEED_UNIT in line)
    assert " Running " in row and " 10 " in row and row.rstrip().split()[-2] == c.PYTORCH_JOB_KIND
    assert row.split()[4] == "master=1,worker=1"  # ADMISSIONS: a short form, not the admissions' JSON

    async def bindings() -> dict[str, dict[str, str]] | None:  # the guide's Queue is bound to no quota: it says so
        table = (await system.akubectl("get", "queue", "-n", c.SYSTEM_NAMESPACE)).splitlines()
        starts = [m.start() for m in re.finditer(r"\S+", table[0])]  # a missing value is an empty cell
        rows = [{name: row[a:b].strip() for name, a, b in zip(table[0].split(), starts, [*starts[1:], None],
                                                              strict=True)} for row in table[1:]]
        by_name = {row["NAME"]: row for row in rows}
        return by_name if by_name.get("pytorch-training-queue", {}).get("BOUND") == "False" else None

    queues = await system.wait_for(bindings, what="the Queues' Quota and Bound columns")
    assert (queues["pytorch-team-a"]["QUOTA"], queues["pytorch-team-a"]["BOUND"]) == ("pytorch-team-a", "True")
    assert (queues["pytorch-training-queue"]["QUOTA"], queues["pytorch-training-queue"]["BOUND"]) == ("", "False")
    described = await system.akubectl("describe", "queue", "pytorch-training-queue", "-n", c.SYSTEM_NAMESPACE)
    assert "bound to no ElasticQuota" in " ".join(described.split())
    reasons = [e["reason"] for e in await system.events(SEED_UNIT)]
    assert c.EventReason.ENQUEUED in reasons and c.EventReason.DEQUEUED in reasons

    # Deleting the job deletes its unit (owned by it) and gives the quota back.
    await system.akubectl("delete", "pytorchjob", "pytorch-training-job")

    async def released() -> bool:
        units = await system.get_json("queueunit", "-A")
        quota = await system.get_json("elasticquota", "pytorch-team-a")
        return not units["items"] and quota["status"]["used"].get(c.GPU) == "0"

    await system.wait_for(released, what="the unit gone and the quota released")


async def test_a_job_over_max_waits_with_a_reason_then_runs_when_room_frees(system: System) -> None:
    await system.apply(*seed_docs()[:2])
    await system.apply(pytorch_job("first", gpus_per_pod=2, duration=3, queue="pytorch-team-a"))
    await system.wait_phase("first-py-qu", c.Phase.RUNNING)
    await system.apply(pytorch_job("second", gpus_per_pod=3, queue="pytorch-team-a"))

    async def second_waits() -> str | None:
        status = (await system.unit("second-py-qu")).get("status", {})
        message = str(status.get("message", ""))
        return message if status.get("phase") == c.Phase.ENQUEUED and "nvidia.com/gpu" in message else None

    message = await system.wait_for(second_waits, what="second waiting with a reason")
    # Which quota, which resource, how much is asked, used and allowed.
    assert message == "waiting for quota pytorch-team-a: nvidia.com/gpu asks 6, used 4 of max 8"
    job = await system.get_json("pytorchjob", "second")
    assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
    assert not (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=second"))["items"]
    reasons = {e["reason"]: e["message"] for e in await system.events("second")}
    assert reasons.get(c.EventReason.FAILED_SCHEDULING) == message

    await system.wait_phase("first-py-qu", c.Phase.SUCCEED, timeout=30)
    # A job admitted at once and run to its end: two events in all (no Succeed: its phase says it).
    assert sorted(e["reason"] for e in await system.events("first-py-qu")) == [c.EventReason.DEQUEUED,
                                                                                c.EventReason.ENQUEUED]
    await system.wait_phase("second-py-qu", c.Phase.RUNNING)
    unit = await system.unit("first-py-qu")
    assert "podState" not in unit["status"]
