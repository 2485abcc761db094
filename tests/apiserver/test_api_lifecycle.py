"""Finalizers and deletionTimestamp, ownerReference garbage collection, namespace deletion."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.testing import APIClient, eventually

from .conftest import WIDGETS, configmap, widget

CMS = "/api/v1/namespaces/default/configmaps"


def owned_by(obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj["metadata"]
    return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}]


async def gone(api: APIClient, path: str) -> bool:
    return (await api.get(path))[0] == 404


async def test_finalizer_keeps_object_until_removed(api: APIClient) -> None:
    body = configmap("a")
    body["metadata"]["finalizers"] = ["example.com/keep", "example.com/other"]
    await api.post(CMS, body)
    status, obj, _ = await api.delete(f"{CMS}/a")
    assert status == 200 and obj["metadata"]["deletionTimestamp"]
    _, obj, _ = await api.get(f"{CMS}/a")
    assert obj["metadata"]["deletionTimestamp"] and obj["metadata"]["finalizers"] == [
        "example.com/keep", "example.com/other"]
    # no new finalizers while deleting
    status, body, _ = await api.patch(f"{CMS}/a", {"metadata": {"finalizers": ["example.com/keep", "x.io/new"]}})
    assert status == 422
    _, obj, _ = await api.patch(f"{CMS}/a", {"metadata": {"finalizers": ["example.com/keep"]}})
    assert obj["metadata"]["finalizers"] == ["example.com/keep"]
    assert (await api.get(f"{CMS}/a"))[0] == 200
    ops = [{"op": "remove", "path": "/metadata/finalizers"}]
    status, _, _ = await api.patch(f"{CMS}/a", ops, "application/json-patch+json")
    assert status == 200
    assert await gone(api, f"{CMS}/a")


async def test_deleted_event_when_last_finalizer_goes(api: APIClient) -> None:
    body = configmap("a")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    _, created, _ = await api.post(CMS, body)
    await api.delete(f"{CMS}/a")
    await api.patch(f"{CMS}/a", {"metadata": {"finalizers": None}})
    events = await api.watch(CMS, {"resourceVersion": created["metadata"]["resourceVersion"]},
                             until=lambda ev: len(ev) == 2)
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    assert events[0]["object"]["metadata"]["deletionTimestamp"]


async def test_background_gc_deletes_owned_objects(api: APIClient) -> None:
    _, owner, _ = await api.post(WIDGETS, widget("owner"))
    _, other, _ = await api.post(WIDGETS, widget("other"))
    child = configmap("child")
    child["metadata"]["ownerReferences"] = owned_by(owner)
    await api.post(CMS, child)
    shared = configmap("shared")
    shared["metadata"]["ownerReferences"] = owned_by(owner) + owned_by(other)
    await api.post(CMS, shared)
    await api.delete(f"{WIDGETS}/owner")
    await eventually(lambda: gone(api, f"{CMS}/child"))
    _, kept, _ = await api.get(f"{CMS}/shared")  # still has an owner: only the dangling reference goes
    assert [r["name"] for r in kept["metadata"]["ownerReferences"]] == ["other"]


async def test_gc_cascades_and_removes_orphans_with_missing_owner(api: APIClient) -> None:
    _, top, _ = await api.post(WIDGETS, widget("top"))
    mid = widget("mid")
    mid["metadata"]["ownerReferences"] = owned_by(top)
    _, mid, _ = await api.post(WIDGETS, mid)
    leaf = configmap("leaf")
    leaf["metadata"]["ownerReferences"] = owned_by(mid)
    await api.post(CMS, leaf)
    await api.delete(f"{WIDGETS}/top")
    await eventually(lambda: gone(api, f"{CMS}/leaf"))
    assert await gone(api, f"{WIDGETS}/mid")
    stray = configmap("stray")
    stray["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost",
                                             "uid": "00000000-0000-0000-0000-000000000000"}]
    await api.post(CMS, stray)
    await eventually(lambda: gone(api, f"{CMS}/stray"))


async def test_foreground_deletion_waits_for_dependents(api: APIClient) -> None:
    _, owner, _ = await api.post(WIDGETS, widget("owner"))
    child = configmap("child")
    child["metadata"]["ownerReferences"] = owned_by(owner)
    child["metadata"]["finalizers"] = ["example.com/hold"]
    await api.post(CMS, child)
    status, obj, _ = await api.delete(f"{WIDGETS}/owner", {"propagationPolicy": "Foreground"})
    assert status == 200 and "foregroundDeletion" in obj["metadata"]["finalizers"]

    async def child_deleting() -> bool:
        _, c, _ = await api.get(f"{CMS}/child")
        return bool(c["metadata"].get("deletionTimestamp"))

    await eventually(child_deleting)
    assert (await api.get(f"{WIDGETS}/owner"))[0] == 200  # waits for its dependent
    await api.patch(f"{CMS}/child", {"metadata": {"finalizers": None}})
    await eventually(lambda: gone(api, f"{WIDGETS}/owner"))


async def test_orphan_deletion_keeps_dependents(apiserver: APIServer, api: APIClient) -> None:
    _, owner, _ = await api.post(WIDGETS, widget("owner"))
    child = configmap("child")
    child["metadata"]["ownerReferences"] = owned_by(owner)
    await api.post(CMS, child)
    await api.delete(f"{WIDGETS}/owner", params={"propagationPolicy": "Orphan"})
    await eventually(lambda: gone(api, f"{WIDGETS}/owner"))
    await apiserver.gc.idle()
    _, kept, _ = await api.get(f"{CMS}/child")
    assert "ownerReferences" not in kept["metadata"]


async def test_namespace_deletion_deletes_its_objects(apiserver: APIServer, api: APIClient) -> None:
    await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
    await api.post("/api/v1/namespaces/team/configmaps", configmap("a"))
    held = configmap("held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    await api.post("/api/v1/namespaces/team/configmaps", held)
    await api.post("/apis/example.com/v1/namespaces/team/widgets", widget("w"))
    await api.post(CMS, configmap("outside"))
    status, ns, _ = await api.delete("/api/v1/namespaces/team")
    assert status == 200 and ns["status"]["phase"] == "Terminating"
    status, body, _ = await api.post("/api/v1/namespaces/team/configmaps", configmap("late"))
    assert status == 403 and body["reason"] == "Forbidden" and "being terminated" in body["message"]
    await eventually(lambda: gone(api, "/api/v1/namespaces/team/configmaps/a"))
    assert await gone(api, "/apis/example.com/v1/namespaces/team/widgets/w")
    await apiserver.gc.idle()
    _, ns, _ = await api.get("/api/v1/namespaces/team")
    assert ns["status"]["phase"] == "Terminating"  # waits for the object with a finalizer
    await api.patch("/api/v1/namespaces/team/configmaps/held", {"metadata": {"finalizers": None}})
    await eventually(lambda: gone(api, "/api/v1/namespaces/team"))
    assert (await api.get(f"{CMS}/outside"))[0] == 200


async def test_events_expire_an_hour_after_they_last_happened(apiserver: APIServer, api: APIClient) -> None:
    events = "/api/v1/namespaces/default/events"
    ref = {"kind": "Job", "namespace": "default", "name": "j"}
    await api.post(events, {"metadata": {"name": "once"}, "involvedObject": ref,
                            "lastTimestamp": "2020-01-01T00:00:00Z"})
    await api.post(events, {"metadata": {"name": "repeating"}, "involvedObject": ref,
                            "firstTimestamp": "2020-01-01T00:00:00Z", "lastTimestamp": "2999-01-01T00:00:00Z"})
    assert apiserver.gc.sweep_events() == 0  # both were written just now
    later = datetime.now(UTC) + timedelta(hours=1, minutes=1)
    assert apiserver.gc.sweep_events(now=later) == 1
    _, lst, _ = await api.get(events)
    assert [i["metadata"]["name"] for i in lst["items"]] == ["repeating"]
