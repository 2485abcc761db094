"""Admit only what can be placed (issue 18), through the controller: the nodes (from the
Node informer) and the pods bound to them are the engine's inputs; a job whose pods fit
the quota but no node waits, saying so, and its pods never stay Pending; a job asking for
a topology domain is admitted with one chosen, recorded on its unit and pinned on its pod
templates before it is resumed, so the scheduler puts every pod there (kube-scheduler on
the real control plane; on the embedded one the simulated scheduler, which filters nodes
by the same rules); an elastic PyTorchJob is admitted with the workers that fit, and what
was changed on the job is put back when it is suspended again."""

from __future__ import annotations

import re
from typing import Any

import pytest

from koordqueue.api import constants as c

from .conftest import System, pytorch_job, quota

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

ZONE, RACK = c.LABEL_TOPOLOGY_ZONE, c.LABEL_TOPOLOGY_RACK


async def node_names(system: System) -> list[str]:
    nodes = (await system.get_json("nodes"))["items"]
    return sorted(n["metadata"]["name"] for n in nodes if int(n["status"]["allocatable"].get(c.GPU, "0")) == 8)


async def pods_of(system: System, job: str) -> list[dict[str, Any]]:
    return (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}={job}"))["items"]


def templates(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {role: spec["template"] for role, spec in job["spec"]["pytorchReplicaSpecs"].items()}


def with_topology(job: dict[str, Any], level: str, required: bool) -> dict[str, Any]:
    key = c.ANNOTATION_REQUIRED_TOPOLOGY if required else c.ANNOTATION_PREFERRED_TOPOLOGY
    for template in templates(job).values():
        template.setdefault("metadata", {}).setdefault("annotations", {})[key] = level
    return job


async def told(system: System, unit: str, pattern: str) -> str:
    said = ""

    async def waits_saying() -> bool:
        nonlocal said
        status = (await system.unit(unit)).get("status", {})
        said = status.get("message", "")
        return status.get("phase") == c.Phase.ENQUEUED and re.fullmatch(pattern, said) is not None

    await system.wait_for(waits_saying, what=f"{unit} to wait saying {pattern!r} (it says {said!r})")
    return said


async def test_a_job_the_quota_takes_but_no_node_waits_and_says_why(system: System) -> None:
    nodes = await node_names(system)
    await system.apply(quota("q", 0, 32))
    # One 6-GPU pod per node: 2 GPUs left on each, 8 in all.
    await system.apply(pytorch_job("spread", gpus_per_pod=6, workers=len(nodes) - 1, quota_name="q"))
    await system.wait_phase("spread-py-qu", c.Phase.RUNNING, timeout=60)
    await system.apply(pytorch_job("big", gpus_per_pod=8, workers=0, quota_name="q"))
    names = "|".join(map(re.escape, nodes))
    await told(system, "big-py-qu", r"quota q has room, but no node has 8 free nvidia\.com/gpu "
                                    rf"\(the most free on one node: 2, on ({names})\)")
    job = await system.get_json("pytorchjob", "big")
    assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE and await pods_of(system, "big") == []
    # Room on one node: it is admitted, and its pod runs (none of its pods waits for room).
    await system.akubectl("delete", "pytorchjob", "spread")
    await system.wait_phase("big-py-qu", c.Phase.RUNNING, timeout=60)

    async def running() -> bool:
        return [p["status"].get("phase") for p in await pods_of(system, "big")] == ["Running"]

    await system.wait_for(running, 60, "big's pod to run")


async def test_a_job_is_pinned_to_the_domain_chosen_and_unpinned_when_sent_back(system: System) -> None:
    nodes = await node_names(system)
    assert len(nodes) == 4
    where = {node: {ZONE: "az" if i < 2 else "bz", RACK: f"r{i % 2}"} for i, node in enumerate(nodes)}
    for node, labels in where.items():
        await system.akubectl("label", "node", node, "--overwrite", *(f"{k}={v}" for k, v in labels.items()))
    try:
        await system.apply(quota("pool", 32, 32, is_parent=True))
        await system.apply(quota("team-a", 32, 32, parent="pool"), quota("team-b", 0, 32, parent="pool"))
        # 3 pods of 8 GPUs in one zone: no zone has 3 nodes. It waits, and is never admitted.
        await system.apply(with_topology(pytorch_job("wide", gpus_per_pod=8, workers=2, quota_name="team-a"),
                                         ZONE, required=True))
        await told(system, "wide-py-qu", re.escape(
            "quota team-a has room, but no zone (topology.kubernetes.io/zone) has room for all its 3 pods "
            "(the most in one: 2, in az)"))
        # Half a node taken: first fit by resources alone would start the pair there.
        await system.apply(pytorch_job("half", gpus_per_pod=4, workers=0, quota_name="team-b"))
        await system.wait_phase("half-py-qu", c.Phase.RUNNING, timeout=60)
        # 2 pods of 4 GPUs in one rack (one node each here): a whole node.
        await system.apply(with_topology(pytorch_job("pair", gpus_per_pod=4, workers=1, quota_name="team-b"),
                                         RACK, required=True))
        await system.wait_phase("pair-py-qu", c.Phase.RUNNING, timeout=60)
        (admission, *_) = (await system.unit("pair-py-qu"))["status"]["admissions"]
        domain = admission["domain"]
        assert set(domain) == {ZONE, RACK}
        job = await system.get_json("pytorchjob", "pair")
        assert all(t["spec"]["nodeSelector"] == domain for t in templates(job).values())
        assert job["metadata"]["annotations"][c.ANNOTATION_PLACED]
        # the scheduler (kube-scheduler, or the simulated one) put them where the engine chose
        pods: list[dict[str, Any]] = []

        async def bound() -> bool:
            nonlocal pods
            pods = await pods_of(system, "pair")
            return len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods)

        await system.wait_for(bound, 60, "pair's 2 pods bound")
        assert {where[p["spec"]["nodeName"]][RACK] for p in pods} == {domain[RACK]}
        assert {where[p["spec"]["nodeName"]][ZONE] for p in pods} == {domain[ZONE]}
        await system.akubectl("delete", "pytorchjob", "half")
        # team-a takes back its min, all 4 nodes: pair (team-b, borrowing) is preempted, its job
        # suspended and its pod templates as the user wrote them (no nodeSelector).
        await system.akubectl("delete", "pytorchjob", "wide")
        await system.apply(pytorch_job("back", gpus_per_pod=8, workers=3, quota_name="team-a"))
        await system.wait_for(lambda: _unpinned(system), 60, "pair to be suspended and unpinned")
        await system.wait_phase("back-py-qu", c.Phase.RUNNING, timeout=60)
    finally:
        for node in nodes:
            await system.akubectl("label", "node", node, f"{ZONE}-", f"{RACK}-", check=False)


