"""The simulated cluster under a ServiceAccount's RBAC: what it needs, exactly, and nothing more.

It proves the server's per-identity request log end to end: every rule of the ClusterRole below is
used by a run of the simulation, and nothing it does is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from koordqueue.api import constants as c
from koordqueue.apiserver.controls import Access
from koordqueue.apiserver.server import APIServer
from koordqueue.jobs import adapter_for
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.simcluster.cluster import SimCluster
from tests.controller.test_app_kinds import ray_cluster, spark_app, workflow
from tests.simcluster.conftest import (
    FAST_RETRY,
    JOBS,
    PYTORCHJOBS,
    batch_job,
    condition_true,
    pods_of,
    seed_job,
    wait_for,
)
from tests.simcluster.test_rayjob import rayjob

pytestmark = pytest.mark.timeout(40)
NAMESPACE, ACCOUNT = "kube-system", "sim-cluster"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
RBAC = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
RBAC_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts")
DEPLOYMENTS = Resource("apps", "v1", "deployments")
STATEFUL_SETS = Resource("apps", "v1", "statefulsets")
RAYJOBS = Resource(c.RAY_GROUP, "v1", c.RAY_PLURAL)
RAY_CLUSTERS = Resource(c.RAY_GROUP, "v1", c.RAY_CLUSTER_PLURAL)
SPARK_APPS = Resource.of(c.SPARK_API_VERSION, c.SPARK_PLURAL)
WORKFLOWS = Resource.of(c.ARGO_API_VERSION, c.ARGO_PLURAL)

# What the simulated cluster asks of the API server: (group, resource, verbs).
NEEDS = [
    ("", "nodes", ["create", "list", "watch"]),
    ("", "nodes/status", ["patch"]),
    ("", "pods", ["create", "delete", "list", "watch"]),
    ("", "pods/binding", ["create"]),
    ("", "pods/status", ["patch"]),
    ("", "services", ["create", "delete", "list", "watch"]),  # the training operator's, one per replica
    ("", "events", ["create", "patch"]),
    ("kubeflow.org", "pytorchjobs", ["list", "watch"]),
    ("kubeflow.org", "pytorchjobs/status", ["patch"]),
    ("kubeflow.org", "tfjobs", ["list", "watch"]),
    ("kubeflow.org", "mpijobs", ["list", "watch"]),
    ("batch", "jobs", ["list", "watch"]),
    ("batch", "jobs/status", ["patch"]),
    ("ray.io", "rayjobs", ["list", "watch"]),
    ("ray.io", "rayjobs/status", ["patch"]),
    ("ray.io", "rayclusters", ["list", "watch"]),
    ("ray.io", "rayclusters/status", ["patch"]),
    ("sparkoperator.k8s.io", "sparkapplications", ["list", "watch"]),
    ("sparkoperator.k8s.io", "sparkapplications/status", ["patch"]),
    ("argoproj.io", "workflows", ["list", "watch"]),
    ("argoproj.io", "workflows/status", ["patch"]),
    ("apps", "deployments", ["list", "watch"]),
    ("apps", "deployments/status", ["patch"]),
    ("apps", "replicasets", ["create", "list", "watch", "patch"]),
    ("apps", "replicasets/status", ["patch"]),
    ("apps", "statefulsets", ["list", "watch"]),
    ("apps", "statefulsets/status", ["patch"]),
    # the training operator's validating webhook, registered while the simulation runs
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", ["create", "delete"]),
]


def granted() -> set[Access]:
    out = set()
    for group, resource, verbs in NEEDS:
        name, _, sub = resource.partition("/")
        out |= {Access(verb, group, name, sub) for verb in verbs}
    return out


async def test_the_simulation_uses_every_rule_it_is_granted_and_no_other(server: APIServer, client: KubeClient,
                                                                         tmp_path: Path) -> None:
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": ACCOUNT}}, namespace=NAMESPACE)
    await client.create(RBAC, {"metadata": {"name": ACCOUNT}, "rules": [
        {"apiGroups": [group], "resources": [resource], "verbs": verbs} for group, resource, verbs in NEEDS]})
    await client.create(RBAC_BINDINGS, {
        "metadata": {"name": ACCOUNT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]})
    config = load_config(str(server.write_kubeconfig_for(NAMESPACE, ACCOUNT, tmp_path / "sim.kubeconfig")))
    pytorch = adapter_for(c.KUBEFLOW_API_VERSION, c.PYTORCH_JOB_KIND)
    assert pytorch is not None

    async with KubeClient(config, qps=0, retry=FAST_RETRY) as as_sim:
        async with SimCluster(as_sim, nodes=2):
            pass  # registers the nodes
        async with SimCluster(as_sim, nodes=2, workloads=True):  # finds them there: brings their status up to date
            await client.create(PYTORCHJOBS, seed_job("ranked"))

            async def running() -> bool:
                pods = await pods_of(client, c.LABEL_JOB_NAME, "ranked")
                return len(pods) == 2 and all(p["status"]["phase"] == c.POD_RUNNING for p in pods)

            await wait_for(running, "pods Running")
            job = await client.get(PYTORCHJOBS, "ranked", namespace="default")
            await client.patch(PYTORCHJOBS, "ranked", pytorch.suspend_patch(job), namespace="default")

            async def gone() -> bool:
                return not await pods_of(client, c.LABEL_JOB_NAME, "ranked")

            await wait_for(gone, "pods deleted on suspend")
            await client.patch(PYTORCHJOBS, "ranked", pytorch.resume_patch(job), namespace="default")
            await wait_for(running, "pods Running again")  # the same "Created pod" events again: a patch
            await client.create(JOBS, batch_job("batched", duration=0.1))

            async def complete() -> bool:
                return condition_true(await client.get(JOBS, "batched", namespace="default"),
                                      c.BATCH_CONDITION_COMPLETE)

            await wait_for(complete, "the batch Job Complete")
            await client.create(RAYJOBS, rayjob("ray", duration=0.1))

            async def ray_complete() -> bool:
                ray = await client.get(RAYJOBS, "ray", namespace="default")
                return (ray.get("status") or {}).get("jobDeploymentStatus") == "Complete"

            await wait_for(ray_complete, "the RayJob Complete")
            await client.create(SPARK_APPS, spark_app("spark", duration=0.1), namespace="default")
            await client.create(WORKFLOWS, workflow("wf", duration=0.1), namespace="default")
            await client.create(RAY_CLUSTERS, ray_cluster("rc"), namespace="default")

            async def apps_done() -> bool:
                spark = (await client.get(SPARK_APPS, "spark", namespace="default")).get("status") or {}
                wf = (await client.get(WORKFLOWS, "wf", namespace="default")).get("status") or {}
                rc = (await client.get(RAY_CLUSTERS, "rc", namespace="default")).get("status") or {}
                return spark.get("applicationState", {}).get("state") == "COMPLETED" and \
                    wf.get("phase") == "Succeeded" and rc.get("state") == "ready"

            await wait_for(apps_done, "the SparkApplication and the Workflow done, the RayCluster ready")
            await client.create(DEPLOYMENTS, {"metadata": {"name": "web"}, "spec": {
                "replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}, namespace="default")

            async def available() -> bool:
                deployment = await client.get(DEPLOYMENTS, "web", namespace="default")
                return (deployment.get("status") or {}).get("availableReplicas") == 2

            await wait_for(available, "the Deployment available")
            await client.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 1, "template": {"metadata": {
                "labels": {"app": "web", "version": "2"}}}}}, namespace="default")  # a new ReplicaSet, the old to 0

            async def rolled() -> bool:
                deployment = await client.get(DEPLOYMENTS, "web", namespace="default")
                return (deployment.get("status") or {}).get("updatedReplicas") == 1 and \
                    (deployment.get("status") or {}).get("replicas") == 1

            await wait_for(rolled, "the Deployment rolled")
            await client.create(STATEFUL_SETS, {"metadata": {"name": "db"}, "spec": {
                "replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}},
                             "spec": {"containers": [{"name": "db", "image": "postgres"}]}}}}, namespace="default")

            async def ready() -> bool:
                sts = await client.get(STATEFUL_SETS, "db", namespace="default")
                return (sts.get("status") or {}).get("readyReplicas") == 2

            await wait_for(ready, "the StatefulSet's 2 pods ready, one after the other")

            def used() -> set[Access]:  # (a streaming list reads what the list grant is for)
                return server.controls.requests_by(USER) | server.controls.streamed_by(USER)

            async def all_used() -> set[Access] | None:
                return used() if used() >= granted() else None

            await wait_for(all_used, "every granted rule used")
    assert server.controls.denied_to(USER) == set()
    assert used() == granted()


async def test_kinds_it_may_not_list_are_left_alone(server: APIServer, client: KubeClient, tmp_path: Path) -> None:
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": ACCOUNT}}, namespace=NAMESPACE)
    no_tf = [(g, r, v) for g, r, v in NEEDS if r not in ("tfjobs", "mpijobs")]
    await client.create(RBAC, {"metadata": {"name": ACCOUNT}, "rules": [
        {"apiGroups": [group], "resources": [resource], "verbs": verbs} for group, resource, verbs in no_tf]})
    await client.create(RBAC_BINDINGS, {
        "metadata": {"name": ACCOUNT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]})
    config = load_config(str(server.write_kubeconfig_for(NAMESPACE, ACCOUNT, tmp_path / "sim.kubeconfig")))
    async with KubeClient(config, qps=0, retry=FAST_RETRY) as as_sim, SimCluster(as_sim, nodes=1) as sim:
        assert sorted(sim.job_informers) == [c.BATCH_JOB_KIND, c.PYTORCH_JOB_KIND, c.RAY_CLUSTER_KIND, c.RAY_JOB_KIND,
                                             c.SPARK_APPLICATION_KIND, c.ARGO_WORKFLOW_KIND]
        await client.create(PYTORCHJOBS, seed_job("still-runs", duration=0.1))

        async def succeeded() -> bool:
            job = await client.get(PYTORCHJOBS, "still-runs", namespace="default")
            return condition_true(job, c.KUBEFLOW_CONDITION_SUCCEEDED)

        await wait_for(succeeded, "the PyTorchJob Succeeded")
    assert server.controls.denied_to(USER) == {Access("list", "kubeflow.org", "tfjobs"),
                                               Access("list", "kubeflow.org", "mpijobs")}
