"""OpenAPI v3 documents for kubectl, and the unknown-field check behind `fieldValidation`.

kubectl 1.32 reads `/openapi/v3` before `apply` (validation on by default): it looks
for the PATCH operation of the object's kind and, finding a `fieldValidation` query
parameter there, leaves validation to the server (`?fieldValidation=Strict`). So every
group/version document lists the operations of its kinds, and `unknown_fields` is what
the server runs to reject (or warn about) fields the schema does not know, with
kube-apiserver's wording. `kubectl explain` reads the same `components.schemas`.

Built-in kinds get a compact hand-written subset of the io.k8s.api schemas: every field
name of the structures users write (so a valid object passes and a misspelt field does
not), with `x-kubernetes-preserve-unknown-fields` where deeper detail is not worth it.
The list patch metadata (`x-kubernetes-patch-merge-key`, `x-kubernetes-patch-strategy`)
is accurate: strategic merge patch reads it through `schema_for`/`resolve`.

`/openapi/v2` (protobuf only) is not served: with these v3 documents kubectl 1.32 needs
it for nothing. It asks for it in two places and takes a 404 quietly: when v3 fails, and
when `apply` updates a built-in object (strategic merge is not advertised, see `_paths`),
where it then builds the patch from its compiled types.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from koordqueue.apiserver.registry import Registry, ResourceType

Schema = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
CORE = "io.k8s.api.core.v1."
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_REF_PREFIX = "#/components/schemas/"
GVK_EXTENSION = "x-kubernetes-group-version-kind"
PRESERVE = "x-kubernetes-preserve-unknown-fields"


# --- a small vocabulary for writing schemas -----------------------------------------------


CRD_METADATA = ("Standard object's metadata. More info: "
                "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")


def ref(name: str) -> Schema:
    return {"$ref": _REF_PREFIX + name}


def _obj(props: dict[str, Schema], desc: str = "", required: tuple[str, ...] = (), open_: bool = False) -> Schema:
    out: Schema = {"type": "object", "properties": props}
    if desc:
        out["description"] = desc
    if required:
        out["required"] = list(required)
    if open_:
        out[PRESERVE] = True
    return out


def _list(items: Schema, key: str = "", strategy: str = "") -> Schema:
    out: Schema = {"type": "array", "items": items}
    if key:
        out["x-kubernetes-patch-merge-key"] = key
        out["x-kubernetes-list-type"] = "map"
        out["x-kubernetes-list-map-keys"] = [key]
    if strategy:
        out["x-kubernetes-patch-strategy"] = strategy
    return out


def _map(value: Schema) -> Schema:
    return {"type": "object", "additionalProperties": value}


def _s(desc: str = "") -> Schema:
    return {"type": "string", "description": desc} if desc else {"type": "string"}


S: Schema = {"type": "string"}
INT: Schema = {"type": "integer", "format": "int64"}
B: Schema = {"type": "boolean"}
TIME: Schema = ref(META + "Time")
STRINGS: Schema = _list(S)
LABELS: Schema = _map(S)
ANY: Schema = {"type": "object", PRESERVE: True}  # structure below is not described
ANY_LIST: Schema = _list(ANY)
INT_OR_STRING: Schema = {"x-kubernetes-int-or-string": True}
RESOURCES: Schema = _map(ref(QUANTITY))


def _kind(desc: str, props: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    """A top-level kind: apiVersion, kind and metadata besides its own fields."""
    base = {
        "apiVersion": _s("APIVersion defines the versioned schema of this representation of an object."),
        "kind": _s("Kind is a string value representing the REST resource this object represents."),
        "metadata": ref(META + "ObjectMeta"),
    }
    return _obj({**base, **props}, desc, required)


def _names(names: str, schema: Schema = S) -> dict[str, Schema]:
    """Several fields of one type, e.g. `_names("hostIPC hostPID", B)`."""
    return {n: schema for n in names.split()}


_CONTAINER = _obj({
    **_names("image imagePullPolicy terminationMessagePath terminationMessagePolicy workingDir restartPolicy"),
    **_names("stdin stdinOnce tty", B),
    **_names("lifecycle livenessProbe readinessProbe startupProbe securityContext", ANY),
    "name": _s("Name of the container specified as a DNS_LABEL."),
    "command": STRINGS,
    "args": STRINGS,
    "env": _list(ref(CORE + "EnvVar"), "name", "merge"),
    "envFrom": ANY_LIST,
    "ports": _list(ref(CORE + "ContainerPort"), "containerPort", "merge"),
    "resources": ref(CORE + "ResourceRequirements"),
    "resizePolicy": ANY_LIST,
    "volumeMounts": _list(ref(CORE + "VolumeMount"), "mountPath", "merge"),
    "volumeDevices": _list(ANY, "devicePath", "merge"),
}, "A single application container that you want to run within a pod.", ("name",))

_POD_SPEC = _obj({
    **_names("dnsPolicy hostname nodeName preemptionPolicy priorityClassName restartPolicy runtimeClassName "
             "schedulerName serviceAccount serviceAccountName subdomain"),
    **_names("automountServiceAccountToken enableServiceLinks hostIPC hostNetwork hostPID hostUsers "
             "setHostnameAsFQDN shareProcessNamespace", B),
    **_names("activeDeadlineSeconds priority terminationGracePeriodSeconds", INT),
    **_names("affinity dnsConfig os securityContext resources", ANY),
    "containers": _list(ref(CORE + "Container"), "name", "merge"),
    "initContainers": _list(ref(CORE + "Container"), "name", "merge"),
    "ephemeralContainers": _list(ANY, "name", "merge"),
    "hostAliases": _list(ANY, "ip", "merge"),
    "imagePullSecrets": _list(ref(CORE + "LocalObjectReference"), "name", "merge"),
    "nodeSelector": LABELS,
    "overhead": RESOURCES,
    "readinessGates": ANY_LIST,
    "resourceClaims": _list(ANY, "name", "merge,retainKeys"),
    "schedulingGates": _list(ANY, "name", "merge"),
    "tolerations": _list(ref(CORE + "Toleration")),
    "topologySpreadConstraints": _list(ANY, "topologyKey", "merge"),
    "volumes": _list(ref(CORE + "Volume"), "name", "merge,retainKeys"),
}, "PodSpec is a description of a pod.", ("containers",))

_CONDITIONS = _list(ANY, "type", "merge")
_LABEL_SELECTOR = _obj({
    "matchExpressions": _list(_obj({"key": S, "operator": S, "values": STRINGS}, required=("key", "operator"))),
    "matchLabels": LABELS,
}, "A label selector is a label query over a set of resources.") | {"x-kubernetes-map-type": "atomic"}


def _status(**lists: Schema) -> Schema:
    return _obj(lists, open_=True)


_BUILTIN: dict[str, Schema] = {
    # meta
    META + "Time": {"type": "string", "format": "date-time"},
    META + "ObjectMeta": _obj({
        **_names("generateName name namespace resourceVersion selfLink uid"),
        "name": _s("Name must be unique within a namespace."),
        "annotations": LABELS,
        "labels": LABELS,
        "creationTimestamp": TIME,
        "deletionTimestamp": TIME,
        "deletionGracePeriodSeconds": INT,
        "generation": INT,
        "finalizers": {**STRINGS, "x-kubernetes-patch-strategy": "merge", "x-kubernetes-list-type": "set"},
        "managedFields": ANY_LIST,
        "ownerReferences": _list(ref(META + "OwnerReference"), "uid", "merge"),
    }, "ObjectMeta is metadata that all persisted resources must have."),
    META + "OwnerReference": _obj({**_names("apiVersion kind name uid"), **_names("blockOwnerDeletion controller", B)},
                                  "OwnerReference contains enough information to let you identify an owning object.",
                                  ("apiVersion", "kind", "name", "uid")),
    META + "ListMeta": _obj({**_names("continue resourceVersion selfLink"), "remainingItemCount": INT}),
    META + "LabelSelector": _LABEL_SELECTOR,
    QUANTITY: {"oneOf": [{"type": "string"}, {"type": "number"}],
               "description": "Quantity is a fixed-point representation of a number, e.g. 100m, 8Gi."},
    # core/v1
    CORE + "Namespace": _kind("Namespace provides a scope for Names.", {
        "spec": _obj({"finalizers": STRINGS}),
        "status": _obj({"phase": S, "conditions": _CONDITIONS}),
    }),
    CORE + "ConfigMap": _kind("ConfigMap holds configuration data for pods to consume.", {
        "data": LABELS, "binaryData": LABELS, "immutable": B,
    }),
    CORE + "Secret": _kind("Secret holds secret data of a certain type.", {
        "data": LABELS, "stringData": LABELS, "type": S, "immutable": B,
    }),
    CORE + "ServiceAccount": _kind("ServiceAccount binds together a name, a principal and a set of secrets.", {
        "automountServiceAccountToken": B,
        "imagePullSecrets": _list(ref(CORE + "LocalObjectReference")),
        "secrets": _list(ref(CORE + "ObjectReference"), "name", "merge"),
    }),
    CORE + "Pod": _kind("Pod is a collection of containers that can run on a host.", {
        "spec": ref(CORE + "PodSpec"),
        "status": _status(conditions=_CONDITIONS),
    }),
    CORE + "PodSpec": _POD_SPEC,
    CORE + "PodTemplateSpec": _obj({"metadata": ref(META + "ObjectMeta"), "spec": ref(CORE + "PodSpec")},
                                   "PodTemplateSpec describes the data a pod should have when created from a template."),
    CORE + "Container": _CONTAINER,
    CORE + "EnvVar": _obj({"name": S, "value": S, "valueFrom": _obj({
        **_names("configMapKeyRef resourceFieldRef secretKeyRef", ANY),
        "fieldRef": _obj({"apiVersion": S, "fieldPath": S}, required=("fieldPath",)),
    })}, "EnvVar represents an environment variable present in a Container.", ("name",)),
    CORE + "ContainerPort": _obj({**_names("hostIP name protocol"), **_names("containerPort hostPort", INT)},
                                 required=("containerPort",)),
    CORE + "ResourceRequirements": _obj({"claims": ANY_LIST, "limits": RESOURCES, "requests": RESOURCES},
                                        "ResourceRequirements describes the compute resource requirements."),
    CORE + "VolumeMount": _obj({**_names("mountPath mountPropagation name recursiveReadOnly subPath subPathExpr"),
                                "readOnly": B}, required=("mountPath", "name")),
    CORE + "Volume": _obj({"name": S}, "Volume represents a named volume in a pod.", ("name",), open_=True),
    CORE + "Toleration": _obj({**_names("effect key operator value"), "tolerationSeconds": INT}),
    CORE + "LocalObjectReference": _obj({"name": S}),
    CORE + "ObjectReference": _obj(_names("apiVersion fieldPath kind name namespace resourceVersion uid")),
    CORE + "Service": _kind("Service is a named abstraction of software service.", {
        "spec": _obj({
            **_names("clusterIP externalName externalTrafficPolicy internalTrafficPolicy ipFamilyPolicy "
                     "loadBalancerClass loadBalancerIP sessionAffinity trafficDistribution type"),
            **_names("allocateLoadBalancerNodePorts publishNotReadyAddresses", B),
            **_names("clusterIPs externalIPs ipFamilies loadBalancerSourceRanges", STRINGS),
            "healthCheckNodePort": INT,
            "ports": _list(_obj({**_names("appProtocol name protocol"), **_names("nodePort port", INT),
                                 "targetPort": INT_OR_STRING}, required=("port",)), "port", "merge"),
            "selector": LABELS,
            "sessionAffinityConfig": ANY,
        }),
        "status": _status(conditions=_list(ANY, "type")),
    }),
    CORE + "Node": _kind("Node is a worker node in Kubernetes.", {
        "spec": _obj({**_names("externalID podCIDR providerID"), "podCIDRs": STRINGS, "unschedulable": B,
                      "configSource": ANY, "taints": ANY_LIST}),
        "status": _status(conditions=_CONDITIONS, addresses=_list(ANY, "type", "merge")),
    }),
    CORE + "Event": _kind("Event is a report of an event somewhere in the cluster.", {
        **_names("action message reason reportingComponent reportingInstance type"),
        **_names("firstTimestamp lastTimestamp", TIME),
        "eventTime": {"type": "string", "format": "date-time"},
        "count": INT,
        "involvedObject": ref(CORE + "ObjectReference"),
        "related": ref(CORE + "ObjectReference"),
        "series": ANY,
        "source": _obj({"component": S, "host": S}),
    }, ("involvedObject",)),
    # batch, apps
    "io.k8s.api.batch.v1.Job": _kind("Job represents the configuration of a single job.", {
        "spec": _obj({
            **_names("activeDeadlineSeconds backoffLimit backoffLimitPerIndex completions maxFailedIndexes "
                     "parallelism ttlSecondsAfterFinished", INT),
            **_names("completionMode managedBy podReplacementPolicy"),
            **_names("manualSelector suspend", B),
            **_names("podFailurePolicy successPolicy", ANY),
            "selector": ref(META + "LabelSelector"),
            "template": ref(CORE + "PodTemplateSpec"),
        }, required=("template",)),
        "status": _status(conditions=_CONDITIONS),
    }),
    "io.k8s.api.apps.v1.Deployment": _kind("Deployment enables declarative updates for Pods and ReplicaSets.", {
        "spec": _obj({
            **_names("minReadySeconds progressDeadlineSeconds replicas revisionHistoryLimit", INT),
            "paused": B,
            "selector": ref(META + "LabelSelector"),
            "strategy": {**ANY, "x-kubernetes-patch-strategy": "retainKeys"},
            "template": ref(CORE + "PodTemplateSpec"),
        }, required=("selector", "template")),
        "status": _status(conditions=_CONDITIONS),
    }),
    # scheduling, coordination
    "io.k8s.api.scheduling.v1.PriorityClass": _kind(
        "PriorityClass defines mapping from a priority class name to the priority integer value.",
        {"value": INT, "globalDefault": B, "description": S, "preemptionPolicy": S}, ("value",)),
    "io.k8s.api.coordination.v1.Lease": _kind("Lease defines a lease concept.", {"spec": _obj({
        **_names("holderIdentity preferredHolder strategy"),
        **_names("acquireTime renewTime", {"type": "string", "format": "date-time"}),
        **_names("leaseDurationSeconds leaseTransitions", INT),
    })}),
    # policy
    "io.k8s.api.policy.v1.PodDisruptionBudget": _kind(
        "PodDisruptionBudget is an object to define the max disruption that can be caused to a collection of pods",
        {
            "spec": _obj({
                "maxUnavailable": INT_OR_STRING, "minAvailable": INT_OR_STRING,
                # patchStrategy=replace, as in the Go type: a patched selector is replaced whole.
                "selector": {**_LABEL_SELECTOR, "x-kubernetes-patch-strategy": "replace"},
                "unhealthyPodEvictionPolicy": S,
            }),
            "status": _obj({
                **_names("currentHealthy desiredHealthy disruptionsAllowed expectedPods observedGeneration", INT),
                "disruptedPods": _map(TIME),
                "conditions": _list(ANY, "type", "merge"),
            }),
        }),
    # rbac
    "io.k8s.api.rbac.v1.PolicyRule": _obj(
        _names("apiGroups nonResourceURLs resourceNames resources verbs", STRINGS), required=("verbs",)),
    "io.k8s.api.rbac.v1.RoleRef": _obj(_names("apiGroup kind name"), required=("apiGroup", "kind", "name")),
    "io.k8s.api.rbac.v1.Subject": _obj(_names("apiGroup kind name namespace"), required=("kind", "name")),
    "io.k8s.api.rbac.v1.Role": _kind("Role is a namespaced, logical grouping of PolicyRules.", {
        "rules": _list(ref("io.k8s.api.rbac.v1.PolicyRule")),
    }),
    "io.k8s.api.rbac.v1.ClusterRole": _kind("ClusterRole is a cluster level, logical grouping of PolicyRules.", {
        "rules": _list(ref("io.k8s.api.rbac.v1.PolicyRule")), "aggregationRule": ANY,
    }),
    "io.k8s.api.rbac.v1.RoleBinding": _kind("RoleBinding references a role within a namespace.", {
        "roleRef": ref("io.k8s.api.rbac.v1.RoleRef"), "subjects": _list(ref("io.k8s.api.rbac.v1.Subject")),
    }, ("roleRef",)),
    "io.k8s.api.rbac.v1.ClusterRoleBinding": _kind("ClusterRoleBinding references a ClusterRole.", {
        "roleRef": ref("io.k8s.api.rbac.v1.RoleRef"), "subjects": _list(ref("io.k8s.api.rbac.v1.Subject")),
    }, ("roleRef",)),
    # admission, apiextensions
    "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration": _kind(
        "MutatingWebhookConfiguration describes the configuration of a mutating admission webhook.",
        {"webhooks": _list(ANY, "name", "merge")}),
    "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration": _kind(
        "ValidatingWebhookConfiguration describes the configuration of a validating admission webhook.",
        {"webhooks": _list(ANY, "name", "merge")}),
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition": _kind(
        "CustomResourceDefinition represents a resource that should be exposed on the API server.", {
            "spec": _obj({"group": S, "scope": S, "names": ANY, "versions": ANY_LIST, "conversion": ANY,
                          "preserveUnknownFields": B}, required=("group", "names", "scope", "versions")),
            "status": ANY,
        }, ("spec",)),
}


# --- naming -------------------------------------------------------------------------------


def component_name(rt: ResourceType, kind: str | None = None) -> str:
    """The schema name kube-apiserver uses, e.g. io.k8s.api.core.v1.Pod, io.x-k8s.scheduling.v1alpha1.Queue."""
    kind = kind or rt.kind
    if rt.from_crd:
        return ".".join([*reversed(rt.group.split(".")), rt.version, kind])
    if rt.group == "apiextensions.k8s.io":
        return f"io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{rt.version}.{kind}"
    package = rt.group.split(".")[0] if rt.group else "core"
    return f"io.k8s.api.{package}.{rt.version}.{kind}"


def _gvk(rt: ResourceType, kind: str) -> list[dict[str, str]]:
    return [{"group": rt.group, "version": rt.version, "kind": kind}]


def schema_for(rt: ResourceType) -> Schema:
    """The kind's top-level schema, `$ref`s pointing into `builtin_components()`; shared: do not modify."""
    if rt.from_crd:
        return _crd_schema(rt)
    known = _BUILTIN.get(component_name(rt))
    if known is not None:
        return known
    return _kind(f"{rt.kind} (schema not described by this server).", {}) | {PRESERVE: True}


