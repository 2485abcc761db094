"""A restart on the same state directory keeps objects, CRDs, the token, and resourceVersion goes on."""

from __future__ import annotations

from pathlib import Path

from koordqueue.apiserver.testing import APIClient, running_apiserver

from .conftest import WIDGET_CRD, WIDGETS, configmap, widget

CMS = "/api/v1/namespaces/default/configmaps"


async def test_restart_keeps_state(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with running_apiserver(state, crds=[]) as server, APIClient(server) as api:
        token = server.token
        await api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)
        await api.post(CMS, configmap("a", x="1"))
        await api.post(CMS, configmap("gone"))
        await api.delete(f"{CMS}/gone")
        _, w, _ = await api.post(WIDGETS, widget("w", size=1))
        _, lst, _ = await api.get(CMS)
        last_rv = int(lst["metadata"]["resourceVersion"])
    async with running_apiserver(state, crds=[]) as server, APIClient(server) as api:
        assert server.token == token
        _, lst, _ = await api.get(CMS)
        assert [i["metadata"]["name"] for i in lst["items"]] == ["a"]
        assert lst["items"][0]["data"] == {"x": "1"}
        assert int(lst["metadata"]["resourceVersion"]) >= last_rv
        _, w2, _ = await api.get(f"{WIDGETS}/w")
        assert w2 == w
        status, created, _ = await api.post(CMS, configmap("b"))
        assert status == 201 and int(created["metadata"]["resourceVersion"]) > last_rv
        # a watch from the last version before the restart misses nothing that happened since
        events = await api.watch(CMS, {"resourceVersion": str(last_rv)}, until=lambda ev: len(ev) == 1)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]
