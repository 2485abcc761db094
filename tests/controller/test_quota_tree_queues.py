"""The Queues of an ElasticQuotaTree's leaves, named as Koord-Queue names them (its
ElasticQuota plugin, elastic_quota_tree.go: convertQuotaToQueueName and createQueues): the
quota's path from the root, lowercased, '/' and '_' turned into '-', with a trailing '-'
(trimmed from the front to 58 characters), as the generateName of a Queue in the system
namespace labelled create-by-koordqueue=true and annotated with the quota's full name and its
parent's name. One per leaf, and no other Queues there; old Queues of ours (named like the
quota) are removed, Koord-Queue's own are adopted, never duplicated."""

from __future__ import annotations

import re
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.resources import QUEUES

from .conftest import System, SystemFactory, pytorch_job
from .test_quota_tree import create, gpus, namespace, tree

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]

GENERATED = r"[a-z0-9]{5}"  # what kube-apiserver appends to a generateName


def e2e_tree() -> dict[str, Any]:
    """Koord-Queue's e2e shape: a leaf under the root, and two under a parent (one with '_')."""
    return tree(gpus("team-a", 2, 4, namespaces=["kq-a"]),
                gpus("team-b", 4, 8, children=[gpus("b-1", 2, 4, namespaces=["kq-b1"]),
                                               gpus("B_2", 2, 4, namespaces=["kq-b2"])]))


EXPECTED = {"root/team-a": ("root-team-a-", "root"), "root/team-b/b-1": ("root-team-b-b-1-", "team-b"),
            "root/team-b/B_2": ("root-team-b-b-2-", "team-b")}


async def system_queues(system: System) -> list[dict[str, Any]]:
    return list((await system.get_json("queue", "-n", c.SYSTEM_NAMESPACE))["items"])


async def koord_queue_named(system: System) -> dict[str, dict[str, Any]]:
    """The system namespace's Queues by quota full name, once they are exactly Koord-Queue's."""
    queues = await system_queues(system)
    by_path: dict[str, dict[str, Any]] = {}
    for queue in queues:
        meta = queue["metadata"]
        path = (meta.get("annotations") or {}).get(c.ANNOTATION_QUOTA_FULL_NAME)
        assert path in EXPECTED, f"a Queue Koord-Queue would not have: {meta['name']} ({path})"
        prefix, parent = EXPECTED[path]
        assert re.fullmatch(re.escape(prefix) + GENERATED, meta["name"]), meta["name"]
        assert meta.get("generateName") == prefix
        assert meta["labels"][c.LABEL_CREATED_BY_KOORD_QUEUE] == c.TRUE
        assert meta["annotations"][c.ANNOTATION_PARENT_QUOTA_NAME] == parent
        assert path not in by_path, f"two Queues for {path}"
        by_path[path] = queue
    assert set(by_path) == set(EXPECTED), sorted(by_path)
    return by_path


async def test_a_trees_leaves_get_koord_queues_queue_names_and_their_jobs_queue_there(system: System) -> None:
    await system.apply(namespace("kq-a"), namespace("kq-b1"), namespace("kq-b2"))
    await create(system, e2e_tree())
    queues = await system.wait_for(lambda: koord_queue_named(system), what="Koord-Queue's Queues, one per leaf")
    out = await system.akubectl("get", "queue", "-n", c.SYSTEM_NAMESPACE, "-o", "name")
    assert len(out.split()) == 3, out
    # A job in team-a's namespace is queued in team-a's Queue: the second waits there (max 4).
    await system.apply(pytorch_job("first", gpus_per_pod=1, namespace="kq-a"))
    await system.wait_phase("first-py-qu", c.Phase.RUNNING, namespace="kq-a")
    await system.apply(pytorch_job("second", gpus_per_pod=2, namespace="kq-a"))
    name = queues["root/team-a"]["metadata"]["name"]

    async def listed() -> bool:
        queue = await system.get_json("queue", name, "-n", c.SYSTEM_NAMESPACE)
        active = ((queue.get("status") or {}).get("queueItemDetails") or {}).get("active") or []
        assert [(i["name"], i["namespace"]) for i in active] == [("second-py-qu", "kq-a")], queue.get("status")
        return True

    await system.wait_for(listed, what=f"the waiting job listed in Queue {name}")
    # Queues are steady: nothing made again, nothing added (a later sync changes nothing).
    await system.wait_phase("second-py-qu", c.Phase.ENQUEUED, namespace="kq-a")
    again = await koord_queue_named(system)
    assert {p: q["metadata"]["uid"] for p, q in again.items()} == {p: q["metadata"]["uid"] for p, q in queues.items()}


