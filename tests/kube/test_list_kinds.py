"""kube-apiserver lists a built-in kind's items without kind and apiVersion: KubeClient.list
gives them back, so that what reads a listed job (our controller's job informer, which picks
the kind's adapter by `kind`) sees the same object as from a watch event."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import ClusterConfig, StaticToken

JOBS = Resource("batch", "v1", "jobs")


async def serve(answer: dict[str, Any]) -> tuple[web.AppRunner, str]:
    async def jobs(_request: web.Request) -> web.Response:
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get("/apis/batch/v1/jobs", jobs)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def test_items_of_a_built_in_list_get_the_lists_kind_and_api_version() -> None:
    answer = {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {"resourceVersion": "7"},
              "items": [{"metadata": {"name": "a", "namespace": "n"}, "spec": {}},
                        {"kind": "Job", "apiVersion": "batch/v1", "metadata": {"name": "b", "namespace": "n"}}]}
    runner, url = await serve(answer)
    try:
        async with KubeClient(ClusterConfig(server=url, ssl_context=None, credentials=StaticToken("t")), qps=0) as c:
            page = await c.list(JOBS)
    finally:
        await runner.cleanup()
    assert [(i["kind"], i["apiVersion"], i["metadata"]["name"]) for i in page.items] == [
        ("Job", "batch/v1", "a"), ("Job", "batch/v1", "b")]
    assert page.resource_version == "7"
