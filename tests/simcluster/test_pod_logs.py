"""`kubectl logs` on the simulated cluster's pods: the pods/log subresource, as kube-apiserver serves it
(plain text; --follow streams until the container ends; --tail, -c, --timestamps, --since, --limit-bytes;
its refusals worded as kube-apiserver's and the kubelet's)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time

import aiohttp
import pytest

from koordqueue.apiserver.podlogs import LogBuffer
from koordqueue.apiserver.server import APIServer
from koordqueue.kube.client import KubeClient
from koordqueue.kube.errors import NotFound
from koordqueue.simcluster.cluster import SimCluster
from tests.simcluster.conftest import PODS, PYTORCHJOBS, batch_job, seed_job, wait_for

pytestmark = [pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
              pytest.mark.timeout(90)]

JOB = "pytorch-training-job"
MASTER = f"{JOB}-master-0"
STEP = re.compile(r"^step (\d+)/10: loss \d\.\d{4}$")


def kubectl(server: APIServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(server.kubeconfig_path), *args],
                          capture_output=True, text=True, timeout=60)


async def logs(server: APIServer, *args: str) -> str:
    result = await asyncio.to_thread(kubectl, server, "logs", *args)
    assert result.returncode == 0, f"kubectl logs {' '.join(args)}: {result.stderr}"
    return result.stdout


async def running(client: KubeClient, name: str) -> None:
    async def probe() -> bool:
        try:
            pod = await client.get(PODS, name, namespace="default")
        except NotFound:
            return False
        return (pod.get("status") or {}).get("phase") == "Running"

    await wait_for(probe, f"{name} to run", timeout=20)


async def test_kubectl_logs_of_a_training_pod_and_follow_until_it_ends(server: APIServer, client: KubeClient,
                                                                        cluster: SimCluster) -> None:
    await client.create(PYTORCHJOBS, seed_job(JOB, duration=3), namespace="default")
    await running(client, MASTER)

    # --follow: the lines as the training writes them, and the command ends when the container does
    started = time.monotonic()
    followed = (await logs(server, "--follow", MASTER)).splitlines()
    assert time.monotonic() - started > 1.0, "follow returned before the container ended"
    assert followed[0] == f"started: container pytorch of pod default/{MASTER} on node " \
                          f"{(await client.get(PODS, MASTER, namespace='default'))['spec']['nodeName']}, " \
                          "image pytorch/pytorch:1.12.1-cuda11.3-cudnn8-runtime"
    # The env the container sees: the training operator's MASTER_PORT (23456) comes after the seed's 29500.
    assert followed[1] == f"rank 0: joining the group at {MASTER}:23456"
    steps = [line for line in followed[2:-1]]
    assert [int(STEP.match(line)[1]) for line in steps if STEP.match(line)] == list(range(1, 11)), steps
    assert followed[-1] == "finished with exit code 0"
    worker = (await logs(server, f"{JOB}-worker-0")).splitlines()
    assert worker[1] == f"rank 1: joining the group at {MASTER}:23456"

    # after the end, the same log at once; --tail, --timestamps, --limit-bytes, --since, -c
    assert (await logs(server, MASTER)).splitlines() == followed
    assert (await logs(server, MASTER, "--tail=2")).splitlines() == followed[-2:]
    assert (await logs(server, MASTER, "--tail=0")) == ""
    stamped = (await logs(server, MASTER, "--timestamps", "--tail=1")).splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z finished with exit code 0", stamped[0]), stamped
    assert (await logs(server, MASTER, "--limit-bytes=8")) == "started:"
    assert (await logs(server, MASTER, "--since=1h")).splitlines() == followed
    assert (await logs(server, MASTER, "-c", "pytorch")).splitlines() == followed


async def test_follow_streams_lines_while_the_container_runs(server: APIServer, client: KubeClient,
                                                             cluster: SimCluster) -> None:
    """Lines arrive on the open stream as they are written, not only when it ends."""
    await client.create(PYTORCHJOBS, seed_job(JOB, duration=4, workers=0), namespace="default")
    await running(client, MASTER)
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(server.kubeconfig_path), "logs", "-f", MASTER,
        stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    arrivals = []
    async with asyncio.timeout(30):
        while line := (await process.stdout.readline()).decode():
            arrivals.append((time.monotonic(), line.strip()))
        await process.wait()
    assert process.returncode == 0
    assert arrivals[-1][1] == "finished with exit code 0"
    first_step = next(at for at, text in arrivals if text.startswith("step 1/"))
    assert arrivals[-1][0] - first_step > 1.5, arrivals  # steps came one by one over the run


async def test_a_failing_run_says_so_and_a_batch_pod_has_no_rank(server: APIServer, client: KubeClient,
                                                                   cluster: SimCluster) -> None:
    from tests.simcluster.conftest import JOBS, pods_of

    await client.create(PYTORCHJOBS, seed_job("bad", duration=0.5, fail=True, workers=0), namespace="default")
    await client.create(JOBS, batch_job("batch", parallelism=1, completions=1, duration=0.5), namespace="default")

    async def ended(name: str) -> bool:
        try:
            pod = await client.get(PODS, name, namespace="default")
        except NotFound:
            return False
        return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    await wait_for(lambda: ended("bad-master-0"), "bad-master-0 to end", timeout=20)
    bad = (await logs(server, "bad-master-0")).splitlines()
    assert bad[-2:] == ["error: the training failed (koord-queue.sim/fail)", "finished with exit code 1"]
    pod = (await wait_for(lambda: pods_of(client, "job-name", "batch"), "the batch pod"))[0]["metadata"]["name"]
    await wait_for(lambda: ended(pod), f"{pod} to end", timeout=20)
    lines = (await logs(server, pod)).splitlines()
    assert lines[0].startswith(f"started: container main of pod default/{pod}")
    assert not any(line.startswith("rank") for line in lines)
    assert lines[-1] == "finished with exit code 0"


async def test_refusals_are_worded_as_kube_apiservers(server: APIServer, client: KubeClient) -> None:
    """No simulated cluster here: pods stay unbound, or bound and never started."""
    two = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "two"},
           "spec": {"initContainers": [{"name": "setup", "image": "busybox"}],
                    "containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}]}}
    await client.create(PODS, two, namespace="default")
    result = await asyncio.to_thread(kubectl, server, "logs", "two", "-c", "nope")
    assert result.returncode == 1
    assert result.stderr.strip() == "error: container nope is not valid for pod two"  # kubectl checks it first
    # the server's own answers, as a client that does not check first (the Python client) gets them
    cases = {
        "": (400, "a container name must be specified for pod two, choose one of: [a b] or one of the init "
                  "containers: [setup]"),
        "?container=nope": (400, "container nope is not valid for pod two"),
        "?container=a&tailLines=-1": (422, 'PodLogOptions "two" is invalid: tailLines: Invalid value: -1: '
                                           "must be greater than or equal to 0"),
        "?container=a&sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z": (
            422, 'PodLogOptions "two" is invalid: at most one of `sinceTime` or `sinceSeconds` may be specified'),
        "?container=a": (200, ""),  # not scheduled: an empty log
    }
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {server.token}"}) as session:
        for query, (code, message) in cases.items():
            async with session.get(f"{server.url}/api/v1/namespaces/default/pods/two/log{query}",
                                   ssl=server.client_ssl_context()) as resp:
                body = await resp.text()
                assert resp.status == code, (query, body)
                if code == 200:
                    assert body == message and resp.content_type == "text/plain"
                else:
                    assert (await resp.json(content_type=None))["message"].replace(
                        "Forbidden: ", "") == message, query
    # bound to a node, never started: the kubelet's "waiting to start"
    await client.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bound"},
                                "spec": {"nodeName": "n1", "containers": [{"name": "a", "image": "x"}]}},
                         namespace="default")
    result = await asyncio.to_thread(kubectl, server, "logs", "bound")
    assert result.stderr.strip() == 'Error from server (BadRequest): container "a" in pod "bound" is waiting to ' \
                                    "start: ContainerCreating"
    result = await asyncio.to_thread(kubectl, server, "logs", "bound", "--previous")
    assert result.stderr.strip() == 'Error from server (BadRequest): previous terminated container "a" in pod ' \
                                    '"bound" not found'
    assert (await asyncio.to_thread(kubectl, server, "logs", "missing")).stderr.strip() == \
        'error: error from server (NotFound): pods "missing" not found in namespace "default"'


async def test_an_attached_process_writes_its_pods_log(server: APIServer, client: KubeClient,
                                                       cluster: SimCluster) -> None:
    """What `koord-queue up` does for its controller: the pods it stands for show its own output."""
    buffer = LogBuffer()
    server.pod_logs.attach("default", {"app": "me"}, "main", buffer)
    buffer.write("hello from the process")
    await client.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "me", "labels": {"app": "me"}},
                               "spec": {"containers": [{"name": "main", "image": "me"}]}}, namespace="default")
    await running(client, "me")
    assert await logs(server, "me") == "hello from the process\n"
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(server.kubeconfig_path), "logs", "-f", "--tail=1", "me",
        stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    async with asyncio.timeout(20):
        assert await process.stdout.readline() == b"hello from the process\n"
        buffer.write("a line written while it is followed")
        assert await process.stdout.readline() == b"a line written while it is followed\n"
        await client.delete(PODS, "me", namespace="default")
        assert await process.stdout.readline() == b""  # the pod is gone: the stream ends
        await process.wait()
