"""The whole system in one process for controller tests: the embedded API server, the
simulated cluster and the controller (with its webhook registered, as `koord-queue up`
does), all talking HTTP; kubectl drives it for real. On the real control plane
(`control_plane == "kube"`, tests/realcluster.py) kube-apiserver, kwok and the training
operator take the embedded server's and the simulated cluster's places."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.apiserver.server import APIServer
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.manager import Manager
from koordqueue.controller.resources import UNITS
from koordqueue.kube.client import KubeClient
from koordqueue.kube.config import load_config
from koordqueue.kube.errors import KubeError
from koordqueue.manifests import all_crds
from koordqueue.realcluster.cluster import RealCluster
from koordqueue.simcluster.cluster import SimCluster
from koordqueue.up import controller_config, register_webhook

SEED = Path(__file__).parents[2] / "src" / "koordqueue" / "examples" / "seed.yaml"


def seed_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(SEED.read_text()) if d]


def quota(name: str, min_gpu: int, max_gpu: int, namespace: str = "default", parent: str | None = None,
          policy: str | None = None, weight: int | None = None, is_parent: bool = False,
          labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """An ElasticQuota in GPUs (with cpu and memory to spare)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                            "annotations": dict(annotations or {})}
    if parent:
        meta["labels"][c.LABEL_QUOTA_PARENT] = parent
    if policy:
        meta["labels"][c.LABEL_QUEUE_POLICY] = policy
    if is_parent:
        meta["labels"][c.LABEL_QUOTA_IS_PARENT] = c.TRUE
    if weight is not None:
        meta["annotations"][c.ANNOTATION_SHARED_WEIGHT] = json.dumps({c.GPU: str(weight)})
    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND, "metadata": meta,
            "spec": {"min": {c.GPU: str(min_gpu), "cpu": str(min_gpu * 4), "memory": f"{min_gpu * 8}Gi"},
                     "max": {c.GPU: str(max_gpu), "cpu": str(max_gpu * 4), "memory": f"{max_gpu * 8}Gi"}}}


def pytorch_job(name: str, gpus_per_pod: int = 1, workers: int = 1, namespace: str = "default",
                duration: float | None = None, priority: int | None = None, queue: str | None = None,
                quota_name: str | None = None, labels: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The seed's PyTorchJob (Master + Worker), resized and renamed."""
    job = copy.deepcopy(seed_docs()[2])
    meta = job["metadata"]
    meta["name"], meta["namespace"] = name, namespace
    meta["annotations"] = dict(annotations or {})
    meta["labels"] = dict(labels or {})
    if duration is not None:
        meta["annotations"][c.ANNOTATION_SIM_DURATION] = str(duration)
    if priority is not None:
        meta["annotations"][c.ANNOTATION_PRIORITY] = str(priority)
    if queue is not None:
        meta["annotations"][c.ANNOTATION_QUEUE] = queue
    if quota_name is not None:
        meta["labels"][c.LABEL_QUOTA_NAME] = quota_name
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    if workers == 0:
        del specs["Worker"]
    for role in specs.values():
        if duration is not None:
            # The real training operator copies a template's annotations to its pods, where kwok reads them.
            role["template"].setdefault("metadata", {}).setdefault("annotations", {})[
                c.ANNOTATION_SIM_DURATION] = str(duration)
        res = role["template"]["spec"]["containers"][0]["resources"]
        for part in ("requests", "limits"):
            res[part] = {"cpu": "1", "memory": "1Gi", c.GPU: str(gpus_per_pod)}
    return job


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> str:
    """kubectl 1.32, for real; its output (stdout then stderr)."""
    result = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args],
                            input=stdin, capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout + result.stderr


