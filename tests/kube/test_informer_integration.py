"""Informer against the embedded API server: sync (by a streaming list, or by pages), follow,
resume, relist, survive errors. The tests of what the informer guarantees run both ways
(``stream``)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import pytest

from koordqueue.kube.api import KubeAPI
from koordqueue.kube.client import KubeClient, Resource, WatchEvent
from koordqueue.kube.errors import AlreadyExists, Invalid, NotFound
from koordqueue.kube.informer import Informer, key_of

if TYPE_CHECKING:
    from koordqueue.apiserver.server import APIServer

CONFIGMAPS = Resource("", "v1", "configmaps")


class Seen(NamedTuple):
    """What these tests keep per object: a small projection, as the controller keeps."""

    key: str
    rv: str
    data: dict[str, str]


def project(obj: dict[str, Any]) -> Seen:
    return Seen(key_of(obj), obj["metadata"]["resourceVersion"], dict(obj.get("data") or {}))


def configmap(name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}


class Mirror:
    """Rebuilds the state from the callbacks alone and notes every callback that does not
    fit what came before (an add of a known key, an update or delete of an unknown one)."""

    def __init__(self, informer: Informer[Seen]) -> None:
        self.state: dict[str, Seen] = {}
        self.log: list[tuple[str, str, Any]] = []
        self.violations: list[str] = []
        informer.on_add(self._add)
        informer.on_update(self._update)
        informer.on_delete(self._delete)

    def _add(self, p: Seen) -> None:
        if p.key in self.state:
            self.violations.append(f"duplicate add of {p.key}")
        self.state[p.key] = p
        self.log.append(("add", p.key, p.data))

    async def _update(self, old: Seen, new: Seen) -> None:  # async handlers are awaited too
        if self.state.get(new.key) != old:
            self.violations.append(f"update of {new.key} from a state we were not told about")
        self.state[new.key] = new
        self.log.append(("update", new.key, (old.data, new.data)))

    def _delete(self, p: Seen) -> None:
        if self.state.pop(p.key, None) is None:
            self.violations.append(f"delete of unknown {p.key}")
        self.log.append(("delete", p.key, p.data))


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def server_state(client: KubeClient, label_selector: str | None = None) -> dict[str, str]:
    listed = await client.list_all(CONFIGMAPS, namespace="default", label_selector=label_selector)
    return {f"default/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in listed.items}


async def hide_changes(server: APIServer) -> None:
    """End the informer's (one) watch and fail new ones, so it sees the next changes only by
    listing. No await between the drop and the rule: no watch can open in between."""
    await eventually(lambda: server.controls.drop_watches() > 0)
    server.controls.inject_errors(500, verbs={"watch"})
    server.controls.drop_watches()


def cache_state(informer: Informer[Seen]) -> dict[str, str]:
    return {k: v.rv for k, v in informer.items()}


def make(client: KubeClient, stream: bool = True, **kw: Any) -> tuple[Informer[Seen], Mirror]:
    informer = Informer(client, CONFIGMAPS, project=project, namespace="default", base_delay=0.02,
                        max_delay=0.2, **kw)
    informer.stream = stream
    return informer, Mirror(informer)


@pytest.fixture(params=[True, False], ids=["streamed", "pages"])
def stream(request: pytest.FixtureRequest) -> bool:
    """How the informer takes the state: a streaming list, or pages."""
    return bool(request.param)


async def test_lists_in_pages_then_follows_changes(client: KubeClient) -> None:
    for i in range(30):
        await client.create(CONFIGMAPS, configmap(f"cm-{i:02}", {"i": str(i)}))
    informer, mirror = make(client, stream=False, page_size=7)
    informer.start()
    try:
        await informer.wait_synced(5)
        assert len(informer) == 30 and client.request_count["list"] == 5
        assert informer.get("default/cm-03") == mirror.state["default/cm-03"]
        assert mirror.state["default/cm-03"].data == {"i": "3"}
        assert [e[0] for e in mirror.log] == ["add"] * 30

        await client.create(CONFIGMAPS, configmap("new", {"n": "1"}))
        await client.patch(CONFIGMAPS, "cm-01", {"data": {"i": "changed"}}, namespace="default")
        await client.delete(CONFIGMAPS, "cm-02", namespace="default")
        await eventually(lambda: len(mirror.log) == 33)
        assert mirror.log[30:] == [
            ("add", "default/new", {"n": "1"}),
            ("update", "default/cm-01", ({"i": "1"}, {"i": "changed"})),
            ("delete", "default/cm-02", {"i": "2"}),
        ]
        assert informer.get("default/cm-02") is None
        assert cache_state(informer) == await server_state(client)
        assert mirror.state == dict(informer.items()) and mirror.violations == []
    finally:
        await informer.stop()


async def test_takes_its_state_by_one_streaming_list_then_follows_changes_on_it(client: KubeClient) -> None:
    """No list request: one watch brings the objects, the bookmark that ends them, and then
    the changes (kube-apiserver serves it from its watch cache in one response)."""
    for i in range(30):
        await client.create(CONFIGMAPS, configmap(f"cm-{i:02}", {"i": str(i)}))
    informer, mirror = make(client)
    informer.start()
    try:
        await informer.wait_synced(5)
        assert len(informer) == 30 and [e[0] for e in mirror.log] == ["add"] * 30
        assert client.request_count["list"] == 0 and informer.lists == 1 and informer.stream
        await client.patch(CONFIGMAPS, "cm-01", {"data": {"i": "changed"}}, namespace="default")
        await client.delete(CONFIGMAPS, "cm-02", namespace="default")
        await eventually(lambda: len(mirror.log) == 32)
        assert mirror.log[30:] == [("update", "default/cm-01", ({"i": "1"}, {"i": "changed"})),
                                   ("delete", "default/cm-02", {"i": "2"})]
        assert client.request_count["list"] == 0 and informer.watches == 1  # the same stream
        assert cache_state(informer) == await server_state(client) and mirror.violations == []
    finally:
        await informer.stop()


class OlderServer:
    """The client of a server that refuses streaming lists (a 422, as kube-apiserver without
    the WatchList feature), or that does not know them (a watch without a resourceVersion:
    the objects as ADDED, then a plain bookmark and changes, never the end's mark)."""

    def __init__(self, client: KubeClient, refuses: bool) -> None:
        self.client = client
        self.refuses = refuses
        self.streamed = 0  # watches that asked for a streaming list

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def watch(self, resource: Resource, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        if kwargs.pop("send_initial_events", False):
            self.streamed += 1
            if self.refuses:
                raise Invalid(422, "Invalid", "sendInitialEvents is forbidden for watch unless the WatchList "
                                              "feature gate is enabled")
            async for event in self.client.watch(resource, **kwargs):
                yield event
            return
        async for event in self.client.watch(resource, **kwargs):
            yield event


@pytest.mark.parametrize("refuses", [True, False], ids=["refuses", "does-not-know"])
async def test_a_server_without_streaming_lists_is_listed_by_pages(server: APIServer, client: KubeClient,
                                                                   refuses: bool) -> None:
    server.controls.bookmark_interval = 0.05
    for i in range(12):
        await client.create(CONFIGMAPS, configmap(f"cm-{i:02}", {"i": str(i)}))
    older = OlderServer(client, refuses)
    informer = Informer(cast(KubeAPI, older), CONFIGMAPS, project=project, namespace="default", page_size=5,
                        base_delay=0.02, max_delay=0.2)
    mirror = Mirror(informer)
    informer.start()
    try:
        await informer.wait_synced(5)
        assert not informer.stream and older.streamed == 1 and client.request_count["list"] == 3
        assert len(informer) == 12 and [e[0] for e in mirror.log] == ["add"] * 12  # each told once
        await hide_changes(server)  # a relist after 410: by pages again, not streamed
        await client.create(CONFIGMAPS, configmap("new"))
        server.controls.compact()
        server.controls.clear_errors()
        await eventually(lambda: informer.lists == 2)
        assert older.streamed == 1 and client.request_count["list"] == 6
        assert cache_state(informer) == await server_state(client) and mirror.violations == []
    finally:
        await informer.stop()


async def test_the_next_page_is_asked_for_while_this_one_is_read(client: KubeClient) -> None:
    """A big list (100,000 Jobs: 200 pages) costs the server's time per page and ours; asked
    for only once the page before is read, they add up instead of overlapping."""
    for i in range(40):
        await client.create(CONFIGMAPS, configmap(f"cm-{i:02}"))
    asked: list[int] = []  # list requests sent when each object was read

    def noting(obj: dict[str, Any]) -> Seen:
        asked.append(client.request_count["list"])
        return project(obj)

    informer = Informer(client, CONFIGMAPS, project=noting, namespace="default", page_size=10)
    informer.stream = False
    informer.yield_every = 3
    informer.start()
    try:
        await informer.wait_synced(5)
        assert len(informer) == 40 and client.request_count["list"] == 4
        # the last object of each page but the last is read after the next page was asked for
        assert [asked[i] for i in (9, 19, 29)] == [2, 3, 4]
    finally:
        await informer.stop()


async def test_resumes_after_dropped_watches_without_relisting(server: APIServer, client: KubeClient, stream: bool) -> None:
    informer, mirror = make(client, stream)
    informer.start()
    try:
        await informer.wait_synced(5)
        for round_ in range(5):
            await eventually(lambda: server.controls.drop_watches() > 0)
            await client.create(CONFIGMAPS, configmap(f"d-{round_}", {"r": str(round_)}))
            await client.patch(CONFIGMAPS, f"d-{round_}", {"data": {"r": "patched"}}, namespace="default")
        await eventually(lambda: len(mirror.log) == 10)
        assert informer.lists == 1  # resumed from its resourceVersion every time
        assert informer.watches >= 6
        assert [e[0] for e in mirror.log] == ["add", "update"] * 5  # nothing missed, nothing replayed
        assert mirror.violations == []
        assert cache_state(informer) == await server_state(client)
    finally:
        await informer.stop()


async def test_bookmarks_advance_the_resource_version(server: APIServer, client: KubeClient, stream: bool) -> None:
    server.controls.bookmark_interval = 0.05
    informer, mirror = make(client, stream)
    informer.start()
    try:
        await informer.wait_synced(5)
        synced_at = informer.resource_version
        # Changes elsewhere in the cluster move the global version; bookmarks carry it to us.
        await client.create(Resource("", "v1", "secrets"), {"apiVersion": "v1", "kind": "Secret",
                                                            "metadata": {"name": "s", "namespace": "default"}})
        await eventually(lambda: int(informer.resource_version) > int(synced_at))
        assert mirror.log == []
    finally:
        await informer.stop()


async def test_relists_after_410_and_emits_only_the_difference(server: APIServer, client: KubeClient, stream: bool) -> None:
    for name in "abc":
        await client.create(CONFIGMAPS, configmap(name, {"v": "1"}))
    informer, mirror = make(client, stream)
    informer.start()
    try:
        await informer.wait_synced(5)
        await hide_changes(server)
        await client.create(CONFIGMAPS, configmap("d", {"v": "1"}))
        await client.patch(CONFIGMAPS, "b", {"data": {"v": "2"}}, namespace="default")
        await client.delete(CONFIGMAPS, "c", namespace="default")
        server.controls.compact()
        server.controls.clear_errors()
        await eventually(lambda: informer.lists == 2)
        assert sorted(mirror.log[3:]) == [
            ("add", "default/d", {"v": "1"}),
            ("delete", "default/c", {"v": "1"}),
            ("update", "default/b", ({"v": "1"}, {"v": "2"})),
        ]  # and nothing for the unchanged a
        assert mirror.violations == []
        assert cache_state(informer) == await server_state(client)
        await client.patch(CONFIGMAPS, "a", {"data": {"v": "after"}}, namespace="default")
        await eventually(lambda: mirror.log[-1] == ("update", "default/a", ({"v": "1"}, {"v": "after"})))
    finally:
        await informer.stop()


@pytest.mark.parametrize("code", [500, 429])
async def test_failed_lists_are_retried_until_synced(server: APIServer, client: KubeClient, code: int) -> None:
    await client.create(CONFIGMAPS, configmap("x"))
    server.controls.inject_errors(code, verbs={"list"}, count=client.retry.attempts * 2, retry_after=0)
    informer, mirror = make(client, stream=False)
    informer.start()
    try:
        await informer.wait_synced(10)
        assert client.request_count["list"] == client.retry.attempts * 2 + 1
        assert mirror.log == [("add", "default/x", {})]
    finally:
        await informer.stop()


async def test_wait_synced_times_out_while_the_server_fails(server: APIServer, client: KubeClient,
                                                           stream: bool) -> None:
    server.controls.inject_errors(500, verbs={"watch" if stream else "list"})
    informer, _ = make(client, stream)
    informer.start()
    try:
        with pytest.raises(TimeoutError):
            await informer.wait_synced(0.3)
        assert not informer.has_synced
        server.controls.clear_errors()
        await informer.wait_synced(5)
        assert informer.has_synced
    finally:
        await informer.stop()


async def test_label_selector_scopes_the_cache(client: KubeClient, stream: bool) -> None:
    await client.create(CONFIGMAPS, configmap("in", labels={"app": "kq"}))
    await client.create(CONFIGMAPS, configmap("out", labels={"app": "other"}))
    informer, mirror = make(client, stream, label_selector="app=kq")
    informer.start()
    try:
        await informer.wait_synced(5)
        assert [k for k, _ in informer.items()] == ["default/in"]
        await client.patch(CONFIGMAPS, "in", {"metadata": {"labels": {"app": "gone"}}}, namespace="default")
        await client.patch(CONFIGMAPS, "out", {"metadata": {"labels": {"app": "kq"}}}, namespace="default")
        await eventually(lambda: [k for k, _ in informer.items()] == ["default/out"])
        assert [(e[0], e[1]) for e in mirror.log] == [("add", "default/in"), ("delete", "default/in"),
                                                      ("add", "default/out")]
    finally:
        await informer.stop()


def project_kept(obj: dict[str, Any]) -> Seen | None:
    """Like `project`, but keeps only config maps labelled keep=yes (as the controller keeps
    only the pods of queued jobs, or bound ones)."""
    return project(obj) if (obj["metadata"].get("labels") or {}).get("keep") == "yes" else None


async def test_an_object_that_stops_being_kept_is_deleted_with_its_last_kept_state(
        server: APIServer, client: KubeClient, stream: bool) -> None:
    """It used to stay in the cache as it last was, and its deletion told the handlers None."""
    for name in ("a", "b", "x"):
        await client.create(CONFIGMAPS, configmap(name, {"v": "1"}, labels={"keep": "yes"}))
    await client.create(CONFIGMAPS, configmap("never", {"v": "1"}))
    informer = Informer(client, CONFIGMAPS, project=project_kept, namespace="default", base_delay=0.02,
                        max_delay=0.2)
    informer.stream = stream
    mirror = Mirror(informer)
    informer.start()
    try:
        await informer.wait_synced(5)
        assert sorted(k for k, _ in informer.items()) == ["default/a", "default/b", "default/x"]

        await client.patch(CONFIGMAPS, "a", {"metadata": {"labels": {"keep": "no"}}, "data": {"v": "2"}},
                           namespace="default")
        await eventually(lambda: "default/a" not in informer)
        assert mirror.log[-1] == ("delete", "default/a", {"v": "1"})
        await client.delete(CONFIGMAPS, "a", namespace="default")  # nothing more to tell
        await client.patch(CONFIGMAPS, "b", {"data": {"v": "2"}}, namespace="default")
        await eventually(lambda: mirror.log[-1][0:2] == ("update", "default/b"))
        assert [e[0:2] for e in mirror.log[3:]] == [("delete", "default/a"), ("update", "default/b")]

        await hide_changes(server)  # the same seen by a relist
        await client.patch(CONFIGMAPS, "x", {"metadata": {"labels": {"keep": "no"}}}, namespace="default")
        server.controls.compact()
        server.controls.clear_errors()
        await eventually(lambda: informer.lists == 2)
        assert mirror.log[-1] == ("delete", "default/x", {"v": "1"})
        assert sorted(k for k, _ in informer.items()) == ["default/b"]
        assert mirror.state == dict(informer.items()) and mirror.violations == []
    finally:
        await informer.stop()


async def test_a_failing_handler_does_not_stop_the_informer(client: KubeClient, stream: bool) -> None:
    informer, mirror = make(client, stream)

    def explode(_: Seen) -> None:
        raise RuntimeError("handler bug")

    informer.on_add(explode)
    informer.start()
    try:
        await informer.wait_synced(5)
        await client.create(CONFIGMAPS, configmap("one"))
        await client.create(CONFIGMAPS, configmap("two"))
        await eventually(lambda: len(informer) == 2)
        assert [e[1] for e in mirror.log] == ["default/one", "default/two"]
    finally:
        await informer.stop()


async def test_the_default_projection_trims_the_raw_object(client: KubeClient) -> None:
    cm = configmap("raw", {"k": "v"})
    cm["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "1"}
    await client.create(CONFIGMAPS, cm)
    informer = Informer(client, CONFIGMAPS, namespace="default")
    informer.start()
    try:
        await informer.wait_synced(5)
        raw = informer.get("default/raw")
        assert raw is not None and raw["data"] == {"k": "v"}
        assert raw["metadata"]["annotations"] == {"keep": "1"}
        assert "managedFields" not in raw["metadata"]
    finally:
        await informer.stop()


async def test_stays_consistent_through_errors_drops_and_compaction(server: APIServer, client: KubeClient, stream: bool) -> None:
    """Writers change objects while list and watch fail at random, watches are dropped and
    history is compacted; at the end the cache equals the server and the callbacks told
    the whole story exactly once."""
    informer, mirror = make(client, stream, page_size=5)
    informer.start()
    rng = random.Random(4)
    try:
        await informer.wait_synced(5)
        def chaos() -> None:
            server.controls.inject_errors(500, rate=0.3, verbs={"list", "watch"})
            server.controls.inject_errors(429, rate=0.2, verbs={"list", "watch"}, retry_after=0)

        chaos()
        names = [f"o-{i}" for i in range(15)]
        for step in range(150):
            name = rng.choice(names)
            op = rng.random()
            try:
                if op < 0.4:
                    await client.create(CONFIGMAPS, configmap(name, {"s": str(step)}))
                elif op < 0.8:
                    await client.patch(CONFIGMAPS, name, {"data": {"s": str(step)}}, namespace="default")
                else:
                    await client.delete(CONFIGMAPS, name, namespace="default")
            except (AlreadyExists, NotFound):
                pass
            if step % 25 == 0:
                server.controls.drop_watches()
            if step == 100:  # fall behind, and have the history it needs compacted away
                server.controls.clear_errors()
                await hide_changes(server)
            if step == 110:
                server.controls.compact()
                server.controls.clear_errors()
                chaos()
            if step % 10 == 0:
                await asyncio.sleep(0.02)
        server.controls.clear_errors()
        expected = await server_state(client)
        await eventually(lambda: cache_state(informer) == expected, timeout=10)
        assert mirror.violations == []
        assert mirror.state == dict(informer.items())
        assert informer.lists >= 2 and informer.watches > 3
    finally:
        await informer.stop()


async def test_a_stop_that_is_itself_cancelled_raises_instead_of_swallowing_the_cancel(client: KubeClient) -> None:
    """stop() waits for the informer's task; a cancel of the caller meanwhile must reach the caller."""
    informer, _ = make(client)
    handling = asyncio.Event()

    async def slow_to_stop(_: Seen) -> None:  # a handler whose clean-up takes a while
        handling.set()
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.shield(asyncio.sleep(0.3))

    informer.on_add(slow_to_stop)
    await client.create(CONFIGMAPS, configmap("one"))
    informer.start()
    await asyncio.wait_for(handling.wait(), 5)
    stopper = asyncio.create_task(informer.stop())
    await asyncio.sleep(0.05)  # stop() now waits for the handler's clean-up
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert stopper.cancelled()
