"""PATCH: JSON patch (RFC 6902), merge patch (RFC 7386), strategic merge for built-in kinds."""

from __future__ import annotations

import orjson
import pytest

from koordqueue.apiserver.patch import (
    PatchError,
    PatchFormatError,
    apply_json_patch,
    apply_merge_patch,
    merged,
)
from koordqueue.apiserver.testing import APIClient

from .conftest import WIDGETS, configmap, widget

CMS = "/api/v1/namespaces/default/configmaps"
JSON_PATCH = "application/json-patch+json"


async def test_json_patch(api: APIClient) -> None:
    await api.post(CMS, configmap("a", x="1", y="2"))
    ops = [{"op": "replace", "path": "/data/x", "value": "9"}, {"op": "remove", "path": "/data/y"},
           {"op": "add", "path": "/metadata/labels", "value": {"k": "v"}}]
    status, obj, _ = await api.patch(f"{CMS}/a", ops, JSON_PATCH)
    assert status == 200
    assert obj["data"] == {"x": "9"} and obj["metadata"]["labels"] == {"k": "v"}


async def test_json_patch_failing_test_is_422_and_changes_nothing(api: APIClient) -> None:
    _, before, _ = await api.post(CMS, configmap("a", x="1"))
    ops = [{"op": "replace", "path": "/data/x", "value": "2"}, {"op": "test", "path": "/data/x", "value": "1"}]
    status, body, _ = await api.patch(f"{CMS}/a", ops, JSON_PATCH)
    assert status == 422 and body["kind"] == "Status"
    _, after, _ = await api.get(f"{CMS}/a")
    assert after == before


async def test_merge_patch(api: APIClient) -> None:
    await api.post(CMS, configmap("a", x="1", y="2"))
    status, obj, _ = await api.patch(f"{CMS}/a", {"data": {"x": None, "z": "3"}})
    assert status == 200 and obj["data"] == {"y": "2", "z": "3"}


async def test_patch_with_stale_resource_version_conflicts(api: APIClient) -> None:
    _, obj, _ = await api.post(CMS, configmap("a", x="1"))
    await api.patch(f"{CMS}/a", {"data": {"x": "2"}})
    status, body, _ = await api.patch(f"{CMS}/a", {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                                                   "data": {"x": "3"}})
    assert status == 409 and body["reason"] == "Conflict"


async def test_strategic_merge_patch_on_builtin_kind(api: APIClient) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}
    await api.post("/api/v1/namespaces/default/pods", pod)
    patch = {"spec": {"containers": [{"name": "b", "image": "z"}]}}
    status, obj, _ = await api.patch("/api/v1/namespaces/default/pods/p", patch,
                                     "application/strategic-merge-patch+json")
    assert status == 200
    assert [(c["name"], c["image"]) for c in obj["spec"]["containers"]] == [("a", "x"), ("b", "z")]


async def test_patch_missing_object_is_404(api: APIClient) -> None:
    status, body, _ = await api.patch(f"{CMS}/nope", {"data": {}})
    assert status == 404 and body["reason"] == "NotFound"


async def test_patch_cannot_rename(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    status, _, _ = await api.patch(f"{CMS}/a", {"metadata": {"name": "b"}})
    assert status == 400


def test_json_patch_rfc6902_operations() -> None:
    doc = {"a": [1, 2], "b": {"c": 1}, "d~/e": 0}
    out = apply_json_patch(doc, [
        {"op": "add", "path": "/a/1", "value": 9},
        {"op": "add", "path": "/a/-", "value": 3},
        {"op": "move", "from": "/b/c", "path": "/moved"},
        {"op": "copy", "from": "/a/0", "path": "/copied"},
        {"op": "remove", "path": "/d~0~1e"},
        {"op": "test", "path": "/a", "value": [1, 9, 2, 3]},
    ])
    assert out == {"a": [1, 9, 2, 3], "b": {}, "moved": 1, "copied": 1}
    assert doc == {"a": [1, 2], "b": {"c": 1}, "d~/e": 0}  # the input is untouched
    with pytest.raises(PatchError):
        apply_json_patch(doc, [{"op": "replace", "path": "/missing", "value": 1}])
    with pytest.raises(PatchError):
        apply_json_patch(doc, [{"op": "add", "path": "/a/5", "value": 1}])
    with pytest.raises(PatchFormatError):
        apply_json_patch(doc, [{"op": "frobnicate", "path": "/a"}])
    with pytest.raises(PatchFormatError):
        apply_json_patch(doc, {"op": "add"})


def test_merge_patch_rfc7386_examples() -> None:
    assert apply_merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert apply_merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert apply_merge_patch({"a": "b"}, {"a": None}) == {}
    assert apply_merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert apply_merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert apply_merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}
    assert apply_merge_patch({"a": "foo"}, "bar") == "bar"


def test_merged_is_rfc7386_and_shares_what_the_patch_left_alone() -> None:
    for doc, patch in [({"a": "b"}, {"a": "c"}), ({"a": "b"}, {"b": "c"}), ({"a": "b"}, {"a": None}),
                       ({"a": [{"b": "c"}]}, {"a": [1]}), ({"e": None}, {"a": 1}),
                       ({}, {"a": {"bb": {"ccc": None}}}), ({"a": "foo"}, "bar"),
                       ({"a": {"b": 1, "c": {"d": 2}}}, {"a": {"c": {"e": 3}, "b": None}})]:
        before = orjson.dumps(doc)
        assert merged(doc, patch) == apply_merge_patch(doc, patch)
        assert orjson.dumps(doc) == before  # not changed
    doc = {"spec": {"big": [1, 2]}, "status": {"phase": "A", "conditions": [{"x": 1}]}}
    out = merged(doc, {"status": {"phase": "B"}})
    assert out["spec"] is doc["spec"] and out["status"]["conditions"] is doc["status"]["conditions"]
    assert out["status"] is not doc["status"] and doc["status"]["phase"] == "A"


async def test_merge_patches_of_a_custom_resource_leave_earlier_versions_as_they_were(api: APIClient) -> None:
    """What a patch leaves alone is shared with the version before (never copied): no write may
    change an earlier version, which watches replay from the server's history."""
    body = {**widget("w", size=1, parts=[{"name": "p", "count": 1}]), "status": {"phase": "A"}}
    body["metadata"]["labels"] = {"k": "v"}
    _, created, _ = await api.post(WIDGETS, body)
    answers = [created]
    for path, patch in [("w/status", {"status": {"phase": "B", "conditions": [{"type": "x"}]}}),
                        ("w", {"metadata": {"labels": {"j": "w"}}, "spec": {"size": 2}}),
                        ("w/status", {"status": {"phase": None}}),
                        ("w", {"spec": {"parts": None}})]:
        status, obj, _ = await api.patch(f"{WIDGETS}/{path}", patch)
        assert status == 200
        answers.append(obj)
    assert answers[2]["metadata"]["labels"] == {"k": "v", "j": "w"} and answers[2]["spec"]["size"] == 2
    assert answers[2]["status"] == {"phase": "B", "conditions": [{"type": "x"}]}
    assert answers[3]["status"] == {"conditions": [{"type": "x"}]} and answers[4]["spec"] == {"size": 2}
    events = await api.watch(WIDGETS, {"resourceVersion": created["metadata"]["resourceVersion"]},
                             until=lambda e: len(e) >= 4)
    assert [e["object"] for e in events] == answers[1:]
