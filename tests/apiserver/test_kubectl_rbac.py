"""kubectl 1.32 with ServiceAccount identities and RBAC: what a Helm chart's RBAC and its users do.

One server for the module; each test uses its own ServiceAccount.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from koordqueue.apiserver.controls import Access
from koordqueue.apiserver.server import APIServer

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


@dataclass
class Cluster:
    server: APIServer
    root: Path

    def run(self, *args: str, token: str | None = None, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        who = ["--token", token] if token else []
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.server.kubeconfig_path), "--cache-dir", str(self.root / "cache"),
             *who, *args], input=stdin, capture_output=True, text=True, timeout=30,
            env={"HOME": str(self.root), "PATH": str(Path(shutil.which("kubectl") or "").parent) + ":/usr/bin:/bin"})
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def out(self, *args: str, token: str | None = None, stdin: str | None = None) -> str:
        return self.run(*args, token=token, stdin=stdin).stdout.strip()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("kubectl-rbac")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = APIServer(root / "state")
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
    try:
        yield Cluster(server, root)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


CONTROLLER_RBAC = """apiVersion: v1
kind: ServiceAccount
metadata: {name: NAME, namespace: koord-queue}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: NAME}
rules:
- apiGroups: [scheduling.x-k8s.io]
  resources: [queueunits]
  verbs: [get, list, watch, create]
- apiGroups: [scheduling.x-k8s.io]
  resources: [queueunits/status]
  verbs: [get, patch, update]  # kubectl patch --subresource reads it first
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: NAME}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: NAME}
subjects:
- {kind: ServiceAccount, name: NAME, namespace: koord-queue}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: NAME, namespace: koord-queue}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: NAME, namespace: koord-queue}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: NAME}
subjects:
- {kind: ServiceAccount, name: NAME, namespace: koord-queue}
"""

UNIT = """apiVersion: scheduling.x-k8s.io/v1alpha1
kind: QueueUnit
metadata: {name: UNIT, namespace: default}
spec:
  consumerRef: {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: job}
  priority: 1
