"""Dynamic Resource Allocation as quota sees it (docs/gpus.md, "What is left"): the
devices a pod's ResourceClaimTemplates ask for, charged as quota resources through a
mapping from DeviceClass to a resource name and a count per device, as Kueue's
``deviceClassMappings``. The pure part only: the controller does not read
ResourceClaimTemplates yet.

A ResourceClaimTemplate's ``spec.spec.devices.requests[]`` asks, per request, for
``exactly: {deviceClassName, count, allocationMode}`` (resource.k8s.io/v1; v1beta1 has
the same fields on the request itself). ``allocationMode: All`` (every matching device of a
node) and ``firstAvailable`` (a list of alternatives) cannot be counted before allocation:
refused, with why, rather than charged nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordqueue.api.quantity import ResourceList

MILLI = 1000
ALLOCATION_ALL = "All"


@dataclass(frozen=True, slots=True)
class DeviceClassMapping:
    """What one device of a DeviceClass is charged: ``count`` of quota resource ``resource``."""

    resource: str
    count: int = 1


DeviceClassMappings = Mapping[str, DeviceClassMapping]


class UncountedClaim(ValueError):
    """A claim whose devices cannot be counted before allocation, or that no mapping names."""


def parse_mappings(text: str) -> dict[str, DeviceClassMapping]:
    """``deviceclass=resource[:count]``, comma-separated (a flag, or the chart's value)."""
    out: dict[str, DeviceClassMapping] = {}
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        device_class, eq, rest = term.partition("=")
        resource, colon, count_text = rest.partition(":")
        device_class, resource = device_class.strip(), resource.strip()
        if not eq or not device_class or not resource:
            raise ValueError(f"{term!r} is not deviceclass=resource[:count]")
        count = 1
        if colon:
            if not count_text.strip().isdigit() or int(count_text) < 1:
                raise ValueError(f"{term!r}: the count per device must be a whole number of at least 1")
            count = int(count_text)
        if device_class in out:
            raise ValueError(f"device class {device_class} is mapped twice")
        out[device_class] = DeviceClassMapping(resource, count)
    return out


def template_devices(template: Mapping[str, Any], where: str) -> dict[str, int]:
    """DeviceClass -> how many devices a ResourceClaimTemplate's claim asks for."""
    spec = ((template.get("spec") or {}).get("spec") or {}) if isinstance(template, Mapping) else {}
    requests = (spec.get("devices") or {}).get("requests") or []
    if not isinstance(requests, list):
        raise UncountedClaim(f"{where}: spec.spec.devices.requests is not a list")
    out: dict[str, int] = {}
    for index, request in enumerate(requests):
        at = f"{where}: spec.spec.devices.requests[{index}]"
        if not isinstance(request, Mapping):
            raise UncountedClaim(f"{at} is not a mapping")
        if request.get("firstAvailable"):
            raise UncountedClaim(f"{at}: firstAvailable (alternatives) cannot be charged before allocation")
        nested = request.get("exactly")
        exact: Mapping[str, Any] = nested if isinstance(nested, Mapping) else request  # v1 | v1beta1
        device_class = exact.get("deviceClassName")
        if not isinstance(device_class, str) or not device_class:
            raise UncountedClaim(f"{at}: no deviceClassName")
        if exact.get("allocationMode") == ALLOCATION_ALL:
            raise UncountedClaim(f"{at}: allocationMode All (every matching device of a node) cannot be charged "
                                 "before allocation")
        count = exact.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise UncountedClaim(f"{at}: count must be a whole number of at least 1")
        out[device_class] = out.get(device_class, 0) + count
    return out


def pod_claim_charges(pod_spec: Mapping[str, Any], templates: Mapping[str, Mapping[str, Any]],
                      mappings: DeviceClassMappings, where: str) -> ResourceList:
    """What one pod's claims made from ResourceClaimTemplates charge (``templates``: the
    namespace's, by name), in milli-units. A claim named directly (``resourceClaimName``) is
    shared by the pods that name it and is not charged per pod."""
    out: ResourceList = {}
    claims = pod_spec.get("resourceClaims") or []
    if not isinstance(claims, list):
        raise UncountedClaim(f"{where}: spec.resourceClaims is not a list")
    for index, claim in enumerate(claims):
        name = claim.get("resourceClaimTemplateName") if isinstance(claim, Mapping) else None
        if not name:
            continue
        template = templates.get(name)
        at = f"{where}: spec.resourceClaims[{index}]"
        if template is None:
            raise UncountedClaim(f"{at}: ResourceClaimTemplate {name} not found")
        for device_class, count in template_devices(template, f"ResourceClaimTemplate {name}").items():
            mapping = mappings.get(device_class)
            if mapping is None:
                raise UncountedClaim(f"{at}: device class {device_class} is mapped to no quota resource "
                                     "(deviceClassMappings)")
            out[mapping.resource] = out.get(mapping.resource, 0) + count * mapping.count * MILLI
    return out
