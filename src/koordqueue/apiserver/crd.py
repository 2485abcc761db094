"""CustomResourceDefinitions: from a stored CRD to the resource types it serves.

A CRD written to the server is validated like a real one (name is `plural.group`,
one storage version), gets `NamesAccepted`/`Established` conditions, and its served
versions become `ResourceType`s in the registry.
"""

from __future__ import annotations

from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.crds import protected_group
from koordqueue.apiserver.registry import ResourceType
from koordqueue.apiserver.validation import Cause, check_name

CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


def validate_crd(crd: dict[str, Any]) -> list[Cause]:
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    causes: list[Cause] = []
    group = spec.get("group") or ""
    names = spec.get("names")
    if not isinstance(names, dict):
        names = {}
    plural, kind = names.get("plural") or "", names.get("kind") or ""
    approval = (crd.get("metadata", {}).get("annotations") or {}).get(c.ANNOTATION_API_APPROVED)
    if group and protected_group(group) and not approval:
        causes.append((f"metadata.annotations[{c.ANNOTATION_API_APPROVED}]",
                       f'Required value: protected groups must have approval annotation "{c.ANNOTATION_API_APPROVED}", '
                       "see https://github.com/kubernetes/enhancements/pull/1111"))
    if not group:
        causes.append(("spec.group", "Required value"))
    elif "." not in group:
        causes.append(("spec.group", f'Invalid value: "{group}": should be a domain with at least one dot'))
    if not plural:
        causes.append(("spec.names.plural", "Required value"))
    else:
        causes += check_name(plural, "label", "spec.names.plural")
    if not kind:
        causes.append(("spec.names.kind", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(("spec.scope", f'Unsupported value: "{spec.get("scope")}": supported values: '
                                     '"Cluster", "Namespaced"'))
    name = crd.get("metadata", {}).get("name", "")
    if plural and group and name != f"{plural}.{group}":
        causes.append(("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        causes.append(("spec.versions", "Invalid value: null: must have exactly one version marked as storage version"))
    else:
        storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
        if len(storage) != 1:
            causes.append(("spec.versions", "Invalid value: must have exactly one version marked as storage version"))
        for i, v in enumerate(versions):
            if not isinstance(v, dict) or not v.get("name"):
                causes.append((f"spec.versions[{i}].name", "Required value"))
    return causes


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    spec = crd["spec"]
    names = spec["names"]
    out = []
    for v in spec["versions"]:
        if not v.get("served", True):
            continue
        subresources = frozenset({"status"} & set(v.get("subresources") or {}))  # scale is not served
        scale = (v.get("subresources") or {}).get("scale")
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        selectable = tuple(
            f["jsonPath"].lstrip(".") for f in v.get("selectableFields") or () if f.get("jsonPath")
        )
        out.append(ResourceType(
            group=spec["group"],
            version=v["name"],
            kind=names["kind"],
            plural=names["plural"],
            singular=names.get("singular") or names["kind"].lower(),
            namespaced=spec.get("scope") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=subresources,
            printer_columns=tuple(v.get("additionalPrinterColumns") or ()),
            schema=schema,
            scale=dict(scale) if isinstance(scale, dict) else None,
            from_crd=crd["metadata"]["name"],
            selectable_fields=selectable,
        ))
    return out


def storage_version(crd: dict[str, Any]) -> str:
    for v in crd["spec"]["versions"]:
        if v.get("storage"):
            return str(v["name"])
    return str(crd["spec"]["versions"][0]["name"])


def established_status(crd: dict[str, Any], now: str) -> dict[str, Any]:
    names = dict(crd["spec"]["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    conditions = [
        {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
         "reason": "NoConflicts", "message": "no conflicts found"},
        {"type": "Established", "status": "True", "lastTransitionTime": now,
         "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
    ]
    old = {cond.get("type"): cond for cond in (crd.get("status") or {}).get("conditions") or ()}
    for cond in conditions:
        if cond["type"] in old and old[cond["type"]].get("status") == "True":
            cond["lastTransitionTime"] = old[cond["type"]].get("lastTransitionTime", now)
    return {"conditions": conditions, "acceptedNames": names, "storedVersions": [storage_version(crd)]}


def defaults(crd: dict[str, Any]) -> None:
    """Defaults a real server fills in: served/storage flags, singular, listKind, conversion."""
    spec = crd["spec"]
    names = spec["names"]
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    spec.setdefault("conversion", {"strategy": "None"})
    for v in spec.get("versions") or ():
        v.setdefault("served", True)
