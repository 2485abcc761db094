"""The real Kubernetes control plane on this machine, with no Docker and no cluster.

Upstream etcd, kube-apiserver, kube-controller-manager and kube-scheduler, kwok
(fake GPU nodes and pod lifecycles) and the Kubeflow training operator (and, when asked,
Koordinator's scheduler and manager, or KubeRay's operator), built from
the Go modules in `e2e/` (`build.py`) and started as Kubernetes' own integration
tests and controller-runtime's envtest start them: loopback only, RBAC on, a client
certificate per component, service-account tokens signed by our key, and the
admission plugins a cluster has (webhooks called by URL). Everything lives in one
state folder: certificates, kubeconfigs, etcd's data and each process's log.

    with RealCluster(Path("state")) as cluster:
        cluster.kubeconfig_path   # system:masters
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from koordqueue.api import constants as c
from koordqueue.children import die_with_parent
from koordqueue.realcluster import build
from koordqueue.realcluster.pki import CertificateAuthority, write_private, write_service_account_key

log = logging.getLogger(__name__)

STAGES = Path(__file__).with_name("kwok-stages.yaml")
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_CIDR = "10.96.0.0/16"
OPERATOR_NAMESPACE = "kubeflow"
OPERATOR_SERVICE = "training-operator"
OPERATOR_WEBHOOKS = "validator.training-operator.kubeflow.org"
# The training operator's webhook server reads its certificate from this fixed folder (its
# Secret's mount in a pod). Every cluster on the machine shares one certificate there.
OPERATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
OPERATOR_KINDS = ("PyTorchJob", "TFJob", "MPIJob")
# Koordinator's namespace, as its chart installs it (koord-scheduler keeps its quotas there).
KOORDINATOR_NAMESPACE = "koordinator-system"
KOORDINATOR_MODULE = "github.com/koordinator-sh/koordinator"
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"


class ClusterError(Exception):
    """The control plane did not come up: which part, and the end of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def host_address() -> str:
    """This machine's address on its default route: what an Endpoints or EndpointSlice may name
    for a process on the host (kube-apiserver refuses loopback addresses there), e.g. for an
    APIService whose server runs out of cluster. No packet is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        return str(s.getsockname()[0])


@dataclass(frozen=True)
class NodeShape:
    count: int = 4
    gpus: int = 8
    cpu: str = "96"
    memory: str = "512Gi"
    prefix: str = "gpu"


def node_manifest(name: str, shape: NodeShape) -> dict[str, Any]:
    """A fake node kwok manages: Ready at once, pods run at once."""
    allocatable = {"cpu": shape.cpu, "memory": shape.memory, "pods": "250", c.GPU: str(shape.gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "type": "kwok"}},
        "spec": {},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


@dataclass
class Process:
    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        try:
            self.popen = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, **(self.env or {})}, start_new_session=True,
                                          preexec_fn=die_with_parent)
        finally:
            out.close()

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise ClusterError(f"{self.name} is not running")
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout)
        self.popen = None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class RealCluster:
    """Start with `start()` (or `with`), stop with `stop()`; `state_dir` keeps everything."""

    def __init__(self, state_dir: Path, nodes: NodeShape | None = None, training_operator: bool = True,
                 binaries: dict[str, Path] | None = None, audit: bool = True, audit_users: tuple[str, ...] = (),
                 component_qps: int = 200, controller_manager_flags: tuple[str, ...] = (),
                 full_history: bool = False, koordinator: bool = False, kuberay: bool = False,
                 pod_workers: int = 4, audit_pods: bool = False, audit_jobs: bool = False,
                 koordinator_pods: bool = False) -> None:
        """`audit_users`: log only these users' requests (a benchmark counting a controller's);
        `audit_pods`: the audit log keeps each pod as created (and status writes' bodies), so
        that what bound pods asked can be summed from it (tests/security's sampler);
        `audit_jobs`: the bodies of batch Jobs' writes too (spec and status: a Job's timeline, its
        resume and its Complete, read from the audit log by bench/hold_timeline.py);
        `component_qps`: kube-controller-manager's and kube-scheduler's client rate (burst twice it);
        `controller_manager_flags`: more flags for kube-controller-manager (a benchmark's tuning);
        `full_history`: kube-apiserver never compacts etcd's history and stores every object
        as JSON (not protobuf), so that a reader of etcd (the chaos checker) sees every write;
        `koordinator`: koord-scheduler schedules the pods in kube-scheduler's place, and
        koord-manager's ElasticQuota webhooks check the quotas, as beside the guide's Koord-Queue;
        `koordinator_pods`: koord-manager's pod mutating webhook too (its GPU-share resources
        rewritten as koord-scheduler then charges them), beside Koordinator;
        `kuberay`: KubeRay's operator makes the pods of RayJobs and RayClusters, with its CRDs;
        `pod_workers`: how many pods kwok moves through their stages at once (its default is 4;
        a benchmark with hundreds of pods in flight measures kwok's queue with it)."""
        self.state_dir = state_dir.resolve()
        self.full_history = full_history
        self.pki = self.state_dir / "pki"
        self.logs = self.state_dir / "logs"
        self.nodes = nodes or NodeShape()
        self.training_operator = training_operator
        self.audit = audit
        self.audit_users = audit_users
        self.audit_pods = audit_pods
        self.audit_jobs = audit_jobs
        self.component_qps = component_qps
        self.controller_manager_flags = controller_manager_flags
        self.koordinator = koordinator
        self.koordinator_pods = koordinator_pods
        self.kuberay = kuberay
        self.pod_workers = pod_workers
        self._binaries = binaries
        self.processes: dict[str, Process] = {}
        self.apiserver_port = 0
        self.etcd_port = 0

    # -- public --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def audit_log(self) -> Path:
        """kube-apiserver's audit log (JSON lines, one per request, metadata only)."""
        return self.logs / "audit.log"

    def requests_by(self, user: str) -> list[dict[str, Any]]:
        """Every request `user` made, as the audit log has it (verb, objectRef, responseStatus)."""
        out = []
        with contextlib.suppress(FileNotFoundError), open(self.audit_log) as f:
            for line in f:
                entry = json.loads(line)
                if entry.get("user", {}).get("username") == user:
                    out.append(entry)
        return out

    @property
    def kubeconfig_path(self) -> Path:
        """The administrator's kubeconfig (system:masters)."""
        return self.state_dir / "kubeconfig"

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig with a client certificate for `user` in `groups` (RBAC applies)."""
        stem = user.replace(":", "-")
        cert, key = self._ca.write_issued(self.pki, stem, user, groups)
        return self._write_kubeconfig(self.state_dir / f"{stem}.kubeconfig", cert, key)

    def start(self, say: Any = log.info) -> RealCluster:
        modules = (build.CONTROL_PLANE + ((build.KOORDINATOR,) if self.koordinator else ())
                   + ((build.KUBERAY,) if self.kuberay else ()))
        paths = self._binaries or build.binaries(modules=modules)
        missing = [n for n, p in paths.items() if not p.exists()]
        if missing:
            raise ClusterError(f"not built yet: {', '.join(missing)}; run `make e2e-tools` "
                               f"(python -m koordqueue.realcluster.build {' '.join(m.folder for m in modules)})")
        self.bin = paths
        for d in (self.pki, self.logs):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            self._make_pki()
            say("starting etcd")
            self._start_etcd()
            say("starting kube-apiserver")
            self._start_apiserver()
            self._write_kubeconfig(self.kubeconfig_path, *self._admin)
            say(f"starting kube-controller-manager, {'koord-scheduler' if self.koordinator else 'kube-scheduler'} "
                "and kwok")
            self._start_controller_manager()
            if self.koordinator:
                self._start_koordinator()
            else:
                self._start_scheduler()
            self._start_kwok()
            self._create_nodes()
            if self.training_operator:
                say("starting the Kubeflow training operator")
                self._start_training_operator()
            if self.kuberay:
                say("starting KubeRay's operator")
                self._start_kuberay()
            self._wait_for_default_service_account()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes[name].stop()

    def __enter__(self) -> RealCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def restart_apiserver(self, kill: bool = False) -> None:
        """Stop kube-apiserver (SIGKILL with `kill`) and start it again; etcd keeps the state."""
        process = self.processes["kube-apiserver"]
        process.stop(signal.SIGKILL if kill else signal.SIGTERM)
        process.start()
        # It lists every resource from etcd again before it is ready: minutes on a loaded 2-core machine.
        self._wait_ready("kube-apiserver", f"{self.url}/readyz", timeout=240)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """One request as the administrator; the decoded answer (for the harness's own set-up)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        with urllib.request.urlopen(req, context=self._admin_ssl(), timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def apply(self, obj: dict[str, Any]) -> None:
        """Create `obj`, or leave it when it exists."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        plural = kind.lower() + ("es" if kind.endswith("s") else "s")
        root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        namespace = obj["metadata"].get("namespace")
        path = f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"
        try:
            self.request("POST", path, obj)
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise ClusterError(f"creating {kind} {obj['metadata']['name']}: {e.read().decode()[:500]}") from e

    # -- the parts -------------------------------------------------------------------------

    def _make_pki(self) -> None:
        self._ca = CertificateAuthority.create("kubernetes-ca")
        self._ca_cert, _ = self._ca.write(self.pki)
        front = CertificateAuthority.create("front-proxy-ca")
        self._front_ca_cert, _ = front.write(self.pki)
        self._front_client = front.write_issued(self.pki, "front-proxy-client", "front-proxy-client")
        self._serving = self._ca.write_issued(
            self.pki, "apiserver", "kube-apiserver", server=True,
            hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local", "10.96.0.1"))
        self._admin = self._ca.write_issued(self.pki, "admin", "kubernetes-admin", ("system:masters",))
        self._sa_pub, self._sa_key = write_service_account_key(self.pki)

    def _write_kubeconfig(self, path: Path, cert: Path, key: Path) -> Path:
        config = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "kube", "cluster": {
                "server": self.url, "certificate-authority-data": base64.b64encode(self._ca.pem).decode()}}],
            "users": [{"name": "user", "user": {
                "client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
                "client-key-data": base64.b64encode(key.read_bytes()).decode()}}],
            "contexts": [{"name": "kube", "context": {"cluster": "kube", "user": "user", "namespace": "default"}}],
            "current-context": "kube", "preferences": {},
        }
        write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
        return path

    def _admin_ssl(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self._ca.pem.decode())
        context.load_cert_chain(*self._admin)
        return context

    def _run(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Process:
        return self.run(name, self.bin.get(name, Path(name)), args, env)

    def run(self, name: str, binary: Path, args: list[str], env: dict[str, str] | None = None) -> Process:
        """Start one more process of the cluster (logged in logs/NAME.log, stopped with the cluster)."""
        process = Process(name, [str(binary), *args], self.logs / f"{name}.log", env)
        process.start()
        self.processes[name] = process
        return process

    def _wait_ready(self, name: str, url: str, timeout: float = 60.0, tls: bool = True) -> None:
        deadline = time.monotonic() + timeout
        context = self._admin_ssl() if tls else None
        last = ""
        while time.monotonic() < deadline:
            if not self.processes[name].alive():
                raise ClusterError(f"{name} exited:\n{self.processes[name].tail()}")
            try:
                with urllib.request.urlopen(url, context=context, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except urllib.error.HTTPError as e:  # readyz lists its failing checks as [-] lines
                failing = [line for line in e.read().decode(errors="replace").splitlines() if line.startswith("[-]")]
                last = f"{e}; {' '.join(failing)}" if failing else str(e)
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.2)
        raise ClusterError(f"{name} not ready after {timeout:.0f} s ({last}):\n{self.processes[name].tail()}")

    def _start_etcd(self) -> None:
        self.etcd_port, peer = free_port(), free_port()
        data = self.state_dir / "etcd"
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        self._run("etcd", [
            f"--data-dir={data}", "--name=default", f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}", f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}", f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync", "--quota-backend-bytes=8589934592", "--log-level=warn",
        ])
        self._wait_ready("etcd", f"{client_url}/health", tls=False)

    def _start_apiserver(self) -> None:
        self.apiserver_port = free_port()
        cert, key = self._serving
        front_cert, front_key = self._front_client
        kubelet_cert, kubelet_key = self._ca.write_issued(self.pki, "apiserver-kubelet-client",
                                                          "kube-apiserver-kubelet-client", ("system:masters",))
        audit: list[str] = []
        if self.audit:
            policy = self.state_dir / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(audit_policy(self.audit_users, self.audit_pods,
                                                                 self.audit_jobs)))
            audit = [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
                     "--audit-log-format=json", "--audit-log-maxsize=0"]
        self._run("kube-apiserver", [
            *audit,
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", f"--client-ca-file={self._ca_cert}",
            f"--service-account-key-file={self._sa_pub}", f"--service-account-signing-key-file={self._sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=RBAC", f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            f"--cert-dir={self.pki}",
            f"--requestheader-client-ca-file={self._front_ca_cert}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={front_cert}", f"--proxy-client-key-file={front_key}",
            "--enable-aggregator-routing=true", "--profiling=false", "--v=1",
            # Nodes are kwok's, reached at their InternalIP (127.0.0.1) for logs.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={kubelet_cert}", f"--kubelet-client-key={kubelet_key}",
            # The kubernetes Service cannot point at a loopback address; no pod here dials it.
            "--endpoint-reconciler-type=none",
            *(["--etcd-compaction-interval=0", "--storage-media-type=application/json"] if self.full_history else []),
        ])
        self._wait_ready("kube-apiserver", f"{self.url}/readyz", timeout=120)

    def _start_controller_manager(self) -> None:
        kubeconfig = self.kubeconfig_for("system:kube-controller-manager")
        self._run("kube-controller-manager", [
            f"--kubeconfig={kubeconfig}", "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
            f"--service-account-private-key-file={self._sa_key}", f"--root-ca-file={self._ca_cert}",
            "--use-service-account-credentials=true",
            f"--kube-api-qps={self.component_qps}", f"--kube-api-burst={2 * self.component_qps}",
            "--concurrent-gc-syncs=20", "--controllers=*,-node-ipam-controller",
            "--v=1", *self.controller_manager_flags,
        ])

    def _start_scheduler(self) -> None:
        kubeconfig = self.kubeconfig_for("system:kube-scheduler")
        config = self.state_dir / "scheduler.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": self.component_qps,
                                 "burst": 2 * self.component_qps},
            "leaderElection": {"leaderElect": False},
        }))
        self._run("kube-scheduler", [f"--config={config}", "--secure-port=0", "--v=1"])

    # -- Koordinator ---------------------------------------------------------------------------

    def _start_koordinator(self) -> None:
        """Koordinator's CRDs, koord-manager with its ElasticQuota webhooks, and koord-scheduler
        with its chart's scheduler configuration, under the name of the default scheduler."""
        source = koordinator_source()
        for crd in sorted((source / "config" / "crd" / "bases").glob("*.yaml")):
            self.apply(yaml.safe_load(crd.read_text()))
        self.wait_for_crds("scheduling.sigs.k8s.io", "v1alpha1", {"elasticquotas", "podgroups"})
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KOORDINATOR_NAMESPACE}})
        self._start_koord_manager(source)
        self._start_koord_scheduler(source)

    def _koordinator_user(self, user: str, role_file: Path, roles: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for `user` with the ClusterRole Koordinator's manifests give it (and `roles`)."""
        role = yaml.safe_load(role_file.read_text())
        role["metadata"] = {"name": f"koordinator:{user}"}
        self.apply(role)
        for name in (role["metadata"]["name"], *roles):
            self.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                        "metadata": {"name": f"{user}:{name}".replace(":", "-")},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
        return self.kubeconfig_for(user)

    def _start_koord_manager(self, source: Path) -> None:
        """koord-manager's ElasticQuota webhooks (mutating and validating), called at 127.0.0.1:
        the manager writes their caBundle and URL in itself (WEBHOOK_HOST), as in a cluster."""
        port, probe_port = free_port(), free_port()
        names = {"MutatingWebhookConfiguration": "koordinator-mutating-webhook-configuration",
                 "ValidatingWebhookConfiguration": "koordinator-validating-webhook-configuration"}
        # Its ElasticQuota webhooks; with `koordinator_pods`, its pod mutating webhook at creation too.
        kept = {"melasticquota.koordinator.sh", "velasticquota.koordinator.sh",
                *(("mpod-create.koordinator.sh",) if self.koordinator_pods else ())}
        for manifest in yaml.safe_load_all((source / "config" / "webhook" / "manifests.yaml").read_text()):
            if not manifest or manifest["kind"] not in names:
                continue
            manifest["metadata"] = {"name": names[manifest["kind"]]}
            manifest["webhooks"] = [hook for hook in manifest["webhooks"] if hook["name"] in kept]
            self.apply(manifest)
        kubeconfig = self._koordinator_user("koord-manager", source / "config" / "rbac" / "role.yaml")
        self._run("koord-manager", [
            f"--kubeconfig={kubeconfig}", "--enable-leader-election=false", "--metrics-addr=0", "--enable-pprof=false",
            f"--health-probe-addr=127.0.0.1:{probe_port}", "--logtostderr=true",
            f"--config-namespace={KOORDINATOR_NAMESPACE}", "--sync-period=0", "--v=1",
        ], env={"KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": KOORDINATOR_NAMESPACE, "WEBHOOK_HOST": "127.0.0.1", "WEBHOOK_PORT": str(port),
                "WEBHOOK_CERT_DIR": str(self.state_dir / "koord-manager-certs")})
        self._wait_ready("koord-manager", f"http://127.0.0.1:{probe_port}/readyz", timeout=120, tls=False)
        self._wait_for_koordinator_webhooks(port)

    def _wait_for_koordinator_webhooks(self, port: int, timeout: float = 60.0) -> None:
        """Until koord-manager has written its URL into its webhooks: quotas are checked from then on."""
        deadline = time.monotonic() + timeout
        path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
        while time.monotonic() < deadline:
            hooks = self.request("GET", path + "koordinator-validating-webhook-configuration").get("webhooks") or []
            if hooks and all(f"127.0.0.1:{port}" in h["clientConfig"].get("url", "") and h["clientConfig"].get("caBundle")
                             for h in hooks):
                return
            time.sleep(0.3)
        raise ClusterError("koord-manager never registered its ElasticQuota webhooks:\n"
                           + self.processes["koord-manager"].tail())

    def _start_koord_scheduler(self, source: Path) -> None:
        kubeconfig = self._koordinator_user("koord-scheduler", source / "config" / "rbac" / "scheduler_role.yaml",
                                            ("system:kube-scheduler", "system:volume-scheduler"))
        shipped = yaml.safe_load((source / "config" / "manager" / "scheduler-config.yaml").read_text())
        config = yaml.safe_load(shipped["data"]["koord-scheduler-config"])
        # Its chart's configuration, with three changes: one instance (no leader election), our
        # client rate, and the default scheduler's name, so that the guide's pods (which name no
        # scheduler) are scheduled by it, as when koord-scheduler replaces kube-scheduler.
        config["leaderElection"] = {"leaderElect": False}
        config["clientConnection"] = {"kubeconfig": str(kubeconfig), "qps": self.component_qps,
                                      "burst": 2 * self.component_qps}
        for profile in config["profiles"]:
            profile["schedulerName"] = "default-scheduler"
        path = self.state_dir / "koord-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        # --port=0: no insecure listener, which is 0.0.0.0:10251 otherwise whatever the config
        # says, so that two such clusters on one machine do not fight over it.
        self._run("koord-scheduler", [f"--config={path}", "--secure-port=0", "--port=0",
                                      "--authentication-skip-lookup=true", "--v=1"])

    @property
    def pod_logs(self) -> Path:
        """Container logs kwok serves (CRI format, as a kubelet keeps them) through `kubectl logs`."""
        return self.logs / "pods"

    @property
    def controller_log(self) -> Path:
        """The log of the pods in our namespace: the controller's Deployment (written by `up`)."""
        return self.pod_logs / f"{c.SYSTEM_NAMESPACE}.log"

    def _start_kwok(self) -> None:
        """kwok with our stages, and as the nodes' kubelet for `kubectl logs`: kube-apiserver dials
        the nodes' InternalIP (127.0.0.1) at kwok's port, and kwok reads the container logs from
        the files its ClusterLogs name."""
        self.pod_logs.mkdir(exist_ok=True)
        self.controller_log.touch()
        training = self.pod_logs / "simulated.log"
        training.write_text("".join(cri_line(text) for text in (
            "this pod runs no container: kwok simulates it on a fake node",
            f"it ends after the seconds its annotation {c.ANNOTATION_SIM_DURATION} gives, or runs until deleted")))
        logs = [{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": name},
                 "spec": {**({"selector": selector} if selector else {}),
                          "logs": [{"containers": [], "logsFile": str(path), "follow": True}]}}
                for name, selector, path in (("controller", {"matchNamespaces": [c.SYSTEM_NAMESPACE]},
                                              self.controller_log), ("simulated", None, training))]
        config = self.state_dir / "kwok.yaml"
        config.write_text(STAGES.read_text() + "\n---\n" + yaml.safe_dump_all([*logs, kwok_configuration(self.pod_workers)]))
        cert, key = self._ca.write_issued(self.pki, "kwok", "kwok", server=True, hosts=("127.0.0.1",))
        port = free_port()
        self._run("kwok", [
            f"--kubeconfig={self.kubeconfig_path}", f"--config={config}", "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            f"--server-address=127.0.0.1:{port}", f"--node-port={port}", "--node-ip=127.0.0.1",
            f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", "--cidr=10.244.0.0/16",
            "--node-lease-duration-seconds=40",  # kwok renews each node's Lease: the nodes stay Ready
        ])

    def _create_nodes(self) -> None:
        for i in range(self.nodes.count):
            self.apply(node_manifest(f"{self.nodes.prefix}-{i}", self.nodes))

    def _wait_for_default_service_account(self, timeout: float = 60.0) -> None:
        """Pods are refused until the service-account controller made `default` in their namespace."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(urllib.error.HTTPError):
                self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
                return
            time.sleep(0.2)
        raise ClusterError("the default service account never appeared (kube-controller-manager):\n"
                           + self.processes["kube-controller-manager"].tail())

    # -- the training operator ---------------------------------------------------------------

    def _start_training_operator(self) -> None:
        source = operator_source()
        for crd in sorted((source / "manifests" / "base" / "crds").glob("kubeflow.org_*.yaml")):
            self.apply(yaml.safe_load(crd.read_text()))
        self.wait_for_crds("kubeflow.org", "v1", {"pytorchjobs", "tfjobs", "mpijobs"})
        webhook_port, probe_port = free_port(), free_port()
        ca, cert, key = operator_certificate()
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}})
        self.apply({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": "training-operator-webhook-cert", "namespace": OPERATOR_NAMESPACE},
                    "data": {"ca.crt": _b64(ca.pem), "ca.key": _b64(ca.key_pem),
                             "tls.crt": _b64(cert), "tls.key": _b64(key)}})
        # Its own validating webhooks, called by kube-apiserver at 127.0.0.1 (the certificate names
        # that address too); the operator writes the caBundle in, as in a cluster.
        manifest = yaml.safe_load((source / "manifests" / "base" / "webhook" / "manifests.yaml").read_text())
        for hook in manifest["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}{path}"}
        manifest["metadata"] = {"name": OPERATOR_WEBHOOKS}
        self.apply(manifest)
        self._run("training-operator", [
            f"--kubeconfig={self.kubeconfig_path}", f"--webhook-server-port={webhook_port}",
            "--metrics-bind-address=0", f"--health-probe-bind-address=127.0.0.1:{probe_port}",
            *(f"--enable-scheme={k.lower()}" for k in OPERATOR_KINDS),
            "--kube-api-qps=200", "--kube-api-burst=400", "--controller-threads=4",
        ], env={"MY_POD_NAMESPACE": OPERATOR_NAMESPACE})
        self._wait_ready("training-operator", f"http://127.0.0.1:{probe_port}/readyz", timeout=120, tls=False)

    # -- KubeRay -------------------------------------------------------------------------------

    @property
    def operator_groups(self) -> frozenset[str]:
        """The API groups whose CRDs a real operator here installs: ours are never applied over
        them. kubeflow.org's even without the training operator (a cluster for Kueue's bench)."""
        return frozenset({c.KUBEFLOW_GROUP, *((c.RAY_GROUP,) if self.kuberay else ())})

    def _start_kuberay(self) -> None:
        """KubeRay's CRDs (its config/crd) and its operator, as its chart runs it less the
        Deployment: one instance, no webhook (its chart has none by default either)."""
        source = kuberay_source()
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # 3 MB of schemas: 3.4 s read in Python, 0.5 s in C
        for crd in sorted((source / "config" / "crd" / "bases").glob("ray.io_*.yaml")):
            self.apply(yaml.load(crd.read_text(), Loader=loader))
        self.wait_for_crds(c.RAY_GROUP, "v1", {c.RAY_PLURAL, c.RAY_CLUSTER_PLURAL})
        probe_port = free_port()
        self._run(c.RAY_OPERATOR, [
            "--metrics-addr=0", f"--health-probe-bind-address=127.0.0.1:{probe_port}",
            "--enable-leader-election=false", "--log-stdout-encoder=console", "--reconcile-concurrency=4",
            "--qps=200", "--burst=400",
        ], env={"KUBECONFIG": str(self.kubeconfig_path)})
        self._wait_ready(c.RAY_OPERATOR, f"http://127.0.0.1:{probe_port}/readyz", timeout=120, tls=False)

    def wait_for_crds(self, group: str, version: str, plurals: set[str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(urllib.error.HTTPError):
                served = {r["name"] for r in self.request("GET", f"/apis/{group}/{version}")["resources"]}
                if plurals <= served:
                    return
            time.sleep(0.2)
        raise ClusterError(f"CRDs {sorted(plurals)} were not served within {timeout:.0f} s")


def audit_policy(users: tuple[str, ...] = (), pods: bool = False, jobs: bool = False) -> dict[str, Any]:
    """kube-apiserver's audit policy: every request's metadata, or only `users`' requests;
    with `pods`, a pod's create with the pod (its generated name and its requests: a binding's
    entry names the pod only) and the bodies of pod status writes (its phase, when it ends);
    with `jobs`, the bodies of batch Jobs' writes (a resume, the Job controller's conditions)."""
    rules: list[dict[str, Any]] = [{"level": "Metadata"}]
    if users:
        rules = [{"level": "Metadata", "users": list(users)}, {"level": "None"}]
    if pods:
        rules = [{"level": "RequestResponse", "verbs": ["create"], "resources": [{"group": "", "resources": ["pods"]}]},
                 {"level": "Request", "verbs": ["update", "patch"],
                  "resources": [{"group": "", "resources": ["pods/status"]}]}, *rules]
    if jobs:
        rules = [{"level": "Request", "verbs": ["update", "patch"],
                  "resources": [{"group": "batch", "resources": ["jobs", "jobs/status"]}]}, *rules]
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": rules}


def kwok_configuration(pod_workers: int) -> dict[str, Any]:
    """kwok's own configuration with `pod_workers` stage workers for pods. kwok defaults a
    KwokConfiguration only when the file has none, so this one spells out every default of
    kwok v0.8.0 (a missing `nodeLeaseParallelism` is 0 workers, and kwok exits)."""
    return {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
            "metadata": {"name": "kwok"},
            "options": {"cidr": "10.0.0.0/24", "manageAllNodes": False, "enableDebuggingHandlers": True,
                        "enableContentionProfiling": False, "enableProfilingHandler": True,
                        "podPlayStageParallelism": pod_workers, "nodePlayStageParallelism": 4,
                        "nodeLeaseParallelism": 4, "podsOnNodeSyncParallelism": 1,
                        "enablePodsOnNodeSyncListPager": True, "enablePodsOnNodeSyncStreamWatch": False}}


def cri_line(text: str, stream: str = "stdout") -> str:
    """One line of a container log as the kubelet's runtime writes it (what kwok reads)."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e9):09d}Z"
    return f"{stamp} {stream} F {text}\n"


