"""KubeRay's RayJob on the simulated cluster: a Ray cluster of a head and worker groups, its
jobDeploymentStatus from Initializing to Running to Complete, suspension taking the cluster down."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.simcluster.cluster import SimCluster
from tests.simcluster.conftest import PODS, wait_for

pytestmark = pytest.mark.timeout(60)
RAYJOBS = Resource(c.RAY_GROUP, "v1", c.RAY_PLURAL)
SAMPLE = Path(__file__).parents[1] / "jobs" / "data" / "rayjob.yaml"


def rayjob(name: str, duration: float | None = None, suspend: bool = False, fail: bool = False,
           shutdown: bool = True) -> dict[str, Any]:
    """KubeRay's sample RayJob (its head and a group of 2 workers; the TPU group left out)."""
    job = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    job["metadata"] = {"name": name, "namespace": "default", "annotations": {}}
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"] = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][:1]
    job["spec"]["shutdownAfterJobFinishes"] = shutdown
    if duration is not None:
        job["metadata"]["annotations"][c.ANNOTATION_SIM_DURATION] = str(duration)
    if fail:
        job["metadata"]["annotations"][c.ANNOTATION_SIM_FAIL] = c.TRUE
    if suspend:
        job["spec"]["suspend"] = True
    return job


async def cluster_pods(client: KubeClient, job: str) -> list[dict[str, Any]]:
    """The pods of the RayJob's Ray cluster: KubeRay labels them with its cluster (ray.io/cluster),
    never with the RayJob, and our operator likewise; the pods it owns (it makes no RayCluster)."""
    found = await client.list(PODS, namespace="default", label_selector=c.LABEL_RAY_CLUSTER)
    pods = [p for p in found.items if not p["metadata"].get("deletionTimestamp") and
            any(o["kind"] == c.RAY_JOB_KIND and o["name"] == job for o in p["metadata"]["ownerReferences"])]
    for pod in pods:
        assert not {c.LABEL_RAY_ORIGINATED_FROM_CR_NAME, c.LABEL_RAY_ORIGINATED_FROM_CRD} & set(pod["metadata"]["labels"])
    return pods


async def status_of(client: KubeClient, name: str) -> dict[str, Any]:
    return (await client.get(RAYJOBS, name, namespace="default")).get("status") or {}


async def test_a_rayjob_runs_on_its_ray_cluster_and_completes(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(RAYJOBS, rayjob("ray", duration=1.5), namespace="default")

    async def running() -> dict[str, Any] | None:
        status = await status_of(client, "ray")
        return status if status.get("jobDeploymentStatus") == "Running" else None

    status = await wait_for(running, "the RayJob Running", timeout=20)
    assert status["jobStatus"] == "RUNNING" and re.fullmatch(r"ray-[a-z0-9]{5}", status["rayClusterName"])  # KubeRay's
    pods = await cluster_pods(client, "ray")
    roles = sorted((p["metadata"]["labels"][c.LABEL_RAY_NODE_TYPE], p["metadata"]["labels"][c.LABEL_RAY_GROUP])
                   for p in pods)
    assert roles == [("head", "headgroup"), ("worker", "small-group"), ("worker", "small-group")]
    assert all(p["metadata"]["labels"][c.LABEL_RAY_CLUSTER] == status["rayClusterName"] for p in pods)
    assert all(p["status"]["phase"] == "Running" for p in pods)
    head = next(p for p in pods if p["metadata"]["labels"][c.LABEL_RAY_NODE_TYPE] == "head")
    assert head["metadata"]["name"].startswith(status["rayClusterName"] + "-head-")
    assert head["metadata"]["annotations"][c.ANNOTATION_GANG_MIN_AVAILABLE] == "3"  # all placed at once

    async def complete() -> dict[str, Any] | None:
        status = await status_of(client, "ray")
        return status if status.get("jobDeploymentStatus") == "Complete" else None

    status = await wait_for(complete, "the RayJob Complete", timeout=20)
    assert status["jobStatus"] == "SUCCEEDED" and status["endTime"]

    async def cluster_down() -> bool:  # shutdownAfterJobFinishes
        return not await cluster_pods(client, "ray")

    await wait_for(cluster_down, "the Ray cluster taken down", timeout=20)


async def test_a_suspended_rayjob_has_no_cluster_until_resumed(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(RAYJOBS, rayjob("later", suspend=True), namespace="default")

    async def suspended() -> bool:
        return (await status_of(client, "later")).get("jobDeploymentStatus") == "Suspended"

    await wait_for(suspended, "the RayJob Suspended")
    assert await cluster_pods(client, "later") == []
    await client.patch(RAYJOBS, "later", {"spec": {"suspend": False}}, namespace="default")

    async def three_running() -> bool:
        pods = await cluster_pods(client, "later")
        return len(pods) == 3 and all(p["status"]["phase"] == "Running" for p in pods)

    await wait_for(three_running, "the Ray cluster's 3 pods running", timeout=20)
    await client.patch(RAYJOBS, "later", {"spec": {"suspend": True}}, namespace="default")

    async def down_again() -> bool:
        return not await cluster_pods(client, "later") and await suspended()

    await wait_for(down_again, "the cluster taken down on suspend", timeout=20)


async def test_a_failing_rayjob_fails(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(RAYJOBS, rayjob("broken", duration=0.5, fail=True, shutdown=False), namespace="default")

    async def failed() -> dict[str, Any] | None:
        status = await status_of(client, "broken")
        return status if status.get("jobDeploymentStatus") == "Failed" else None

    status = await wait_for(failed, "the RayJob Failed", timeout=20)
    assert status["jobStatus"] == "FAILED"
    workers = [p for p in await cluster_pods(client, "broken")
               if p["metadata"]["labels"][c.LABEL_RAY_NODE_TYPE] == "worker"]
    assert len(workers) == 2  # no shutdownAfterJobFinishes: the cluster stays up
