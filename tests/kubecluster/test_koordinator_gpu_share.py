"""Beside Koordinator with its GPU sharing: koord-manager's pod webhook rewrites a pod's
share of a GPU (`koordinator.sh/gpu: 50`), koord-scheduler's DeviceShare plugin places it
on a GPU of the Device objects published for the kwok nodes (as koordlet would), and its
ElasticQuota plugin charges it to the quota. We charge the job's unit what koord-scheduler
charges, resource by resource (docs/gpus.md, `jobs/podrequest.py`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.quantity import format_resource_list, parse_resource_list
from koordqueue.realcluster.cluster import NodeShape, RealCluster, install_crds
from tests.controller.conftest import pytorch_job, quick_config, running_system
from tests.realcluster import reset

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

NODES = NodeShape()
GPU_MEMORY = "80Gi"  # per GPU
TEAM = "team-share"
SHARE = 50  # percent of one GPU, per pod
# What a pod of `koordinator.sh/gpu: 50` is charged once koord-manager's webhook rewrote it.
CHARGED_PER_POD = {c.KOORD_GPU_CORE: SHARE, c.KOORD_GPU_MEMORY_RATIO: SHARE, c.KOORD_GPU_SHARED: 1}
# And one of `koordinator.sh/gpu: 200`: two whole GPUs, shared 2 (the ratio / 100).
CHARGED_TWO_GPUS = {c.KOORD_GPU_CORE: 200, c.KOORD_GPU_MEMORY_RATIO: 200, c.KOORD_GPU_SHARED: 2}


@pytest.fixture(scope="module")
def koordinator_gpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """Koordinator's control plane with koord-manager's pod mutating webhook registered too."""
    state = Path(os.environ.get("KOORD_QUEUE_KOORDINATOR_STATE") or tmp_path_factory.mktemp("koordinator-gpu"))
    cluster = RealCluster(state, nodes=NODES, koordinator=True, koordinator_pods=True)
    cluster.start()
    try:
        install_crds(cluster)
        reset(cluster)
        publish_gpus(cluster)
        yield cluster
    finally:
        cluster.stop()
        print(f"\nKoordinator's control plane logs: {cluster.logs}")


def publish_gpus(cluster: RealCluster) -> None:
    """What koordlet and koord-manager's node resource controller publish for a node of GPUs:
    its Device (one healthy GPU entry per card, with Koordinator's shares of it) and the
    node's allocatable in Koordinator's GPU resources (`gpudeviceresource`, with
    EnableSyncGPUSharedResource's gpu.shared)."""
    gib = int(GPU_MEMORY.removesuffix("Gi"))
    for i in range(NODES.count):
        name = f"{NODES.prefix}-{i}"
        cluster.apply({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": name},
            "spec": {"devices": [{
                "type": "gpu", "id": f"GPU-{name}-{minor}", "minor": minor, "health": True,
                "resources": {c.KOORD_GPU_CORE: "100", c.KOORD_GPU_MEMORY_RATIO: "100",
                              c.KOORD_GPU_MEMORY: GPU_MEMORY}} for minor in range(NODES.gpus)]}})
        shares = str(100 * NODES.gpus)
        allocatable = {c.KOORD_GPU: shares, c.KOORD_GPU_CORE: shares, c.KOORD_GPU_MEMORY_RATIO: shares,
                       c.KOORD_GPU_SHARED: shares, c.KOORD_GPU_MEMORY: f"{gib * NODES.gpus}Gi"}
        cluster.request("PATCH", f"/api/v1/nodes/{name}/status",
                        {"status": {"allocatable": allocatable, "capacity": allocatable}},
                        content_type="application/merge-patch+json")


def share_quota() -> dict[str, Any]:
    """A team's quota in Koordinator's GPU-share resources (koord-scheduler charges a pod only
    in the resources its quota's max names)."""
    low = {"cpu": "8", "memory": "16Gi", c.KOORD_GPU_CORE: "200", c.KOORD_GPU_MEMORY_RATIO: "200",
           c.KOORD_GPU_SHARED: "4"}
    high = {"cpu": "16", "memory": "32Gi", c.KOORD_GPU_CORE: "400", c.KOORD_GPU_MEMORY_RATIO: "400",
            c.KOORD_GPU_SHARED: "8"}
    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": TEAM, "namespace": "default",
                         "labels": {c.LABEL_QUOTA_PARENT: c.KOORDINATOR_ROOT_QUOTA}},
            "spec": {"min": low, "max": high}}


