"""The pods of a job of every kind we queue are found and counted for it, per pod set, as
their operators label them: what podState and wait-for-pods-running are made from. The
labels read are each kind's registration (JobAdapter.pod_labels), so a kind added there is
counted here; the samples below must cover every kind (and every version of one)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.pods import PodIndex, pod_view
from koordqueue.controller.views import job_view
from koordqueue.jobs import ADAPTERS, adapter_for
from tests.jobs.helpers import load
from tests.jobs.test_app_kinds import MPI_V1ALPHA1, RAY_CLUSTER, SPARK, WORKFLOW

CLUSTER = "rayjob-sample-raycluster-abcde"  # the Ray cluster KubeRay made for the sample RayJob


def rayjob() -> dict[str, Any]:
    job = load("rayjob.yaml")
    job["status"] = {"rayClusterName": CLUSTER}  # its pods are found by it
    return job


def kubeflow(job: str, *roles: str) -> list[dict[str, str]]:
    return [{c.LABEL_JOB_NAME: job, c.LABEL_REPLICA_TYPE: role} for role in roles]


def ray(cluster: str, *groups: str) -> list[dict[str, str]]:
    """As KubeRay labels a Ray cluster's pods (common/pod.go labelPod): nothing names a RayJob."""
    return [{c.LABEL_RAY_CLUSTER: cluster, c.LABEL_RAY_GROUP: group, c.LABEL_RAY_IS_RAY_NODE: "yes",
             c.LABEL_RAY_NODE_TYPE: "head" if group == c.RAY_HEAD_GROUP else "worker"} for group in groups]


# Each kind's sample, the labels of its pods as its operator writes them, and how many of
# them run per pod set (the unit's podSet names).
SAMPLES: list[tuple[dict[str, Any], list[dict[str, str]], dict[str, int]]] = [
    (load("seed-pytorchjob.yaml"), kubeflow("pytorch-training-job", "master", "worker"), {"master": 1, "worker": 1}),
    (load("tfjob.yaml"), kubeflow("dist-mnist", "ps", "worker", "worker"), {"ps": 1, "worker": 2}),
    (load("mpijob.yaml"), kubeflow("tensorflow-benchmarks", "launcher", "worker", "worker"),
     {"launcher": 1, "worker": 2}),
    (load("batchjob.yaml"), [{c.LABEL_BATCH_JOB_NAME: "pi", "controller-uid": "1"}] * 2, {"": 2}),
    (rayjob(), ray(CLUSTER, c.RAY_HEAD_GROUP, "small-group", "small-group"),
     {"head": 1, "small-group": 2}),
    (RAY_CLUSTER, ray("rc", c.RAY_HEAD_GROUP, "gpu", "cpu"), {"head": 1, "gpu": 1, "cpu": 1}),
    (SPARK, [{c.LABEL_SPARK_APP_NAME: "pi", c.LABEL_SPARK_ROLE: role} for role in ("driver", "executor", "executor")],
     {"driver": 1, "executor": 2}),
    (WORKFLOW, [{c.LABEL_ARGO_WORKFLOW: "wf", "workflows.argoproj.io/completed": "false"}], {"": 1}),
    (MPI_V1ALPHA1, [{c.LABEL_MPI_JOB_NAME_V1ALPHA1: "hvd", c.LABEL_MPI_ROLE_V1ALPHA1: role}
                    for role in ("launcher", "worker", "worker")], {"launcher": 1, "worker": 2}),
]


def test_every_kind_and_version_has_a_sample() -> None:
    assert {(job["apiVersion"], job["kind"]) for job, _, _ in SAMPLES} == set(ADAPTERS)


@pytest.mark.parametrize(("job", "pod_labels", "running"), SAMPLES,
                         ids=[f"{job['apiVersion']}/{job['kind']}" for job, _, _ in SAMPLES])
def test_the_pods_of_a_job_of_every_kind_are_counted_for_it(job: dict[str, Any], pod_labels: list[dict[str, str]],
                                                             running: dict[str, int]) -> None:
    adapter = adapter_for(job["apiVersion"], job["kind"])
    assert adapter is not None
    view = job_view(copy.deepcopy(job), adapter, {})
    assert view.invalid is None and view.pods is not None
    namespace = job["metadata"].get("namespace") or "default"
    index = PodIndex()
    pods = []
    for i, labels in enumerate([*pod_labels, {"app": "other"}]):  # (and a pod of no job, on no node: not kept)
        pods.append(pod_view({"metadata": {"name": f"p{i}", "namespace": namespace, "labels": labels},
                              "status": {"phase": "Running"}}))
    assert pods[-1] is None
    for pod in pods[:-1]:
        assert pod is not None and pod.job == (view.pods[0], namespace, view.pods[1])
        index.put(pod)
    index.put(pod_view({"metadata": {"name": "waiting", "namespace": namespace, "labels": pod_labels[0]},
                        "status": {"phase": "Pending"}}))  # type: ignore[arg-type]
    counted = index.count(view.pods[0], view.namespace, view.pods[1])
    assert (counted.running, counted.pending, counted.running_by_role) == (len(pod_labels), 1, running)
    assert set(running) - {"", "launcher"} <= {ps.name for ps in view.pod_sets}  # (an MPIJob's launcher: not queued)


def _pod(name: str, phase: str, grace: object = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "namespace": "default", "labels": kubeflow("j", "Worker")[0],
                         "deletionTimestamp": "2026-12-04T21:00:00Z"},
            "spec": spec, "status": {"phase": phase}}


def test_a_jobs_pods_linger_until_gone_or_ended_and_say_their_grace_period() -> None:
    """What a preemptor's job waits for (jobswitch.py): the victims' pods not gone and not
    ended, a pod being deleted among them; the bound is made of their grace periods."""
    index = PodIndex()
    views = [pod_view(_pod("running", "Running", 5)), pod_view(_pod("pending", "Pending")),
             pod_view(_pod("done", "Succeeded", 90)), pod_view(_pod("odd", "Running", "x"))]
    for view in views:
        assert view is not None
        index.put(view)
    lingering = {p.name: p.grace for p in index.lingering(c.LABEL_JOB_NAME, "default", "j")}
    assert lingering == {"running": 5, "pending": 30, "odd": 30}  # (30: Kubernetes' default)
    index.remove(views[0])  # type: ignore[arg-type]
    assert sorted(p.name for p in index.lingering(c.LABEL_JOB_NAME, "default", "j")) == ["odd", "pending"]
