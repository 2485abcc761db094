"""An ElasticQuotaTree on the cluster, as a Koord-Queue user writes it: created with kubectl,
its leaves' Queues made, a job in a leaf's namespace admitted against the leaf's max, the
status written back per node; a bad tree reported and the rest of it used; ElasticQuotas
set aside while a tree exists and read again when it goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.apiserver.server import APIServer
from koordqueue.kube.client import KubeClient
from koordqueue.kube.config import load_config
from koordqueue.manifests import all_crds
from koordqueue.simcluster.cluster import SimCluster

from .conftest import System, _controller, pytorch_job, quick_config, quota

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]

TREE = "elasticquotatree"


def namespace(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def gpus(name: str, min_gpu: int, max_gpu: int, **more: Any) -> dict[str, Any]:
    return {"name": name, "min": {c.GPU: str(min_gpu)}, "max": {c.GPU: str(max_gpu)}, **more}


def tree(*children: dict[str, Any], root_gpus: int = 32) -> dict[str, Any]:
    return {"apiVersion": c.QUOTA_TREE_API_VERSION, "kind": c.ELASTIC_QUOTA_TREE_KIND,
            "metadata": {"name": TREE, "namespace": c.QUOTA_TREE_NAMESPACE},
            "spec": {"root": gpus("root", root_gpus, root_gpus, children=list(children))}}


async def create(system: System, obj: dict[str, Any]) -> None:
    await system.akubectl("create", "-f", "-", stdin=yaml.safe_dump(obj))


async def tree_status(system: System) -> dict[str, Any]:
    obj = await system.get_json(c.ELASTIC_QUOTA_TREE_PLURAL, TREE, "-n", c.QUOTA_TREE_NAMESPACE)
    return dict(obj.get("status") or {})


async def tree_warnings(system: System) -> list[str]:
    return sorted(e["message"] for e in await system.events(TREE, c.QUOTA_TREE_NAMESPACE)
                  if e["reason"] == c.EventReason.INVALID_QUOTA)


async def test_a_job_in_a_leafs_namespace_is_admitted_against_the_leafs_max_and_the_status_says_so(
        system: System) -> None:
    await system.apply(namespace("tree-a"), namespace("tree-b"))
    await create(system, tree(gpus("team-a", 4, 8, namespaces=["tree-a"]),
                              gpus("team-b", 4, 16, namespaces=["tree-b"])))

    async def queues_made() -> bool:
        queues = (await system.get_json("queue", "-n", c.SYSTEM_NAMESPACE))["items"]
        bound = sorted((q["metadata"]["labels"][c.LABEL_QUOTA_NAME], q["metadata"]["generateName"]) for q in queues)
        assert bound == [("team-a", "root-team-a-"), ("team-b", "root-team-b-")], bound  # Koord-Queue's names
        return True

    await system.wait_for(queues_made, what="a Queue for each leaf")
    # 4 GPUs each (master + worker of 2): two fit team-a's max of 8, the third waits for it.
    for name in ("a1", "a2", "a3"):
        await system.apply(pytorch_job(name, gpus_per_pod=2, namespace="tree-a", priority=3 if name != "a3" else 1))
    # By our label as well as by namespace.
    await system.apply(pytorch_job("b1", gpus_per_pod=2, namespace="tree-b", quota_name="team-b"))
    for name, space in (("a1", "tree-a"), ("a2", "tree-a"), ("b1", "tree-b")):
        await system.wait_phase(f"{name}-py-qu", c.Phase.RUNNING, namespace=space)

    async def a3_waits_for_the_leafs_max() -> str:
        status = (await system.unit("a3-py-qu", "tree-a")).get("status", {})
        assert status.get("phase") == c.Phase.ENQUEUED, status
        message = str(status.get("message"))
        assert "team-a" in message and "max 8" in message, message
        return message

    await system.wait_for(a3_waits_for_the_leafs_max, what="a3 waiting for team-a's max")

    async def status_written() -> dict[str, Any]:
        status = await tree_status(system)
        root = status["root"]
        a, b = root["children"]
        assert (root["name"], root["used"][c.GPU]) == ("root", "12"), root
        assert (a["name"], a["namespaces"], a["used"][c.GPU], a["request"][c.GPU]) == (
            "team-a", ["tree-a"], "8", "8"), a  # request: a3's 4 more, up to the max
        assert (b["name"], b["used"][c.GPU]) == ("team-b", "4"), b
        assert status["problems"] == []
        return status

    await system.wait_for(status_written, what="the tree's status: used and request per node")
    assert await tree_warnings(system) == []


async def test_a_bad_tree_is_reported_and_its_good_quotas_used(system: System) -> None:
    await system.apply(namespace("tree-ok"), namespace("tree-up"))
    await create(system, tree(gpus("ok", 4, 8, namespaces=["tree-ok"]),
                              gpus("upside-down", 8, 2, namespaces=["tree-up"]),
                              gpus("ok", 1, 1, children=[gpus("below", 1, 1)])))
    where = f"{c.ELASTIC_QUOTA_TREE_KIND} {c.QUOTA_TREE_NAMESPACE}/{TREE}"
    expected = [
        f"{where}: quota root/ok: not used: the name ok is taken by the quota before it at root/ok "
        "(quota names are unique); nor the 1 quota below it",
        f"{where}: quota root/upside-down: not used: min of nvidia.com/gpu (8) is more than its max (2)",
    ]

    async def reported() -> bool:
        assert (await tree_status(system))["problems"] == expected
        assert await tree_warnings(system) == expected
        return True

    await system.wait_for(reported, what="the tree's problems in its status and events")
    await system.apply(pytorch_job("fine", gpus_per_pod=2, namespace="tree-ok"),
                       pytorch_job("stuck", gpus_per_pod=1, namespace="tree-up"))
    await system.wait_phase("fine-py-qu", c.Phase.RUNNING, namespace="tree-ok")

    async def told() -> bool:
        status = (await system.unit("stuck-py-qu", "tree-up")).get("status", {})
        assert status.get("phase") == c.Phase.ENQUEUED and "upside-down is not usable" in status.get("message", "")
        return True

    await system.wait_for(told, what="the job of the refused quota told why it waits")
    # Mended in place: the quota is used, the job admitted, the problems gone.
    await system.akubectl("patch", c.ELASTIC_QUOTA_TREE_PLURAL, TREE, "-n", c.QUOTA_TREE_NAMESPACE, "--type", "json",
                          "-p", '[{"op": "replace", "path": "/spec/root/children/1/max/nvidia.com~1gpu", '
                                '"value": "8"}, {"op": "remove", "path": "/spec/root/children/2"}]')
    await system.wait_phase("stuck-py-qu", c.Phase.RUNNING, namespace="tree-up")

    async def mended() -> bool:
        return (await tree_status(system))["problems"] == []

    await system.wait_for(mended, what="no problems left")


async def test_elastic_quotas_are_set_aside_while_a_tree_exists(system: System) -> None:
    await system.apply(quota("legacy", 2, 8))
    await system.apply(pytorch_job("before", gpus_per_pod=1, quota_name="legacy"))
    await system.wait_phase("before-py-qu", c.Phase.RUNNING)
    await system.apply(namespace("tree-c"))
    await create(system, tree(gpus("team-c", 2, 8, namespaces=["tree-c"])))
    aside = (f"quota not used: {c.ELASTIC_QUOTA_TREE_KIND} {c.QUOTA_TREE_NAMESPACE}/{TREE} holds the quotas "
             "(while a tree exists, ElasticQuotas are not read)")

    async def told() -> bool:
        return aside in [e["message"] for e in await system.events("legacy")]

    await system.wait_for(told, what="the ElasticQuota told it is set aside")
    await system.apply(pytorch_job("during", gpus_per_pod=1, quota_name="legacy"),
                       pytorch_job("in-tree", gpus_per_pod=1, namespace="tree-c"))
    await system.wait_phase("in-tree-py-qu", c.Phase.RUNNING, namespace="tree-c")

    async def waits() -> bool:
        status = (await system.unit("during-py-qu")).get("status", {})
        assert status.get("phase") == c.Phase.ENQUEUED and "quota legacy not found" in status.get("message", "")
        return True

    await system.wait_for(waits, what="a job of the set-aside quota waiting")

    async def legacy_queue(there: bool) -> bool:
        out = await system.akubectl("get", "queue", "legacy", "-n", c.SYSTEM_NAMESPACE, check=False)
        return ("NotFound" not in out) == there

    assert await legacy_queue(False), "the set-aside quota's Queue is removed"
    await system.akubectl("delete", c.ELASTIC_QUOTA_TREE_PLURAL, TREE, "-n", c.QUOTA_TREE_NAMESPACE)
    await system.wait_phase("during-py-qu", c.Phase.RUNNING)  # the ElasticQuota is read again
    await system.wait_for(lambda: legacy_queue(True), what="its Queue made again")
    out = await system.akubectl("get", "queue", "team-c", "-n", c.SYSTEM_NAMESPACE, check=False)
    assert "NotFound" in out, "the tree's Queues go with it"


async def test_a_restarted_controller_reads_the_tree_and_keeps_the_elastic_quotas_aside(tmp_path: Path) -> None:
    """The tree came while no controller ran: the next one uses it, and removes the Queue of
    the ElasticQuota it sets aside."""
    server = APIServer(tmp_path / "state", crds=all_crds())
    await server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig_path)), qps=1000, burst=2000) as client:
            sim = SimCluster(client, nodes=2, gpus_per_node=8)
            await sim.start()
            try:
                async with _controller(server, client, sim, quick_config(webhook=False)) as system:
                    await system.apply(quota("legacy", 2, 8))

                    async def legacy_queue() -> bool:
                        out = await system.akubectl("get", "queue", "legacy", "-n", c.SYSTEM_NAMESPACE, check=False)
                        return "NotFound" not in out

                    await system.wait_for(legacy_queue, what="the ElasticQuota's Queue")
                await system.apply(namespace("tree-r"))
                await create(system, tree(gpus("team-r", 2, 8, namespaces=["tree-r"])))
                async with _controller(server, client, sim, quick_config(webhook=False)) as system:
                    await system.apply(pytorch_job("r1", gpus_per_pod=2, namespace="tree-r"))
                    await system.wait_phase("r1-py-qu", c.Phase.RUNNING, namespace="tree-r")

                    async def legacy_queue_gone() -> bool:
                        return not await legacy_queue()

                    await system.wait_for(legacy_queue_gone, what="the set-aside quota's Queue removed")
            finally:
                await sim.stop()
    finally:
        await server.stop()
