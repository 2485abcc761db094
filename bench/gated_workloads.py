"""Workloads queued by a scheduling gate beside jobs: requests per admitted unit and the
controller's CPU per pod, for Deployments scaled up and down and for PyTorchJobs, on the
embedded control plane (issue 34).

The API server and the controller run in processes of their own (the controller with its
webhook, registered as `koord-queue up` does it, and its own ServiceAccount, whose requests
the server counts); the simulated cluster (kubelet, Deployment/ReplicaSet controllers, the
training operator) runs in this process. The quota has room for everything: what is measured
is the cost of queueing, not waiting.

Rounds alternate (deployments, jobs, deployments, jobs, ...) on this noisy machine:

- deployments: N Deployments of R one-GPU pods are created (each pod gated, its unit made,
  admitted, its gate removed), then scaled to 2R (R new units each), then to 1 (2R-1 pods and
  their units go; their deletion at the end is not measured). Per admitted pod group (= pod):
  the controller's requests (its webhook's reads included); per pod: its CPU.
- jobs: N PyTorchJobs of R pods (Master + R-1 Workers), running until deleted, then deleted.
  Per admitted unit (= job): the controller's requests; per pod: its CPU.

    .venv/bin/python bench/gated_workloads.py                  # N=60, R=2, 2 rounds each
    .venv/bin/python bench/gated_workloads.py --n 200 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

from koordqueue.api import constants as c  # noqa: E402
from koordqueue.kube.client import KubeClient, Resource  # noqa: E402
from koordqueue.simcluster.cluster import SimCluster  # noqa: E402
from koordqueue.up import register_webhook  # noqa: E402

NS = "bench-gated"
DEPLOYMENTS = Resource("apps", "v1", "deployments")
PODS = Resource("", "v1", "pods")
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", "pytorchjobs")
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)


def pod_spec() -> dict[str, Any]:
    return {"containers": [{"name": "pytorch", "image": "busybox",
                            "resources": {"requests": {"cpu": "100m", "memory": "100Mi", c.GPU: "1"},
                                          "limits": {c.GPU: "1"}}}]}


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec()}}}


def pytorch_job(name: str, pods: int) -> dict[str, Any]:
    roles: dict[str, Any] = {"Master": {"replicas": 1, "template": {"spec": pod_spec()}}}
    if pods > 1:
        roles["Worker"] = {"replicas": pods - 1, "template": {"spec": pod_spec()}}
    return {"apiVersion": f"{c.KUBEFLOW_GROUP}/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": NS},
            "spec": {"pytorchReplicaSpecs": roles}}


async def running_pods(client: KubeClient) -> int:
    listed = await client.list(PODS, namespace=NS)
    return sum(1 for p in listed.items if (p.get("status") or {}).get("phase") == c.POD_RUNNING
               and not p["metadata"].get("deletionTimestamp"))


async def wait_until(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.25)


async def settle(client: KubeClient, units: int, pods: int, timeout: float) -> None:
    async def done() -> bool:
        listed = await client.list(UNITS, namespace=NS)
        return len(listed.items) == units and await running_pods(client) == pods

    await wait_until(f"{units} units and {pods} running pods", done, timeout)


async def gather_limited(coros: list[Any], limit: int = 32) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(coro: Any) -> None:
        async with sem:
            await coro

    await asyncio.gather(*(one(x) for x in coros))


class Meter:
    """The controller's requests (as the server counted them) and CPU seconds over one step."""

    def __init__(self, client: KubeClient, controller: harness.ControllerProcess) -> None:
        self.client, self.controller = client, controller

    async def __aenter__(self) -> Meter:
        self.requests = sum((await harness.request_counts(self.client, harness.CONTROLLER_USER)).values())
        self.cpu = self.controller.usage()["cpu_seconds"]
        return self

    async def __aexit__(self, *_: object) -> None:
        self.requests = sum((await harness.request_counts(self.client, harness.CONTROLLER_USER)).values()) \
            - self.requests
        self.cpu = self.controller.usage()["cpu_seconds"] - self.cpu


async def deployments_round(client: KubeClient, controller: harness.ControllerProcess, n: int, r: int,
                            tag: str, timeout: float) -> dict[str, float]:
    names = [f"web-{tag}-{i}" for i in range(n)]
    async with Meter(client, controller) as meter:
        await gather_limited([client.create(DEPLOYMENTS, deployment(name, r), namespace=NS) for name in names])
        await settle(client, n * r, n * r, timeout)
        await gather_limited([client.patch(DEPLOYMENTS, name, {"spec": {"replicas": 2 * r}}, namespace=NS)
                              for name in names])
        await settle(client, 2 * n * r, 2 * n * r, timeout)
        await gather_limited([client.patch(DEPLOYMENTS, name, {"spec": {"replicas": 1}}, namespace=NS)
                              for name in names])
        await settle(client, n, n, timeout)
    admitted = 2 * n * r  # units admitted: R per Deployment, then R more
    await gather_limited([client.delete(DEPLOYMENTS, name, namespace=NS) for name in names])
    await settle(client, 0, 0, timeout)
    return {"requests_per_admitted_unit": meter.requests / admitted, "requests_per_pod": meter.requests / admitted,
            "cpu_ms_per_pod": 1000 * meter.cpu / admitted, "requests": meter.requests, "cpu_seconds": meter.cpu,
            "admitted": admitted}


