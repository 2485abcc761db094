"""Kueue on the real control plane, started as its maintainers run it, for side-by-side benchmarks.

Built from e2e/kueue (sigs.k8s.io/kueue, pinned) only on demand: `python -m
koordqueue.realcluster.build kueue`; nothing of the control plane needs it. Like the
training operator, it runs as a process of the cluster (stopped with it): `cmd/kueue`
with its default configuration run out of cluster (no leader election, certificates
given, metrics and probes on loopback), or its perf test's minimal manager.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from koordqueue.realcluster import build
from koordqueue.realcluster.cluster import ClusterError, Process, RealCluster, free_port
from koordqueue.realcluster.pki import CertificateAuthority, write_private

MODULE = "sigs.k8s.io/kueue"
GROUP = "kueue.x-k8s.io"
API = f"{GROUP}/v1beta2"
QUEUE_LABEL = f"{GROUP}/queue-name"
NAMESPACE = "kueue-system"
PROGRAMS = ("kueue", "minimalkueue", "kueue-perf-runner")
# cmd/kueue reads its metrics server's certificate from this fixed folder when it does not
# manage certificates itself (its Deployment mounts a Secret there).
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
# Its default configuration's workers per kind (config/components/manager/controller_manager_config.yaml).
DEFAULT_CONCURRENCY = {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5, "LocalQueue.kueue.x-k8s.io": 1,
                       "Cohort.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 1,
                       "ResourceFlavor.kueue.x-k8s.io": 1}


def binaries() -> dict[str, Path]:
    """Kueue's programs; ClusterError naming the build command when they are not built."""
    paths = build.binaries(modules=build.modules_named(["kueue"]))
    missing = [n for n, p in paths.items() if not p.exists()]
    if missing:
        raise ClusterError(f"not built yet: {', '.join(missing)}; run `python -m koordqueue.realcluster.build kueue`")
    return paths


def built() -> bool:
    """Kueue's programs are built for this module pin and Go (a benchmark's test may skip otherwise)."""
    try:
        binaries()
    except (ClusterError, build.BuildError):
        return False
    return True


# Set (to 1) where Kueue was built first (.ci/run, make test-versus-kueue): its tests then run and
# fail rather than skip when it is missing.
REQUIRE_ENV = "KOORD_QUEUE_REQUIRE_KUEUE"


def may_skip() -> bool:
    """Kueue is not built and not required: the side-by-side tests skip (never in CI)."""
    return os.environ.get(REQUIRE_ENV) != "1" and not built()


def source() -> Path:
    """Kueue's module folder (its CRDs, its perf test's configs), from Go's module cache."""
    return build.module_source("kueue", MODULE)


def install_crds(cluster: RealCluster) -> None:
    """Kueue's CRDs as its perf test installs them (config/components/crd/bases, no conversion webhook)."""
    for path in sorted((source() / "config" / "components" / "crd" / "bases").glob("*.yaml")):
        cluster.apply(yaml.safe_load(path.read_text()))
    cluster.wait_for_crds(GROUP, "v1beta2", {"workloads", "clusterqueues", "localqueues", "resourceflavors", "cohorts"})


@dataclass
class Kueue:
    """A running cmd/kueue: its process (the cluster's "kueue") and where to ask it."""

    process: Process
    probe_port: int
    metrics_port: int
    metrics_token: str

    def ready(self) -> bool:
        if not self.process.alive():
            raise ClusterError(f"Kueue exited:\n{self.process.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def start(cluster: RealCluster, user: str, *, qps: int, burst: int,
          concurrency: dict[str, int] | None = None, frameworks: tuple[str, ...] = ("batch/job",)) -> Kueue:
    """cmd/kueue as `user` (system:masters), only the integrations `frameworks`, at `qps`/`burst`;
    `concurrency` overrides its default workers per kind. Not waited for: see `Kueue.ready`."""
    here = cluster.state_dir / "kueue"
    certs = here / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    cert, key = CertificateAuthority.create("kueue-webhook-ca").issue("kueue", server=True, hosts=("127.0.0.1",))
    (certs / "tls.crt").write_bytes(cert)
    write_private(certs / "tls.key", key)
    metrics_certs()
    probe_port, metrics_port = free_port(), free_port()
    token = metrics_token(cluster)
    config = here / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(probe_port, free_port(), metrics_port, certs, qps, burst,
                                                   {**DEFAULT_CONCURRENCY, **(concurrency or {})}, frameworks)))
    process = cluster.run("kueue", binaries()["kueue"], [
        f"--config={config}", f"--kubeconfig={cluster.kubeconfig_for(user, ('system:masters',))}",
        "--zap-log-level=error", "--feature-gates=VisibilityOnDemand=false"])
    return Kueue(process, probe_port, metrics_port, token)


def start_minimal(cluster: RealCluster, user: str) -> Process:
    """The perf test's minimal manager (test/performance/scheduler/minimalkueue) as `user`."""
    return cluster.run("minimalkueue", binaries()["minimalkueue"],
                       ["--kubeconfig", str(cluster.kubeconfig_for(user, ("system:masters",)))])


def configuration(probe_port: int, webhook_port: int, metrics_port: int, cert_dir: Path, qps: int, burst: int,
                  concurrency: dict[str, int], frameworks: tuple[str, ...]) -> dict[str, Any]:
    """Kueue's default manager configuration (config/components/manager), run out of cluster."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "controller": {"groupKindConcurrency": concurrency},
        "clientConnection": {"qps": qps, "burst": burst},
        "integrations": {"frameworks": list(frameworks)},
    }


def metrics_token(cluster: RealCluster) -> str:
    """A ServiceAccount token that may read Kueue's metrics (its endpoint asks kube-apiserver:
    TokenReview, SubjectAccessReview)."""
    name = "kueue-metrics-reader"
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NAMESPACE}})
    cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                   "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]})
    answer = cluster.request("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
                             {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                              "spec": {"expirationSeconds": 24 * 3600}})
    return str(answer["status"]["token"])


def metrics_certs() -> None:
    """A certificate where cmd/kueue insists on finding one, shared by every cluster on the machine."""
    if (METRICS_CERTS / "tls.crt").exists() and (METRICS_CERTS / "tls.key").exists():
        return
    METRICS_CERTS.mkdir(parents=True, exist_ok=True)
    cert, key = CertificateAuthority.create("kueue-metrics-ca").issue("kueue-metrics", server=True,
                                                                       hosts=("127.0.0.1",))
    write_private(METRICS_CERTS / "tls.key", key)
    (METRICS_CERTS / "tls.crt").write_bytes(cert)
