"""A RayJob sent to a team with GPU flavors (docs/gpus.md), on both control planes: admitted
into its A100 flavor, it is resumed with the flavor's node selector on its head's and each
worker group's pod template, so its Ray cluster's pods run on A100 nodes only (the embedded
plane's KubeRay makes them; the real plane runs no KubeRay, so its templates are checked).
Before, a RayJob was resumed with nothing pinned: its pods ran on any model, charged to A100."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.simcluster.test_rayjob import rayjob

from .conftest import System, quota
from .test_gpu_flavors import A100, H100, PRODUCT, gpu_nodes

pytestmark = [pytest.mark.timeout(240), pytest.mark.both_control_planes]


def team() -> list[dict[str, Any]]:
    return [
        quota("team", 24, 24, is_parent=True, annotations={c.ANNOTATION_FLAVOR_ORDER: "team-a100,team-h100"}),
        quota("team-h100", 8, 8, parent="team", annotations={c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={H100}"}),
        quota("team-a100", 16, 16, parent="team", annotations={c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={A100}"}),
    ]


async def test_a_rayjob_admitted_into_the_a100_flavor_has_its_pods_pinned_to_a100(system: System,
                                                                                  control_plane: str) -> None:
    nodes = await gpu_nodes(system)
    model = {nodes[0]: H100, nodes[1]: A100}
    for node, product in model.items():
        await system.akubectl("label", "node", node, "--overwrite", f"{PRODUCT}={product}")
    try:
        await system.apply(*team())
        job = rayjob("ray")
        job["metadata"]["labels"] = {c.LABEL_QUOTA_NAME: "team"}
        await system.apply(job)

        async def resumed() -> dict[str, Any] | None:
            found = await system.get_json("rayjob", "ray")
            return found if found["spec"].get("suspend") is False else None

        found = await system.wait_for(resumed, 90, "the RayJob resumed")
        status = (await system.unit("ray-ray-qu"))["status"]
        assert status["admissions"][0]["domain"] == {PRODUCT: A100}
        cluster = found["spec"]["rayClusterSpec"]
        templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
        assert [t["spec"].get("nodeSelector") for t in templates] == [{PRODUCT: A100}] * 2
        if control_plane == "kube":
            return  # (no KubeRay there to make the pods)

        async def bound() -> list[str] | None:
            pods = (await system.get_json("pods", "-l", c.LABEL_RAY_CLUSTER))["items"]
            where = [p["spec"].get("nodeName") for p in pods]
            return where if len(where) == 3 and all(where) else None

        where = await system.wait_for(bound, 60, "the Ray cluster's 3 pods bound")
        assert {model.get(node) for node in where} == {A100}, where
    finally:
        for node in model:
            await system.akubectl("label", "node", node, f"{PRODUCT}-", check=False)
