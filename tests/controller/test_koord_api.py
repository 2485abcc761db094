"""Koord-Queue's HTTP API, read as its users' scripts read it (plain GETs of its paths) on a
running system, each answer checked against the Go types Koord-Queue marshals (quoted
beside each check): /apis/v1/queue and /apis/v1/userquota (cmd/app/server/apimethod.go),
/apis/v1/elasticquota (plugins/elasticquotav1alpha1/api_handler.go) and
/apis/v1/elasticquotatree (plugins/elasticquota/api_handler.go)."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from koordqueue.api import constants as c
from koordqueue.controller.koordapi import KoordAPI

from .conftest import System, SystemFactory, pytorch_job, quick_config, quota
from .test_quota_tree import create, gpus, namespace, tree

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


async def get(port: int, path: str, status: int = 200) -> Any:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as response:
        assert response.status == status, await response.text()
        assert response.content_type == "application/json"
        text = await response.text()
        return await response.json(content_type=None) if text else None


def api_port(system: System) -> int:
    assert system.manager.koord_api is not None, "up's controller serves Koord-Queue's HTTP API"
    assert system.manager.koord_api.host == "127.0.0.1"
    return system.manager.koord_api.port


@pytest.mark.timeout(120)
@pytest.mark.both_control_planes
async def test_queue_userquota_and_elasticquota_answer_in_koord_queues_shapes(system: System) -> None:
    port = api_port(system)
    await system.apply(quota("api-team", 4, 8))
    await system.apply(pytorch_job("api-job", gpus_per_pod=2))  # master + worker: 4 GPUs, 2 cpu
    await system.wait_phase("api-job-py-qu", c.Phase.RUNNING)
    unit = await system.unit("api-job-py-qu")

    # map[string]queuepolicies.QueueDebugInfo: by queue name; nil for every shipped policy.
    queues = await get(port, c.KOORD_API_QUEUE)
    assert queues.get("api-team", "absent") is None and set(queues.values()) == {None}, queues
    assert await get(port, c.KOORD_API_USER_QUOTA) == queues

    async def quota_info() -> dict[str, Any]:
        info = (await get(port, c.KOORD_API_ELASTIC_QUOTA))["api-team"]
        assert info["Count"] == 1, info
        return dict(info)

    info = await system.wait_for(quota_info, what="the running job counted in its quota")
    # type ElasticQuotaDebugInfo struct { Count int64; Max, Min, Used, SelfUsed, ChildrenUsed,
    # GuaranteedUsed, ..., OverSoldUsed, ... map[corev1.ResourceName]int64 (Quantity.Value());
    # Items map[string]*ElasticQuotaUnitDebugInfo }
    assert list(info) == ["Count", "Max", "Min", "Used", "SelfUsed", "ChildrenUsed", "GuaranteedUsed",
                          "SelfGuaranteedUsed", "ChildrenGuaranteedUsed", "OverSoldUsed", "SelfOverSoldUsed",
                          "ChildrenOverSoldUsed", "Items"]
    assert info["Max"] == {"cpu": 32, "memory": 8 * 8 * 2**30, c.GPU: 8}
    assert info["Min"] == {"cpu": 16, "memory": 4 * 8 * 2**30, c.GPU: 4}
    assert info["Used"][c.GPU] == 4 and info["Used"]["cpu"] == 2, info["Used"]
    assert info["SelfUsed"] == info["Used"] == info["GuaranteedUsed"] and info["ChildrenUsed"] == {}
    assert info["OverSoldUsed"] == {}
    # type ElasticQuotaUnitDebugInfo struct { Name string; Resource corev1.ResourceList; Priority int32;
    # OversoldType, ActualOversoldType string; CreationTimestamp v1.Time; InReserveCache bool }
    item = info["Items"]["default/api-job-py-qu"]
    assert list(item) == ["Name", "Resource", "Priority", "OversoldType", "ActualOversoldType",
                          "CreationTimestamp", "InReserveCache"]
    assert item["Name"] == "api-job-py-qu"
    assert item["Resource"] == {k: str(v) for k, v in unit["spec"]["resource"].items()}
    assert item["Priority"] == unit["spec"].get("priority", 0)
    assert item["CreationTimestamp"] == unit["metadata"]["creationTimestamp"] and RFC3339.fullmatch(
        item["CreationTimestamp"])
    assert item["InReserveCache"] is False  # running, not just reserved
    # The tree plugin's path answers for a tree only.
    assert await get(port, c.KOORD_API_QUOTA_TREE) == {}


@pytest.mark.timeout(120)
@pytest.mark.both_control_planes
async def test_elasticquotatree_answers_in_koord_queues_shape(system: System) -> None:
    port = api_port(system)
    await system.apply(namespace("api-tree"))
    await create(system, tree(gpus("api-leaf", 2, 4, namespaces=["api-tree"])))
    await system.apply(pytorch_job("t1", gpus_per_pod=1, namespace="api-tree"),  # 2 GPUs: fits
                       pytorch_job("t2", gpus_per_pod=2, namespace="api-tree"))  # 4 more: over the max, waits
    await system.wait_phase("t1-py-qu", c.Phase.RUNNING, namespace="api-tree")

    async def tree_info() -> dict[str, Any]:
        answer = await get(port, c.KOORD_API_QUOTA_TREE)
        assert set(answer) == {"root", "api-leaf"}, answer
        assert answer["api-leaf"]["Count"] == 1 and len(answer["api-leaf"]["Items"]) == 2, answer
        return dict(answer)

    answer = await system.wait_for(tree_info, what="both units listed under their leaf")
    # type ElasticQuotaDebugInfo struct { Count int64; Max, Min, Used *utils.Resource
    # (struct { Resources map[v1.ResourceName]int64 }: cpu in milli-cores); Items map[...] }
    leaf, root = answer["api-leaf"], answer["root"]
    assert list(leaf) == ["Count", "Max", "Min", "Used", "Items"]
    assert leaf["Max"] == {"Resources": {c.GPU: 4}} and leaf["Min"] == {"Resources": {c.GPU: 2}}
    assert leaf["Used"]["Resources"][c.GPU] == 2 and leaf["Used"]["Resources"]["cpu"] == 2000, leaf["Used"]
    assert root["Count"] == 1 and root["Items"] == {}  # counted up the tree; units listed where charged
    assert root["Used"]["Resources"][c.GPU] == 2
    # type ElasticQuotaUnitDebugInfo struct { Name string; Resource corev1.ResourceList; Priority int32;
    # CreationTimestamp v1.Time }: every unit mapped to the quota, waiting or not.
    for name in ("t1-py-qu", "t2-py-qu"):
        unit = await system.unit(name, "api-tree")
        item = leaf["Items"][f"api-tree/{name}"]
        assert list(item) == ["Name", "Resource", "Priority", "CreationTimestamp"]
        assert item == {"Name": name, "Resource": {k: str(v) for k, v in unit["spec"]["resource"].items()},
                        "Priority": unit["spec"].get("priority", 0),
                        "CreationTimestamp": unit["metadata"]["creationTimestamp"]}
    assert await get(port, c.KOORD_API_ELASTIC_QUOTA) == {}  # ElasticQuotas are set aside while a tree exists


async def test_a_replica_not_leading_says_so_and_the_hook_decides_who_reads() -> None:
    """A follower answers 503 in words; with an authorize hook, a refused caller gets 401
    before anything is read."""
    api = KoordAPI(lambda: None, port=0, identity="replica-2")
    await api.start()
    try:
        answer = await get(api.port, c.KOORD_API_QUEUE, status=503)
        assert answer["error"] == "unavailable" and "replica-2" in answer["message"] and "not the leader" in \
            answer["message"]
    finally:
        await api.stop()

    async def nobody(_: web.Request) -> str | None:
        return "no bearer token"

    api = KoordAPI(lambda: None, port=0, authorize=nobody)
    await api.start()
    try:
        assert await get(api.port, c.KOORD_API_USER_QUOTA, status=401) == {"error": "unauthorized",
                                                                           "message": "no bearer token"}
    finally:
        await api.stop()


READER = "koord-queue-test-api-reader"


@pytest.mark.timeout(120)
@pytest.mark.both_control_planes
async def test_bound_beyond_loopback_it_needs_a_token_that_may_list_every_unit(start_system: SystemFactory) -> None:
    """As the exposed dashboard (controller/access.py): no token 401, a token not accepted 401,
    a token whose user may not list QueueUnits in all namespaces 403, one who may 200."""
    config = quick_config(api_handler=True, api_handler_host="0.0.0.0", api_handler_port=0)
    async with start_system(config=config) as system:
        assert system.manager.koord_api is not None and system.manager.koord_api.authorize is not None
        port = system.manager.koord_api.port
        rbac: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "default"}}
            for name in ("reader", "tenant")]
        rbac += [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": READER},
                  "rules": [{"apiGroups": [c.QUEUE_GROUP], "resources": [c.QUEUE_UNIT_PLURAL],
                             "verbs": ["get", "list", "watch"]}]},
                 {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                  "metadata": {"name": READER},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
                  "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]}]
        await system.apply(*rbac)
        try:
            tokens = {name: (await system.akubectl("create", "token", name)).strip() for name in ("reader", "tenant")}

            async def answer(token: str | None) -> tuple[int, Any]:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                async with aiohttp.ClientSession() as session, \
                        session.get(f"http://127.0.0.1:{port}{c.KOORD_API_QUEUE}", headers=headers) as response:
                    return response.status, await response.json(content_type=None)

            assert (await answer(None))[0] == 401
            assert (await answer("not-a-token"))[0] == 401
            code, refused = await answer(tokens["tenant"])
            assert code == 403 and f"{c.QUEUE_UNIT_PLURAL}.{c.QUEUE_GROUP}" in refused["message"], refused
            code, queues = await answer(tokens["reader"])
            assert code == 200 and isinstance(queues, dict), queues
        finally:  # (cluster-scoped: the real control plane's reset leaves them)
            await system.akubectl("delete", "clusterrolebinding,clusterrole", READER, "--ignore-not-found")
