"""What the training operator makes of a job: pods (labels, env, ports, init containers,
restart policy) and Services. Each test runs on the embedded control plane (the simulated
operator) and on the real one (the Kubeflow training operator v1.9.2 itself: `make test-kube`),
against the same expectations, which were read off the real operator's pods."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.apiserver.server import APIServer
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.simcluster.cluster import SimCluster
from tests.simcluster.conftest import EVENTS, FAST_RETRY, PODS, Object, seed_job, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]
SERVICES = Resource("", "v1", c.SERVICES_PLURAL)
TFJOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.TF_JOB_PLURAL)
MPIJOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.MPI_JOB_PLURAL)
PYTORCHJOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
# What the embedded cluster puts on pods for its own simulation (its gang scheduler, its kubelet's clock).
SIMULATION_KEYS = {c.ANNOTATION_GANG_NAME, c.ANNOTATION_GANG_MIN_AVAILABLE, c.ANNOTATION_SIM_DURATION}
SEED_FIELD_REFS = [
    {"name": "RANK", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                "fieldPath": "metadata.annotations['kubeflow.org/rank']"}}},
    {"name": "MASTER_ADDR", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "metadata.annotations['kubeflow.org/master-address']"}}},
    {"name": "MASTER_PORT", "value": "29500"},
]


@pytest.fixture
async def kube_client(tmp_path: Path, control_plane: str, request: pytest.FixtureRequest) -> AsyncIterator[KubeClient]:
    """A client of the embedded API server with the simulated cluster running, or of the real control plane."""
    if control_plane == "kube":
        cluster = request.getfixturevalue("kube")
        async with KubeClient(load_config(str(cluster.kubeconfig_path)), qps=0, retry=FAST_RETRY) as client:
            yield client
        return
    server = APIServer(tmp_path / "state")
    await server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig_path)), qps=0, retry=FAST_RETRY) as client, \
                SimCluster(client):
            yield client
    finally:
        await server.stop()


async def made(client: KubeClient, job: str, pods: list[str], services: list[str]) -> tuple[dict[str, Object],
                                                                                          dict[str, Object]]:
    """The job's pods and Services by name, once all of them are there."""
    async def listed() -> tuple[dict[str, Object], dict[str, Object]] | None:
        found = []
        for resource, names in ((PODS, pods), (SERVICES, services)):
            items = (await client.list(resource, namespace="default",
                                       label_selector=f"{c.LABEL_JOB_NAME}={job}")).items
            found.append({item["metadata"]["name"]: item for item in items})
            if sorted(found[-1]) != sorted(names):
                return None
        return found[0], found[1]

    return await wait_for(listed, f"the pods {pods} and services {services}", timeout=60)


def labels(job: str, rtype: str, index: int | None, operator: str = "pytorchjob-controller",
           master: bool = False) -> dict[str, str]:
    out = {c.LABEL_JOB_NAME: job, c.LABEL_OPERATOR_NAME: operator, c.LABEL_REPLICA_TYPE: rtype}
    if index is not None:
        out[c.LABEL_REPLICA_INDEX] = str(index)
    if master:
        out[c.LABEL_JOB_ROLE] = "master"
    return out


def own_annotations(pod: Object) -> dict[str, str]:
    return {k: v for k, v in (pod["metadata"].get("annotations") or {}).items() if k not in SIMULATION_KEYS}


def env(*pairs: tuple[str, str]) -> list[Object]:
    return [{"name": name, "value": value} if value else {"name": name} for name, value in pairs]


def pytorch_env(job: str, rank: int, world: int, nproc: str = "auto", nnodes: int = 2) -> list[Object]:
    master = f"{job}-master-0"
    return env(("PYTHONUNBUFFERED", "1"), ("MASTER_PORT", "23456"), ("PET_MASTER_PORT", "23456"),
               ("MASTER_ADDR", master), ("PET_MASTER_ADDR", master), ("WORLD_SIZE", str(world)),
               ("RANK", str(rank)), ("PET_NODE_RANK", str(rank)), ("PET_NPROC_PER_NODE", nproc),
               ("PET_NNODES", str(nnodes)))


def init_pytorch(job: str) -> dict[str, Any]:
    return {"name": "init-pytorch", "image": "alpine:3.10", "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", "err=1;for i in $(seq 100); do if nslookup " + job + "-master-0; then err=0 "
                        "&& break; fi;echo waiting for master; sleep 2; done; exit $err"],
            "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}}}


def container_view(container: Object) -> Object:
    """What the operator decides of a container (leaving out what the API server adds on a cluster)."""
    keys = ("name", "image", "imagePullPolicy", "command", "args", "env", "ports")
    view = {k: container[k] for k in keys if k in container}
    if container.get("resources"):
        view["resources"] = {k: v for k, v in container["resources"].items() if k == "limits" or k == "requests"}
    return view


