"""Real kubectl 1.32 against the embedded server over HTTP: the seed's steps and everyday commands.

One server for the module (kubectl calls cost ~0.2 s each); every test uses its own objects.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.apiserver.server import APIServer

DATA = Path(__file__).parent / "data"
SEED = [DATA / "elastic-quota.yaml", DATA / "queue.yaml", DATA / "pytorchjob.yaml"]

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


@dataclass
class Kubectl:
    kubeconfig: Path
    cache_dir: Path
    home: Path

    def run(self, *args: str, stdin: str | None = None, check: bool = True,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir), *args],
            input=stdin, capture_output=True, text=True, timeout=timeout, env={"HOME": str(self.home), "PATH":
                                                                                  _path()})
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def out(self, *args: str, stdin: str | None = None) -> str:
        return self.run(*args, stdin=stdin).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.out(*args, "-o", "json"))

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"HOME": str(self.home), "PATH": _path()})


def _path() -> str:
    return str(Path(shutil.which("kubectl") or "/usr/bin/kubectl").parent) + ":/usr/bin:/bin"


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    root = tmp_path_factory.mktemp("kubectl")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = APIServer(root / "state")  # with the project's CRDs (koordqueue.api.crds)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
    try:
        yield Kubectl(server.kubeconfig_path, root / "cache", root)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def lines(text: str) -> list[list[str]]:
    """A kubectl table as rows of cells, cut where the header's columns start (cells may be empty)."""
    rows = text.rstrip("\n").splitlines()
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S+(?: \S+)*", rows[0])]
    return [[row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)] for row in rows]


# --- the seed ---------------------------------------------------------------------------------


def test_seed_verify_crds(kubectl: Kubectl) -> None:
    """`kubectl get crd | grep -E "(queue|pytorchjob)"`, run as the guide writes it."""
    result = subprocess.run(
        f'kubectl --kubeconfig {kubectl.kubeconfig} --cache-dir {kubectl.cache_dir} get crd '
        '| grep -E "(queue|pytorchjob)"',
        shell=True, capture_output=True, text=True, timeout=30, env={"HOME": str(kubectl.home), "PATH": _path()})
    assert result.returncode == 0, result.stderr
    names = {row[0] for row in lines(result.stdout)}
    assert {"queues.scheduling.x-k8s.io", "queueunits.scheduling.x-k8s.io", "pytorchjobs.kubeflow.org"} <= names
    assert all(re_created_at(row[1]) for row in lines(result.stdout))


def re_created_at(cell: str) -> bool:
    return re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", cell) is not None


def test_seed_manifests_apply_verbatim_with_validation(kubectl: Kubectl) -> None:
    for path, expected in zip(SEED, ["elasticquota.scheduling.sigs.k8s.io/pytorch-team-a created",
                                     "queue.scheduling.x-k8s.io/pytorch-training-queue created",
                                     "pytorchjob.kubeflow.org/pytorch-training-job created"], strict=True):
        result = kubectl.run("apply", "-f", str(path))
        assert result.stdout.strip() == expected
        assert "Warning" not in result.stderr, result.stderr
    job = kubectl.json("get", "pytorchjob", "pytorch-training-job", "-n", "default")
    env = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]
    assert env[0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['kubeflow.org/rank']"
    # applying again changes nothing
    assert kubectl.out("apply", "-f", str(SEED[1])).strip() == "queue.scheduling.x-k8s.io/pytorch-training-queue unchanged"


def test_unknown_field_is_rejected_by_strict_validation(kubectl: Kubectl) -> None:
    bad_queue = "\n".join([
        "apiVersion: scheduling.x-k8s.io/v1alpha1", "kind: Queue",
        "metadata: {name: typo-queue, namespace: default}", "spec: {queuePolicy: Priority, priorty: 5}"])
    result = kubectl.run("apply", "-f", "-", stdin=bad_queue, check=False)
    assert result.returncode != 0
    assert ('Error from server (BadRequest): error when creating "STDIN": Queue in version "v1alpha1" cannot be '
            'handled as a Queue: strict decoding error: unknown field "spec.priorty"') in result.stderr
    bad_cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: typo-cm}\ndata: {a: b}\ndatas: {c: d}\n"
    result = kubectl.run("apply", "-f", "-", stdin=bad_cm, check=False)
    assert 'strict decoding error: unknown field "datas"' in result.stderr and result.returncode != 0
    # --validate=false: no check at all
    result = kubectl.run("create", "--validate=false", "-f", "-", stdin=bad_queue)
    assert "queue.scheduling.x-k8s.io/typo-queue created" in result.stdout and "Warning" not in result.stderr