# A CRD's top-level schema, built once per registered type (every write validates against
# it): id(rt) -> (rt, schema); holding rt keeps its id from being reused. Read-only.
_CRD_SCHEMAS: dict[int, tuple[ResourceType, Schema]] = {}
_CRD_SCHEMAS_MAX = 1024


def _crd_schema(rt: ResourceType) -> Schema:
    cached = _CRD_SCHEMAS.get(id(rt))
    if cached is not None and cached[0] is rt:
        return cached[1]
    if len(_CRD_SCHEMAS) >= _CRD_SCHEMAS_MAX:
        _CRD_SCHEMAS.clear()
    schema = _build_crd_schema(rt)
    _CRD_SCHEMAS[id(rt)] = (rt, schema)
    return schema


def _build_crd_schema(rt: ResourceType) -> Schema:
    schema: Schema = copy.deepcopy(rt.schema) if rt.schema else {"type": "object", PRESERVE: True}
    props = schema.setdefault("properties", {})
    base = _kind("", {})["properties"]
    props["apiVersion"], props["kind"] = base["apiVersion"], base["kind"]
    props["metadata"] = {**ref(META + "ObjectMeta"), "description": CRD_METADATA}  # as kube-apiserver adds it
    schema.setdefault("type", "object")
    return schema