def gpu_share_job(name: str, share: int, workers: int) -> dict[str, Any]:
    """The seed's PyTorchJob, a master and `workers`, each pod `koordinator.sh/gpu: share`."""
    job = pytorch_job(name, workers=workers, quota_name=TEAM)
    for role in job["spec"]["pytorchReplicaSpecs"].values():
        resources = role["template"]["spec"]["containers"][0]["resources"]
        for part in ("requests", "limits"):
            resources[part] = {"cpu": "1", "memory": "1Gi", c.KOORD_GPU: str(share)}
    return job


async def test_gpu_share_jobs_are_charged_alike_by_koord_scheduler(koordinator_gpus: RealCluster,
                                                                  tmp_path: Path) -> None:
    # Our status.used is not written (its refresh never comes): status.used is koord-scheduler's alone.
    config = quick_config(quota_status_refresh_seconds=3600.0)
    async with running_system(tmp_path, cluster=koordinator_gpus, config=config) as system:
        await system.apply(share_quota())
        await system.apply(gpu_share_job("halves", SHARE, workers=1), gpu_share_job("twos", 200, workers=0))
        for job, count, charged, cores in (("halves", 2, CHARGED_PER_POD, [str(SHARE)]),
                                           ("twos", 1, CHARGED_TWO_GPUS, ["100", "100"])):
            await system.wait_phase(f"{job}-py-qu", c.Phase.RUNNING, timeout=60)

            async def pods_bound(job: str = job, count: int = count) -> list[dict[str, Any]] | None:
                pods = (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}={job}"))["items"]
                return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None

            pods = await system.wait_for(pods_bound, 90, f"koord-scheduler to bind {job}'s pods")
            for pod in pods:
                # koord-manager's webhook rewrote the share; koord-scheduler's DeviceShare placed it on GPUs.
                requests = pod["spec"]["containers"][0]["resources"]["requests"]
                assert c.KOORD_GPU not in requests, requests
                assert {k: requests.get(k) for k in charged} == {k: str(v) for k, v in charged.items()}, requests
                allocated = json.loads(pod["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocated"])
                assert [d["resources"][c.KOORD_GPU_CORE] for d in allocated["gpu"]] == cores, allocated
                assert pod["metadata"]["labels"][c.LABEL_QUOTA_NAME] == TEAM

        ours = system.controller.shared.engine.quota_status()[TEAM].used
        resources = sorted(share_quota()["spec"]["max"])
        expected = {"cpu": 3000, "memory": 3 * 2**30 * 1000,
                    **{name: (2 * CHARGED_PER_POD[name] + CHARGED_TWO_GPUS[name]) * 1000 for name in CHARGED_PER_POD}}
        assert {r: ours.get(r, 0) for r in resources} == expected, ours

        mine = format_resource_list({r: ours.get(r, 0) for r in resources})
        seen: dict[str, Any] = {}

        async def koordinator_charged_alike() -> dict[str, Any] | None:
            # koord-scheduler writes the quota's used and request as it goes (pod by pod, a status
            # sync behind): read them again until they hold every pod, or the wait's timeout says
            # what they held last.
            quota = await system.get_json("elasticquota", TEAM)
            seen["used"] = (quota.get("status") or {}).get("used") or {}
            seen["request"] = json.loads((quota["metadata"].get("annotations") or {}).get(
                "quota.scheduling.koordinator.sh/request", "{}"))
            alike = all(normal(seen[part], resources) == normal(mine, resources) for part in ("used", "request"))
            return dict(seen) if alike else None

        try:
            theirs = await system.wait_for(koordinator_charged_alike, 60, "koord-scheduler to charge the pods alike")
        except AssertionError:
            raise AssertionError(f"koord-scheduler charged {seen}, ours {mine}") from None
        print(f"\ncharged for a job of two half-GPU pods and one of a pod of two GPUs: ours {mine}; koord-scheduler's used "
              f"{theirs['used']}, request {theirs['request']}")
        for part in ("used", "request"):
            assert normal(theirs[part], resources) == normal(mine, resources), (part, theirs[part], mine)


def normal(amounts: dict[str, str], resources: list[str]) -> dict[str, int]:
    """Amounts by resource, in milli-units, zero where absent (quantities written either way)."""
    parsed = parse_resource_list(amounts)
    return {r: parsed.get(r, 0) for r in resources}
