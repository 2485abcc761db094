"""Bad jobs raise InvalidObject naming the job and the field, never a raw KeyError/TypeError."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from koordqueue.api.meta import InvalidObject
from koordqueue.jobs import adapter_for
from koordqueue.jobs.unit import unit_info
from tests.jobs.helpers import load

_DELETE = object()


def changed(name: str, path: list[Any], value: Any) -> dict[str, Any]:
    job = copy.deepcopy(load(name))
    target: Any = job
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return job


MASTER = ["spec", "pytorchReplicaSpecs", "Master"]
MASTER_CONTAINER = [*MASTER, "template", "spec", "containers", 0]


@pytest.mark.parametrize(
    ("name", "path", "value", "message"),
    [
        (
            "seed-pytorchjob.yaml",
            [*MASTER, "replicas"],
            -1,
            "Master: replicas must be between 0 and 2147483647, got -1",
        ),
        ("seed-pytorchjob.yaml", [*MASTER, "replicas"], 10**12, "replicas must be between 0 and 2147483647"),
        ("seed-pytorchjob.yaml", [*MASTER, "replicas"], "2", "replicas must be an integer, got '2'"),
        ("seed-pytorchjob.yaml", [*MASTER, "replicas"], 1.5, "replicas must be an integer"),
        ("seed-pytorchjob.yaml", [*MASTER, "replicas"], True, "replicas must be an integer"),
        (
            "seed-pytorchjob.yaml",
            [*MASTER_CONTAINER, "resources", "requests", "cpu"],
            "four",
            "cpu: quantity 'four'",
        ),
        (
            "seed-pytorchjob.yaml",
            [*MASTER_CONTAINER, "resources", "requests", "memory"],
            "1e400",
            "too large",
        ),
        ("seed-pytorchjob.yaml", [*MASTER, "template", "spec", "containers"], [], "containers is empty"),
        ("seed-pytorchjob.yaml", [*MASTER, "template", "spec", "containers"], _DELETE, "containers is empty"),
        ("seed-pytorchjob.yaml", [*MASTER, "template"], _DELETE, "Master: template is missing"),
        ("seed-pytorchjob.yaml", MASTER, "master", "Master must be a mapping"),
        (
            "seed-pytorchjob.yaml",
            ["spec", "pytorchReplicaSpecs"],
            _DELETE,
            "spec: pytorchReplicaSpecs is missing",
        ),
        ("seed-pytorchjob.yaml", ["spec", "pytorchReplicaSpecs"], {}, "has no replica spec"),
        ("seed-pytorchjob.yaml", ["spec"], _DELETE, "spec is missing"),
        ("seed-pytorchjob.yaml", ["metadata", "name"], _DELETE, "metadata.name is missing"),
        (
            "seed-pytorchjob.yaml",
            ["metadata", "annotations", "scheduling.x-k8s.io/priority"],
            "high",
            "priority must be an integer",
        ),
        (
            "seed-pytorchjob.yaml",
            ["metadata", "annotations", "scheduling.x-k8s.io/priority"],
            "99999999999",
            "priority must be between",
        ),
        (
            "seed-pytorchjob.yaml",
            ["metadata", "annotations", "scheduling.x-k8s.io/priority"],
            10,
            "must be a string",
        ),
        ("batchjob.yaml", ["spec", "parallelism"], -3, "spec.parallelism: replicas must be between"),
        ("batchjob.yaml", ["spec", "template"], _DELETE, "spec: template is missing"),
        ("rayjob.yaml", ["spec", "rayClusterSpec"], _DELETE, "rayClusterSpec is missing"),
        (
            "rayjob.yaml",
            ["spec", "rayClusterSpec", "workerGroupSpecs", 0, "groupName"],
            _DELETE,
            "groupName is missing",
        ),
        ("rayjob.yaml", ["spec", "rayClusterSpec", "workerGroupSpecs", 1, "numOfHosts"], -1, "numOfHosts"),
        (
            "rayjob.yaml",
            ["spec", "rayClusterSpec", "workerGroupSpecs"],
            {"a": 1},
            "workerGroupSpecs must be a list",
        ),
    ],
)
def test_invalid_job(name: str, path: list[Any], value: Any, message: str) -> None:
    job = changed(name, path, value)
    adapter = adapter_for(job["apiVersion"], job["kind"])
    assert adapter is not None
    with pytest.raises(InvalidObject, match=message):
        unit_info(job, adapter, {}, created=0.0)


def test_total_beyond_int64_is_invalid() -> None:
    # Each pod is fine; a million of them asking for 8Pi of memory is not.
    job = changed("seed-pytorchjob.yaml", [*MASTER, "replicas"], 1_000_000)
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"][
        "requests"
    ]["memory"] = "8Pi"
    adapter = adapter_for("kubeflow.org/v1", "PyTorchJob")
    assert adapter is not None
    with pytest.raises(InvalidObject, match="total request of memory is too large"):
        adapter.demand(job)


def test_empty_priority_annotation_is_absent() -> None:
    job = changed("seed-pytorchjob.yaml", ["metadata", "annotations", "scheduling.x-k8s.io/priority"], "")
    adapter = adapter_for("kubeflow.org/v1", "PyTorchJob")
    assert adapter is not None and adapter.priority(job, {}) == 0


def test_bad_suspend_field() -> None:
    job = changed("batchjob.yaml", ["spec", "suspend"], "yes")
    adapter = adapter_for("batch/v1", "Job")
    assert adapter is not None
    with pytest.raises(InvalidObject, match="suspend must be true or false"):
        adapter.is_suspended(job)


def test_not_a_job() -> None:
    adapter = adapter_for("kubeflow.org/v1", "PyTorchJob")
    assert adapter is not None
    with pytest.raises(InvalidObject, match="PyTorchJob: the object must be a mapping"):
        unit_info("apiVersion: kubeflow.org/v1", adapter, {}, created=0.0)  # type: ignore[arg-type]
