"""Test controls: injected 500/429/409, dropped watches, compaction, pause — from Python and over HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from koordqueue.apiserver.controls import Controls
from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.testing import APIClient, running_apiserver
from koordqueue.apiserver.watch import WatchHub

from .conftest import configmap

CMS = "/api/v1/namespaces/default/configmaps"


async def test_inject_500_on_matching_requests_only(apiserver: APIServer, api: APIClient) -> None:
    apiserver.controls.inject_errors(500, verbs={"create"}, resources={"configmaps"})
    status, body, _ = await api.post(CMS, configmap("a"))
    assert status == 500 and body["reason"] == "InternalError"
    assert (await api.get(CMS))[0] == 200  # other verbs pass
    assert (await api.post("/api/v1/namespaces/default/secrets", {"metadata": {"name": "s"}}))[0] == 201
    apiserver.controls.clear_errors()
    assert (await api.post(CMS, configmap("a")))[0] == 201


async def test_inject_429_with_retry_after_a_number_of_times(apiserver: APIServer, api: APIClient) -> None:
    apiserver.controls.inject_errors(429, count=2, retry_after=3)
    for _ in range(2):
        status, body, headers = await api.get(CMS)
        assert status == 429 and headers["Retry-After"] == "3"
        assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 3
    assert (await api.get(CMS))[0] == 200  # the rule retired after two


async def test_inject_409_conflict(apiserver: APIServer, api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    apiserver.controls.inject_errors(409, verbs={"update", "patch"})
    status, body, _ = await api.patch(f"{CMS}/a", {"data": {"x": "1"}})
    assert status == 409 and body["reason"] == "Conflict"
    assert (await api.get(f"{CMS}/a"))[1]["data"] == {}  # nothing was written


async def test_injection_rate_is_a_fraction(tmp_path: Path) -> None:
    async with running_apiserver(tmp_path / "s", crds=[], seed=7) as server, APIClient(server) as api:
        server.controls.inject_errors(500, rate=0.3, verbs={"list"})
        codes = [(await api.get(CMS))[0] for _ in range(200)]
    failures = codes.count(500)
    assert set(codes) == {200, 500} and 30 <= failures <= 90


def test_only_meaningful_injections() -> None:
    controls = Controls(store=None, hub=WatchHub())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        controls.inject_errors(404)
    with pytest.raises(ValueError):
        controls.inject_errors(500, rate=2)


async def test_drop_watches(apiserver: APIServer, api: APIClient) -> None:
    streams = [await api.open_watch(CMS), await api.open_watch("/api/v1/pods")]
    await asyncio.sleep(0.05)
    assert apiserver.controls.drop_watches() == 2
    for stream in streams:
        assert await stream.next() is None
        await stream.close()


async def test_pause_holds_requests_until_resume(apiserver: APIServer, api: APIClient) -> None:
    apiserver.controls.pause()
    pending = asyncio.ensure_future(api.get(CMS))
    await asyncio.sleep(0.2)
    assert not pending.done()
    apiserver.controls.resume()
    status, _, _ = await asyncio.wait_for(pending, 2)
    assert status == 200


async def test_http_endpoints(apiserver: APIServer, api: APIClient) -> None:
    status, _, _ = await api.post("/_test/errors", {"code": 500, "verbs": ["get"], "count": 1})
    assert status == 201
    assert (await api.get(f"{CMS}/x"))[0] == 500
    assert (await api.get(f"{CMS}/x"))[0] == 404
    await api.post("/_test/errors", {"code": 429, "retryAfter": 2})
    assert (await api.get(CMS))[0] == 429
    assert (await api.delete("/_test/errors"))[0] == 200
    assert (await api.get(CMS))[0] == 200
    assert (await api.post("/_test/errors", {"code": 418}))[0] == 400

    _, a, _ = await api.post(CMS, configmap("a"))
    _, state, _ = await api.post("/_test/compact")
    assert int(state["resourceVersion"]) >= int(a["metadata"]["resourceVersion"])
    events = await api.watch(CMS, {"resourceVersion": str(int(a["metadata"]["resourceVersion"]) - 1)})
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410

    stream = await api.open_watch(CMS)
    await stream.next()  # the ADDED of "a": the watch is open
    _, dropped, _ = await api.post("/_test/drop-watches")
    assert dropped == {"dropped": 1}
    assert await stream.next() is None
    await stream.close()

    await api.post("/_test/pause")
    pending = asyncio.ensure_future(api.get(CMS))
    await asyncio.sleep(0.1)
    _, state, _ = await api.get("/_test/state")  # controls still answer while paused
    assert state["paused"] is True and not pending.done()
    await api.post("/_test/resume")
    assert (await asyncio.wait_for(pending, 2))[0] == 200

    _, _, _ = await api.post("/_test/bookmarks", {"interval": 0.5})
    assert apiserver.controls.bookmark_interval == 0.5


async def test_http_controls_are_served_only_when_asked_for(tmp_path: Path) -> None:
    """A user's server (`koord-queue up`, `python -m koordqueue.apiserver`) has no `/_test/` door:
    nobody holding its kubeconfig can inject errors, pause it or read who asked for what."""
    async with running_apiserver(tmp_path / "s", crds=[]) as server, APIClient(server) as api:
        for method, path in (("GET", "/_test/state"), ("POST", "/_test/pause"), ("POST", "/_test/errors"),
                             ("GET", "/_test/requests?user=admin")):
            status, body, _ = await api.request(method, path)
            assert (status, body["reason"]) == (404, "NotFound"), path
        assert not server.controls.paused
        server.controls.inject_errors(500, verbs={"list"}, count=1)  # from Python, as tests do
        assert (await api.get(CMS))[0] == 500
