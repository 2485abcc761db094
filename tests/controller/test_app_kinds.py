"""SparkApplication, Argo Workflow and RayCluster under the controller, end to end on the
embedded control plane: suspended on create by the webhook, queued under Koord-Queue's unit
name, admitted against a quota, run by the simulated operator (pods made), finished; a
second one waits while the first holds the quota, and runs once it is freed.

Each first one runs until deleted (a RayCluster always does): what is checked of it is
checked with no clock running; the second runs 1 s and is seen to succeed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.simcluster.test_rayjob import rayjob

from .conftest import System, quota

pytestmark = pytest.mark.timeout(120)


def spark_app(name: str, duration: float | None) -> dict[str, Any]:
    """A driver (1 core, 1g + 512m overhead) and 2 executors (2 cores, 2g): 5 CPUs, 5.5Gi."""
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {c.LABEL_QUOTA_NAME: "team"},
                            "annotations": {}}
    if duration is not None:
        meta["annotations"][c.ANNOTATION_SIM_DURATION] = str(duration)
    return {"apiVersion": c.SPARK_API_VERSION, "kind": c.SPARK_APPLICATION_KIND, "metadata": meta,
            "spec": {"type": "Scala", "mode": "cluster", "image": "spark:3.5.0", "sparkVersion": "3.5.0",
                     "mainClass": "org.apache.spark.examples.SparkPi",
                     "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                     "driver": {"cores": 1, "memory": "1g", "memoryOverhead": "512m", "serviceAccount": "spark"},
                     "executor": {"cores": 2, "instances": 2, "memory": "2g"}}}


def workflow(name: str, duration: float | None) -> dict[str, Any]:
    """A one-step Workflow asking, by the annotation, for 5 CPUs and 8Gi."""
    annotations = {c.ANNOTATION_ARGO_MIN_RESOURCES: '{"cpu": "5", "memory": "8Gi"}'}
    if duration is not None:
        annotations[c.ANNOTATION_SIM_DURATION] = str(duration)
    return {"apiVersion": c.ARGO_API_VERSION, "kind": c.ARGO_WORKFLOW_KIND,
            "metadata": {"name": name, "namespace": "default", "labels": {c.LABEL_QUOTA_NAME: "team"},
                         "annotations": annotations},
            "spec": {"entrypoint": "main", "templates": [
                {"name": "main", "container": {"image": "busybox", "command": ["sleep", "1"],
                                               "resources": {"requests": {"cpu": "5", "memory": "8Gi"}}}}]}}


def ray_cluster(name: str) -> dict[str, Any]:
    """A head (1 CPU) and a group of 2 workers (2 CPUs each): 5 CPUs."""
    def template(cpu: str) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.9.0",
                                         "resources": {"requests": {"cpu": cpu, "memory": "2Gi"},
                                                       "limits": {"cpu": cpu, "memory": "2Gi"}}}]}}

    return {"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_CLUSTER_KIND,
            "metadata": {"name": name, "namespace": "default", "labels": {c.LABEL_QUOTA_NAME: "team"}},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": template("1")},
                     "workerGroupSpecs": [{"groupName": "small", "replicas": 2, "minReplicas": 1,
                                           "maxReplicas": 3, "rayStartParams": {}, "template": template("2")}]}}


async def live_pods(system: System, selector: str) -> list[dict[str, Any]]:
    pods = (await system.get_json("pods", "-l", selector))["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def pods_counted(system: System, unit: str, running: int, per_pod_set: list[int]) -> Callable[[], Awaitable[bool]]:
    """Whether the unit's podState counts ``running`` pods, and its admissions so many per pod set."""
    async def counted() -> bool:
        status = (await system.unit(unit)).get("status") or {}
        return status.get("podState") == {"running": running, "pending": 0} and \
            [a.get("running") for a in status.get("admissions") or ()] == per_pod_set
    return counted


