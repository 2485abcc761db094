"""The simulated scheduler honours a pod's node rules as kube-scheduler does: nodeSelector,
required node affinity, tolerations against taints, cordoned nodes; and says so in its words.

Every placement asserted here differs from first fit by resources alone (sim-node-0 first),
so a scheduler ignoring the rules fails these tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.kube.client import KubeClient
from koordqueue.simcluster.cluster import SimCluster
from koordqueue.simcluster.nodes import ready_node
from tests.simcluster.conftest import NODES, PODS, Object, conditions, wait_for

pytestmark = pytest.mark.timeout(30)
RACK = "example.com/rack"


@pytest.fixture
async def racks(client: KubeClient) -> AsyncIterator[SimCluster]:
    """Four nodes of 8 GPUs; sim-node-i in rack ri (numbered, for Gt and Lt)."""
    async with SimCluster(client) as sim:
        for i in range(4):
            await set_node(client, sim, f"sim-node-{i}", {"metadata": {"labels": {RACK: str(i)}}})
        yield sim


async def set_node(client: KubeClient, sim: SimCluster, name: str, patch: Object) -> None:
    """Patch the node and wait until the simulated scheduler sees it as patched."""
    node = await client.patch(NODES, name, patch)
    expected = ready_node(node)

    async def seen() -> bool:
        return sim.kubelet is not None and sim.kubelet.room.nodes.get(name) == expected

    await wait_for(seen, f"the scheduler to see {name} patched")


def pod(name: str, gpus: int = 1, gang: tuple[str, int] | None = None, **spec: Any) -> Object:
    annotations = {}
    if gang is not None:
        annotations = {c.ANNOTATION_GANG_NAME: gang[0], c.ANNOTATION_GANG_MIN_AVAILABLE: str(gang[1])}
    container = {"name": "main", "image": "busybox",
                 "resources": {"requests": {c.GPU: str(gpus)}, "limits": {c.GPU: str(gpus)}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"containers": [container], **spec}}


def required(*terms: list[Object], fields: list[Object] | None = None) -> Object:
    """Required node affinity: each term's matchExpressions (and matchFields on the first)."""
    out = [{"matchExpressions": exprs} for exprs in terms]
    if fields is not None:
        out = [{"matchFields": fields}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": out}}}


async def node_of(client: KubeClient, name: str) -> str:
    async def bound() -> str | None:
        found: Object = await client.get(PODS, name, namespace="default")
        return found["spec"].get("nodeName") or None

    return await wait_for(bound, f"{name} bound")


async def unschedulable_message(client: KubeClient, name: str) -> str:
    async def marked() -> str | None:
        found: Object = await client.get(PODS, name, namespace="default")
        cond = conditions(found).get(c.POD_CONDITION_SCHEDULED, {})
        return cond.get("message") if cond.get("reason") == c.POD_REASON_UNSCHEDULABLE else None

    message = await wait_for(marked, f"{name} marked Unschedulable")
    found = await client.get(PODS, name, namespace="default")
    assert not found["spec"].get("nodeName") and found["status"]["phase"] == c.POD_PENDING
    return message


async def test_node_selector_lands_only_on_a_matching_node(client: KubeClient, racks: SimCluster) -> None:
    for i in range(3):
        await client.create(PODS, pod(f"p{i}", nodeSelector={RACK: "2"}), namespace="default")
    assert [await node_of(client, f"p{i}") for i in range(3)] == ["sim-node-2"] * 3


async def test_a_selector_no_node_matches_waits_saying_so(client: KubeClient, racks: SimCluster) -> None:
    await client.create(PODS, pod("lost", nodeSelector={RACK: "9"}), namespace="default")
    assert await unschedulable_message(client, "lost") == (
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.")


async def test_required_affinity_in_notin_gt_and_match_fields(client: KubeClient, racks: SimCluster) -> None:
    cases = {
        "in": (required([{"key": RACK, "operator": "In", "values": ["3", "1"]}]), "sim-node-1"),
        "notin": (required([{"key": RACK, "operator": "NotIn", "values": ["0", "1"]}]), "sim-node-2"),
        "gt": (required([{"key": RACK, "operator": "Gt", "values": ["2"]}]), "sim-node-3"),
        "exists-and-lt": (required([{"key": RACK, "operator": "Exists"}, {"key": RACK, "operator": "Lt",
                                                                          "values": ["3"]},
                                    {"key": RACK, "operator": "NotIn", "values": ["0"]}]), "sim-node-1"),
        "any-term": (required([{"key": "missing", "operator": "Exists"}],
                              [{"key": RACK, "operator": "In", "values": ["2"]}]), "sim-node-2"),
        "fields": (required(fields=[{"key": "metadata.name", "operator": "In", "values": ["sim-node-3"]}]),
                   "sim-node-3"),
    }
    for name, (affinity, _) in cases.items():
        await client.create(PODS, pod(name, affinity=affinity), namespace="default")
    assert {name: await node_of(client, name) for name in cases} == {name: n for name, (_, n) in cases.items()}

    nowhere = required([{"key": "missing", "operator": "DoesNotExist"}, {"key": RACK, "operator": "Lt",
                                                                          "values": ["0"]}])
    await client.create(PODS, pod("nowhere", affinity=nowhere), namespace="default")
    assert await unschedulable_message(client, "nowhere") == (
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.")


async def test_tainted_nodes_take_only_pods_that_tolerate_them(client: KubeClient, racks: SimCluster) -> None:
    gpu_only = {"spec": {"taints": [{"key": "gpu", "value": "true", "effect": c.TAINT_NO_SCHEDULE}]}}
    await set_node(client, racks, "sim-node-0", gpu_only)
    await set_node(client, racks, "sim-node-1", {"spec": {"taints": [
        {"key": "gpu", "value": "true", "effect": c.TAINT_NO_EXECUTE}]}})
    await set_node(client, racks, "sim-node-2", {"spec": {"taints": [
        {"key": "spot", "value": "", "effect": "PreferNoSchedule"}]}})  # does not block

    await client.create(PODS, pod("plain"), namespace="default")
    await client.create(PODS, pod("tolerant", tolerations=[{"key": "gpu", "operator": "Exists"}]),
                        namespace="default")
    await client.create(PODS, pod("schedule-only", tolerations=[
        {"key": "gpu", "operator": "Equal", "value": "true", "effect": c.TAINT_NO_SCHEDULE}]), namespace="default")
    assert await node_of(client, "plain") == "sim-node-2"
    assert await node_of(client, "tolerant") == "sim-node-0"
    # tolerates node 0's taint; node 1's NoExecute taint is another, not tolerated
    assert await node_of(client, "schedule-only") == "sim-node-0"

    # each node counted under the first rule it breaks, in kube-scheduler's words and order
    await set_node(client, racks, "sim-node-1", gpu_only)
    await client.create(PODS, pod("big", gpus=9, affinity=required(
        [{"key": RACK, "operator": "In", "values": ["0", "1", "3"]}])), namespace="default")
    assert await unschedulable_message(client, "big") == (
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node "
        "affinity/selector, 2 node(s) had untolerated taint {gpu: true}.")


async def test_a_cordoned_node_takes_only_pods_tolerating_the_cordon(client: KubeClient, racks: SimCluster) -> None:
    await set_node(client, racks, "sim-node-0", {"spec": {"unschedulable": True}})
    await client.create(PODS, pod("plain"), namespace="default")
    assert await node_of(client, "plain") == "sim-node-1"
    await client.create(PODS, pod("daemon", tolerations=[
        {"key": c.TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": c.TAINT_NO_SCHEDULE}]), namespace="default")
    assert await node_of(client, "daemon") == "sim-node-0"

    for i in range(1, 4):
        await set_node(client, racks, f"sim-node-{i}", {"spec": {"unschedulable": True}})
    await client.create(PODS, pod("late"), namespace="default")
    assert await unschedulable_message(client, "late") == "0/4 nodes are available: 4 node(s) were unschedulable."
    await set_node(client, racks, "sim-node-3", {"spec": {"unschedulable": None}})  # uncordoned: it goes there
    assert await node_of(client, "late") == "sim-node-3"


async def test_a_gang_that_fits_only_if_the_rules_are_ignored_waits(client: KubeClient, racks: SimCluster) -> None:
    # Three 8-GPU pods, all to racks 0 and 1: two nodes for three pods. Four empty nodes
    # would take them all, so only the rules keep the gang waiting; then rack 2 joins.
    pinned = required([{"key": RACK, "operator": "In", "values": ["0", "1", "2"]}])
    await set_node(client, racks, "sim-node-2", {"spec": {"taints": [
        {"key": "gpu", "value": "true", "effect": c.TAINT_NO_SCHEDULE}]}})
    for i in range(3):
        await client.create(PODS, pod(f"g{i}", gpus=8, gang=("g", 3), affinity=pinned), namespace="default")
    messages = {await unschedulable_message(client, f"g{i}") for i in range(3)}
    assert messages == {
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had "
        "untolerated taint {gpu: true}. The gang of 3 pods waits until all of them fit."}
    pods = (await client.list(PODS, namespace="default")).items
    assert not [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")]  # none bound
    assert racks.kubelet is not None and racks.kubelet.room.free("sim-node-0")[c.GPU] == 8000  # none held

    await set_node(client, racks, "sim-node-2", {"spec": {"taints": None}})
    assert sorted([await node_of(client, f"g{i}") for i in range(3)]) == ["sim-node-0", "sim-node-1", "sim-node-2"]
