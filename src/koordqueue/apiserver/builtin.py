"""The built-in kinds the embedded server serves, and what the server does to them on write.

Only the kinds this system (controller, simulated cluster, kubectl, Helm chart) touches.
The per-kind hooks are the small part of each kind's real registry strategy that
clients can observe: pods start `Pending`, namespaces start `Active` with their name
label, Jobs get their selector, Secrets fold `stringData` into `data`, a
PodDisruptionBudget starts with an empty status (no disruption controller fills it in
here, and its spec is not validated beyond the schema), Deployments and ReplicaSets get
their replica count and Deployments their rollout defaults.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.constants import (
    CONDITION_FALSE,
    CPU,
    HUGEPAGES_PREFIX,
    MEMORY,
    POD_CONDITION_SCHEDULED,
    POD_MESSAGE_SCHEDULING_GATED,
    POD_REASON_SCHEDULING_GATED,
    SYSTEM_NAMESPACE,
)
from koordqueue.apiserver.registry import ResourceType
from koordqueue.apiserver.validation import DNS1035, LABEL, SUBDOMAIN

_STATUS = frozenset({"status"})
_CREATE = ("create",)
_POD_FIELDS = (
    "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
    "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
    "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
    "reason", "reportingComponent", "source", "type",
)
_EVENTS_V1_FIELDS = (
    "regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid", "regarding.apiVersion",
    "regarding.resourceVersion", "regarding.fieldPath", "reason", "reportingController", "type",
)


def _rt(group: str, version: str, kind: str, plural: str, namespaced: bool = True, **kw: Any) -> ResourceType:
    return ResourceType(group=group, version=version, kind=kind, plural=plural, singular=kind.lower(),
                        namespaced=namespaced, **kw)


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _rt("", "v1", "Namespace", "namespaces", False, short_names=("ns",), subresources=_STATUS,
        selectable_fields=("status.phase",)),
    _rt("", "v1", "Pod", "pods", short_names=("po",), categories=("all",),
        subresources=frozenset({"status", "binding", "log"}), selectable_fields=_POD_FIELDS),
    _rt("", "v1", "Node", "nodes", False, short_names=("no",), subresources=_STATUS,
        selectable_fields=("spec.unschedulable",)),
    _rt("", "v1", "Event", "events", short_names=("ev",), selectable_fields=_EVENT_FIELDS),
    _rt("", "v1", "ConfigMap", "configmaps", short_names=("cm",)),
    _rt("", "v1", "Secret", "secrets", selectable_fields=("type",)),
    _rt("", "v1", "ServiceAccount", "serviceaccounts", short_names=("sa",), subresources=frozenset({"token"})),
    _rt("", "v1", "Service", "services", short_names=("svc",), categories=("all",), subresources=_STATUS),
    _rt("", "v1", "ResourceQuota", "resourcequotas", short_names=("quota",), subresources=_STATUS),
    _rt("", "v1", "LimitRange", "limitranges", short_names=("limits",)),
    _rt("events.k8s.io", "v1", "Event", "events", short_names=("ev",), selectable_fields=_EVENTS_V1_FIELDS),
    _rt("coordination.k8s.io", "v1", "Lease", "leases"),
    _rt("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short_names=("pdb",), subresources=_STATUS),
    _rt("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, short_names=("pc",)),
    # DRA (resource.k8s.io/v1; apiserver/dra.py: their validation basics, no allocation)
    _rt(c.DRA_GROUP, c.DRA_VERSION, c.RESOURCE_CLAIM_KIND, c.RESOURCE_CLAIM_PLURAL, subresources=_STATUS),
    _rt(c.DRA_GROUP, c.DRA_VERSION, c.RESOURCE_CLAIM_TEMPLATE_KIND, c.RESOURCE_CLAIM_TEMPLATE_PLURAL),
    _rt(c.DRA_GROUP, c.DRA_VERSION, c.RESOURCE_SLICE_KIND, c.RESOURCE_SLICE_PLURAL, False,
        selectable_fields=("spec.nodeName", "spec.driver")),
    _rt(c.DRA_GROUP, c.DRA_VERSION, c.DEVICE_CLASS_KIND, c.DEVICE_CLASS_PLURAL, False),
    _rt("batch", "v1", "Job", "jobs", categories=("all",), subresources=_STATUS,
        selectable_fields=("status.successful",)),
    _rt("apps", "v1", "Deployment", "deployments", short_names=("deploy",), categories=("all",),
        subresources=_STATUS),
    _rt("apps", "v1", "ReplicaSet", "replicasets", short_names=("rs",), categories=("all",),
        subresources=_STATUS),
    _rt("apps", "v1", "StatefulSet", "statefulsets", short_names=("sts",), categories=("all",),
        subresources=_STATUS),
    _rt("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False,
        short_names=("crd", "crds"), categories=("api-extensions",), subresources=_STATUS),
    _rt("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations", False, categories=("api-extensions",)),
    _rt("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations", False, categories=("api-extensions",)),
    _rt("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    _rt("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _rt("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    _rt("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    # Requests about access, answered and never stored (create only).
    _rt("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", False, verbs=_CREATE),
    _rt("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", False, verbs=_CREATE),
    _rt("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", False, verbs=_CREATE),
    _rt("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", False, verbs=_CREATE),
    _rt("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", False, verbs=_CREATE),
)
TOKEN_REVIEW_KEY = "authentication.k8s.io/tokenreviews"
REVIEW_KEYS = frozenset({"authorization.k8s.io/selfsubjectaccessreviews", "authorization.k8s.io/selfsubjectrulesreviews",
                         "authorization.k8s.io/subjectaccessreviews", "authentication.k8s.io/selfsubjectreviews",
                         TOKEN_REVIEW_KEY})
# Open to every user; a SubjectAccessReview or TokenReview needs a grant (system:auth-delegator's, in kube).
SELF_REVIEW_KEYS = REVIEW_KEYS - {"authorization.k8s.io/subjectaccessreviews", TOKEN_REVIEW_KEY}

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", SYSTEM_NAMESPACE)

NAMESPACE_KEY = "/namespaces"
CRD_KEY = "apiextensions.k8s.io/customresourcedefinitions"
MUTATING_WEBHOOKS_KEY = "admissionregistration.k8s.io/mutatingwebhookconfigurations"
VALIDATING_WEBHOOKS_KEY = "admissionregistration.k8s.io/validatingwebhookconfigurations"
SERVICE_KEY = "/services"
POD_KEY = "/pods"
SERVICE_ACCOUNT_KEY = "/serviceaccounts"
SECRET_KEY = "/secrets"
NAMESPACE_FINALIZER = "kubernetes"
NAME_LABEL = "kubernetes.io/metadata.name"

_NAME_RULES = {NAMESPACE_KEY: LABEL, SERVICE_KEY: DNS1035}


def name_rule(rt: ResourceType) -> str:
    return _NAME_RULES.get(rt.storage_key, SUBDOMAIN)


def _namespace_create(obj: dict[str, Any]) -> None:
    obj["status"] = {"phase": "Active"}
    obj.setdefault("spec", {})["finalizers"] = [NAMESPACE_FINALIZER]
    _namespace_write(obj)


def _namespace_write(obj: dict[str, Any]) -> None:
    labels = obj["metadata"].setdefault("labels", {})
    labels[NAME_LABEL] = obj["metadata"]["name"]


def _pod_create(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if not isinstance(container, dict):
                continue
            for port in container.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
            for var in container.get("env") or []:
                field_ref = (var.get("valueFrom") or {}).get("fieldRef") if isinstance(var, dict) else None
                if isinstance(field_ref, dict):
                    field_ref.setdefault("apiVersion", "v1")
    obj["status"] = {"phase": "Pending"}


def prepare_pod_for_create(obj: dict[str, Any]) -> None:
    """kube-apiserver's applySchedulingGatedCondition, in its PrepareForCreate: after mutating
    admission (a webhook's gate counts), a gated pod reads PodScheduled=False/SchedulingGated."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not spec.get("schedulingGates"):
        return
    status = obj.setdefault("status", {})
    conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    if any(isinstance(x, dict) and x.get("type") == POD_CONDITION_SCHEDULED for x in conditions):
        return
    status["conditions"] = [*conditions, {"type": POD_CONDITION_SCHEDULED, "status": CONDITION_FALSE,
                                          "lastProbeTime": None, "lastTransitionTime": None,
                                          "reason": POD_REASON_SCHEDULING_GATED,
                                          "message": POD_MESSAGE_SCHEDULING_GATED}]


def _gate_names(pod: dict[str, Any]) -> list[str]:
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, dict) else None
    return [str(g.get("name")) for g in gates if isinstance(g, dict)] if isinstance(gates, list) else []