async def test_old_queues_of_ours_are_removed_and_koord_queues_own_adopted(start_system: SystemFactory) -> None:
    """As an upgrade finds them: the Queue an earlier version of ours made for a leaf (named
    like the quota), the Queue Koord-Queue made for another leaf (kept, with its name), and
    the one it made for the root (not a leaf: removed)."""
    kq_made = {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
               "metadata": {"generateName": "root-team-b-b-1-", "namespace": c.SYSTEM_NAMESPACE,
                            "labels": {c.LABEL_CREATED_BY_KOORD_QUEUE: c.TRUE},
                            "annotations": {c.ANNOTATION_QUOTA_FULL_NAME: "root/team-b/b-1",
                                            c.ANNOTATION_PARENT_QUOTA_NAME: "team-b"}},
               "spec": {"queuePolicy": "Priority"}}
    kq_root = {**kq_made, "metadata": {**kq_made["metadata"], "generateName": "root-",
                                       "annotations": {c.ANNOTATION_QUOTA_FULL_NAME: "root"}}}
    ours = {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
            "metadata": {"name": "team-a", "namespace": c.SYSTEM_NAMESPACE,
                         "labels": {c.LABEL_QUOTA_NAME: "team-a"}},
            "spec": {"queuePolicy": "Priority", "priority": 0}}
    adopted: list[str] = []

    async def before(system: System) -> None:
        await system.apply(namespace(c.SYSTEM_NAMESPACE), namespace("kq-a"), namespace("kq-b1"),
                           namespace("kq-b2"))
        await create(system, e2e_tree())
        await system.apply(ours)
        for obj in (kq_made, kq_root):
            made = await system.client.create(QUEUES, obj, namespace=c.SYSTEM_NAMESPACE)
            adopted.append(made["metadata"]["name"])

    async with start_system(prepare=before) as system:
        queues = await system.wait_for(lambda: koord_queue_named(system), what="exactly Koord-Queue's Queues")
        assert queues["root/team-b/b-1"]["metadata"]["name"] == adopted[0], "Koord-Queue's Queue adopted"
        assert queues["root/team-b/b-1"]["metadata"]["labels"].get(c.LABEL_QUOTA_NAME) == "b-1"
        await system.apply(pytorch_job("after", gpus_per_pod=1, namespace="kq-b1"))
        await system.wait_phase("after-py-qu", c.Phase.RUNNING, namespace="kq-b1")


async def test_the_trees_queues_go_with_it_and_the_elastic_quotas_come_back(system: System) -> None:
    from .conftest import quota

    await system.apply(quota("legacy", 1, 2))
    await system.wait_for(lambda: system.get_json("queue", "legacy", "-n", c.SYSTEM_NAMESPACE),
                          what="the ElasticQuota's Queue, named like it")
    await system.apply(namespace("kq-a"), namespace("kq-b1"), namespace("kq-b2"))
    await create(system, e2e_tree())
    await system.wait_for(lambda: koord_queue_named(system), what="only the tree's Queues")
    await system.akubectl("delete", c.ELASTIC_QUOTA_TREE_PLURAL, "elasticquotatree", "-n", c.QUOTA_TREE_NAMESPACE)

    async def back() -> bool:
        names = sorted(q["metadata"]["name"] for q in await system_queues(system))
        assert names == ["legacy"], names
        return True

    await system.wait_for(back, what="the tree's Queues removed and the ElasticQuota's back")
