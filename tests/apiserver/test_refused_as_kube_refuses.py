"""What kube-apiserver refuses, refused alike on both control planes, in its words (1.37's, word
for word): custom resources checked against their CRD (types, formats, patterns, enums, bounds,
lengths, counts, required fields; pruning, defaults and nulls; list-type map and set uniqueness;
the scale subresource's paths; the `self == oldSelf` rule; ratcheting on update; the status
subresource), the training operator's validating webhook, and the Priority admission of pods."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.queueunit import QUANTITY_SCHEMA
from koordqueue.apiserver.testing import running_apiserver
from koordqueue.kube.client import KubeClient, PatchType, Resource
from koordqueue.kube.config import load_config
from koordqueue.kube.errors import ApiError, NotFound
from koordqueue.manifests import all_crds
from koordqueue.simcluster.cluster import SimCluster

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
GIZMOS = Resource("checks.example.com", "v1", "gizmos")
PYTORCHJOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
TFJOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.TF_JOB_PLURAL)
PODS = Resource("", "v1", "pods")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
NOT_CHECKED = ("<nil>", "Invalid value: null: some validation rules were not checked because the object was "
                        "invalid; correct the existing errors to complete validation")
QUANTITY_PATTERN = QUANTITY_SCHEMA["pattern"]

GIZMO_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["size"],
    "properties": {
        "size": {"type": "integer", "minimum": 0, "maximum": 100},
        "big": {"type": "integer", "format": "int32"},
        "title": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
        "mode": {"type": "string", "enum": ["Fast", "Slow"]},
        "amount": QUANTITY_SCHEMA,
        "tags": {"type": "array", "maxItems": 3, "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "required": ["name"],
                            "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
        "when": {"type": "string", "format": "date-time"},
        "note": {"type": "string", "nullable": True},
        "color": {"type": "string", "default": "blue"},
        "owner": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "owner is immutable"}]},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}
GIZMO_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gizmos.checks.example.com"},
    "spec": {
        "group": "checks.example.com",
        "scope": "Namespaced",
        "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size",
                                                     "statusReplicasPath": ".status.count"}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": GIZMO_SPEC,
                "status": {"type": "object", "properties": {"count": {"type": "integer"},
                                                            "phase": {"type": "string", "enum": ["Up", "Down"]}}},
            }}},
        }],
    },
}


@pytest.fixture
async def client(tmp_path: Path, control_plane: str, request: pytest.FixtureRequest) -> AsyncIterator[KubeClient]:
    """A client of this test's control plane, the Gizmo CRD installed, and the training operator
    (its CRDs and webhook: the simulated one on the embedded control plane)."""
    if control_plane == "kube":
        cluster = request.getfixturevalue("kube")
        async with KubeClient(load_config(str(cluster.kubeconfig_path))) as kube_client:
            await install(kube_client, GIZMO_CRD)
            try:
                yield kube_client
            finally:
                await kube_client.delete(CRDS, GIZMO_CRD["metadata"]["name"])
                await gone(kube_client)
        return
    async with running_apiserver(tmp_path / "state", crds=all_crds()) as server, \
            KubeClient(load_config(str(server.kubeconfig_path))) as embedded_client, \
            SimCluster(embedded_client, nodes=1):
        await install(embedded_client, GIZMO_CRD)
        yield embedded_client


async def install(client: KubeClient, crd: dict[str, Any]) -> None:
    try:  # left by an earlier test that could not clean up
        await client.delete(CRDS, crd["metadata"]["name"])
        await gone(client)
    except NotFound:
        pass
    await client.create(CRDS, copy.deepcopy(crd))
    for _ in range(100):  # kube-apiserver serves a new CRD after a moment
        try:
            await client.list(GIZMOS, namespace="default")
            return
        except NotFound:
            await asyncio.sleep(0.1)
    raise AssertionError("the Gizmo CRD was never served")


async def gone(client: KubeClient) -> None:
    for _ in range(100):
        try:
            await client.list(GIZMOS, namespace="default")
        except NotFound:
            return
        await asyncio.sleep(0.1)


def gizmo(name: str = "g", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "checks.example.com/v1", "kind": "Gizmo", "metadata": {"name": name, "namespace": "default"},
            "spec": {"size": 1, **spec}}


def causes(error: ApiError) -> set[tuple[str, str]]:
    return {(x["field"], x["message"]) for x in (error.body or {})["details"]["causes"]}


async def refused(call: Any, code: int = 422) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await call
    assert caught.value.status == code, caught.value
    return caught.value


async def test_each_kind_of_schema_error_is_worded_as_kube_apiserver_words_it(client: KubeClient) -> None:
    bad = gizmo(size="ten", big=1 << 31, title="Gizmos", mode="Medium", amount="lots",
                tags=["a", "a", "b", "c"], ports=[{"name": "http", "port": 80}, {"name": "http", "port": 81}],
                when="yesterday")
    error = await refused(client.create(GIZMOS, bad))
    assert error.reason == "Invalid"
    assert causes(error) == {
        ("spec.size", 'Invalid value: "string": spec.size in body must be of type integer: "string"'),
        ("<nil>", 'Invalid value: "": Checked value must be of type integer with format int32 in spec.big'),
        ("spec.title", "Too long: may not be more than 5 bytes"),
        ("spec.mode", 'Unsupported value: "Medium": supported values: "Fast", "Slow"'),
        ("spec.amount", f"Invalid value: \"lots\": spec.amount in body should match '{QUANTITY_PATTERN}'"),
        ("spec.tags", "Too many: 4: must have at most 3 items"),
        ("spec.when", 'Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"'),
        (".spec.size", 'Invalid value: 0: .spec.size accessor error: ten is of the type string, expected int64'),
        ("spec.tags[1]", 'Duplicate value: "a"'),
        ("spec.ports[1]", 'Duplicate value: {"name":"http"}'),
        NOT_CHECKED,  # the CRD has a rule, and errors such as a wrong type stop the rules
    }
    error = await refused(client.create(GIZMOS, gizmo(title="Gizmo")))
    assert error.message == ('Gizmo.checks.example.com "g" is invalid: spec.title: Invalid value: "Gizmo": spec.title '
                             "in body should match '^[a-z]+$'")
    error = await refused(client.create(GIZMOS, gizmo(size=101, big=-5)))
    assert causes(error) == {("spec.size", "Invalid value: 101: spec.size in body should be less than or equal to 100")}
    error = await refused(client.create(GIZMOS, gizmo(**{"size": None})))  # a null is dropped: size is missing
    assert causes(error) == {("spec.size", "Required value"), NOT_CHECKED}


async def test_unknown_fields_and_nulls_are_pruned_and_defaults_filled_in(client: KubeClient) -> None:
    made = await client.create(GIZMOS, gizmo(extra="dropped", note=None, mode=None, free={"any": {"thing": 1}}))
    assert made["spec"] == {"size": 1, "note": None, "color": "blue", "free": {"any": {"thing": 1}}}
    error = await refused(client.create(GIZMOS, gizmo("h", extra=1), field_validation="Strict"), 400)
    assert error.message == ('Gizmo in version "v1" cannot be handled as a Gizmo: strict decoding error: '
                             'unknown field "spec.extra"')


async def test_updates_patches_and_the_status_are_validated_and_the_scale_paths_too(client: KubeClient) -> None:
    await client.create(GIZMOS, gizmo(owner="ann"))
    error = await refused(client.patch(GIZMOS, "g", {"spec": {"size": -1}}, namespace="default"))
    assert causes(error) == {
        ("spec.size", "Invalid value: -1: spec.size in body should be greater than or equal to 0"),
        (".spec.size", "Invalid value: -1: should be a non-negative integer"),
    }
    error = await refused(client.patch(GIZMOS, "g", [{"op": "replace", "path": "/spec/owner", "value": "bob"}],
                                       namespace="default", patch_type=PatchType.JSON))
    assert causes(error) == {("spec.owner", 'Invalid value: "bob": owner is immutable')}
    current = await client.get(GIZMOS, "g", namespace="default")
    current["spec"]["mode"] = "Medium"
    error = await refused(client.replace(GIZMOS, current))
    assert causes(error) == {("spec.mode", 'Unsupported value: "Medium": supported values: "Fast", "Slow"'),
                             NOT_CHECKED}
    error = await refused(client.patch_status(GIZMOS, "g", {"status": {"count": "x", "phase": "Sideways"}},
                                              namespace="default"))
    assert causes(error) == {
        ("status.count", 'Invalid value: "string": count in body must be of type integer: "string"'),
        ("status.phase", 'Unsupported value: "Sideways": supported values: "Up", "Down"'),
        (".status.count", "Invalid value: 0: .status.count accessor error: x is of the type string, expected int64"),
        NOT_CHECKED,
    }
    done = await client.patch_status(GIZMOS, "g", {"status": {"count": 2}}, namespace="default")
    assert done["status"] == {"count": 2}


async def test_an_update_ratchets_what_it_left_as_it_was(client: KubeClient) -> None:
    """An object stored before its CRD forbade one of its values may still be changed elsewhere."""
    await client.create(GIZMOS, gizmo(title="abc", tags=["x"]))
    stricter = await client.get(CRDS, GIZMO_CRD["metadata"]["name"])
    spec = stricter["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    spec["title"]["maxLength"] = 2
    await client.replace(CRDS, stricter)

    async def stricter_in_force() -> bool:
        try:
            await client.create(GIZMOS, gizmo("probe", title="abc"))
        except ApiError:
            return True
        await client.delete(GIZMOS, "probe", namespace="default")
        return False

    for _ in range(100):
        if await stricter_in_force():
            break
        await asyncio.sleep(0.1)
    await client.patch(GIZMOS, "g", {"spec": {"tags": ["x", "y"]}}, namespace="default")  # title untouched: fine
    error = await refused(client.patch(GIZMOS, "g", {"spec": {"title": "abd"}}, namespace="default"))
    assert causes(error) == {("spec.title", "Too long: may not be more than 2 bytes"), NOT_CHECKED}


def pytorch_job(name: str, **replica_specs: Any) -> dict[str, Any]:
    container = {"name": "pytorch", "image": "pytorch/pytorch:2.1",
                 "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}
    specs = {role: {"replicas": replicas, "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [copy.deepcopy(container)]}}}
             for role, replicas in (replica_specs or {"Master": 1, "Worker": 1}).items()}
    return {"apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.PYTORCH_JOB_KIND,
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": specs}}


PYTORCH_DENIED = 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: '


async def test_the_training_operator_webhook_refuses_malformed_jobs(client: KubeClient) -> None:
    error = await refused(client.create(PYTORCHJOBS, pytorch_job("two-masters", Master=2, Worker=1)), 403)
    assert error.reason == "Forbidden"
    assert error.message == PYTORCH_DENIED + "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"
    job = pytorch_job("no-image")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = ""
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    error = await refused(client.create(PYTORCHJOBS, job), 403)
    assert error.message == PYTORCH_DENIED + (
        "[spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: Required value: must be required, "
        "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one "
        "container with name pytorch]")
    job = pytorch_job("managed")
    job["spec"]["runPolicy"]["managedBy"] = "someone-else"
    error = await refused(client.create(PYTORCHJOBS, job), 403)
    assert error.message.startswith(PYTORCH_DENIED + 'spec.runPolicy.managedBy: Unsupported value: "someone-else": '
                                                     "supported values: ")
    await refused(client.create(PYTORCHJOBS, pytorch_job("Upper")), 422)  # the server's own name check comes first
    error = await refused(client.create(PYTORCHJOBS, pytorch_job("9lives")), 403)
    assert error.message == PYTORCH_DENIED + (
        'metadata.name: Invalid value: "9lives": should match: a DNS-1035 label must consist of lower case '
        "alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric "
        "character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
    # Updates are checked too; a valid job passes.
    await client.create(PYTORCHJOBS, pytorch_job("fine"))
    error = await refused(client.patch(PYTORCHJOBS, "fine", {"spec": {"pytorchReplicaSpecs": {"Worker": {
        "replicas": 0}}}}, namespace="default"), 403)
    assert error.message == PYTORCH_DENIED + "spec.pytorchReplicaSpecs[Worker].replicas: Forbidden: must be at least 1"
    tf = {"apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.TF_JOB_KIND, "metadata": {"name": "tf", "namespace": "default"},
          "spec": {"runPolicy": {"suspend": True}, "tfReplicaSpecs": {
              role: {"replicas": 1, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}}
              for role in ("Chief", "Master")}}}
    error = await refused(client.create(TFJOBS, tf), 403)
    assert error.message == ('admission webhook "validator.tfjob.training-operator.kubeflow.org" denied the '
                             "request: spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role")


async def test_a_pod_naming_a_priority_class_that_does_not_exist_is_refused(client: KubeClient) -> None:
    """The Priority admission plugin: the class is resolved to the pod's priority as it is
    created, and a class that does not exist refuses the pod."""
    def pod(name: str, priority_class: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
        if priority_class:
            spec["priorityClassName"] = priority_class
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}

    error = await refused(client.create(PODS, pod("orphan", "no-such-class")), 403)
    assert (error.reason, error.message) == (
        "Forbidden", 'pods "orphan" is forbidden: no PriorityClass with name no-such-class was found')
    await client.create(PRIORITY_CLASSES, {"metadata": {"name": "refused-test-high"}, "value": 1000})
    high = await created_once_the_class_is_known(client, pod("high", "refused-test-high"))
    assert (high["spec"]["priority"], high["spec"]["preemptionPolicy"]) == (1000, "PreemptLowerPriority")
    plain = await client.create(PODS, pod("plain"))
    assert (plain["spec"]["priority"], plain["spec"].get("priorityClassName")) == (0, None)
    await client.delete(PRIORITY_CLASSES, "refused-test-high")


async def created_once_the_class_is_known(client: KubeClient, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod created, once the Priority plugin knows its new class: kube-apiserver's plugin
    reads PriorityClasses from an informer, so a class just created may be unknown to it for a
    moment (seen at a load of 5: refused as above). Up to 10 s, then the refusal stands."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        try:
            return await client.create(PODS, pod)
        except ApiError as e:
            if e.status != 403 or "no PriorityClass with name" not in e.message or \
                    asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_pod_level_resources_are_kept_and_only_cpu_memory_and_hugepages_taken(client: KubeClient) -> None:
    """PodLevelResources (beta, on since 1.34): a pod's spec.resources is kept; a resource other
    than cpu, memory or hugepages-* there is refused (so the controller, which would charge it,
    never sees such a pod run)."""
    def pod(name: str, resources: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                "spec": {"resources": resources, "containers": [
                    {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}

    made = await client.create(PODS, pod("plr", {"requests": {"cpu": "8", "memory": "1Gi"}}))
    assert made["spec"]["resources"]["requests"] == {"cpu": "8", "memory": "1Gi"}
    error = await refused(client.create(PODS, pod("plr-gpu", {"requests": {"cpu": "8", c.GPU: "1"}})))
    assert (f"spec.resources.requests[{c.GPU}]",
            f'Unsupported value: "{c.GPU}": supported values: "cpu", "hugepages-", "memory"') in causes(error)
