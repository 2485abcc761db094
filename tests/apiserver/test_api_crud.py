"""Create, get, list, update, delete: system metadata, optimistic concurrency, generation, /status."""

from __future__ import annotations

import re

from koordqueue.apiserver.testing import APIClient

from .conftest import WIDGETS, configmap, widget

CMS = "/api/v1/namespaces/default/configmaps"


async def test_create_sets_system_metadata_and_namespace_from_url(api: APIClient) -> None:
    status, obj, _ = await api.post(CMS, configmap("a", x="1"))
    assert status == 201
    meta = obj["metadata"]
    assert meta["namespace"] == "default"
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert int(meta["resourceVersion"]) > 0
    assert obj["data"] == {"x": "1"}


async def test_create_twice_is_already_exists(api: APIClient) -> None:
    assert (await api.post(CMS, configmap("a")))[0] == 201
    status, body, _ = await api.post(CMS, configmap("a"))
    assert status == 409
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "a" already exists'
    assert body["details"] == {"name": "a", "kind": "configmaps"}


async def test_get_and_list(api: APIClient) -> None:
    for name in ("b", "a"):
        await api.post(CMS, configmap(name))
    status, obj, _ = await api.get(f"{CMS}/a")
    assert status == 200 and obj["metadata"]["name"] == "a" and obj["kind"] == "ConfigMap"
    status, lst, _ = await api.get(CMS)
    assert status == 200
    assert lst["kind"] == "ConfigMapList" and lst["apiVersion"] == "v1"
    assert [i["metadata"]["name"] for i in lst["items"]] == ["a", "b"]
    assert int(lst["metadata"]["resourceVersion"]) >= int(obj["metadata"]["resourceVersion"])
    status, body, _ = await api.get(f"{CMS}/nope")
    assert status == 404 and body["reason"] == "NotFound" and body["message"] == 'configmaps "nope" not found'


async def test_a_built_in_lists_items_name_no_kind_as_kube_apiservers_do(api: APIClient) -> None:
    """kube-apiserver names a built-in kind once, on the list (our controller read a listed
    Job's kind and failed on the real one); a custom resource's items keep theirs."""
    await api.post(CMS, configmap("a"))
    await api.post(WIDGETS, widget("w"))
    _, lst, _ = await api.get(CMS)
    assert lst["kind"] == "ConfigMapList"
    assert [sorted(k for k in i if k in ("kind", "apiVersion")) for i in lst["items"]] == [[]]
    _, obj, _ = await api.get(f"{CMS}/a")
    assert (obj["kind"], obj["apiVersion"]) == ("ConfigMap", "v1")
    _, widgets, _ = await api.get(WIDGETS)
    assert [(i["kind"], i["metadata"]["name"]) for i in widgets["items"]] == [("Widget", "w")]


async def test_list_across_namespaces(api: APIClient) -> None:
    await api.post("/api/v1/namespaces", {"metadata": {"name": "other"}})
    await api.post(CMS, configmap("a"))
    await api.post("/api/v1/namespaces/other/configmaps", configmap("a"))
    _, lst, _ = await api.get("/api/v1/configmaps")
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in lst["items"]] == [
        ("default", "a"), ("other", "a")]


async def test_resource_version_is_global_and_monotonic(api: APIClient) -> None:
    _, a, _ = await api.post(CMS, configmap("a"))
    _, w, _ = await api.post(WIDGETS, widget("w"))
    _, b, _ = await api.post(CMS, configmap("b"))
    rvs = [int(o["metadata"]["resourceVersion"]) for o in (a, w, b)]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3


async def test_update_and_stale_resource_version_conflict(api: APIClient) -> None:
    _, obj, _ = await api.post(CMS, configmap("a", x="1"))
    obj["data"] = {"x": "2"}
    status, updated, _ = await api.put(f"{CMS}/a", obj)
    assert status == 200 and updated["data"] == {"x": "2"}
    assert int(updated["metadata"]["resourceVersion"]) > int(obj["metadata"]["resourceVersion"])
    assert updated["metadata"]["uid"] == obj["metadata"]["uid"]
    obj["data"] = {"x": "3"}  # still carries the old resourceVersion
    status, body, _ = await api.put(f"{CMS}/a", obj)
    assert status == 409 and body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    assert (await api.get(f"{CMS}/a"))[1]["data"] == {"x": "2"}


async def test_update_without_change_keeps_resource_version(api: APIClient) -> None:
    _, obj, _ = await api.post(CMS, configmap("a", x="1"))
    _, again, _ = await api.put(f"{CMS}/a", obj)
    assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


async def test_update_name_mismatch_is_bad_request(api: APIClient) -> None:
    _, obj, _ = await api.post(CMS, configmap("a"))
    status, body, _ = await api.put(f"{CMS}/b", obj)
    assert status == 400 and body["reason"] == "BadRequest"


async def test_custom_resource_update_needs_resource_version(api: APIClient) -> None:
    await api.post(WIDGETS, widget("w", size=1))
    status, body, _ = await api.put(f"{WIDGETS}/w", widget("w", size=2))
    assert status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.resourceVersion"


async def test_generation_bumps_on_spec_change_only(api: APIClient) -> None:
    _, w, _ = await api.post(WIDGETS, widget("w", size=1))
    assert w["metadata"]["generation"] == 1
    w["metadata"]["labels"] = {"a": "b"}
    _, w, _ = await api.put(f"{WIDGETS}/w", w)
    assert w["metadata"]["generation"] == 1  # metadata is not spec
    w["spec"]["size"] = 2
    _, w, _ = await api.put(f"{WIDGETS}/w", w)
    assert w["metadata"]["generation"] == 2
    w["status"] = {"ready": True}
    _, w, _ = await api.put(f"{WIDGETS}/w/status", w)
    assert w["metadata"]["generation"] == 2  # status is not spec when there is a status subresource
    assert w["status"] == {"ready": True}