async def test_spark_applications_queue_run_and_release_their_quota(system: System) -> None:
    await system.apply(quota("team", 2, 2))  # 8 CPUs: one application (5 CPUs) at a time
    await system.apply(spark_app("first", duration=None))
    await system.wait_phase("first-spark-qu", c.Phase.RUNNING)
    await system.apply(spark_app("second", duration=1))
    await system.wait_phase("second-spark-qu", c.Phase.ENQUEUED)
    second = await system.get_json("sparkapplication", "second")
    assert second["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE and second["spec"]["suspend"] is True

    async def held() -> bool:  # as the Spark operator shows a suspended application
        app = await system.get_json("sparkapplication", "second")
        return (app.get("status") or {}).get("applicationState", {}).get("state") == "SUSPENDED"

    await system.wait_for(held, what="the second application SUSPENDED")
    assert not await live_pods(system, f"{c.LABEL_SPARK_APP_NAME}=second")
    unit = await system.unit("first-spark-qu")
    assert unit["spec"]["consumerRef"]["kind"] == c.SPARK_APPLICATION_KIND
    assert unit["spec"]["resource"] == {"cpu": "5", "memory": "5632Mi"}

    async def running() -> bool:
        app = await system.get_json("sparkapplication", "first")
        pods = await live_pods(system, f"{c.LABEL_SPARK_APP_NAME}=first")
        return (app.get("status") or {}).get("applicationState", {}).get("state") == "RUNNING" and \
            sorted(p["metadata"]["name"] for p in pods) == ["first-driver", "first-exec-1", "first-exec-2"]

    await system.wait_for(running, what="the driver and 2 executors running")
    await system.wait_for(pods_counted(system, "first-spark-qu", 3, [1, 2]), what="the driver and executors counted")
    await system.akubectl("delete", "sparkapplication", "first")
    await system.wait_phase("second-spark-qu", c.Phase.SUCCEED, timeout=30)
    done = await system.get_json("sparkapplication", "second")
    assert done["status"]["applicationState"]["state"] == "COMPLETED"


async def test_workflows_queue_by_their_min_resources_run_and_release_their_quota(system: System) -> None:
    await system.apply(quota("team", 2, 2))  # 8 CPUs: one workflow (5 CPUs by its annotation) at a time
    await system.apply(workflow("first", duration=None))
    await system.wait_phase("first", c.Phase.RUNNING)  # the unit has the Workflow's own name
    await system.apply(workflow("second", duration=1))
    await system.wait_phase("second", c.Phase.ENQUEUED)
    second = await system.get_json("workflow", "second")
    assert second["spec"]["suspend"] is True
    assert not await live_pods(system, f"{c.LABEL_ARGO_WORKFLOW}=second")
    unit = await system.unit("first")
    assert unit["spec"]["consumerRef"]["kind"] == c.ARGO_WORKFLOW_KIND
    assert unit["spec"]["resource"] == {"cpu": "5", "memory": "8Gi"}

    async def running() -> bool:
        wf = await system.get_json("workflow", "first")
        pods = await live_pods(system, f"{c.LABEL_ARGO_WORKFLOW}=first")
        return wf["spec"]["suspend"] is False and (wf.get("status") or {}).get("phase") == "Running" and \
            len(pods) == 1 and pods[0]["status"]["phase"] == "Running"

    await system.wait_for(running, what="the workflow's pod running")
    await system.wait_for(pods_counted(system, "first", 1, [1]), what="the workflow's pod counted")
    await system.akubectl("delete", "workflow", "first")
    await system.wait_phase("second", c.Phase.SUCCEED, timeout=30)
    done = await system.get_json("workflow", "second")
    assert done["status"]["phase"] == "Succeeded"


async def test_ray_clusters_queue_serve_until_deleted_and_release_their_quota(system: System) -> None:
    await system.apply(quota("team", 2, 2))  # 8 CPUs: one cluster (5 CPUs) at a time
    await system.apply(ray_cluster("first"))
    await system.wait_phase("first-raycluster-qu", c.Phase.RUNNING)
    await system.apply(ray_cluster("second"))
    await system.wait_phase("second-raycluster-qu", c.Phase.ENQUEUED)
    second = await system.get_json("raycluster", "second")
    assert second["spec"]["suspend"] is True
    assert not await live_pods(system, f"{c.LABEL_RAY_CLUSTER}=second")
    unit = await system.unit("first-raycluster-qu")
    assert unit["spec"]["consumerRef"]["kind"] == c.RAY_CLUSTER_KIND
    assert unit["spec"]["resource"] == {"cpu": "5", "memory": "6Gi"}

    async def ready() -> bool:
        cluster = await system.get_json("raycluster", "first")
        pods = await live_pods(system, f"{c.LABEL_RAY_CLUSTER}=first")
        return (cluster.get("status") or {}).get("state") == "ready" and len(pods) == 3 and \
            all(p["status"]["phase"] == "Running" for p in pods)

    await system.wait_for(ready, what="the Ray cluster's 3 pods running, the cluster ready")
    await system.akubectl("delete", "raycluster", "first")
    await system.wait_phase("second-raycluster-qu", c.Phase.RUNNING, timeout=30)
    assert (await system.get_json("raycluster", "second"))["spec"]["suspend"] is False


async def test_the_ray_cluster_kuberay_makes_for_a_rayjob_is_not_queued_a_second_time(system: System) -> None:
    """With both ``ray`` and ``raycluster`` on, the RayCluster KubeRay makes for a RayJob (owned
    by it, labelled as made for it) is neither suspended by the webhook nor given a unit: its
    RayJob is queued for it (the simulated KubeRay makes none: it is made here as KubeRay would)."""
    await system.apply(quota("team", 2, 2))  # 8 CPUs: one Ray cluster (5 CPUs) at a time
    job = rayjob("rj")
    job["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: "team"}
    await system.apply(job)
    await system.wait_phase("rj-ray-qu", c.Phase.RUNNING)
    owner = await system.get_json("rayjob", "rj")
    uid, name = owner["metadata"]["uid"], owner["status"]["rayClusterName"]  # (KubeRay's name for it)
    made = ray_cluster(name)
    made["metadata"]["labels"].update({c.LABEL_RAY_ORIGINATED_FROM_CRD: c.RAY_JOB_KIND,
                                       c.LABEL_RAY_ORIGINATED_FROM_CR_NAME: "rj"})
    made["metadata"]["ownerReferences"] = [{"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_JOB_KIND, "name": "rj",
                                            "uid": uid, "controller": True, "blockOwnerDeletion": True}]
    await system.apply(made)
    stored = await system.get_json("raycluster", name)
    assert c.ANNOTATION_SUSPEND not in (stored["metadata"].get("annotations") or {})
    assert stored["spec"].get("suspend") is not True
    # A RayCluster of its own, made after it, is queued (and waits: rj holds the quota).
    await system.apply(ray_cluster("own"))
    await system.wait_phase("own-raycluster-qu", c.Phase.ENQUEUED)
    units = sorted(u["metadata"]["name"] for u in (await system.get_json("queueunits"))["items"])
    assert units == ["own-raycluster-qu", "rj-ray-qu"]
    assert (await system.get_json("raycluster", name))["spec"].get("suspend") is not True


def mpi_v1alpha1(name: str, duration: float | None) -> dict[str, Any]:
    """The mpi-operator's v1alpha1 form: 2 workers of 2 CPUs and 1 GPU (the launcher not counted)."""
    annotations = {} if duration is None else {c.ANNOTATION_SIM_DURATION: str(duration)}
    return {"apiVersion": c.MPI_V1ALPHA1_API_VERSION, "kind": c.MPI_JOB_KIND,
            "metadata": {"name": name, "namespace": "default", "labels": {c.LABEL_QUOTA_NAME: "team"},
                         "annotations": annotations},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "mpi", "image": "horovod/horovod:0.28.1",
                 "resources": {"limits": {"cpu": "2", "memory": "4Gi", c.GPU: "1"}}}]}}}}