def resolve(schema: Schema | None) -> Schema | None:
    """Follow a `$ref` into the built-in components (CRD schemas only point at ObjectMeta)."""
    while schema is not None and "$ref" in schema:
        schema = _BUILTIN.get(schema["$ref"].removeprefix(_REF_PREFIX))
    return schema


# child_schema's answers by (id of the schema, key): every write walks the schema (validation,
# field ownership), and schemas are long-lived and never changed. The schema is kept with the
# answer so that an id is never taken for another schema's.
_CHILDREN: dict[tuple[int, str], tuple[Schema, Schema | None]] = {}
_CHILDREN_MAX = 50_000


def child_schema(schema: Schema | None, key: str) -> Schema | None:
    """The schema of field ``key`` of an object schema (a property, or additionalProperties)."""
    if schema is None:
        return None
    cached = _CHILDREN.get((id(schema), key))
    if cached is not None and cached[0] is schema:
        return cached[1]
    if len(_CHILDREN) >= _CHILDREN_MAX:
        _CHILDREN.clear()
    found = _child_schema(schema, key)
    _CHILDREN[(id(schema), key)] = (schema, found)
    return found


def _child_schema(schema: Schema | None, key: str) -> Schema | None:
    schema = resolve(schema)
    if schema is None:
        return None
    props = schema.get("properties") or {}
    if key in props:
        return resolve(props[key])
    extra = schema.get("additionalProperties")
    return resolve(extra) if isinstance(extra, dict) else None


