"""Ray jobs under KubeRay's own operator (built from e2e/kuberay), on the real control plane
with kwok: we suspend a RayJob and a RayCluster on creation and admit them against a quota;
KubeRay's operator, not a simulation, makes their Ray clusters' pods, which kwok runs. Its
CRDs are KubeRay's (config/crd), never our open ones over them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.realcluster.cluster import RealCluster, install_crds
from tests.controller.conftest import System, quick_config, quota, running_system
from tests.controller.test_lifecycle import queue
from tests.realcluster import reset

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]
TEAM = "ray-team"  # 4 GPUs, min = max: one Ray cluster of 4 GPUs at a time


@pytest.fixture(scope="module")
def kuberay_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    state = Path(os.environ.get("KOORD_QUEUE_KUBERAY_STATE") or tmp_path_factory.mktemp("kuberay"))
    cluster = RealCluster(state, kuberay=True)  # the training operator too: our controller watches its kinds
    cluster.start()
    try:
        install_crds(cluster)  # ours, but for ray.io: KubeRay's are there first, and stay
        yield cluster
    finally:
        cluster.stop()
        print(f"\nKubeRay's control plane logs: {cluster.logs}")


@pytest.fixture
def kuberay(kuberay_cluster: RealCluster) -> Iterator[RealCluster]:
    reset(kuberay_cluster)
    yield kuberay_cluster


def ray_cluster_spec(gpus_per_worker: int) -> dict[str, Any]:
    """A head and two workers of `gpus_per_worker` GPUs, as KubeRay's samples write them."""
    def pod(name: str, gpus: int) -> dict[str, Any]:
        resources = {"cpu": "1", "memory": "1Gi", **({c.GPU: str(gpus)} if gpus else {})}
        return {"spec": {"containers": [{"name": name, "image": "rayproject/ray:2.41.0",
                                         "resources": {"requests": resources, "limits": resources}}]}}

    return {"rayVersion": "2.41.0",
            "headGroupSpec": {"rayStartParams": {}, "template": pod("ray-head", 0)},
            "workerGroupSpecs": [{"groupName": "gpu-group", "replicas": 2, "minReplicas": 2, "maxReplicas": 2,
                                  "rayStartParams": {}, "template": pod("ray-worker", gpus_per_worker)}]}


def meta(name: str) -> dict[str, Any]:
    return {"name": name, "namespace": "default", "labels": {c.LABEL_QUOTA_NAME: TEAM}}


def rayjob(name: str) -> dict[str, Any]:
    return {"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_JOB_KIND, "metadata": meta(name),
            "spec": {"entrypoint": "python -c 'print(1)'", "shutdownAfterJobFinishes": True,
                     "rayClusterSpec": ray_cluster_spec(2)}}


def raycluster(name: str) -> dict[str, Any]:
    return {"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_CLUSTER_KIND, "metadata": meta(name),
            "spec": ray_cluster_spec(2)}


