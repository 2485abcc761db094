"""The chart's objects, sent to the embedded API server by real kubectl and real helm.

And the controller under the chart's RBAC: the rendered CRDs, ServiceAccount, roles,
Service and both webhook configurations are applied with kubectl; the Deployment's
container args run as a `koord-queue controller` process whose kubeconfig holds a token
of the chart's ServiceAccount (the embedded server enforces RBAC for such tokens and
logs every request by user). The seed flow and the rest of what the controller does go
through; nothing it asks is refused, and the ClusterRole and Role grant nothing it did
not use. The Deployment itself is not applied: the embedded server runs no pods of
Deployments, so the process stands in for its container.

The embedded server dials a webhook Service at 127.0.0.1:<Service port> (a named
targetPort has no pod to resolve against), so the chart is rendered with
webhook.servicePort equal to webhook.port: what the named port resolves to in a pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.apiserver.controls import Access
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.kube.informer import Informer
from koordqueue.manifests import operator_crds
from koordqueue.simcluster.cluster import SimCluster
from tests.chart.helmtool import CHART, NAMESPACE, RELEASE, args, helm, one, render
from tests.chart.kube import KUBECTL, Cluster, embedded_cluster

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

SEED = Path(__file__).parents[1] / "apiserver" / "data"


@pytest.fixture
def bare_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """An embedded API server with no CRDs at all: the chart must bring its own."""
    with embedded_cluster(tmp_path, crds=[]) as cluster:
        yield cluster


def test_kubectl_applies_the_rendered_crds_service_account_and_rbac(bare_cluster: Cluster) -> None:
    objects = [o for o in render(include_crds=True)
               if o["kind"] in {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                "Role", "RoleBinding"}]
    assert len(objects) == 4 + 5 + 3  # (+ the roles for people, userroles.yaml)
    bare_cluster.kubectl("create", "namespace", NAMESPACE, check=False)  # may exist already
    out = bare_cluster.kubectl("apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(objects)).stdout
    for obj in objects:
        assert f"{obj['metadata']['name']} created" in out, (obj["kind"], out)
    crds = bare_cluster.kubectl("get", "crd", "-o", "name").stdout.split()
    assert sorted(crds) == sorted(f"customresourcedefinition.apiextensions.k8s.io/{o['metadata']['name']}"
                                  for o in objects if o["kind"] == "CustomResourceDefinition")
    role = bare_cluster.get_json("clusterrole", "koord-queue")
    assert role["rules"] == one(objects, "ClusterRole", "koord-queue")["rules"]  # stored as sent, nothing dropped
    binding = bare_cluster.get_json("rolebinding", "-n", NAMESPACE, "koord-queue")
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": "koord-queue", "namespace": NAMESPACE}
    # The chart's CRDs serve the seed's objects: kubectl validates them against the
    # CRDs' schemas (OpenAPI v3 from the server) and creates them.
    bare_cluster.kubectl("apply", "--validate=strict", "-f", str(SEED / "elastic-quota.yaml"))
    bare_cluster.kubectl("apply", "--validate=strict", "-f", str(SEED / "queue.yaml"))
    quota = bare_cluster.get_json("elasticquota", "pytorch-team-a")
    assert quota["spec"]["max"]["nvidia.com/gpu"] == "8"
    assert "No resources found" in bare_cluster.kubectl("get", "queueunit", "-A").stderr  # served, empty


def test_helm_installs_the_chart(bare_cluster: Cluster) -> None:
    """`helm install` as the README has it (helm 4 applies server-side), what a user then
    checks with kubectl, `helm upgrade` with changed values, and `helm uninstall`."""
    env = bare_cluster.env()

    def run(*args: str) -> str:
        result = subprocess.run([str(helm()), *args], capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    out = run("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
              "--set", "extension.tf.enable=true", "--set-json", 'controller.podAnnotations={"team": "ml"}')
    assert "STATUS: deployed" in out and "Queued job kinds: PyTorchJob, TFJob." in out
    deployment = bare_cluster.get_json("deployment", "-n", NAMESPACE, "koord-queue-controllers")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "koord-queue"
    budget = bare_cluster.get_json("poddisruptionbudget", "-n", NAMESPACE, "koord-queue-controllers")
    assert budget["spec"]["minAvailable"] == 1
    crds = bare_cluster.kubectl("get", "crd").stdout
    assert {"elasticquotas.scheduling.sigs.k8s.io", "elasticquotatrees.scheduling.sigs.k8s.io",
            "queues.scheduling.x-k8s.io",
            "queueunits.scheduling.x-k8s.io"} <= {line.split()[0] for line in crds.splitlines()[1:]}
    webhook = bare_cluster.get_json("mutatingwebhookconfiguration", "koord-queue")
    assert webhook["webhooks"][0]["rules"][0]["resources"] == ["pytorchjobs", "tfjobs"]
    assert "koord-queue" in run("list", "--namespace", NAMESPACE)
    applied = bare_cluster.get_json("deployment", "-n", NAMESPACE, "koord-queue-controllers", "--show-managed-fields")
    assert [(e["manager"], e["operation"]) for e in applied["metadata"]["managedFields"]] == [("helm", "Apply")]

    # An upgrade without TFJobs and without the pod annotation: what the chart no longer
    # renders is gone (fields helm applied before and applies no more), the rest stays.
    assert "annotations" in deployment["spec"]["template"]["metadata"]
    out = run("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reset-values")
    assert "STATUS: deployed" in out and "REVISION: 2" in out
    deployment = bare_cluster.get_json("deployment", "-n", NAMESPACE, "koord-queue-controllers")
    assert "annotations" not in deployment["spec"]["template"]["metadata"]
    assert "--job-kinds=PyTorchJob" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    webhook = bare_cluster.get_json("mutatingwebhookconfiguration", "koord-queue")
    assert webhook["webhooks"][0]["rules"][0]["resources"] == ["pytorchjobs"]
    role = bare_cluster.get_json("clusterrole", "koord-queue")
    assert "tfjobs" not in json.dumps(role["rules"]) and "pytorchjobs" in json.dumps(role["rules"])

    # helm uninstall deletes the release's objects (and its release Secret, which helm
    # deletes with a protobuf DeleteOptions); the CRDs stay, as helm leaves crds/ alone.
    out = run("uninstall", RELEASE, "--namespace", NAMESPACE)
    assert f'release "{RELEASE}" uninstalled' in out
    assert run("list", "--namespace", NAMESPACE, "--output", "json").strip() == "[]"  # in any status
    for kind in ("deployment", "poddisruptionbudget", "service", "serviceaccount", "role", "rolebinding", "secret"):
        left = bare_cluster.kubectl("get", kind, "-n", NAMESPACE, "-o", "name").stdout.split()
        assert [n for n in left if "koord-queue" in n] == [], (kind, left)
    for kind in ("clusterrole", "clusterrolebinding", "mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        assert bare_cluster.kubectl("get", kind, "koord-queue", check=False).returncode == 1, kind
    assert len(bare_cluster.get_json("crd")["items"]) == 4


# --- the controller under the chart's ServiceAccount --------------------------------

SERVICE_ACCOUNT = "koord-queue"  # the chart's, with the release named koord-queue
CONTROLLER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
INSTALLED = {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
             "RoleBinding", "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
SEED_JOB, SEED_QUOTA, SEED_UNIT = "pytorch-training-job", "pytorch-team-a", "pytorch-training-job-py-qu"
PYTORCHJOBS = Resource(c.KUBEFLOW_GROUP, "v1", "pytorchjobs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def granted_by(rules: list[dict[str, Any]]) -> set[Access]:
    """Every (verb, group, resource, subresource) the rules allow, whatever resourceNames
    narrow them to (the server enforces the names; a refusal would show in denied_to)."""
    out = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                name, _, sub = resource.partition("/")
                out |= {Access(verb, group, name, sub) for verb in rule["verbs"]}
    return out


def over_max_job(name: str, gpus_per_pod: int) -> dict[str, Any]:
    """The seed's PyTorchJob under another name, each of its two pods asking more GPUs."""
    job = yaml.safe_load((SEED / "pytorchjob.yaml").read_text())
    job["metadata"]["name"] = name
    for role in job["spec"]["pytorchReplicaSpecs"].values():
        resources = role["template"]["spec"]["containers"][0]["resources"]
        for part in ("requests", "limits"):
            resources[part][c.GPU] = str(gpus_per_pod)
    return job