def item_schema(schema: Schema | None) -> Schema | None:
    """The schema of a list schema's items."""
    schema = resolve(schema)
    return resolve(schema.get("items")) if schema else None


# --- documents ----------------------------------------------------------------------------


def _params(*names: str) -> list[Schema]:
    return [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for n in names]


_PATH_PARAM = {"in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}
_WRITE_PARAMS = _params("dryRun", "fieldManager", "fieldValidation", "pretty")
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")


def _op(rt: ResourceType, action: str, verb: str, body: str | None, params: list[Schema],
        patch_types: tuple[str, ...] = ()) -> Schema:
    kind_ref = ref(component_name(rt, rt.list_kind if body == "list" else None))
    op: Schema = {
        "operationId": f"{verb}{rt.kind}",
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": kind_ref}}}},
        "x-kubernetes-action": action,
        GVK_EXTENSION: _gvk(rt, rt.kind)[0],  # one object here, a list on schemas
    }
    if body == "object":
        op["requestBody"] = {"content": {"*/*": {"schema": kind_ref}}, "required": True}
    elif patch_types:
        patch_schema = ref(META + "Patch")
        op["requestBody"] = {"content": {t: {"schema": patch_schema} for t in patch_types}, "required": True}
    return op


def _paths(rt: ResourceType) -> dict[str, Schema]:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else "/api/v1"
    ns = [{"name": "namespace", **_PATH_PARAM}] if rt.namespaced else []
    name = [{"name": "name", **_PATH_PARAM}]
    collection = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
    # Strategic merge is not advertised: kubectl would then compute `apply` patches from this compact
    # schema and fail under `x-kubernetes-preserve-unknown-fields` ("unable to find api field"). Without
    # it kubectl asks /openapi/v2 (404) and uses its compiled types; the server still accepts the patch.
    patch_types = _PATCH_TYPES
    paths: dict[str, Schema] = {
        collection: {
            "get": _op(rt, "list", "list", "list", _params("labelSelector", "fieldSelector", "limit", "continue")),
            "post": _op(rt, "post", "create", "object", _WRITE_PARAMS),
            "parameters": ns,
        },
        f"{collection}/{{name}}": {
            "get": _op(rt, "get", "read", None, []),
            "put": _op(rt, "put", "replace", "object", _WRITE_PARAMS),
            "patch": _op(rt, "patch", "patch", None, _WRITE_PARAMS + _params("force"),
                         (*patch_types, "application/apply-patch+yaml")),
            "delete": _op(rt, "delete", "delete", None, _params("dryRun", "gracePeriodSeconds", "propagationPolicy")),
            "parameters": ns + name,
        },
    }
    if rt.namespaced:
        paths[f"{prefix}/{rt.plural}"] = {"get": _op(rt, "list", "listForAllNamespaces", "list", [])}
    if "status" in rt.subresources:
        paths[f"{collection}/{{name}}/status"] = {
            "get": _op(rt, "get", "read", None, []),
            "patch": _op(rt, "patch", "patchStatus", None, _WRITE_PARAMS, patch_types),
            "put": _op(rt, "put", "replaceStatus", "object", _WRITE_PARAMS),
            "parameters": ns + name,
        }
    return paths


def _refs(value: Any, found: set[str]) -> None:
    """Collect the names of every component `value` refers to, transitively."""
    if isinstance(value, dict):
        target = value.get("$ref")
        if isinstance(target, str) and target.startswith(_REF_PREFIX):
            name = target.removeprefix(_REF_PREFIX)
            if name not in found and name in _BUILTIN:
                found.add(name)
                _refs(_BUILTIN[name], found)
        for v in value.values():
            _refs(v, found)
    elif isinstance(value, list):
        for v in value:
            _refs(v, found)


def group_version_document(registry: Registry, group: str, version: str) -> Schema | None:
    """`GET /openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`; None if not served."""
    types = [rt for rt in registry.all() if rt.group == group and rt.version == version]
    if not types:
        return None
    schemas: dict[str, Schema] = {}
    paths: dict[str, Schema] = {}
    for rt in types:
        kind_schema = copy.deepcopy(schema_for(rt))
        kind_schema[GVK_EXTENSION] = _gvk(rt, rt.kind)
        schemas[component_name(rt)] = kind_schema
        schemas[component_name(rt, rt.list_kind)] = _kind(f"{rt.list_kind} is a list of {rt.kind}.", {
            "items": _list(ref(component_name(rt))),
            "metadata": ref(META + "ListMeta"),
        }, ("items",)) | {GVK_EXTENSION: _gvk(rt, rt.list_kind)}
        paths.update(_paths(rt))
    used = {META + "Patch"}
    _refs(schemas, used)
    for name in sorted(used - schemas.keys()):
        schemas[name] = _BUILTIN.get(name) or {"type": "object", "description": "Patch of an object."}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def document_path(group: str, version: str) -> str:
    """The index key of a group/version: `api/v1` or `apis/{group}/{version}`."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def document_hash(doc: Schema) -> str:
    """Content hash kubectl's cache keys a document by (changes when a CRD's schema does)."""
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()


def index(registry: Registry) -> Schema:
    """`GET /openapi/v3`: one entry per served group/version, URL carrying the content hash."""
    paths = {}
    for group, versions in sorted(registry.groups().items()):
        for version in versions:
            doc = group_version_document(registry, group, version)
            if doc is not None:
                path = document_path(group, version)
                paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={document_hash(doc)}"}
    return {"paths": paths}


# --- field validation ---------------------------------------------------------------------


def unknown_fields(rt: ResourceType, obj: Any, stored: Any = None) -> list[str]:
    """Paths of the fields of `obj` its kind's schema does not know, e.g. `spec.containers[0].imagePullPolcy`.

    What kube-apiserver reports for `fieldValidation=Strict` (reject) or `Warn` (warning headers).
    ``stored``: the object a patch made `obj` from; the parts `obj` shares with it (the very same
    values: what the patch did not touch) are not walked again. They were looked at when written,
    and kube-apiserver, which prunes unknown fields of custom resources as it stores them, never
    reports them again either.
    """
    found: list[str] = []
    _walk(schema_for(rt), obj, "", found, stored)
    return found


def strict_error_message(rt: ResourceType, fields: list[str]) -> str:
    """The 400 BadRequest message kube-apiserver sends for `fieldValidation=Strict`."""
    listed = ", ".join(f'unknown field "{f}"' for f in fields)
    return f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict decoding error: {listed}'


def warning_texts(fields: list[str]) -> list[str]:
    """The `Warning: 299 - "..."` texts kube-apiserver sends for `fieldValidation=Warn` (the default)."""
    return [f'unknown field "{f}"' for f in fields]


def _walk(schema: Schema | None, value: Any, path: str, found: list[str], stored: Any = None) -> None:
    if value is stored:
        return  # shared with the object as stored: a part a patch left alone
    schema = resolve(schema)
    if schema is None:
        return
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            earlier = stored if isinstance(stored, list) else []
            for i, item in enumerate(value):
                _walk(items, item, f"{path}[{i}]", found, earlier[i] if i < len(earlier) else None)
        return
    if not isinstance(value, dict) or schema.get("type", "object") != "object":
        return
    props: dict[str, Schema] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    open_ = bool(schema.get(PRESERVE)) or extra is True or ("type" not in schema and not props)
    embedded = schema.get("x-kubernetes-embedded-resource", False)
    before = stored if isinstance(stored, dict) else {}
    for key, child in value.items():
        child_path = f"{path}.{key}" if path else key
        if key in props:
            _walk(props[key], child, child_path, found, before.get(key))
        elif embedded and key in ("apiVersion", "kind", "metadata"):
            _walk(ref(META + "ObjectMeta") if key == "metadata" else None, child, child_path, found, before.get(key))
        elif isinstance(extra, dict):
            _walk(extra, child, child_path, found, before.get(key))
        elif not open_ and (key not in before or child is not before[key]):
            found.append(child_path)
