"""CustomResourceDefinitions: ours (ElasticQuota, ElasticQuotaTree, Queue, QueueUnit), and the schemas and
helpers that each job kind's registration builds its operator's CRD from (the embedded
control plane serves those; see jobs/kind.py).

The QueueUnit schema is generated from the pydantic models of ``api/queueunit.py`` and
made structural (no ``$ref``, no nullable ``anyOf``), so the model and the CRD cannot
disagree. ElasticQuota and Queue are read into dataclass views, not models; their small
schemas are written out here. ``config/crd/`` (every CRD) and the Helm chart's
``charts/koord-queue/crds/`` (ours only: the job kinds' CRDs belong to their operators)
are written by ``make generate`` (koordqueue/manifests.py); the chart's files are byte
for byte the same as config/crd's, and tests fail when any of them drift.

Printer columns of QueueUnit are Koord-Queue's (PHASE, PRIORITY, ADMISSIONS, JOBTYPE), and
EXPECTED-START (``.status.expectedStart``, the forecast: controller/forecaster.py), but
ADMISSIONS shows ``.status.admissionSummary`` ("master=1,worker=1", written by the
controller with the admissions) rather than ``.status.admissions`` whole, which printed
some 200 characters of JSON; a JSONPath like ``[*].replicas`` cannot do it, since the API
server prints only the first result of a column's JSONPath. Queue's columns say which
quota it is bound to (Quota, Bound: written by the controller).
"""

from __future__ import annotations

from typing import Any

import yaml

from koordqueue.api import constants as c
from koordqueue.api.queueunit import FREE_OBJECT_SCHEMA, QUANTITY_SCHEMA, QueueUnit

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
RESOURCES: Schema = {"type": "object", "additionalProperties": QUANTITY_SCHEMA}


def described(schema: Schema, text: str) -> Schema:
    """`schema` with the description `kubectl explain` shows for the field."""
    return {**schema, "description": text}


LABEL_SELECTOR: Schema = {
    "type": "object",
    "description": "Which QueueUnits the check applies to, by their labels (the job's); empty: all of them.",
    "properties": {
        "matchLabels": described({"type": "object", "additionalProperties": STRING},
                                 "Labels a unit must carry, all of them, with these values."),
        "matchExpressions": {
            "type": "array",
            "description": "Requirements on a unit's labels, all of which must hold.",
            "items": {
                "type": "object",
                "properties": {
                    "key": described(STRING, "The label's key."),
                    "operator": described(STRING, "In, NotIn, Exists or DoesNotExist."),
                    "values": described({"type": "array", "items": STRING},
                                        "The values for In and NotIn; empty for Exists and DoesNotExist."),
                },
            },
        },
    },
}

ELASTIC_QUOTA_SCHEMA: Schema = {
    "type": "object",
    "description": "ElasticQuota bounds what the jobs of a team (or a parent of teams) may use: min is "
                   "guaranteed, and up to max may be borrowed from what other quotas leave idle. Its "
                   "labels set the queue policy (koord-queue/queue-policy) and the parent quota.",
    "properties": {
        "spec": {"type": "object", "description": "The quota's bounds, per resource name.", "properties": {
            "min": described(RESOURCES, "Guaranteed resources: the quota's jobs get them back even from "
                                        "borrowers (preemption). A resource not named is 0."),
            "max": described(RESOURCES, "The most the quota's jobs may use at once, borrowing included. "
                                        "A resource not named cannot be used."),
        }},
        "status": {"type": "object", "description": "Written by the controller.", "properties": {
            "used": described(RESOURCES, "What the quota's admitted jobs hold now."),
            c.STATUS_USAGE_HISTORY: {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                "description": "With koord-queue/budget or fair sharing by usage history (fairness.md): per "
                               "resource its decayed past usage (decayedHours) and each budget's use within "
                               "its window (budgets: usedHours, budgetHours, windowHours)."},
        }},
    },
}

# ElasticQuotaTree (api/quotatree.py): a node holds its children, and a CRD's schema may not
# refer to itself, so the first TREE_LEVELS levels are typed and deeper ones kept as written
# (the controller reads them all the same, and says what is wrong with them).
TREE_LEVELS = 8
STRINGS: Schema = {"type": "array", "items": STRING}