def test_unknown_field_is_warned_about_with_validate_warn(kubectl: Kubectl) -> None:
    bad_cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: warned-cm}\ndata: {a: b}\ndatas: {c: d}\n"
    result = kubectl.run("apply", "--validate=warn", "-f", "-", stdin=bad_cm)
    assert "configmap/warned-cm created" in result.stdout
    assert 'Warning: unknown field "datas"' in result.stderr


# --- get and printing -----------------------------------------------------------------------------


def _apply(kubectl: Kubectl, manifest: str) -> str:
    return kubectl.out("apply", "-f", "-", stdin=manifest)


QUEUE_UNIT = """apiVersion: scheduling.x-k8s.io/v1alpha1
kind: QueueUnit
metadata: {name: unit-a, namespace: default, labels: {team: a}}
spec:
  consumerRef: {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: pytorch-training-job}
  priority: 10
  queue: pytorch-team-a
"""


def test_get_prints_crd_columns_plain_wide_and_all_namespaces(kubectl: Kubectl) -> None:
    _apply(kubectl, QUEUE_UNIT)
    plain = lines(kubectl.out("get", "queueunit"))
    assert plain[0] == ["NAME", "PHASE", "PRIORITY", "ADMISSIONS", "JOBTYPE", "EXPECTED-START", "AGE"]
    assert plain[1][:6] == ["unit-a", "", "10", "", "PyTorchJob", ""]  # no status yet: empty cells
    assert re.fullmatch(r"\d+s", plain[1][6])
    assert lines(kubectl.out("get", "qu", "unit-a", "-o", "wide"))[0] == plain[0]  # no priority > 0 columns
    everywhere = lines(kubectl.out("get", "queues", "-A", "--show-labels"))
    assert everywhere[0] == ["NAMESPACE", "NAME", "POLICY", "PRIORITY", "QUOTA", "BOUND", "AGE", "LABELS"]
    assert ["koord-queue", "pytorch-training-queue", "Priority", "100"] == next(
        row[:4] for row in everywhere if row[1] == "pytorch-training-queue")


def test_get_output_formats(kubectl: Kubectl) -> None:
    _apply(kubectl, QUEUE_UNIT.replace("unit-a", "unit-b"))
    obj = kubectl.json("get", "qu", "unit-b")
    assert obj["kind"] == "QueueUnit" and obj["spec"]["priority"] == 10 and obj["metadata"]["uid"]
    assert yaml.safe_load(kubectl.out("get", "qu", "unit-b", "-o", "yaml"))["spec"] == obj["spec"]
    assert "unit-b" in kubectl.out("get", "qu", "-l", "team=a", "-o", "jsonpath={.items[*].metadata.name}").split()
    assert kubectl.out("get", "qu", "unit-b", "-o", "jsonpath={.spec.consumerRef.kind}") == "PyTorchJob"
    assert kubectl.out("get", "qu", "unit-b", "-o", "name").strip() == "queueunit.scheduling.x-k8s.io/unit-b"


POD = """apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers:
  - {name: app, image: nginx:1.25, env: [{name: MODE, value: prod}]}
  - {name: sidecar, image: busybox:1.36}
"""


