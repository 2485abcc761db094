"""The Python client the controller uses (KubeClient), against the embedded server: what issue 3 asks
of it beyond the basics in tests/kube: conflict retry by read-modify-write, the status subresource of
a custom resource, and list-then-watch without a gap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from koordqueue.apiserver.server import APIServer
from koordqueue.kube.client import KubeClient, Resource, RetryPolicy
from koordqueue.kube.config import load_config
from koordqueue.kube.errors import Conflict

from .conftest import configmap, widget

CONFIGMAPS = Resource("", "v1", "configmaps")
WIDGETS = Resource("example.com", "v1", "widgets")
FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02)


@pytest.fixture
async def client(apiserver: APIServer) -> AsyncIterator[KubeClient]:
    async with KubeClient(load_config(str(apiserver.kubeconfig_path)), qps=0, retry=FAST) as kube:
        yield kube


async def increment(client: KubeClient, name: str, conflicts: list[int]) -> None:
    """Read, add one, write back with the resourceVersion read; on 409 Conflict read again."""
    while True:
        current = await client.get(CONFIGMAPS, name, namespace="default")
        current["data"]["count"] = str(int(current["data"]["count"]) + 1)
        try:
            await client.replace(CONFIGMAPS, current)
            return
        except Conflict:
            conflicts.append(1)


async def test_concurrent_read_modify_write_loses_no_update(client: KubeClient) -> None:
    await client.create(CONFIGMAPS, configmap("counter", count="0"), namespace="default")
    conflicts: list[int] = []
    writers, each = 8, 5

    async def writer() -> None:
        for _ in range(each):
            await increment(client, "counter", conflicts)

    await asyncio.gather(*(writer() for _ in range(writers)))
    final = await client.get(CONFIGMAPS, "counter", namespace="default")
    assert final["data"]["count"] == str(writers * each)
    assert conflicts, "eight writers at once never collided: the test did not exercise a conflict"


async def test_an_injected_conflict_is_raised_not_retried_and_a_reread_succeeds(
        apiserver: APIServer, client: KubeClient) -> None:
    await client.create(CONFIGMAPS, configmap("c", count="0"), namespace="default")
    apiserver.controls.inject_errors(409, verbs={"update"}, count=2)
    before = client.request_count["update"]
    conflicts: list[int] = []
    await increment(client, "c", conflicts)
    assert len(conflicts) == 2  # each 409 reached the caller: the client does not repeat a conflicting write
    assert client.request_count["update"] - before == 3
    assert (await client.get(CONFIGMAPS, "c", namespace="default"))["data"]["count"] == "1"


async def test_status_subresource_of_a_custom_resource(client: KubeClient) -> None:
    created = await client.create(WIDGETS, widget("w", size=1), namespace="default")
    generation = created["metadata"]["generation"]

    # patch_status writes status, and nothing else it carries
    patched = await client.patch_status(WIDGETS, "w", {"status": {"phase": "Ready"}, "spec": {"size": 9},
                                                       "metadata": {"labels": {"sneaky": "yes"}}},
                                        namespace="default")
    assert patched["status"] == {"phase": "Ready"}
    assert patched["spec"] == {"size": 1} and "labels" not in patched["metadata"]
    assert patched["metadata"]["generation"] == generation  # a status write is no spec change

    # replace_status likewise; a stale resourceVersion there is a Conflict too
    current = await client.get(WIDGETS, "w", namespace="default")
    stale = dict(current, metadata=dict(current["metadata"]))
    current["status"] = {"phase": "Done"}
    current["spec"] = {"size": 7}
    replaced = await client.replace_status(WIDGETS, current)
    assert replaced["status"] == {"phase": "Done"} and replaced["spec"] == {"size": 1}
    stale["status"] = {"phase": "Old"}
    with pytest.raises(Conflict):
        await client.replace_status(WIDGETS, stale)

    # and a write to the object itself leaves status alone, while its spec change bumps generation
    main = await client.patch(WIDGETS, "w", {"spec": {"size": 2}, "status": {"phase": "Bogus"}}, namespace="default")
    assert main["status"] == {"phase": "Done"} and main["spec"] == {"size": 2}
    assert main["metadata"]["generation"] == generation + 1


async def test_list_then_watch_from_the_list_version_misses_nothing(client: KubeClient) -> None:
    for i in range(3):
        await client.create(CONFIGMAPS, configmap(f"l{i}"), namespace="default")
    listed = await client.list(CONFIGMAPS, namespace="default")
    assert sorted(o["metadata"]["name"] for o in listed.items) == ["l0", "l1", "l2"]
    # changes made between the list and the watch are delivered by the watch, in order
    await client.patch(CONFIGMAPS, "l0", {"data": {"x": "1"}}, namespace="default")
    await client.delete(CONFIGMAPS, "l1", namespace="default")
    await client.create(CONFIGMAPS, configmap("l3"), namespace="default")
    seen: list[tuple[str, str]] = []

    async def follow() -> None:
        async for kind, obj in client.watch(CONFIGMAPS, namespace="default",
                                            resource_version=listed.resource_version, allow_bookmarks=False):
            seen.append((kind, obj["metadata"]["name"]))
            if len(seen) == 3:
                return

    await asyncio.wait_for(follow(), 5)
    assert seen == [("MODIFIED", "l0"), ("DELETED", "l1"), ("ADDED", "l3")]