def _tree_node(levels: int) -> Schema:
    children: Schema = _tree_node(levels - 1) if levels > 1 else FREE_OBJECT_SCHEMA
    return {"type": "object", "properties": {
        "name": described(STRING, "The quota's name, unique in the tree (the root is always named root); "
                                  "jobs name it with the label quota.scheduling.koordinator.sh/name."),
        "namespaces": described(STRINGS, "The namespaces whose jobs use this quota (a quota without children)."),
        "attributes": described({"type": "object", "additionalProperties": STRING},
                                "The quota's settings, as an ElasticQuota's labels and annotations: "
                                "koord-queue/queue-policy, quota.scheduling.koordinator.sh/shared-weight, ..."),
        "min": described(RESOURCES, "Guaranteed resources. A resource not named is 0."),
        "max": described(RESOURCES, "The most the quota's jobs may use at once, borrowing included. "
                                    "A resource not named is not limited by this quota."),
        "children": {"type": "array", "description": "The quotas below this one.", "items": children},
    }}


def _tree_status_node(levels: int) -> Schema:
    children: Schema = _tree_status_node(levels - 1) if levels > 1 else FREE_OBJECT_SCHEMA
    return {"type": "object", "properties": {
        "name": described(STRING, "The quota's name."),
        "namespaces": described(STRINGS, "Its namespaces, as the spec lists them."),
        "used": described(RESOURCES, "What the admitted jobs of the quota and of those below it hold now."),
        "request": described(RESOURCES, "What they hold plus what their waiting jobs ask, up to the max."),
        "children": {"type": "array", "description": "The quotas below this one.", "items": children},
    }}


ELASTIC_QUOTA_TREE_SCHEMA: Schema = {
    "type": "object",
    "description": "ElasticQuotaTree holds a whole tree of quotas in one object (Koord-Queue's form; read in "
                   "kube-system only). Each quota is read as the ElasticQuota it stands for; while a tree "
                   "exists, ElasticQuotas are not used.",
    "properties": {
        "spec": {"type": "object", "description": "The tree.", "properties": {
            "root": described(_tree_node(TREE_LEVELS), "The root quota: the whole cluster's share."),
        }},
        "status": {"type": "object", "description": "Written by the controller.", "properties": {
            "root": described(_tree_status_node(TREE_LEVELS), "The tree, with what each quota uses."),
            "problems": described(STRINGS, "The quotas not used, and why; empty when all are."),
        }},
    },
}

QUEUE_ITEM: Schema = {
    "type": "object",
    "properties": {
        "name": described(STRING, "The QueueUnit's name."),
        "namespace": described(STRING, "The QueueUnit's namespace."),
        "priority": described(INTEGER, "Its priority in the queue."),
        "position": described(INTEGER, "Its place in line: 1 is tried first."),
    },
}
QUEUE_SCHEMA: Schema = {
    "type": "object",
    "description": "Queue orders the jobs of the ElasticQuota it is bound to (the quota named by its "
                   "quota.scheduling.koordinator.sh/name label, or the quota of its own name); a Queue bound "
                   "to no quota admits nothing. The controller makes one for each ElasticQuota.",
    "properties": {
        "spec": {
            "type": "object",
            "description": "How the queue orders and admits its jobs.",
            "properties": {
                # an unknown policy is a warning and Priority, not a rejection
                "queuePolicy": described(STRING, "Priority (the default): higher priority first, and a job "
                                                 "that does not fit lets the next one try; Block: strict order, "
                                                 "the first job that does not fit holds back the rest; "
                                                 "Intelligent: jobs at or above the priority threshold "
                                                 "(annotation koord-queue/priority-threshold) go strictly "
                                                 "first, the others as in Priority."),
                "priority": described(INTEGER, "The queue's priority: queues of higher priority are served first."),
                "priorityClassName": described(STRING, "A PriorityClass whose value is the queue's priority."),
                "admissionChecks": {
                    "type": "array",
                    "description": "Checks a job admitted through this queue must pass before it runs: its "
                                   "QueueUnit holds its quota as Reserved until each check's state is Ready "
                                   "(Retry or Rejected send it back).",
                    "items": {
                        "type": "object",
                        "properties": {"name": described(STRING, "The check's name, as the unit's "
                                                                 "status.admissionChecks show it."),
                                       "labelSelector": LABEL_SELECTOR},
                    },
                },
            },
        },
        "status": {
            "type": "object",
            "description": "Written by the controller.",
            "properties": {
                "quota": described(STRING, "The ElasticQuota the queue is bound to; absent when it is "
                                           "bound to none (see the Bound condition)."),
                "conditions": {
                    "type": "array",
                    "description": "Bound: whether an ElasticQuota takes this queue's jobs, and why not.",
                    "items": {"type": "object", "properties": {
                        "type": described(STRING, "The condition: Bound."),
                        "status": described(STRING, "True or False."),
                        "reason": described(STRING, "QuotaFound, QuotaNotFound or NoQuota."),
                        "message": described(STRING, "What it means for the queue's jobs."),
                        "lastTransitionTime": described({"type": "string", "format": "date-time"},
                                                        "When the status last changed."),
                    }},
                },
                "queueItemDetails": {
                    "type": "object",
                    "description": "The queue's pending QueueUnits in the order they will be tried "
                                   "(the first 200, or koord-queue/max-depth).",
                    "additionalProperties": {"type": "array", "items": QUEUE_ITEM},
                }
            },
        },
    },
}

