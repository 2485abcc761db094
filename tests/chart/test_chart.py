"""The Helm chart, rendered and linted by real helm, and every object checked: against the
Kubernetes 1.32 schemas, against the controller's real command line, and for least privilege."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml

from koordqueue.api.constants import KOORD_API_PORT, SETTINGS_CONFIG_MAP, USAGE_HISTORY_CONFIG_MAP
from koordqueue.api.crds import file_name, our_crds
from koordqueue.api.crds import render as render_crd
from koordqueue.cli import controller as controller_command
from koordqueue.controller.config import ALL_JOB_KINDS
from koordqueue.controller.views import JOB_PLURALS
from koordqueue.jobs import KINDS, adapter_for
from koordqueue.manifests import CHART_KINDS, chart_kinds
from tests.chart.helmtool import (
    ALL_EXTENSIONS,
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    ROOT,
    Obj,
    args,
    container,
    flag,
    kinds,
    one,
    render,
    render_error,
    run_helm,
)

CERT_MANAGER = {"webhook": {"certManager": {"enable": True}}}
EVERYTHING_ON = {
    "extension": ALL_EXTENSIONS,
    "serviceMonitor": {"enable": True},
    "controller": {"dashboard": {"port": 8090}},
}
# Each case: values, and the job kinds the controller then queues.
CASES: dict[str, tuple[dict[str, Any], set[str]]] = {
    "defaults": ({}, {"PyTorchJob"}),
    "every-extension": (EVERYTHING_ON, set(ALL_JOB_KINDS)),
    "cert-manager": (CERT_MANAGER, {"PyTorchJob"}),
    "cert-manager-every-extension": ({**CERT_MANAGER, "extension": ALL_EXTENSIONS}, set(ALL_JOB_KINDS)),
    "no-webhook-no-leader-election": (
        {"webhook": {"enable": False}, "controller": {"leaderElection": {"enable": False}, "replicas": 1}},
        {"PyTorchJob"},
    ),
}
# From the kinds' registrations (tests/jobs/test_kinds.py pins those of the kinds we ship).
EXTENSION_KIND = {k.extension: k.kind for k in KINDS}
KIND_GROUP = {k.kind: k.group for k in KINDS}
KIND_VERSIONS = {k.kind: k.versions for k in KINDS}


def case(name: str) -> list[Obj]:
    return render(CASES[name][0])


# --- helm itself -------------------------------------------------------------------

def test_helm_is_the_pinned_version() -> None:
    assert run_helm("version", "--short").stdout.startswith("v4.1.4")


def test_lint_strict() -> None:
    result = run_helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("name", ["every-extension", "cert-manager"])
def test_lint_strict_with_values(name: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(CASES[name][0]))
    run_helm("lint", "--strict", str(CHART), "-f", str(values))


def test_the_seed_guides_values_file_installs_pytorchjobs(tmp_path: Path) -> None:
    """The seed's values.yaml (extension.pytorch.enable: true), given with -f as the guide does."""
    values = tmp_path / "values.yaml"
    values.write_text("extension:\n  pytorch:\n    enable: true\n")
    out = run_helm("template", "koord-queue", str(CHART), "-n", NAMESPACE, "-f", str(values)).stdout
    objects = [o for o in yaml.safe_load_all(out) if o]
    assert flag(objects, "job-kinds") == ["PyTorchJob"]
    assert one(objects, "Deployment")["metadata"]["name"] == "koord-queue-controllers"  # the seed's logs command


# --- every object is valid Kubernetes 1.32 -----------------------------------------

NOT_IN_KUBERNETES = {"monitoring.coreos.com/v1", "cert-manager.io/v1"}


@pytest.mark.parametrize("name", list(CASES))
def test_every_object_is_valid_kubernetes_1_32(name: str) -> None:
    objects = render(CASES[name][0], include_crds=True)
    assert objects
    checked = []
    for obj in objects:
        if obj["apiVersion"] in NOT_IN_KUBERNETES:
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{obj['kind']} {obj['metadata']['name']}: {e.message}") from e
        checked.append(obj["kind"])
    assert checked.count("CustomResourceDefinition") == 4
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service"} <= set(checked)


