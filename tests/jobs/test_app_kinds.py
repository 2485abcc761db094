"""The adapters of the kinds Koord-Queue users run beside the training jobs: SparkApplication,
Argo Workflow, RayCluster, and MPIJob in the mpi-operator's v1alpha1 form. Per kind: the
demand (as Koord-Queue computes it, or where ours differs, why), the suspend and resume
patches, the QueueUnit's name, and the status read."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.jobs import adapter_for
from koordqueue.jobs.argo import WorkflowAdapter
from koordqueue.jobs.base import JobAdapter, JobState
from koordqueue.jobs.mpijob import MPIJobAdapter
from koordqueue.jobs.parents import Parent, no_parents, queued
from koordqueue.jobs.raycluster import RayClusterAdapter
from koordqueue.jobs.spark import SparkApplicationAdapter, jvm_memory
from koordqueue.jobs.unit import unit_info
from tests.jobs.helpers import GI, MI, merge_patch


def meta(name: str, **annotations: str) -> dict[str, Any]:
    return {"name": name, "namespace": "default", "annotations": dict(annotations)}


SPARK: dict[str, Any] = {
    "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "metadata": meta("pi"),
    "spec": {"type": "Scala", "mode": "cluster", "image": "spark:3.5.0",
             "batchSchedulerOptions": {"priorityClassName": "batch"},
             "driver": {"cores": 1, "coreLimit": "1200m", "memory": "512m", "memoryOverhead": "512m"},
             "executor": {"cores": 2, "coreRequest": "1500m", "instances": 3, "memory": "2g",
                          "gpu": {"name": "nvidia.com/gpu", "quantity": 1}}}}
WORKFLOW: dict[str, Any] = {
    "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
    "metadata": meta("wf", **{"koord-queue/min-resources": '{"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 2}'}),
    "spec": {"entrypoint": "main", "templates": [{"name": "other", "priorityClassName": "low"},
                                                 {"name": "main", "priorityClassName": "high"}]}}
RAY_CLUSTER: dict[str, Any] = {
    "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta("rc"),
    "spec": {"headGroupSpec": {"template": {"spec": {
                 "priorityClassName": "head-class",
                 "containers": [{"name": "ray-head", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}}},
             "workerGroupSpecs": [
                 {"groupName": "gpu", "replicas": 2, "numOfHosts": 2, "template": {"spec": {"containers": [
                     {"name": "w", "resources": {"limits": {"cpu": "4", "nvidia.com/gpu": 1}}}]}}},
                 {"groupName": "cpu", "template": {"spec": {"containers": [  # replicas absent: 1
                     {"name": "w", "resources": {"requests": {"cpu": "2"}}}]}}}]}}
MPI_V1ALPHA1: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1alpha1", "kind": "MPIJob", "metadata": meta("hvd"),
    "spec": {"replicas": 4, "template": {"spec": {"priorityClassName": "mpi-class", "containers": [
        {"name": "mpi", "image": "horovod", "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "2"}}}]}}}}


def adapter(job: dict[str, Any]) -> JobAdapter:
    found = adapter_for(job["apiVersion"], job["kind"])
    assert found is not None
    return found


@pytest.mark.parametrize(("job", "cls", "unit", "sets", "demand"), [
    # Driver: coreRequest absent, cores 1 (coreLimit only when neither); 512m + 512m overhead.
    # Executors: coreRequest over cores, 2g, the GPU (Koord-Queue leaves GPUs out of the demand).
    (SPARK, SparkApplicationAdapter, "pi-spark-qu",
     [("driver", 1, {"cpu": 1000, "memory": 1024 * MI}),
      ("executor", 3, {"cpu": 1500, "memory": 2 * GI, "nvidia.com/gpu": 1000})],
     {"cpu": 5500, "memory": 7 * GI, "nvidia.com/gpu": 3000}),
    (WORKFLOW, WorkflowAdapter, "wf",  # no suffix: the Workflow's own name
     [("default", 1, {"cpu": 4000, "memory": 8 * GI, "nvidia.com/gpu": 2000})],
     {"cpu": 4000, "memory": 8 * GI, "nvidia.com/gpu": 2000}),
    (RAY_CLUSTER, RayClusterAdapter, "rc-raycluster-qu",
     [("head", 1, {"cpu": 1000, "memory": 2 * GI}), ("gpu", 4, {"cpu": 4000, "nvidia.com/gpu": 1000}),
      ("cpu", 1, {"cpu": 2000})],
     {"cpu": 19000, "memory": 2 * GI, "nvidia.com/gpu": 4000}),
    (MPI_V1ALPHA1, MPIJobAdapter, "hvd-mpi-qu",  # replicas x template; the launcher not counted
     [("worker", 4, {"cpu": 2000, "nvidia.com/gpu": 1000})],
     {"cpu": 8000, "nvidia.com/gpu": 4000}),
])
def test_demand_and_unit_name(job: dict[str, Any], cls: type[JobAdapter], unit: str,
                              sets: list[tuple[str, int, dict[str, int]]], demand: dict[str, int]) -> None:
    a = adapter(job)
    assert type(a) is cls
    assert [(s.name, s.count, s.request) for s in a.pod_sets(job)] == sets
    assert a.demand(job) == demand
    assert a.unit_name(job) == unit
    info = unit_info(job, a, {}, created=1.0)
    assert (info.name, info.request) == (unit, demand)


def test_priorities() -> None:
    classes = {"batch": 5, "high": 9, "low": 1, "head-class": 3, "mpi-class": 7}
    assert adapter(SPARK).priority(SPARK, classes) == 5  # batchSchedulerOptions.priorityClassName
    assert adapter(WORKFLOW).priority(WORKFLOW, classes) == 9  # the entrypoint template's class
    with_priority = copy.deepcopy(WORKFLOW)
    with_priority["spec"]["priority"] = 42
    assert adapter(WORKFLOW).priority(with_priority, classes) == 42  # spec.priority first, as Koord-Queue
    assert adapter(RAY_CLUSTER).priority(RAY_CLUSTER, classes) == 3
    assert adapter(MPI_V1ALPHA1).priority(MPI_V1ALPHA1, classes) == 7


@pytest.mark.parametrize(("job", "suspend", "resume"), [
    (SPARK, {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: "true"}}, "spec": {"suspend": True}},
     {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: None}}, "spec": {"suspend": False}}),
    (WORKFLOW, {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: "true"}}, "spec": {"suspend": True}},
     {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: None}}, "spec": {"suspend": False}}),
    (RAY_CLUSTER, {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: "true"}}, "spec": {"suspend": True}},
     {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: None}}, "spec": {"suspend": False}}),
    # v1alpha1 has no runPolicy: the annotation alone holds it, as in Koord-Queue (none written there).
    (MPI_V1ALPHA1, {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: "true"}}},
     {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: None}}}),
])
def test_suspend_and_resume_patches(job: dict[str, Any], suspend: dict[str, Any], resume: dict[str, Any]) -> None:
    a = adapter(job)
    native = a.has_native_suspend(job)  # the controller's patches are made of the job's view, not the job
    assert a.suspend_patch(job) == a.suspend_patch({}, native=native) == suspend
    assert a.resume_patch(job) == a.resume_patch({}, native=native) == resume
    held = merge_patch(job, suspend)
    assert a.is_suspended(held)
    assert not a.is_suspended(merge_patch(held, resume))


def test_only_the_annotation_holds_an_mpijob_in_the_v1alpha1_form() -> None:
    a = adapter(MPI_V1ALPHA1)
    assert not a.is_suspended(merge_patch(MPI_V1ALPHA1, {"spec": {"runPolicy": {"suspend": True}}}))
    assert a.is_suspended(merge_patch(MPI_V1ALPHA1, {"metadata": {"annotations": {c.ANNOTATION_SUSPEND: "true"}}}))


def test_an_mpijob_in_the_v1_form_keeps_runpolicy() -> None:
    v1 = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": meta("m"), "spec": {"mpiReplicaSpecs": {
        "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "w"}]}}}}}}
    a = adapter(v1)
    assert a.suspend_patch(v1)["spec"] == {"runPolicy": {"suspend": True}}
    assert [s.name for s in a.pod_sets(v1)] == ["worker"]
    assert a.role_patch({"Worker": {"replicas": 1}}) == {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1}}}}
    assert a.role_patch({"worker": {"replicas": 1}}) == {"spec": {"replicas": 1}}  # the v1alpha1 form's
    # The v1alpha1 form served as v1 (one CRD, no conversion) is read by its shape.
    alpha_as_v1 = {**MPI_V1ALPHA1, "apiVersion": "kubeflow.org/v1"}
    assert adapter(alpha_as_v1).demand(alpha_as_v1) == {"cpu": 8000, "nvidia.com/gpu": 4000}


@pytest.mark.parametrize(("job", "status", "state"), [
    (SPARK, None, JobState.PENDING),
    (SPARK, {"applicationState": {"state": "SUBMITTED"}}, JobState.PENDING),
    (SPARK, {"applicationState": {"state": "SUSPENDED"}}, JobState.PENDING),
    (SPARK, {"applicationState": {"state": "RUNNING"}}, JobState.RUNNING),
    (SPARK, {"applicationState": {"state": "SUCCEEDING"}}, JobState.RUNNING),
    (SPARK, {"applicationState": {"state": "COMPLETED"}}, JobState.SUCCEEDED),
    (SPARK, {"applicationState": {"state": "SUBMISSION_FAILED"}}, JobState.FAILED),
    (WORKFLOW, {"phase": "Running"}, JobState.RUNNING),
    (WORKFLOW, {"phase": "Succeeded"}, JobState.SUCCEEDED),
    (WORKFLOW, {"phase": "Error"}, JobState.FAILED),
    (RAY_CLUSTER, {"state": "ready"}, JobState.RUNNING),
    (RAY_CLUSTER, {"readyWorkerReplicas": 1}, JobState.RUNNING),
    (RAY_CLUSTER, {"state": "suspended"}, JobState.PENDING),
    (RAY_CLUSTER, {"state": "failed"}, JobState.FAILED),
    (MPI_V1ALPHA1, {"launcherStatus": "Active"}, JobState.RUNNING),
    (MPI_V1ALPHA1, {"launcherStatus": "Succeeded"}, JobState.SUCCEEDED),
    (MPI_V1ALPHA1, {"launcherStatus": "Failed"}, JobState.FAILED),
    (MPI_V1ALPHA1, {}, JobState.PENDING),
])
def test_status(job: dict[str, Any], status: dict[str, Any] | None, state: JobState) -> None:
    with_status = {**job, **({"status": status} if status is not None else {})}
    assert adapter(job).status(with_status) is state


def test_a_suspended_workflow_waits_whatever_its_phase() -> None:
    held = {**WORKFLOW, "spec": {**WORKFLOW["spec"], "suspend": True}, "status": {"phase": "Running"}}
    assert adapter(held).status(held) is JobState.PENDING  # Argo keeps a suspended workflow Running


def test_pod_selectors() -> None:
    assert adapter(SPARK).pod_selector(SPARK) == {"spark-app-name": "pi"}
    assert adapter(WORKFLOW).pod_selector(WORKFLOW) == {"workflows.argoproj.io/workflow": "wf"}
    assert adapter(RAY_CLUSTER).pod_selector(RAY_CLUSTER) == {"ray.io/cluster": "rc"}
    assert adapter(MPI_V1ALPHA1).pod_selector(MPI_V1ALPHA1) == {"mpi_job_name": "hvd"}


@pytest.mark.parametrize(("text", "demand"), [
    ('{"cpu": "2", "memory": "1Gi"}', {"cpu": 2000, "memory": GI}),  # JSON
    ("cpu: 2\nmemory: 1Gi\n", {"cpu": 2000, "memory": GI}),  # YAML
    ("", {}),  # absent or empty: asks for nothing, as in Koord-Queue
])
def test_workflow_min_resources(text: str, demand: dict[str, int]) -> None:
    wf = {**WORKFLOW, "metadata": meta("wf", **{"koord-queue/min-resources": text})}
    assert adapter(wf).demand(wf) == demand


@pytest.mark.parametrize("text", ["[1, 2]", '{"cpu": "lots"}', "{cpu: [}"])
def test_an_unreadable_min_resources_is_refused(text: str) -> None:
    wf = {**WORKFLOW, "metadata": meta("wf", **{"koord-queue/min-resources": text})}
    with pytest.raises(InvalidObject, match="min-resources|cpu"):
        adapter(wf).demand(wf)


@pytest.mark.parametrize(("size", "quantity"), [
    ("512m", "512Mi"), ("2g", "2Gi"), ("1t", "1Ti"), ("4096", "4096Mi"), (1024, "1024Mi"), ("2Gi", "2Gi"),
    ("3G", "3Gi"), ("100k", "100Ki"),
])
def test_spark_memory_sizes_are_jvm_sizes(size: object, quantity: str) -> None:
    assert jvm_memory(size, "memory") == quantity


def test_spark_client_mode_and_dynamic_allocation() -> None:
    app = copy.deepcopy(SPARK)
    app["spec"]["mode"] = "client"  # the driver runs outside the cluster
    del app["spec"]["executor"]["instances"]
    app["spec"]["dynamicAllocation"] = {"enabled": True, "initialExecutors": 2}
    assert [(s.name, s.count) for s in adapter(app).pod_sets(app)] == [("executor", 2)]


def test_the_ray_cluster_of_a_rayjob_is_not_queued_its_rayjob_is() -> None:
    """KubeRay's cluster for a RayJob (controlled by it, the RayJob there with that uid) is
    skipped, as Koord-Queue's raycluster extension skips it: else it would be queued a second
    time. Its label alone, or an owner that is not there, proves nothing (issue 29)."""
    a = adapter(RAY_CLUSTER)
    owner = {"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_JOB_KIND, "name": "rj", "uid": "1", "controller": True}

    cluster_size = {"cpu": 19000, "memory": 2 * 2**30 * 1000, c.GPU: 4000}  # (what RAY_CLUSTER asks)

    def there(kind: str, namespace: str, name: str) -> Parent | None:
        return Parent("1", {c.RAY_CLUSTER_KIND: ("rj-raycluster-abcde", None)}, cluster_size) \
            if (kind, namespace, name) == (c.RAY_JOB_KIND, "default", "rj") else None

    owned = {**RAY_CLUSTER, "metadata": {**meta("rj-raycluster-abcde"), "ownerReferences": [owner]}}
    labelled = {**RAY_CLUSTER, "metadata": {**meta("rj-raycluster-abcde"),
                                            "labels": {c.LABEL_RAY_ORIGINATED_FROM_CRD: c.RAY_JOB_KIND}}}
    assert queued(a, RAY_CLUSTER, there)
    assert not queued(a, owned, there)
    assert queued(a, labelled, there) and queued(a, owned, no_parents)
    renamed = {**owned, "metadata": {**owned["metadata"], "name": "rj-other"}}
    assert queued(a, renamed, there)  # not the cluster its RayJob names in its status
    cluster_size["cpu"] = 18000
    assert queued(a, owned, there)  # asking more than its RayJob
    made_by_other = {**RAY_CLUSTER, "metadata": {**meta("rc"), "ownerReferences": [{**owner, "kind": "Deployment"}],
                                                 "labels": {c.LABEL_RAY_ORIGINATED_FROM_CRD: c.RAY_CLUSTER_KIND}}}
    assert queued(a, made_by_other, there)
    assert queued(a, {**RAY_CLUSTER, "metadata": "broken"}, there)  # (never raises: the job's view says what is wrong)
    for job in (SPARK, WORKFLOW, MPI_V1ALPHA1):
        assert queued(adapter(job), {**job, "metadata": {**job["metadata"], "ownerReferences": [owner]}}, there)
