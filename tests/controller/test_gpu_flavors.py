"""GPU models as flavors through the controller (issue 32, docs/gpus.md), on both control
planes: a team whose parent quota has an H100 flavor (8) and an A100 flavor (16), its
nodes labelled nvidia.com/gpu.product, sends 20 one-GPU jobs to the parent: 8 run on the
H100 node, 12 on the A100 nodes, each unit admitted into its flavor and each job's pods
pinned to it in the write that resumed it; a job selecting H100 waits while H100 is full,
its message saying so; a flavor with a bad selector is not used, and says why."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordqueue.api import constants as c

from .conftest import System, pytorch_job, quota

pytestmark = [pytest.mark.timeout(240), pytest.mark.both_control_planes]

PRODUCT = "nvidia.com/gpu.product"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


def team() -> list[dict[str, Any]]:
    return [
        quota("team", 24, 24, is_parent=True, annotations={c.ANNOTATION_FLAVOR_ORDER: "team-h100,team-a100"}),
        quota("team-h100", 8, 8, parent="team", annotations={c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={H100}"}),
        quota("team-a100", 16, 16, parent="team", annotations={c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={A100}"}),
    ]


def selecting(job: dict[str, Any], product: str) -> dict[str, Any]:
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["nodeSelector"] = {PRODUCT: product}
    return job


async def gpu_nodes(system: System) -> list[str]:
    nodes = (await system.get_json("nodes"))["items"]
    return sorted(n["metadata"]["name"] for n in nodes if int(n["status"]["allocatable"].get(c.GPU, "0")) == 8)


async def pods_by_node(system: System) -> dict[str, str]:
    """Job name -> the node its (one) pod is bound to, for the bound pods."""
    out = {}
    for pod in (await system.get_json("pods"))["items"]:
        node = pod["spec"].get("nodeName")
        job = (pod["metadata"].get("labels") or {}).get(c.LABEL_JOB_NAME)
        if node and job:
            out[job] = node
    return out


async def test_twenty_jobs_fill_h100_then_a100_and_one_selecting_h100_waits(system: System) -> None:
    nodes = await gpu_nodes(system)
    assert len(nodes) == 4
    model = {nodes[0]: H100, nodes[1]: A100, nodes[2]: A100}  # the fourth has no model label: no flavor's
    for node, product in model.items():
        await system.akubectl("label", "node", node, "--overwrite", f"{PRODUCT}={product}")
    try:
        await system.apply(*team())
        jobs = [f"j{i:02d}" for i in range(20)]
        await system.apply(*(pytorch_job(name, gpus_per_pod=1, workers=0, quota_name="team") for name in jobs))
        for name in jobs:
            await system.wait_phase(f"{name}-py-qu", c.Phase.RUNNING, timeout=120)
        flavors = {}
        for name in jobs:
            status = (await system.unit(f"{name}-py-qu"))["status"]
            job = await system.get_json("pytorchjob", name)
            selector = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"]
            flavors[name] = selector[PRODUCT]
            assert status["admissions"][0]["domain"] == {PRODUCT: selector[PRODUCT]}
        assert sorted(flavors.values()).count(H100) == 8
        assert sorted(flavors.values()).count(A100) == 12
        where: dict[str, str] = {}

        async def all_bound() -> bool:
            nonlocal where
            where = await pods_by_node(system)
            return all(name in where for name in jobs)

        await system.wait_for(all_bound, 90, "the 20 jobs' pods bound")
        assert {name: model.get(where[name]) for name in jobs} == flavors  # each on its flavor's nodes
        quotas = {q["metadata"]["name"]: q for q in (await system.get_json("elasticquota"))["items"]}
        assert quotas["team-h100"]["status"]["used"][c.GPU] == "8"
        assert quotas["team-a100"]["status"]["used"][c.GPU] == "12"
        # H100 is full: a job selecting it waits (A100 has room), and says so.
        await system.apply(selecting(pytorch_job("picky", gpus_per_pod=1, workers=0, quota_name="team"), H100))
        said = ""

        async def waits() -> bool:
            nonlocal said
            status = (await system.unit("picky-py-qu")).get("status", {})
            said = status.get("message", "")
            return status.get("phase") == c.Phase.ENQUEUED and said.startswith("waiting for flavor team-h100")

        await system.wait_for(waits, 60, "picky to wait for H100")
        assert said == ("waiting for flavor team-h100 of quota team (its pods select it; the other flavors disagree): "
                        f"team-h100 ({PRODUCT}={H100}): waiting for quota team-h100: nvidia.com/gpu asks 1, used 8 "
                        "of max 8")
        # One H100 job ends: the picky job takes its place.
        h100_job = next(name for name in jobs if flavors[name] == H100)
        await system.akubectl("delete", "pytorchjob", h100_job)
        await system.wait_phase("picky-py-qu", c.Phase.RUNNING, timeout=60)
        assert (await system.unit("picky-py-qu"))["status"]["admissions"][0]["domain"] == {PRODUCT: H100}
    finally:
        for node in model:
            await system.akubectl("label", "node", node, f"{PRODUCT}-", check=False)


async def test_a_flavor_with_a_bad_selector_is_not_used_and_says_why(system: System) -> None:
    bad = quota("odd-h100", 8, 8, parent="odd", annotations={c.ANNOTATION_NODE_SELECTOR: "gpu in (h100)"})
    await system.apply(quota("odd", 8, 8, is_parent=True, annotations={c.ANNOTATION_FLAVOR_ORDER: "odd-l40s"}), bad)
    said: list[str] = []

    async def told() -> bool:
        nonlocal said
        said = [e.get("message", "") for e in await system.events("odd-h100")]
        return any("not used" in m and c.ANNOTATION_NODE_SELECTOR in m for m in said)

    await system.wait_for(told, 30, "a Warning event on odd-h100")
    assert any("'gpu in (h100)' is not a node label equality term key=value" in m for m in said), said


async def test_an_h100_lent_to_another_team_is_taken_back(system: System) -> None:
    nodes = await gpu_nodes(system)
    model = {nodes[0]: H100, nodes[1]: A100}  # one node of each model, 8 GPUs each; the others have none
    for node, product in model.items():
        await system.akubectl("label", "node", node, "--overwrite", f"{PRODUCT}={product}")

    def flavored(team: str) -> list[dict[str, Any]]:
        return [
            quota(team, 8, 16, is_parent=True, annotations={c.ANNOTATION_FLAVOR_ORDER: f"{team}-h100,{team}-a100"}),
            quota(f"{team}-h100", 4, 8, parent=team, annotations={c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={H100}"}),
            quota(f"{team}-a100", 4, 8, parent=team, annotations={c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={A100}"}),
        ]

    try:
        await system.apply(*flavored("alpha"), *flavored("beta"))
        # beta takes the whole H100 node: 4 of its own min, 4 of alpha's, lent while alpha is idle.
        borrowed = [f"b{i}" for i in range(8)]
        await system.apply(*(selecting(pytorch_job(name, gpus_per_pod=1, workers=0, quota_name="beta"), H100)
                             for name in borrowed))
        for name in borrowed:
            await system.wait_phase(f"{name}-py-qu", c.Phase.RUNNING, timeout=90)
        # alpha wants one H100 back, within its min: one of beta's is preempted for it.
        await system.apply(selecting(pytorch_job("mine", gpus_per_pod=1, workers=0, quota_name="alpha"), H100))
        await system.wait_phase("mine-py-qu", c.Phase.RUNNING, timeout=90)
        phases = [await system.phase(f"{name}-py-qu") for name in borrowed]
        assert phases.count(c.Phase.RUNNING) == 7, phases
        (victim,) = [name for name, phase in zip(borrowed, phases, strict=True) if phase != c.Phase.RUNNING]
        assert (await system.unit(f"{victim}-py-qu"))["status"]["attempts"] == 1
        told = [e.get("message", "") for e in await system.events(f"{victim}-py-qu")
                if e.get("reason") == c.EventReason.PREEMPTED]
        assert any("beta-h100" in m and "default/mine" in m for m in told), told
    finally:
        for node in model:
            await system.akubectl("label", "node", node, f"{PRODUCT}-", check=False)


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
FLAVOR_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def tolerating(job: dict[str, Any], toleration: dict[str, str]) -> dict[str, Any]:
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["tolerations"] = [toleration]
    return job


async def test_a_flavors_tolerations_go_on_its_pods_and_its_nodes_taints_count(system: System) -> None:
    """The H100 node is tainted. team's H100 flavor tolerates the taint (koord-queue/tolerations):
    a job sent to team is admitted into it, its pods get the toleration beside their own in the
    write that pins them, and run there. plain's H100 flavor does not: placement-aware
    admission sees its only node tainted, and plain's job goes to its A100 flavor."""
    nodes = await gpu_nodes(system)
    model = {nodes[0]: H100, nodes[1]: A100}
    for node, product in model.items():
        await system.akubectl("label", "node", node, "--overwrite", f"{PRODUCT}={product}")
    await system.akubectl("patch", "node", nodes[0], "--type", "merge", "-p", json.dumps({"spec": {"taints": [GPU_TAINT]}}))

    def flavored(team: str, tolerations: list[dict[str, str]] | None) -> list[dict[str, Any]]:
        h100 = {c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={H100}"}
        if tolerations is not None:
            h100[c.ANNOTATION_FLAVOR_TOLERATIONS] = json.dumps(tolerations)
        return [
            quota(team, 8, 16, is_parent=True, annotations={c.ANNOTATION_FLAVOR_ORDER: f"{team}-h100,{team}-a100"}),
            quota(f"{team}-h100", 4, 8, parent=team, annotations=h100),
            quota(f"{team}-a100", 4, 8, parent=team, annotations={c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={A100}"}),
        ]

    own = {"key": "example.com/spot", "operator": "Exists"}
    try:
        await system.apply(*flavored("team", [FLAVOR_TOLERATION]), *flavored("plain", None))
        await system.apply(tolerating(pytorch_job("tolerant", gpus_per_pod=1, workers=0, quota_name="team"), own),
                           pytorch_job("plain-job", gpus_per_pod=1, workers=0, quota_name="plain"))
        for name in ("tolerant", "plain-job"):
            await system.wait_phase(f"{name}-py-qu", c.Phase.RUNNING, timeout=90)
        assert (await system.unit("tolerant-py-qu"))["status"]["admissions"][0]["domain"] == {PRODUCT: H100}
        assert (await system.unit("plain-job-py-qu"))["status"]["admissions"][0]["domain"] == {PRODUCT: A100}
        job = await system.get_json("pytorchjob", "tolerant")
        template = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        assert template["tolerations"] == [own, FLAVOR_TOLERATION]
        assert template["nodeSelector"] == {PRODUCT: H100}
        plain = (await system.get_json("pytorchjob", "plain-job"))["spec"]["pytorchReplicaSpecs"]["Master"]
        assert "tolerations" not in plain["template"]["spec"]

        async def bound() -> dict[str, str] | None:
            where = await pods_by_node(system)
            return where if {"tolerant", "plain-job"} <= set(where) else None

        where = await system.wait_for(bound, 60, "both jobs' pods bound")
        assert (where["tolerant"], where["plain-job"]) == (nodes[0], nodes[1])
    finally:
        await system.akubectl("patch", "node", nodes[0], "--type", "merge", "-p", '{"spec": {"taints": null}}',
                              check=False)
        for node in model:
            await system.akubectl("label", "node", node, f"{PRODUCT}-", check=False)


async def test_a_flavor_with_bad_tolerations_is_not_used_and_says_why(system: System) -> None:
    bad = quota("odd-h100", 8, 8, parent="odd", annotations={
        c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={H100}",
        c.ANNOTATION_FLAVOR_TOLERATIONS: '[{"key": "nvidia.com/gpu", "operator": "Exists", "value": "yes"}]'})
    await system.apply(quota("odd", 8, 8, is_parent=True), bad)
    said: list[str] = []

    async def told() -> bool:
        nonlocal said
        said = [e.get("message", "") for e in await system.events("odd-h100")]
        return any("not used" in m and c.ANNOTATION_FLAVOR_TOLERATIONS in m for m in said)

    await system.wait_for(told, 30, "a Warning event on odd-h100")
    assert any("value must be empty with operator Exists" in m for m in said), said


async def test_a_running_job_cannot_move_its_pods_off_the_flavor_it_was_admitted_into(system: System) -> None:
    """A tenant who edits the node selector the admission pinned (or removes it, or the
    annotation recording it) on a running job would have its pods made again on another
    model, charged to this one: the validating webhook refuses it, unless the job is
    suspended in the same update (then queued again)."""
    (node, *_) = await gpu_nodes(system)
    await system.akubectl("label", "node", node, "--overwrite", f"{PRODUCT}={H100}")
    try:
        await system.apply(*team(), pytorch_job("sneaky", gpus_per_pod=1, workers=0, quota_name="team"))
        await system.wait_phase("sneaky-py-qu", c.Phase.RUNNING, timeout=60)
        job = await system.get_json("pytorchjob", "sneaky")
        assert job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] == {PRODUCT: H100}
        template = {"spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": {"nodeSelector": {}}}}}}}
        for value in (A100, None):
            template["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] = {PRODUCT: value}
            said = await system.akubectl("patch", "pytorchjob", "sneaky", "--type=merge", "-p", json.dumps(template),
                                         check=False)
            assert "denied the request" in said and f"Master nodeSelector {PRODUCT}" in said, said
        said = await system.akubectl("annotate", "pytorchjob", "sneaky", f"{c.ANNOTATION_PLACED}-", check=False)
        assert "denied the request" in said and f"annotation {c.ANNOTATION_PLACED}" in said, said
        job = await system.get_json("pytorchjob", "sneaky")
        assert job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] == {PRODUCT: H100}
        # Suspended in the same update: let through; let run again by the queue, which writes
        # the flavor's pin again in the write that resumes it.
        template["spec"]["runPolicy"] = {"suspend": True}
        await system.akubectl("patch", "pytorchjob", "sneaky", "--type=merge", "-p", json.dumps(template))

        async def pinned_again() -> bool:
            spec = (await system.get_json("pytorchjob", "sneaky"))["spec"]
            return spec["runPolicy"].get("suspend") is not True and \
                spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"].get("nodeSelector") == {PRODUCT: H100}

        await system.wait_for(pinned_again, 60, "sneaky let run again, pinned to H100")
    finally:
        await system.akubectl("label", "node", node, f"{PRODUCT}-", check=False)