def install_crds(cluster: RealCluster) -> None:
    """Our CRDs (ElasticQuota, Queue, QueueUnit, and the job kinds' that no operator here
    installs) and the namespace of our Queues; a real operator's (the training operator's,
    KubeRay's) are its own, never ours over them."""
    from koordqueue.api.crds import our_crds
    from koordqueue.manifests import operator_crds

    theirs = cluster.operator_groups
    for crd in our_crds() + [d for d in operator_crds() if d["spec"]["group"] not in theirs]:
        cluster.apply(crd)
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.SYSTEM_NAMESPACE}})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def operator_source() -> Path:
    """The training operator's module folder (its CRDs and webhook manifests), from Go's module cache."""
    try:
        return build.module_source("training-operator", "github.com/kubeflow/training-operator")
    except build.BuildError as e:
        raise ClusterError(f"cannot find the training operator's module: {e}") from None


def koordinator_source() -> Path:
    """Koordinator's module folder (its CRDs, webhook manifests and scheduler configuration)."""
    try:
        return build.module_source("koordinator", KOORDINATOR_MODULE)
    except build.BuildError as e:
        raise ClusterError(f"cannot find Koordinator's module: {e}") from None


def kuberay_source() -> Path:
    """KubeRay's operator module folder (its CRDs), from Go's module cache."""
    try:
        return build.module_source("kuberay", KUBERAY_MODULE)
    except build.BuildError as e:
        raise ClusterError(f"cannot find KubeRay's module: {e}") from None