async def jobs_round(client: KubeClient, controller: harness.ControllerProcess, n: int, r: int, tag: str,
                     timeout: float) -> dict[str, float]:
    names = [f"train-{tag}-{i}" for i in range(n)]
    async with Meter(client, controller) as meter:
        await gather_limited([client.create(JOBS, pytorch_job(name, r), namespace=NS) for name in names])
        await settle(client, n, n * r, timeout)
        await gather_limited([client.delete(JOBS, name, namespace=NS) for name in names])
        await settle(client, 0, 0, timeout)
    return {"requests_per_admitted_unit": meter.requests / n, "requests_per_pod": meter.requests / (n * r),
            "cpu_ms_per_pod": 1000 * meter.cpu / (n * r), "requests": meter.requests, "cpu_seconds": meter.cpu,
            "admitted": n}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=60, help="Deployments (and PyTorchJobs) per round")
    parser.add_argument("--r", type=int, default=2, help="replicas per Deployment, pods per job")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each, alternating")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {"n": args.n, "r": args.r, "deployments": [], "jobs": []}
    with tempfile.TemporaryDirectory(prefix="koord-queue-gated-bench-") as tmp:
        base = Path(tmp)
        server = harness.ServerProcess(base / "state")
        server.start()
        webhook_port = harness.free_port()
        controller = None
        try:
            async with harness.open_client(server.kubeconfig) as client:
                await harness.ensure_namespace(client, NS)
                await client.patch(NAMESPACES, NS, {"metadata": {"labels": {c.LABEL_MANAGED_NAMESPACE: c.TRUE}}})
                gpus = 4 * args.n * args.r
                await client.create(QUOTAS, {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
                                             "metadata": {"name": "bench", "namespace": NS},
                                             "spec": {"min": {c.GPU: str(gpus), "cpu": str(gpus), "memory": "10Ti"},
                                                      "max": {c.GPU: str(gpus), "cpu": str(gpus), "memory": "10Ti"}}},
                                    namespace=NS)
                await harness.controller_kubeconfig(client, server.kubeconfig, base / "controller.kubeconfig")
                # Registered before the controller starts: it writes its own CA into both at once.
                await register_webhook(client, webhook_port, b"", frozenset({"PyTorchJob"}),
                                       workload_kinds=frozenset({c.WORKLOAD_DEPLOYMENT, c.WORKLOAD_POD}))
                controller = harness.ControllerProcess(
                    base / "controller.kubeconfig", base / "controller.log", "--webhook", "--webhook-port",
                    str(webhook_port), "--webhook-host", "127.0.0.1", "--workload-kinds", "deployment,pod")
                controller.start()
                await controller.wait_ready()
                nodes = max(4, gpus // 8 + 1)
                async with SimCluster(client, nodes=nodes, gpus_per_node=8, workloads=True):
                    await asyncio.sleep(2)  # the CA in the webhook configurations
                    for i in range(args.rounds):
                        out["deployments"].append(await deployments_round(client, controller, args.n, args.r,
                                                                          f"d{i}", args.timeout))
                        out["jobs"].append(await jobs_round(client, controller, args.n, args.r, f"j{i}",
                                                            args.timeout))
        finally:
            if controller is not None:
                controller.stop()
            server.stop()
    summary = {}
    for what in ("requests_per_admitted_unit", "requests_per_pod", "cpu_ms_per_pod"):
        d = statistics.median(x[what] for x in out["deployments"])
        j = statistics.median(x[what] for x in out["jobs"])
        summary[what] = {"deployments": round(d, 2), "jobs": round(j, 2), "ratio": round(d / j, 2) if j else None}
    out["summary"] = summary
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{args.n} Deployments of {args.r} pods (scaled to {2 * args.r}, then 1) vs {args.n} PyTorchJobs "
          f"of {args.r} pods, {args.rounds} rounds each, alternating; medians:")
    for what, row in summary.items():
        print(f"  {what:28s} deployments {row['deployments']:8.2f}   jobs {row['jobs']:8.2f}   "
              f"ratio {row['ratio']}")


if __name__ == "__main__":
    asyncio.run(main())
