"""EventRecorder against the embedded API server: content, de-duplication, failures."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest

from koordqueue.api.constants import EventReason, EventType
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.events import EVENTS, EventRecorder, ObjectRef

if TYPE_CHECKING:
    from koordqueue.apiserver.server import APIServer

CONFIGMAPS = Resource("", "v1", "configmaps")


async def subject(client: KubeClient, name: str = "job-1") -> dict[str, Any]:
    return await client.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                            "metadata": {"name": name, "namespace": "default"}})


async def events_about(client: KubeClient, name: str) -> list[dict[str, Any]]:
    listed = await client.list(EVENTS, namespace="default", field_selector=f"involvedObject.name={name}")
    return sorted(listed.items, key=lambda e: e["metadata"]["name"])


async def test_an_event_says_what_happened_to_which_object(client: KubeClient) -> None:
    obj = await subject(client)
    recorder = EventRecorder(client, "koord-queue", host="node-a")
    await recorder.record(obj, EventType.NORMAL, EventReason.ENQUEUED, "waiting in queue q1")
    [event] = await events_about(client, "job-1")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "ConfigMap", "name": "job-1",
                                       "namespace": "default", "uid": obj["metadata"]["uid"]}
    assert (event["type"], event["reason"], event["message"]) == ("Normal", "Enqueued", "waiting in queue q1")
    assert event["count"] == 1 and event["firstTimestamp"] == event["lastTimestamp"]
    assert event["source"] == {"component": "koord-queue", "host": "node-a"}


async def test_repeats_bump_the_count_of_one_event(client: KubeClient) -> None:
    obj = await subject(client)
    recorder = EventRecorder(client, "koord-queue")
    for _ in range(3):
        await recorder.record(obj, EventType.WARNING, EventReason.FAILED_SCHEDULING, "quota q: gpu 8 > max 4")
    await recorder.record(obj, EventType.WARNING, EventReason.FAILED_SCHEDULING, "quota q: gpu 8 > max 6")
    events = await events_about(client, "job-1")
    assert sorted((e["message"], e["count"]) for e in events) == [
        ("quota q: gpu 8 > max 4", 3), ("quota q: gpu 8 > max 6", 1)]
    assert client.request_count["create"] == 1 + 2 and client.request_count["patch"] == 2


async def test_the_memory_of_written_events_is_bounded(client: KubeClient) -> None:
    recorder = EventRecorder(client, "koord-queue", cache_size=2)
    ref = ObjectRef("v1", "ConfigMap", "job-1", "default", "uid-1")
    for message in ("a", "b", "c", "a"):  # "a" was forgotten when "c" came
        await recorder.record(ref, EventType.NORMAL, EventReason.ENQUEUED, message)
    events = await events_about(client, "job-1")
    assert sorted((e["message"], e["count"]) for e in events) == [("a", 1), ("a", 1), ("b", 1), ("c", 1)]


async def test_an_event_deleted_meanwhile_is_written_again(client: KubeClient) -> None:
    recorder = EventRecorder(client, "koord-queue")
    ref = ObjectRef("v1", "ConfigMap", "job-1", "default", "uid-1")
    await recorder.record(ref, EventType.NORMAL, EventReason.DEQUEUED, "admitted")
    [first] = await events_about(client, "job-1")
    await client.delete(EVENTS, first["metadata"]["name"], namespace="default")
    await recorder.record(ref, EventType.NORMAL, EventReason.DEQUEUED, "admitted")
    [again] = await events_about(client, "job-1")
    assert again["count"] == 1 and again["metadata"]["name"] != first["metadata"]["name"]


async def test_failures_are_logged_never_raised(server: APIServer, client: KubeClient,
                                                caplog: pytest.LogCaptureFixture) -> None:
    server.controls.inject_errors(500, resources={"events"})
    recorder = EventRecorder(client, "koord-queue")
    ref = ObjectRef("v1", "ConfigMap", "job-1", "default", "uid-1")
    with caplog.at_level(logging.WARNING, logger="koordqueue.kube.events"):
        await recorder.record(ref, EventType.WARNING, EventReason.INVALID_QUOTA, "min > max")
    assert "not recorded" in caplog.text
    server.controls.clear_errors()
    await recorder.record(ref, EventType.WARNING, EventReason.INVALID_QUOTA, "min > max")
    [event] = await events_about(client, "job-1")
    assert event["count"] == 1
