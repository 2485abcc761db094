"""The real control plane itself, before any of ours runs on it: what its parts report and do."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.realcluster import build
from koordqueue.realcluster.cluster import NodeShape, RealCluster, kwok_configuration
from tests.realcluster import kubectl

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]


def get_json(cluster: RealCluster, *args: str) -> Any:
    return json.loads(kubectl(cluster.kubeconfig_path, "get", *args, "-o", "json"))


def wait_for(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")


def test_version_is_the_pinned_release(kube: RealCluster) -> None:
    version = kube.request("GET", "/version")
    assert version["gitVersion"] == "v1.37.2" and version["major"] == "1" and version["minor"] == "37"


def test_kwok_nodes_are_ready_with_gpus(kube: RealCluster) -> None:
    def ready() -> list[dict[str, Any]] | None:
        nodes = get_json(kube, "nodes")["items"]
        ok = [n for n in nodes if any(cond["type"] == "Ready" and cond["status"] == "True"
                                      for cond in n["status"].get("conditions", []))]
        return nodes if len(ok) == 4 else None

    nodes = wait_for(ready, "4 Ready nodes")
    assert sorted(n["metadata"]["name"] for n in nodes) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert {n["status"]["allocatable"][c.GPU] for n in nodes} == {"8"}


def pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"requests": {"cpu": "1", c.GPU: "2"}, "limits": {c.GPU: "2"}}}]}}


def test_pods_are_scheduled_run_and_end_after_their_duration(kube: RealCluster) -> None:
    manifests = [pod("short", {c.ANNOTATION_SIM_DURATION: "1"}),
                 pod("failing", {c.ANNOTATION_SIM_DURATION: "500ms", c.ANNOTATION_SIM_FAIL: "true"}),
                 pod("forever", {})]
    for manifest in manifests:
        kube.apply(manifest)

    def phases() -> dict[str, str] | None:
        found = {p["metadata"]["name"]: p["status"].get("phase") for p in get_json(kube, "pods")["items"]}
        return found if found == {"short": "Succeeded", "failing": "Failed", "forever": "Running"} else None

    wait_for(phases, "short Succeeded, failing Failed, forever Running", timeout=30)
    forever = get_json(kube, "pod", "forever")
    assert forever["spec"]["nodeName"].startswith("gpu-")  # bound by kube-scheduler


def test_the_training_operator_runs_a_pytorchjob(kube: RealCluster) -> None:
    manifest = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "plain", "namespace": "default"},
        "spec": {"pytorchReplicaSpecs": {
            role: {"replicas": 1, "restartPolicy": "OnFailure", "template": {
                "metadata": {"annotations": {c.ANNOTATION_SIM_DURATION: "2"}},
                "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch",
                                         "resources": {"requests": {"cpu": "1", c.GPU: "1"},
                                                       "limits": {c.GPU: "1"}}}]}}}
            for role in ("Master", "Worker")}},
    }
    kube.apply(manifest)

    def succeeded() -> bool:
        status = get_json(kube, "pytorchjob", "plain").get("status", {})
        return any(cond["type"] == "Succeeded" and cond["status"] == "True" for cond in status.get("conditions", []))

    wait_for(succeeded, "the PyTorchJob Succeeded", timeout=60)


def test_the_audit_log_can_keep_one_users_requests_only(tmp_path: Any) -> None:
    """What a benchmark counts a controller's requests with: only that user's are logged."""
    cluster = RealCluster(tmp_path / "state", NodeShape(count=0), training_operator=False, audit_users=("alice",))
    with cluster:
        for user in ("alice", "bob"):
            config = cluster.kubeconfig_for(user, ("system:masters",))
            kubectl(config, "get", "namespaces")
            kubectl(config, "create", "configmap", f"by-{user}")
        deadline = time.monotonic() + 10
        while not any(e.get("objectRef", {}).get("name") == "by-alice" for e in cluster.requests_by("alice")):
            assert time.monotonic() < deadline, "alice's create never reached the audit log"
            time.sleep(0.2)
        logged = {json.loads(line)["user"]["username"] for line in cluster.audit_log.read_text().splitlines()}
    assert logged == {"alice"}
    verbs = {(e["verb"], e.get("objectRef", {}).get("resource")) for e in cluster.requests_by("alice")}
    assert {("list", "namespaces"), ("create", "configmaps")} <= verbs


def kwok_source() -> Path:
    """kwok's source at the version our cluster module pins (from the Go module cache or proxy)."""
    cluster = build.modules_named(["cluster"])[0]
    go = shutil.which("go")
    assert go, "the real-cluster suites need Go"
    found = subprocess.run([go, "mod", "download", "-json", f"sigs.k8s.io/kwok@{cluster.pinned('sigs.k8s.io/kwok')}"],
                           cwd=cluster.path, capture_output=True, text=True, check=True)
    return Path(json.loads(found.stdout)["Dir"])


def test_our_kwok_configuration_spells_out_every_default_kwok_has() -> None:
    """kwok applies its defaults only when its --config holds no KwokConfiguration: each option
    it defaults must be in ours, at kwok's default unless we mean otherwise."""
    source = kwok_source() / "pkg/apis/config/v1alpha1"
    defaults = (source / "zz_generated.defaults.go").read_text()
    body = defaults.split("func SetObjectDefaults_KwokConfiguration(", 1)[1].split("\nfunc ", 1)[0]
    defaulted = set(re.findall(r"if in\.Options\.(\w+) ==", body))
    types = (source / "kwok_configuration_types.go").read_text()
    json_name = dict(re.findall(r"^\s*(\w+)\s+\S+\s+`json:\"(\w+)", types, re.M))
    assert len(defaulted) >= 11 and defaulted <= set(json_name)
    options = kwok_configuration(pod_workers=4)["options"]
    assert {json_name[field] for field in defaulted} <= set(options)
    assert options["podPlayStageParallelism"] == 4 and options["nodeLeaseParallelism"] == 4
    assert kwok_configuration(pod_workers=32)["options"]["podPlayStageParallelism"] == 32


def test_kwok_with_more_pod_workers_runs_pods_and_keeps_its_nodes_ready(tmp_path: Any) -> None:
    cluster = RealCluster(tmp_path / "state", NodeShape(count=2, gpus=0, cpu="8"), training_operator=False,
                          pod_workers=16)
    with cluster:
        pods = [{"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"p{i}", "namespace": "default",
                              "annotations": {c.ANNOTATION_SIM_DURATION: "1"}},
                 "spec": {"restartPolicy": "Never",
                          "containers": [{"name": "c", "image": "none", "resources": {"requests": {"cpu": "100m"}}}]}}
                for i in range(20)]
        for pod in pods:
            cluster.apply(pod)

        def all_succeeded() -> bool:
            phases = [p.get("status", {}).get("phase") for p in get_json(cluster, "pods", "-n", "default")["items"]]
            return len(phases) == 20 and all(phase == "Succeeded" for phase in phases)

        wait_for(all_succeeded, "20 pods Succeeded on kwok's nodes", timeout=60)
        time.sleep(1)
        nodes = get_json(cluster, "nodes")["items"]
        assert len(nodes) == 2
        for node in nodes:
            ready = [cond for cond in node["status"]["conditions"] if cond["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True", node["metadata"]["name"]
        leases = get_json(cluster, "leases", "-n", "kube-node-lease")["items"]
        assert {lease["metadata"]["name"] for lease in leases} == {n["metadata"]["name"] for n in nodes}
