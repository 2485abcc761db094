"""Server-side apply (PATCH application/apply-patch+yaml): the subset apply.py serves."""

from __future__ import annotations

from typing import Any

import orjson
import yaml

from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.testing import APIClient

from .conftest import WIDGETS, configmap, widget
from .test_rbac import binding, grant, role, rule

CMS = "/api/v1/namespaces/default/configmaps"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
APPLY = "application/apply-patch+yaml"


async def apply(api: APIClient, path: str, config: dict[str, Any], manager: str = "tester",
                **params: str) -> tuple[int, Any]:
    status, body, _ = await api.request("PATCH", path, raw=yaml.safe_dump(config).encode(), content_type=APPLY,
                                        params={"fieldManager": manager, **params})
    return status, body


def deployment(containers: list[dict[str, Any]], replicas: int = 2) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": containers}}}}


async def test_apply_creates_then_a_repeat_changes_nothing(api: APIClient) -> None:
    status, obj = await apply(api, f"{CMS}/a", configmap("a", labels={"team": "x"}, k="v"))
    assert status == 201 and obj["data"] == {"k": "v"} and obj["metadata"]["uid"]
    (entry,) = obj["metadata"]["managedFields"]
    assert {k: v for k, v in entry.items() if k != "time"} == {
        "manager": "tester", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:team": {}}}}}
    status, again = await apply(api, f"{CMS}/a", configmap("a", labels={"team": "x"}, k="v"))
    assert status == 200 and again == obj  # same resourceVersion, same managedFields time


async def test_fields_a_manager_stops_applying_are_removed_and_no_others(api: APIClient) -> None:
    await apply(api, f"{CMS}/a", configmap("a", labels={"team": "x", "tier": "1"}, k="v", old="o"))
    await api.patch(f"{CMS}/a", {"data": {"byhand": "h"}})  # not applied by anyone: left alone
    await apply(api, f"{CMS}/a", configmap("a", shared="s"), manager="other")
    await apply(api, f"{CMS}/a", configmap("a", shared="s"))  # both apply shared now
    status, obj = await apply(api, f"{CMS}/a", configmap("a", labels={"team": "y"}, k="v2"))
    assert status == 200
    assert obj["data"] == {"k": "v2", "byhand": "h", "shared": "s"}  # old dropped; shared is other's too
    assert obj["metadata"]["labels"] == {"team": "y"}
    managers = {e["manager"]: e["fieldsV1"] for e in obj["metadata"]["managedFields"]}
    assert managers["other"] == {"f:data": {".": {}, "f:shared": {}}}
    # A merge patch is an Update by its client (the User-Agent's name): it owns what it set, and the
    # appliers' entries stay as they were.
    _, patched, _ = await api.patch(f"{CMS}/a", {"data": {"byhand": "h2"}})
    entries = patched["metadata"]["managedFields"]
    assert [e for e in entries if e["operation"] == "Apply"] == [
        e for e in obj["metadata"]["managedFields"] if e["operation"] == "Apply"]
    assert [(e["manager"], e["fieldsV1"]) for e in entries if e["operation"] == "Update"] == [
        ("Python", {"f:data": {"f:byhand": {}}})]


async def test_lists_with_keys_merge_by_key_and_lose_items_no_longer_applied(api: APIClient) -> None:
    app = {"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    sidecar = {"name": "sidecar", "image": "busybox"}
    status, _ = await apply(api, f"{DEPLOYMENTS}/d", deployment([app, sidecar]))
    assert status == 201
    # Another applier sets the app container's pull policy: merged into the item, kept later.
    policy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
              "spec": {"template": {"spec": {"containers": [{"name": "app", "imagePullPolicy": "Always"}]}}}}
    assert (await apply(api, f"{DEPLOYMENTS}/d", policy, manager="policy"))[0] == 200
    status, obj = await apply(api, f"{DEPLOYMENTS}/d", deployment(
        [{"name": "app", "image": "nginx:2", "env": [{"name": "A", "value": "3"}]}], replicas=3))
    assert status == 200
    (container,) = obj["spec"]["template"]["spec"]["containers"]
    assert container == {"name": "app", "image": "nginx:2", "imagePullPolicy": "Always",
                         "env": [{"name": "A", "value": "3"}]}
    assert obj["spec"]["replicas"] == 3 and obj["metadata"]["generation"] == 3
    mine = next(e["fieldsV1"] for e in obj["metadata"]["managedFields"] if e["manager"] == "tester")
    assert mine["f:spec"]["f:selector"] == {}  # a LabelSelector is atomic
    assert mine["f:spec"]["f:template"]["f:spec"]["f:containers"] == {'k:{"name":"app"}': {
        ".": {}, "f:name": {}, "f:image": {}, "f:env": {'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}}}}


async def test_a_custom_resource_takes_lists_whole(api: APIClient) -> None:
    await apply(api, f"{WIDGETS}/w", widget("w", sizes=[1, 2, 3], color="red"))
    status, obj = await apply(api, f"{WIDGETS}/w", widget("w", sizes=[4]))
    assert status == 200 and obj["spec"] == {"sizes": [4]}  # color no longer applied


async def test_the_request_is_checked(apiserver: APIServer, api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    config = yaml.safe_dump(configmap("a")).encode()
    status, body, _ = await api.request("PATCH", f"{CMS}/a", raw=config, content_type=APPLY)
    assert status == 422 and "fieldManager: Required value" in body["message"]
    status, body = await apply(api, f"{CMS}/a", {"metadata": {"name": "a"}, "data": {}})
    assert status == 400 and "apiVersion and kind" in body["message"]
    status, body = await apply(api, f"{CMS}/a", configmap("b"))
    assert status == 400 and "does not match the name on the URL" in body["message"]
    status, body = await apply(api, f"{CMS}/a", {**configmap("a"), "dta": {}}, fieldValidation="Strict")
    assert status == 400 and 'unknown field "dta"' in body["message"]
    status, body = await apply(api, f"{WIDGETS}/w/status", widget("w"))
    assert status == 415
    status, obj = await apply(api, f"{CMS}/new", configmap("new"), dryRun="All")
    assert status == 201 and (await api.get(f"{CMS}/new"))[0] == 404
    status, body, _ = await api.request("PATCH", f"{CMS}/a", raw=b"data: [", content_type=APPLY,
                                        params={"fieldManager": "x"})
    assert status == 400 and "error decoding YAML" in body["message"]
    stale = configmap("a", k="v")
    stale["metadata"]["resourceVersion"] = "1"
    status, body = await apply(api, f"{CMS}/a", stale)
    assert status == 409


async def test_an_apply_that_creates_needs_create_as_well_as_patch(apiserver: APIServer, api: APIClient) -> None:
    await api.post("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "robot"}})
    await grant(api, role("patcher", rule(["patch"], ["configmaps"])),
                binding("RoleBinding", "patcher", "Role", "patcher"))
    await api.post(CMS, configmap("exists"))
    async with APIClient(apiserver, token=apiserver.issue_token("default", "robot")) as robot:
        assert (await apply(robot, f"{CMS}/exists", configmap("exists", k="v")))[0] == 200
        status, body = await apply(robot, f"{CMS}/new", configmap("new"))
        assert status == 403 and 'cannot create resource "configmaps"' in body["message"]
        await grant(api, role("creator", rule(["create"], ["configmaps"])),
                    binding("RoleBinding", "creator", "Role", "creator"))
        assert (await apply(robot, f"{CMS}/new", configmap("new")))[0] == 201


async def test_json_body_is_yaml_too(api: APIClient) -> None:
    """helm sends its apply configurations as JSON, which is YAML."""
    status, body, _ = await api.request("PATCH", f"{CMS}/j", raw=orjson.dumps(configmap("j", k="v")),
                                        content_type=APPLY, params={"fieldManager": "helm", "force": "false"})
    assert status == 201 and body["data"] == {"k": "v"}


def _who_owns(obj: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


async def test_an_apply_that_changes_another_managers_field_is_a_conflict_unless_forced(api: APIClient) -> None:
    """kube-apiserver's answer, word for word: 409, one FieldManagerConflict cause per field."""
    await apply(api, f"{CMS}/a", configmap("a", k="v", keep="1"), manager="first")
    status, body = await apply(api, f"{CMS}/a", configmap("a", k="w"), manager="second")
    assert status == 409 and body["reason"] == "Conflict"
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "first": .data.k'
    assert body["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "first"', "field": ".data.k"}]
    assert (await api.get(f"{CMS}/a"))[1]["data"] == {"k": "v", "keep": "1"}  # nothing written
    # The same value is no conflict: both own it.
    status, shared = await apply(api, f"{CMS}/a", configmap("a", keep="1"), manager="second")
    assert status == 200 and _who_owns(shared)[("second", "Apply")] == {"f:data": {".": {}, "f:keep": {}}}
    assert _who_owns(shared)[("first", "Apply")] == {"f:data": {".": {}, "f:k": {}, "f:keep": {}}}
    # Forced, the field changes hands.
    status, forced = await apply(api, f"{CMS}/a", configmap("a", k="w", keep="1"), manager="second", force="true")
    assert status == 200 and forced["data"] == {"k": "w", "keep": "1"}
    owners = _who_owns(forced)
    assert owners[("second", "Apply")] == {"f:data": {".": {}, "f:k": {}, "f:keep": {}}}
    assert owners[("first", "Apply")] == {"f:data": {".": {}, "f:keep": {}}}


async def test_fields_set_by_create_update_and_patch_belong_to_their_manager(api: APIClient) -> None:
    """An Update's manager: the fieldManager parameter, else the User-Agent's product name."""
    status, created, _ = await api.request("POST", CMS, raw=orjson.dumps(configmap("a", labels={"t": "1"}, k="v")),
                                           content_type="application/json", params={"fieldManager": "kubectl-create"})
    assert status == 201
    (entry,) = created["metadata"]["managedFields"]
    assert {k: v for k, v in entry.items() if k != "time"} == {
        "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:t": {}}}}}
    status, body = await apply(api, f"{CMS}/a", configmap("a", k="w", other="o"), manager="applier")
    assert status == 409
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.k'
    # A patch takes the fields it sets from their owner; a removed field is nobody's.
    _, patched, _ = await api.request("PATCH", f"{CMS}/a", raw=orjson.dumps({"data": {"k": "x"}, "metadata": {
        "labels": None}}), content_type="application/merge-patch+json", params={"fieldManager": "editor"})
    owners = _who_owns(patched)
    assert owners[("editor", "Update")] == {"f:data": {"f:k": {}}}
    assert owners[("kubectl-create", "Update")] == {"f:data": {}}  # the map itself, still its own
    status, body = await apply(api, f"{CMS}/a", configmap("a", k="y", n="1", m="2"), manager="applier")
    assert status == 409 and body["message"] == 'Apply failed with 1 conflict: conflict with "editor" using v1: .data.k'


async def test_several_conflicts_are_listed_by_manager(api: APIClient) -> None:
    await apply(api, f"{DEPLOYMENTS}/d", deployment([{"name": "app", "image": "nginx"}]), manager="ops")
    await apply(api, f"{DEPLOYMENTS}/d", {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": "d", "labels": {"team": "a"}}}, manager="labeller")
    change = deployment([{"name": "app", "image": "nginx:2"}], replicas=5)
    change["metadata"]["labels"] = {"team": "b"}
    status, body = await apply(api, f"{DEPLOYMENTS}/d", change, manager="dev")
    assert status == 409
    assert body["message"] == (
        'Apply failed with 3 conflicts: conflicts with "labeller":\n- .metadata.labels.team\n'
        'conflicts with "ops":\n- .spec.replicas\n- .spec.template.spec.containers[name="app"].image')
    assert [c["field"] for c in body["details"]["causes"]] == [
        ".metadata.labels.team", ".spec.replicas", '.spec.template.spec.containers[name="app"].image']


async def test_status_writes_are_entries_of_the_status_subresource(api: APIClient) -> None:
    await api.post(WIDGETS, widget("w", size=1))
    _, written, _ = await api.request("PATCH", f"{WIDGETS}/w/status", raw=orjson.dumps({"status": {"ready": True}}),
                                      content_type="application/merge-patch+json", params={"fieldManager": "ctl"})
    (status_entry,) = [e for e in written["metadata"]["managedFields"] if e.get("subresource") == "status"]
    assert (status_entry["manager"], status_entry["fieldsV1"]) == ("ctl", {"f:status": {".": {}, "f:ready": {}}})
    main = [e for e in written["metadata"]["managedFields"] if not e.get("subresource")]
    assert all("f:status" not in e["fieldsV1"] for e in main)