# The training operator's job kinds (v1.9.2), as much of its CRDs as users run into: the fields of
# a job's spec and of a replica spec (others are pruned; kubectl's strict field validation refuses
# them), the run policy, and of the pod templates the containers: required, named uniquely, their
# resources quantities. The rest of a pod spec is kept as sent (the operator's schema describes
# every field of it). `replicas >= 0` is not in the schema but in the PyTorchJob CRD's scale
# subresource (specReplicasPath: the Worker's replicas), which kube-apiserver validates as a
# non-negative int32, as it does for the operator's CRD; the other roles' replicas are checked by
# the operator's validating webhook (`simcluster/training_webhook.py`).
INT32: Schema = {"type": "integer", "format": "int32"}
INT64: Schema = {"type": "integer", "format": "int64"}
STRING_MAP: Schema = {"type": "object", "additionalProperties": STRING}
_CONTAINER: Schema = {
    "type": "object",
    "description": "A container (a core/v1 Container; the fields not described here are kept as sent).",
    "required": ["name"],
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "name": described(STRING, "The container's name, unique in the pod."),
        "image": described(STRING, "The container's image."),
        "resources": {
            "type": "object",
            "description": "Compute resources of the container.",
            "properties": {
                "limits": described(RESOURCES, "The most of each resource the container may use."),
                "requests": described(RESOURCES, "What the container needs of each resource: what koord-queue "
                                                 "charges to the quota."),
                "claims": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name"],
                              "properties": {"name": STRING, "request": STRING}},
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                },
            },
        },
    },
}
_CONTAINERS: Schema = {"type": "array", "items": _CONTAINER, "x-kubernetes-list-type": "map",
                       "x-kubernetes-list-map-keys": ["name"]}
