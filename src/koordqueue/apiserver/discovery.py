"""Discovery documents built from the Registry, in both forms kubectl 1.32 reads.

kubectl first asks `/api` and `/apis` for *aggregated* discovery
(`apidiscovery.k8s.io/v2` APIGroupDiscoveryList: every group, version and resource
in one answer) and falls back to the legacy documents (APIVersions, APIGroupList and
one APIResourceList per group/version) when the server answers plain JSON. It tells
the two apart by the response Content-Type, so `negotiate` returns both the form and
the Content-Type to send.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from koordqueue.apiserver.registry import Registry, ResourceType

DISCOVERY_GROUP = "apidiscovery.k8s.io"
AGGREGATED_KIND = "APIGroupDiscoveryList"
AGGREGATED_VERSIONS = ("v2", "v2beta1")
JSON = "application/json"

# Subresources other than status: what they return and which verbs they take.
# (group, version, kind) None means "the parent's kind".
_SUBRESOURCES: dict[str, tuple[tuple[str, str, str] | None, tuple[str, ...]]] = {
    "status": (None, ("get", "patch", "update")),
    "scale": (("autoscaling", "v1", "Scale"), ("get", "patch", "update")),
    "log": (("", "v1", "Pod"), ("get",)),
    "binding": (("", "v1", "Binding"), ("create",)),
    "token": (("authentication.k8s.io", "v1", "TokenRequest"), ("create",)),
    "eviction": (("policy", "v1", "Eviction"), ("create",)),
    "exec": (("", "v1", "PodExecOptions"), ("create", "get")),
    "attach": (("", "v1", "PodAttachOptions"), ("create", "get")),
    "portforward": (("", "v1", "PodPortForwardOptions"), ("create", "get")),
    "ephemeralcontainers": (None, ("get", "patch", "update")),
}


@dataclass(frozen=True, slots=True)
class Negotiated:
    """Which discovery form to serve and with which Content-Type."""

    aggregated: str | None  # "v2" or "v2beta1"; None: the legacy document
    content_type: str


def negotiate(accept: str | None) -> Negotiated | None:
    """Pick the discovery form from an Accept header, in the client's order.

    None means nothing acceptable was offered (answer 406 Not Acceptable).
    """
    if not accept:
        return Negotiated(None, JSON)
    for media_range in accept.split(","):
        base, _, rest = media_range.strip().partition(";")
        base = base.strip().lower()
        params = _params(rest)
        if base not in (JSON, "application/*", "*/*"):
            continue
        if "as" not in params:
            return Negotiated(None, JSON)
        if (
            base == JSON
            and params.get("g") == DISCOVERY_GROUP
            and params.get("as") == AGGREGATED_KIND
            and params.get("v") in AGGREGATED_VERSIONS
        ):
            version = params["v"]
            return Negotiated(version, f"{JSON};g={DISCOVERY_GROUP};v={version};as={AGGREGATED_KIND}")
    return None


def _params(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip().lower()] = value.strip().strip('"')
    return out


def version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version order: GA before beta before alpha, higher numbers first.

    Use as a sort key (ascending = preferred first). Names outside the pattern come last.
    """
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0))


def _versions(registry: Registry, group: str) -> list[str]:
    return sorted(registry.groups().get(group, []), key=version_priority)


def _types(registry: Registry, group: str, version: str) -> list[ResourceType]:
    return [rt for rt in registry.all() if rt.group == group and rt.version == version]


def _subresource_target(rt: ResourceType, sub: str) -> tuple[tuple[str, str, str], tuple[str, ...]]:
    target, verbs = _SUBRESOURCES.get(sub, (None, ("get",)))
    return target or (rt.group, rt.version, rt.kind), verbs


# --- legacy documents -------------------------------------------------------------------


def api_versions(server_address: str = "") -> dict[str, Any]:
    """`GET /api`: the core group's versions."""
    doc: dict[str, Any] = {"kind": "APIVersions", "versions": ["v1"]}
    if server_address:
        doc["serverAddressByClientCIDRs"] = [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    return doc


def _group_doc(registry: Registry, group: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in _versions(registry, group)]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    """`GET /apis`: every named group with its versions, preferred first."""
    groups = [_group_doc(registry, g) for g in sorted(registry.groups()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    """`GET /apis/{group}`; None if the group is not served."""
    if not group or group not in registry.groups():
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(registry, group)}


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """`GET /api/v1` or `/apis/{group}/{version}`; None if that group/version is not served."""
    types = _types(registry, group, version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rt in types:
        entry: dict[str, Any] = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in sorted(rt.subresources):
            (g, v, kind), verbs = _subresource_target(rt, sub)
            sub_entry: dict[str, Any] = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": kind,
                "verbs": list(verbs),
            }
            if (g, v) != (rt.group, rt.version):
                sub_entry["group"], sub_entry["version"] = g, v
            resources.append(sub_entry)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


# --- aggregated discovery ----------------------------------------------------------------


def _aggregated_resource(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subs = []
    for sub in sorted(rt.subresources):
        (g, v, kind), verbs = _subresource_target(rt, sub)
        subs.append({"subresource": sub, "responseKind": {"group": g, "version": v, "kind": kind},
                     "verbs": list(verbs)})
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated_discovery(registry: Registry, core: bool, version: str = "v2") -> dict[str, Any]:
    """`GET /api` (core=True) or `/apis` (core=False) as an APIGroupDiscoveryList.

    The core group's item has no name, as kube-apiserver sends it.
    """
    items = []
    groups = [""] if core else sorted(g for g in registry.groups() if g)
    for group in groups:
        versions = [
            {
                "version": v,
                "resources": [_aggregated_resource(rt) for rt in _types(registry, group, v)],
                "freshness": "Current",
            }
            for v in _versions(registry, group)
        ]
        if not versions:
            continue
        metadata: dict[str, Any] = {"creationTimestamp": None}
        if group:
            metadata["name"] = group
        items.append({"metadata": metadata, "versions": versions})
    return {
        "kind": AGGREGATED_KIND,
        "apiVersion": f"{DISCOVERY_GROUP}/{version}",
        "metadata": {},
        "items": items,
    }
