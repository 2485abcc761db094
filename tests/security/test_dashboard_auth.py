"""Item 11 of issue 29: the dashboard bound 0.0.0.0 without authentication, the Service
published it, it showed every tenant's units, and its event stream had no cap.

Now it binds loopback by default (`koord-queue up`: usable with no token). Bound anywhere
else, a request needs a bearer token (TokenReview), its user needs `get` on the visibility
API's queues (SubjectAccessReview), and sees the units of the namespaces where it may `list
queueunits`, as the visibility API shows them; a login form sets a session cookie for the
page. Past `dashboard_max_streams` open event streams, one more is answered 429.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.apiserver.testing import APIClient, running_apiserver
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.dashboard import SESSION_COOKIE, Dashboard, only_namespaces, unit_namespaces
from tests.chart.helmtool import RELEASE, container, flag, one, render
from tests.controller.conftest import System, SystemFactory, pytorch_job, quick_config, quota

pytestmark = pytest.mark.timeout(180)

TENANTS = {"t1": "alice", "t2": "bob"}  # namespace -> the ServiceAccount there that may read its units
VIEWER = "koord-queue-test-dashboard-viewer"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


def rbac_objects() -> list[dict[str, Any]]:
    """Each tenant may list its own namespace's QueueUnits; alice and bob (not carol) may open the dashboard."""
    objs: list[dict[str, Any]] = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": VIEWER},
         "rules": [{"apiGroups": [c.VISIBILITY_GROUP], "resources": ["queues"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": VIEWER},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": VIEWER},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns} for ns, sa in TENANTS.items()]},
    ]
    for ns, sa in TENANTS.items():
        objs += [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "units", "namespace": ns},
             "rules": [{"apiGroups": [c.QUEUE_GROUP], "resources": [c.QUEUE_UNIT_PLURAL],
                        "verbs": ["get", "list", "watch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "units", "namespace": ns},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "units"},
             "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]},
        ]
    objs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "carol", "namespace": "t1"}})
    return objs


