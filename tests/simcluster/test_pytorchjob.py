"""The simulated training operator and kubelet on PyTorchJobs, over HTTP against the embedded server."""

from __future__ import annotations

import time

import pytest

from koordqueue.api import constants as c
from koordqueue.jobs import adapter_for
from koordqueue.jobs.base import JobState
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import Forbidden, Invalid, NotFound
from koordqueue.simcluster.cluster import SimCluster
from tests.simcluster.conftest import (
    EVENTS,
    NODES,
    PODS,
    PYTORCHJOBS,
    Object,
    condition_true,
    conditions,
    pods_of,
    seed_job,
    wait_for,
)

pytestmark = pytest.mark.timeout(30)
SERVICES = Resource("", "v1", c.SERVICES_PLURAL)
ADAPTER = adapter_for(c.KUBEFLOW_API_VERSION, c.PYTORCH_JOB_KIND)
assert ADAPTER is not None


async def get_job(client: KubeClient, name: str) -> Object:
    return await client.get(PYTORCHJOBS, name, namespace="default")


async def job_pods(client: KubeClient, name: str) -> list[Object]:
    return await pods_of(client, c.LABEL_JOB_NAME, name)


async def job_services(client: KubeClient, name: str) -> list[Object]:
    return (await client.list(SERVICES, namespace="default", label_selector=f"{c.LABEL_JOB_NAME}={name}")).items


async def test_nodes_are_registered_ready_with_their_sizes(client: KubeClient, cluster: SimCluster) -> None:
    nodes = (await client.list(NODES)).items
    assert sorted(n["metadata"]["name"] for n in nodes) == [f"sim-node-{i}" for i in range(4)]
    for node in nodes:
        status = node["status"]
        expected = {c.CPU: "96", c.MEMORY: "512Gi", c.GPU: "8", c.PODS: "110"}
        assert status["allocatable"] == expected and status["capacity"] == expected
        ready = conditions(node)[c.NODE_CONDITION_READY]
        assert ready["status"] == c.CONDITION_TRUE and ready["reason"] == c.NODE_REASON_READY