def test_the_validator_catches_a_typo() -> None:
    """The schemas are strict: an unknown field in a rendered object is an error."""
    deployment = one(case("defaults"), "Deployment")
    bad = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBE_VERSION, strict=True)


def test_every_object_is_namespaced_in_the_release_namespace_or_cluster_wide() -> None:
    cluster_wide = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                    "ValidatingWebhookConfiguration", "CustomResourceDefinition"}
    for obj in render(EVERYTHING_ON, include_crds=True):
        if obj["kind"] in cluster_wide:
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]


def test_what_is_rendered() -> None:
    assert kinds(case("defaults")) == sorted([
        "ClusterRole", "ClusterRoleBinding", "Deployment", "MutatingWebhookConfiguration",
        "ClusterRole", "ClusterRole", "ClusterRole",  # the roles for people (test_user_roles.py)
        "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount", "ValidatingWebhookConfiguration",
    ])
    assert kinds(case("cert-manager")) == sorted(kinds(case("defaults")) + ["Certificate", "Issuer"])
    assert "ServiceMonitor" in kinds(case("every-extension"))
    bare = case("no-webhook-no-leader-election")
    assert "MutatingWebhookConfiguration" not in kinds(bare) and "ValidatingWebhookConfiguration" not in kinds(bare)
    assert grants(one(bare, "Role")["rules"]) == SETTINGS  # no Lease to keep
    assert "PodDisruptionBudget" not in kinds(bare)  # one replica: a PDB would block every drain


# --- the CRDs ----------------------------------------------------------------------

def test_chart_crds_are_config_crds_byte_for_byte() -> None:
    chart_dir, config_dir = CHART / "crds", ROOT / "config" / "crd"
    names = sorted(p.name for p in chart_dir.iterdir())
    assert names == sorted(file_name(m) for m in our_crds())
    for manifest in our_crds():
        chart_file = chart_dir / file_name(manifest)
        assert chart_file.read_bytes() == (config_dir / file_name(manifest)).read_bytes(), chart_file
        assert chart_file.read_text() == render_crd(manifest), (
            f"{chart_file} drifted: run make generate"
        )


def test_chart_installs_only_our_crds() -> None:
    crds = [o for o in render({}, include_crds=True) if o["kind"] == "CustomResourceDefinition"]
    assert sorted(c["spec"]["names"]["kind"] for c in crds) == ["ElasticQuota", "ElasticQuotaTree", "Queue", "QueueUnit"]
    assert [o for o in render({}) if o["kind"] == "CustomResourceDefinition"] == []  # only from crds/


# --- RBAC: exactly what the controller uses ----------------------------------------

Grant = tuple[str, str, str, str]  # (apiGroup, resource, verb, resourceName or "")


def grants(rules: list[Obj]) -> set[Grant]:
    out: set[Grant] = set()
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule  # no nonResourceURLs
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in rule.get(field, []), f"wildcard in {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        out.add((group, resource, verb, name))
    return out


def expand(group: str, resources: list[str], verbs: str, name: str = "") -> set[Grant]:
    return {(group, r, v, name) for r in resources for v in verbs.split()}


BASE = (
    expand("scheduling.sigs.k8s.io", ["elasticquotas"], "list watch patch")
    | expand("scheduling.sigs.k8s.io", ["elasticquotatrees"], "list watch")
    | expand("scheduling.sigs.k8s.io", ["elasticquotas/status", "elasticquotatrees/status"], "patch")
    | expand("scheduling.x-k8s.io", ["queues"], "list watch create patch delete")
    | expand("scheduling.x-k8s.io", ["queueunits"], "list watch create patch delete")
    | expand("scheduling.x-k8s.io", ["queues/status", "queueunits/status"], "patch")
    | expand("", ["events"], "create patch")
    | expand("scheduling.k8s.io", ["priorityclasses"], "list watch")
    | expand("", ["nodes", "pods"], "list watch")
    | expand("", ["namespaces"], "list watch")
)
WEBHOOK_CA = expand("admissionregistration.k8s.io", ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
                    "get patch", "koord-queue")


