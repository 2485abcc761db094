"""CustomResourceDefinitions: ours (ElasticQuota, Queue, QueueUnit) and, for the embedded
control plane, the training operator's (PyTorchJob, TFJob, MPIJob) and KubeRay's RayJob.

The QueueUnit schema is generated from the pydantic models of ``api/queueunit.py`` and
made structural (no ``$ref``, no nullable ``anyOf``), so the model and the CRD cannot
disagree. ElasticQuota and Queue are read into dataclass views, not models; their small
schemas are written out here. ``config/crd/`` (every CRD) and the Helm chart's
``charts/koord-queue/crds/`` (ours only: the job kinds' CRDs belong to their operators)
are written from this module with
``python -m koordqueue.api.crds --write config/crd --chart charts/koord-queue/crds``;
the chart's files are byte for byte the same as config/crd's, and tests fail when any
of them drift.

Printer columns of QueueUnit are Koord-Queue's: ADMISSIONS shows ``.status.admissions``
as a whole (kubectl prints the list of ``{name, replicas, resources, running}``), which is
what Koord-Queue users already read; a JSONPath like ``[*].replicas`` would show only the
first pod set, since the API server prints the first result of a column's JSONPath.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from koordqueue.api import constants as c
from koordqueue.api.queueunit import FREE_OBJECT_SCHEMA, QUANTITY_SCHEMA, QueueUnit

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
RESOURCES: Schema = {"type": "object", "additionalProperties": QUANTITY_SCHEMA}
LABEL_SELECTOR: Schema = {
    "type": "object",
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": STRING},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "key": STRING,
                    "operator": STRING,
                    "values": {"type": "array", "items": STRING},
                },
            },
        },
    },
}

ELASTIC_QUOTA_SCHEMA: Schema = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "properties": {"min": RESOURCES, "max": RESOURCES}},
        "status": {"type": "object", "properties": {"used": RESOURCES}},
    },
}

QUEUE_ITEM: Schema = {
    "type": "object",
    "properties": {"name": STRING, "namespace": STRING, "priority": INTEGER, "position": INTEGER},
}
QUEUE_SCHEMA: Schema = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "queuePolicy": STRING,  # an unknown policy is a warning and Priority, not a rejection
                "priority": INTEGER,
                "priorityClassName": STRING,
                "admissionChecks": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": STRING, "labelSelector": LABEL_SELECTOR},
                    },
                },
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "queueItemDetails": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": QUEUE_ITEM},
                }
            },
        },
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
    if "$ref" in schema:
        return structural(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
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
        elif key in ("items", "additionalProperties"):
            out[key] = structural(value, defs)
        elif key != "type":
            out[key] = value
    return out


def queue_unit_schema() -> Schema:
    return structural(QueueUnit.model_json_schema(by_alias=True))


def _age(name: str = "Age") -> dict[str, str]:
    return {"name": name, "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _column(name: str, json_path: str, kind: str = "string") -> dict[str, str]:
    return {"name": name, "type": kind, "jsonPath": json_path}


def crd(
    group: str,
    version: str,
    kind: str,
    plural: str,
    schema: Schema,
    columns: list[dict[str, str]],
    short_names: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A namespaced CRD of one served and stored version, with the status subresource."""
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
        "apiVersion": STRING,
        "kind": STRING,
        **schema["properties"],
        "metadata": {"type": "object"},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": properties}},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def our_crds() -> list[dict[str, Any]]:
    """ElasticQuota, Queue and QueueUnit: what a cluster needs installed for koord-queue."""
    return [
        crd(
            c.QUOTA_GROUP,
            c.QUOTA_VERSION,
            c.ELASTIC_QUOTA_KIND,
            c.ELASTIC_QUOTA_PLURAL,
            ELASTIC_QUOTA_SCHEMA,
            [
                _column("Min", ".spec.min"),
                _column("Max", ".spec.max"),
                _column("Used", ".status.used"),
                _age(),
            ],
            c.ELASTIC_QUOTA_SHORT_NAMES,
        ),
        crd(
            c.QUEUE_GROUP,
            c.QUEUE_VERSION,
            c.QUEUE_KIND,
            c.QUEUE_PLURAL,
            QUEUE_SCHEMA,
            [
                _column("Policy", ".spec.queuePolicy"),
                _column("Priority", ".spec.priority", "integer"),
                _age(),
            ],
        ),
        crd(
            c.QUEUE_GROUP,
            c.QUEUE_VERSION,
            c.QUEUE_UNIT_KIND,
            c.QUEUE_UNIT_PLURAL,
            queue_unit_schema(),
            [
                _column("PHASE", ".status.phase"),
                _column("PRIORITY", ".spec.priority", "integer"),
                _column("ADMISSIONS", ".status.admissions"),
                _column("JOBTYPE", ".spec.consumerRef.kind"),
                _age("AGE"),
            ],
            c.QUEUE_UNIT_SHORT_NAMES,
        ),
    ]


def operator_crds() -> list[dict[str, Any]]:
    """The job kinds' CRDs, as their operators print them, for the embedded control plane."""
    state = [_column("State", ".status.conditions[-1:].type"), _age()]
    ray = [
        _column("Job Status", ".status.jobStatus"),
        _column("Deployment Status", ".status.jobDeploymentStatus"),
        _age(),
    ]
    return [
        crd(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_KIND, "pytorchjobs", OPERATOR_SCHEMA, state),
        crd(c.KUBEFLOW_GROUP, "v1", c.TF_JOB_KIND, "tfjobs", OPERATOR_SCHEMA, state),
        crd(c.KUBEFLOW_GROUP, "v1", c.MPI_JOB_KIND, "mpijobs", OPERATOR_SCHEMA, state),
        crd(c.RAY_GROUP, "v1", c.RAY_JOB_KIND, "rayjobs", OPERATOR_SCHEMA, ray),
    ]


def all_crds() -> list[dict[str, Any]]:
    return our_crds() + operator_crds()


def render(manifest: dict[str, Any]) -> str:
    return yaml.safe_dump(manifest, sort_keys=False)


def file_name(manifest: dict[str, Any]) -> str:
    """``<plural>.<group>.yaml``: the CRD's own name, as both directories spell it."""
    return f"{manifest['metadata']['name']}.yaml"


def _write(directory: Path, manifests: list[dict[str, Any]]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for manifest in manifests:
        path = directory / file_name(manifest)
        path.write_text(render(manifest))
        paths.append(path)
    return paths


def write(directory: Path) -> list[Path]:
    """Write every CRD to ``directory`` as ``<plural>.<group>.yaml`` (config/crd)."""
    return _write(directory, all_crds())


def write_chart(directory: Path) -> list[Path]:
    """Write our CRDs (ElasticQuota, Queue, QueueUnit) to a Helm chart's ``crds/``; the
    files are the very bytes ``write`` puts in config/crd."""
    return _write(directory, our_crds())


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the CRD manifests as YAML files.")
    parser.add_argument("--write", type=Path, required=True, help="directory for every CRD (config/crd)")
    parser.add_argument("--chart", type=Path, help="the Helm chart's crds/ directory: ours only")
    args = parser.parse_args()
    paths = write(args.write)
    if args.chart is not None:
        paths += write_chart(args.chart)
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
