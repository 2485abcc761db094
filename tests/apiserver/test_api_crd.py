"""CRDs registered at run time: created → served (and discovered), deleted → gone with their objects."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from koordqueue.apiserver.testing import APIClient, eventually, running_apiserver

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GADGETS = "/apis/tools.example.org/v1beta1/namespaces/default/gadgets"

GADGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.tools.example.org"},
    "spec": {
        "group": "tools.example.org",
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "kind": "Gadget", "shortNames": ["gd"]},
        "versions": [{"name": "v1beta1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


async def test_crd_registration_serves_a_new_resource(api: APIClient) -> None:
    assert (await api.get(GADGETS))[0] == 404
    status, crd, _ = await api.post(CRDS, GADGET_CRD)
    assert status == 201
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd["status"]["acceptedNames"]["kind"] == "Gadget"
    status, obj, _ = await api.post(GADGETS, {"apiVersion": "tools.example.org/v1beta1", "kind": "Gadget",
                                              "metadata": {"name": "g"}, "spec": {"n": 1}})
    assert status == 201 and obj["metadata"]["generation"] == 1
    _, lst, _ = await api.get(GADGETS)
    assert lst["kind"] == "GadgetList" and [i["metadata"]["name"] for i in lst["items"]] == ["g"]
    _, resources, _ = await api.get("/apis/tools.example.org/v1beta1")
    assert [r["name"] for r in resources["resources"]] == ["gadgets"]
    _, groups, _ = await api.get("/apis")
    assert "tools.example.org" in [g["name"] for g in groups["groups"]]


async def test_crd_deletion_removes_the_resource_and_its_objects(api: APIClient) -> None:
    await api.post(CRDS, GADGET_CRD)
    await api.post(GADGETS, {"metadata": {"name": "g"}})
    _, lst, _ = await api.get(GADGETS)
    stream = await api.open_watch(GADGETS, {"resourceVersion": lst["metadata"]["resourceVersion"]})
    status, _, _ = await api.delete(f"{CRDS}/gadgets.tools.example.org")
    assert status == 200
    event = await stream.next()
    assert event is not None and (event["type"], event["object"]["metadata"]["name"]) == ("DELETED", "g")
    assert await stream.next() is None  # the resource is gone: its watches end
    await stream.close()
    status, body, _ = await api.get(GADGETS)
    assert status == 404 and body["message"] == "the server could not find the requested resource"
    assert (await api.get("/apis/tools.example.org/v1beta1"))[0] == 404
    # registering it again starts empty
    await api.post(CRDS, GADGET_CRD)
    _, lst, _ = await api.get(GADGETS)
    assert lst["items"] == []


async def test_crd_update_changes_what_is_served(api: APIClient) -> None:
    _, crd, _ = await api.post(CRDS, GADGET_CRD)
    crd["spec"]["versions"][0]["subresources"] = {"status": {}}
    status, _, _ = await api.put(f"{CRDS}/gadgets.tools.example.org", crd)
    assert status == 200
    await api.post(GADGETS, {"metadata": {"name": "g"}, "spec": {"n": 1}})

    async def status_served() -> bool:
        return (await api.get(f"{GADGETS}/g/status"))[0] == 200

    await eventually(status_served)


async def test_without_the_status_subresource_status_is_404_and_the_object_keeps_its_status(api: APIClient) -> None:
    """As kube-apiserver serves a CRD version without `subresources.status` (Koordinator's
    ElasticQuota): /status answers that the object is not found, whether it is there or
    not, and a write of the object keeps the status it sends; with the subresource, the
    object's writes drop it and /status takes it."""
    await api.post(CRDS, GADGET_CRD)
    status, obj, _ = await api.post(GADGETS, {"metadata": {"name": "g"}, "spec": {"n": 1}, "status": {"used": 1}})
    assert status == 201 and obj["status"] == {"used": 1}  # (created with it)
    for name in ("g", "absent"):
        for method in ("GET", "PATCH", "PUT"):
            status, body, _ = await api.request(method, f"{GADGETS}/{name}/status", {"status": {"used": 2}},
                                                content_type="application/merge-patch+json" if method == "PATCH"
                                                else None)
            assert status == 404, (name, method)
            assert (body["reason"], body["message"]) == ("NotFound", f'gadgets.tools.example.org "{name}" not found')
            assert body["details"] == {"name": name, "group": "tools.example.org", "kind": "gadgets"}
    status, obj, _ = await api.patch(f"{GADGETS}/g", {"status": {"used": 3}})
    assert status == 200 and obj["status"] == {"used": 3} and obj["spec"] == {"n": 1}
    assert (await api.get(f"{GADGETS}/g"))[1]["status"] == {"used": 3}

    _, crd, _ = await api.get(f"{CRDS}/gadgets.tools.example.org")
    crd["spec"]["versions"][0]["subresources"] = {"status": {}}
    await api.put(f"{CRDS}/gadgets.tools.example.org", crd)

    async def status_served() -> bool:
        return (await api.get(f"{GADGETS}/g/status"))[0] == 200

    await eventually(status_served)
    status, obj, _ = await api.patch(f"{GADGETS}/g", {"status": {"used": 4}})
    assert status == 200 and obj["status"] == {"used": 3}  # the object's write leaves the status
    status, obj, _ = await api.patch(f"{GADGETS}/g/status", {"status": {"used": 4}})
    assert status == 200 and obj["status"] == {"used": 4}