def job_grants(job_kinds: set[str]) -> set[Grant]:
    return set().union(*(expand(KIND_GROUP[k], [JOB_PLURALS[k]], "list watch patch") for k in job_kinds))


@pytest.mark.parametrize("name", list(CASES))
def test_cluster_role_grants_exactly_what_the_controller_uses(name: str) -> None:
    values, job_kinds = CASES[name]
    objects = render(values)
    expected = BASE | job_grants(job_kinds)
    webhook = values.get("webhook", {})
    if webhook.get("enable", True) and not webhook.get("certManager", {}).get("enable", False):
        expected |= WEBHOOK_CA  # only when the controller keeps the caBundle itself
    assert grants(one(objects, "ClusterRole", "koord-queue")["rules"]) == expected
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "koord-queue"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "koord-queue", "namespace": NAMESPACE}]


# The ConfigMap the controller publishes its settings in (created, then patched by name).
SETTINGS = (expand("", ["configmaps"], "create") | expand("", ["configmaps"], "patch", SETTINGS_CONFIG_MAP)
            | expand("", ["configmaps"], "patch", USAGE_HISTORY_CONFIG_MAP))


def test_the_lease_and_the_settings_are_granted_in_the_release_namespace_only() -> None:
    objects = case("defaults")
    role = one(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role["rules"]) == (
        expand("coordination.k8s.io", ["leases"], "create")
        | expand("coordination.k8s.io", ["leases"], "get update", "koord-queue-controller")
        | SETTINGS
    )
    assert flag(objects, "lease-name") == ["koord-queue-controller"]
    assert one(objects, "RoleBinding")["subjects"][0]["name"] == "koord-queue"


def test_owner_references_permission_enforcement_adds_finalizers_of_enabled_kinds_only() -> None:
    objects = render({"rbac": {"ownerReferencesPermissionEnforcement": True},
                      "extension": {"pytorch": {"enable": True}, "batchjob": {"enable": True}}})
    extra = grants(one(objects, "ClusterRole", "koord-queue")["rules"]) - BASE - WEBHOOK_CA - job_grants({"PyTorchJob", "Job"})
    assert extra == {("kubeflow.org", "pytorchjobs/finalizers", "update", ""), ("batch", "jobs/finalizers", "update", "")}
    kubernetes_validate.validate(one(objects, "ClusterRole", "koord-queue"), KUBE_VERSION, strict=True)


