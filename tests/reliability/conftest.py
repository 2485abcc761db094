"""Shared helpers for the reliability tests: bench/chaos.py loaded as a module."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType

from koordqueue.apiserver.server import APIServer
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.manager import Manager
from koordqueue.kube.client import KubeClient
from koordqueue.kube.config import load_config
from koordqueue.manifests import all_crds
from koordqueue.simcluster.cluster import SimCluster
from tests.controller.conftest import start_system, system  # noqa: F401  (the fixtures, here too)

ROOT = Path(__file__).parents[2]


def load_chaos() -> ModuleType:
    """bench/chaos.py (bench is not a package): the run and its checker, as the CI test uses them."""
    name = "koordqueue_bench_chaos"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "chaos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --- a cluster whose store is seeded before our controller starts ------------------------



@asynccontextmanager
async def bare_cluster(state: Path, nodes: int = 4, gpus_per_node: int = 8) -> AsyncIterator[
        tuple[APIServer, KubeClient, SimCluster]]:
    """The API server and the simulated cluster (not started: `await sim.start()`), no
    controller: seed what you need first."""
    server = APIServer(state, crds=all_crds())
    await server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig_path)), qps=1000, burst=2000) as client:
            sim = SimCluster(client, nodes=nodes, gpus_per_node=gpus_per_node)
            try:
                yield server, client, sim
            finally:
                await sim.stop()
    finally:
        await server.stop()


@asynccontextmanager
async def controller_running(client: KubeClient, config: ControllerConfig) -> AsyncIterator[Manager]:
    """Our controller (in this process) on a cluster that already has objects; waits for its sync."""
    manager = Manager(client, config)
    task = asyncio.create_task(manager.run())
    try:
        async with asyncio.timeout(20):
            while manager.controller is None or not manager.controller.sync_done:
                await asyncio.sleep(0.05)
        yield manager
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
