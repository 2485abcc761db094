"""The whole system as separate processes, for benchmarks: the embedded API server and
the controller each in a process of its own, so that each one's CPU seconds and peak
RSS can be read from /proc, and the benchmark itself is a third process with its own
clients (as a user's jobs and a training operator would be).

The controller gets an identity of its own (a ServiceAccount bound to cluster-admin,
its token from the TokenRequest API, as `kubectl create token` gets one): the server
counts the requests of each identity, so the controller's API requests are counted by
the server, retries and watches included, apart from the benchmark's.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from koordqueue.children import die_with_parent
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config

SA_NAMESPACE = "koord-queue"
SA_NAME = "koord-queue-controller"
CONTROLLER_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts")
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (/proc/PID/stat, fields 14 and 15)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def memory(pid: int) -> dict[str, int]:
    """Resident set size now and at its peak (VmRSS, VmHWM), in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def self_usage() -> dict[str, float]:
    """This (benchmark) process: CPU seconds and peak RSS in bytes."""
    pid = os.getpid()
    return {"cpu_seconds": cpu_seconds(pid), "peak_rss": memory(pid)["VmHWM"]}


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Process:
    """A child process whose CPU and memory we read before stopping it."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log = log
        self.env = env  # the whole environment when given (as os.environ otherwise)
        self.popen: subprocess.Popen[bytes] | None = None
        self.final: dict[str, float] = {}

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT,
                                          preexec_fn=die_with_parent, env=self.env)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def usage(self) -> dict[str, float]:
        """CPU seconds so far, RSS now and peak RSS (bytes); the last reading after it stopped."""
        if not self.alive():
            return dict(self.final)
        mem = memory(self.pid)
        self.final = {"cpu_seconds": cpu_seconds(self.pid), "rss": mem["VmRSS"], "peak_rss": mem["VmHWM"]}
        return dict(self.final)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.alive():
            self.usage()
            assert self.popen is not None
            self.popen.send_signal(sig)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ServerProcess(Process):
    """`python -m koordqueue.apiserver --state-dir DIR --test-controls`: it prints its kubeconfig's
    path; the benchmarks read the server's request log (`request_counts`) under `/_test/`."""

    def __init__(self, state_dir: Path, port: int | None = None) -> None:
        # A fixed port: a restarted server is found where the kubeconfigs say.
        self.port = port or free_port()
        super().__init__([sys.executable, "-m", "koordqueue.apiserver", "--state-dir", str(state_dir),
                          "--port", str(self.port), "--test-controls"], state_dir.parent / "apiserver.log")
        self.state_dir = state_dir
        self.kubeconfig = state_dir / "kubeconfig"

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.kubeconfig.exists():
            self.kubeconfig.unlink()  # a restart rewrites it: wait for the new one
        super().start()
        deadline = time.monotonic() + 60
        while not self.kubeconfig.exists() or "kubeconfig:" not in self.log.read_text(errors="replace"):
            if not self.alive() or time.monotonic() > deadline:
                raise SystemExit(f"the API server did not start:\n{self.tail()}")
            time.sleep(0.05)


class ControllerProcess(Process):
    """`koord-queue controller`, without leader election, on a metrics port of its own."""

    def __init__(self, kubeconfig: Path, log: Path, *extra: str) -> None:
        self.metrics_port = free_port()
        super().__init__(
            [sys.executable, "-m", "koordqueue.cli", "controller", "--kubeconfig", str(kubeconfig),
             "--no-leader-elect", "--metrics-port", str(self.metrics_port), "--job-kinds", "PyTorchJob",
             "--log-level", "warning", *extra], log)

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as session, \
                session.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as response:
            return await response.text()

    async def wait_ready(self, timeout: float = 120.0) -> float:
        """Until /readyz says the controller leads with its caches synced; returns the seconds it took."""
        started = time.monotonic()
        async with aiohttp.ClientSession() as session:
            while time.monotonic() - started < timeout:
                if not self.alive():
                    raise SystemExit(f"the controller exited:\n{self.tail()}")
                try:
                    async with session.get(f"http://127.0.0.1:{self.metrics_port}/readyz",
                                           timeout=aiohttp.ClientTimeout(total=2)) as response:
                        if response.status == 200 and "leading" in await response.text():
                            return time.monotonic() - started  # synced and leading (not just serving)
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.05)
        raise SystemExit(f"the controller was not ready after {timeout:.0f} s:\n{self.tail()}")