def test_grants_sees_a_wildcard() -> None:
    with pytest.raises(AssertionError, match="wildcard"):
        grants([{"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}])


# --- the controller's args follow the values ----------------------------------------

@pytest.mark.parametrize("name", list(CASES))
def test_args_are_accepted_by_the_real_command_line(name: str) -> None:
    """click parses the rendered args as `koord-queue controller` would (without running it)."""
    rendered = args(case(name))
    with controller_command.make_context("controller", list(rendered)) as ctx:
        params = ctx.params
    assert set(str(params["job_kinds"]).split(",")) == CASES[name][1]
    # The webhook is served exactly when the chart registers it (a registered webhook
    # nobody serves refuses every job, with failurePolicy Fail).
    registered = "MutatingWebhookConfiguration" in kinds(case(name))
    assert params["webhook"] is registered


def test_bad_args_are_refused_by_the_command_line() -> None:
    with pytest.raises(click.UsageError):
        controller_command.make_context("controller", ["--no-such-flag=1"])


@pytest.mark.parametrize("extension", list(EXTENSION_KIND))
def test_one_extension_alone(extension: str) -> None:
    """Only the enabled kind is watched, suspended by the webhook, and granted."""
    values = {"extension": {name: {"enable": name == extension} for name in EXTENSION_KIND}}
    objects = render(values)
    kind = EXTENSION_KIND[extension]
    assert flag(objects, "job-kinds") == [kind]
    rules = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]["rules"]
    assert rules == [{"apiGroups": [KIND_GROUP[kind]], "apiVersions": [version], "operations": ["CREATE"],
                      "resources": [JOB_PLURALS[kind]], "scope": "Namespaced"} for version in KIND_VERSIONS[kind]]
    job_rules = {g for g in grants(one(objects, "ClusterRole", "koord-queue")["rules"]) if g[0] in set(KIND_GROUP.values())}
    assert job_rules == job_grants({kind})


def test_the_webhook_names_mpijob_v1alpha1_too() -> None:
    """An MPIJob created in the mpi-operator's v1alpha1 (which a cluster may serve alone, where
    a rule for v1 matches nothing) is suspended by the webhook too, not later by the
    controller racing the operator; the v1alpha1 rule names MPIJobs alone."""
    objects = render({"extension": {"pytorch": {"enable": True}, "mpi": {"enable": True}}})
    rules = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]["rules"]
    assert [(r["apiGroups"], r["apiVersions"], r["resources"]) for r in rules] == [
        (["kubeflow.org"], ["v1"], ["pytorchjobs", "mpijobs"]), (["kubeflow.org"], ["v1alpha1"], ["mpijobs"])]


def test_pytorch_disabled_means_no_pytorchjobs_anywhere() -> None:
    objects = render({"extension": {"pytorch": {"enable": False}, "tf": {"enable": True},
                                    "batchjob": {"enable": True}}})
    assert flag(objects, "job-kinds") == ["TFJob,Job"]
    text = yaml.safe_dump_all(objects)
    assert "pytorchjobs" not in text and "PyTorchJob" not in text


def test_the_chart_lists_the_registered_kinds() -> None:
    """templates/_kinds.tpl is what make generate writes from the kinds' registrations, and
    with every extension on, the webhook and --job-kinds name every kind, in their order."""
    assert (CHART / CHART_KINDS).read_text() == chart_kinds(), "_kinds.tpl drifted: run make generate"
    objects = case("every-extension")
    webhook = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]
    assert {(r["apiGroups"][0], r["apiVersions"][0], res) for r in webhook["rules"] for res in r["resources"]} == {
        (k.group, version, k.plural) for k in KINDS for version in k.versions
    }
    assert flag(objects, "job-kinds") == [",".join(k.kind for k in KINDS)]
    for kind in KINDS:
        assert adapter_for(kind.api_version, kind.kind) is kind.adapter


def test_values_reach_the_flags() -> None:
    values = {
        "qps": 33, "burst": 44, "oversellrate": 1.5,
        "controller": {
            "defaultQueuePolicy": "Block", "protectSeconds": 30, "waitForPodsRunningTimeoutSeconds": 120,
            "resumeRefusedTimeoutSeconds": 45, "backoff": {"baseSeconds": 5, "capSeconds": 60}, "metrics": {"port": 9090},
            "dashboard": {"port": 8090, "expose": True}, "leaderElection": {"enable": True, "leaseName": "my-lease"},
            "replicas": 3, "extraArgs": ["--webhook-host=extra.example"],
        },
        "webhook": {"port": 9444, "servicePort": 8443},
    }
    objects = render(values)
    expected = {
        "qps": ["33"], "burst": ["44"], "oversell-rate": ["1.5"], "default-queue-policy": ["Block"],
        "protect-seconds": ["30"], "wait-for-pods-running-timeout": ["120"], "resume-refused-timeout": ["45"],
        "backoff-base": ["5"],
        "backoff-cap": ["60"], "metrics-port": ["9090"], "dashboard-port": ["8090"], "dashboard-host": ["0.0.0.0"],
        "lease-name": ["my-lease"],
        "webhook-port": ["9444"], "namespace": [NAMESPACE], "webhook-config-name": ["koord-queue"],
    }
    for name, value in expected.items():
        assert flag(objects, name) == value, name
    assert "--leader-elect" in args(objects) and "--webhook-host=extra.example" in args(objects)
    assert one(objects, "Deployment")["spec"]["replicas"] == 3
    ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    assert ports == {"metrics": 9090, "webhook": 9444, "dashboard": 8090}
    service_ports = {p["name"]: (p["port"], p["targetPort"]) for p in one(objects, "Service")["spec"]["ports"]}
    assert service_ports == {"metrics": (9090, "metrics"), "webhook": (8443, "webhook"),
                             "dashboard": (8090, "dashboard")}
    hook = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["service"]["port"] == 8443  # the API server dials the Service's port
    probe = container(objects)["livenessProbe"]["httpGet"]
    assert probe == {"path": "/healthz", "port": "metrics"}


