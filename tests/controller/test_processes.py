"""The controller as a real process: killed with SIGKILL mid-stream and started again,
two replicas with leader election, and `koord-queue up` as a user runs it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.apiserver.server import APIServer
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.kube.informer import Informer
from koordqueue.manifests import all_crds
from koordqueue.realcluster.cluster import RealCluster
from koordqueue.simcluster.cluster import SimCluster

from .conftest import kubectl, pytorch_job, quota

pytestmark = pytest.mark.timeout(240)
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", "pytorchjobs")
HOLDING = {p.value for p in c.PHASES_HOLDING_QUOTA}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControllerProcess:
    """`koord-queue controller` in a process of its own, with short timings."""

    def __init__(self, kubeconfig: Path, identity: str, log: Path, leader_elect: bool = True) -> None:
        self.metrics_port = free_port()
        self.args = [sys.executable, "-m", "koordqueue.cli", "controller", "--kubeconfig", str(kubeconfig),
                     "--identity", identity, "--metrics-port", str(self.metrics_port),
                     "--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5",
                     "--protect-seconds", "0", "--backoff-base", "1", "--backoff-cap", "4",
                     "--leader-elect" if leader_elect else "--no-leader-elect", "--log-format", "json"]
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    async def leading(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                   timeout=aiohttp.ClientTimeout(total=1)) as response:
                return "koord_queue_leader 1.0" in await response.text()
        except (aiohttp.ClientError, TimeoutError):
            return False


class Watcher:
    """Checks the invariants on every change the API server makes: no quota ever holds
    more than its max, and no job is released twice without a suspension between."""

    def __init__(self, client: KubeClient, maxima: dict[str, int]) -> None:
        self.maxima = maxima
        self.units = Informer(client, UNITS)
        self.jobs = Informer(client, JOBS, project=self._job)
        self.holding: dict[str, tuple[str, int]] = {}  # unit key -> (quota, GPUs)
        self.peak: dict[str, int] = {}
        self.violations: list[str] = []
        self.releases: dict[str, int] = {}
        self.suspended: dict[str, bool] = {}
        self.phases: dict[str, str] = {}
        self.units.on_add(self._unit)
        self.units.on_update(lambda _o, n: self._unit(n))
        self.jobs.on_add(self._job_seen)
        self.jobs.on_update(lambda _o, n: self._job_seen(n))

    @staticmethod
    def _job(obj: dict[str, Any]) -> tuple[str, bool]:
        meta = obj["metadata"]
        suspended = (meta.get("annotations") or {}).get(c.ANNOTATION_SUSPEND) == c.TRUE
        return f"{meta['namespace']}/{meta['name']}", suspended

    def _job_seen(self, job: tuple[str, bool]) -> None:
        key, suspended = job
        if self.suspended.get(key, True) and not suspended:
            self.releases[key] = self.releases.get(key, 0) + 1
            if self.releases[key] > 1:
                self.violations.append(f"{key} released twice without being suspended between")
        self.suspended[key] = suspended

    def _unit(self, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        phase = (obj.get("status") or {}).get("phase") or ""
        self.phases[key] = phase
        quota_name = (obj["metadata"].get("labels") or {}).get(c.LABEL_QUOTA_NAME, "")
        gpus = int((obj["spec"].get("resource") or {}).get(c.GPU, "0"))
        if phase in HOLDING:
            self.holding[key] = (quota_name, gpus)
        else:
            self.holding.pop(key, None)
        used = sum(g for q, g in self.holding.values() if q == quota_name)
        self.peak[quota_name] = max(self.peak.get(quota_name, 0), used)
        if quota_name in self.maxima and used > self.maxima[quota_name]:
            self.violations.append(f"quota {quota_name} held {used} GPUs, over its max {self.maxima[quota_name]}")

    async def start(self) -> None:
        for informer in (self.units, self.jobs):
            informer.start()
            await informer.wait_synced()

    async def stop(self) -> None:
        await asyncio.gather(self.units.stop(), self.jobs.stop())


@asynccontextmanager
async def cluster(tmp_path: Path, real: RealCluster | None = None,
                  ) -> AsyncIterator[tuple[APIServer | RealCluster, KubeClient]]:
    """The embedded API server and simulated cluster, or the real control plane `real`."""
    if real is not None:
        async with KubeClient(load_config(str(real.kubeconfig_path)), qps=2000, burst=4000) as client:
            yield real, client
        return
    server = APIServer(tmp_path / "state", crds=all_crds())
    await server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig_path)), qps=2000, burst=4000) as client:
            sim = SimCluster(client, nodes=4, gpus_per_node=8)
            await sim.start()
            try:
                yield server, client
            finally:
                await sim.stop()
    finally:
        await server.stop()


def stream(count: int, quotas: list[str]) -> list[dict[str, Any]]:
    """Jobs created suspended (as the webhook leaves them: annotation and runPolicy) with 1-2 GPUs
    and short runs."""
    jobs = []
    for i in range(count):
        job = pytorch_job(f"job-{i:03d}", gpus_per_pod=1 + i % 2, workers=0, duration=0.2 + (i % 5) * 0.1,
                          quota_name=quotas[i % len(quotas)],
                          annotations={c.ANNOTATION_SUSPEND: c.TRUE})
        job["spec"].setdefault("runPolicy", {})["suspend"] = True
        jobs.append(job)
    return jobs


async def create_all(client: KubeClient, jobs: list[dict[str, Any]], per_second: float) -> None:
    for job in jobs:
        await client.create(JOBS, job, namespace="default")
        await asyncio.sleep(1 / per_second)


async def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.both_control_planes
async def test_a_controller_killed_mid_stream_loses_nothing_when_started_again(
        tmp_path: Path, real_or_none: RealCluster | None) -> None:
    async with cluster(tmp_path, real_or_none) as (server, client):
        quotas = ["team-r1", "team-r2"]
        for name in quotas:
            await client.create(Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL),
                                quota(name, 8, 8), namespace="default")
        watcher = Watcher(client, {name: 8 for name in quotas})
        await watcher.start()
        controller = ControllerProcess(server.kubeconfig_path, "only", tmp_path / "controller.log",
                                       leader_elect=False)
        controller.start()
        jobs = stream(200, quotas)
        creating = asyncio.create_task(create_all(client, jobs, per_second=60))
        try:
            def done() -> int:
                return sum(1 for p in watcher.phases.values() if p == c.Phase.SUCCEED)

            await wait_until(lambda: done() >= 50, 90, "50 jobs done before the kill")
            controller.kill()
            killed_at = done()
            await asyncio.sleep(1.0)
            controller.start()
            await creating
            await wait_until(lambda: done() == 200, 150, "every job to end")
            assert killed_at < 200
            assert watcher.violations == []
            assert set(watcher.releases) == {f"default/{j['metadata']['name']}" for j in jobs}
            assert set(watcher.releases.values()) == {1}
            assert all(watcher.peak[q] <= 8 for q in quotas) and max(watcher.peak.values()) >= 6
            units = (await client.list(UNITS, namespace="default")).items
            assert len(units) == 200  # none missing, none extra
        finally:
            creating.cancel()
            controller.stop()
            await watcher.stop()


@pytest.mark.both_control_planes
async def test_a_killed_leader_is_replaced_and_two_never_lead_at_once(
        tmp_path: Path, real_or_none: RealCluster | None) -> None:
    async with cluster(tmp_path, real_or_none) as (server, client):
        await client.create(Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL),
                            quota("team-l", 8, 8), namespace="default")
        watcher = Watcher(client, {"team-l": 8})
        await watcher.start()
        replicas = [ControllerProcess(server.kubeconfig_path, name, tmp_path / f"{name}.log") for name in "ab"]
        for replica in replicas:
            replica.start()
        both_at: list[float] = []
        async with aiohttp.ClientSession() as session:
            leaders: list[ControllerProcess] = []

            async def sample() -> None:
                while True:
                    states = await asyncio.gather(*(r.leading(session) for r in replicas))
                    leaders[:] = [r for r, leads in zip(replicas, states, strict=True) if leads]
                    if len(leaders) > 1:
                        both_at.append(time.monotonic())
                    await asyncio.sleep(0.05)

            sampler = asyncio.create_task(sample())
            try:
                await wait_until(lambda: len(leaders) == 1, 30, "one leader")
                first = leaders[0]
                jobs = stream(40, ["team-l"])
                await create_all(client, jobs[:20], per_second=40)
                await wait_until(lambda: sum(p == c.Phase.SUCCEED for p in watcher.phases.values()) >= 5, 30,
                                 "work done under the first leader")
                first.kill()
                killed = time.monotonic()
                await wait_until(lambda: len(leaders) == 1 and leaders[0] is not first, 20, "a new leader")
                took = time.monotonic() - killed
                assert took < 15.0
                await create_all(client, jobs[20:], per_second=40)
                await wait_until(lambda: sum(p == c.Phase.SUCCEED for p in watcher.phases.values()) == 40, 90,
                                 "every job to end under the new leader")
                assert both_at == []
                assert watcher.violations == []
                assert set(watcher.releases.values()) == {1}
            finally:
                sampler.cancel()
                for replica in replicas:
                    replica.stop()
                await watcher.stop()


async def test_koord_queue_up_runs_the_seed_example_and_kubectl_sees_it(tmp_path: Path) -> None:
    state = tmp_path / "kq"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "koordqueue.cli", "up", "--state-dir", "kq", "--example",  # relative, as `make run`'s
        "--dashboard-port", str(free_port()), "--api-handler-port", "0", cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env)
    output: list[str] = []
    try:
        assert process.stdout is not None
        async with asyncio.timeout(60):
            while not output or "Press Ctrl-C" not in output[-1]:
                line = (await process.stdout.readline()).decode()
                assert line, "up ended early:\n" + "".join(output)
                output.append(line)
        text = "".join(output)
        assert "QueueUnit default/pytorch-training-job-py-qu: Running" in text
        assert f"export KUBECONFIG={state / 'kubeconfig'}" in text
        assert re.search(r"Koord-Queue's HTTP API: http://127\.0\.0\.1:\d+/apis/v1/queue", text), text
        table = await asyncio.to_thread(kubectl, state / "kubeconfig", "get", "queueunit", "-A")
        header = table.splitlines()[0].split()
        assert header[:6] == ["NAMESPACE", "NAME", "PHASE", "PRIORITY", "ADMISSIONS", "JOBTYPE"]
        assert "pytorch-training-job-py-qu   Running" in table
        assert oct((state / "kubeconfig").stat().st_mode & 0o777) == "0o600"

        # The seed guide's "检查 Deployments" and "检查日志", verbatim: the controller as the chart installs it
        deployments = await asyncio.to_thread(kubectl, state / "kubeconfig", "get", "deployment", "-n", "koord-queue")
        assert deployments.splitlines()[1].split()[:4] == ["koord-queue-controllers", "1/1", "1", "1"]
        pods = await asyncio.to_thread(kubectl, state / "kubeconfig", "get", "pods", "-n", "koord-queue")
        assert pods.splitlines()[1].split()[1:3] == ["1/1", "Running"]
        assert pods.splitlines()[1].startswith("koord-queue-controllers-")
        logs = await asyncio.to_thread(kubectl, state / "kubeconfig", "logs", "-n", "koord-queue",
                                       "deployment/koord-queue-controllers")
        assert re.search(r"^\S+ \S+ INFO koordqueue.controller.manager: \S+: leading; queueing .*PyTorchJob", logs,
                         re.MULTILINE), logs
        assert not re.search(r"koordqueue\.(apiserver|simcluster)", logs)  # the simulated cluster's own logs are not the controller's

        # No fault-injection door on a user's server (issue 16): the test controls are not mounted
        server = yaml.safe_load((state / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
        token = yaml.safe_load((state / "kubeconfig").read_text())["users"][0]["user"]["token"]
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
            for path in ("/_test/state", "/_test/requests?user=admin"):
                async with session.get(server + path, ssl=False) as resp:
                    assert resp.status == 404, path
    finally:
        process.send_signal(signal.SIGINT)
        async with asyncio.timeout(30):
            code = await process.wait()
    assert code == 0




async def test_koord_queue_up_says_so_and_exits_when_its_dashboard_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "koordqueue.cli", "up", "--state-dir", str(tmp_path / "kq"),
            "--dashboard-port", str(port), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        async with asyncio.timeout(60):
            out, err = await process.communicate()
    assert process.returncode == 1
    assert "koord-queue up: the controller could not start" in err.decode()
    assert "address already in use" in err.decode().lower()