def operator_certificate() -> tuple[CertificateAuthority, bytes, bytes]:
    """The training operator's webhook CA and certificate, shared by every cluster on the machine.

    Its server reads them from a fixed folder, so clusters started side by side must agree on
    them; the CA is what its certificate rotator checks and keeps (it names itself by a SAN).
    """
    OPERATOR_CERT_DIR.mkdir(parents=True, exist_ok=True)
    stored = OPERATOR_CERT_DIR / "koord-queue-harness-v2.json"
    with _locked(OPERATOR_CERT_DIR / ".lock"):
        if stored.exists():
            saved = json.loads(stored.read_text())
            ca = CertificateAuthority.load("training-operator-ca", saved["ca"].encode(), saved["ca_key"].encode())
            cert, key = saved["cert"].encode(), saved["key"].encode()
        else:
            ca = CertificateAuthority.create("training-operator-ca", hosts=("training-operator-ca",), rsa_key=True)
            cert, key = ca.issue(OPERATOR_SERVICE, server=True,
                                 hosts=(f"{OPERATOR_SERVICE}.{OPERATOR_NAMESPACE}.svc", "127.0.0.1"))
            write_private(stored, json.dumps({"ca": ca.pem.decode(), "ca_key": ca.key_pem.decode(),
                                              "cert": cert.decode(), "key": key.decode()}).encode())
        for name, data in (("tls.crt", cert), ("tls.key", key), ("ca.crt", ca.pem)):
            path = OPERATOR_CERT_DIR / name
            if not path.exists() or path.read_bytes() != data:
                tmp = path.with_suffix(".tmp")
                write_private(tmp, data)
                os.replace(tmp, path)
    return ca, cert, key


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def wipe(state_dir: Path) -> None:
    shutil.rmtree(state_dir, ignore_errors=True)