_POD_TEMPLATE: Schema = {
    "type": "object",
    "description": "The pods' template (a PodTemplateSpec).",
    "properties": {
        "metadata": {"type": "object", "properties": {
            "annotations": STRING_MAP, "finalizers": {"type": "array", "items": STRING},
            "labels": STRING_MAP, "name": STRING, "namespace": STRING}},
        "spec": {
            "type": "object",
            "description": "The pods' spec (a core/v1 PodSpec; the fields not described here are kept as sent).",
            "required": ["containers"],
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "containers": described(_CONTAINERS, "The pod's containers; the training operator wants one "
                                                     "named after the framework (pytorch, tensorflow)."),
                "initContainers": described(_CONTAINERS, "Containers run to completion before the others."),
            },
        },
    },
}
_REPLICA_SPEC: Schema = {
    "type": "object",
    "description": "ReplicaSpec is a description of the replica",
    "properties": {
        "replicas": described(INT32, "How many pods of this role."),
        "restartPolicy": described(STRING, "Always, OnFailure, Never or ExitCode."),
        "template": _POD_TEMPLATE,
    },
}
RUN_POLICY: Schema = {
    "type": "object",
    "description": "Policies of the job's run, shared by the training operator's job kinds.",
    "properties": {
        "suspend": described({"type": "boolean", "default": False},
                             "True: the job has no pods; false starts it. Koord-Queue sets it while the job waits "
                             "in its queue."),
        "cleanPodPolicy": described(STRING, "Which pods are deleted when the job ends: None, Running or All."),
        "ttlSecondsAfterFinished": described(INT32, "Seconds after the job ends before it is deleted."),
        "activeDeadlineSeconds": described(INT64, "Seconds the job may run before it is failed."),
        "backoffLimit": described(INT32, "Retries before the job is failed."),
        "managedBy": described(STRING, "The controller that reconciles the job."),
        "schedulingPolicy": {
            "type": "object",
            "description": "Gang scheduling of the job's pods.",
            "properties": {
                "minAvailable": described(INT32, "Pods that must be placed together for the job to start."),
                "queue": described({**STRING, "x-kubernetes-validations": [
                    {"message": "spec.runPolicy.schedulingPolicy.queue is immutable", "rule": "self == oldSelf"}]},
                    "The queue of a gang scheduler (Volcano) that supports it."),
                "minResources": described(RESOURCES, "Resources that must be free for the job to start."),
                "priorityClass": described(STRING, "The PriorityClass of the job's pods."),
                "scheduleTimeoutSeconds": described(INT32, "Seconds to wait for the gang to be placed."),
            },
        },
    },
}
_ELASTIC_POLICY: Schema = {
    "type": "object",
    "description": "Elastic training (torchrun's rendezvous) of a PyTorchJob.",
    "properties": {
        **{name: INT32 for name in ("maxReplicas", "maxRestarts", "minReplicas", "nProcPerNode", "rdzvPort")},
        **{name: STRING for name in ("rdzvBackend", "rdzvHost", "rdzvId")},
        "standalone": {"type": "boolean"},
        "rdzvConf": {"type": "array", "items": {"type": "object", "properties": {"key": STRING, "value": STRING}}},
        "metrics": {"type": "array", "items": FREE_OBJECT_SCHEMA},
    },
}
_LABEL_SELECTOR: Schema = {"type": "object", "properties": {
    "matchLabels": STRING_MAP,
    "matchExpressions": {"type": "array", "items": {"type": "object", "required": ["key", "operator"], "properties": {
        "key": STRING, "operator": STRING, "values": {"type": "array", "items": STRING}}}},
}}
_JOB_STATUS: Schema = {
    "type": "object",
    "description": "Written by the training operator: conditions, replica statuses, start and completion times.",
    "properties": {
        "conditions": {"type": "array", "items": {"type": "object", "required": ["status", "type"], "properties": {
            "type": STRING, "status": STRING, "reason": STRING, "message": STRING,
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "lastUpdateTime": {"type": "string", "format": "date-time"},
        }}},
        "replicaStatuses": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "active": INT32, "failed": INT32, "succeeded": INT32,
            "labelSelector": _LABEL_SELECTOR, "selector": STRING,
        }}},
        **{name: {"type": "string", "format": "date-time"}
           for name in ("startTime", "completionTime", "lastReconcileTime")},
    },
}
# The spec fields of each kind beyond its replica specs and run policy.
_SPEC_FIELDS: dict[str, dict[str, Schema]] = {
    c.PYTORCH_JOB_KIND: {"elasticPolicy": _ELASTIC_POLICY, "nprocPerNode": STRING},
    c.TF_JOB_KIND: {"enableDynamicWorker": {"type": "boolean"}, "successPolicy": STRING},
    c.MPI_JOB_KIND: {"cleanPodPolicy": STRING, "mainContainer": STRING, "slotsPerWorker": INT32},
}


def kubeflow_schema(kind: str, replica_specs: str) -> Schema:
    return {
        "type": "object",
        "description": f"{kind} runs a distributed training job: one pod per replica of each role.",
        "properties": {
            "spec": {
                "type": "object",
                "description": f"The {kind}'s roles and run policy.",
                "required": [replica_specs],
                "properties": {
                    "runPolicy": RUN_POLICY,
                    replica_specs: {
                        "type": "object",
                        "description": "The roles (Master, Worker, ...) and their pods.",
                        "additionalProperties": _REPLICA_SPEC,
                    },
                    **_SPEC_FIELDS[kind],
                },
            },
            "status": _JOB_STATUS,
        },
    }


OPERATOR_SCHEMA: Schema = {
    "type": "object",
    "properties": {"spec": FREE_OBJECT_SCHEMA, "status": FREE_OBJECT_SCHEMA},
}

_DROPPED_KEYWORDS = {"title", "default", "$defs"}


def structural(schema: Schema, defs: Schema | None = None) -> Schema:
    """A pydantic JSON schema as Kubernetes accepts it: refs inlined, ``X | None`` as X,
    no defaults or titles, and objects with properties closed (unknown fields are pruned)."""
    defs = schema.get("$defs", {}) if defs is None else defs
    if "$ref" in schema:  # the field's own description, if any, over its type's
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        return structural({**defs[schema["$ref"].rsplit("/", 1)[-1]], **siblings}, defs)
    if "anyOf" in schema and not schema.get("x-kubernetes-int-or-string"):
        options = [option for option in schema["anyOf"] if option != {"type": "null"}]
        if len(options) != 1:
            raise ValueError(f"cannot make a structural schema of anyOf {options}")
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return structural({**rest, **options[0]}, defs)
    out: Schema = {"type": schema["type"]} if "type" in schema else {}
    for key, value in schema.items():
        if key in _DROPPED_KEYWORDS or (key == "additionalProperties" and value is True):
            continue
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "description":
            out[key] = " ".join(value.split())  # one paragraph: kubectl explain wraps it itself
        elif key in ("items", "additionalProperties"):
            out[key] = structural(value, defs)
        elif key != "type":
            out[key] = value
    return out


