"""KubeClient against the embedded API server over HTTP: CRUD, paging, watch, retries."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest

from koordqueue.kube.client import KubeClient, PatchType, Resource, RetryPolicy
from koordqueue.kube.config import ClusterConfig, StaticToken, load_config
from koordqueue.kube.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Gone,
    KubeError,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
)

if TYPE_CHECKING:
    from koordqueue.apiserver.server import APIServer

CONFIGMAPS = Resource("", "v1", "configmaps")
NODES = Resource("", "v1", "nodes", namespaced=False)


def configmap(name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}


async def test_create_get_replace_patch_delete(client: KubeClient) -> None:
    created = await client.create(CONFIGMAPS, configmap("a", {"k": "1"}))
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    got = await client.get(CONFIGMAPS, "a", namespace="default")
    assert got["data"] == {"k": "1"}

    got["data"]["k"] = "2"
    replaced = await client.replace(CONFIGMAPS, got)
    assert replaced["data"] == {"k": "2"}
    assert replaced["metadata"]["resourceVersion"] != got["metadata"]["resourceVersion"]

    merged = await client.patch(CONFIGMAPS, "a", {"data": {"m": "x"}}, namespace="default")
    assert merged["data"] == {"k": "2", "m": "x"}
    patched = await client.patch(CONFIGMAPS, "a", [{"op": "remove", "path": "/data/k"}], namespace="default",
                                 patch_type=PatchType.JSON)
    assert patched["data"] == {"m": "x"}
    strategic = await client.patch(CONFIGMAPS, "a", {"data": {"s": "y"}}, namespace="default",
                                   patch_type=PatchType.STRATEGIC)
    assert strategic["data"] == {"m": "x", "s": "y"}

    await client.delete(CONFIGMAPS, "a", namespace="default")
    with pytest.raises(NotFound) as info:
        await client.get(CONFIGMAPS, "a", namespace="default")
    assert info.value.status == 404 and not info.value.after_retry
    with pytest.raises(NotFound):
        await client.delete(CONFIGMAPS, "a", namespace="default")
    assert client.request_count["create"] == 1 and client.request_count["patch"] == 3


async def test_a_name_that_needs_quoting_reaches_the_server_as_typed(client: KubeClient) -> None:
    """Plain paths are sent as they are; any other (a name typed by hand) is quoted, not mangled."""
    for name in ("a b", "ünï"):
        with pytest.raises(NotFound) as info:
            await client.get(CONFIGMAPS, name, namespace="default")
        assert name in str(info.value), name
    await client.create(CONFIGMAPS, configmap("plain-name.v1"))
    assert (await client.get(CONFIGMAPS, "plain-name.v1", namespace="default"))["metadata"]["name"] == "plain-name.v1"


async def test_a_stale_update_is_a_conflict(client: KubeClient) -> None:
    await client.create(CONFIGMAPS, configmap("c", {"v": "0"}))
    first = await client.get(CONFIGMAPS, "c", namespace="default")
    second = await client.get(CONFIGMAPS, "c", namespace="default")
    first["data"]["v"] = "first"
    await client.replace(CONFIGMAPS, first)
    second["data"]["v"] = "second"
    with pytest.raises(Conflict) as info:
        await client.replace(CONFIGMAPS, second)
    assert info.value.status == 409 and info.value.reason == "Conflict"
    assert (await client.get(CONFIGMAPS, "c", namespace="default"))["data"]["v"] == "first"


async def test_creating_an_existing_name_is_already_exists(client: KubeClient) -> None:
    await client.create(CONFIGMAPS, configmap("dup"))
    with pytest.raises(AlreadyExists) as info:
        await client.create(CONFIGMAPS, configmap("dup"))
    assert not info.value.after_retry  # nothing was retried: really someone else's object
    assert not isinstance(info.value, Conflict)


async def test_delete_with_preconditions_and_propagation(client: KubeClient) -> None:
    cm = await client.create(CONFIGMAPS, configmap("p"))
    with pytest.raises(Conflict):
        await client.delete(CONFIGMAPS, "p", namespace="default", preconditions={"uid": "not-the-uid"})
    await client.delete(CONFIGMAPS, "p", namespace="default", propagation_policy="Background",
                        preconditions={"uid": cm["metadata"]["uid"]})
    with pytest.raises(NotFound):
        await client.get(CONFIGMAPS, "p", namespace="default")


async def test_status_subresource_on_a_cluster_scoped_kind(client: KubeClient) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {"unschedulable": False}}
    await client.create(NODES, node)
    patched = await client.patch_status(NODES, "n1", {"status": {"allocatable": {"cpu": "8"}}})
    assert patched["status"]["allocatable"] == {"cpu": "8"}
    current = await client.get(NODES, "n1")
    current["status"]["allocatable"]["cpu"] = "16"
    current["spec"]["unschedulable"] = True  # ignored by /status
    replaced = await client.replace_status(NODES, current)
    assert replaced["status"]["allocatable"] == {"cpu": "16"}
    assert replaced["spec"]["unschedulable"] is False


async def test_list_pages_and_selectors(client: KubeClient) -> None:
    for i in range(25):
        await client.create(CONFIGMAPS, configmap(f"cm-{i:02}", labels={"team": "a" if i % 5 else "b"}))
    page = await client.list(CONFIGMAPS, namespace="default", limit=10)
    assert len(page.items) == 10 and page.continue_token and page.resource_version
    rest = await client.list(CONFIGMAPS, namespace="default", limit=100, continue_token=page.continue_token)
    assert rest.continue_token is None
    names = [o["metadata"]["name"] for o in page.items + rest.items]
    assert sorted(names) == [f"cm-{i:02}" for i in range(25)] and len(set(names)) == 25

    everything = await client.list_all(CONFIGMAPS, namespace="default", page_size=4)
    assert len(everything.items) == 25 and everything.continue_token is None
    assert client.request_count["list"] == 2 + 7
    team_b = await client.list(CONFIGMAPS, label_selector="team=b")  # all namespaces
    assert sorted(o["metadata"]["name"] for o in team_b.items) == ["cm-00", "cm-05", "cm-10", "cm-15", "cm-20"]
    one = await client.list(CONFIGMAPS, namespace="default", field_selector="metadata.name=cm-07")
    assert [o["metadata"]["name"] for o in one.items] == ["cm-07"]


async def test_watch_streams_changes_in_order_from_a_resource_version(client: KubeClient) -> None:
    start = await client.list(CONFIGMAPS, namespace="default")
    events: list[tuple[str, str, dict[str, str]]] = []

    async def collect() -> None:
        async for kind, obj in client.watch(CONFIGMAPS, namespace="default", resource_version=start.resource_version,
                                            allow_bookmarks=False):
            events.append((kind, obj["metadata"]["name"], obj.get("data") or {}))
            if kind == "DELETED":
                return

    watcher = asyncio.create_task(collect())
    await client.create(CONFIGMAPS, configmap("w", {"n": "1"}))
    await client.patch(CONFIGMAPS, "w", {"data": {"n": "2"}}, namespace="default")
    await client.delete(CONFIGMAPS, "w", namespace="default")
    await asyncio.wait_for(watcher, 5)
    assert events == [("ADDED", "w", {"n": "1"}), ("MODIFIED", "w", {"n": "2"}), ("DELETED", "w", {"n": "2"})]


async def test_watch_sends_bookmarks_and_ends_at_its_timeout(server: APIServer, client: KubeClient) -> None:
    server.controls.bookmark_interval = 0.1
    start = await client.list(CONFIGMAPS, namespace="default")
    kinds = []
    began = time.monotonic()
    async for kind, obj in client.watch(CONFIGMAPS, namespace="default", resource_version=start.resource_version,
                                        timeout_seconds=1):
        kinds.append(kind)
        assert obj["metadata"]["resourceVersion"]
    assert "BOOKMARK" in kinds
    assert 0.9 <= time.monotonic() - began < 5  # the server ended it; the iterator simply stops


async def test_watch_from_a_compacted_version_raises_gone(server: APIServer, client: KubeClient) -> None:
    old = (await client.create(CONFIGMAPS, configmap("g")))["metadata"]["resourceVersion"]
    await client.patch(CONFIGMAPS, "g", {"data": {"x": "1"}}, namespace="default")
    server.controls.compact()
    with pytest.raises(Gone) as info:
        async for _ in client.watch(CONFIGMAPS, namespace="default", resource_version=old):
            pass
    assert info.value.status == 410


async def test_a_dropped_watch_ends_the_iterator(server: APIServer, client: KubeClient) -> None:
    start = await client.list(CONFIGMAPS, namespace="default")

    async def consume() -> str:
        try:
            async for _ in client.watch(CONFIGMAPS, namespace="default", resource_version=start.resource_version):
                pass
        except KubeError as e:  # a broken connection is ConnectionFailed; a clean close just ends
            return type(e).__name__
        return "ended"

    task = asyncio.create_task(consume())
    while server.controls.drop_watches() == 0:
        await asyncio.sleep(0.01)
    assert await asyncio.wait_for(task, 5) in ("ended", "ConnectionFailed")


# --- retries ----------------------------------------------------------------------------


async def test_server_errors_on_reads_are_retried(server: APIServer, client: KubeClient) -> None:
    await client.create(CONFIGMAPS, configmap("r"))
    server.controls.inject_errors(500, verbs={"get"}, count=2)
    got = await client.get(CONFIGMAPS, "r", namespace="default")
    assert got["metadata"]["name"] == "r"
    assert client.request_count["get"] == 3


async def test_too_many_requests_honours_retry_after(server: APIServer, client: KubeClient) -> None:
    server.controls.inject_errors(429, verbs={"list"}, count=1, retry_after=1)
    began = time.monotonic()
    await client.list(CONFIGMAPS, namespace="default")
    assert time.monotonic() - began >= 0.95  # our own backoff would have been ~0.01 s
    assert client.request_count["list"] == 2


async def test_persistent_errors_end_in_the_error_after_all_attempts(server: APIServer, client: KubeClient) -> None:
    server.controls.inject_errors(500, verbs={"get"})
    with pytest.raises(ServerError) as info:
        await client.get(CONFIGMAPS, "x", namespace="default")
    assert info.value.status == 500
    assert client.request_count["get"] == client.retry.attempts


async def test_persistent_429_ends_in_too_many_requests(server: APIServer, client: KubeClient) -> None:
    server.controls.inject_errors(429, verbs={"get"}, retry_after=0)
    with pytest.raises(TooManyRequests):
        await client.get(CONFIGMAPS, "x", namespace="default")
    assert client.request_count["get"] == client.retry.attempts


async def test_a_create_with_a_name_is_retried_through_server_errors(server: APIServer, client: KubeClient) -> None:
    server.controls.inject_errors(500, verbs={"create"}, count=2)
    created = await client.create(CONFIGMAPS, configmap("named"))
    assert created["metadata"]["name"] == "named"
    assert client.request_count["create"] == 3


async def test_unsafe_requests_are_not_repeated_after_a_server_error(server: APIServer, client: KubeClient) -> None:
    await client.create(CONFIGMAPS, configmap("j", {"a": "1"}))
    server.controls.inject_errors(500, verbs={"create", "patch"}, count=2)
    generated = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-", "namespace": "default"}}
    with pytest.raises(ServerError) as info:
        await client.create(CONFIGMAPS, generated)
    assert not info.value.after_retry
    with pytest.raises(ServerError):
        await client.patch(CONFIGMAPS, "j", [{"op": "add", "path": "/data/b", "value": "2"}], namespace="default",
                           patch_type=PatchType.JSON)
    assert client.request_count["create"] == 2 and client.request_count["patch"] == 1


async def test_a_429_is_retried_even_for_unsafe_requests(server: APIServer, client: KubeClient) -> None:
    server.controls.inject_errors(429, verbs={"create"}, count=1, retry_after=0)
    generated = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-", "namespace": "default"}}
    created = await client.create(CONFIGMAPS, generated)
    assert created["metadata"]["name"].startswith("gen-")
    assert client.request_count["create"] == 2


async def test_a_retried_write_that_ends_in_conflict_is_flagged(server: APIServer, client: KubeClient) -> None:
    cm = await client.create(CONFIGMAPS, configmap("f"))
    server.controls.inject_errors(500, verbs={"update"}, count=1)
    server.controls.inject_errors(409, verbs={"update"}, count=1)
    with pytest.raises(Conflict) as info:
        await client.replace(CONFIGMAPS, cm)
    assert info.value.after_retry  # the first attempt's fate is unknown


async def test_a_bad_token_is_unauthorized(server: APIServer) -> None:
    good = load_config(str(server.kubeconfig_path))
    bad = ClusterConfig(server=good.server, ssl_context=good.ssl_context, credentials=StaticToken("wrong"),
                        tls_server_name=good.tls_server_name)
    async with KubeClient(bad, qps=0) as c:
        with pytest.raises(Unauthorized) as info:
            await c.get(CONFIGMAPS, "x", namespace="default")
        assert info.value.status == 401
        assert c.request_count["get"] == 2  # one retry after reloading the credentials


async def test_an_unreachable_server_is_connection_failed() -> None:
    cfg = ClusterConfig(server="http://127.0.0.1:9", ssl_context=None, credentials=StaticToken("t"))
    async with KubeClient(cfg, qps=0, retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.01)) as c:
        with pytest.raises(KubeError) as info:
            await c.get(CONFIGMAPS, "x", namespace="default")
        assert not isinstance(info.value, ApiError)
        assert c.request_count["get"] == 3


async def test_qps_and_burst_pace_requests(server: APIServer) -> None:
    async with KubeClient(load_config(str(server.kubeconfig_path)), qps=20, burst=2) as c:
        began = time.monotonic()
        await asyncio.gather(*(c.list(CONFIGMAPS, namespace="default") for _ in range(6)))
        assert time.monotonic() - began >= 4 / 20 * 0.9  # 2 at once, then 4 at 20/s