def service_view(service: Object) -> Object:
    spec = service["spec"]
    return {"labels": service["metadata"]["labels"], "selector": spec["selector"], "clusterIP": spec["clusterIP"],
            "ports": sorted((p["name"], p["port"], p["protocol"], p["targetPort"]) for p in spec["ports"]),
            "owner": [(o["kind"], o["name"], o["controller"], o["blockOwnerDeletion"])
                      for o in service["metadata"]["ownerReferences"]]}


async def event_messages(client: KubeClient, job: str) -> set[tuple[str, str, str]]:
    items = (await client.list(EVENTS, namespace="default", field_selector=f"involvedObject.name={job}")).items
    return {(e["type"], e["reason"], e["message"]) for e in items}


async def test_the_seed_pytorchjob(kube_client: KubeClient) -> None:
    job = seed_job("pt-seed")
    job["metadata"]["annotations"] = {}
    await kube_client.create(PYTORCHJOBS, job, namespace="default")
    pods, services = await made(kube_client, "pt-seed", ["pt-seed-master-0", "pt-seed-worker-0"],
                                ["pt-seed-master-0", "pt-seed-worker-0"])
    master, worker = pods["pt-seed-master-0"], pods["pt-seed-worker-0"]
    assert master["metadata"]["labels"] == labels("pt-seed", "master", 0, master=True)
    assert worker["metadata"]["labels"] == labels("pt-seed", "worker", 0)
    for pod, rank in ((master, 0), (worker, 1)):
        assert own_annotations(pod) == {}  # no kubeflow.org/rank, no kubeflow.org/master-address
        assert [(o["kind"], o["name"], o["controller"], o["blockOwnerDeletion"])
                for o in pod["metadata"]["ownerReferences"]] == [(c.PYTORCH_JOB_KIND, "pt-seed", True, True)]
        assert pod["spec"]["restartPolicy"] == "OnFailure"
        [container] = pod["spec"]["containers"]
        # The seed's env first (its fieldRefs read annotations nobody writes), then the operator's: the last wins.
        assert container["env"] == SEED_FIELD_REFS + pytorch_env("pt-seed", rank, world=2)
        assert container["ports"] == [{"containerPort": 23456, "name": "pytorchjob-port", "protocol": "TCP"}]
    assert "initContainers" not in master["spec"]
    assert [container_view(x) for x in worker["spec"]["initContainers"]] == [init_pytorch("pt-seed")]
    for name, rtype in (("pt-seed-master-0", "master"), ("pt-seed-worker-0", "worker")):
        assert service_view(services[name]) == {
            "labels": labels("pt-seed", rtype, 0), "selector": labels("pt-seed", rtype, 0), "clusterIP": "None",
            "ports": [("pytorchjob-port", 23456, "TCP", 23456)], "owner": [(c.PYTORCH_JOB_KIND, "pt-seed", True, True)]}

    expected = {("Normal", "SuccessfulCreatePod", f"Created pod: {name}") for name in pods} | {
        ("Normal", "SuccessfulCreateService", f"Created service: {name}") for name in services}

    async def events() -> bool:
        return await event_messages(kube_client, "pt-seed") >= expected

    await wait_for(events, f"the operator's events {sorted(expected)}", timeout=30)