class Profiler:
    """py-spy sampling a running process into collapsed stacks (`--profile`), stopped with SIGINT."""

    def __init__(self, target: Process, out: Path, rate: int = 200, idle: bool = False) -> None:
        """`idle`: samples of threads waiting count too (where a start waits on the API server)."""
        spy = Path(sys.executable).with_name("py-spy")
        self.out = out
        self.popen = subprocess.Popen(
            [str(spy), "record", "--pid", str(target.pid), "--format", "raw", "--rate", str(rate),
             "--nonblocking", *(["--idle"] if idle else []), "-o", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()


def top_functions(collapsed: Path, count: int = 25) -> list[tuple[str, float, float]]:
    """(function, self share, inclusive share) of py-spy's collapsed stacks, by self share."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        samples_ = int(n)
        total += samples_
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + samples_
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + samples_
    ranked = sorted(own, key=lambda f: -own[f])[:count]
    return [(f, own[f] / total, inclusive[f] / total) for f in ranked] if total else []


async def ensure_namespace(client: KubeClient, name: str) -> None:
    from koordqueue.kube.errors import AlreadyExists

    try:
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except AlreadyExists:
        pass


async def controller_kubeconfig(client: KubeClient, admin_kubeconfig: Path, out: Path) -> str:
    """A kubeconfig for the controller's own identity (a ServiceAccount bound to cluster-admin)."""
    from koordqueue.kube.errors import AlreadyExists

    await ensure_namespace(client, SA_NAMESPACE)
    for resource, body, ns in (
        (SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": SA_NAME, "namespace": SA_NAMESPACE}}, SA_NAMESPACE),
        (CLUSTER_ROLE_BINDINGS, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                                 "metadata": {"name": "koord-queue-controller-bench"},
                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                             "name": "cluster-admin"},
                                 "subjects": [{"kind": "ServiceAccount", "name": SA_NAME,
                                               "namespace": SA_NAMESPACE}]}, None),
    ):
        try:
            await client.create(resource, body, namespace=ns)
        except AlreadyExists:
            pass
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 24 * 3600}}
    answer = await client._call("POST", "create", SERVICE_ACCOUNTS.path(SA_NAMESPACE, SA_NAME, "token"),
                                body=request)
    config = yaml.safe_load(admin_kubeconfig.read_text())
    config["users"][0]["user"] = {"token": answer["status"]["token"]}
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return CONTROLLER_USER


async def request_counts(client: KubeClient, user: str) -> dict[str, int]:
    """The server's count of a user's requests, by `verb resource[/subresource]`."""
    body = await client._call("GET", "get", "/_test/requests", params={"user": user})
    out: dict[str, int] = {}
    for row in body.get("counts") or []:
        resource = row["resource"] + (f"/{row['subresource']}" if row["subresource"] else "")
        key = f"{row['verb']} {resource}"
        out[key] = out.get(key, 0) + int(row["count"])
    return dict(sorted(out.items()))


def open_client(kubeconfig: Path, qps: float = 5000.0, burst: int = 10000) -> KubeClient:
    return KubeClient(load_config(str(kubeconfig)), qps=qps, burst=burst, user_agent="koord-queue-bench")


# --- Prometheus text -------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out.append((labels, float(m.group(3))))
    return out


@dataclass
class Histogram:
    """A Prometheus histogram read back: quantiles by linear interpolation in a bucket."""

    buckets: list[tuple[float, float]] = field(default_factory=list)  # (le, cumulative count)
    count: float = 0.0
    total: float = 0.0

    @classmethod
    def parse(cls, text: str, name: str) -> Histogram:
        buckets = sorted((float(labels["le"]), value) for labels, value in samples(text, f"{name}_bucket"))
        count = sum(v for _, v in samples(text, f"{name}_count"))
        total = sum(v for _, v in samples(text, f"{name}_sum"))
        return cls(buckets, count, total)

    def minus(self, earlier: Histogram) -> Histogram:
        """What was observed since ``earlier`` (the same buckets)."""
        before = dict(earlier.buckets)
        return Histogram([(le, v - before.get(le, 0.0)) for le, v in self.buckets],
                         self.count - earlier.count, self.total - earlier.total)

    def quantile(self, q: float) -> float:
        if self.count <= 0:
            return math.nan
        rank = q * self.count
        lower_le, lower_count = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):
                    return lower_le
                span = cumulative - lower_count
                return lower_le + (le - lower_le) * ((rank - lower_count) / span if span else 0.0)
            lower_le, lower_count = le, cumulative
        return lower_le

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan


def counter_total(text: str, name: str) -> float:
    return sum(v for _, v in samples(text, name))


def mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"


def dig(obj: dict[str, Any] | None, *path: str) -> Any:
    """The value at ``path`` in nested figures; None where a step is missing (a system not run)."""
    for step in path:
        if obj is None:
            return None
        obj = obj.get(step)
    return obj


def fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"
