"""Each adapter on the seed's manifests and on typical manifests of its kind."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.jobs import ADAPTERS, adapter_for
from koordqueue.jobs.argo import WorkflowAdapter
from koordqueue.jobs.base import JobAdapter, JobState
from koordqueue.jobs.batchjob import BatchJobAdapter
from koordqueue.jobs.mpijob import MPIJobAdapter
from koordqueue.jobs.parents import Parent, no_parents, queued
from koordqueue.jobs.pytorchjob import PyTorchJobAdapter
from koordqueue.jobs.raycluster import RayClusterAdapter
from koordqueue.jobs.rayjob import RayJobAdapter
from koordqueue.jobs.spark import SparkApplicationAdapter
from koordqueue.jobs.tfjob import TFJobAdapter
from koordqueue.jobs.unit import unit_info
from tests.jobs.helpers import GI, MI, load, merge_patch


def adapter(job: dict[str, Any]) -> JobAdapter:
    found = adapter_for(job["apiVersion"], job["kind"])
    assert found is not None
    return found


def test_registry() -> None:
    assert {type(a) for a in ADAPTERS.values()} == {
        PyTorchJobAdapter,
        TFJobAdapter,
        MPIJobAdapter,
        BatchJobAdapter,
        RayJobAdapter,
        RayClusterAdapter,
        SparkApplicationAdapter,
        WorkflowAdapter,
    }
    assert isinstance(adapter_for("kubeflow.org/v1", "PyTorchJob"), PyTorchJobAdapter)
    assert adapter_for("kubeflow.org/v1alpha1", "MPIJob") is adapter_for("kubeflow.org/v1", "MPIJob")
    assert isinstance(adapter_for("batch/v1", "Job"), BatchJobAdapter)
    assert adapter_for("kubeflow.org/v1alpha1", "PyTorchJob") is None
    assert adapter_for("apps/v1", "Deployment") is None


def test_seed_pytorchjob() -> None:
    job = load("seed-pytorchjob.yaml")
    a = adapter(job)
    per_pod = {"cpu": 4000, "memory": 8 * GI, "nvidia.com/gpu": 1000}
    sets = a.pod_sets(job)
    assert [(s.name, s.count, s.request, s.min_count) for s in sets] == [
        ("master", 1, per_pod, None),
        ("worker", 1, per_pod, None),
    ]
    assert sets[0].template is job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert a.demand(job) == {"cpu": 8000, "memory": 16 * GI, "nvidia.com/gpu": 2000}
    assert a.priority(job, {}) == 10  # the annotation
    assert a.requested_queue(job) == "pytorch-team-a"
    assert a.requested_quota(job) is None
    assert a.preemptible(job)
    assert a.unit_name(job) == "pytorch-training-job-py-qu"
    assert a.pod_selector(job) == {"training.kubeflow.org/job-name": "pytorch-training-job"}
    assert a.status(job) is JobState.PENDING
    assert not a.is_suspended(job)

    unit = unit_info(job, a, {}, created=12.5)
    assert (unit.namespace, unit.name, unit.priority, unit.created) == (
        "default",
        "pytorch-training-job-py-qu",
        10,
        12.5,
    )
    assert unit.request == a.demand(job)
    assert (unit.queue_name, unit.quota_name, unit.preemptible) == ("pytorch-team-a", None, True)


def test_seed_high_priority_pytorchjob() -> None:
    job = load("seed-high-priority-pytorchjob.yaml")
    a = adapter(job)
    assert a.priority(job, {"high-priority": 1000}) == 1000
    assert a.priority(job, {}) == 0  # the class is not (yet) known
    assert a.priority_class_name(job) == "high-priority"
    assert a.demand(job) == {"cpu": 8000, "memory": 16 * GI, "nvidia.com/gpu": 2000}
    assert a.requested_queue(job) is None


@pytest.mark.parametrize(
    "name",
    [
        "seed-pytorchjob.yaml",
        "seed-high-priority-pytorchjob.yaml",
        "tfjob.yaml",
        "mpijob.yaml",
        "batchjob.yaml",
        "rayjob.yaml",
    ],
)
def test_suspend_and_resume_patches(name: str) -> None:
    job = load(name)
    a = adapter(job)
    suspended = merge_patch(job, a.suspend_patch(job))
    assert a.is_suspended(suspended)
    assert suspended["metadata"]["annotations"]["scheduling.x-k8s.io/suspend"] == "true"
    assert a.native_suspended(suspended)
    resumed = merge_patch(suspended, a.resume_patch(suspended))
    assert not a.is_suspended(resumed)
    assert "scheduling.x-k8s.io/suspend" not in resumed["metadata"].get("annotations", {})
    # Nothing else of the job changed.
    assert resumed["metadata"]["name"] == job["metadata"]["name"]
    assert a.demand(resumed) == a.demand(job)


def test_suspend_patch_shapes() -> None:
    pytorch = load("seed-pytorchjob.yaml")
    assert PyTorchJobAdapter().suspend_patch(pytorch) == {
        "metadata": {"annotations": {"scheduling.x-k8s.io/suspend": "true"}},
        "spec": {"runPolicy": {"suspend": True}},
    }
    assert BatchJobAdapter().resume_patch(load("batchjob.yaml")) == {
        "metadata": {"annotations": {"scheduling.x-k8s.io/suspend": None}},
        "spec": {"suspend": False},
    }


@pytest.mark.parametrize("name", ["seed-pytorchjob.yaml", "tfjob.yaml", "mpijob.yaml", "batchjob.yaml", "rayjob.yaml"])
def test_the_kinds_own_field_alone_says_whether_a_job_is_suspended(name: str) -> None:
    """Issue 29, item 1: its operator reads only the field, so a tenant who sets it to false
    (the annotation left) has a running job, and we must see one (and suspend it again)."""
    job = load(name)
    a = adapter(job)
    held = merge_patch(job, a.suspend_patch(job))
    flipped = merge_patch(held, a.native_suspend_patch(False))
    assert flipped["metadata"]["annotations"]["scheduling.x-k8s.io/suspend"] == "true"
    assert not a.is_suspended(flipped)
    # The annotation alone holds nothing either.
    assert not a.is_suspended(merge_patch(job, {"metadata": {"annotations": {"scheduling.x-k8s.io/suspend": "true"}},
                                                **a.native_suspend_patch(False)}))
    assert a.is_suspended(merge_patch(flipped, a.native_suspend_patch(True)))


def test_tfjob() -> None:
    job = load("tfjob.yaml")
    a = adapter(job)
    sets = a.pod_sets(job)
    assert [(s.name, s.count) for s in sets] == [("ps", 2), ("chief", 1), ("worker", 4)]
    assert sets[2].request == {"cpu": 4000, "memory": 8 * GI, "nvidia.com/gpu": 1000}  # limits only
    assert a.demand(job) == {
        "cpu": 4000 + 1000 + 16000,
        "memory": 8 * GI + 2 * GI + 32 * GI,
        "nvidia.com/gpu": 4000,
    }
    # Chief's class counts before the PS's, although PS comes first in the manifest.
    assert a.priority(job, {"high-priority": 100, "low-priority": 1}) == 100
    assert a.priority(job, {"low-priority": 1}) == 1  # Chief's class unknown: the next template's
    assert a.priority_class_name(job) == "high-priority"
    assert a.requested_quota(job) == "team-b"
    assert a.unit_name(job) == "dist-mnist-tf-qu"
    assert not a.is_suspended(job)


def test_mpijob() -> None:
    job = load("mpijob.yaml")
    a = adapter(job)
    sets = a.pod_sets(job)
    assert [(s.name, s.count, s.request) for s in sets] == [
        ("launcher", 1, {"cpu": 500, "memory": 512 * MI}),
        ("worker", 2, {"nvidia.com/gpu": 1000, "cpu": 8000}),  # limit fills the missing request
    ]
    assert a.priority(job, {"launcher-class": 7, "worker-class": 9}) == 7
    assert a.unit_name(job) == "tensorflow-benchmarks-mpi-qu"


def test_batch_job() -> None:
    job = load("batchjob.yaml")
    a = adapter(job)
    sets = a.pod_sets(job)
    assert [(s.name, s.count, s.request) for s in sets] == [("main", 2, {"cpu": 100, "memory": 64 * MI})]
    assert a.demand(job) == {"cpu": 200, "memory": 128 * MI}
    assert a.is_suspended(job)  # spec.suspend: true
    assert not a.preemptible(job)
    assert a.unit_name(job) == "pi"
    assert a.pod_selector(job) == {"batch.kubernetes.io/job-name": "pi"}
    del job["spec"]["completions"], job["spec"]["parallelism"]
    assert a.pod_sets(job)[0].count == 1  # parallelism defaults to 1


@pytest.mark.parametrize(("suspend", "types", "expected"), [
    (True, ("Suspended", "SuccessCriteriaMet"), True),  # Complete waits for a resume
    (True, ("Suspended", "FailureTarget"), True),
    (True, ("SuccessCriteriaMet", "Complete"), False),  # finished already
    (True, ("FailureTarget", "Failed"), False),
    (True, ("Suspended",), False),  # not ended
    (False, ("SuccessCriteriaMet",), False),  # not suspended: Complete comes by itself
])
def test_a_batch_job_that_ended_while_suspended_finishes_once_resumed(
        suspend: bool, types: tuple[str, ...], expected: bool) -> None:
    job = load("batchjob.yaml")
    job["spec"]["suspend"] = suspend
    job["status"] = _conditions(*types)
    assert BatchJobAdapter().finishes_once_resumed(job) is expected
    assert not adapter(load("seed-pytorchjob.yaml")).finishes_once_resumed(load("seed-pytorchjob.yaml"))


def test_a_batch_job_made_by_a_queued_job_is_not_queued() -> None:
    """KubeRay's submitter Job, which its RayJob controls, is part of that RayJob: not queued a
    second time (on real KubeRay it was: a unit of its own). A Job some other controller
    made (a CronJob's), or merely owned, is queued as any; so is one whose owner is not
    there with that uid, or is of a kind that makes no Jobs (a forged owner, issue 29), or
    one the owner does not make: under another name, or asking more than it lets it."""
    job, a = load("batchjob.yaml"), BatchJobAdapter()  # "pi": 2 pods at once (completions) of 100m, 64Mi
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": "1", "controller": True}
    makes = {"Job": ("pi", {"cpu": 500, "memory": 200 * 2**20 * 1000})}
    parents = {("RayJob", "rj"): Parent("1", makes, {}), ("PyTorchJob", "pt"): Parent("2", {}, {})}

    def there(kind: str, namespace: str, name: str) -> Parent | None:
        return parents.get((kind, name)) if namespace == "default" else None

    def owned(*owners: dict[str, object]) -> dict[str, object]:
        return {**job, "metadata": {**job["metadata"], "namespace": "default", "ownerReferences": list(owners)}}

    assert queued(a, job, there)
    assert not queued(a, owned(rayjob), there)
    parents["RayJob", "rj"] = Parent("1", {"Job": ("other", makes["Job"][1])}, {})
    assert queued(a, owned(rayjob), there)  # it makes a Job of another name
    parents["RayJob", "rj"] = Parent("1", {"Job": ("pi", {"cpu": 100, "memory": 10**12})}, {})
    assert queued(a, owned(rayjob), there)  # 200m asked, 100m let
    parents["RayJob", "rj"] = Parent("1", makes, {})
    for owner in ({**rayjob, "controller": False}, {**rayjob, "apiVersion": "batch/v1", "kind": "CronJob"},
                  {**rayjob, "uid": "9"}, {**rayjob, "name": "gone"},
                  {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pt", "uid": "2", "controller": True}):
        assert queued(a, owned(owner), there), owner
    assert queued(a, owned(rayjob), no_parents)  # (the RayJob kind not queued: none is found)
    assert queued(a, {**job, "metadata": "broken"}, there)  # (never raises)


def test_rayjob() -> None:
    job = load("rayjob.yaml")
    a = adapter(job)
    sets = a.pod_sets(job)
    assert [(s.name, s.count) for s in sets] == [("head", 1), ("small-group", 2), ("tpu-group", 2)]
    assert a.demand(job) == {"cpu": 1000 + 4000 + 8000, "memory": 2 * GI + 8 * GI, "google.com/tpu": 8000}
    assert a.requested_queue(job) == "ray-queue"
    assert a.unit_name(job) == "rayjob-sample-ray-qu"
    # Its pods are its Ray cluster's: KubeRay labels them ray.io/cluster (and nothing on them
    # names the RayJob: ray.io/originated-from-cr-name is on the RayCluster it makes). Before
    # KubeRay names the cluster, no pod is its (not the submitter Job's, named as the RayJob).
    assert a.pod_selector(job) == {"ray.io/cluster": ""}
    job["status"] = {"rayClusterName": "rayjob-sample-x7k2b"}
    assert a.pod_selector(job) == {"ray.io/cluster": "rayjob-sample-x7k2b"}
    assert [labels.job for labels in a.pod_labels] == ["ray.io/cluster"]


def _conditions(*types: str, status: str = "True") -> dict[str, Any]:
    return {"conditions": [{"type": t, "status": status} for t in types]}


@pytest.mark.parametrize(
    ("name", "status", "state"),
    [
        ("seed-pytorchjob.yaml", None, JobState.PENDING),
        ("seed-pytorchjob.yaml", _conditions("Created"), JobState.PENDING),
        ("seed-pytorchjob.yaml", _conditions("Created", "Running"), JobState.RUNNING),
        ("seed-pytorchjob.yaml", _conditions("Created", "Restarting"), JobState.RUNNING),
        ("seed-pytorchjob.yaml", _conditions("Created", "Running", status="False"), JobState.PENDING),
        ("seed-pytorchjob.yaml", _conditions("Created", "Running", "Suspended"), JobState.PENDING),
        ("seed-pytorchjob.yaml", _conditions("Created", "Running", "Succeeded"), JobState.SUCCEEDED),
        ("tfjob.yaml", _conditions("Created", "Failed"), JobState.FAILED),
        ("mpijob.yaml", _conditions("Running"), JobState.RUNNING),
        ("batchjob.yaml", {"active": 2, "ready": 2}, JobState.RUNNING),
        ("batchjob.yaml", {"active": 2, "ready": 0}, JobState.PENDING),  # pods still pending
        ("batchjob.yaml", {"active": 2}, JobState.RUNNING),  # no ready count (before Kubernetes 1.24)
        ("batchjob.yaml", {"active": 0}, JobState.PENDING),
        ("batchjob.yaml", {"succeeded": 2, **_conditions("Complete")}, JobState.SUCCEEDED),
        ("batchjob.yaml", _conditions("Failed"), JobState.FAILED),
        # Kubernetes 1.31+: the outcome is decided before the last pods have stopped
        ("batchjob.yaml", {"active": 1, **_conditions("SuccessCriteriaMet")}, JobState.SUCCEEDED),
        ("batchjob.yaml", {"active": 1, "ready": 1, **_conditions("FailureTarget")}, JobState.FAILED),
        ("batchjob.yaml", {"active": 1, "ready": 1, **_conditions("SuccessCriteriaMet", status="False")},
         JobState.RUNNING),
        ("rayjob.yaml", {"jobDeploymentStatus": "Initializing"}, JobState.PENDING),
        ("rayjob.yaml", {"jobDeploymentStatus": "Running", "jobStatus": "PENDING"}, JobState.RUNNING),
        ("rayjob.yaml", {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, JobState.RUNNING),
        ("rayjob.yaml", {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, JobState.SUCCEEDED),
        ("rayjob.yaml", {"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}, JobState.FAILED),
        ("rayjob.yaml", {"jobDeploymentStatus": "Failed"}, JobState.FAILED),
    ],
)
def test_status(name: str, status: dict[str, Any] | None, state: JobState) -> None:
    job = load(name)
    if status is not None:
        job["status"] = status
    assert adapter(job).status(job) is state