async def test_mpijobs_in_the_v1alpha1_form_queue_run_and_release_their_quota(system: System) -> None:
    await system.apply(quota("team", 2, 3))  # 3 GPUs: one MPIJob (2 GPUs) at a time
    await system.apply(mpi_v1alpha1("first", duration=None))
    await system.wait_phase("first-mpi-qu", c.Phase.RUNNING)
    # Created as v1alpha1, sent to our webhook as v1alpha1 (its rules name that version too),
    # read (in v1, which the server serves it as) by its shape.
    await system.apply(mpi_v1alpha1("second", duration=1))
    await system.wait_phase("second-mpi-qu", c.Phase.ENQUEUED)
    second = await system.get_json("mpijobs.v1alpha1.kubeflow.org", "second")
    assert second["apiVersion"] == c.MPI_V1ALPHA1_API_VERSION
    assert second["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
    assert "runPolicy" not in second["spec"]  # (the v1 form's field: the annotation alone holds it)
    assert not await live_pods(system, f"{c.LABEL_MPI_JOB_NAME_V1ALPHA1}=second")
    unit = await system.unit("first-mpi-qu")
    # Named by the version it was created in, though read in v1: consumerRef and owner both.
    assert unit["spec"]["consumerRef"] == {"apiVersion": c.MPI_V1ALPHA1_API_VERSION, "kind": c.MPI_JOB_KIND,
                                           "name": "first", "namespace": "default"}
    assert [o["apiVersion"] for o in unit["metadata"]["ownerReferences"]] == [c.MPI_V1ALPHA1_API_VERSION]
    assert unit["spec"]["resource"] == {"cpu": "4", "memory": "8Gi", c.GPU: "2"}

    async def running() -> bool:
        job = await system.get_json("mpijobs.v1alpha1.kubeflow.org", "first")
        pods = await live_pods(system, f"{c.LABEL_MPI_JOB_NAME_V1ALPHA1}=first")
        return (job.get("status") or {}).get("launcherStatus") == "Active" and \
            sorted(p["metadata"]["name"] for p in pods) == ["first-launcher", "first-worker-0", "first-worker-1"]

    await system.wait_for(running, what="the launcher and 2 workers running")
    await system.wait_for(pods_counted(system, "first-mpi-qu", 3, [2]), what="the launcher and workers counted")
    assert "runPolicy" not in (await system.get_json("mpijobs.v1alpha1.kubeflow.org", "first"))["spec"]  # (resumed)
    launcher = (await system.get_json("pod", "first-launcher"))["spec"]["containers"][0]["resources"]
    assert c.GPU not in launcher["limits"]  # the launcher asks for no GPU
    await system.akubectl("delete", "mpijobs.v1alpha1.kubeflow.org", "first")
    await system.wait_phase("second-mpi-qu", c.Phase.SUCCEED, timeout=30)
    done = await system.get_json("mpijobs.v1alpha1.kubeflow.org", "second")
    assert done["status"]["launcherStatus"] == "Succeeded"