def test_koord_queues_http_api_is_set_by_its_values() -> None:
    """controller.apiHandler turns on Koord-Queue's HTTP API, on its port and on loopback
    unless another address is given (only then is the port declared on the container)."""
    assert "--api-handler" not in args(case("defaults"))
    objects = render({"controller": {"apiHandler": {"enable": True}}})
    assert "--api-handler" in args(objects)
    assert flag(objects, "api-handler-port") == [str(KOORD_API_PORT)]
    assert flag(objects, "api-handler-host") == ["127.0.0.1"]
    assert "api-handler" not in {p["name"] for p in container(objects)["ports"]}
    reviews = {"tokenreviews", "subjectaccessreviews"}
    assert not reviews & {r for rule in one(objects, "ClusterRole", "koord-queue")["rules"]
                          for r in rule["resources"]}  # on loopback: no token asked
    objects = render({"controller": {"apiHandler": {"enable": True, "port": 20000, "host": "0.0.0.0"}}})
    assert flag(objects, "api-handler-port") == ["20000"] and flag(objects, "api-handler-host") == ["0.0.0.0"]
    assert {p["name"]: p["containerPort"] for p in container(objects)["ports"]}["api-handler"] == 20000
    # Beyond loopback it asks who a bearer token is and whether they may read every unit.
    assert reviews <= {r for rule in one(objects, "ClusterRole", "koord-queue")["rules"] for r in rule["resources"]}


def test_bare_queue_units_are_on_unless_the_value_turns_them_off() -> None:
    """controller.bareQueueUnits (issue 30): units no job of ours stands behind are queued
    unless it is false; the user role never grants creating units, whichever it is."""
    assert "--bare-queue-units" in args(case("defaults"))
    objects = render({"controller": {"bareQueueUnits": False}})
    assert "--no-bare-queue-units" in args(objects) and "--bare-queue-units" not in args(objects)
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    for name in ("koord-queue-user", "koord-queue-viewer"):
        for rule in roles[name]["rules"]:
            if "queueunits" in rule["resources"]:
                assert not {"create", "update", "patch"} & set(rule["verbs"]), (name, rule)


def test_defaults_match_the_command_lines_defaults() -> None:
    """With no values, the flags say what the controller would do with none: nothing surprises."""
    defaults = {p.name: p.default for p in controller_command.params if isinstance(p, click.Option)}
    objects = case("defaults")
    assert float(flag(objects, "protect-seconds")[0]) == defaults["protect_seconds"]
    assert float(flag(objects, "backoff-base")[0]) == defaults["backoff_base"]
    assert float(flag(objects, "backoff-cap")[0]) == defaults["backoff_cap"]
    assert float(flag(objects, "wait-for-pods-running-timeout")[0]) == defaults["wait_for_pods_running_timeout"]
    assert float(flag(objects, "resume-refused-timeout")[0]) == defaults["resume_refused_timeout"]
    assert float(flag(objects, "oversell-rate")[0]) == defaults["oversell_rate"]
    assert float(flag(objects, "qps")[0]) == defaults["qps"]
    assert int(flag(objects, "burst")[0]) == defaults["burst"]
    assert flag(objects, "default-queue-policy") == [defaults["default_queue_policy"]]
    assert flag(objects, "lease-name") == [defaults["lease_name"]]
    assert int(flag(objects, "metrics-port")[0]) == defaults["metrics_port"]