def pod_create_causes(pod: dict[str, Any]) -> list[tuple[str, str]]:
    """kube-apiserver's ValidatePodCreate on scheduling gates (a pod is not made bound and gated at
    once) and on pod-level resources' names (validatePodResourceName: cpu, memory, hugepages-*)."""
    spec = pod.get("spec")
    if _gate_names(pod) and isinstance(spec, dict) and spec.get("nodeName"):
        return [("spec.nodeName", "Forbidden: cannot be set until all schedulingGates have been cleared")]
    resources = spec.get("resources") if isinstance(spec, dict) else None
    if not isinstance(resources, dict):
        return []
    causes = []
    for part in ("limits", "requests"):
        amounts = resources.get(part)
        for name in amounts if isinstance(amounts, dict) else ():
            if name not in (CPU, MEMORY) and not str(name).startswith(HUGEPAGES_PREFIX):
                causes.append((f"spec.resources.{part}[{name}]", f'Unsupported value: "{name}": supported values: '
                               f'"{CPU}", "{HUGEPAGES_PREFIX}", "{MEMORY}"'))
    return causes


def pod_update_causes(pod: dict[str, Any], old: dict[str, Any]) -> list[tuple[str, str]]:
    """kube-apiserver's validateOnlyDeletedSchedulingGates: gates may be removed, never added
    (a scheduler may already be placing the pod)."""
    had = set(_gate_names(old))
    return [(f"spec.schedulingGates[{index}].name",
             f"Forbidden: only deletion is allowed, but found new scheduling gate '{name}'")
            for index, name in enumerate(_gate_names(pod)) if name not in had]


