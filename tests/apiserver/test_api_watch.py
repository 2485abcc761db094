"""Watch: events from a resourceVersion, initial state, bookmarks, timeouts, 410 after compaction, selectors."""

from __future__ import annotations

import asyncio

import orjson

from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.testing import APIClient, eventually

from .conftest import configmap

CMS = "/api/v1/namespaces/default/configmaps"


def names(events: list[dict]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"]["name"]) for e in events]


async def test_watch_from_resource_version_replays_changes(api: APIClient) -> None:
    _, a, _ = await api.post(CMS, configmap("a"))
    rv = a["metadata"]["resourceVersion"]
    await api.post(CMS, configmap("b"))
    await api.patch(f"{CMS}/a", {"data": {"x": "1"}})
    await api.delete(f"{CMS}/b")
    events = await api.watch(CMS, {"resourceVersion": rv}, until=lambda ev: len(ev) == 3)
    assert names(events) == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    assert events[1]["object"]["data"] == {"x": "1"}


async def test_watch_without_version_starts_with_current_state(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    for rv in ("", "0"):
        _, lst, _ = await api.get(CMS)
        stream = await api.open_watch(CMS, {"resourceVersion": rv} if rv else None)
        initial = [await stream.next() for _ in lst["items"]]
        assert names(initial) == [("ADDED", i["metadata"]["name"]) for i in lst["items"]]  # type: ignore[arg-type]
        await api.post(CMS, configmap(f"new{rv}"))
        event = await stream.next()
        assert event is not None and (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", f"new{rv}")
        await stream.close()


async def test_live_events_and_other_resources_not_mixed(api: APIClient) -> None:
    _, lst, _ = await api.get(CMS)
    stream = await api.open_watch(CMS, {"resourceVersion": lst["metadata"]["resourceVersion"]})
    await api.post("/api/v1/namespaces/default/secrets", {"metadata": {"name": "s"}})
    await api.post(CMS, configmap("a"))
    event = await stream.next()
    assert event is not None and (event["type"], event["object"]["kind"]) == ("ADDED", "ConfigMap")
    await stream.close()


async def test_bookmarks(apiserver: APIServer, api: APIClient) -> None:
    apiserver.controls.bookmark_interval = 0.1
    _, lst, _ = await api.get(CMS)
    events = await api.watch(CMS, {"resourceVersion": lst["metadata"]["resourceVersion"],
                                   "allowWatchBookmarks": "true"}, until=lambda ev: len(ev) >= 2)
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]
    assert events[0]["object"]["kind"] == "ConfigMap"
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) >= int(lst["metadata"]["resourceVersion"])


async def test_no_bookmarks_unless_asked(apiserver: APIServer, api: APIClient) -> None:
    apiserver.controls.bookmark_interval = 0.05
    _, lst, _ = await api.get(CMS)
    events = await api.watch(CMS, {"resourceVersion": lst["metadata"]["resourceVersion"], "timeoutSeconds": "1"})
    assert events == []


async def test_timeout_seconds_ends_the_stream(api: APIClient) -> None:
    _, lst, _ = await api.get(CMS)
    loop = asyncio.get_running_loop()
    start = loop.time()
    events = await api.watch(CMS, {"resourceVersion": lst["metadata"]["resourceVersion"], "timeoutSeconds": "1"})
    elapsed = loop.time() - start
    assert events == [] and 0.9 <= elapsed < 3


async def test_watch_after_compaction_is_410_error_event(apiserver: APIServer, api: APIClient) -> None:
    _, a, _ = await api.post(CMS, configmap("a"))
    await api.post(CMS, configmap("b"))
    apiserver.controls.compact()
    events = await api.watch(CMS, {"resourceVersion": a["metadata"]["resourceVersion"]})
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
    assert status["message"].startswith("too old resource version")
    # from the current version it works again
    _, lst, _ = await api.get(CMS)
    stream = await api.open_watch(CMS, {"resourceVersion": lst["metadata"]["resourceVersion"]})
    await api.post(CMS, configmap("c"))
    event = await stream.next()
    assert event is not None and event["type"] == "ADDED"
    await stream.close()


async def test_label_selector_on_watch_turns_leaving_into_deleted(api: APIClient) -> None:
    _, lst, _ = await api.get(CMS)
    rv = lst["metadata"]["resourceVersion"]
    await api.post(CMS, configmap("a", labels={"team": "x"}))
    await api.post(CMS, configmap("b", labels={"team": "y"}))
    await api.patch(f"{CMS}/b", {"metadata": {"labels": {"team": "x"}}})  # enters the selection
    await api.patch(f"{CMS}/a", {"metadata": {"labels": {"team": "z"}}})  # leaves it
    events = await api.watch(CMS, {"resourceVersion": rv, "labelSelector": "team=x"},
                             until=lambda ev: len(ev) == 3)
    assert names(events) == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]


async def test_field_selector_on_watch(api: APIClient) -> None:
    _, lst, _ = await api.get("/api/v1/pods")
    rv = lst["metadata"]["resourceVersion"]
    for name in ("p1", "p2"):
        await api.post("/api/v1/namespaces/default/pods", {
            "metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    await api.post("/api/v1/namespaces/default/pods/p2/binding", {"target": {"kind": "Node", "name": "n1"}})
    events = await api.watch("/api/v1/pods", {"resourceVersion": rv, "fieldSelector": "spec.nodeName=n1"},
                             until=lambda ev: len(ev) == 1)
    assert names(events) == [("ADDED", "p2")]


async def test_watch_in_namespace_sees_only_that_namespace(api: APIClient) -> None:
    await api.post("/api/v1/namespaces", {"metadata": {"name": "other"}})
    _, lst, _ = await api.get(CMS)
    stream = await api.open_watch(CMS, {"resourceVersion": lst["metadata"]["resourceVersion"]})
    await api.post("/api/v1/namespaces/other/configmaps", configmap("elsewhere"))
    await api.post(CMS, configmap("here"))
    event = await stream.next()
    assert event is not None and event["object"]["metadata"]["name"] == "here"
    await stream.close()


async def test_table_watch(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    async with api._session.get(  # type: ignore[union-attr]
        api.server.url + CMS, params={"watch": "1", "timeoutSeconds": "1"},
        headers={"Authorization": f"Bearer {api.token}", "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    ) as resp:
        lines = [line async for line in resp.content if line.strip()]
    event = orjson.loads(lines[0])
    assert event["type"] == "ADDED" and event["object"]["kind"] == "Table"
    assert event["object"]["rows"][0]["cells"][0] == "a"


async def test_watch_ends_when_the_client_goes(apiserver: APIServer, api: APIClient) -> None:
    stream = await api.open_watch(CMS)
    await asyncio.sleep(0.05)
    _, state, _ = await api.get("/_test/state")
    assert state["watches"] == 1
    await stream.close()

    async def closed() -> bool:
        return (await api.get("/_test/state"))[1]["watches"] == 0

    await eventually(closed)