async def test_status_subresource_semantics(api: APIClient) -> None:
    created = widget("w", size=1)
    created["status"] = {"ready": True}
    _, w, _ = await api.post(WIDGETS, created)
    assert "status" not in w  # create cannot set status when there is a status subresource
    # a write to /status changes status only
    w["spec"]["size"] = 99
    w["metadata"]["labels"] = {"sneaky": "yes"}
    w["status"] = {"ready": True}
    status, after, _ = await api.put(f"{WIDGETS}/w/status", w)
    assert status == 200
    assert after["status"] == {"ready": True}
    assert after["spec"] == {"size": 1} and "labels" not in after["metadata"]
    # a write to the main resource leaves status alone
    after["spec"]["size"] = 2
    after["status"] = {"ready": False}
    _, main, _ = await api.put(f"{WIDGETS}/w", after)
    assert main["spec"] == {"size": 2} and main["status"] == {"ready": True}
    # and so do patches
    _, patched, _ = await api.patch(f"{WIDGETS}/w", {"status": {"ready": False}, "spec": {"size": 3}})
    assert patched["status"] == {"ready": True} and patched["spec"] == {"size": 3}
    _, patched, _ = await api.patch(f"{WIDGETS}/w/status", {"status": {"ready": False}, "spec": {"size": 4}})
    assert patched["status"] == {"ready": False} and patched["spec"] == {"size": 3}
    status, got, _ = await api.get(f"{WIDGETS}/w/status")
    assert status == 200 and got["status"] == {"ready": False}


async def test_status_of_kind_without_status_subresource_is_not_found(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    status, body, _ = await api.get(f"{CMS}/a/status")
    assert status == 404 and body["reason"] == "NotFound"


async def test_generate_name(api: APIClient) -> None:
    status, obj, _ = await api.post(CMS, {"metadata": {"generateName": "job-"}, "data": {}})
    assert status == 201
    assert re.fullmatch(r"job-[a-z0-9]{5}", obj["metadata"]["name"])
    status, again, _ = await api.post(CMS, {"metadata": {"generateName": "job-"}})
    assert again["metadata"]["name"] != obj["metadata"]["name"]
    status, body, _ = await api.post(CMS, {"metadata": {}})
    assert status == 422 and "name or generateName is required" in body["message"]


async def test_delete_returns_object_and_removes_it(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    status, obj, _ = await api.delete(f"{CMS}/a")
    assert status == 200 and obj["metadata"]["name"] == "a"
    assert (await api.get(f"{CMS}/a"))[0] == 404
    status, body, _ = await api.delete(f"{CMS}/a")
    assert status == 404 and body["reason"] == "NotFound"


async def test_delete_precondition_conflict(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    status, body, _ = await api.delete(f"{CMS}/a", {"kind": "DeleteOptions", "apiVersion": "v1",
                                                    "preconditions": {"uid": "not-the-uid"}})
    assert status == 409 and "Precondition failed" in body["message"]
    assert (await api.get(f"{CMS}/a"))[0] == 200


async def test_delete_collection_with_selector(api: APIClient) -> None:
    await api.post(CMS, configmap("a", labels={"app": "x"}))
    await api.post(CMS, configmap("b", labels={"app": "y"}))
    status, body, _ = await api.delete(CMS, params={"labelSelector": "app=x"})
    assert status == 200 and [i["metadata"]["name"] for i in body["items"]] == ["a"]
    _, lst, _ = await api.get(CMS)
    assert [i["metadata"]["name"] for i in lst["items"]] == ["b"]


async def test_dry_run_writes_nothing(api: APIClient) -> None:
    status, obj, _ = await api.post(CMS, configmap("a"), params={"dryRun": "All"})
    assert status == 201 and obj["metadata"]["name"] == "a"
    assert (await api.get(f"{CMS}/a"))[0] == 404


async def test_cluster_scoped_and_builtin_defaults(api: APIClient) -> None:
    status, ns, _ = await api.post("/api/v1/namespaces", {"metadata": {"name": "team-a"}})
    assert status == 201
    assert ns["status"] == {"phase": "Active"}
    assert ns["metadata"]["labels"]["kubernetes.io/metadata.name"] == "team-a"
    _, pod, _ = await api.post("/api/v1/namespaces/team-a/pods", {
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"}})
    assert pod["status"]["phase"] == "Pending"  # create cannot set a pod running
    _, secret, _ = await api.post("/api/v1/namespaces/team-a/secrets", {
        "metadata": {"name": "s"}, "stringData": {"k": "v"}})
    assert secret["data"] == {"k": "dg=="} and secret["type"] == "Opaque" and "stringData" not in secret
    status, _, _ = await api.get("/api/v1/namespaces/team-a/namespaces")
    assert status == 404


async def test_pod_binding(api: APIClient) -> None:
    await api.post("/api/v1/namespaces/default/pods", {
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    status, _, _ = await api.post("/api/v1/namespaces/default/pods/p/binding", binding)
    assert status == 201
    _, pod, _ = await api.get("/api/v1/namespaces/default/pods/p")
    assert pod["spec"]["nodeName"] == "n1"
    status, body, _ = await api.post("/api/v1/namespaces/default/pods/p/binding", binding)
    assert status == 409 and "already assigned" in body["message"]


async def test_version_and_health(api: APIClient) -> None:
    status, version, _ = await api.get("/version")
    assert status == 200 and version["gitVersion"].startswith("v1.32.")
    for probe in ("/healthz", "/readyz", "/livez"):
        status, text, _ = await api.get(probe)
        assert status == 200 and text == "ok"