async def ray_pods(system: System, cluster: str) -> list[dict[str, Any]]:
    pods = (await system.get_json("pods", "-n", "default", "-l", f"{c.LABEL_RAY_CLUSTER}={cluster}"))["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


async def running_pods(system: System, cluster: str) -> list[dict[str, Any]] | None:
    """The Ray cluster's head and two workers, bound and Running (kwok's doing), else None."""
    pods = await ray_pods(system, cluster)
    ok = len(pods) == 3 and all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running" for p in pods)
    return pods if ok else None


async def rayjob_status(system: System, name: str) -> dict[str, Any]:
    return dict((await system.get_json("rayjob", name)).get("status") or {})


async def raycluster_state(system: System, name: str) -> str:
    return str(((await system.get_json("raycluster", name)).get("status") or {}).get("state") or "")


async def test_rayjobs_and_rayclusters_queued_for_kuberays_operator(kuberay: RealCluster, tmp_path: Path) -> None:
    """A RayJob admitted at once; a RayCluster waits for its quota and is admitted when the
    RayJob goes; a second RayJob waits for the RayCluster likewise. KubeRay holds the waiting
    ones suspended (no pods) and makes the admitted ones' pods."""
    async with running_system(tmp_path, cluster=kuberay) as system:
        # KubeRay's CRDs, not ours: theirs have a schema (ours are open) and controller-gen's mark.
        for plural in (c.RAY_PLURAL, c.RAY_CLUSTER_PLURAL):
            crd = await system.get_json("crd", f"{plural}.{c.RAY_GROUP}")
            assert "controller-gen.kubebuilder.io/version" in crd["metadata"].get("annotations", {}), crd["metadata"]
            spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            assert {"rayClusterSpec" if plural == c.RAY_PLURAL else "headGroupSpec", "suspend"} <= set(
                spec.get("properties", {})), plural
        await system.apply(quota(TEAM, 4, 4))

        # The RayJob, queued on creation (our webhook's mark), admitted into the empty quota:
        # KubeRay's operator makes its RayCluster (not queued again: the RayJob is) and pods.
        await system.apply(rayjob("ray-first"))
        stored = await system.get_json("rayjob", "ray-first")
        assert stored["metadata"]["annotations"][c.ANNOTATION_JOB_HAS_ENQUEUED] == c.TRUE, stored["metadata"]
        await system.wait_phase("ray-first-ray-qu", c.Phase.RUNNING, timeout=60)

        async def rayjob_running() -> dict[str, Any] | None:
            status = await rayjob_status(system, "ray-first")
            return status if status.get("jobDeploymentStatus") == c.RAY_DEPLOYMENT_RUNNING else None

        status = await system.wait_for(rayjob_running, 60, "KubeRay to run the RayJob (its cluster ready)")
        made = status["rayClusterName"]
        pods = await system.wait_for(lambda: running_pods(system, made), 30, "the RayJob's 3 pods Running")
        assert sorted(p["metadata"]["labels"][c.LABEL_RAY_NODE_TYPE] for p in pods) == ["head", "worker", "worker"]
        cluster = await system.get_json("raycluster", made)
        # KubeRay names the RayJob on the cluster it made for it (on the cluster only: its pods
        # carry ray.io/cluster, not ray.io/originated-from-cr-name, unlike our simulated operator's).
        assert cluster["metadata"]["labels"][c.LABEL_RAY_ORIGINATED_FROM_CR_NAME] == "ray-first"
        assert [o["kind"] for o in cluster["metadata"]["ownerReferences"]] == [c.RAY_JOB_KIND]
        assert cluster["status"]["state"] == c.RAY_CLUSTER_STATE_READY, cluster["status"]
        units = {u["metadata"]["name"] for u in (await system.get_json("queueunits", "-n", "default"))["items"]}
        # Nor is KubeRay's submitter Job (K8sJobMode), which the RayJob controls: one unit.
        jobs = (await system.get_json("jobs.batch", "-n", "default"))["items"]
        assert [o["kind"] for j in jobs for o in j["metadata"]["ownerReferences"]] == [c.RAY_JOB_KIND], jobs
        assert units == {"ray-first-ray-qu"}, units

        # The RayCluster: 4 GPUs more than the quota has left. Suspended on creation, it waits;
        # KubeRay holds it suspended and makes none of its pods.
        await system.apply(raycluster("rc-second"))
        stored = await system.get_json("raycluster", "rc-second")
        assert stored["spec"].get("suspend") is True, stored["spec"]
        await system.wait_phase("rc-second-raycluster-qu", c.Phase.ENQUEUED, timeout=30)

        async def cluster_suspended() -> bool:
            return await raycluster_state(system, "rc-second") == c.RAY_CLUSTER_STATE_SUSPENDED

        await system.wait_for(cluster_suspended, 30, "KubeRay to hold rc-second suspended")
        assert await ray_pods(system, "rc-second") == []
        assert await system.phase("rc-second-raycluster-qu") == c.Phase.ENQUEUED

        # The RayJob goes (KubeRay's finalizer, then the garbage collector takes its cluster): its
        # quota is freed, the RayCluster admitted, and KubeRay makes its pods and calls it ready.
        await system.akubectl("delete", "rayjob", "ray-first", "--wait=false")
        await system.wait_phase("rc-second-raycluster-qu", c.Phase.RUNNING, timeout=90)
        assert (await system.get_json("raycluster", "rc-second"))["spec"].get("suspend") is False
        await system.wait_for(lambda: running_pods(system, "rc-second"), 60, "rc-second's 3 pods Running")
        assert await raycluster_state(system, "rc-second") == c.RAY_CLUSTER_STATE_READY

        # A second RayJob now waits for the RayCluster: suspended on creation, KubeRay makes no
        # cluster for it (its deployment Suspended) until the RayCluster goes.
        await system.apply(rayjob("ray-third"))
        stored = await system.get_json("rayjob", "ray-third")
        assert stored["spec"].get("suspend") is True, stored["spec"]

        async def rayjob_suspended() -> bool:
            status = await rayjob_status(system, "ray-third")
            return status.get("jobDeploymentStatus") == c.RAY_DEPLOYMENT_SUSPENDED

        await system.wait_phase("ray-third-ray-qu", c.Phase.ENQUEUED, timeout=30)
        await system.wait_for(rayjob_suspended, 30, "KubeRay to hold ray-third suspended")
        assert await system.phase("ray-third-ray-qu") == c.Phase.ENQUEUED
        made_for = (await system.get_json("rayclusters", "-l", f"{c.LABEL_RAY_ORIGINATED_FROM_CR_NAME}=ray-third"))
        assert made_for["items"] == [] and not (await rayjob_status(system, "ray-third")).get("rayClusterName")
        await system.akubectl("delete", "raycluster", "rc-second", "--wait=false")
        await system.wait_phase("ray-third-ray-qu", c.Phase.RUNNING, timeout=90)
        third = await rayjob_status(system, "ray-third")
        await system.wait_for(lambda: running_pods(system, third["rayClusterName"]), 60, "ray-third's pods Running")


GATE = "example.com/held"  # a scheduling gate: kube-scheduler leaves the pod Pending until it is removed


async def test_a_rayjobs_unit_follows_its_pods_on_kuberay(kuberay: RealCluster, tmp_path: Path) -> None:
    """KubeRay labels a RayJob's pods with its Ray cluster alone (ray.io/cluster, not the RayJob):
    our controller finds them through the cluster's name in the RayJob's status, and their
    changes reach the RayJob. Its workers are held Pending by a scheduling gate: KubeRay never
    readies the cluster, nor writes the RayJob again, so only the pods' own events can tell
    its unit that the head runs and the workers wait; its Queue, with wait-for-pods-running,
    admits nothing more meanwhile. The gates lifted, the pods run, the unit is Running with its
    3 pods counted, and the next job is admitted."""
    config = quick_config(wait_for_pods_running_seconds=240.0)  # (not sent back while the test holds it)
    async with running_system(tmp_path, cluster=kuberay, config=config) as system:
        await system.apply(quota(TEAM, 8, 8), queue("ray-careful", TEAM, annotations={
            c.ANNOTATION_WAIT_FOR_PODS_RUNNING: c.TRUE}))
        gated = rayjob("ray-gated")
        gated["metadata"]["annotations"] = {c.ANNOTATION_QUEUE: "ray-careful"}
        for group in gated["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
            group["template"]["spec"]["schedulingGates"] = [{"name": GATE}]
        await system.apply(gated)
        await system.wait_phase("ray-gated-ray-qu", c.Phase.DEQUEUED, timeout=60)

        async def cluster_named() -> str | None:
            return (await rayjob_status(system, "ray-gated")).get("rayClusterName") or None

        made = await system.wait_for(cluster_named, 60, "KubeRay to name the RayJob's Ray cluster")

        async def head_up() -> list[dict[str, Any]] | None:
            pods = await ray_pods(system, made)
            phases = sorted((p["metadata"]["labels"][c.LABEL_RAY_NODE_TYPE], p["status"].get("phase")) for p in pods)
            return pods if phases == [("head", "Running"), ("worker", "Pending"), ("worker", "Pending")] else None

        pods = await system.wait_for(head_up, 60, "the head Running and the gated workers Pending")
        for pod in pods:  # labelled by KubeRay: nothing on them names the RayJob
            assert not {c.LABEL_RAY_ORIGINATED_FROM_CR_NAME, c.LABEL_RAY_ORIGINATED_FROM_CRD} & set(
                pod["metadata"]["labels"]), pod["metadata"]["labels"]

        async def counted(running: int, pending: int, per_role: list[int]) -> bool:
            status = (await system.unit("ray-gated-ray-qu")).get("status") or {}
            return status.get("podState") == {"running": running, "pending": pending} and \
                [a.get("running") for a in status.get("admissions") or ()] == per_role

        await system.wait_for(lambda: counted(1, 2, [1, 0]), 30, "the unit to count the head running, 2 waiting")
        assert (await rayjob_status(system, "ray-gated")).get("jobDeploymentStatus") == c.RAY_DEPLOYMENT_INITIALIZING
        assert await system.phase("ray-gated-ray-qu") == c.Phase.DEQUEUED

        # wait-for-pods-running: the next job of the Queue waits for ray-gated's pods (quota to spare).
        after = rayjob("ray-after")
        after["metadata"]["annotations"] = {c.ANNOTATION_QUEUE: "ray-careful"}
        await system.apply(after)
        await system.wait_phase("ray-after-ray-qu", c.Phase.ENQUEUED, timeout=30)

        async def held() -> bool:
            status = (await system.unit("ray-after-ray-qu")).get("status") or {}
            return "waits for the pods of default/ray-gated-ray-qu to run" in str(status.get("message") or "")

        await system.wait_for(held, 30, "the next job held by ray-gated's pods")
        assert await system.phase("ray-after-ray-qu") == c.Phase.ENQUEUED

        # The gates lifted: kube-scheduler binds the workers, kwok runs them, KubeRay readies the
        # cluster and runs the RayJob; the unit counts 3 pods running, and the Queue goes on.
        remove = '[{"op": "remove", "path": "/spec/schedulingGates"}]'
        for pod in pods:
            if pod["spec"].get("schedulingGates"):
                await system.akubectl("patch", "pod", pod["metadata"]["name"], "--type=json", "-p", remove)
        await system.wait_phase("ray-gated-ray-qu", c.Phase.RUNNING, timeout=60)
        await system.wait_for(lambda: counted(3, 0, [1, 2]), 30, "the unit to count its 3 pods running")

        async def admitted() -> bool:
            return await system.phase("ray-after-ray-qu") in (c.Phase.DEQUEUED, c.Phase.RUNNING)

        await system.wait_for(admitted, 60, "the next job admitted once ray-gated's pods run")