def test_leader_election_off() -> None:
    objects = case("no-webhook-no-leader-election")
    assert "--no-leader-elect" in args(objects) and "--leader-elect" not in args(objects)
    assert "--no-webhook" in args(objects) and "--webhook" not in args(objects)
    assert [p["name"] for p in one(objects, "Service")["spec"]["ports"]] == ["metrics"]


# --- the webhook and its certificate -----------------------------------------------

def test_webhook_with_the_controllers_own_certificate() -> None:
    objects = case("defaults")
    config = one(objects, "MutatingWebhookConfiguration", "koord-queue")
    assert "annotations" not in config["metadata"]
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert "caBundle" not in hook["clientConfig"]  # the controller keeps it; helm upgrades leave it alone
    service = hook["clientConfig"]["service"]
    assert service == {"name": "koord-queue", "namespace": NAMESPACE, "path": "/mutate", "port": 443}
    assert one(objects, "Service", service["name"])
    assert flag(objects, "webhook-config-name") == [config["metadata"]["name"]]
    assert f"koord-queue.{NAMESPACE}.svc" in flag(objects, "webhook-host")  # the name the API server dials
    assert flag(objects, "webhook-cert-dir") == []
    mounts = {m["name"]: m["mountPath"] for m in container(objects)["volumeMounts"]}
    assert mounts == {"tmp": "/tmp"}  # where the self-made certificate is written, on a read-only root
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["name"] == "tmp" and "emptyDir" in volumes[0]


