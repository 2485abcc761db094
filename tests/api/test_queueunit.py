"""QueueUnit: tolerant reading of Koord-Queue's objects, exact writing of the controller's."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from koordqueue.api.meta import InvalidObject
from koordqueue.api.queueunit import QueueUnit, QueueUnitStatus
from koordqueue.controller.views import job_view, queue_unit_manifest
from koordqueue.jobs import adapter_for

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


def parse_queue_unit(obj: object) -> QueueUnit:
    """A QueueUnit read by the model; ``InvalidObject`` says which field is wrong."""
    try:
        return QueueUnit.model_validate(obj)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'object'}: {e['msg']}" for e in err.errors()
        )
        name = obj.get("metadata", {}).get("name") if isinstance(obj, dict) else None
        raise InvalidObject(f"QueueUnit {name or '?'}: {problems}") from None


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


def _unit(name: str, priority_classes: dict[str, int] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A job of tests/jobs/data and the QueueUnit the controller writes for it."""
    job = yaml.safe_load((JOBS / name).read_text())
    job["metadata"]["uid"] = f"uid-{name}"
    adapter = adapter_for(job["apiVersion"], job["kind"])
    assert adapter is not None
    return job, queue_unit_manifest(job_view(job, adapter, priority_classes or {}))


def read_back(unit: dict[str, Any]) -> dict[str, Any]:
    """The unit as the model reads and writes it again, less the empty spec.request it adds."""
    read = parse_queue_unit(unit).manifest()
    assert read["spec"].pop("request") == {}
    return read


def test_the_unit_for_the_seed_job() -> None:
    job, unit = _unit("seed-pytorchjob.yaml")
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pytorch-training-job"}
    assert unit["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and unit["kind"] == "QueueUnit"
    assert unit["metadata"]["name"] == "pytorch-training-job-py-qu"
    assert unit["metadata"]["ownerReferences"] == [
        {**owner, "uid": "uid-seed-pytorchjob.yaml", "controller": True, "blockOwnerDeletion": True}
    ]
    spec = unit["spec"]
    assert spec["consumerRef"] == {**owner, "namespace": "default"}
    assert spec["priority"] == 10 and spec["queue"] == "pytorch-team-a"
    assert spec["resource"] == {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert [(p["name"], p["count"]) for p in spec["podSet"]] == [("master", 1), ("worker", 1)]
    assert "status" not in unit and "priorityClassName" not in spec
    assert read_back(unit) == unit  # what we write, we read back unchanged


def test_the_unit_takes_its_priority_from_the_class() -> None:
    _, unit = _unit("tfjob.yaml", {"high-priority": 1000})
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
def test_the_unit_of_each_kind(name: str, unit_name: str) -> None:
    job, unit = _unit(name)
    assert unit["metadata"]["name"] == unit_name
    assert unit["spec"]["consumerRef"]["kind"] == job["kind"]
    assert read_back(unit) == unit