async def test_seed_job_gets_two_labelled_pods_that_run_then_it_succeeds(client: KubeClient,
                                                                          cluster: SimCluster) -> None:
    duration = 1.5
    await client.create(PYTORCHJOBS, seed_job(duration=duration))
    name = "pytorch-training-job"

    async def both_running() -> list[Object] | None:
        pods = await job_pods(client, name)
        return pods if len(pods) == 2 and all(p["status"]["phase"] == c.POD_RUNNING for p in pods) else None

    pods = await wait_for(both_running, "both pods Running")
    running_since = time.monotonic()
    master, worker = pods
    assert [p["metadata"]["name"] for p in pods] == [f"{name}-master-0", f"{name}-worker-0"]
    for pod, rtype, rank in ((master, "master", "0"), (worker, "worker", "1")):
        meta = pod["metadata"]
        # The training operator's four labels (job-role on the master), and no annotation of its own: the
        # rank and the master's address are in the env it appends after the seed's (the last of a name wins).
        assert meta["labels"] == {c.LABEL_JOB_NAME: name, c.LABEL_OPERATOR_NAME: "pytorchjob-controller",
                                  c.LABEL_REPLICA_TYPE: rtype, c.LABEL_REPLICA_INDEX: "0"} | (
            {c.LABEL_JOB_ROLE: c.JOB_ROLE_MASTER} if rtype == "master" else {})
        assert set(meta["annotations"]) == {c.ANNOTATION_SIM_DURATION, c.ANNOTATION_GANG_NAME,
                                            c.ANNOTATION_GANG_MIN_AVAILABLE}  # the simulation's own
        assert meta["annotations"][c.ANNOTATION_SIM_DURATION] == str(duration)
        env = {var["name"]: var.get("value") for var in pod["spec"]["containers"][0]["env"]}
        assert (env["RANK"], env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"]) == \
            (rank, f"{name}-master-0", "23456", "2")
        [owner] = meta["ownerReferences"]
        assert owner["kind"] == c.PYTORCH_JOB_KIND and owner["name"] == name and owner["controller"] is True
        assert pod["spec"]["nodeName"].startswith("sim-node-")
        assert pod["spec"]["restartPolicy"] == "OnFailure"  # the replica spec's
        assert pod["spec"]["containers"][0]["resources"]["requests"] == {c.CPU: "4", c.MEMORY: "8Gi", c.GPU: "1"}
        status = pod["status"]
        assert condition_true(pod, c.POD_CONDITION_SCHEDULED) and condition_true(pod, c.POD_CONDITION_READY)
        assert status["podIP"] and status["startTime"]
        assert "running" in status["containerStatuses"][0]["state"]

    async def both_services() -> list[Object] | None:  # made after the pods, in the same sync
        services = await job_services(client, name)
        return services if len(services) == 2 else None

    services = await wait_for(both_services, "a Service per pod")
    assert sorted(s["metadata"]["name"] for s in services) == [f"{name}-master-0", f"{name}-worker-0"]
    assert all(s["spec"]["clusterIP"] == "None" for s in services)

    async def job_running() -> Object | None:
        job = await get_job(client, name)
        return job if condition_true(job, c.KUBEFLOW_CONDITION_RUNNING) else None

    job = await job_running() or await wait_for(job_running, "the job's Running condition")
    assert ADAPTER.status(job) is JobState.RUNNING
    assert condition_true(job, c.KUBEFLOW_CONDITION_CREATED)
    assert job["status"]["replicaStatuses"]["Master"]["active"] == 1
    assert job["status"]["startTime"]
    running = conditions(job)[c.KUBEFLOW_CONDITION_RUNNING]
    assert running["reason"] == "PyTorchJobRunning"
    assert running["message"] == f"PyTorchJob default/{name} is running."
    assert set(running) == {"type", "status", "reason", "message", "lastUpdateTime", "lastTransitionTime"}

    async def job_succeeded() -> Object | None:
        job = await get_job(client, name)
        return job if condition_true(job, c.KUBEFLOW_CONDITION_SUCCEEDED) else None

    job = await wait_for(job_succeeded, "the job's Succeeded condition")
    assert time.monotonic() - running_since >= duration - 0.3  # not before its duration
    assert ADAPTER.status(job) is JobState.SUCCEEDED
    assert conditions(job)[c.KUBEFLOW_CONDITION_RUNNING]["status"] == c.CONDITION_FALSE
    assert conditions(job)[c.KUBEFLOW_CONDITION_SUCCEEDED]["reason"] == "PyTorchJobSucceeded"
    assert job["status"]["completionTime"]

    # The job succeeds when its Master does. The pods started, so end, a moment apart: the write
    # that says Succeeded may still count the worker active, as the operator's does (its next sync
    # counts the active as succeeded); the test once read that write. Both pods end; the counts settle.
    async def both_ended() -> list[Object] | None:
        pods = await job_pods(client, name)
        return pods if [p["status"]["phase"] for p in pods] == [c.POD_SUCCEEDED] * 2 else None

    pods = await wait_for(both_ended, "both pods Succeeded")

    async def counted() -> Object | None:
        job = await get_job(client, name)
        return job if all("active" not in r for r in job["status"]["replicaStatuses"].values()) else None

    replicas = (await wait_for(counted, "no replica counted active"))["status"]["replicaStatuses"]
    assert replicas["Master"]["succeeded"] == 1 and replicas["Worker"]["succeeded"] == 1
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == c.CONTAINER_REASON_COMPLETED


async def test_job_without_duration_runs_until_deleted(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(PYTORCHJOBS, seed_job("forever"))

    async def running() -> list[Object] | None:
        pods = await job_pods(client, "forever")
        return pods if len(pods) == 2 and all(p["status"]["phase"] == c.POD_RUNNING for p in pods) else None

    await wait_for(running, "pods Running")
    # A job with a short duration, started after, ends while this one still runs.
    await client.create(PYTORCHJOBS, seed_job("short", duration=0.3))

    async def short_done() -> bool:
        return condition_true(await get_job(client, "short"), c.KUBEFLOW_CONDITION_SUCCEEDED)

    await wait_for(short_done, "the short job Succeeded")
    assert [p["status"]["phase"] for p in await job_pods(client, "forever")] == [c.POD_RUNNING] * 2
    await client.delete(PYTORCHJOBS, "forever", namespace="default")

    async def pods_gone() -> bool:
        return not await job_pods(client, "forever")

    await wait_for(pods_gone, "the garbage collector removing the deleted job's pods")


@pytest.mark.parametrize("how", ["webhook", "runPolicy"])
async def test_suspended_job_gets_no_pods(client: KubeClient, cluster: SimCluster, how: str) -> None:
    job = seed_job("held", duration=0.2, suspend=how == "webhook")  # (annotation and field)
    if how == "runPolicy":
        job["spec"]["runPolicy"] = {"suspend": True}
    await client.create(PYTORCHJOBS, job)

    async def suspended() -> Object | None:
        job = await get_job(client, "held")
        return job if condition_true(job, c.KUBEFLOW_CONDITION_SUSPENDED) else None

    job = await wait_for(suspended, "the Suspended condition")  # the operator has seen the job
    assert condition_true(job, c.KUBEFLOW_CONDITION_CREATED)
    assert conditions(job)[c.KUBEFLOW_CONDITION_SUSPENDED]["reason"] == "PyTorchJobSuspended"
    assert ADAPTER.status(job) is JobState.PENDING
    assert "startTime" not in job["status"]
    # A job created after it is run to the end, so the operator had every chance to act on this one.
    await client.create(PYTORCHJOBS, seed_job("other", duration=0.2))

    async def other_done() -> bool:
        return condition_true(await get_job(client, "other"), c.KUBEFLOW_CONDITION_SUCCEEDED)

    await wait_for(other_done, "the other job Succeeded")
    assert await job_pods(client, "held") == []


async def test_the_annotation_alone_holds_no_job_as_the_training_operator_reads_only_its_field(
        client: KubeClient, cluster: SimCluster) -> None:
    """The real training operator never reads scheduling.x-k8s.io/suspend: a job that has it but
    runPolicy.suspend false gets its pods (issue 29: a tenant flips the field, the annotation left)."""
    job = seed_job("flipped", suspend=True)
    job["spec"]["runPolicy"]["suspend"] = False
    await client.create(PYTORCHJOBS, job)

    async def running_pods() -> list[Object] | None:
        pods = await job_pods(client, "flipped")
        return pods if len(pods) == 2 else None

    await wait_for(running_pods, "the pods of a job whose annotation says suspended but its field not")


async def test_suspending_a_running_job_deletes_its_pods_and_resuming_recreates_them(
        client: KubeClient, cluster: SimCluster) -> None:
    await client.create(PYTORCHJOBS, seed_job("flip"))

    async def running_pods() -> list[Object] | None:
        pods = await job_pods(client, "flip")
        return pods if len(pods) == 2 and all(p["status"]["phase"] == c.POD_RUNNING for p in pods) else None

    first = await wait_for(running_pods, "pods Running")

    async def job_running() -> bool:
        return condition_true(await get_job(client, "flip"), c.KUBEFLOW_CONDITION_RUNNING)

    await wait_for(job_running, "the Running condition")
    await client.patch(PYTORCHJOBS, "flip", ADAPTER.suspend_patch(await get_job(client, "flip")), namespace="default")

    async def suspended_without_pods() -> Object | None:
        job = await get_job(client, "flip")
        pods = await job_pods(client, "flip")
        return job if not pods and condition_true(job, c.KUBEFLOW_CONDITION_SUSPENDED) else None

    job = await wait_for(suspended_without_pods, "pods deleted and Suspended")

    async def services_gone() -> bool:  # each pod's Service goes with it (DeletePodsAndServices)
        return not await job_services(client, "flip")

    await wait_for(services_gone, "the Services deleted with the pods")
    assert conditions(job)[c.KUBEFLOW_CONDITION_RUNNING]["status"] == c.CONDITION_FALSE
    assert conditions(job)[c.KUBEFLOW_CONDITION_RUNNING]["reason"] == "PyTorchJobSuspended"
    assert ADAPTER.status(job) is JobState.PENDING
    assert all(r.get("active", 0) == 0 for r in job["status"]["replicaStatuses"].values())

    await client.patch(PYTORCHJOBS, "flip", ADAPTER.resume_patch(job), namespace="default")
    second = await wait_for(running_pods, "pods Running again after resume")
    assert {p["metadata"]["uid"] for p in second}.isdisjoint(p["metadata"]["uid"] for p in first)
    await wait_for(job_running, "the Running condition after resume")

    async def services_back() -> list[str] | None:
        names = sorted(s["metadata"]["name"] for s in await job_services(client, "flip"))
        return names if names == ["flip-master-0", "flip-worker-0"] else None

    await wait_for(services_back, "the Services made again")

    async def service_events() -> bool:
        reasons = [e["reason"] for e in (await client.list(EVENTS, namespace="default",
                                                           field_selector="involvedObject.name=flip")).items]
        return c.EVENT_SUCCESSFUL_DELETE_SERVICE in reasons and c.EVENT_SUCCESSFUL_CREATE_SERVICE in reasons

    await wait_for(service_events, "the operator's events for the Services it deleted and made")
    job = await get_job(client, "flip")
    resumed = conditions(job)[c.KUBEFLOW_CONDITION_SUSPENDED]
    assert resumed["status"] == c.CONDITION_FALSE and resumed["reason"] == "PyTorchJobResumed"
    assert ADAPTER.status(job) is JobState.RUNNING


async def test_failing_job_ends_failed(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(PYTORCHJOBS, seed_job("broken", duration=0.3, fail=True))

    async def failed() -> Object | None:
        job = await get_job(client, "broken")
        return job if condition_true(job, c.KUBEFLOW_CONDITION_FAILED) else None

    job = await wait_for(failed, "the Failed condition")
    assert ADAPTER.status(job) is JobState.FAILED
    cond = conditions(job)[c.KUBEFLOW_CONDITION_FAILED]
    assert cond["reason"] == "PyTorchJobFailed"
    assert "replica(s) failed" in cond["message"]
    assert not condition_true(job, c.KUBEFLOW_CONDITION_SUCCEEDED)
    assert job["status"]["completionTime"]
    pods = await job_pods(client, "broken")
    failed_pods = [p for p in pods if p["status"]["phase"] == c.POD_FAILED]
    assert failed_pods
    terminated = failed_pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 1 and terminated["reason"] == c.CONTAINER_REASON_ERROR


async def test_gang_binds_none_until_all_fit(client: KubeClient) -> None:
    # Two nodes of 2 GPUs. A 2-GPU job fills one node; then a job of three 1-GPU pods
    # would have two of its pods fit, but a gang gets all three or none.
    async with SimCluster(client, nodes=2, gpus_per_node=2) as sim:
        blocker = seed_job("blocker", gpus=2, workers=0)
        await client.create(PYTORCHJOBS, blocker)

        async def blocker_running() -> bool:
            pods = await job_pods(client, "blocker")
            return len(pods) == 1 and pods[0]["status"]["phase"] == c.POD_RUNNING

        await wait_for(blocker_running, "the blocker's pod Running")
        await client.create(PYTORCHJOBS, seed_job("gang", gpus=1, workers=2, duration=0.2))

        async def all_unschedulable() -> list[Object] | None:
            pods = await job_pods(client, "gang")
            marked = [p for p in pods if conditions(p).get(c.POD_CONDITION_SCHEDULED, {}).get("reason")
                      == c.POD_REASON_UNSCHEDULABLE]
            return pods if len(pods) == 3 and len(marked) == 3 else None

        pods = await wait_for(all_unschedulable, "the gang's three pods marked Unschedulable")
        assert all(not p["spec"].get("nodeName") for p in pods)
        assert all(p["status"]["phase"] == c.POD_PENDING for p in pods)
        message = conditions(pods[0])[c.POD_CONDITION_SCHEDULED]["message"]
        assert message.startswith("0/2 nodes are available: ") and "gang of 3 pods" in message
        assert sim.kubelet is not None and sim.kubelet.room.free("sim-node-1")[c.GPU] == 2000  # room, unused

        await client.delete(PYTORCHJOBS, "blocker", namespace="default")

        async def gang_done() -> Object | None:
            job = await get_job(client, "gang")
            return job if condition_true(job, c.KUBEFLOW_CONDITION_SUCCEEDED) else None

        await wait_for(gang_done, "the gang to run and succeed once the blocker's pod was gone")
        pods = await job_pods(client, "gang")
        assert sorted(p["spec"]["nodeName"] for p in pods) == ["sim-node-0", "sim-node-0", "sim-node-1"]


async def test_pod_too_big_for_any_node_says_why(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(PYTORCHJOBS, seed_job("huge", gpus=9, workers=0))

    async def unschedulable() -> Object | None:
        pods = await job_pods(client, "huge")
        cond = conditions(pods[0]).get(c.POD_CONDITION_SCHEDULED, {}) if pods else {}
        return cond if cond.get("reason") == c.POD_REASON_UNSCHEDULABLE else None

    cond = await wait_for(unschedulable, "the Unschedulable condition")
    assert cond["status"] == c.CONDITION_FALSE
    assert cond["message"] == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


async def test_bad_duration_runs_forever_and_says_why(client: KubeClient, cluster: SimCluster) -> None:
    job = seed_job("typo", workers=0)
    job["metadata"]["annotations"][c.ANNOTATION_SIM_DURATION] = "ten minutes"
    await client.create(PYTORCHJOBS, job)

    async def warned() -> list[Object] | None:
        events = await client.list(EVENTS, namespace="default",
                                   field_selector=f"reason={c.EVENT_INVALID_SIM_ANNOTATION}")
        return events.items or None

    [event] = await wait_for(warned, "a warning event about the duration")
    assert event["involvedObject"]["name"] == "typo-master-0"
    assert "'ten minutes' is not a duration" in event["message"]
    [pod] = await job_pods(client, "typo")
    assert pod["status"]["phase"] == c.POD_RUNNING


async def test_restarted_simulation_ends_pods_on_time(client: KubeClient) -> None:
    async with SimCluster(client):
        await client.create(PYTORCHJOBS, seed_job("survivor", duration=1.5))

        async def running() -> bool:
            pods = await job_pods(client, "survivor")
            return len(pods) == 2 and all(p["status"]["phase"] == c.POD_RUNNING for p in pods)

        await wait_for(running, "pods Running")
    # The simulation stopped with the pods running; a new one picks them up and ends them.
    async with SimCluster(client):
        async def succeeded() -> bool:
            return condition_true(await get_job(client, "survivor"), c.KUBEFLOW_CONDITION_SUCCEEDED)

        await wait_for(succeeded, "the job Succeeded under the new simulation", timeout=6)


async def test_a_malformed_job_is_refused_by_the_api_server_and_gets_no_pods(client: KubeClient,
                                                                             cluster: SimCluster) -> None:
    """replicas "two": the CRD's schema refuses it, as kube-apiserver does with the training
    operator's CRD, so the operator never sees it."""
    job = seed_job("malformed")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(Invalid) as refused:
        await client.create(PYTORCHJOBS, job)
    assert "spec.pytorchReplicaSpecs.Worker.replicas in body must be of type integer" in refused.value.message
    with pytest.raises(NotFound):
        await get_job(client, "malformed")
    assert await job_pods(client, "malformed") == []


async def test_job_without_a_pytorch_container_is_refused_by_the_operators_webhook(client: KubeClient,
                                                                                  cluster: SimCluster) -> None:
    """The operator's validating webhook refuses it (its pods would have no port for
    MASTER_PORT), so it is never stored and the operator never sees it."""
    job = seed_job("nameless")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    with pytest.raises(Forbidden) as refused:
        await client.create(PYTORCHJOBS, job)
    assert refused.value.message == (
        'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: '
        "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: "
        "must have at least one container with name pytorch")
    with pytest.raises(NotFound):
        await get_job(client, "nameless")
    assert await job_pods(client, "nameless") == [] and await job_services(client, "nameless") == []


async def test_scheduling_gates_hold_a_pod_until_removed(client: KubeClient, cluster: SimCluster) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated", "namespace": "default"},
           "spec": {"schedulingGates": [{"name": "example.com/hold"}],
                    "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {c.CPU: "1"}}}]}}
    await client.create(PODS, pod)
    await client.create(PYTORCHJOBS, seed_job("after", duration=0.1))  # created later, runs to the end first

    async def after_done() -> bool:
        return condition_true(await get_job(client, "after"), c.KUBEFLOW_CONDITION_SUCCEEDED)

    await wait_for(after_done, "the later job Succeeded")
    held = await client.get(PODS, "gated", namespace="default")
    assert not held["spec"].get("nodeName") and held["status"]["phase"] == c.POD_PENDING
    await client.patch(PODS, "gated", {"spec": {"schedulingGates": None}}, namespace="default")

    async def running() -> bool:
        return (await client.get(PODS, "gated", namespace="default"))["status"]["phase"] == c.POD_RUNNING

    await wait_for(running, "the pod Running once its gate was removed")


@pytest.mark.parametrize("suspend", [True, False], ids=["suspended", "running"])
async def test_a_job_with_two_billion_workers_neither_stalls_the_server_nor_gets_pods(
        client: KubeClient, cluster: SimCluster, suspend: bool) -> None:
    """The operator once built every pod of such a job on each sync, suspended or not: the
    embedded server stopped answering for minutes (the bad-input corpus' replicas-huge)."""
    await client.create(PYTORCHJOBS, seed_job("huge", workers=2**31 - 1, suspend=suspend))
    await client.create(PYTORCHJOBS, seed_job("other", duration=0.2))

    async def other_done() -> bool:
        return condition_true(await get_job(client, "other"), c.KUBEFLOW_CONDITION_SUCCEEDED)

    await wait_for(other_done, "a job created after it Succeeded")
    if suspend:
        assert condition_true(await get_job(client, "huge"), c.KUBEFLOW_CONDITION_SUSPENDED)
    else:
        async def refused() -> list[str]:
            events = (await client.list(EVENTS, namespace="default",
                                        field_selector="involvedObject.name=huge")).items
            return [e["message"] for e in events if e["reason"] == c.EVENT_FAILED_CREATE_POD]

        assert await wait_for(refused, "the FailedCreatePod Warning") == [
            "PyTorchJob default/huge wants 2147483648 pods; the simulated training operator makes at most 10000 "
            "for a job, and made none"]
    assert await job_pods(client, "huge") == []
