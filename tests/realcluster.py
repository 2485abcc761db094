"""The real control plane for the test suite: one per session, reset between tests.

Tests that run on both control planes take the `control_plane` parameter (see
`tests/controller/conftest.py`); its `kube` cases carry the `kube` marker, so
`make test` (which deselects them) stays Go-free and `make test-kube` runs them.
Starting kube-apiserver, etcd and the rest takes seconds, so a session shares one
cluster and `reset()` deletes what a test made before the next one starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from koordqueue.api import constants as c
from koordqueue.jobs import KINDS
from koordqueue.realcluster.cluster import KOORDINATOR_NAMESPACE, RealCluster, install_crds

# Objects a test may leave behind, deleted between tests (namespaced; every namespace): the
# jobs of every kind we queue (jobs/__init__.py), then the rest.
LEFTOVERS = (*(f"{k.plural}.{k.group}" for k in KINDS),
             "queueunits.scheduling.x-k8s.io", "queues.scheduling.x-k8s.io",
             "elasticquotas.scheduling.sigs.k8s.io", "elasticquotatrees.scheduling.sigs.k8s.io",
             "leases.coordination.k8s.io", "events", "deployments.apps")
# Koordinator's namespace (its variant, tests/kubecluster/test_koordinator.py) keeps its own
# quotas, which koord-scheduler makes only when it starts.
KEEP_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease", "kubeflow", KOORDINATOR_NAMESPACE}


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args],
                            capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def reset(cluster: RealCluster) -> None:
    """Delete what tests make, and wait until it is gone (pods included); our CRDs are there."""
    config = cluster.kubeconfig_path
    install_crds(cluster)
    for webhooks in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        kubectl(config, "delete", webhooks, "-l", "app.kubernetes.io/name=koord-queue", "--ignore-not-found",
                "--wait=false")
        kubectl(config, "delete", webhooks, "koord-queue", "--ignore-not-found", "--wait=false")
    for kind in LEFTOVERS:
        which = ["--all", "--all-namespaces"]
        if kind.startswith("leases"):
            which = ["--all", "-n", "koord-queue"]
        elif kind.startswith("elasticquotas."):  # (kubectl takes --all or a selector, not both)
            which = ["--all-namespaces", "--field-selector", f"metadata.namespace!={KOORDINATOR_NAMESPACE}"]
        kubectl(config, "delete", kind, *which, "--ignore-not-found", "--wait=false", check=False)
    # The settings a controller published: a chart installed afresh finds none (its grant to create it is used).
    kubectl(config, "delete", "configmap", c.SETTINGS_CONFIG_MAP, "-n", c.SYSTEM_NAMESPACE, "--ignore-not-found",
            "--wait=false")
    classes = json.loads(kubectl(config, "get", "priorityclasses", "-o", "json"))["items"]
    doomed = [p["metadata"]["name"] for p in classes if not p["metadata"]["name"].startswith("system-")]
    if doomed:
        kubectl(config, "delete", "priorityclasses", *doomed, "--ignore-not-found", "--wait=false")
    spaces = json.loads(kubectl(config, "get", "namespaces", "-o", "json"))["items"]
    extra = [n["metadata"]["name"] for n in spaces
             if n["metadata"]["name"] not in KEEP_NAMESPACES and n["metadata"]["name"] != "koord-queue"]
    if extra:
        kubectl(config, "delete", "namespaces", *extra, "--wait=false")
    kubectl(config, "delete", "pods", "--all", "--all-namespaces", "--grace-period=0", "--force",
            "--ignore-not-found", "--wait=false", check=False)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pods = json.loads(kubectl(config, "get", "pods", "--all-namespaces", "-o", "json"))["items"]
        spaces = json.loads(kubectl(config, "get", "namespaces", "-o", "json"))["items"]
        left = [p["metadata"]["name"] for p in pods] + [
            n["metadata"]["name"] for n in spaces if n["metadata"]["name"] in extra]
        if not left:
            return
        time.sleep(0.3)
    raise AssertionError(f"reset: still there after 90 s: {left}")


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    state = Path(os.environ.get("KOORD_QUEUE_KUBE_STATE") or tmp_path_factory.mktemp("kube"))
    cluster = RealCluster(state, audit_pods=True)  # (tests/security sums bound pods from the audit log)
    cluster.start()
    try:
        install_crds(cluster)
        yield cluster
    finally:
        cluster.stop()
        print(f"\nreal control plane logs: {cluster.logs}")


@pytest.fixture
def kube(real_cluster: RealCluster) -> Iterator[RealCluster]:
    """The session's real control plane, as a test found it: nothing of an earlier test left."""
    reset(real_cluster)
    yield real_cluster


@pytest.fixture(scope="module")
def koordinator_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """The real control plane beside Koordinator (koord-scheduler, koord-manager): one per test module."""
    state = Path(os.environ.get("KOORD_QUEUE_KOORDINATOR_STATE") or tmp_path_factory.mktemp("koordinator"))
    cluster = RealCluster(state, koordinator=True)
    cluster.start()
    try:
        install_crds(cluster)  # ours, but for ElasticQuota: Koordinator's is there first, and stays
        yield cluster
    finally:
        cluster.stop()
        print(f"\nKoordinator's control plane logs: {cluster.logs}")


@pytest.fixture
def koordinator(koordinator_cluster: RealCluster) -> Iterator[RealCluster]:
    """That control plane as a test found it: nothing of an earlier test left."""
    reset(koordinator_cluster)
    yield koordinator_cluster
