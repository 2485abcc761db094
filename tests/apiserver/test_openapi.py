"""OpenAPI v3 documents and the unknown-field check, as pure functions over a registry."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from koordqueue.apiserver import openapi
from koordqueue.apiserver.builtin import BUILTIN_TYPES
from koordqueue.apiserver.registry import Registry, ResourceType

QUEUE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "queuePolicy": {"type": "string"},
                "priority": {"type": "integer"},
                "admissionChecks": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                               "labelSelector": {"type": "object",
                                                                                 "x-kubernetes-preserve-unknown-fields": True}}},
                },
                "resources": {"type": "object", "additionalProperties": {"type": "string"}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                             "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def _queue_type(schema: dict[str, Any] | None = QUEUE_SCHEMA) -> ResourceType:
    return ResourceType("scheduling.x-k8s.io", "v1alpha1", "Queue", "queues", "queue", True,
                        subresources=frozenset({"status"}), schema=schema, from_crd="queues.scheduling.x-k8s.io")


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    for rt in BUILTIN_TYPES:
        reg.add(rt)
    reg.add(_queue_type())
    return reg


def _builtin(kind: str, group: str = "") -> ResourceType:
    return next(rt for rt in BUILTIN_TYPES if rt.kind == kind and rt.group == group)


def test_index_points_at_every_group_version_with_a_content_hash(registry: Registry) -> None:
    paths = openapi.index(registry)["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/batch/v1", "apis/scheduling.x-k8s.io/v1alpha1"} <= paths.keys()
    url = paths["apis/scheduling.x-k8s.io/v1alpha1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/scheduling.x-k8s.io/v1alpha1?hash=")

    changed = copy.deepcopy(QUEUE_SCHEMA)
    changed["properties"]["spec"]["properties"]["extra"] = {"type": "string"}
    registry.add(_queue_type(changed))
    assert openapi.index(registry)["paths"]["apis/scheduling.x-k8s.io/v1alpha1"]["serverRelativeURL"] != url
    assert openapi.index(registry)["paths"]["api/v1"] == paths["api/v1"]


def test_patch_operations_carry_the_kind_and_the_field_validation_parameter(registry: Registry) -> None:
    """What kubectl looks for before leaving validation to the server."""
    doc = openapi.group_version_document(registry, "scheduling.x-k8s.io", "v1alpha1")
    assert doc is not None
    op = doc["paths"]["/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/queues/{name}"]["patch"]
    assert op["x-kubernetes-group-version-kind"] == {"group": "scheduling.x-k8s.io", "version": "v1alpha1",
                                                     "kind": "Queue"}
    assert {"name": "fieldValidation", "in": "query"}.items() <= next(
        p for p in op["parameters"] if p["name"] == "fieldValidation").items()
    assert "application/strategic-merge-patch+json" not in op["requestBody"]["content"]
    assert "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/queues/{name}/status" in doc["paths"]
    assert openapi.group_version_document(registry, "nope.example.com", "v1") is None


def test_crd_component_is_named_like_kube_apiserver_and_refers_to_object_meta(registry: Registry) -> None:
    doc = openapi.group_version_document(registry, "scheduling.x-k8s.io", "v1alpha1")
    assert doc is not None
    schemas = doc["components"]["schemas"]
    queue = schemas["io.x-k8s.scheduling.v1alpha1.Queue"]
    assert queue["x-kubernetes-group-version-kind"] == [
        {"group": "scheduling.x-k8s.io", "version": "v1alpha1", "kind": "Queue"}]
    assert queue["properties"]["metadata"] == {  # with the description kube-apiserver gives it
        "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "description": "Standard object's metadata. More info: "
                       "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}
    assert queue["properties"]["spec"]["properties"]["queuePolicy"]["type"] == "string"
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference" in schemas
    assert schemas["io.x-k8s.scheduling.v1alpha1.QueueList"]["properties"]["items"]["items"] == {
        "$ref": "#/components/schemas/io.x-k8s.scheduling.v1alpha1.Queue"}
    assert "properties" not in QUEUE_SCHEMA or "metadata" not in QUEUE_SCHEMA["properties"]  # input untouched


def test_every_reference_in_every_document_resolves(registry: Registry) -> None:
    for group, versions in registry.groups().items():
        for version in versions:
            doc = openapi.group_version_document(registry, group, version)
            assert doc is not None
            names = doc["components"]["schemas"].keys()
            for target in _refs(doc):
                assert target.removeprefix("#/components/schemas/") in names, (group, version, target)


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        return ([value["$ref"]] if "$ref" in value else []) + [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def test_the_kinds_users_apply_have_real_schemas_not_the_open_fallback() -> None:
    for kind, group in [("Namespace", ""), ("ConfigMap", ""), ("Pod", ""), ("ServiceAccount", ""),
                        ("Service", ""), ("PriorityClass", "scheduling.k8s.io"), ("Job", "batch"),
                        ("Deployment", "apps"), ("Role", "rbac.authorization.k8s.io"),
                        ("ClusterRoleBinding", "rbac.authorization.k8s.io"),
                        ("CustomResourceDefinition", "apiextensions.k8s.io")]:
        schema = openapi.schema_for(_builtin(kind, group))
        assert not schema.get("x-kubernetes-preserve-unknown-fields"), kind
        assert openapi.unknown_fields(_builtin(kind, group), {"apiVersion": "x", "kind": kind, "bogus": 1}) == [
            "bogus"], kind


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"a": "b"}, "ownerReferences": [
        {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "1", "controller": True}]},
    "spec": {
        "priorityClassName": "high-priority",
        "affinity": {"nodeAffinity": {"anything": ["goes", "here"]}},
        "containers": [{
            "name": "pytorch",
            "image": "pytorch/pytorch",
            "command": ["python"],
            "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "1"}, "limits": {"memory": "8Gi"}},
            "env": [{"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['kubeflow.org/rank']"}}},
                    {"name": "MASTER_PORT", "value": "29500"}],
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
    },
    "status": {"phase": "Running", "whatever": {"x": 1}},
}


def test_a_valid_pod_has_no_unknown_fields() -> None:
    assert openapi.unknown_fields(_builtin("Pod"), POD) == []


def test_misspelt_fields_are_reported_with_their_paths() -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    pod["spec"]["containers"][0]["env"][1]["valu"] = "x"
    pod["metadata"]["lables"] = {}
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["affinity"]["nodeAffinity"]["free"] = True  # under preserve-unknown-fields: fine
    assert openapi.unknown_fields(_builtin("Pod"), pod) == [
        "metadata.lables", "spec.containers[0].env[1].valu", "spec.containers[0].imagePullPolcy"]


def test_job_template_reaches_the_pod_spec() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"suspend": True, "template": {"metadata": {"labels": {}},
                                                   "spec": {"restartPolicy": "Never", "containerz": []}}}}
    assert openapi.unknown_fields(_builtin("Job", "batch"), job) == ["spec.template.spec.containerz"]


def test_crd_schema_prunes_like_structural_schemas() -> None:
    queue = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",
        "metadata": {"name": "q", "namespace": "koord-queue", "nmae": "typo"},
        "spec": {
            "queuePolicy": "Priority", "priority": 100, "queuPolicy": "typo",
            "admissionChecks": [{"name": "a", "labelSelector": {"free": 1}, "extra": 2}],
            "resources": {"cpu": "1"},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t", "bad": 1}, "spec": {}},
        },
        "status": {"anything": True},
        "topLevel": 1,
    }
    assert openapi.unknown_fields(_queue_type(), queue) == [
        "metadata.nmae", "spec.queuPolicy", "spec.admissionChecks[0].extra", "spec.template.metadata.bad",
        "topLevel"]


def test_a_patch_is_checked_where_it_changed_the_object_only() -> None:
    stored = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue", "metadata": {"name": "q"},
              "spec": {"queuePolicy": "Priority", "queuPolicy": "typo"}, "topLevel": 1}
    patched = {**stored, "metadata": {"name": "q"}, "status": {"phase": "x"}}  # spec and topLevel shared
    assert openapi.unknown_fields(_queue_type(), patched, stored) == []
    patched["spec"] = {**stored["spec"], "priority": 1, "priorty": 2}  # a new dict, its old fields shared
    assert openapi.unknown_fields(_queue_type(), patched, stored) == ["spec.priorty"]
    patched["spec"]["queuPolicy"] = "typo again"
    assert openapi.unknown_fields(_queue_type(), patched, stored) == ["spec.queuPolicy", "spec.priorty"]
    assert openapi.unknown_fields(_queue_type(), patched) == ["spec.queuPolicy", "spec.priorty", "topLevel"]


def test_crd_without_schema_accepts_anything() -> None:
    assert openapi.unknown_fields(_queue_type(None), {"apiVersion": "a", "kind": "Queue", "spec": {"x": 1}}) == []


def test_messages_read_like_kube_apiserver() -> None:
    rt = _builtin("ConfigMap")
    assert openapi.strict_error_message(rt, ["foo", "data.x.y"]) == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'unknown field "foo", unknown field "data.x.y"')
    assert openapi.warning_texts(["spec.x"]) == ['unknown field "spec.x"']


def test_resolve_follows_references_for_strategic_merge() -> None:
    pod = openapi.schema_for(_builtin("Pod"))
    spec = openapi.resolve(pod["properties"]["spec"])
    assert spec is not None
    containers = spec["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    container = openapi.resolve(containers["items"])
    assert container is not None and "imagePullPolicy" in container["properties"]