async def test_invalid_crds_are_422(api: APIClient) -> None:
    wrong_name = copy.deepcopy(GADGET_CRD)
    wrong_name["metadata"]["name"] = "gadgets.elsewhere.org"
    no_storage = copy.deepcopy(GADGET_CRD)
    no_storage["spec"]["versions"][0]["storage"] = False
    for bad in (wrong_name, no_storage, {"metadata": {"name": "x"}}):
        status, body, _ = await api.post(CRDS, bad)
        assert status == 422, bad
        assert body["reason"] == "Invalid"


async def test_cluster_scoped_crd(api: APIClient) -> None:
    crd = copy.deepcopy(GADGET_CRD)
    crd["spec"]["scope"] = "Cluster"
    await api.post(CRDS, crd)
    status, obj, _ = await api.post("/apis/tools.example.org/v1beta1/gadgets", {"metadata": {"name": "g"}})
    assert status == 201 and "namespace" not in obj["metadata"]
    assert (await api.get(GADGETS))[0] == 404


async def test_project_crds_are_installed_by_default(tmp_path: Path) -> None:
    async with running_apiserver(tmp_path / "s") as server, APIClient(server) as api:
        for path in ("/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/default/elasticquotas",
                     "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/koord-queue/queues",
                     "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/queueunits",
                     "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"):
            status, lst, _ = await api.get(path)
            assert status == 200 and lst["items"] == [], path


async def test_a_crd_of_a_protected_group_needs_the_api_approval_annotation(api: APIClient) -> None:
    """As kube-apiserver (KEP-1111): a group under k8s.io or kubernetes.io needs
    api-approved.kubernetes.io; a group that only ends with -k8s.io (x-k8s.io) does not."""
    protected = copy.deepcopy(GADGET_CRD)
    protected["metadata"]["name"] = "gadgets.tools.sigs.k8s.io"
    protected["spec"]["group"] = "tools.sigs.k8s.io"
    status, body, _ = await api.post(CRDS, protected)
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "metadata.annotations[api-approved.kubernetes.io]"
    assert 'protected groups must have approval annotation "api-approved.kubernetes.io"' in body["message"]
    protected["metadata"]["annotations"] = {"api-approved.kubernetes.io": "https://github.com/x/y/pull/1"}
    assert (await api.post(CRDS, protected))[0] == 201
    community = copy.deepcopy(GADGET_CRD)
    community["metadata"]["name"] = "gadgets.tools.x-k8s.io"
    community["spec"]["group"] = "tools.x-k8s.io"
    assert (await api.post(CRDS, community))[0] == 201