def test_builtin_kinds_print_like_kube_apiserver(kubectl: Kubectl) -> None:
    namespaces = lines(kubectl.out("get", "namespaces"))
    assert namespaces[0] == ["NAME", "STATUS", "AGE"]
    assert ["default", "Active"] == next(row[:2] for row in namespaces if row[0] == "default")
    _apply(kubectl, "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high-priority}\n"
                    "value: 1000\ndescription: seed\n")
    pc = lines(kubectl.out("get", "priorityclass", "high-priority"))
    assert pc[0] == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert pc[1][:3] == ["high-priority", "1000", "false"] and pc[1][4] == "PreemptLowerPriority"
    assert kubectl.out("create", "-f", "-", stdin=POD).strip() == "pod/web created"
    pod = lines(kubectl.out("get", "pod", "web"))
    assert pod[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pod[1][:4] == ["web", "0/2", "Pending", "0"]
    wide = lines(kubectl.out("get", "pod", "web", "-o", "wide"))
    assert wide[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
                       "READINESS GATES"]
    assert wide[1][5:] == ["<none>", "<none>", "<none>", "<none>"]




PDB = """apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web-budget}
spec:
  minAvailable: 1
  selector:
    matchLabels: {app: web, tier: front}
"""


def test_pod_disruption_budget_policy_v1(kubectl: Kubectl) -> None:
    """policy/v1 is served (the chart ships a PodDisruptionBudget): strict validation,
    the kube-apiserver columns, the empty status a new budget gets, and the selector's
    patchStrategy=replace."""
    created = kubectl.out("apply", "--validate=strict", "-f", "-", stdin=PDB).strip()
    assert created == "poddisruptionbudget.policy/web-budget created"
    table = lines(kubectl.out("get", "pdb", "web-budget"))
    assert table[0] == ["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"]
    assert table[1][:4] == ["web-budget", "1", "N/A", "0"]
    pdb = kubectl.json("get", "poddisruptionbudget.policy", "web-budget")
    assert pdb["status"] == {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    assert pdb["metadata"]["generation"] == 1
    typo = kubectl.run("apply", "--validate=strict", "-f", "-", stdin=PDB.replace("minAvailable", "minAvailible"),
                       check=False)
    assert typo.returncode != 0 and 'unknown field "spec.minAvailible"' in typo.stderr
    # A selector label dropped from the manifest is gone: the selector is replaced, not merged.
    _apply(kubectl, PDB.replace(", tier: front", "").replace("minAvailable: 1", "maxUnavailable: 50%"))
    pdb = kubectl.json("get", "pdb", "web-budget")
    assert pdb["spec"] == {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "web"}}}
    assert kubectl.out("delete", "pdb", "web-budget").strip() == 'poddisruptionbudget.policy "web-budget" deleted'


def test_describe_a_crd_object_and_a_builtin(kubectl: Kubectl) -> None:
    quota = kubectl.out("describe", "elasticquota", "pytorch-team-a")
    assert re.search(r"^Name:\s+pytorch-team-a$", quota, re.M)
    assert re.search(r"^Labels:\s+koord-queue/queue-policy=Priority$", quota, re.M)
    assert re.search(r"^Kind:\s+ElasticQuota$", quota, re.M)
    assert re.search(r"nvidia\.com/gpu:\s+8", quota)
    ns = kubectl.out("describe", "namespace", "koord-queue")
    assert re.search(r"^Name:\s+koord-queue$", ns, re.M) and re.search(r"^Status:\s+Active$", ns, re.M)


# --- changes ----------------------------------------------------------------------------------


