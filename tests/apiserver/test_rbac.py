"""ServiceAccount identities and RBAC in the embedded server, over HTTP: one test per rule."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from koordqueue.apiserver.controls import Access
from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.testing import APIClient
from koordqueue.apiserver.tokens import TokenClaims, TokenIssuer, load_or_create_key

from .conftest import configmap, widget

NS = "default"
SA = "robot"
USER = f"system:serviceaccount:{NS}:{SA}"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
CMS = "/api/v1/namespaces/{ns}/configmaps"
WIDGETS = "/apis/example.com/v1/namespaces/{ns}/widgets"


def cluster_role(name: str, *rules: dict[str, Any], labels: dict[str, str] | None = None,
                 aggregate: list[dict[str, str]] | None = None) -> dict[str, Any]:
    role: dict[str, Any] = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                            "metadata": {"name": name, "labels": labels or {}}, "rules": list(rules)}
    if aggregate is not None:
        role["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": m} for m in aggregate]}
    return role


def role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
            "rules": list(rules)}


def binding(kind: str, name: str, role_kind: str, role_name: str, *subjects: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": list(subjects) or [{"kind": "ServiceAccount", "name": SA, "namespace": NS}]}


def rule(verbs: list[str], resources: list[str], groups: list[str] | None = None,
         names: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"apiGroups": [""] if groups is None else groups, "resources": resources, "verbs": verbs}
    if names:
        out["resourceNames"] = names
    return out


@pytest.fixture
async def robot(apiserver: APIServer, api: APIClient) -> AsyncIterator[APIClient]:
    """An HTTP client that is the ServiceAccount default/robot, with no permission yet."""
    for ns in ("other",):
        await api.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    status, _, _ = await api.post(f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": SA}})
    assert status == 201
    await api.post(CMS.format(ns=NS), configmap("a"))
    await api.post(CMS.format(ns=NS), configmap("b"))
    await api.post(CMS.format(ns="other"), configmap("a"))
    async with APIClient(apiserver, token=apiserver.issue_token(NS, SA)) as client:
        yield client


async def grant(api: APIClient, *objects: dict[str, Any], namespace: str = NS) -> None:
    for obj in objects:
        scoped = obj["kind"] in ("Role", "RoleBinding")
        path = f"{RBAC}/namespaces/{namespace}/{obj['kind'].lower()}s" if scoped else f"{RBAC}/{obj['kind'].lower()}s"
        status, body, _ = await api.post(path, obj)
        assert status == 201, body


# --- identities -------------------------------------------------------------------------


async def test_token_request_gives_a_token_that_authenticates_as_the_service_account(
        apiserver: APIServer, api: APIClient) -> None:
    await api.post(f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": SA}})
    status, answer, _ = await api.post(f"/api/v1/namespaces/{NS}/serviceaccounts/{SA}/token",
                                       {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                        "spec": {"expirationSeconds": 1200}})
    assert status == 201, answer
    assert answer["kind"] == "TokenRequest" and answer["spec"]["expirationSeconds"] == 1200
    expires = time.mktime(time.strptime(answer["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(expires - time.mktime(time.gmtime()) - 1200) < 5
    async with APIClient(apiserver, token=answer["status"]["token"]) as client:
        status, review, _ = await client.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                              {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert status == 201
    info = review["status"]["userInfo"]
    assert info["username"] == USER
    assert info["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"]


async def test_token_request_refusals(api: APIClient) -> None:
    path = f"/api/v1/namespaces/{NS}/serviceaccounts/{{}}/token"
    status, body, _ = await api.post(path.format("ghost"), {"spec": {}})
    assert (status, body["message"]) == (404, 'serviceaccounts "ghost" not found')
    await api.post(f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": SA}})
    status, body, _ = await api.post(path.format(SA), {"spec": {"expirationSeconds": 60}})
    assert status == 422 and body["reason"] == "Invalid"
    assert body["message"] == ('TokenRequest.authentication.k8s.io "robot" is invalid: spec.expirationSeconds: '
                               "Invalid value: 60: may not specify a duration less than 10 minutes")
    status, body, _ = await api.post(path.format(SA), {"spec": {"boundObjectRef": {"kind": "Pod", "name": "nope"}}})
    assert (status, body["message"]) == (404, 'pods "nope" not found')
    status, _, _ = await api.get(path.format(SA))
    assert status == 405


async def token_works(apiserver: APIServer, token: str) -> int:
    async with APIClient(apiserver, token=token) as client:
        status, _, _ = await client.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", {})
    return status


async def test_a_token_stops_working_with_its_service_account_or_bound_pod(apiserver: APIServer,
                                                                          api: APIClient) -> None:
    await api.post(f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": SA}})
    token = apiserver.issue_token(NS, SA)
    assert await token_works(apiserver, token) == 201
    await api.delete(f"/api/v1/namespaces/{NS}/serviceaccounts/{SA}")
    assert await token_works(apiserver, token) == 401
    await api.post(f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": SA}})
    assert await token_works(apiserver, token) == 401  # same name, another ServiceAccount
    await api.post(f"/api/v1/namespaces/{NS}/pods", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "busybox"}]}})
    _, answer, _ = await api.post(f"/api/v1/namespaces/{NS}/serviceaccounts/{SA}/token",
                                  {"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}}})
    bound = answer["status"]["token"]
    assert await token_works(apiserver, bound) == 201
    await api.delete(f"/api/v1/namespaces/{NS}/pods/p")
    assert await token_works(apiserver, bound) == 401


async def test_expired_forged_or_foreign_audience_tokens_are_401(apiserver: APIServer, api: APIClient) -> None:
    status, account, _ = await api.post(f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": SA}})
    issuer = TokenIssuer(load_or_create_key(apiserver.state_dir))
    uid = account["metadata"]["uid"]
    now = int(time.time())
    fresh = issuer.issue(TokenClaims(NS, SA, uid, ("https://kubernetes.default.svc.cluster.local",), now + 600))
    assert await token_works(apiserver, fresh) == 201  # the control: a well-made token works
    expired = issuer.issue(TokenClaims(NS, SA, uid, ("https://kubernetes.default.svc.cluster.local",), now - 1),
                           now=now - 700)
    assert await token_works(apiserver, expired) == 401
    foreign = issuer.issue(TokenClaims(NS, SA, uid, ("vault",), now + 600))
    assert await token_works(apiserver, foreign) == 401
    forged = TokenIssuer(b"x" * 32).issue(TokenClaims(NS, SA, uid, ("https://kubernetes.default.svc.cluster.local",),
                                                      now + 600))
    assert await token_works(apiserver, forged) == 401
    assert await token_works(apiserver, fresh[:-2] + ("AA" if not fresh.endswith("AA") else "BB")) == 401
    assert await token_works(apiserver, "not-a-token") == 401


async def test_tokens_survive_a_restart(tmp_path: Any) -> None:
    from koordqueue.apiserver.testing import running_apiserver

    async with running_apiserver(tmp_path / "state") as server, APIClient(server) as api:
        await api.post(f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": SA}})
        token = server.issue_token(NS, SA)
    async with running_apiserver(tmp_path / "state") as server:
        assert await token_works(server, token) == 201


# --- RBAC rules ---------------------------------------------------------------------------


async def test_no_binding_means_403_worded_as_kube_apiserver(robot: APIClient) -> None:
    status, body, _ = await robot.get(CMS.format(ns=NS))
    assert status == 403
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": f'configmaps is forbidden: User "{USER}" cannot list resource "configmaps" in API '
                               f'group "" in the namespace "{NS}"',
                    "reason": "Forbidden", "details": {"kind": "configmaps"}, "code": 403}
    status, body, _ = await robot.get("/api/v1/nodes")
    assert body["message"] == (f'nodes is forbidden: User "{USER}" cannot list resource "nodes" in API group "" '
                               "at the cluster scope")
    status, body, _ = await robot.patch(WIDGETS.format(ns=NS) + "/w/status", {"status": {}})
    assert status == 403
    assert body["message"] == (f'widgets.example.com "w" is forbidden: User "{USER}" cannot patch resource '
                               f'"widgets/status" in API group "example.com" in the namespace "{NS}"')
    assert body["details"] == {"name": "w", "group": "example.com", "kind": "widgets"}
    status, body, _ = await robot.get("/metrics")
    assert (status, body["message"]) == (403, f'forbidden: User "{USER}" cannot get path "/metrics"')


async def test_discovery_and_version_are_open_to_any_service_account(robot: APIClient) -> None:
    for path in ("/version", "/api", "/apis", "/api/v1", "/apis/example.com/v1", "/openapi/v3", "/healthz"):
        status, _, _ = await robot.get(path)
        assert status == 200, path


async def test_verbs(api: APIClient, robot: APIClient) -> None:
    await grant(api, role("read-one-verb", rule(["get"], ["configmaps"])),
                binding("RoleBinding", "rb", "Role", "read-one-verb"))
    path = CMS.format(ns=NS)
    assert (await robot.get(f"{path}/a"))[0] == 200
    assert (await robot.get(path))[0] == 403  # list
    assert (await robot.get(path, params={"watch": "true"}))[0] == 403
    assert (await robot.post(path, configmap("new")))[0] == 403
    assert (await robot.patch(f"{path}/a", {"data": {"x": "1"}}))[0] == 403
    assert (await robot.delete(f"{path}/a"))[0] == 403
    assert (await robot.delete(path))[0] == 403  # deletecollection
    await grant(api, role("all-verbs", rule(["*"], ["configmaps"])), binding("RoleBinding", "rb2", "Role", "all-verbs"))
    assert (await robot.get(path))[0] == 200
    events = await robot.watch(path, params={"timeoutSeconds": "1"}, until=lambda ev: len(ev) >= 2)
    assert {e["object"]["metadata"]["name"] for e in events} == {"a", "b"}
    assert (await robot.post(path, configmap("new")))[0] == 201
    _, current, _ = await robot.get(f"{path}/new")
    assert (await robot.put(f"{path}/new", current))[0] == 200
    assert (await robot.patch(f"{path}/new", {"data": {"x": "1"}}))[0] == 200
    assert (await robot.delete(f"{path}/new"))[0] == 200
    assert (await robot.delete(path, params={"labelSelector": "none=here"}))[0] == 200


async def test_api_groups(api: APIClient, robot: APIClient) -> None:
    await grant(api, cluster_role("core-only", rule(["list"], ["*"])),
                binding("ClusterRoleBinding", "crb", "ClusterRole", "core-only"))
    assert (await robot.get(CMS.format(ns=NS)))[0] == 200
    assert (await robot.get(WIDGETS.format(ns=NS)))[0] == 403  # example.com is not the core group
    await grant(api, cluster_role("any-group", rule(["list"], ["widgets"], groups=["*"])),
                binding("ClusterRoleBinding", "crb2", "ClusterRole", "any-group"))
    assert (await robot.get(WIDGETS.format(ns=NS)))[0] == 200


async def test_subresources(api: APIClient, robot: APIClient) -> None:
    await api.post(WIDGETS.format(ns=NS), widget("w", size=1))
    await grant(api, role("status-writer", rule(["get", "patch"], ["widgets/status"], groups=["example.com"])),
                binding("RoleBinding", "rb", "Role", "status-writer"))
    path = WIDGETS.format(ns=NS) + "/w"
    status, body, _ = await robot.patch(f"{path}/status", {"status": {"ready": True}})
    assert (status, body["status"]) == (200, {"ready": True})
    assert (await robot.get(f"{path}/status"))[0] == 200
    assert (await robot.get(path))[0] == 403  # the object itself is another resource
    assert (await robot.patch(path, {"spec": {"size": 2}}))[0] == 403
    # "*/status" is the status of everything in the groups named
    await grant(api, role("all-status", rule(["get"], ["*/status"], groups=["*"])),
                binding("RoleBinding", "rb2", "Role", "all-status"))
    assert (await robot.get("/api/v1/namespaces/default/status"))[0] == 200  # the namespace's own status
    assert (await robot.get("/api/v1/namespaces/default"))[0] == 403
    await api.post(f"/api/v1/namespaces/{NS}/pods", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "busybox"}]}})
    assert (await robot.get(f"/api/v1/namespaces/{NS}/pods/p/status"))[0] == 200
    assert (await robot.get(f"/api/v1/namespaces/{NS}/pods/p"))[0] == 403
    # A subresource the type does not serve is authorized first, as kube-apiserver does: 403
    # without a grant, then 404 (so a grant used that way is used).
    assert (await robot.patch(f"{path}/scale", {"spec": {"replicas": 1}}))[0] == 403
    await grant(api, role("scaler", rule(["patch"], ["widgets/scale"], groups=["example.com"])),
                binding("RoleBinding", "rb3", "Role", "scaler"))
    status, body, _ = await robot.patch(f"{path}/scale", {"spec": {"replicas": 1}})
    assert (status, body["message"]) == (404, 'widgets.example.com "w" not found')


async def test_resource_names(api: APIClient, robot: APIClient) -> None:
    await grant(api, role("just-a", rule(["get", "list", "watch", "update", "create"], ["configmaps"], names=["a"])),
                binding("RoleBinding", "rb", "Role", "just-a"))
    path = CMS.format(ns=NS)
    assert (await robot.get(f"{path}/a"))[0] == 200
    assert (await robot.get(f"{path}/b"))[0] == 403
    assert (await robot.get(path))[0] == 403  # a list names no object
    status, body, _ = await robot.get(path, params={"fieldSelector": "metadata.name=a"})
    assert status == 200 and [o["metadata"]["name"] for o in body["items"]] == ["a"]
    assert (await robot.get(path, params={"fieldSelector": "metadata.name=b"}))[0] == 403
    assert (await robot.get(path, params={"fieldSelector": "metadata.namespace=default,metadata.name==a"}))[0] == 200
    assert (await robot.get(path, params={"fieldSelector": "metadata.name!=b"}))[0] == 403
    status, _, _ = await robot.get(path, params={"fieldSelector": "metadata.name=a", "watch": "true",
                                                 "timeoutSeconds": "1"})
    assert status == 200
    assert (await robot.post(path, configmap("a2")))[0] == 403  # create names no existing object


async def test_role_binding_grants_in_its_namespace_only(api: APIClient, robot: APIClient) -> None:
    await grant(api, role("reader", rule(["get", "list"], ["configmaps"])),
                binding("RoleBinding", "rb", "Role", "reader"))
    assert (await robot.get(CMS.format(ns=NS) + "/a"))[0] == 200
    assert (await robot.get(CMS.format(ns="other") + "/a"))[0] == 403
    assert (await robot.get("/api/v1/configmaps"))[0] == 403  # all namespaces is the cluster scope
    # a RoleBinding to a ClusterRole is still only for its namespace
    await grant(api, cluster_role("cm-reader", rule(["get"], ["configmaps"])),
                binding("RoleBinding", "rb", "ClusterRole", "cm-reader"), namespace="other")
    assert (await robot.get(CMS.format(ns="other") + "/a"))[0] == 200
    assert (await robot.get("/api/v1/nodes"))[0] == 403
    # a Role named by a RoleBinding of another namespace does not count
    await grant(api, binding("RoleBinding", "rb-cross", "Role", "reader"), namespace="kube-public")
    assert (await robot.get("/api/v1/namespaces/kube-public/configmaps"))[0] == 403


async def test_cluster_role_binding_grants_everywhere(api: APIClient, robot: APIClient) -> None:
    await grant(api, cluster_role("reader", rule(["list"], ["configmaps", "nodes", "namespaces"])),
                binding("ClusterRoleBinding", "crb", "ClusterRole", "reader"))
    for path in (CMS.format(ns=NS), CMS.format(ns="other"), "/api/v1/configmaps", "/api/v1/nodes",
                 "/api/v1/namespaces"):
        assert (await robot.get(path))[0] == 200, path


async def test_subject_kinds(api: APIClient, robot: APIClient) -> None:
    path = CMS.format(ns=NS)
    await grant(api, role("reader", rule(["list"], ["configmaps"])))
    # a ServiceAccount subject without a namespace is the RoleBinding's namespace
    await grant(api, binding("RoleBinding", "by-sa", "Role", "reader", {"kind": "ServiceAccount", "name": SA}))
    assert (await robot.get(path))[0] == 200
    await api.delete(f"{RBAC}/namespaces/{NS}/rolebindings/by-sa")
    assert (await robot.get(path))[0] == 403  # a change of binding takes effect at once
    await grant(api, binding("RoleBinding", "by-group", "Role", "reader",
                             {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                              "name": f"system:serviceaccounts:{NS}"}))
    assert (await robot.get(path))[0] == 200
    await api.delete(f"{RBAC}/namespaces/{NS}/rolebindings/by-group")
    await grant(api, binding("RoleBinding", "by-user", "Role", "reader",
                             {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": USER}))
    assert (await robot.get(path))[0] == 200
    await api.delete(f"{RBAC}/namespaces/{NS}/rolebindings/by-user")
    await grant(api, binding("RoleBinding", "someone-else", "Role", "reader",
                             {"kind": "ServiceAccount", "name": SA, "namespace": "other"}))
    assert (await robot.get(path))[0] == 403


async def test_role_changes_take_effect_at_once(api: APIClient, robot: APIClient) -> None:
    await grant(api, role("reader", rule(["get"], ["configmaps"])), binding("RoleBinding", "rb", "Role", "reader"))
    assert (await robot.get(CMS.format(ns=NS)))[0] == 403
    _, current, _ = await api.get(f"{RBAC}/namespaces/{NS}/roles/reader")
    current["rules"][0]["verbs"] = ["get", "list"]
    assert (await api.put(f"{RBAC}/namespaces/{NS}/roles/reader", current))[0] == 200
    assert (await robot.get(CMS.format(ns=NS)))[0] == 200


async def test_aggregated_cluster_role(api: APIClient, robot: APIClient) -> None:
    await grant(api, cluster_role("aggregate", aggregate=[{"example.com/aggregate-to-reader": "true"}]),
                binding("ClusterRoleBinding", "crb", "ClusterRole", "aggregate"))
    assert (await robot.get("/api/v1/nodes"))[0] == 403
    await grant(api, cluster_role("nodes-part", rule(["list"], ["nodes"]),
                                  labels={"example.com/aggregate-to-reader": "true"}))
    assert (await robot.get("/api/v1/nodes"))[0] == 200


async def test_non_resource_urls(api: APIClient, robot: APIClient) -> None:
    assert (await robot.get("/metrics"))[0] == 403
    await grant(api, cluster_role("metrics", {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}),
                binding("ClusterRoleBinding", "crb", "ClusterRole", "metrics"))
    assert (await robot.get("/metrics"))[0] == 404  # allowed through, and this server has no such page
    assert (await robot.get("/debug/pprof"))[0] == 404
    assert (await robot.post("/metrics", {}))[0] == 403  # post is not get


async def test_admin_token_may_do_anything_and_controls_are_admin_only(api: APIClient, robot: APIClient) -> None:
    assert (await api.get("/api/v1/nodes"))[0] == 200
    assert (await api.get("/_test/state"))[0] == 200
    status, body, _ = await robot.get("/_test/state")
    assert (status, body["message"]) == (403, f'forbidden: User "{USER}" cannot get path "/_test/state"')
    await grant(api, cluster_role("god", rule(["*"], ["*"], groups=["*"]), {"nonResourceURLs": ["*"], "verbs": ["*"]}),
                binding("ClusterRoleBinding", "crb", "ClusterRole", "god"))
    assert (await robot.get("/_test/state"))[0] == 403  # no role opens the test controls


async def test_impersonation_needs_the_impersonate_verb(api: APIClient, robot: APIClient) -> None:
    await grant(api, role("reader", rule(["list"], ["configmaps"])), binding("RoleBinding", "rb", "Role", "reader"))
    as_robot = {"Impersonate-User": USER}
    assert (await api.get(CMS.format(ns=NS), headers=as_robot))[0] == 200
    assert (await api.get("/api/v1/nodes", headers=as_robot))[0] == 403  # the admin acting as robot is robot
    status, body, _ = await robot.get(CMS.format(ns=NS), headers={"Impersonate-User": "alice"})
    assert (status, body["message"]) == (403, f'users "alice" is forbidden: User "{USER}" cannot impersonate '
                                               'resource "users" in API group "" at the cluster scope')
    status, _, _ = await api.get(CMS.format(ns=NS), headers={"Impersonate-Group": "x"})
    assert status == 400


async def test_reviews(api: APIClient, robot: APIClient) -> None:
    await grant(api, role("reader", rule(["list"], ["configmaps"])), binding("RoleBinding", "rb", "Role", "reader"))

    async def can(client: APIClient, verb: str, resource: str, namespace: str = NS) -> bool:
        status, body, _ = await client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
            "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace}}})
        assert status == 201, body
        return bool(body["status"]["allowed"])

    assert await can(robot, "list", "configmaps") and not await can(robot, "delete", "configmaps")
    assert not await can(robot, "list", "configmaps", "other")
    assert await can(api, "delete", "nodes", "")
    # SubjectAccessReview asks about someone else, and needs RBAC permission to ask
    sar = {"spec": {"user": USER, "groups": ["system:serviceaccounts"],
                    "resourceAttributes": {"verb": "list", "resource": "configmaps", "namespace": NS}}}
    status, body, _ = await api.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
    assert (status, body["status"]["allowed"]) == (201, True)
    assert (await robot.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar))[0] == 403
    status, body, _ = await robot.post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                                       {"spec": {"namespace": NS}})
    assert status == 201
    assert {"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"]} in body["status"]["resourceRules"]
    assert (await robot.get("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"))[0] == 405


async def test_requests_by_user_are_logged(apiserver: APIServer, api: APIClient, robot: APIClient) -> None:
    await api.post(WIDGETS.format(ns=NS), widget("w", size=1))
    await grant(api, role("r", rule(["list", "watch"], ["configmaps"]),
                          rule(["patch"], ["widgets/status"], groups=["example.com"])),
                binding("RoleBinding", "rb", "Role", "r"))
    await robot.get(CMS.format(ns=NS))
    await robot.get(CMS.format(ns=NS))
    await robot.patch(WIDGETS.format(ns=NS) + "/w/status", {"status": {"ready": True}})
    await robot.get("/api/v1/nodes")
    assert apiserver.controls.requests_by(USER) == {
        Access("list", "", "configmaps"), Access("patch", "example.com", "widgets", "status")}
    assert apiserver.controls.denied_to(USER) == {Access("list", "", "nodes")}
    status, body, _ = await api.get("/_test/requests", params={"user": USER})
    assert status == 200
    assert body["denied"] == [{"verb": "list", "group": "", "resource": "nodes", "subresource": ""}]
    assert apiserver.controls.request_counts(USER) == {
        Access("list", "", "configmaps"): 2, Access("patch", "example.com", "widgets", "status"): 1}
    assert body["counts"] == [
        {"verb": "list", "group": "", "resource": "configmaps", "subresource": "", "count": 2},
        {"verb": "patch", "group": "example.com", "resource": "widgets", "subresource": "status", "count": 1}]