class Browser:
    """Plain HTTP to the dashboard, as a browser or curl would."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self.session = session
        self.base = f"http://127.0.0.1:{port}"

    async def get(self, path: str, token: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.get(self.base + path, headers=headers, allow_redirects=False) as resp:
            body = await resp.read()
            return resp.status, (await resp.json() if resp.content_type == "application/json" else body.decode())

    async def post(self, path: str, body: str, token: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.post(self.base + path, data=body, headers=headers, allow_redirects=False) as resp:
            return resp.status, await resp.json()


@pytest.fixture
async def exposed(start_system: SystemFactory) -> AsyncIterator[tuple[System, Browser, dict[str, str]]]:
    """The controller with its dashboard on 0.0.0.0 (as the chart's `expose` binds it), two tenants
    with a running and a waiting job each, and a token for alice, bob and carol."""
    config = quick_config(dashboard=True, dashboard_host="0.0.0.0", dashboard_port=0, dashboard_max_streams=2)
    async with start_system(config=config) as system:
        await system.apply(*rbac_objects())
        try:
            for ns in TENANTS:
                await system.apply(quota(f"q-{ns}", 2, 2, namespace=ns))
                await system.apply(pytorch_job(f"{ns}-run", namespace=ns, quota_name=f"q-{ns}", duration=600),
                                   pytorch_job(f"{ns}-wait", namespace=ns, quota_name=f"q-{ns}", duration=600))
            for ns in TENANTS:
                await system.wait_phase(f"{ns}-run-py-qu", c.Phase.RUNNING, namespace=ns, timeout=60)
            tokens = {sa: (await system.akubectl("create", "token", sa, "-n", ns)).strip()
                      for ns, sa in [*TENANTS.items(), ("t1", "carol")]}
            assert system.manager.dashboard is not None
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:  # (an IP's cookies)
                yield system, Browser(session, system.manager.dashboard.port), tokens
        finally:  # (cluster-scoped: the real control plane's reset leaves them)
            await system.akubectl("delete", "clusterrolebinding,clusterrole", VIEWER, "--ignore-not-found")


def units_in(overview: dict[str, Any]) -> set[str]:
    return {p["unit"] for q in overview["queues"] for p in q["pending"]} | \
        {r["unit"] for r in overview["recent"] if r.get("unit")}


@pytest.mark.both_control_planes
async def test_an_exposed_dashboard_needs_a_token_and_shows_each_tenant_its_own_units(
        exposed: tuple[System, Browser, dict[str, str]]) -> None:
    system, browser, tokens = exposed
    assert (await browser.get("/api/overview"))[0] == 401
    code, page = await browser.get("/")
    assert code == 401 and 'name="token"' in page  # the login form, not the dashboard
    assert (await browser.get("/api/overview", token="not-a-token"))[0] == 401
    code, refused = await browser.get("/api/overview", token=tokens["carol"])  # a token, but no grant to look
    assert code == 403 and "queues." + c.VISIBILITY_GROUP in refused["message"]

    async def alice_sees_hers() -> bool:
        code, overview = await browser.get("/api/overview", token=tokens["alice"])
        return code == 200 and "t1/t1-wait-py-qu" in units_in(overview)

    await system.wait_for(alice_sees_hers, 30, "alice to see her waiting unit")
    for tenant, mine in (("alice", "t1/"), ("bob", "t2/")):
        code, overview = await browser.get("/api/overview", token=tokens[tenant])
        assert code == 200 and units_in(overview) and all(u.startswith(mine) for u in units_in(overview)), overview
    assert (await browser.get("/api/explain/t1/t1-wait-py-qu", token=tokens["alice"]))[0] == 200
    assert (await browser.get("/api/explain/t2/t2-wait-py-qu", token=tokens["alice"]))[0] == 403


@pytest.mark.both_control_planes
async def test_a_dry_run_answers_only_for_a_namespace_the_caller_may_see(
        exposed: tuple[System, Browser, dict[str, str]]) -> None:
    system, browser, tokens = exposed
    before = await system.get_json("pytorchjobs", "-A")

    def job(ns: str) -> str:
        return yaml.safe_dump(pytorch_job("maybe", namespace=ns, quota_name=f"q-{ns}", duration=60))

    assert (await browser.post("/api/dry-run", job("t1")))[0] == 401
    code, refused = await browser.post("/api/dry-run", job("t1"), token=tokens["carol"])  # may not open it at all
    assert code == 403 and "queues." + c.VISIBILITY_GROUP in refused["message"]
    code, mine = await browser.post("/api/dry-run", job("t1"), token=tokens["alice"])
    assert code == 200 and mine["unit"] == "t1/maybe-py-qu" and mine["quota"] == "q-t1", mine
    code, refused = await browser.post("/api/dry-run", job("t2"), token=tokens["alice"])
    assert code == 403 and "nor list QueueUnits in namespace t2" in refused["message"]
    code, refused = await browser.post("/api/dry-run?namespace=t2", job("t1"), token=tokens["alice"])
    assert code == 403  # (the query's namespace is the one asked about)
    assert (await browser.post("/api/dry-run", job("t2"), token=tokens["bob"]))[0] == 200
    assert [o["metadata"]["name"] for o in (await system.get_json("pytorchjobs", "-A"))["items"]] == \
        [o["metadata"]["name"] for o in before["items"]]


@pytest.mark.both_control_planes
async def test_the_login_form_sets_a_session_for_the_page_and_its_stream_and_streams_are_capped(
        exposed: tuple[System, Browser, dict[str, str]]) -> None:
    system, browser, tokens = exposed
    async with browser.session.post(browser.base + "/login", data={"token": "wrong"}, allow_redirects=False) as resp:
        assert resp.status == 401
    async with browser.session.post(browser.base + "/login", data={"token": tokens["bob"]},
                                    allow_redirects=False) as resp:
        assert resp.status == 303 and resp.headers["Location"] == "/"
        cookie = resp.cookies[SESSION_COOKIE]
        assert cookie["httponly"] and cookie["samesite"] == "Strict"
    code, page = await browser.get("/")  # the session cookie, no header
    assert code == 200 and "Koord-Queue dashboard" in page

    streams: list[aiohttp.ClientResponse] = []

    async def stream(token: str | None = None) -> tuple[int, Any]:
        """A stream opened (by the session cookie, or a token): its first event's data, or the refusal."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        resp = await browser.session.get(browser.base + "/api/stream", headers=headers)
        if resp.status != 200:
            async with resp:
                return resp.status, await resp.json()
        streams.append(resp)
        first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 30)
        assert first.startswith(b"event: ")
        return 200, yaml.safe_load(first.split(b"data: ", 1)[1]) if first.startswith(b"event: overview") else None

    try:  # dashboard_max_streams is 2: one for each user, at most
        code, data = await stream()
        assert code == 200 and (data is None or all(u.startswith("t2/") for u in units_in(data)))
        code, refused = await stream()  # bob's second
        assert code == 429 and refused["error"] == "too-many-streams" and "bob's" in refused["message"]
        assert (await stream(tokens["alice"]))[0] == 200
        code, refused = await stream(tokens["alice"])  # all taken
        assert code == 429 and "2 event streams are open" in refused["message"]
    finally:
        for resp in streams:
            resp.close()

    async def given_back() -> bool:  # a closed stream is let go at its next write (each second)
        code, _ = await stream()
        for resp in streams:
            resp.close()
        return code == 200

    await system.wait_for(given_back, 10, "the closed streams to be given back")


