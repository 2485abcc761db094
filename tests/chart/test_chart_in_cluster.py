"""The chart's objects, sent to the embedded API server by real kubectl and real helm.

Still to come (issue 5, once the embedded server enforces RBAC and issues ServiceAccount
tokens): the controller, started with the Deployment's own args and the chart's
ServiceAccount token instead of the admin kubeconfig, runs the seed flow (quota, Queue,
PyTorchJob admitted and Running) against this installed chart, and every request it makes
is allowed by the ClusterRole/Role and none is denied; the test then also asserts the
ClusterRole has no grant the run did not use. Two gaps to close for it: the server dials a
webhook's Service at 127.0.0.1:<service port> (443 here), so it needs a way to reach a
webhook on a free port; and it serves neither server-side apply nor policy/v1, which
helm 4 and the chart's PodDisruptionBudget use (see EMBEDDED_SERVER_GAPS in tests/docs).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.chart.helmtool import CHART, NAMESPACE, RELEASE, helm, one, render
from tests.chart.kube import KUBECTL, Cluster, embedded_cluster

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

SEED = Path(__file__).parents[1] / "localcluster" / "data"
# The embedded API server serves no policy/v1 (PodDisruptionBudget): leave the PDB out
# when installing there (it is validated against the 1.32 schemas in test_chart.py).
NO_PDB = {"controller": {"podDisruptionBudget": {"enable": False}}}


@pytest.fixture
def bare_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """An embedded API server with no CRDs at all: the chart must bring its own."""
    with embedded_cluster(tmp_path, crds=[]) as cluster:
        yield cluster


def test_kubectl_applies_the_rendered_crds_service_account_and_rbac(bare_cluster: Cluster) -> None:
    objects = [o for o in render(NO_PDB, include_crds=True)
               if o["kind"] in {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                "Role", "RoleBinding"}]
    assert len(objects) == 3 + 5
    bare_cluster.kubectl("create", "namespace", NAMESPACE, check=False)  # may exist already
    out = bare_cluster.kubectl("apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(objects)).stdout
    for obj in objects:
        assert f"{obj['metadata']['name']} created" in out, (obj["kind"], out)
    crds = bare_cluster.kubectl("get", "crd", "-o", "name").stdout.split()
    assert sorted(crds) == sorted(f"customresourcedefinition.apiextensions.k8s.io/{o['metadata']['name']}"
                                  for o in objects if o["kind"] == "CustomResourceDefinition")
    role = bare_cluster.get_json("clusterrole", "koord-queue")
    assert role["rules"] == one(objects, "ClusterRole")["rules"]  # stored as sent, nothing dropped
    binding = bare_cluster.get_json("rolebinding", "-n", NAMESPACE, "koord-queue-leader-election")
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": "koord-queue", "namespace": NAMESPACE}
    # The chart's CRDs serve the seed's objects: kubectl validates them against the
    # CRDs' schemas (OpenAPI v3 from the server) and creates them.
    bare_cluster.kubectl("apply", "--validate=strict", "-f", str(SEED / "elastic-quota.yaml"))
    bare_cluster.kubectl("apply", "--validate=strict", "-f", str(SEED / "queue.yaml"))
    quota = bare_cluster.get_json("elasticquota", "pytorch-team-a")
    assert quota["spec"]["max"]["nvidia.com/gpu"] == "8"
    assert "No resources found" in bare_cluster.kubectl("get", "queueunit", "-A").stderr  # served, empty


def test_helm_installs_the_chart(bare_cluster: Cluster) -> None:
    """`helm install` as the README has it (plus --server-side=false: the embedded server
    speaks no server-side apply), then what a user checks with kubectl."""
    env = bare_cluster.env()

    def run(*args: str) -> str:
        result = subprocess.run([str(helm()), *args], capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    out = run("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
              "--server-side=false", "--set", "controller.podDisruptionBudget.enable=false",
              "--set", "extension.tf.enable=true")
    assert "STATUS: deployed" in out and "Queued job kinds: PyTorchJob, TFJob." in out
    deployment = bare_cluster.get_json("deployment", "-n", NAMESPACE, "koord-queue-controllers")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "koord-queue"
    crds = bare_cluster.kubectl("get", "crd").stdout
    assert {"elasticquotas.scheduling.sigs.k8s.io", "queues.scheduling.x-k8s.io",
            "queueunits.scheduling.x-k8s.io"} <= {line.split()[0] for line in crds.splitlines()[1:]}
    webhook = bare_cluster.get_json("mutatingwebhookconfiguration", "koord-queue")
    assert webhook["webhooks"][0]["rules"][0]["resources"] == ["pytorchjobs", "tfjobs"]
    assert "koord-queue" in run("list", "--namespace", NAMESPACE)