def queue_unit_schema() -> Schema:
    return structural(QueueUnit.model_json_schema(by_alias=True))


def age(name: str = "Age") -> dict[str, str]:
    return {"name": name, "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def column(name: str, json_path: str, kind: str = "string") -> dict[str, str]:
    return {"name": name, "type": kind, "jsonPath": json_path}


def protected_group(group: str) -> bool:
    """Groups whose CRDs kube-apiserver accepts only with an api-approved.kubernetes.io annotation."""
    return any(group == d or group.endswith("." + d) for d in ("k8s.io", "kubernetes.io"))


def crd(
    group: str,
    version: str,
    kind: str,
    plural: str,
    schema: Schema,
    columns: list[dict[str, str]],
    short_names: tuple[str, ...] = (),
    scale: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A namespaced CRD of one served and stored version, with the status subresource (and `scale`'s)."""
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short_names:
        names["shortNames"] = list(short_names)
    # metadata last: Kubernetes allows no schema of its own for it.
    properties = {
        "apiVersion": described(STRING, "APIVersion defines the versioned schema of this representation "
                                        "of an object."),
        "kind": described(STRING, "Kind is a string value representing the REST resource this object "
                                  "represents."),
        **{name: sub for name, sub in schema["properties"].items() if name not in ("apiVersion", "kind", "metadata")},
        "metadata": {"type": "object"},
    }
    root: Schema = {"type": "object", "properties": properties}
    if schema.get("description"):
        root = {"description": schema["description"], **root}
    metadata: dict[str, Any] = {"name": f"{plural}.{group}"}
    if protected_group(group):
        metadata["annotations"] = {c.ANNOTATION_API_APPROVED: c.ELASTIC_QUOTA_API_APPROVAL}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}, **({"scale": scale} if scale else {})},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def our_crds() -> list[dict[str, Any]]:
    """ElasticQuota (and ElasticQuotaTree), Queue and QueueUnit: what a cluster needs installed for koord-queue."""
    return [
        crd(
            c.QUOTA_GROUP,
            c.QUOTA_VERSION,
            c.ELASTIC_QUOTA_KIND,
            c.ELASTIC_QUOTA_PLURAL,
            ELASTIC_QUOTA_SCHEMA,
            [
                column("Min", ".spec.min"),
                column("Max", ".spec.max"),
                column("Used", ".status.used"),
                age(),
            ],
            c.ELASTIC_QUOTA_SHORT_NAMES,
        ),
        crd(
            c.QUOTA_GROUP,
            c.QUOTA_TREE_VERSION,
            c.ELASTIC_QUOTA_TREE_KIND,
            c.ELASTIC_QUOTA_TREE_PLURAL,
            ELASTIC_QUOTA_TREE_SCHEMA,
            [age()],
            c.ELASTIC_QUOTA_TREE_SHORT_NAMES,
        ),
        crd(
            c.QUEUE_GROUP,
            c.QUEUE_VERSION,
            c.QUEUE_KIND,
            c.QUEUE_PLURAL,
            QUEUE_SCHEMA,
            [
                column("Policy", ".spec.queuePolicy"),
                column("Priority", ".spec.priority", "integer"),
                column("Quota", ".status.quota"),
                column("Bound", '.status.conditions[?(@.type=="Bound")].status'),
                age(),
            ],
        ),
        crd(
            c.QUEUE_GROUP,
            c.QUEUE_VERSION,
            c.QUEUE_UNIT_KIND,
            c.QUEUE_UNIT_PLURAL,
            queue_unit_schema(),
            [
                column("PHASE", ".status.phase"),
                column("PRIORITY", ".spec.priority", "integer"),
                column("ADMISSIONS", ".status.admissionSummary"),
                column("JOBTYPE", ".spec.consumerRef.kind"),
                column("EXPECTED-START", ".status.expectedStart"),
                age("AGE"),
            ],
            c.QUEUE_UNIT_SHORT_NAMES,
        ),
    ]


def render(manifest: dict[str, Any]) -> str:
    return yaml.safe_dump(manifest, sort_keys=False)


def file_name(manifest: dict[str, Any]) -> str:
    """``<plural>.<group>.yaml``: the CRD's own name, as both directories spell it."""
    return f"{manifest['metadata']['name']}.yaml"