def _job_create(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if "parallelism" not in spec:
        spec["parallelism"] = 1
    if "completions" not in spec and spec["parallelism"] == 1:
        spec["completions"] = 1
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if not spec.get("manualSelector"):
        uid, name = obj["metadata"]["uid"], obj["metadata"]["name"]
        labels = {"batch.kubernetes.io/controller-uid": uid}
        spec["selector"] = {"matchLabels": dict(labels)}
        tmeta = spec.setdefault("template", {}).setdefault("metadata", {})
        tlabels = tmeta.setdefault("labels", {})
        tlabels.update(labels)
        tlabels.update({"controller-uid": uid, "job-name": name, "batch.kubernetes.io/job-name": name})
    obj["status"] = {}


def _deployment_create(obj: dict[str, Any]) -> None:
    """apps/v1 defaults that `kubectl describe deployment` shows."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%",
                                                                            "maxSurge": "25%"}})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    obj["status"] = {}


def _stateful_set_create(obj: dict[str, Any]) -> None:
    """apps/v1 defaults of a StatefulSet that its controller reads."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    spec.setdefault("revisionHistoryLimit", 10)
    obj["status"] = {"replicas": 0, "availableReplicas": 0}


def _replica_set_create(obj: dict[str, Any]) -> None:
    obj.setdefault("spec", {}).setdefault("replicas", 1)
    obj["status"] = {"replicas": 0}


def _secret_write(obj: dict[str, Any]) -> None:
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = obj.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def _service_create(obj: dict[str, Any]) -> None:
    """core/v1's defaults for a ClusterIP Service: a port's protocol TCP and target port the
    port itself; the cluster IP (only None, headless, is kept: none is allocated here) as a list too."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] == "ClusterIP":
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if spec.get("clusterIP"):
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])
    obj["status"] = {"loadBalancer": {}}


def _pdb_create(obj: dict[str, Any]) -> None:
    """A new budget's status is the empty one (the disruption controller fills it in);
    its counts are not omitempty, so they read 0."""
    obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}


def _priority_class_write(obj: dict[str, Any]) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


Hook = Callable[[dict[str, Any]], None]

# Run on the object about to be stored (uid and name already set), by storage key.
CREATE_HOOKS: dict[str, tuple[Hook, ...]] = {
    NAMESPACE_KEY: (_namespace_create,),
    POD_KEY: (_pod_create,),
    "batch/jobs": (_job_create,),
    "apps/deployments": (_deployment_create,),
    "apps/replicasets": (_replica_set_create,),
    "apps/statefulsets": (_stateful_set_create,),
    "/secrets": (_secret_write,),
    SERVICE_KEY: (_service_create,),
    "scheduling.k8s.io/priorityclasses": (_priority_class_write,),
    "policy/poddisruptionbudgets": (_pdb_create,),
}
UPDATE_HOOKS: dict[str, tuple[Hook, ...]] = {
    NAMESPACE_KEY: (_namespace_write,),
    "/secrets": (_secret_write,),
    "scheduling.k8s.io/priorityclasses": (_priority_class_write,),
}


_FIELD_PATHS = {"source": "source.component"}


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string a field selector compares with: missing is "", booleans are lower case."""
    node: Any = obj
    for part in _FIELD_PATHS.get(path, path).split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)
