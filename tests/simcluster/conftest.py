"""Fixtures for the simulated cluster: the embedded API server, a client, and helpers to wait on objects."""

from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.apiserver.server import APIServer
from koordqueue.kube.client import KubeClient, Resource, RetryPolicy
from koordqueue.kube.config import load_config
from koordqueue.simcluster.cluster import SimCluster

SEED_JOB = Path(__file__).parents[1] / "apiserver" / "data" / "pytorchjob.yaml"
PYTORCHJOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
JOBS = Resource("batch", "v1", c.BATCH_JOB_PLURAL)
PODS = Resource("", "v1", c.PODS_PLURAL)
NODES = Resource("", "v1", c.NODES_PLURAL, namespaced=False)
EVENTS = Resource("", "v1", "events")
FAST_RETRY = RetryPolicy(attempts=6, base_delay=0.01, max_delay=0.05)

T = TypeVar("T")
Object = dict[str, Any]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[APIServer]:
    srv = APIServer(tmp_path / "state")
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def client(server: APIServer) -> AsyncIterator[KubeClient]:
    async with KubeClient(load_config(str(server.kubeconfig_path)), qps=0, retry=FAST_RETRY) as kube:
        yield kube


@pytest.fixture
async def cluster(client: KubeClient) -> AsyncIterator[SimCluster]:
    """Four nodes of 8 GPUs, 96 CPUs, 512Gi: the defaults."""
    async with SimCluster(client) as sim:
        yield sim


async def wait_for(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 10.0,
                   interval: float = 0.05) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value seen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        last = await probe()
        if last:
            return last
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        await asyncio.sleep(interval)


def seed_job(name: str = "pytorch-training-job", *, duration: float | None = None, fail: bool = False,
             suspend: bool = False, gpus: int | None = None, workers: int | None = None) -> Object:
    """The seed guide's PyTorchJob, renamed and with the simulation's annotations."""
    job = copy.deepcopy(_seed())
    job["metadata"]["name"] = name
    annotations = job["metadata"].setdefault("annotations", {})
    if duration is not None:
        annotations[c.ANNOTATION_SIM_DURATION] = str(duration)
    if fail:
        annotations[c.ANNOTATION_SIM_FAIL] = c.TRUE
    if suspend:  # as the webhook suspends it: the field is what the training operator reads
        annotations[c.ANNOTATION_SUSPEND] = c.TRUE
        job["spec"].setdefault("runPolicy", {})["suspend"] = True
    specs = job["spec"]["pytorchReplicaSpecs"]
    if workers == 0:  # no Worker role: the training operator's webhook refuses a Worker of 0 replicas
        del specs["Worker"]
    elif workers is not None:
        specs["Worker"]["replicas"] = workers
    if gpus is not None:
        for spec in specs.values():
            resources = spec["template"]["spec"]["containers"][0]["resources"]
            resources["requests"][c.GPU] = resources["limits"][c.GPU] = str(gpus)
    return job


@functools.cache
def _seed() -> Object:
    job: Object = yaml.safe_load(SEED_JOB.read_text())
    return job


def batch_job(name: str, *, parallelism: int = 2, completions: int | None = 2, duration: float | None = None,
              fail: bool = False, suspend: bool = False, backoff_limit: int = 6, gpus: int = 1) -> Object:
    annotations: dict[str, str] = {}
    if duration is not None:
        annotations[c.ANNOTATION_SIM_DURATION] = str(duration)
    if fail:
        annotations[c.ANNOTATION_SIM_FAIL] = c.TRUE
    spec: Object = {
        "parallelism": parallelism, "backoffLimit": backoff_limit, "suspend": suspend,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox",
            "resources": {"requests": {c.CPU: "1", c.GPU: str(gpus)}, "limits": {c.GPU: str(gpus)}},
        }]}},
    }
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations}, "spec": spec}


def conditions(obj: Object) -> dict[str, Object]:
    """The status conditions by type."""
    return {cond["type"]: cond for cond in (obj.get("status") or {}).get("conditions") or []}


def condition_true(obj: Object, kind: str) -> bool:
    return conditions(obj).get(kind, {}).get("status") == c.CONDITION_TRUE


async def pods_of(client: KubeClient, label: str, name: str) -> list[Object]:
    result = await client.list(PODS, namespace="default", label_selector=f"{label}={name}")
    return sorted(result.items, key=lambda p: p["metadata"]["name"])