class System:
    """Handles on the running system, and the waits tests need. On the real control plane
    `server` is the RealCluster and `sim` is None."""

    def __init__(self, server: APIServer | RealCluster, client: KubeClient, manager: Manager,
                 sim: SimCluster | None) -> None:
        self.server = server
        self.client = client
        self.manager = manager
        self.sim = sim

    @property
    def controller(self) -> Any:
        assert self.manager.controller is not None
        return self.manager.controller

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        return kubectl(self.server.kubeconfig_path, *args, stdin=stdin, check=check)

    async def akubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        return await asyncio.to_thread(self.kubectl, *args, stdin=stdin, check=check)

    async def apply(self, *objs: dict[str, Any]) -> str:
        return await self.akubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(list(objs)))

    async def get_json(self, *args: str) -> dict[str, Any]:
        return json.loads(await self.akubectl("get", *args, "-o", "json"))

    async def unit(self, name: str, namespace: str = "default") -> dict[str, Any]:
        """The unit through the tests' own client, not a kubectl process: waits poll this every
        0.2 s, and a kubectl start (about 0.1 s, near 1 s at load 16) took the CPU from the
        controller under test. A failed read is an AssertionError, as kubectl's was, so that
        `wait_for` tries again."""
        try:
            return await self.client.get(UNITS, name, namespace=namespace)
        except KubeError as e:
            raise AssertionError(f"queueunit {namespace}/{name}: {e}") from e

    async def phase(self, name: str, namespace: str = "default") -> str:
        return str((await self.unit(name, namespace)).get("status", {}).get("phase", ""))

    async def wait_for(self, predicate: Callable[[], Awaitable[Any]], timeout: float = 30.0,
                       what: str = "") -> Any:
        deadline = asyncio.get_running_loop().time() + timeout
        last: Any = None
        while asyncio.get_running_loop().time() < deadline:
            try:
                last = await predicate()
                if last:
                    return last
            except (AssertionError, KeyError, json.JSONDecodeError) as e:
                last = e
            await asyncio.sleep(0.2)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")

    async def wait_phase(self, name: str, phase: str, namespace: str = "default", timeout: float = 30.0) -> None:
        async def reached() -> bool:
            return await self.phase(name, namespace) == phase

        await self.wait_for(reached, timeout, f"{namespace}/{name} to be {phase}")

    async def events(self, name: str, namespace: str = "default") -> list[dict[str, Any]]:
        listed = await self.get_json("events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")
        return list(listed["items"])


def quick_config(**overrides: Any) -> ControllerConfig:
    """`up`'s controller, with short timings so that tests are quick."""
    base = replace(controller_config(metrics_port=0, dashboard_port=0), dashboard=False,
                   quota_status_refresh_seconds=0.3, queue_status_refresh_seconds=0.5,
                   protect_seconds=0.0, backoff_base=1.0, backoff_cap=4.0)
    return replace(base, **overrides)


Prepare = Callable[["System"], Awaitable[None]]


@asynccontextmanager
async def _controller(server: APIServer | RealCluster, client: KubeClient, sim: SimCluster | None,
                      config: ControllerConfig | None, prepare: Prepare | None = None) -> AsyncIterator[System]:
    config = config or quick_config()
    if prepare is not None:  # what is there before the controller starts (with no webhook yet)
        await prepare(System(server, client, None, sim))  # type: ignore[arg-type]
    manager = Manager(client, config)
    task = asyncio.create_task(manager.run())
    try:
        await asyncio.wait_for(manager.endpoints_ready.wait(), 10)
        if manager.webhook is not None:
            await register_webhook(client, manager.webhook.port, manager.webhook.ca_pem, config.job_kinds,
                                   namespace_selector=config.namespace_selector,
                                   workload_kinds=config.workload_kinds)
        system = System(server, client, manager, sim)

        async def leading() -> bool:
            return manager.controller is not None and manager.controller.sync_done

        await system.wait_for(leading, 10, "the controller to sync")
        yield system
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def running_system(state: Path, nodes: int = 4, gpus_per_node: int = 8,
                         config: ControllerConfig | None = None, cluster: RealCluster | None = None,
                         prepare: Prepare | None = None) -> AsyncIterator[System]:
    """The controller on the embedded control plane, or on `cluster` (its 4 kwok nodes of 8 GPUs);
    `prepare` makes what is there before the controller starts."""
    if cluster is not None:
        async with KubeClient(load_config(str(cluster.kubeconfig_path)), qps=1000, burst=2000) as client, \
                _controller(cluster, client, None, config, prepare) as system:
            yield system
        return
    server = APIServer(state, crds=all_crds())
    await server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig_path)), qps=1000, burst=2000) as client:
            sim = SimCluster(client, nodes=nodes, gpus_per_node=gpus_per_node, workloads=True)
            await sim.start()
            try:
                async with _controller(server, client, sim, config, prepare) as system:
                    yield system
            finally:
                await sim.stop()
    finally:
        await server.stop()


SystemFactory = Callable[..., AbstractAsyncContextManager[System]]


@pytest.fixture
def start_system(tmp_path: Path, real_or_none: RealCluster | None) -> SystemFactory:
    """`running_system` on this test's control plane: `async with start_system(config=...) as system`.
    On the real one every start shares the session's cluster (a restart keeps what it holds)."""
    cluster = real_or_none
    starts = itertools.count()

    def start(**kwargs: Any) -> AbstractAsyncContextManager[System]:
        return running_system(tmp_path / f"state-{next(starts)}", cluster=cluster, **kwargs)

    return start


@pytest.fixture
async def system(start_system: SystemFactory) -> AsyncIterator[System]:
    async with start_system() as running:
        yield running