def test_patch_strategic_merge_json_on_a_builtin(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", "-", stdin=POD.replace("name: web,", "name: patched,"))
    # the default type for a built-in kind is strategic: containers merge by name
    kubectl.run("patch", "pod", "patched", "-p", '{"spec":{"containers":[{"name":"app","image":"nginx:1.27"}]}}')
    containers = kubectl.json("get", "pod", "patched")["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("app", "nginx:1.27"), ("sidecar", "busybox:1.36")]
    assert containers[0]["env"] == [{"name": "MODE", "value": "prod"}]
    kubectl.run("patch", "pod", "patched", "--type", "merge", "-p", '{"metadata":{"labels":{"tier":"front"}}}')
    kubectl.run("patch", "pod", "patched", "--type", "json",
                "-p", '[{"op":"replace","path":"/spec/containers/1/image","value":"busybox:1.37"}]')
    pod = kubectl.json("get", "pod", "patched")
    assert pod["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert pod["spec"]["containers"][1]["image"] == "busybox:1.37"
    # a CRD kind takes no strategic merge patch, as on a real server
    result = kubectl.run("patch", "queue", "pytorch-training-queue", "-n", "koord-queue", "-p", '{"spec":{}}',
                         check=False)
    assert result.returncode != 0
    assert ("the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json") in result.stderr


def test_apply_twice_builtin_uses_strategic_patch_and_last_applied(kubectl: Kubectl) -> None:
    first = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: '1', b: '2'}\n"
    assert _apply(kubectl, first).strip() == "configmap/settings created"
    kubectl.run("patch", "configmap", "settings", "-p", '{"data":{"byhand":"x"}}')
    second = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: '9'}\n"
    result = kubectl.run("apply", "-f", "-", stdin=second)
    assert (result.stdout.strip(), result.stderr) == ("configmap/settings configured", "")
    cm = kubectl.json("get", "configmap", "settings")
    assert cm["data"] == {"a": "9", "byhand": "x"}  # b was applied before and is gone; byhand was never applied
    last = json.loads(cm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["data"] == {"a": "9"}


def test_apply_twice_crd_uses_merge_patch(kubectl: Kubectl) -> None:
    queue = ("apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: Queue\nmetadata: {name: q2, namespace: default}\n"
             "spec: {queuePolicy: Block, priority: 1, priorityClassName: low}\n")
    _apply(kubectl, queue)
    changed = queue.replace("priority: 1, priorityClassName: low", "priority: 7")
    assert _apply(kubectl, changed).strip() == "queue.scheduling.x-k8s.io/q2 configured"
    assert kubectl.json("get", "queue", "q2")["spec"] == {"queuePolicy": "Block", "priority": 7}


def test_delete(kubectl: Kubectl) -> None:
    _apply(kubectl, QUEUE_UNIT.replace("unit-a", "doomed"))
    assert kubectl.out("delete", "qu", "doomed").strip() == 'queueunit.scheduling.x-k8s.io "doomed" deleted'
    result = kubectl.run("get", "qu", "doomed", check=False)
    assert result.returncode != 0
    assert 'Error from server (NotFound): queueunits.scheduling.x-k8s.io "doomed" not found' in result.stderr


# --- waiting and watching ---------------------------------------------------------------------


def _finish(proc: subprocess.Popen[str], timeout: float = 20) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_wait_for_jsonpath_and_for_delete(kubectl: Kubectl) -> None:
    _apply(kubectl, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: flag}\ndata: {ready: 'no'}\n")
    waiting = kubectl.popen("wait", "configmap/flag", "--for=jsonpath={.data.ready}=yes", "--timeout=20s")
    time.sleep(0.5)
    assert waiting.poll() is None  # still waiting: the condition does not hold yet
    kubectl.run("patch", "configmap", "flag", "-p", '{"data":{"ready":"yes"}}')
    code, out, err = _finish(waiting)
    assert (code, out.strip()) == (0, "configmap/flag condition met"), err

    waiting = kubectl.popen("wait", "configmap/flag", "--for=delete", "--timeout=20s")
    time.sleep(0.5)
    assert waiting.poll() is None
    kubectl.run("delete", "configmap", "flag")
    code, out, err = _finish(waiting)
    assert (code, out.strip()) == (0, "configmap/flag condition met"), err


def test_get_watch_prints_a_line_per_change(kubectl: Kubectl) -> None:
    _apply(kubectl, QUEUE_UNIT.replace("unit-a", "watched"))
    watch = kubectl.popen("get", "qu", "watched", "-w")
    try:
        assert watch.stdout is not None
        header = watch.stdout.readline()
        assert lines(header)[0] == ["NAME", "PHASE", "PRIORITY", "ADMISSIONS", "JOBTYPE", "EXPECTED-START", "AGE"]
        assert lines(header + watch.stdout.readline())[1][:5] == ["watched", "", "10", "", "PyTorchJob"]
        kubectl.run("patch", "qu", "watched", "--type", "merge", "-p", '{"spec":{"priority":42}}')
        assert lines(header + watch.stdout.readline())[1][:5] == ["watched", "", "42", "", "PyTorchJob"]
    finally:
        watch.kill()
        watch.communicate(timeout=10)


# --- discovery and schema --------------------------------------------------------------------


def test_api_resources_and_api_versions(kubectl: Kubectl) -> None:
    table = lines(kubectl.out("api-resources"))
    assert table[0] == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    rows = {row[0]: row for row in table[1:]}
    assert rows["queueunits"] == ["queueunits", "qu", "scheduling.x-k8s.io/v1alpha1", "true", "QueueUnit"]
    assert rows["pods"] == ["pods", "po", "v1", "true", "Pod"]
    assert rows["priorityclasses"] == ["priorityclasses", "pc", "scheduling.k8s.io/v1", "false", "PriorityClass"]
    legacy = json.loads(kubectl.out("get", "--raw", "/apis/batch/v1"))  # the legacy per-group/version list
    assert legacy["kind"] == "APIResourceList" and legacy["groupVersion"] == "batch/v1"
    assert {"name": "jobs/status", "singularName": "", "namespaced": True, "kind": "Job",
            "verbs": ["get", "patch", "update"]} in legacy["resources"]
    versions = kubectl.out("api-versions").split()
    assert {"v1", "apps/v1", "batch/v1", "kubeflow.org/v1", "scheduling.x-k8s.io/v1alpha1"} <= set(versions)


def test_explain_reads_the_openapi_v3_schemas(kubectl: Kubectl) -> None:
    spec = kubectl.out("explain", "queueunit.spec")
    assert re.search(r"^KIND:\s+QueueUnit$", spec, re.M) and re.search(r"^VERSION:\s+v1alpha1$", spec, re.M)
    assert re.search(r"^FIELD: spec <Object>$", spec, re.M)
    assert re.search(r"^  priority\s+<integer>$", spec, re.M) and re.search(r"^  queue\s+<string>$", spec, re.M)
    containers = kubectl.out("explain", "pod.spec.containers")
    assert re.search(r"^\s+imagePullPolicy\s+<string>$", containers, re.M)


def test_explain_describes_our_fields_and_the_operators_run_policy(kubectl: Kubectl) -> None:
    """Issue 16: every field of our CRDs said `<no description>`, and `pytorchjob.spec.runPolicy` failed."""
    def text(*args: str) -> str:  # kubectl wraps descriptions: one line
        return " ".join(kubectl.out("explain", *args).split())

    assert "the job's scheduling.x-k8s.io/priority annotation" in text("queueunit.spec.priority")
    assert "Block: strict order" in text("queue.spec.queuePolicy")
    assert "Guaranteed resources" in text("elasticquota.spec.min")
    for kind in ("elasticquota", "queue", "queueunit", "queueunit.status", "queue.status"):
        assert "<no description>" not in kubectl.out("explain", kind), kind
    run_policy = kubectl.out("explain", "pytorchjob.spec.runPolicy")
    assert re.search(r"^  suspend\s+<boolean>$", run_policy, re.M), run_policy
    assert re.search(r"^  cleanPodPolicy\s+<string>$", run_policy, re.M)
    assert "Koord-Queue sets it while the job waits" in text("pytorchjob.spec.runPolicy.suspend")


def test_server_side_apply_conflicts_are_reported_as_kube_apiserver_reports_them(kubectl: Kubectl) -> None:
    """Issue 16: `kubectl apply --server-side --field-manager=other` of a field another manager owns
    succeeded; kube-apiserver answers 409, and --force-conflicts takes the field over."""
    def config(value: str) -> str:
        return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  x: {value}\n"

    kubectl.run("create", "-f", "-", stdin=config("one"))  # an Update by kubectl-create
    refused = kubectl.run("apply", "--server-side", "--field-manager=other", "-f", "-", stdin=config("two"),
                          check=False)
    assert refused.returncode == 1
    assert refused.stderr.startswith('error: Apply failed with 1 conflict: conflict with "kubectl-create" using v1: '
                                     ".data.x\n"), refused.stderr
    assert "--force-conflicts" in refused.stderr  # kubectl's advice, as for kube-apiserver's 409
    assert kubectl.json("get", "configmap", "ssa")["data"] == {"x": "one"}
    forced = kubectl.out("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-",
                         stdin=config("two"))
    assert forced.strip() == "configmap/ssa serverside-applied"
    owners = {(e["manager"], e["operation"]): e["fieldsV1"] for e in kubectl.json(
        "get", "configmap", "ssa", "--show-managed-fields")["metadata"]["managedFields"]}
    assert owners[("other", "Apply")] == {"f:data": {".": {}, "f:x": {}}}
    assert "f:x" not in json.dumps(owners[("kubectl-create", "Update")])
    again = kubectl.run("apply", "--server-side", "-f", "-", stdin=config("three"), check=False)  # manager kubectl
    assert 'Apply failed with 1 conflict: conflict with "other": .data.x' in again.stderr
