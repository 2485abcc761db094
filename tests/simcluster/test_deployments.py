"""Deployments on the simulated cluster, driven by kubectl 1.32 as on a cluster: a ReplicaSet and pods
come, `rollout status` finishes, READY counts, a new replica count and a new image roll, delete takes
it all away."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import pytest

from koordqueue.apiserver.server import APIServer
from koordqueue.kube.client import KubeClient
from koordqueue.simcluster.cluster import SimCluster
from tests.simcluster.conftest import wait_for

pytestmark = [pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
              pytest.mark.timeout(90)]


WEB = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: "nginx:1.27"}]
"""


async def kubectl(server: APIServer, *args: str, stdin: str | None = None) -> str:
    result = await asyncio.to_thread(subprocess.run, ["kubectl", "--kubeconfig", str(server.kubeconfig_path), *args],
                                     input=stdin, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


async def rows(server: APIServer, *args: str) -> list[list[str]]:
    return [line.split() for line in (await kubectl(server, "get", *args, "--no-headers")).splitlines()]


async def test_a_deployment_rolls_out_scales_rolls_and_goes(server: APIServer, client: KubeClient) -> None:
    async with SimCluster(client, workloads=True):
        await rolls_out_scales_rolls_and_goes(server)


async def rolls_out_scales_rolls_and_goes(server: APIServer) -> None:
    await kubectl(server, "apply", "-f", "-", stdin=WEB)
    await kubectl(server, "rollout", "status", "deployment/web", "--timeout=30s")
    [deployment] = await rows(server, "deployment")
    assert deployment[:4] == ["web", "2/2", "2", "2"]
    [rs] = await rows(server, "replicaset")
    assert rs[0].startswith("web-") and rs[1:4] == ["2", "2", "2"]
    pods = await rows(server, "pods", "-l", "app=web")
    assert len(pods) == 2 and all(p[0].startswith(rs[0] + "-") and p[1:3] == ["1/1", "Running"] for p in pods)
    described = await kubectl(server, "describe", "deployment", "web")
    assert "StrategyType:           RollingUpdate" in described
    assert f"NewReplicaSet:   {rs[0]} (2/2 replicas created)" in described
    assert f"Scaled up replica set {rs[0]} from 0 to 2" in described
    assert "Available      True    MinimumReplicasAvailable" in described
    assert "Progressing    True    NewReplicaSetAvailable" in described
    assert (await kubectl(server, "logs", "deployment/web")).startswith("started: container nginx of pod default/")

    await kubectl(server, "patch", "deployment/web", "-p", '{"spec": {"replicas": 1}}')  # (no scale subresource)

    async def one_pod() -> bool:
        return len(await rows(server, "pods", "-l", "app=web")) == 1 and \
            (await rows(server, "deployment"))[0][1] == "1/1"

    await wait_for(one_pod, "the Deployment scaled to 1 pod", timeout=20)

    await kubectl(server, "set", "image", "deployment/web", "nginx=nginx:1.28")
    await kubectl(server, "rollout", "status", "deployment/web", "--timeout=30s")

    async def rolled() -> list[list[str]] | None:
        sets = {r[0]: r[1:4] for r in await rows(server, "replicaset")}
        return sets if len(sets) == 2 and sets[rs[0]] == ["0", "0", "0"] else None

    sets = await wait_for(rolled, "the old ReplicaSet scaled to 0", timeout=20)
    [new] = [name for name in sets if name != rs[0]]
    pod = json.loads(await kubectl(server, "get", "pods", "-l", "app=web", "-o", "json"))["items"]
    assert [p["spec"]["containers"][0]["image"] for p in pod] == ["nginx:1.28"]
    assert (await kubectl(server, "get", "deployment", "web", "-o", "jsonpath={.status.updatedReplicas}")) == "1"
    assert (await kubectl(server, "get", "rs", new, "-o",
                          "jsonpath={.metadata.annotations.deployment\\.kubernetes\\.io/revision}")) == "2"

    await kubectl(server, "delete", "deployment", "web")

    async def all_gone() -> bool:
        return not await rows(server, "replicaset") and not await rows(server, "pods", "-l", "app=web")

    await wait_for(all_gone, "the ReplicaSets and pods removed with the Deployment", timeout=20)