async def test_on_loopback_the_dashboard_asks_for_no_token() -> None:
    """`koord-queue up` and `kubectl port-forward`: the default bind, usable as it always was."""
    assert ControllerConfig().dashboard_host == "127.0.0.1"
    dashboard = Dashboard(lambda: None, "127.0.0.1", 0)
    await dashboard.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{dashboard.port}/api/overview") as resp:
                assert resp.status == 503  # not leading, but not refused: no token asked
    finally:
        await dashboard.stop()
    with pytest.raises(ValueError, match="needs token review"):
        Dashboard(lambda: None, "0.0.0.0", 0)  # exposed without a reviewer: refused at start


def test_the_overview_is_cut_to_the_namespaces_allowed() -> None:
    doc = {"queues": [{"key": "q", "pending_count": 2,
                       "pending": [{"unit": "a/x"}, {"unit": "b/y"}], "backing_off": [{"unit": "b/z"}],
                       "running": [{"unit": "c/r", "since": 0.0, "until": 60.0}]}],  # (the forecast's timeline)
           "recent": [{"unit": "a/x"}, {"unit": "b/y"}, {"unit": None}], "quotas": []}
    assert unit_namespaces(doc) == {"a", "b", "c"}
    cut = only_namespaces(doc, {"a"})
    assert cut["queues"][0]["pending"] == [{"unit": "a/x"}] and cut["queues"][0]["backing_off"] == []
    assert cut["queues"][0]["running"] == []
    assert cut["recent"] == [{"unit": "a/x"}]


async def test_the_embedded_api_server_answers_token_reviews_for_who_may_ask(tmp_path: Path) -> None:
    """What the exposed dashboard asks (kube-apiserver serves it; system:auth-delegator may)."""
    async with running_apiserver(tmp_path / "state") as server, APIClient(server) as admin:
        await admin.post("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "dave"}})
        token = server.issue_token("default", "dave")
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        code, answer, _ = await admin.post(TOKEN_REVIEWS, review)
        assert code == 201 and answer["status"]["authenticated"] is True
        assert answer["status"]["user"]["username"] == "system:serviceaccount:default:dave"
        assert "system:serviceaccounts:default" in answer["status"]["user"]["groups"]
        assert "token" not in answer["spec"]  # not echoed back
        code, answer, _ = await admin.post(TOKEN_REVIEWS, {**review, "spec": {"token": "forged"}})
        assert code == 201 and not answer["status"].get("authenticated")
        code, answer, _ = await admin.post(TOKEN_REVIEWS, {**review, "spec": {}})
        assert code == 400 and answer["message"] == "token is required for TokenReview in authentication"
        async with APIClient(server, token=token) as dave:  # a tenant may not ask about others' tokens
            code, answer, _ = await dave.post(TOKEN_REVIEWS, review)
            assert code == 403 and answer["reason"] == "Forbidden"


def test_the_chart_keeps_the_dashboard_on_loopback_and_off_the_service_unless_exposed() -> None:
    def cluster_rules(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
        binding = one(objects, "ClusterRoleBinding", RELEASE)  # the controller's (the chart ships roles for people too)
        role = one(objects, "ClusterRole", binding["roleRef"]["name"])
        return {(g, r) for rule in role["rules"] for g in rule.get("apiGroups", ()) for r in rule.get("resources", ())}

    kept = render({"controller": {"dashboard": {"port": 8090}}})
    assert flag(kept, "dashboard-host") == ["127.0.0.1"]
    assert "dashboard" not in {p["name"] for p in one(kept, "Service")["spec"]["ports"]}
    assert "dashboard" not in {p["name"] for p in container(kept)["ports"]}
    assert ("authentication.k8s.io", "tokenreviews") not in cluster_rules(kept)
    exposed = render({"controller": {"dashboard": {"port": 8090, "expose": True}}})
    assert flag(exposed, "dashboard-host") == ["0.0.0.0"]
    assert {"name": "dashboard", "port": 8090, "targetPort": "dashboard", "protocol": "TCP"} in \
        one(exposed, "Service")["spec"]["ports"]
    assert {("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")} <= \
        cluster_rules(exposed)
