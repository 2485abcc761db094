"""QueueUnit: tolerant reading of Koord-Queue's objects, exact writing, the builder."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api.meta import InvalidObject
from koordqueue.api.queueunit import QueueUnit, QueueUnitStatus, build_queue_unit, parse_queue_unit
from koordqueue.jobs import adapter_for
from koordqueue.jobs.base import JobAdapter

JOBS = Path(__file__).parents[1] / "jobs" / "data"

# As Koord-Queue v1.8 writes one (fields of pkg/apis/scheduling/v1alpha1), plus a field from the future.
KOORD_QUEUE_UNIT: dict[str, Any] = {
    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
    "kind": "QueueUnit",
    "metadata": {"name": "train-py-qu", "namespace": "default", "uid": "u-9", "resourceVersion": "42"},
    "spec": {
        "consumerRef": {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "train",
            "namespace": "default",
        },
        "priority": 10,
        "resource": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 2},
        "podSet": [{"name": "master", "count": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}],
        "priorityClassName": "high-priority",
        "request": {"cpu": "8"},
        "active": True,
        "maximumExecutionTimeSeconds": 3600,
    },
    "status": {
        "phase": "SchedReady",
        "attempts": 2,
        "message": "Enqueued",
        "lastUpdateTime": "2026-01-02T03:04:05Z",
        "admissionChecks": [
            {"name": "provision", "state": "Pending", "lastTransitionTime": "2026-01-02T03:04:05Z"}
        ],
        "podState": {"running": 1},
        "admissions": None,
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "r", "message": "m"}],
        "requeueState": {"count": 1, "requeueAt": "2026-01-02T03:04:15Z"},
        "reclaimablePods": [{"name": "worker", "count": 1}],
        "futureField": {"kept": True},
    },
}


def test_reads_a_koord_queue_unit() -> None:
    unit = parse_queue_unit(KOORD_QUEUE_UNIT)
    assert unit.spec.consumer_ref is not None and unit.spec.consumer_ref.kind == "PyTorchJob"
    assert unit.spec.resource == {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert [(p.name, p.count, p.min_count) for p in unit.spec.pod_sets] == [("master", 1, None)]
    assert unit.status is not None
    assert (unit.status.phase, unit.status.attempts) == ("SchedReady", 2)
    assert unit.status.last_update_time == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert unit.status.pod_state is not None and (
        unit.status.pod_state.running,
        unit.status.pod_state.pending,
    ) == (1, 0)
    assert unit.status.requeue_state is not None and unit.status.requeue_state.count == 1


def test_round_trip_keeps_every_field() -> None:
    written = parse_queue_unit(KOORD_QUEUE_UNIT).manifest()
    expected = copy.deepcopy(KOORD_QUEUE_UNIT)
    expected["spec"]["resource"]["nvidia.com/gpu"] = "2"  # numbers are written as quantity strings
    del expected["status"]["admissions"]  # null is dropped
    written["status"].pop("admissions")  # an empty list
    expected["status"]["podState"]["pending"] = 0
    assert written == expected
    assert written["status"]["futureField"] == {"kept": True}


def test_writes_times_as_rfc3339_seconds() -> None:
    status = QueueUnitStatus(
        phase="Enqueued",
        last_update_time=datetime(2026, 1, 2, 5, 4, 5, 999_999, tzinfo=timezone(timedelta(hours=2))),
        last_allocate_time=datetime(2026, 1, 2, 3, 4, 5),  # naive: UTC
    )
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["lastUpdateTime"] == "2026-01-02T03:04:05Z"
    assert dumped["lastAllocateTime"] == "2026-01-02T03:04:05Z"
    assert dumped["phase"] == "Enqueued" and dumped["attempts"] == 0


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["spec", "resource", "cpu"], "abc", r"QueueUnit train-py-qu: spec.resource.cpu: .*quantity 'abc'"),
        (["spec", "priority"], "high", "spec.priority"),
        (["spec", "priority"], 2**31, "spec.priority"),
        (["spec", "podSet", 0, "count"], -1, r"spec.podSet.0.count"),
        (["spec", "podSet", 0, "name"], None, r"spec.podSet.0.name"),
        (["status", "attempts"], "many", "status.attempts"),
        (["status", "lastUpdateTime"], "yesterday", "status.lastUpdateTime"),
        (["spec"], [], "spec"),
    ],
)
def test_invalid_unit(path: list[Any], value: Any, message: str) -> None:
    obj = copy.deepcopy(KOORD_QUEUE_UNIT)
    target: Any = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidObject, match=message):
        parse_queue_unit(obj)


def test_invalid_unit_not_a_mapping() -> None:
    with pytest.raises(InvalidObject, match=r"QueueUnit \?: "):
        parse_queue_unit(["not", "a", "unit"])


def _job(name: str) -> tuple[dict[str, Any], JobAdapter]:
    job = yaml.safe_load((JOBS / name).read_text())
    job["metadata"]["uid"] = f"uid-{name}"
    adapter = adapter_for(job["apiVersion"], job["kind"])
    assert adapter is not None
    return job, adapter


def test_build_for_the_seed_job() -> None:
    job, adapter = _job("seed-pytorchjob.yaml")
    job["metadata"]["labels"] = {"team": "a"}
    job["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{...}"
    unit = build_queue_unit(job, adapter, {})
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pytorch-training-job"}
    assert unit["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and unit["kind"] == "QueueUnit"
    assert unit["metadata"] == {
        "name": "pytorch-training-job-py-qu",
        "namespace": "default",
        "labels": {"team": "a"},
        "annotations": {"scheduling.x-k8s.io/queue": "pytorch-team-a", "scheduling.x-k8s.io/priority": "10"},
        "ownerReferences": [
            {**owner, "uid": "uid-seed-pytorchjob.yaml", "controller": True, "blockOwnerDeletion": True}
        ],
    }
    spec = unit["spec"]
    assert spec["consumerRef"] == {**owner, "namespace": "default", "uid": "uid-seed-pytorchjob.yaml"}
    assert spec["priority"] == 10 and spec["queue"] == "pytorch-team-a"
    assert spec["resource"] == spec["request"] == {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert [(p["name"], p["count"]) for p in spec["podSet"]] == [("master", 1), ("worker", 1)]
    assert spec["podSet"][0]["template"] == job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert "status" not in unit and "priorityClassName" not in spec
    assert parse_queue_unit(unit).manifest() == unit  # what we write, we read back unchanged


def test_build_fills_requests_from_limits_and_leaves_the_job_alone() -> None:
    job, adapter = _job("tfjob.yaml")
    before = copy.deepcopy(job)
    unit = build_queue_unit(job, adapter, {"high-priority": 1000})
    assert job == before
    worker = unit["spec"]["podSet"][2]
    assert worker["name"] == "worker" and worker["count"] == 4
    resources = worker["template"]["spec"]["containers"][0]["resources"]
    assert (
        resources["requests"] == resources["limits"] == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    )
    assert unit["spec"]["priority"] == 1000 and unit["spec"]["priorityClassName"] == "high-priority"
    assert unit["spec"]["resource"] == {"cpu": "21", "memory": "42Gi", "nvidia.com/gpu": "4"}


@pytest.mark.parametrize(
    ("name", "unit_name"),
    [
        ("mpijob.yaml", "tensorflow-benchmarks-mpi-qu"),
        ("batchjob.yaml", "pi"),
        ("rayjob.yaml", "rayjob-sample-ray-qu"),
    ],
)
def test_build_for_each_kind(name: str, unit_name: str) -> None:
    job, adapter = _job(name)
    unit = build_queue_unit(job, adapter, {})
    assert unit["metadata"]["name"] == unit_name
    assert unit["spec"]["consumerRef"]["kind"] == job["kind"]
    assert isinstance(QueueUnit.model_validate(unit), QueueUnit)


def test_build_needs_a_stored_job() -> None:
    job, adapter = _job("seed-pytorchjob.yaml")
    del job["metadata"]["uid"]
    with pytest.raises(InvalidObject, match="metadata.uid is missing"):
        build_queue_unit(job, adapter, {})


def test_build_rejects_a_bad_job() -> None:
    job, adapter = _job("seed-pytorchjob.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = -2
    with pytest.raises(InvalidObject, match="Worker: replicas must be between 0"):
        build_queue_unit(job, adapter, {})