def test_webhook_path_is_the_controllers() -> None:
    webhook = pytest.importorskip("koordqueue.controller.webhook", reason="the webhook server has not landed")
    hook = one(case("defaults"), "MutatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["service"]["path"] == webhook.MUTATE_PATH


def test_webhook_failure_policy_and_selectors_follow_values() -> None:
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                      "values": ["kube-system"]}]}
    objects = render({"webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 5, "namespaceSelector": selector}})
    (hook,) = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 5
    assert hook["namespaceSelector"] == selector and hook["objectSelector"] == {}


def test_webhook_with_cert_manager() -> None:
    objects = case("cert-manager")
    config = one(objects, "MutatingWebhookConfiguration")
    certificate = one(objects, "Certificate")
    issuer = one(objects, "Issuer")
    ns, name = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    assert (ns, name) == (certificate["metadata"]["namespace"], certificate["metadata"]["name"])
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
    assert issuer["spec"] == {"selfSigned": {}}
    assert f"koord-queue.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["usages"] == ["server auth", "digital signature"]
    assert flag(objects, "webhook-cert-dir") == ["/certs"]
    assert flag(objects, "webhook-host") == []
    volumes = {v["name"]: v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-certs"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    mounts = {m["name"]: m for m in container(objects)["volumeMounts"]}
    assert mounts["webhook-certs"] == {"name": "webhook-certs", "mountPath": "/certs", "readOnly": True}


def test_cert_manager_with_an_existing_issuer() -> None:
    objects = render({"webhook": {"certManager": {"enable": True,
                                                  "issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca"}}}})
    assert "Issuer" not in kinds(objects)
    assert one(objects, "Certificate")["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


def _structural(obj: Obj, required: dict[str, type]) -> None:
    for path, typ in required.items():
        value: Any = obj
        for key in path.split("."):
            assert isinstance(value, dict) and key in value, f"{obj['kind']}: no {path}"
            value = value[key]
        assert isinstance(value, typ), f"{obj['kind']}.{path} is {type(value).__name__}"


def test_cert_manager_and_service_monitor_objects_are_well_formed() -> None:
    """Not in the Kubernetes schemas: their required fields and types, as their CRDs require."""
    certificate = one(case("cert-manager"), "Certificate")
    _structural(certificate, {"spec.secretName": str, "spec.issuerRef.name": str, "spec.dnsNames": list,
                              "spec.duration": str, "spec.renewBefore": str, "spec.privateKey.algorithm": str})
    assert set(certificate["spec"]) <= {"secretName", "issuerRef", "dnsNames", "duration", "renewBefore",
                                        "privateKey", "usages"}
    monitor = one(case("every-extension"), "ServiceMonitor")
    _structural(monitor, {"spec.selector.matchLabels": dict, "spec.endpoints": list,
                          "spec.namespaceSelector.matchNames": list})
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    service = one(case("every-extension"), "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert "metrics" in [p["name"] for p in service["spec"]["ports"]]


# --- the pod --------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CASES))
def test_pod_security(name: str) -> None:
    objects = case(name)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(objects)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod and "hostPID" not in pod
    assert pod["serviceAccountName"] == one(objects, "ServiceAccount")["metadata"]["name"]


def test_pod_meets_the_restricted_pod_security_standard() -> None:
    """The checks of Kubernetes' "restricted" profile that a spec shows."""
    pod = one(case("every-extension"), "Deployment")["spec"]["template"]["spec"]
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= {"emptyDir", "secret", "configMap", "projected"}, volume
    for c in pod["containers"]:
        assert "hostPort" not in str(c.get("ports"))
        assert c["securityContext"].get("privileged") is False
        assert c["securityContext"]["capabilities"].get("add") is None


def test_defaults_two_replicas_with_leader_election_spread_over_nodes() -> None:
    objects = case("defaults")
    deployment = one(objects, "Deployment")
    assert deployment["metadata"]["name"] == "koord-queue-controllers"
    assert deployment["spec"]["replicas"] == 2 and "--leader-elect" in args(objects)
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == (
        "kubernetes.io/hostname")
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert container(objects)["image"] == "koord-queue:0.1.0"
    assert container(objects)["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}


def test_image_and_resources_follow_values() -> None:
    objects = render({"controller": {"image": {"repository": "registry.example/kq", "tag": "v9"},
                                     "resources": {"requests": {"cpu": "500m"}}},
                      "tolerations": [{"key": "gpu", "operator": "Exists"}]})
    assert container(objects)["image"] == "registry.example/kq:v9"
    # helm merges maps with the defaults: only the request named changes
    assert container(objects)["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"},
                                               "limits": {"cpu": "1", "memory": "1Gi"}}
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "gpu", "operator": "Exists"}]


# --- values the chart refuses --------------------------------------------------------

@pytest.mark.parametrize(("values", "message"), [
    ({"extension": {"notebook": {"enable": True}}}, "extension.notebook is not supported"),
    ({"extension": {"pytorch": {"enable": False}}}, "no job kind is enabled"),
    ({"controller": {"defaultQueuePolicy": "Fifo"}}, "defaultQueuePolicy"),
    ({"webhook": {"failurePolicy": "Sometimes"}}, "failurePolicy"),
    ({"qps": 0}, "qps"),
    ({"controller": {"backoff": {"baseSeconds": -1}}}, "baseSeconds"),
])
def test_bad_values_are_refused_with_a_reason(values: dict[str, Any], message: str) -> None:
    assert message in render_error(values)


def test_koord_queues_own_values_file_still_renders() -> None:
    """Keys of Koord-Queue's chart that we do not use (argo/spark off, jobextensions,
    installation, pluginConfigs) do not stop a migration."""
    values = {"extension": {"argo": {"enable": False}, "spark": {"enable": False},
                            "jobextensions": {"tag": "x"}, "pytorch": {"enable": True}},
              "installation": {"namespace": "koord-queue"}, "global": {"imagePrefix": "r.example"}}
    assert flag(render(values), "job-kinds") == ["PyTorchJob"]


def test_jobs_of_system_namespaces_are_left_alone_by_default_and_both_webhooks_say_so() -> None:
    """Issue 29 item 10: the webhooks covered kube-system and the release's namespace. By
    default they (and the controller, by the same selector in its flag) leave Kubernetes' own
    namespaces and the release's alone; a selector given is used by all three."""
    for values, expected in (
        ({}, {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                    "values": ["kube-system", "kube-public", "kube-node-lease", NAMESPACE]}]}),
        ({"webhook": {"namespaceSelector": {"matchLabels": {"team": "yes"}}}}, {"matchLabels": {"team": "yes"}}),
    ):
        objects = render(values)
        mutating = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]
        validating = one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
        assert mutating["namespaceSelector"] == validating["namespaceSelector"] == expected
        assert json.loads(flag(objects, "managed-jobs-namespace-selector")[0]) == expected
        assert validating["clientConfig"]["service"]["path"] == "/validate"
        assert {op for rule in validating["rules"] for op in rule["operations"]} == {"UPDATE"}
        scaled = {kind.plural for kind in KINDS if kind.scale_role}  # (UPDATEs through scale: growth too)
        assert validating["rules"] == [{**rule, "operations": ["UPDATE"], "resources": rule["resources"] + [
            f"{r}/scale" for r in rule["resources"] if r in scaled]} for rule in mutating["rules"]]
        assert "pytorchjobs/scale" in validating["rules"][0]["resources"]


