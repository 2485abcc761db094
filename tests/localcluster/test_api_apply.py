"""Server-side apply (PATCH application/apply-patch+yaml): the subset apply.py serves."""

from __future__ import annotations

from typing import Any

import orjson
import yaml

from koordqueue.localcluster.server import APIServer
from koordqueue.localcluster.testing import APIClient

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
    # A merge patch keeps the appliers' managedFields (no Update entries are recorded).
    _, patched, _ = await api.patch(f"{CMS}/a", {"data": {"byhand": "h2"}})
    assert patched["metadata"]["managedFields"] == obj["metadata"]["managedFields"]


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
