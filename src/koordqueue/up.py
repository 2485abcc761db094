"""`koord-queue up`: the whole system on one machine, with no cluster.

The embedded API server (state in DIR, CRDs installed), a simulated cluster (nodes,
training operator, kubelet) and the controller with its admission webhook, all
talking HTTP to one another as they would on a real cluster. The controller shows as
the chart installs it: a Deployment `koord-queue-controllers` in `koord-queue`, whose
pod's log (`kubectl logs`) is this controller's log. With `--example`, the seed guide's
ElasticQuota, Queue and PyTorchJob are applied and their state shown, so there is
something to look at straight away.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from koordqueue import __version__, aio
from koordqueue.api import constants as c
from koordqueue.apiserver.podlogs import BufferHandler, LogBuffer
from koordqueue.apiserver.server import APIServer
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.loading import look_now, take_snapshot
from koordqueue.controller.logs import TEXT_FORMAT
from koordqueue.controller.manager import Manager
from koordqueue.controller.overview import overview
from koordqueue.controller.resources import UNITS
from koordqueue.controller.scope import default_selector
from koordqueue.controller.visibility import api_resource_list
from koordqueue.controller.webhook import (
    API_SERVICES,
    MUTATE_PATH,
    MUTATING_WEBHOOKS,
    VALIDATE_PATH,
    VALIDATING_WEBHOOKS,
    validating_webhook_configuration,
    webhook_configuration,
)
from koordqueue.jobs import PLURALS
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.kube.errors import AlreadyExists, NotFound
from koordqueue.manifests import all_crds
from koordqueue.realcluster.cluster import RealCluster
from koordqueue.reports import status_text
from koordqueue.simcluster.cluster import SimCluster
from koordqueue.simcluster.workloads import DEPLOYMENTS

log = logging.getLogger(__name__)

EXAMPLE = Path(__file__).parent / "examples" / "seed.yaml"
EXAMPLE_UNIT = "default/pytorch-training-job-py-qu"
WEBHOOK_CONFIG = "koord-queue"
# The controller's Deployment, named and labelled as the chart's (`helm install koord-queue ...`).
CONTROLLER_DEPLOYMENT = "koord-queue-controllers"
CONTROLLER_CONTAINER = "controller"
CONTROLLER_LABELS = {"app.kubernetes.io/name": "koord-queue", "app.kubernetes.io/instance": "koord-queue",
                     "app.kubernetes.io/component": "controller"}


def _resource_for(obj: dict[str, Any]) -> Resource:
    plurals = {
        c.ELASTIC_QUOTA_KIND: (c.ELASTIC_QUOTA_PLURAL, True), c.QUEUE_KIND: (c.QUEUE_PLURAL, True),
        c.PRIORITY_CLASS_KIND: ("priorityclasses", False), c.NAMESPACE_KIND: ("namespaces", False),
        **{kind: (plural, True) for kind, plural in PLURALS.items()},
    }
    plural, namespaced = plurals[obj["kind"]]
    return Resource.of(obj["apiVersion"], plural, namespaced)


async def apply_example(client: KubeClient) -> list[str]:
    """Create the seed guide's objects (left alone when they exist from an earlier run)."""
    applied = []
    for obj in yaml.safe_load_all(EXAMPLE.read_text()):
        if not obj:
            continue
        resource = _resource_for(obj)
        namespace = (obj["metadata"].get("namespace") or "default") if resource.namespaced else None
        try:
            await client.create(resource, obj, namespace=namespace)
            applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
        except AlreadyExists:
            pass
    return applied


async def register_webhook(client: KubeClient, port: int, ca_pem: bytes, job_kinds: frozenset[str],
                           host: str = "127.0.0.1", namespace_selector: Mapping[str, Any] | None = None,
                           workload_kinds: frozenset[str] = frozenset()) -> None:
    """Point the API server at our webhooks on ``host`` (its port changes at every start): the
    mutating one that suspends new jobs, the validating one that keeps queued jobs suspended,
    both in the namespaces whose jobs are queued (``namespace_selector``; None: the default
    of a controller in the system namespace, controller/scope.py)."""
    selector = namespace_selector if namespace_selector is not None else default_selector(c.SYSTEM_NAMESPACE)
    ca_bundle = base64.b64encode(ca_pem).decode()
    for resource, body in (
        (MUTATING_WEBHOOKS, webhook_configuration(
            WEBHOOK_CONFIG, {"url": f"https://{host}:{port}{MUTATE_PATH}", "caBundle": ca_bundle}, job_kinds,
            namespace_selector=selector, workload_kinds=workload_kinds)),
        (VALIDATING_WEBHOOKS, validating_webhook_configuration(
            WEBHOOK_CONFIG, {"url": f"https://{host}:{port}{VALIDATE_PATH}", "caBundle": ca_bundle}, job_kinds,
            namespace_selector=selector, workload_kinds=workload_kinds)),
    ):
        try:
            current = await client.get(resource, WEBHOOK_CONFIG)
        except NotFound:
            await client.create(resource, body)
            continue
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await client.replace(resource, body)


CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False)


async def serve_visibility(server: APIServer, client: KubeClient, manager: Manager) -> None:
    """The visibility API on the embedded API server, served directly from the controller in this
    process (the server has no aggregation layer to proxy an APIService)."""
    if manager.visibility is None:
        return
    server.aggregate(c.VISIBILITY_GROUP, c.VISIBILITY_VERSION, api_resource_list()["resources"],
                     manager.visibility.answer_for)
    await grant_visibility_readers(client)


VISIBILITY_SERVICE = "koord-queue-visibility-server"  # the chart's name (koord-queue.visibilityService)
SERVICES = Resource("", "v1", "services")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices")


def visibility_registration(namespace: str, host: str, port: int, ca_pem: bytes) -> list[tuple[Resource, Any]]:
    """What kube-apiserver's aggregation layer needs to proxy the visibility API to this process:
    the chart's APIService and Service (named as the chart names them), the Service with no
    selector and an EndpointSlice naming ``host`` (this machine's address: kube-apiserver refuses
    loopback ones there, and with --enable-aggregator-routing dials the endpoint itself)."""
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": VISIBILITY_SERVICE, "namespace": namespace},
               "spec": {"ports": [{"name": "visibility", "port": 443, "targetPort": port, "protocol": "TCP"}]}}
    endpoints = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                 "metadata": {"name": f"{VISIBILITY_SERVICE}-up", "namespace": namespace,
                              "labels": {"kubernetes.io/service-name": VISIBILITY_SERVICE}},
                 "addressType": "IPv4", "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
                 "ports": [{"name": "visibility", "port": port, "protocol": "TCP"}]}
    api_service = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                   "metadata": {"name": c.VISIBILITY_APISERVICE},
                   "spec": {"group": c.VISIBILITY_GROUP, "version": c.VISIBILITY_VERSION,
                            "groupPriorityMinimum": 100, "versionPriority": 100,
                            "caBundle": base64.b64encode(ca_pem).decode(),
                            "service": {"name": VISIBILITY_SERVICE, "namespace": namespace, "port": 443}}}
    return [(SERVICES, service), (ENDPOINT_SLICES, endpoints), (API_SERVICES, api_service)]


async def register_visibility(client: KubeClient, manager: Manager, namespace: str, host: str) -> None:
    """The visibility API on the real control plane, through kube-apiserver's aggregation layer
    (each object replaced: the port changes at every start)."""
    if manager.visibility is None or manager.webhook is None:
        return
    for resource, body in visibility_registration(namespace, host, manager.webhook.port, manager.webhook.ca_pem):
        where = namespace if resource.namespaced else None
        try:
            await client.create(resource, body, namespace=where)
        except AlreadyExists:
            current = await client.get(resource, body["metadata"]["name"], namespace=where)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            if resource == SERVICES:  # (its clusterIP is kept: immutable)
                body["spec"] = {**current["spec"], "ports": body["spec"]["ports"]}
            await client.replace(resource, body)
    await grant_visibility_readers(client)


async def grant_visibility_readers(client: KubeClient) -> None:
    """The visibility API readable by every authenticated user, as the chart's default readers
    (each sees only its namespaces' units)."""
    name = "koord-queue-visibility-reader"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": [{"apiGroups": [c.VISIBILITY_GROUP], "verbs": ["get"],
                       "resources": [f"{p}{s}" for p in ("queues", "elasticquotas")
                                     for s in ("", f"/{c.VISIBILITY_SUBRESOURCE}")]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                             "name": "system:authenticated"}]}
    for resource, body in ((CLUSTER_ROLES, role), (CLUSTER_ROLE_BINDINGS, binding)):
        with contextlib.suppress(AlreadyExists):
            await client.create(resource, body)