def test_workloads_queued_by_gate_add_the_pod_webhooks_the_flag_and_the_pod_writes() -> None:
    """extension.deployment (or .pod, .statefulset, .leaderworkerset): the controller is told
    (--workload-kinds, which its command line accepts), pods are sent to both webhooks, and it
    may patch (ungate) and delete (evict) pods; off, none of it."""
    objects = render({"extension": {"pytorch": {"enable": True}, "deployment": {"enable": True},
                                    "pod": {"enable": True}}})
    assert flag(objects, "workload-kinds") == ["pod,deployment"]
    for kind, name, operations in (("MutatingWebhookConfiguration", "gate-pods.koord-queue.io", ["CREATE"]),
                                   ("ValidatingWebhookConfiguration", "validate-pods.koord-queue.io",
                                    ["CREATE", "UPDATE"])):
        hook = next(h for h in one(objects, kind)["webhooks"] if h["name"] == name)
        assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
                                  "resources": ["pods"], "scope": "Namespaced"}]
    rules = grants(one(objects, "ClusterRole", "koord-queue")["rules"])
    assert {("", "pods", "patch", ""), ("", "pods", "delete", "")} <= rules
    off = render({"extension": {"pytorch": {"enable": True}}})
    assert flag(off, "workload-kinds") == []
    assert ("", "pods", "delete", "") not in grants(one(off, "ClusterRole", "koord-queue")["rules"])
    assert all(len(one(off, kind)["webhooks"]) == 1
               for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"))


def test_device_class_mappings_become_the_flag_and_grant_reading_claims() -> None:
    """deviceClassMappings (DRA, Kueue's deviceClassMappings): rendered to
    --device-class-mappings, which the controller's command line parses; the controller is
    granted reading the claims, templates and ResourceSlices only with mappings; a bad
    mapping stops the controller before it starts (admin input)."""
    assert flag(case("defaults"), "device-class-mappings") == []
    objects = render({"deviceClassMappings": [
        {"deviceClass": "gpu.example.com", "resource": "example.com/gpu"},
        {"deviceClass": "mig.example.com", "resource": "nvidia.com/mig-1g.10gb", "count": 2,
         "driver": "mig.example.com"}]})
    value = "gpu.example.com=example.com/gpu:1,mig.example.com=nvidia.com/mig-1g.10gb:2@mig.example.com"
    assert flag(objects, "device-class-mappings") == [value]
    with controller_command.make_context("controller", list(args(objects))) as ctx:
        assert ctx.params["device_class_mappings"] == value
    rules = one(objects, "ClusterRole", "koord-queue")["rules"]
    assert any(rule["apiGroups"] == ["resource.k8s.io"] and "resourceclaimtemplates" in rule["resources"]
               for rule in rules)
    assert not any("resource.k8s.io" in rule["apiGroups"]
                   for rule in one(case("defaults"), "ClusterRole", "koord-queue")["rules"])
    with pytest.raises(click.BadParameter, match="count per device"):
        controller_command.make_context("controller", ["--device-class-mappings=gpu.example.com=example.com/gpu:0"])