async def test_an_elastic_pytorchjob_of_workers_with_ports_of_its_own(kube_client: KubeClient) -> None:
    job = seed_job("elastic")
    job["metadata"]["annotations"] = {}
    specs = job["spec"]["pytorchReplicaSpecs"]
    worker = specs.pop("Worker")
    specs.clear()
    specs["Worker"] = worker
    worker["replicas"] = 2
    del worker["restartPolicy"]  # the kind's default, OnFailure, wins over the template's
    pod_spec = worker["template"]["spec"]
    pod_spec["restartPolicy"] = "Always"
    pod_spec["containers"][0]["ports"] = [{"name": "pytorchjob-port", "containerPort": 29400},
                                          {"name": "metrics", "containerPort": 8080}]
    pod_spec["containers"].append({"name": "sidecar", "image": "busybox", "env": [{"name": "A", "value": "1"}]})
    job["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d", "maxReplicas": 3, "maxRestarts": 5, "rdzvId": "xyz",
                                    "rdzvConf": [{"key": "a", "value": "b"}, {"key": "c", "value": "d"}]}
    await kube_client.create(PYTORCHJOBS, job, namespace="default")
    names = ["elastic-worker-0", "elastic-worker-1"]
    pods, services = await made(kube_client, "elastic", names, names)
    # No master: worker 0 has the master's role, and nobody gets MASTER_ADDR, RANK or WORLD_SIZE.
    assert pods["elastic-worker-0"]["metadata"]["labels"] == labels("elastic", "worker", 0, master=True)
    assert pods["elastic-worker-1"]["metadata"]["labels"] == labels("elastic", "worker", 1)
    rendezvous = env(("PYTHONUNBUFFERED", "1"), ("PET_NPROC_PER_NODE", "auto"),
                     ("PET_RDZV_ENDPOINT", "elastic-worker-0:29400"), ("PET_RDZV_BACKEND", "c10d"),
                     ("PET_NNODES", "3:3"), ("PET_MAX_RESTARTS", "5"), ("PET_RDZV_ID", "xyz"),
                     ("PET_RDZV_CONF", "a=b,c=d"))
    for pod in pods.values():
        assert pod["spec"]["restartPolicy"] == "OnFailure"
        assert "initContainers" not in pod["spec"]
        pytorch, sidecar = pod["spec"]["containers"]
        assert pytorch["env"] == SEED_FIELD_REFS + rendezvous  # every container gets the operator's env
        assert sidecar["env"] == env(("A", "1")) + rendezvous
        assert pytorch["ports"] == [{"name": "pytorchjob-port", "containerPort": 29400, "protocol": "TCP"},
                                    {"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
        assert "ports" not in sidecar
    assert service_view(services["elastic-worker-1"])["ports"] == [("metrics", 8080, "TCP", 8080),
                                                                   ("pytorchjob-port", 29400, "TCP", 29400)]

    async def warned() -> set[tuple[str, str, str]] | None:
        found = await event_messages(kube_client, "elastic")
        return found if any(r == "SetPodTemplateRestartPolicy" for _, r, _ in found) else None

    assert ("Warning", "SetPodTemplateRestartPolicy",
            "Restart policy in pod template will be overwritten by restart policy in replica spec") in \
        await wait_for(warned, "the restart policy warning", timeout=30)


async def test_nproc_per_node_exit_code_and_the_templates_labels(kube_client: KubeClient) -> None:
    job = seed_job("nproc", workers=2)
    job["metadata"]["annotations"] = {}
    job["spec"]["nprocPerNode"] = "4"
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["metadata"] = {"labels": {"team": "a"}, "annotations": {"note": "x"}}
        spec["template"]["spec"]["containers"][0]["ports"] = [{"name": "other", "containerPort": 1234}]
    job["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = "ExitCode"
    await kube_client.create(PYTORCHJOBS, job, namespace="default")
    names = ["nproc-master-0", "nproc-worker-0", "nproc-worker-1"]
    pods, services = await made(kube_client, "nproc", names, names)
    for name, rank in zip(names, range(3), strict=True):
        pod = pods[name]
        rtype, index = ("master", 0) if rank == 0 else ("worker", rank - 1)
        assert pod["metadata"]["labels"] == {"team": "a", **labels("nproc", rtype, index, master=rank == 0)}
        assert own_annotations(pod) == {"note": "x"}
        assert pod["spec"]["restartPolicy"] == ("Never" if rank == 0 else "OnFailure")  # ExitCode: Never
        [container] = pod["spec"]["containers"]
        assert container["env"] == SEED_FIELD_REFS + pytorch_env("nproc", rank, world=12, nproc="4", nnodes=3)
        assert container["ports"] == [{"name": "other", "containerPort": 1234, "protocol": "TCP"},
                                      {"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}]
        assert service_view(services[name])["ports"] == [("other", 1234, "TCP", 1234),
                                                         ("pytorchjob-port", 23456, "TCP", 23456)]


def tf_job(name: str, roles: dict[str, dict[str, Any]], dynamic: bool = False) -> Object:
    specs = {}
    for role, extra in roles.items():
        container = {"name": "tensorflow", "image": "tf", "resources": {"requests": {"cpu": "1"}}}
        if "port" in extra:
            container["ports"] = [{"name": "tfjob-port", "containerPort": extra["port"]}]
        specs[role] = {"replicas": extra.get("replicas", 1), "template": {"spec": {"containers": [container]}}}
        if "restartPolicy" in extra:
            specs[role]["restartPolicy"] = extra["restartPolicy"]
    job: Object = {"apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.TF_JOB_KIND,
                   "metadata": {"name": name, "namespace": "default"}, "spec": {"tfReplicaSpecs": specs}}
    if dynamic:
        job["spec"]["enableDynamicWorker"] = True
    return job


def tf_config(pod: Object) -> Any:
    [container] = pod["spec"]["containers"]
    [var] = [v for v in container.get("env") or [] if v["name"] == "TF_CONFIG"]
    return var["value"]


async def test_tfjobs_get_tf_config(kube_client: KubeClient) -> None:
    await kube_client.create(TFJOBS, tf_job("tfj", {"PS": {}, "Worker": {"replicas": 2, "port": 3333,
                                                                         "restartPolicy": "OnFailure"}}),
                             namespace="default")
    await kube_client.create(TFJOBS, tf_job("tfsolo", {"Worker": {}}), namespace="default")
    await kube_client.create(TFJOBS, tf_job("tfdyn", {"Chief": {}, "PS": {}, "Worker": {"replicas": 2, "port": 3333}},
                                            dynamic=True), namespace="default")
    names = ["tfj-ps-0", "tfj-worker-0", "tfj-worker-1"]
    pods, services = await made(kube_client, "tfj", names, names)
    cluster = '{"ps":["tfj-ps-0.default.svc:2222"],"worker":["tfj-worker-0.default.svc:3333",' \
              '"tfj-worker-1.default.svc:3333"]}'
    for name, task in (("tfj-ps-0", '{"type":"ps","index":0}'), ("tfj-worker-0", '{"type":"worker","index":0}'),
                       ("tfj-worker-1", '{"type":"worker","index":1}')):
        assert tf_config(pods[name]) == f'{{"cluster":{cluster},"task":{task},"environment":"cloud"}}'
        assert [e["name"] for e in pods[name]["spec"]["containers"][0]["env"]] == ["TF_CONFIG"]
    # No chief or master: worker 0 has the master's role. The kind's restart policy is Never.
    assert pods["tfj-worker-0"]["metadata"]["labels"] == labels("tfj", "worker", 0, "tfjob-controller", master=True)
    assert pods["tfj-ps-0"]["metadata"]["labels"] == labels("tfj", "ps", 0, "tfjob-controller")
    assert (pods["tfj-ps-0"]["spec"]["restartPolicy"], pods["tfj-worker-1"]["spec"]["restartPolicy"]) == \
        ("Never", "OnFailure")
    assert pods["tfj-ps-0"]["spec"]["containers"][0]["ports"] == [
        {"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]
    assert service_view(services["tfj-worker-1"])["ports"] == [("tfjob-port", 3333, "TCP", 3333)]

    solo, _ = await made(kube_client, "tfsolo", ["tfsolo-worker-0"], ["tfsolo-worker-0"])
    assert "env" not in solo["tfsolo-worker-0"]["spec"]["containers"][0]  # one replica: not distributed

    names = ["tfdyn-chief-0", "tfdyn-ps-0", "tfdyn-worker-0", "tfdyn-worker-1"]
    dyn, _ = await made(kube_client, "tfdyn", names, names)
    assert json.loads(tf_config(dyn["tfdyn-chief-0"])) == {"cluster": {"worker": {}, "ps": []},
                                                            "task": {"type": "chief", "index": 0}}
    assert tf_config(dyn["tfdyn-worker-1"]) == '{"cluster":{"worker":{"1":"tfdyn-worker-1.default.svc:3333"},' \
                                               '"ps":["tfdyn-ps-0.default.svc:2222"]},"task":{"type":"worker","index":1}}'
    assert dyn["tfdyn-chief-0"]["metadata"]["labels"] == labels("tfdyn", "chief", 0, "tfjob-controller", master=True)
    assert dyn["tfdyn-worker-0"]["metadata"]["labels"] == labels("tfdyn", "worker", 0, "tfjob-controller")


async def test_an_mpijob_launcher_and_workers(kube_client: KubeClient) -> None:
    container = {"name": "mpi", "image": "mpi", "resources": {"requests": {"cpu": "1"}}}
    job = {"apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.MPI_JOB_KIND,
           "metadata": {"name": "mpij", "namespace": "default"},
           "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
               "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                   {**copy.deepcopy(container), "command": ["mpirun"]}]}}},
               "Worker": {"replicas": 2, "template": {"spec": {"containers": [copy.deepcopy(container)]}}}}}}
    await kube_client.create(MPIJOBS, job, namespace="default")
    pods, _ = await made(kube_client, "mpij", ["mpij-launcher", "mpij-worker-0", "mpij-worker-1"], [])
    launcher = pods["mpij-launcher"]
    assert launcher["metadata"]["labels"] == labels("mpij", "launcher", None, "mpijob-controller", master=True)
    assert launcher["spec"]["restartPolicy"] == "Never"
    assert launcher["spec"]["containers"][0]["env"] == env(
        ("OMPI_MCA_plm_rsh_agent", "/etc/mpi/kubexec.sh"), ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
        ("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", ""), ("I_MPI_HYDRA_BOOTSTRAP", "rsh"),
        ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/etc/mpi/kubexec.sh"))
    for index in (0, 1):
        worker = pods[f"mpij-worker-{index}"]
        assert worker["metadata"]["labels"] == labels("mpij", "worker", index, "mpijob-controller")
        assert own_annotations(worker) == {}
        assert (worker["spec"]["containers"][0]["command"], worker["spec"]["containers"][0]["args"]) == \
            (["sleep"], ["365d"])
        assert "env" not in worker["spec"]["containers"][0]