"""


def install(cluster: Cluster, name: str) -> str:
    """Apply the controller-like RBAC for ServiceAccount koord-queue/<name>; a token for it."""
    applied = cluster.out("apply", "-f", "-", stdin=CONTROLLER_RBAC.replace("NAME", name)).splitlines()
    assert applied == [f"serviceaccount/{name} created",
                       f"clusterrole.rbac.authorization.k8s.io/{name} created",
                       f"clusterrolebinding.rbac.authorization.k8s.io/{name} created",
                       f"role.rbac.authorization.k8s.io/{name} created",
                       f"rolebinding.rbac.authorization.k8s.io/{name} created"]
    return cluster.out("create", "token", name, "-n", "koord-queue")


def test_create_token_and_whoami(cluster: Cluster) -> None:
    token = install(cluster, "who")
    assert token.count(".") == 2  # a JWT
    whoami = cluster.out("auth", "whoami", token=token)
    assert "system:serviceaccount:koord-queue:who" in whoami
    assert "system:serviceaccounts:koord-queue" in whoami
    result = cluster.run("create", "token", "who", "-n", "koord-queue", "--duration=1m", check=False)
    assert result.returncode != 0
    assert "may not specify a duration less than 10 minutes" in result.stderr
    result = cluster.run("create", "token", "nobody", "-n", "koord-queue", check=False)
    assert 'serviceaccounts "nobody" not found' in result.stderr


def test_granted_requests_succeed_and_others_are_forbidden_in_kube_apiserver_words(cluster: Cluster) -> None:
    token = install(cluster, "ctl")
    user = "system:serviceaccount:koord-queue:ctl"
    assert cluster.out("create", "-f", "-", stdin=UNIT.replace("UNIT", "u1"), token=token) == \
        "queueunit.scheduling.x-k8s.io/u1 created"
    assert "u1" in cluster.out("get", "queueunits", "-A", token=token)
    patched = cluster.out("patch", "queueunit", "u1", "--subresource=status", "--type=merge",
                          "-p", '{"status":{"phase":"Enqueued"}}', token=token)
    assert patched == "queueunit.scheduling.x-k8s.io/u1 patched"
    assert cluster.out("get", "queueunit", "u1", "-o", "jsonpath={.status.phase}") == "Enqueued"

    denied = cluster.run("patch", "queueunit", "u1", "--type=merge", "-p", '{"spec":{"priority":5}}', token=token,
                         check=False)
    assert denied.returncode != 0
    assert denied.stderr.strip() == (
        f'Error from server (Forbidden): queueunits.scheduling.x-k8s.io "u1" is forbidden: User "{user}" cannot '
        'patch resource "queueunits" in API group "scheduling.x-k8s.io" in the namespace "default"')
    denied = cluster.run("get", "pods", token=token, check=False)
    assert denied.stderr.strip() == (
        f'Error from server (Forbidden): pods is forbidden: User "{user}" cannot list resource "pods" in API group '
        '"" in the namespace "default"')
    denied = cluster.run("delete", "queueunit", "u1", token=token, check=False)
    assert "cannot delete resource" in denied.stderr
    # the Role counts in its namespace only
    lease = ("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: leader, namespace: NS}\n"
             "spec: {holderIdentity: me}\n")
    assert cluster.out("create", "-f", "-", stdin=lease.replace("NS", "koord-queue"), token=token) == \
        "lease.coordination.k8s.io/leader created"
    denied = cluster.run("create", "-f", "-", stdin=lease.replace("NS", "default"), token=token, check=False)
    assert 'cannot create resource "leases" in API group "coordination.k8s.io" in the namespace "default"' in \
        denied.stderr

    controls = cluster.server.controls
    assert Access("patch", "scheduling.x-k8s.io", "queueunits", "status") in controls.requests_by(user)
    assert Access("patch", "scheduling.x-k8s.io", "queueunits") in controls.denied_to(user)


def test_auth_can_i(cluster: Cluster) -> None:
    token = install(cluster, "asker")
    assert cluster.out("auth", "can-i", "watch", "queueunits", "-A", token=token) == "yes"
    no = cluster.run("auth", "can-i", "delete", "queueunits", token=token, check=False)
    assert (no.returncode, no.stdout.strip()) == (1, "no")
    assert cluster.out("auth", "can-i", "update", "queueunits/u1", "--subresource=status", token=token) == "yes"
    assert cluster.out("auth", "can-i", "create", "leases", "-n", "koord-queue", token=token) == "yes"
    assert cluster.run("auth", "can-i", "create", "leases", "-n", "default", token=token, check=False).returncode == 1
    # the admin asking as the ServiceAccount gets the ServiceAccount's answer
    as_sa = "--as=system:serviceaccount:koord-queue:asker"
    assert cluster.out("auth", "can-i", "list", "queueunits", as_sa) == "yes"
    assert cluster.run("auth", "can-i", "list", "pods", as_sa, check=False).stdout.strip() == "no"
    assert cluster.out("auth", "can-i", "list", "pods") == "yes"
    listing = cluster.out("auth", "can-i", "--list", "-n", "koord-queue", token=token)
    assert any(line.split()[0] == "queueunits.scheduling.x-k8s.io/status" and "[get patch update]" in line
               for line in listing.splitlines())
    assert any(line.split()[0] == "leases.coordination.k8s.io" for line in listing.splitlines())


def test_rbac_objects_print_and_describe(cluster: Cluster) -> None:
    install(cluster, "shown")
    table = cluster.out("get", "clusterrolebinding", "shown", "-o", "wide").splitlines()
    assert table[0].split()[:3] == ["NAME", "ROLE", "AGE"]
    assert table[1].split()[:2] == ["shown", "ClusterRole/shown"]
    described = cluster.out("describe", "clusterrole", "shown")
    assert "queueunits.scheduling.x-k8s.io/status" in described and "[get patch update]" in described
    bindings = cluster.out("describe", "rolebinding", "shown", "-n", "koord-queue")
    assert "ServiceAccount  shown" in bindings
    # the bootstrap role of every cluster is there
    assert cluster.out("get", "clusterrole", "cluster-admin", "-o", "name") == \
        "clusterrole.rbac.authorization.k8s.io/cluster-admin"
