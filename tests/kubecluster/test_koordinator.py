"""Beside Koordinator, as the guide's users run us: koord-scheduler schedules the pods (in
kube-scheduler's place, with its chart's configuration) and koord-manager's webhooks check
the ElasticQuotas, on the real control plane with kwok nodes and the training operator."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from koordqueue.api import constants as c
from koordqueue.realcluster.cluster import KOORDINATOR_NAMESPACE, RealCluster, install_crds
from tests.controller.conftest import SEED, System, running_system
from tests.realcluster import reset

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]
SEED_UNIT = "pytorch-training-job-py-qu"


@pytest.fixture(scope="module")
def koordinator_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    state = Path(os.environ.get("KOORD_QUEUE_KOORDINATOR_STATE") or tmp_path_factory.mktemp("koordinator"))
    cluster = RealCluster(state, koordinator=True)
    cluster.start()
    try:
        install_crds(cluster)  # ours, but for ElasticQuota: Koordinator's is there first, and stays
        yield cluster
    finally:
        cluster.stop()
        print(f"\nKoordinator's control plane logs: {cluster.logs}")


@pytest.fixture
def koordinator(koordinator_cluster: RealCluster) -> Iterator[RealCluster]:
    reset(koordinator_cluster)
    yield koordinator_cluster


async def test_the_seed_flow_beside_koordinator(koordinator: RealCluster, tmp_path: Path) -> None:
    async with running_system(tmp_path, cluster=koordinator) as system:
        await seed_flow(system)


async def seed_flow(system: System) -> None:
    out = await system.akubectl("apply", "-f", str(SEED))
    assert "elasticquota.scheduling.sigs.k8s.io/pytorch-team-a created" in out
    quota = await system.get_json("elasticquota", "pytorch-team-a")
    # koord-manager's mutating webhook saw it: Koordinator's defaults are on the stored quota.
    assert quota["metadata"]["labels"].get("quota.scheduling.koordinator.sh/parent") == "koordinator-root-quota", quota
    await system.wait_phase(SEED_UNIT, c.Phase.RUNNING, timeout=60)

    async def pods_bound() -> list[dict[str, object]] | None:
        pods = (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=pytorch-training-job"))["items"]
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = await system.wait_for(pods_bound, 60, "koord-scheduler to bind the seed's two pods")
    # By koord-scheduler, the only scheduler running (under the default scheduler's name); its
    # ElasticQuota plugin's request annotation on the quota, below, is its own mark too.
    assert isinstance(system.server, RealCluster)
    assert "koord-scheduler" in system.server.processes and "kube-scheduler" not in system.server.processes
    # Every pod carries the quota its unit was charged to, and one gang of all of them.
    for pod in pods:
        meta = pod["metadata"]  # type: ignore[index]
        assert meta["labels"][c.LABEL_QUOTA_NAME] == "pytorch-team-a", meta
        assert meta["annotations"][c.ANNOTATION_GANG_NAME] == "pytorch-training-job", meta
        assert meta["annotations"][c.ANNOTATION_GANG_MIN_AVAILABLE] == "2", meta
    # koord-scheduler counts them in that quota, as we do (its annotation on the quota), and
    # not in its default quota, where the pods of no quota go.

    async def koordinator_request() -> dict[str, str] | None:
        quotas = {q["metadata"]["name"]: q for q in (await system.get_json("elasticquotas", "-A"))["items"]}
        request = json.loads(quotas["pytorch-team-a"]["metadata"].get("annotations", {}).get(
            "quota.scheduling.koordinator.sh/request", "{}"))
        return quotas if request.get(c.GPU) == "2" else None

    quotas = await system.wait_for(koordinator_request, 60, "koord-scheduler to count the pods in pytorch-team-a")
    default_request = json.loads(quotas[c.KOORDINATOR_DEFAULT_QUOTA]["metadata"].get("annotations", {}).get(
        "quota.scheduling.koordinator.sh/request", "{}"))
    assert default_request.get("cpu") in (None, "0"), default_request
    assert {c.KOORDINATOR_ROOT_QUOTA, c.KOORDINATOR_SYSTEM_QUOTA, c.KOORDINATOR_DEFAULT_QUOTA} <= set(quotas)
    # Koordinator's own quotas are not teams': no Queue of ours, no warning about them.
    queues = {q["metadata"]["name"] for q in (await system.get_json("queues", "-n", c.SYSTEM_NAMESPACE))["items"]}
    assert queues == {"pytorch-team-a", "pytorch-training-queue"}
    warned = json.loads(await system.akubectl("get", "events", "-n", KOORDINATOR_NAMESPACE, "-o", "json"))["items"]
    assert [e["message"] for e in warned if e["type"] == "Warning"] == []
