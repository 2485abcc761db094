"""One registration per job kind: the kinds we ship, and a kind added as a user would add
one (one file, one line in KINDS) reaching every place that names kinds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from koordqueue.jobs import KINDS
from tests.chart.helmtool import CHART, KUBE_VERSION, NAMESPACE, RELEASE, run_helm

SRC = Path(__file__).parents[2] / "src"


def test_the_kinds_we_ship() -> None:
    assert [(k.extension, k.kind, k.api_version, k.plural, k.crd is not None, k.simulated) for k in KINDS] == [
        ("pytorch", "PyTorchJob", "kubeflow.org/v1", "pytorchjobs", True, True),
        ("tf", "TFJob", "kubeflow.org/v1", "tfjobs", True, True),
        ("mpi", "MPIJob", "kubeflow.org/v1", "mpijobs", True, True),
        ("batchjob", "Job", "batch/v1", "jobs", False, True),  # built into the API server
        ("ray", "RayJob", "ray.io/v1", "rayjobs", True, True),
        ("raycluster", "RayCluster", "ray.io/v1", "rayclusters", True, True),
        ("spark", "SparkApplication", "sparkoperator.k8s.io/v1beta2", "sparkapplications", True, True),
        ("argo", "Workflow", "argoproj.io/v1alpha1", "workflows", True, True),
    ]
    for kind in KINDS:
        if kind.crd is not None:
            crd = kind.crd()
            assert crd["metadata"]["name"] == f"{kind.plural}.{kind.group}"
            assert crd["spec"]["names"]["kind"] == kind.kind
            assert crd["spec"]["versions"][0]["name"] == kind.version


TOY = '''\
"""ToyJob (example.com/v1alpha1): a batch Job by another name, for tests/jobs/test_kinds.py."""

from koordqueue.jobs.batchjob import BatchJobAdapter
from koordqueue.jobs.kind import JobKind, Manifest


class ToyJobAdapter(BatchJobAdapter):
    api_version = "example.com/v1alpha1"
    kind = "ToyJob"


def toy_crd() -> Manifest:
    from koordqueue.api.crds import OPERATOR_SCHEMA, age, crd

    return crd("example.com", "v1alpha1", "ToyJob", "toyjobs", OPERATOR_SCHEMA, [age()])


KIND = JobKind(ToyJobAdapter(), "toyjobs", "toy", crd=toy_crd)
'''

# Run against the copied tree: everything that names kinds, as the product derives it.
PROBE = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    import koordqueue
    from koordqueue import cli, loader, manifests, reports, up
    from koordqueue.controller import config, views, webhook
    from koordqueue.jobs import adapter_for
    from koordqueue.simcluster import operators as simoperator

    assert Path(koordqueue.__file__).is_relative_to(sys.argv[1]), koordqueue.__file__
    hook = webhook.webhook_configuration("w", {}, frozenset({"ToyJob"}))["webhooks"][0]["rules"]
    default_kinds = next(p.default for p in cli.controller.params if p.name == "job_kinds")
    print(json.dumps({
        "adapter": type(adapter_for("example.com/v1alpha1", "ToyJob")).__name__,
        "loader": "ToyJob" in loader.ALL_JOB_KINDS,
        "config": "ToyJob" in config.ALL_JOB_KINDS and "ToyJob" in config.ControllerConfig().job_kinds,
        "cli": default_kinds.split(","),
        "plural": views.JOB_PLURALS["ToyJob"],
        "adapter_of_kind": type(views.adapter_of_kind("ToyJob")).__name__,
        "alias": reports.KIND_ALIASES.get("toyjobs"),
        "crds": [m["metadata"]["name"] for m in manifests.all_crds()],
        "simulated": [k.kind for k in simoperator.job_kinds()],
        "webhook": hook,
        "up": up._resource_for({"apiVersion": "example.com/v1alpha1", "kind": "ToyJob"}).path(None),
    }))
''')


def add_toy_kind(tmp_path: Path) -> Path:
    """A copy of src/ with ToyJob added: one file, and its line in KINDS."""
    src = tmp_path / "src"
    shutil.copytree(SRC / "koordqueue", src / "koordqueue", ignore=shutil.ignore_patterns("__pycache__"))
    jobs = src / "koordqueue" / "jobs"
    (jobs / "toyjob.py").write_text(TOY)
    init = jobs / "__init__.py"
    text = init.read_text()
    assert text.count("    rayjob.KIND,\n") == 1
    text = text.replace("    rayjob.KIND,\n", "    rayjob.KIND,\n    toyjob.KIND,\n")  # the line
    text = text.replace("spark, tfjob\n", "spark, tfjob, toyjob\n")  # and its module, for that line
    init.write_text(text)
    return src


def test_a_new_kind_is_one_file_and_one_line(tmp_path: Path) -> None:
    src = add_toy_kind(tmp_path)
    result = subprocess.run([sys.executable, "-c", PROBE, str(src)], capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["adapter"] == seen["adapter_of_kind"] == "ToyJobAdapter"
    assert seen["loader"] and seen["config"]
    assert seen["cli"] == sorted([k.kind for k in KINDS] + ["ToyJob"])
    assert seen["plural"] == "toyjobs" and seen["alias"] == "ToyJob"
    assert "toyjobs.example.com" in seen["crds"]  # served by the embedded control plane
    assert "ToyJob" in seen["simulated"]
    assert seen["webhook"] == [{"operations": ["CREATE"], "apiGroups": ["example.com"], "apiVersions": ["v1alpha1"],
                                "resources": ["toyjobs"], "scope": "Namespaced"}]
    assert seen["up"] == "/apis/example.com/v1alpha1/toyjobs"


def test_make_generate_puts_a_new_kind_in_the_chart(tmp_path: Path) -> None:
    src = add_toy_kind(tmp_path)
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    result = subprocess.run([sys.executable, "-m", "koordqueue.manifests", "--write", str(tmp_path / "crd"),
                             "--chart", str(chart)], capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "crd" / "toyjobs.example.com.yaml").exists()
    assert not (chart / "crds" / "toyjobs.example.com.yaml").exists()  # the chart installs ours only
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"extension": {"pytorch": {"enable": False}, "toy": {"enable": True}}}))
    rendered = run_helm("template", RELEASE, str(chart), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION,
                        "-f", str(values)).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--job-kinds=ToyJob" in args
    (hook,) = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
    assert hook["webhooks"][0]["rules"] == [{"apiGroups": ["example.com"], "apiVersions": ["v1alpha1"],
                                             "operations": ["CREATE"], "resources": ["toyjobs"],
                                             "scope": "Namespaced"}]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]  # the controller's role, not people's
    (bound,) = [o["roleRef"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"
                and any(s.get("name") == account for s in o.get("subjects") or ())]
    (role,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == bound]
    assert {"apiGroups": ["example.com"], "resources": ["toyjobs"], "verbs": ["list", "watch", "patch"]} in role["rules"]
    (user,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == f"{RELEASE}-user"]
    assert any("example.com" in r["apiGroups"] and "toyjobs" in r["resources"] and "create" in r["verbs"]
               for r in user["rules"])  # a tenant may submit the new kind