async def _wait_for_phase(client: KubeClient, key: str, phases: set[str], seconds: float) -> str:
    namespace, _, name = key.partition("/")
    deadline = time.monotonic() + seconds
    phase = ""
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFound):
            unit = await client.get(UNITS, name, namespace=namespace)
            phase = (unit.get("status") or {}).get("phase") or ""
            if phase in phases:
                break
        await asyncio.sleep(0.2)
    return phase


def controller_deployment(config: ControllerConfig) -> dict[str, Any]:
    """The Deployment the chart would make for this controller (its pod stands for this process)."""
    args = [f"--job-kinds={','.join(sorted(config.job_kinds))}", f"--namespace={config.system_namespace}",
            "--no-leader-elect", "--webhook" if config.webhook else "--no-webhook"]
    if config.dashboard:
        args.append("--dashboard")
    container = {"name": CONTROLLER_CONTAINER, "image": f"koord-queue:{__version__}", "args": args,
                 "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                               "limits": {"cpu": "1", "memory": "1Gi"}}}
    return {
        "apiVersion": c.APPS_API_VERSION, "kind": c.DEPLOYMENT_KIND,
        "metadata": {"name": CONTROLLER_DEPLOYMENT, "namespace": config.system_namespace,
                     "labels": dict(CONTROLLER_LABELS)},
        "spec": {"replicas": 1, "selector": {"matchLabels": dict(CONTROLLER_LABELS)},
                 "template": {"metadata": {"labels": dict(CONTROLLER_LABELS)},
                              "spec": {"containers": [container]}}},
    }


async def show_controller(client: KubeClient, config: ControllerConfig, seconds: float = 30.0) -> None:
    """Create (or bring up to date) the controller's Deployment and wait, a while, for its pod."""
    body = controller_deployment(config)
    try:
        await client.create(DEPLOYMENTS, body, namespace=config.system_namespace)
    except AlreadyExists:  # from an earlier run on this state
        await client.patch(DEPLOYMENTS, CONTROLLER_DEPLOYMENT, {"spec": body["spec"]}, namespace=config.system_namespace)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        deployment = await client.get(DEPLOYMENTS, CONTROLLER_DEPLOYMENT, namespace=config.system_namespace)
        if (deployment.get("status") or {}).get("availableReplicas"):
            return
        await asyncio.sleep(0.1)


class _CriFormatter(logging.Formatter):
    """Log lines as a kubelet's container runtime writes them, for kwok to serve."""

    def format(self, record: logging.LogRecord) -> str:
        from koordqueue.realcluster.cluster import cri_line

        return "".join(cri_line(line) for line in super().format(record).splitlines()).rstrip("\n")


@contextlib.contextmanager
def controller_log(handler: logging.Handler) -> Iterator[None]:
    """Send what the controller logs (INFO and up, as `koord-queue controller` does) to `handler`,
    its pod's log; the simulated cluster's own logs are not the controller's."""
    handler.addFilter(lambda record: not record.name.startswith(("koordqueue.apiserver", "koordqueue.simcluster", "koordqueue.up")))
    logger = logging.getLogger("koordqueue")
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class UpError(Exception):
    """The system could not start (a port taken, ...): said in words, not a traceback."""


async def _started(task: asyncio.Task[None], ready: asyncio.Event, stop: asyncio.Event) -> None:
    """Wait for the controller's endpoints, its failure, or Ctrl-C, whichever comes first."""
    waiting = asyncio.create_task(ready.wait())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({task, waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    stopping.cancel()
    if task.done():
        error = task.exception() if not task.cancelled() else None
        raise UpError(f"the controller could not start: {error}")
    if not ready.is_set():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise UpError("stopped before the controller was up")


async def _serve(server: APIServer | RealCluster, client: KubeClient, manager: Manager, config: ControllerConfig, nodes: int,
                 gpus_per_node: int, example: bool, state_dir: Path) -> None:
    """Register the webhook, apply the example, and tell the user where everything is."""
    assert manager.webhook is not None
    host = "127.0.0.1" if isinstance(server, APIServer) else config.webhook_host
    await register_webhook(client, manager.webhook.port, manager.webhook.ca_pem, config.job_kinds, host,
                           config.namespace_selector, config.workload_kinds)
    if isinstance(server, APIServer):
        await serve_visibility(server, client, manager)
    elif host != "127.0.0.1":
        await register_visibility(client, manager, config.system_namespace, host)
    await show_controller(client, config)
    kind = "kube-apiserver" if isinstance(server, RealCluster) else "API server"
    print(f"koord-queue is up: {kind} {server.url}, {nodes} simulated nodes with "
          f"{gpus_per_node} GPUs each; metrics on http://127.0.0.1:{manager.metrics_port}/metrics", flush=True)
    if manager.dashboard is not None:
        print(f"Dashboard: http://127.0.0.1:{manager.dashboard.port}/", flush=True)
    if manager.koord_api is not None:
        print(f"Koord-Queue's HTTP API: http://127.0.0.1:{manager.koord_api.port}{c.KOORD_API_QUEUE}", flush=True)
    if example:
        applied = await apply_example(client)
        print("Applied the seed guide's example: " + (", ".join(applied) or "(already there)"), flush=True)
        phase = await _wait_for_phase(client, EXAMPLE_UNIT, {c.Phase.RUNNING.value}, 15.0)
        print(f"QueueUnit {EXAMPLE_UNIT}: {phase or 'not created yet'}", flush=True)
        snap = await take_snapshot(client, config.system_namespace)
        now = time.time()
        told = look_now(snap, now)
        view = overview(snap.engine, snap.quotas, snap.units, snap.capacity, now, queue_quotas=snap.queue_quotas,
                        told=told)
        print(status_text(view), flush=True)
    print("\nTry:")
    print(f"  export KUBECONFIG={server.kubeconfig_path}")
    print("  kubectl get queueunit -A")
    print("  kubectl describe elasticquota pytorch-team-a")
    print("  kubectl get queue -n koord-queue")
    print(f"  kubectl logs -n {config.system_namespace} deployment/{CONTROLLER_DEPLOYMENT}")
    command = _command()
    print(f"  {command} status")
    print(f"  {command} explain pytorchjob/pytorch-training-job")
    print(f"Press Ctrl-C to stop; state is kept in {state_dir}", flush=True)


def _command() -> str:
    """How to call koord-queue from this shell: by name when it is on the PATH, else the
    script beside this Python (the virtualenv `make` made is not activated)."""
    if shutil.which("koord-queue"):
        return "koord-queue"
    beside = Path(sys.executable).parent / "koord-queue"
    return str(beside) if beside.exists() else f"{sys.executable} -m koordqueue.cli"


def controller_config(metrics_port: int, dashboard_port: int, api_handler_port: int = 0,
                      device_class_mappings: str = "") -> ControllerConfig:
    """The controller of `up`: loopback only, no leader election, webhook, dashboard and
    Koord-Queue's HTTP API on."""
    return ControllerConfig(
        leader_election=False, metrics_host="127.0.0.1", metrics_port=metrics_port,
        webhook=True, webhook_host="127.0.0.1", webhook_port=0, visibility=True,
        dashboard=True, dashboard_host="127.0.0.1", dashboard_port=dashboard_port,
        api_handler=True, api_handler_host="127.0.0.1", api_handler_port=api_handler_port,
        quota_status_refresh_seconds=1.0, queue_status_refresh_seconds=5.0,
        workload_kinds=frozenset(c.WORKLOAD_EXTENSIONS), device_class_mappings=device_class_mappings,
    )


def kube_controller_config(metrics_port: int, dashboard_port: int, api_handler_port: int = 0,
                           device_class_mappings: str = "") -> ControllerConfig:
    """`up`'s controller on the real control plane: its webhook (and the visibility API on its
    port) on this machine's address, which kube-apiserver may name in the visibility API's
    EndpointSlice (not loopback, which it refuses there); on loopback when the machine has none
    (no default route), the visibility API then not registered."""
    from koordqueue.realcluster.cluster import host_address

    config = controller_config(metrics_port, dashboard_port, api_handler_port, device_class_mappings)
    try:
        host = host_address()
    except OSError as e:
        log.warning("no address but loopback (%s): the visibility API is not registered with kube-apiserver", e)
        return config
    service = f"{VISIBILITY_SERVICE}.{config.system_namespace}.svc"  # the name kube-apiserver checks
    return replace(config, webhook_host=host, webhook_hosts=(host, service, "127.0.0.1"))


async def run_up(state_dir: Path, nodes: int, gpus_per_node: int, example: bool, metrics_port: int = 0,
                 dashboard_port: int = 0, ready: asyncio.Event | None = None,
                 stop: asyncio.Event | None = None, api_handler_port: int = 0,
                 device_class_mappings: str = "") -> None:
    state_dir = state_dir.resolve()  # what it prints (KUBECONFIG=...) works from any directory
    server = APIServer(state_dir, crds=all_crds())
    await server.start()
    config = controller_config(metrics_port, dashboard_port, api_handler_port, device_class_mappings)
    log_buffer = LogBuffer()
    server.pod_logs.attach(config.system_namespace, CONTROLLER_LABELS, CONTROLLER_CONTAINER, log_buffer)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        async with KubeClient(load_config(str(server.kubeconfig_path)), qps=1000, burst=2000) as client, \
                SimCluster(client, nodes=nodes, gpus_per_node=gpus_per_node, workloads=True):
            handler = BufferHandler(log_buffer)
            handler.setFormatter(logging.Formatter(TEXT_FORMAT))
            with controller_log(handler):
                manager = Manager(client, config)
                task = asyncio.create_task(manager.run())
                try:
                    await _started(task, manager.endpoints_ready, stop)
                    await _serve(server, client, manager, config, nodes, gpus_per_node, example, state_dir)
                    if ready is not None:
                        ready.set()
                    await stop.wait()
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
    finally:
        await server.stop()


async def run_up_kube(state_dir: Path, nodes: int, gpus_per_node: int, example: bool, metrics_port: int = 0,
                      dashboard_port: int = 0, ready: asyncio.Event | None = None,
                      stop: asyncio.Event | None = None, api_handler_port: int = 0,
                      device_class_mappings: str = "") -> None:
    """`up` on the real control plane (kube-apiserver, etcd, kwok, the training operator),
    built from e2e/ first when it is not built yet."""
    from koordqueue.realcluster import build
    from koordqueue.realcluster.cluster import NodeShape, RealCluster, install_crds

    def say(text: str) -> None:
        print(text, flush=True)

    try:
        await asyncio.to_thread(build.build, say, build.CONTROL_PLANE)
    except build.BuildError as e:
        raise UpError(str(e)) from None
    cluster = RealCluster(state_dir, NodeShape(count=nodes, gpus=gpus_per_node))
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.to_thread(cluster.start, say)
        await asyncio.to_thread(install_crds, cluster)
        handler = logging.FileHandler(cluster.controller_log)  # kwok serves it as the Deployment's pod log
        handler.setFormatter(_CriFormatter(TEXT_FORMAT))
        async with KubeClient(load_config(str(cluster.kubeconfig_path)), qps=1000, burst=2000) as client:
            config = kube_controller_config(metrics_port, dashboard_port, api_handler_port, device_class_mappings)
            with controller_log(handler):
                manager = Manager(client, config)
                task = asyncio.create_task(manager.run())
                try:
                    await _started(task, manager.endpoints_ready, stop)
                    await _serve(cluster, client, manager, config, nodes, gpus_per_node, example, state_dir)
                    if ready is not None:
                        ready.set()
                    await stop.wait()
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
        handler.close()
    finally:
        await asyncio.to_thread(cluster.stop)


def main(state_dir: Path, nodes: int, gpus_per_node: int, example: bool, metrics_port: int,
         dashboard_port: int, control_plane: str = "embedded", api_handler_port: int = c.KOORD_API_PORT,
         device_class_mappings: str = "") -> None:
    logging.basicConfig(level=logging.WARNING, format=TEXT_FORMAT)
    for handler in logging.getLogger().handlers:  # the terminal gets warnings; the controller's pod log, all
        handler.setLevel(logging.WARNING)
    state_dir = state_dir.resolve()  # what it prints (KUBECONFIG=...) works from any directory
    run = run_up_kube if control_plane == "kube" else run_up
    try:
        aio.run(run(state_dir, nodes, gpus_per_node, example, metrics_port, dashboard_port,
                    api_handler_port=api_handler_port, device_class_mappings=device_class_mappings))
    except UpError as e:
        raise SystemExit(f"koord-queue up: {e}") from None
