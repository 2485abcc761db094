"""Label and field selectors on lists, and limit/continue paging."""

from __future__ import annotations

import pytest

from koordqueue.apiserver.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
    selector_from_object,
)
from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.testing import APIClient

from .conftest import configmap

CMS = "/api/v1/namespaces/default/configmaps"


async def _names(api: APIClient, path: str, **params: str) -> list[str]:
    status, lst, _ = await api.get(path, params=params)
    assert status == 200, lst
    return [i["metadata"]["name"] for i in lst["items"]]


async def test_label_selectors(api: APIClient) -> None:
    await api.post(CMS, configmap("a", labels={"env": "prod", "tier": "web"}))
    await api.post(CMS, configmap("b", labels={"env": "dev"}))
    await api.post(CMS, configmap("c"))
    cases = {
        "env=prod": ["a"], "env==prod": ["a"], "env!=prod": ["b", "c"], "env in (prod,dev)": ["a", "b"],
        "env notin (prod)": ["b", "c"], "env": ["a", "b"], "!env": ["c"], "env,tier=web": ["a"],
        "env in (dev), !tier": ["b"],
    }
    for selector, expected in cases.items():
        assert await _names(api, CMS, labelSelector=selector) == expected, selector


async def test_field_selectors(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    await api.post(CMS, configmap("b"))
    assert await _names(api, CMS, fieldSelector="metadata.name=b") == ["b"]
    assert await _names(api, CMS, fieldSelector="metadata.name!=b") == ["a"]
    assert await _names(api, "/api/v1/configmaps", fieldSelector="metadata.namespace=default") == ["a", "b"]
    pods = "/api/v1/namespaces/default/pods"
    for name in ("p1", "p2"):
        await api.post(pods, {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    await api.post(f"{pods}/p1/binding", {"target": {"kind": "Node", "name": "n1"}})
    assert await _names(api, pods, fieldSelector="spec.nodeName=n1") == ["p1"]
    assert await _names(api, pods, fieldSelector="spec.nodeName=") == ["p2"]
    _, p2, _ = await api.get(f"{pods}/p2")
    p2["status"] = {"phase": "Running"}
    await api.put(f"{pods}/p2/status", p2)
    assert await _names(api, pods, fieldSelector="status.phase=Running") == ["p2"]
    assert await _names(api, pods, fieldSelector="status.phase!=Running,spec.nodeName=n1") == ["p1"]


async def test_event_field_selectors(api: APIClient) -> None:
    events = "/api/v1/namespaces/default/events"
    for name, target in (("e1", "job-a"), ("e2", "job-b")):
        await api.post(events, {"metadata": {"name": name}, "reason": "Started", "type": "Normal",
                                "involvedObject": {"kind": "Job", "namespace": "default", "name": target}})
    assert await _names(api, events, fieldSelector="involvedObject.name=job-b") == ["e2"]
    assert await _names(api, events, fieldSelector="involvedObject.kind=Job,reason=Started") == ["e1", "e2"]


async def test_custom_resource_supports_name_and_namespace_fields_only(api: APIClient) -> None:
    status, body, _ = await api.get("/apis/example.com/v1/widgets", params={"fieldSelector": "spec.size=1"})
    assert status == 400 and body["message"] == "field label not supported: spec.size"


async def test_limit_and_continue(api: APIClient) -> None:
    for i in range(7):
        await api.post(CMS, configmap(f"cm{i}"))
    seen: list[str] = []
    token = ""
    pages = 0
    first_rv = None
    while True:
        params = {"limit": "3", **({"continue": token} if token else {})}
        _, lst, _ = await api.get(CMS, params=params)
        pages += 1
        first_rv = first_rv or lst["metadata"]["resourceVersion"]
        assert lst["metadata"]["resourceVersion"] == first_rv  # one snapshot version for all pages
        seen += [i["metadata"]["name"] for i in lst["items"]]
        token = lst["metadata"].get("continue", "")
        if not token:
            break
        assert lst["metadata"]["remainingItemCount"] == 7 - len(seen)
        await api.post(CMS, configmap(f"late{pages}"))  # later pages still show the first page's snapshot
        await api.delete(f"{CMS}/cm6")
    assert pages >= 3
    assert seen == [f"cm{i}" for i in range(7)]


async def test_later_pages_show_objects_as_they_were_when_the_list_began(api: APIClient) -> None:
    for i in range(5):
        await api.post(CMS, configmap(f"cm{i}"))
    _, first, _ = await api.get(CMS, params={"limit": "2"})
    before = {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in (await api.get(CMS))[1]["items"]}
    await api.patch(f"{CMS}/cm3", {"data": {"changed": "yes"}}, content_type="application/merge-patch+json")
    await api.delete(f"{CMS}/cm4")
    await api.post(CMS, configmap("cm2a"))  # sorts after the first page: not in that snapshot
    _, rest, _ = await api.get(CMS, params={"limit": "10", "continue": first["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in rest["items"]] == ["cm2", "cm3", "cm4"]
    assert {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in rest["items"]} == \
        {k: before[k] for k in ("cm2", "cm3", "cm4")}
    assert "changed" not in (rest["items"][1].get("data") or {})


async def test_limit_with_selector_counts_matches(api: APIClient) -> None:
    for i in range(6):
        await api.post(CMS, configmap(f"cm{i}", labels={"odd": str(i % 2)}))
    _, lst, _ = await api.get(CMS, params={"limit": "2", "labelSelector": "odd=1"})
    assert [i["metadata"]["name"] for i in lst["items"]] == ["cm1", "cm3"]
    _, rest, _ = await api.get(CMS, params={"limit": "2", "labelSelector": "odd=1",
                                            "continue": lst["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in rest["items"]] == ["cm5"] and "continue" not in rest["metadata"]


async def test_continue_after_compaction_is_410(apiserver: APIServer, api: APIClient) -> None:
    for i in range(3):
        await api.post(CMS, configmap(f"cm{i}"))
    _, lst, _ = await api.get(CMS, params={"limit": "1"})
    await api.post(CMS, configmap("later"))
    apiserver.controls.compact()
    status, body, _ = await api.get(CMS, params={"limit": "1", "continue": lst["metadata"]["continue"]})
    assert status == 410 and body["reason"] == "Expired"


def test_label_selector_grammar() -> None:
    sel = parse_label_selector("a=1, b!=2,c in (x, y),d notin (z),e,!f,g>3")
    labels = {"a": "1", "b": "3", "c": "y", "e": "", "g": "4"}
    assert sel.matches(labels)
    assert not sel.matches({**labels, "f": "x"})
    assert not sel.matches({**labels, "g": "2"})
    assert parse_label_selector("").matches({})
    for bad in ("a in (b", "=x", "a=b,", "a b", "a in ()", "!", "a>x"):
        with pytest.raises(SelectorError):
            parse_label_selector(bad)


def test_field_selector_grammar() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b,spec.x!=y")
    fields = {"metadata.name": "a,b", "spec.x": "z"}
    assert sel.matches(lambda f: fields.get(f, ""))
    with pytest.raises(SelectorError):
        parse_field_selector("nonsense")


def test_label_selector_objects() -> None:
    sel = selector_from_object({"matchLabels": {"a": "1"},
                                "matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]})
    assert sel is not None and sel.matches({"a": "1"}) and not sel.matches({"a": "1", "b": "x"})
    assert selector_from_object({"matchExpressions": [{"key": "b", "operator": "Bogus"}]}) is None
    everything = selector_from_object(None)
    assert everything is not None and everything.matches({"any": "thing"})
