"""The CRDs: generated from the models, structural, printed like Koord-Queue, not drifting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api.crds import our_crds, render, structural
from koordqueue.api.queueunit import QueueUnit
from koordqueue.controller.views import job_view, queue_unit_manifest
from koordqueue.jobs import adapter_for
from koordqueue.manifests import all_crds, write

CONFIG = Path(__file__).parents[2] / "config" / "crd"
JOBS = Path(__file__).parents[1] / "jobs" / "data"


def by_kind(kind: str) -> dict[str, Any]:
    return next(m for m in all_crds() if m["spec"]["names"]["kind"] == kind)


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = by_kind(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_config_files_match_the_generator() -> None:
    for manifest in all_crds():
        path = CONFIG / f"{manifest['metadata']['name']}.yaml"
        assert path.read_text() == render(manifest), (
            f"{path} drifted: run make generate"
        )
    assert sorted(p.name for p in CONFIG.glob("*.yaml")) == sorted(
        f"{m['metadata']['name']}.yaml" for m in all_crds()
    )


def test_write_round_trips(tmp_path: Path) -> None:
    paths = write(tmp_path)
    assert [yaml.safe_load(p.read_text()) for p in paths] == all_crds()


def _walk(schema: dict[str, Any], where: str, defaults: bool = False) -> None:
    """Structural; `defaults`: whether a field may have a default (the training operator's
    runPolicy.suspend does; ours have none)."""
    assert "$ref" not in schema and "$defs" not in schema, where
    assert "nullable" not in schema and (defaults or "default" not in schema), where
    if "anyOf" in schema:  # only the int-or-string of quantities
        assert schema.get("x-kubernetes-int-or-string") is True, where
        assert schema["anyOf"] == [{"type": "integer"}, {"type": "string"}], where
    elif not schema.get("x-kubernetes-preserve-unknown-fields"):
        assert schema.get("type") in {"object", "array", "string", "integer", "boolean"}, (
            f"{where} has no type"
        )
    if "properties" in schema:
        assert schema.get("additionalProperties") is None, f"{where}: properties and additionalProperties"
        for name, sub in schema["properties"].items():
            _walk(sub, f"{where}.{name}", defaults)
    if isinstance(schema.get("items"), dict):
        _walk(schema["items"], f"{where}[]", defaults)
    if isinstance(schema.get("additionalProperties"), dict):
        _walk(schema["additionalProperties"], f"{where}{{}}", defaults)


@pytest.mark.parametrize("manifest", all_crds(), ids=lambda m: m["metadata"]["name"])
def test_schemas_are_structural(manifest: dict[str, Any]) -> None:
    version = manifest["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    ours = manifest in our_crds()
    _walk(root, manifest["metadata"]["name"], defaults=not ours)
    assert root["properties"]["metadata"] == {"type": "object"}
    assert version["subresources"] == {"status": {}} if ours or manifest["spec"]["names"]["kind"] != "PyTorchJob" \
        else {"status": {}, "scale": {"labelSelectorPath": ".status.replicaStatuses.Worker.selector",
                                      "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
                                      "statusReplicasPath": ".status.replicaStatuses.Worker.active"}}
    assert manifest["spec"]["scope"] == "Namespaced"
    assert (
        manifest["metadata"]["name"] == f"{manifest['spec']['names']['plural']}.{manifest['spec']['group']}"
    )
    assert version["additionalPrinterColumns"][-1]["jsonPath"] == ".metadata.creationTimestamp"


def test_structural_rejects_a_real_union() -> None:
    with pytest.raises(ValueError, match="cannot make a structural schema"):
        structural({"anyOf": [{"type": "string"}, {"type": "integer"}]})


def test_groups_versions_names() -> None:
    assert [
        (m["spec"]["group"], m["spec"]["versions"][0]["name"], m["spec"]["names"]["kind"]) for m in all_crds()
    ] == [
        ("scheduling.sigs.k8s.io", "v1alpha1", "ElasticQuota"),
        ("scheduling.sigs.k8s.io", "v1beta1", "ElasticQuotaTree"),
        ("scheduling.x-k8s.io", "v1alpha1", "Queue"),
        ("scheduling.x-k8s.io", "v1alpha1", "QueueUnit"),
        ("kubeflow.org", "v1", "PyTorchJob"),
        ("kubeflow.org", "v1", "TFJob"),
        ("kubeflow.org", "v1", "MPIJob"),
        ("ray.io", "v1", "RayJob"),
        ("ray.io", "v1", "RayCluster"),
        ("sparkoperator.k8s.io", "v1beta2", "SparkApplication"),
        ("argoproj.io", "v1alpha1", "Workflow"),
    ]
    # MPIJob's CRD serves the mpi-operator's v1alpha1 too (stored as v1, as one CRD must).
    assert [(v["name"], v["storage"]) for v in by_kind("MPIJob")["spec"]["versions"]] == [
        ("v1", True), ("v1alpha1", False)]
    assert [m["spec"]["names"]["kind"] for m in our_crds()] == ["ElasticQuota", "ElasticQuotaTree", "Queue",
                                                                 "QueueUnit"]
    assert by_kind("ElasticQuota")["spec"]["names"]["shortNames"] == ["eq"]
    assert by_kind("ElasticQuotaTree")["spec"]["names"]["shortNames"] == ["eqtree"]  # Koord-Queue's
    assert by_kind("QueueUnit")["spec"]["names"]["shortNames"] == ["qu"]


def test_queue_unit_printer_columns_are_koord_queues() -> None:
    """Koord-Queue's, and the forecast's EXPECTED-START (controller/forecaster.py) before AGE."""
    columns = by_kind("QueueUnit")["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(col["name"], col["type"], col["jsonPath"]) for col in columns] == [
        ("PHASE", "string", ".status.phase"),
        ("PRIORITY", "integer", ".spec.priority"),
        ("ADMISSIONS", "string", ".status.admissionSummary"),
        ("JOBTYPE", "string", ".spec.consumerRef.kind"),
        ("EXPECTED-START", "string", ".status.expectedStart"),
        ("AGE", "date", ".metadata.creationTimestamp"),
    ]


def test_operator_printer_columns() -> None:
    for kind in ("PyTorchJob", "TFJob", "MPIJob"):
        columns = by_kind(kind)["spec"]["versions"][0]["additionalPrinterColumns"]
        assert [col["name"] for col in columns] == ["State", "Age"]
        assert columns[0]["jsonPath"] == ".status.conditions[-1:].type"
        # As the operator's CRD: the job's spec is closed (an unknown field is pruned, or refused
        # under strict field validation), a pod template's spec keeps what it is not described.
        spec = schema_of(kind)["properties"]["spec"]
        if kind == "MPIJob":  # but MPIJob's: it is one object with the v1alpha1 form (jobs/mpijob.py)
            assert spec["x-kubernetes-preserve-unknown-fields"] is True and "required" not in spec
            specs_key = "mpiReplicaSpecs"
        else:
            specs_key = spec["required"][0]
            assert "x-kubernetes-preserve-unknown-fields" not in spec and specs_key.endswith("ReplicaSpecs")
        pod = spec["properties"][specs_key]["additionalProperties"]["properties"]["template"]["properties"]["spec"]
        assert pod["x-kubernetes-preserve-unknown-fields"] is True and pod["required"] == ["containers"]


def test_queue_unit_schema_is_the_models() -> None:
    spec = schema_of("QueueUnit")["properties"]["spec"]["properties"]
    status = schema_of("QueueUnit")["properties"]["status"]["properties"]
    fields = QueueUnit.model_fields
    spec_model = fields["spec"].annotation
    assert set(spec) == {f.alias for f in spec_model.model_fields.values()}  # type: ignore[union-attr]
    assert set(spec) >= {
        "consumerRef",
        "priority",
        "queue",
        "resource",
        "podSet",
        "priorityClassName",
        "request",
    }
    assert set(status) >= {
        "phase", "attempts", "message", "lastUpdateTime", "admissionChecks", "podState",
        "admissions", "lastAllocateTime", "conditions", "requeueState",
    }  # fmt: skip
    assert spec["resource"]["additionalProperties"]["x-kubernetes-int-or-string"] is True
    assert spec["podSet"]["items"]["properties"]["template"]["x-kubernetes-preserve-unknown-fields"] is True
    assert set(status["admissions"]["items"]["properties"]) >= {"name", "replicas", "resources", "running"}
    assert set(status["requeueState"]["properties"]) == {"count", "requeueAt"}


def _pruned(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    """The paths of ``value`` that the API server would prune under ``schema``."""
    if schema.get("x-kubernetes-preserve-unknown-fields") or not isinstance(value, (dict, list)):
        return []
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _pruned(item, schema["items"], f"{where}[{i}]")]
    if "additionalProperties" in schema:
        return [
            p for k, v in value.items() for p in _pruned(v, schema["additionalProperties"], f"{where}.{k}")
        ]
    properties = schema.get("properties", {})
    lost = [f"{where}.{k}" for k in value if k not in properties]
    return lost + [
        p for k, v in value.items() if k in properties for p in _pruned(v, properties[k], f"{where}.{k}")
    ]


def test_a_built_unit_loses_nothing_to_pruning() -> None:
    job = yaml.safe_load((JOBS / "seed-pytorchjob.yaml").read_text())
    job["metadata"]["uid"] = "0b9e-uid"
    adapter = adapter_for(job["apiVersion"], job["kind"])
    assert adapter is not None
    unit = queue_unit_manifest(job_view(job, adapter, {}))
    unit["status"] = {
        "phase": "Running",
        "attempts": 1,
        "lastUpdateTime": "2026-01-02T03:04:05Z",
        "admissions": [{"name": "master", "replicas": 1, "resources": {"cpu": "4"}, "running": 1}],
        "podState": {"running": 2, "pending": 0},
        "requeueState": {"count": 1, "requeueAt": "2026-01-02T03:04:15Z"},
        "conditions": [{"type": "Admitted", "status": "True", "reason": "Dequeued", "message": "ok"}],
        "admissionChecks": [{"name": "provision", "state": "Ready"}],
    }
    del unit["metadata"]  # the API server keeps metadata whatever the schema says
    assert _pruned(unit, schema_of("QueueUnit"), "") == []
    assert _pruned({"spec": {"bogus": 1}}, schema_of("QueueUnit"), "") == [".spec.bogus"]


def _undescribed(schema: dict[str, Any], where: str) -> list[str]:
    missing = []
    for name, sub in (schema.get("properties") or {}).items():
        if name != "metadata" and not sub.get("description"):
            missing.append(f"{where}.{name}")
        missing += _undescribed(sub, f"{where}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            missing += _undescribed(schema[key], f"{where}[]")
    return missing


@pytest.mark.parametrize("manifest", our_crds(), ids=lambda m: m["metadata"]["name"])
def test_every_field_of_our_crds_is_described(manifest: dict[str, Any]) -> None:
    """`kubectl explain` showed `<no description>` for every field (issue 16)."""
    root = manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert root.get("description")
    assert _undescribed(root, manifest["spec"]["names"]["kind"]) == []
