"""CustomResourceDefinitions: ours (ElasticQuota, Queue, QueueUnit) and, for the embedded
control plane, the training operator's and Ray's.

One generator per kind builds the manifest from the field lists below; the YAML files in
`config/crd/` (and the chart) are written from here with
`python -m koordqueue.api.crds --write config/crd`, and a test fails when they drift.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from koordqueue.api import constants as c

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
TIME: Schema = {"type": "string", "format": "date-time"}
QUANTITY: Schema = {"x-kubernetes-int-or-string": True,
                    "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
                    "anyOf": [{"type": "integer"}, {"type": "string"}]}
RESOURCES: Schema = {"type": "object", "additionalProperties": QUANTITY}
FREE: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def obj(properties: dict[str, Schema], required: list[str] | None = None) -> Schema:
    out: Schema = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


LABEL_SELECTOR = obj({
    "matchLabels": {"type": "object", "additionalProperties": STRING},
    "matchExpressions": array(obj({"key": STRING, "operator": STRING, "values": array(STRING)})),
})
CONDITION = obj({"type": STRING, "status": STRING, "reason": STRING, "message": STRING,
                 "lastTransitionTime": TIME, "observedGeneration": INTEGER})

ELASTIC_QUOTA_SCHEMA = obj({
    "spec": obj({"min": RESOURCES, "max": RESOURCES}),
    "status": obj({"used": RESOURCES}),
})

QUEUE_SCHEMA = obj({
    "spec": obj({
        "queuePolicy": {"type": "string", "enum": [p.value for p in c.QueuePolicy]},
        "priority": INTEGER,
        "priorityClassName": STRING,
        "admissionChecks": array(obj({"name": STRING, "labelSelector": LABEL_SELECTOR})),
    }),
    "status": obj({
        "queueItemDetails": {"type": "object", "additionalProperties": array(obj({
            "name": STRING, "namespace": STRING, "priority": INTEGER, "position": INTEGER}))},
    }),
})

QUEUE_UNIT_SCHEMA = obj({
    "spec": obj({
        "consumerRef": obj({"apiVersion": STRING, "kind": STRING, "name": STRING, "namespace": STRING,
                            "uid": STRING, "resourceVersion": STRING, "fieldPath": STRING}),
        "priority": INTEGER,
        "queue": STRING,
        "resource": RESOURCES,
        "podSet": array(obj({"name": STRING, "count": INTEGER, "minCount": INTEGER, "template": FREE})),
        "priorityClassName": STRING,
        "request": RESOURCES,
        "active": {"type": "boolean"},
        "maximumExecutionTimeSeconds": INTEGER,
    }),
    "status": obj({
        "phase": STRING,
        "attempts": INTEGER,
        "message": STRING,
        "lastUpdateTime": TIME,
        "admissionChecks": array(obj({"name": STRING, "state": STRING, "message": STRING,
                                      "lastTransitionTime": TIME, "podSetUpdates": array(FREE)})),
        "podState": obj({"running": INTEGER, "pending": INTEGER}),
        "admissions": array(obj({"name": STRING, "replicas": INTEGER, "resources": RESOURCES,
                                 "running": INTEGER, "reclaimState": obj({"replicas": INTEGER})})),
        "lastAllocateTime": TIME,
        "conditions": array(CONDITION),
        "requeueState": obj({"count": INTEGER, "requeueAt": TIME}),
        "reclaimablePods": array(obj({"name": STRING, "count": INTEGER})),
        "accumulatedPastExecutionTimeSeconds": INTEGER,
    }),
})

OPERATOR_SCHEMA = obj({"spec": FREE, "status": FREE})

AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def crd(group: str, version: str, kind: str, plural: str, schema: Schema, *,
        short_names: tuple[str, ...] = (), columns: list[dict[str, str]] | None = None,
        categories: tuple[str, ...] = ()) -> dict[str, Any]:
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                             "singular": kind.lower()}
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    full_schema = {"type": "object", "properties": {"apiVersion": STRING, "kind": STRING,
                                                    "metadata": {"type": "object"}, **schema["properties"]}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced",
            "versions": [{
                "name": version,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": full_schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns or [AGE],
            }],
        },
    }


def our_crds() -> list[dict[str, Any]]:
    return [
        crd(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_KIND, c.ELASTIC_QUOTA_PLURAL,
            ELASTIC_QUOTA_SCHEMA, short_names=c.ELASTIC_QUOTA_SHORT_NAMES),
        crd(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_KIND, c.QUEUE_PLURAL, QUEUE_SCHEMA,
            columns=[{"name": "Policy", "type": "string", "jsonPath": ".spec.queuePolicy"},
                     {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"}, AGE]),
        crd(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_KIND, c.QUEUE_UNIT_PLURAL, QUEUE_UNIT_SCHEMA,
            short_names=c.QUEUE_UNIT_SHORT_NAMES,
            columns=[{"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                     {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"},
                     {"name": "Admissions", "type": "string", "jsonPath": ".status.admissions"},
                     {"name": "JobType", "type": "string", "jsonPath": ".spec.consumerRef.kind"},
                     AGE]),
    ]


def operator_crds() -> list[dict[str, Any]]:
    state = [{"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"}, AGE]
    return [
        crd(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_KIND, "pytorchjobs", OPERATOR_SCHEMA, columns=state),
        crd(c.KUBEFLOW_GROUP, "v1", c.TF_JOB_KIND, "tfjobs", OPERATOR_SCHEMA, columns=state),
        crd(c.KUBEFLOW_GROUP, "v1", c.MPI_JOB_KIND, "mpijobs", OPERATOR_SCHEMA, columns=state),
        crd(c.RAY_GROUP, "v1", c.RAY_JOB_KIND, "rayjobs", OPERATOR_SCHEMA,
            columns=[{"name": "Job Status", "type": "string", "jsonPath": ".status.jobStatus"}, AGE]),
    ]


def all_crds() -> list[dict[str, Any]]:
    return our_crds() + operator_crds()


def render(manifest: dict[str, Any]) -> str:
    return yaml.safe_dump(manifest, sort_keys=False)


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for manifest in our_crds():
        path = directory / f"{manifest['metadata']['name']}.yaml"
        path.write_text(render(manifest))
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, required=True, help="directory for the CRD YAML files")
    for path in write(parser.parse_args().write):
        print(path)


if __name__ == "__main__":
    main()
