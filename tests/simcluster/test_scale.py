"""Hundreds of jobs through the simulated cluster, with no node ever holding more than it has."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from koordqueue.api import constants as c
from koordqueue.kube.client import KubeClient
from koordqueue.simcluster.cluster import SimCluster
from tests.simcluster.conftest import PODS, PYTORCHJOBS, Object, condition_true, seed_job, wait_for

pytestmark = pytest.mark.timeout(60)
JOBS = 200
NODES = 10
GPUS_PER_NODE = 8


async def watch_gpu_peaks(client: KubeClient, peaks: dict[str, int], problems: list[str]) -> None:
    """Follow every pod change; after each, the GPUs held on each node by bound pods that have not ended."""
    held: dict[str, tuple[str, int]] = {}
    async for kind, pod in client.watch(PODS, namespace="default"):
        if kind == "BOOKMARK":
            continue
        key = pod["metadata"]["name"]
        node = pod["spec"].get("nodeName")
        ended = pod["status"].get("phase") in (c.POD_SUCCEEDED, c.POD_FAILED)
        if kind == "DELETED" or ended or not node:
            held.pop(key, None)
            continue
        gpus = int(pod["spec"]["containers"][0]["resources"]["requests"][c.GPU])
        held[key] = (node, gpus)
        used: dict[str, int] = {}
        for where, amount in held.values():
            used[where] = used.get(where, 0) + amount
        for where, amount in used.items():
            peaks[where] = max(peaks.get(where, 0), amount)
            if amount > GPUS_PER_NODE:
                problems.append(f"{where} holds {amount} GPUs at resourceVersion {pod['metadata']['resourceVersion']}")


async def test_hundreds_of_jobs_run_to_completion_without_overcommitting(client: KubeClient) -> None:
    peaks: dict[str, int] = {}
    problems: list[str] = []
    watcher = asyncio.create_task(watch_gpu_peaks(client, peaks, problems))
    started = time.monotonic()
    async with SimCluster(client, nodes=NODES, gpus_per_node=GPUS_PER_NODE):
        await asyncio.gather(*(client.create(PYTORCHJOBS, seed_job(f"job-{i:03d}", duration=0.3))
                               for i in range(JOBS)))

        async def all_succeeded() -> bool:
            jobs = (await client.list(PYTORCHJOBS, namespace="default")).items
            done = sum(1 for job in jobs if condition_true(job, c.KUBEFLOW_CONDITION_SUCCEEDED))
            return done == JOBS

        await wait_for(all_succeeded, f"all {JOBS} jobs Succeeded", timeout=45, interval=0.3)
    elapsed = time.monotonic() - started
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    assert problems == []
    # The cluster was used: with 80 GPUs and 400 one-GPU pods, nodes filled up.
    assert len(peaks) == NODES and max(peaks.values()) == GPUS_PER_NODE
    pods: list[Object] = (await client.list(PODS, namespace="default")).items
    assert len(pods) == 2 * JOBS and all(p["status"]["phase"] == c.POD_SUCCEEDED for p in pods)
    print(f"\n{JOBS} jobs ({2 * JOBS} pods) created, run and finished in {elapsed:.1f}s")
