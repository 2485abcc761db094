"""Bad requests get the code and Status body a real API server gives, never a 500 or a crash."""

from __future__ import annotations

import stat

import orjson
import yaml

from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.testing import APIClient

from .conftest import WIDGETS, configmap, widget

CMS = "/api/v1/namespaces/default/configmaps"


async def test_no_token_or_wrong_token_is_401(apiserver: APIServer) -> None:
    for token in ("", "wrong"):
        async with APIClient(apiserver, token=token) as anon:
            for path in (CMS, "/version", "/api", "/_test/state"):
                status, body, _ = await anon.get(path)
                assert status == 401, path
                assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


async def test_kubeconfig_and_state_dir_are_private(apiserver: APIServer) -> None:
    assert stat.S_IMODE(apiserver.kubeconfig_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(apiserver.state_dir.stat().st_mode) == 0o700
    config = yaml.safe_load(apiserver.kubeconfig_path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == apiserver.url
    assert apiserver.url.startswith("https://127.0.0.1:")
    assert config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert config["users"][0]["user"]["token"] == apiserver.token


async def test_malformed_json_is_400(api: APIClient) -> None:
    for method, path in (("POST", CMS), ("PUT", f"{CMS}/a")):
        status, body, _ = await api.request(method, path, raw=b'{"metadata": {', content_type="application/json")
        assert status == 400, method
        assert body["kind"] == "Status" and body["reason"] == "BadRequest" and body["code"] == 400
    status, body, _ = await api.post(CMS, ["not", "an", "object"])
    assert status == 400 and body["reason"] == "BadRequest"


async def test_malformed_patch_body_is_400(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    status, body, _ = await api.patch(f"{CMS}/a", None, raw=b"{oops")
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = await api.patch(f"{CMS}/a", {"op": "add"}, content_type="application/json-patch+json")
    assert status == 400 and body["reason"] == "BadRequest"


async def test_unknown_resource_is_404(api: APIClient) -> None:
    for path in ("/api/v1/namespaces/default/gizmos", "/apis/nope.io/v1/things", "/api/v2/pods",
                 "/apis/example.com/v1/widgets/x/y/z", "/nothing/here"):
        status, body, _ = await api.get(path)
        assert status == 404, path
        assert body["reason"] == "NotFound" and body["message"] == "the server could not find the requested resource"


async def test_wrong_scope_is_404(api: APIClient) -> None:
    status, _, _ = await api.get("/api/v1/namespaces/default/nodes")
    assert status == 404
    status, _, _ = await api.get("/api/v1/configmaps/a")  # namespaced object without a namespace
    assert status == 404


async def test_invalid_name_is_422(api: APIClient) -> None:
    status, body, _ = await api.post(CMS, configmap("Not_Valid"))
    assert status == 422
    assert body["reason"] == "Invalid"
    assert body["message"].startswith('ConfigMap "Not_Valid" is invalid: metadata.name: Invalid value: "Not_Valid": '
                                      "a lowercase RFC 1123 subdomain")
    assert body["details"]["causes"][0] == {
        "reason": "FieldValueInvalid", "field": "metadata.name", "message": body["details"]["causes"][0]["message"]}
    # Namespaces are labels, worded as kube-apiserver words them (apimachinery's IsDNS1123Label).
    status, body, _ = await api.post("/api/v1/namespaces", {"metadata": {"name": "a.b"}})
    assert status == 422 and body["message"] == \
        'Namespace "a.b" is invalid: metadata.name: Invalid value: "a.b": must not contain dots'
    status, body, _ = await api.post("/api/v1/namespaces", {"metadata": {"name": "a_b"}})
    assert status == 422 and body["message"] == (
        'Namespace "a_b" is invalid: metadata.name: Invalid value: "a_b": a lowercase RFC 1123 label must consist '
        "of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character "
        "(e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
    status, body, _ = await api.post(CMS, configmap("ok", labels={"bad key!": "v"}))
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.labels"


async def test_namespace_must_exist(api: APIClient) -> None:
    status, body, _ = await api.post("/api/v1/namespaces/ghost/configmaps", configmap("a"))
    assert status == 404 and body["message"] == 'namespaces "ghost" not found'


async def test_namespace_mismatch_and_kind_mismatch_are_400(api: APIClient) -> None:
    body = configmap("a")
    body["metadata"]["namespace"] = "kube-system"
    status, _, _ = await api.post(CMS, body)
    assert status == 400
    status, resp, _ = await api.post(CMS, {**configmap("a"), "kind": "Secret"})
    assert status == 400 and "kind" in resp["message"]


async def test_unsupported_patch_type_is_415(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    for ctype in ("text/plain", "application/json"):  # (apply-patch+yaml: test_api_apply.py)
        status, body, _ = await api.patch(f"{CMS}/a", {"data": {}}, content_type=ctype)
        assert status == 415, ctype
        assert body["reason"] == "UnsupportedMediaType"
    await api.post(WIDGETS, widget("w"))
    status, body, _ = await api.patch(f"{WIDGETS}/w", {"spec": {}},
                                      content_type="application/strategic-merge-patch+json")
    assert status == 415  # custom resources have no strategic merge, as on a real server


async def test_unsupported_body_content_type_is_415(api: APIClient) -> None:
    status, body, _ = await api.request("POST", CMS, raw=b"<xml/>", content_type="application/xml")
    assert status == 415 and body["reason"] == "UnsupportedMediaType"


async def test_yaml_body_is_accepted(api: APIClient) -> None:
    status, obj, _ = await api.request("POST", CMS, raw=b"metadata:\n  name: y\ndata:\n  k: v\n",
                                       content_type="application/yaml")
    assert status == 201 and obj["data"] == {"k": "v"}


async def test_method_not_allowed_is_405(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    for method, path in (("POST", f"{CMS}/a"), ("PUT", CMS), ("PATCH", CMS), ("DELETE", f"{WIDGETS}/w/status")):
        status, body, _ = await api.request(method, path, raw=b"{}", content_type="application/json")
        assert status == 405, (method, path)
        assert body["reason"] == "MethodNotAllowed"


async def test_bad_selectors_and_options_are_400(api: APIClient) -> None:
    for params in ({"labelSelector": "a in (b"}, {"labelSelector": "=x"}, {"fieldSelector": "spec.foo=x"},
                   {"fieldSelector": "nonsense"}, {"limit": "ten"}, {"continue": "garbage!"},
                   {"watch": "true", "resourceVersion": "abc"}):
        status, body, _ = await api.get(CMS, params=params)
        assert status == 400, params
        assert body["reason"] == "BadRequest"


async def test_create_with_resource_version_is_400(api: APIClient) -> None:
    body = configmap("a")
    body["metadata"]["resourceVersion"] = "5"
    status, resp, _ = await api.post(CMS, body)
    assert status == 400 and "resourceVersion should not be set" in resp["message"]


async def test_server_survives_garbage(api: APIClient) -> None:
    for raw in (b"\xff\xfe", b"null", b"1", b'"x"', orjson.dumps({"metadata": "x"})):
        status, _, _ = await api.request("POST", CMS, raw=raw, content_type="application/json")
        assert status == 400, raw
    assert (await api.get("/version"))[0] == 200