async def _unpinned(system: System) -> bool:
    job = await system.get_json("pytorchjob", "pair")
    return bool(job["metadata"]["annotations"].get(c.ANNOTATION_SUSPEND) == c.TRUE
                and c.ANNOTATION_PLACED not in job["metadata"]["annotations"]
                and all("nodeSelector" not in t["spec"] for t in templates(job).values()))


def elastic(name: str, workers: int, least: int, **kwargs: Any) -> dict[str, Any]:
    job = pytorch_job(name, workers=workers, **kwargs)
    job["spec"]["elasticPolicy"] = {"minReplicas": least, "maxReplicas": workers}
    return job


async def test_an_elastic_job_is_admitted_in_part_and_whole_again_after_a_preemption(system: System) -> None:
    await system.apply(quota("pool", 8, 8, is_parent=True))
    await system.apply(quota("team-a", 6, 8, parent="pool"), quota("team-b", 2, 8, parent="pool"))
    await system.apply(pytorch_job("first", gpus_per_pod=2, workers=0, quota_name="team-a"))
    await system.wait_phase("first-py-qu", c.Phase.RUNNING, timeout=60)
    # 1 Master + 3 Workers of 2 GPUs, at least 1 Worker: the pool has 6 GPUs left, for 2 Workers.
    await system.apply(elastic("flex", 3, 1, gpus_per_pod=2, quota_name="team-b"))
    await system.wait_phase("flex-py-qu", c.Phase.RUNNING, timeout=60)
    status = (await system.unit("flex-py-qu"))["status"]
    assert [(a["name"], a["replicas"]) for a in status["admissions"]] == [("master", 1), ("worker", 2)]
    assert status["admissionSummary"] == "master=1,worker=2"
    assert any(e["reason"] == c.EventReason.DEQUEUED and e["message"] == (
        "admitted into quota team-b through queue koord-queue/team-b; 2 of 3 worker pods (elastic)")
        for e in await system.events("flex-py-qu"))
    job = await system.get_json("pytorchjob", "flex")
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert (await system.unit("flex-py-qu"))["spec"]["podSet"][1]["count"] == 3  # the unit asks as the user wrote

    async def two_workers() -> bool:
        pods = await pods_of(system, "flex")
        return sorted(p["metadata"]["labels"][c.LABEL_REPLICA_TYPE] for p in pods) == ["master", "worker", "worker"]

    await system.wait_for(two_workers, 60, "flex's master and 2 workers")
    # team-a takes back its min (6): flex, borrowing 4, is preempted; its job is suspended with
    # its 3 Workers back.
    await system.apply(pytorch_job("back", gpus_per_pod=2, workers=1, quota_name="team-a"))
    await system.wait_phase("back-py-qu", c.Phase.RUNNING, timeout=60)

    async def restored() -> bool:
        job = await system.get_json("pytorchjob", "flex")
        return bool(job["metadata"]["annotations"].get(c.ANNOTATION_SUSPEND) == c.TRUE
                    and job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
                    and c.ANNOTATION_PLACED not in job["metadata"]["annotations"])

    await system.wait_for(restored, 60, "flex suspended with its 3 Workers")
    # The others gone, it is admitted again: with as many workers as fit when it is (the
    # pods of the jobs deleted may still be leaving their nodes), and runs with that many.
    await system.akubectl("delete", "pytorchjob", "first", "back")
    await system.wait_phase("flex-py-qu", c.Phase.RUNNING, timeout=60)
    status = (await system.unit("flex-py-qu"))["status"]
    (master, worker) = [(a["name"], a["replicas"]) for a in status["admissions"]]
    assert master == ("master", 1) and worker[0] == "worker" and 1 <= worker[1] <= 3
    job = await system.get_json("pytorchjob", "flex")
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == worker[1]