async def eventually(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except (AssertionError, KeyError, IndexError) as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")


@pytest.mark.timeout(120)
async def test_the_controller_runs_the_seed_flow_with_the_charts_rbac_and_uses_every_grant(
        tmp_path: Path) -> None:
    """The chart's objects applied with kubectl; the Deployment's container args run as
    `koord-queue controller` with a token of the chart's ServiceAccount. The seed flow and
    the rest of what the controller does (a job over max, a policy change, deletions, the
    Lease) go through; nothing it asks is refused, and every grant is used: the sets are
    equal, no verb counted as implied by another. Not run here: the value-dependent
    grants (other job kinds, the finalizers update that OwnerReferencesPermissionEnforcement
    demands, the caBundle grant dropped with cert-manager); test_chart.py checks those
    render exactly as the values say."""
    metrics_port, webhook_port = free_port(), free_port()
    # The embedded server dials a webhook Service at 127.0.0.1:<Service port>: make the
    # Service port the container port, as a pod's named targetPort would resolve to.
    objects = render({"controller": {"metrics": {"port": metrics_port}},
                      "webhook": {"port": webhook_port, "servicePort": webhook_port}}, include_crds=True)
    installed = [o for o in objects if o["kind"] in INSTALLED]
    assert sorted(o["kind"] for o in installed) == sorted(
        ["CustomResourceDefinition"] * 4 + ["ClusterRole"] * 3  # (+ the roles for people, userroles.yaml)
        + sorted(INSTALLED - {"CustomResourceDefinition"}))
    controller_args = args(objects)
    granted = granted_by(one(objects, "ClusterRole", "koord-queue")["rules"]) | granted_by(one(objects, "Role")["rules"])

    with embedded_cluster(tmp_path, crds=operator_crds()) as cluster:
        def kubectl(*argv: str, stdin: str | None = None) -> Awaitable[subprocess.CompletedProcess[str]]:
            return asyncio.to_thread(cluster.kubectl, *argv, stdin=stdin)

        async def get_json(*argv: str) -> Any:
            return json.loads((await kubectl("get", *argv, "-o", "json")).stdout)

        await kubectl("apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(installed))
        server = cluster.server.server
        kubeconfig = cluster.server.call(
            lambda: server.write_kubeconfig_for(NAMESPACE, SERVICE_ACCOUNT, tmp_path / "controller.kubeconfig"))
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        log = tmp_path / "controller.log"
        async with KubeClient(load_config(str(cluster.kubeconfig))) as admin, SimCluster(admin, nodes=2):
            first_seen: dict[str, dict[str, Any]] = {}
            jobs = Informer(admin, PYTORCHJOBS, project=lambda o: o)
            jobs.on_add(lambda o: first_seen.setdefault(o["metadata"]["name"], o))
            jobs.start()
            await jobs.wait_synced(10)
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [sys.executable, "-m", "koordqueue.cli", "controller", "--kubeconfig", str(kubeconfig),
                     *controller_args], stdout=out, stderr=subprocess.STDOUT, env=env)
            try:
                await run_seed_flow(kubectl, get_json, metrics_port, first_seen, process, log)

                def used() -> set[Access]:  # (a streaming list reads what the list grant is for)
                    return cluster.server.call(lambda: server.controls.requests_by(CONTROLLER)
                                               | server.controls.streamed_by(CONTROLLER))

                async def all_used() -> set[Access] | None:
                    now = used()
                    return now if now >= granted else None

                with contextlib.suppress(AssertionError):
                    await eventually(all_used, "every grant used", timeout=6)
                denied = cluster.server.call(lambda: server.controls.denied_to(CONTROLLER))
                assert denied == set(), f"refused to the controller: {sorted(map(str, denied))}"
                made = used()
                assert made - granted == set()  # (nothing refused means nothing ungranted, but say so)
                assert granted - made == set(), f"granted, never used: {sorted(map(str, granted - made))}"
            finally:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
                await jobs.stop()


async def run_seed_flow(kubectl: Any, get_json: Any, metrics_port: int, first_seen: dict[str, dict[str, Any]],
                        process: subprocess.Popen[bytes], log: Path) -> None:
    async def leading() -> bool:
        assert process.poll() is None, f"the controller exited:\n{log.read_text()[-3000:]}"
        async with aiohttp.ClientSession() as session:
            try:
                async with session.get(f"http://127.0.0.1:{metrics_port}/readyz") as response:
                    return await response.text() == "ok: leading"
            except aiohttp.ClientError:
                return False

    await eventually(leading, "the controller to lead and sync", timeout=20)

    async def ca_bundle() -> str:
        hook = (await get_json("mutatingwebhookconfiguration", "koord-queue"))["webhooks"][0]
        return str(hook["clientConfig"].get("caBundle", ""))

    await eventually(ca_bundle, "the controller's CA in the caBundle")

    # The seed guide, verbatim, with kubectl.
    for name in ("elastic-quota.yaml", "queue.yaml", "pytorchjob.yaml"):
        await kubectl("apply", "-f", str(SEED / name))
    # Suspended by the webhook as it was created: the first version ever stored says so.
    created = await eventually(lambda: asyncio.sleep(0, first_seen.get(SEED_JOB)), "the job seen")
    assert created["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
    assert created["spec"]["runPolicy"]["suspend"] is True

    async def phase(unit: str) -> str:
        return str((await get_json("queueunit", unit, "-n", "default")).get("status", {}).get("phase", ""))

    async def is_phase(unit: str, wanted: str) -> bool:
        return await phase(unit) == wanted

    await eventually(lambda: is_phase(SEED_UNIT, c.Phase.RUNNING), "the seed's unit Running")
    events = await get_json("events", "-n", "default", "--field-selector", f"involvedObject.name={SEED_UNIT}")
    reasons = [e["reason"] for e in events["items"]]
    assert c.EventReason.ENQUEUED in reasons and c.EventReason.DEQUEUED in reasons

    async def pods_running() -> list[dict[str, Any]] | None:
        pods = (await get_json("pods", "-n", "default", "-l", f"{c.LABEL_JOB_NAME}={SEED_JOB}"))["items"]
        return pods if len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods) else None

    pods = await eventually(pods_running, "the seed job's two pods Running")
    assert sorted(p["metadata"]["labels"][c.LABEL_REPLICA_TYPE] for p in pods) == ["master", "worker"]

    async def used_gpus(wanted: str) -> bool:
        quota = await get_json("elasticquota", SEED_QUOTA, "-n", "default")
        return quota.get("status", {}).get("used", {}).get(c.GPU) == wanted

    await eventually(lambda: used_gpus("2"), "status.used of the quota: 2 GPUs")
    # The ElasticQuota CRD replaced by one without the status subresource, as Koordinator's
    # (its /status answers 404): the controller writes status.used with the object from now on.
    await kubectl("patch", "crd", "elasticquotas.scheduling.sigs.k8s.io", "--type=json",
                  "-p", '[{"op": "remove", "path": "/spec/versions/0/subresources"}]')

    # A job over max waits, says why, and its FailedScheduling event too.
    await kubectl("apply", "-f", "-", stdin=yaml.safe_dump(over_max_job("over-max", gpus_per_pod=4)))
    expected = f"waiting for quota {SEED_QUOTA}: nvidia.com/gpu asks 8, used 2 of max 8"

    async def waits() -> bool:
        unit = await get_json("queueunit", "over-max-py-qu", "-n", "default")
        return unit.get("status", {}).get("message") == expected and unit["status"]["phase"] == c.Phase.ENQUEUED

    await eventually(waits, "the job over max to wait with its reason")

    async def failed_scheduling() -> bool:
        events = await get_json("events", "-n", "default", "--field-selector", "involvedObject.name=over-max")
        return any(e["reason"] == c.EventReason.FAILED_SCHEDULING and e["message"] == expected
                   for e in events["items"])

    await eventually(failed_scheduling, "a FailedScheduling event on the job")

    # The unit's spec is the controller's: a hand edit is reverted, twice, and the second
    # SpecRestored event is the first one counted again.
    for _ in range(2):
        await kubectl("patch", "queueunit", "over-max-py-qu", "-n", "default", "--type=merge",
                      "-p", '{"spec": {"priority": 99}}')

        async def restored() -> bool:
            unit = await get_json("queueunit", "over-max-py-qu", "-n", "default")
            return bool(unit["spec"]["priority"] == 10)

        await eventually(restored, "the unit's priority restored from the job")

    async def counted_twice() -> bool:
        events = await get_json("events", "-n", "default", "--field-selector", "involvedObject.name=over-max-py-qu")
        return [e.get("count") for e in events["items"] if e["reason"] == c.EventReason.SPEC_RESTORED] == [2]

    await eventually(counted_twice, "one SpecRestored event with count 2")

    # The quota's policy label changes its Queue.
    await kubectl("label", "elasticquota", SEED_QUOTA, "-n", "default", f"{c.LABEL_QUEUE_POLICY}=Block",
                  "--overwrite")

    async def queue_policy() -> bool:
        queue = await get_json("queue", SEED_QUOTA, "-n", NAMESPACE)
        return bool(queue["spec"]["queuePolicy"] == "Block")

    await eventually(queue_policy, "the quota's Queue patched to Block")

    # Deleting the job: its unit goes, its quota is given back (to the job that waited).
    await kubectl("delete", "pytorchjob", SEED_JOB, "-n", "default")

    async def unit_gone() -> bool:
        units = await get_json("queueunit", "-n", "default")
        return [u["metadata"]["name"] for u in units["items"]] == ["over-max-py-qu"]

    await eventually(unit_gone, "the seed's unit gone")
    await eventually(lambda: is_phase("over-max-py-qu", c.Phase.RUNNING), "the job that waited Running")
    await eventually(lambda: used_gpus("8"), "the quota charged for the job that waited")
    await kubectl("delete", "pytorchjob", "over-max", "-n", "default")
    await eventually(lambda: used_gpus("0"), "the quota released")
    # A job deleted with --cascade=orphan: no garbage collector deletes its unit; the controller does.
    await kubectl("apply", "-f", "-", stdin=yaml.safe_dump(over_max_job("never-fits", gpus_per_pod=5)))
    await eventually(lambda: is_phase("never-fits-py-qu", c.Phase.ENQUEUED), "the job over max queued")
    await kubectl("delete", "pytorchjob", "never-fits", "-n", "default", "--cascade=orphan")

    async def no_unit_left() -> bool:
        return (await get_json("queueunit", "-n", "default"))["items"] == []

    await eventually(no_unit_left, "the orphaned unit deleted by the controller")

    # Deleting the quota deletes its Queue; the seed's own Queue stays.
    await kubectl("delete", "elasticquota", SEED_QUOTA, "-n", "default")

    async def queue_gone() -> bool:
        queues = await get_json("queue", "-n", NAMESPACE)
        return [q["metadata"]["name"] for q in queues["items"]] == ["pytorch-training-queue"]

    await eventually(queue_gone, "the quota's Queue deleted")
    # A quota tree, Koord-Queue's other form: read, and its status written back.
    tree = {"apiVersion": c.QUOTA_TREE_API_VERSION, "kind": c.ELASTIC_QUOTA_TREE_KIND,
            "metadata": {"name": "tree", "namespace": c.QUOTA_TREE_NAMESPACE},
            "spec": {"root": {"name": "root", "max": {c.GPU: "8"}, "min": {c.GPU: "8"},
                              "children": [{"name": "leaf", "namespaces": ["default"], "max": {c.GPU: "8"}}]}}}
    await kubectl("create", "-f", "-", stdin=json.dumps(tree))

    async def tree_status() -> bool:
        status = (await get_json(c.ELASTIC_QUOTA_TREE_PLURAL, "tree", "-n", c.QUOTA_TREE_NAMESPACE)).get("status")
        return bool(status) and status["root"]["children"][0]["used"] == {c.GPU: "0"}

    await eventually(tree_status, "the tree's status written")
    await kubectl("delete", c.ELASTIC_QUOTA_TREE_PLURAL, "tree", "-n", c.QUOTA_TREE_NAMESPACE)
    lease = await get_json("lease", "koord-queue-controller", "-n", NAMESPACE)
    assert lease["spec"]["holderIdentity"]
