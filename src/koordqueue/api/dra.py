"""Dynamic Resource Allocation as quota sees it (docs/gpus.md, "What is left"): the
devices a pod's ResourceClaimTemplates ask for, charged as quota resources through a
mapping from DeviceClass to a resource name and a count per device, as Kueue's
``deviceClassMappings`` (docs/gpus.md, "DRA"). The controller reads the templates and claims
(controller/dra.py) and charges a job through ``job_claim_charges``.

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
    # The DRA driver whose ResourceSlices publish this class's devices (placement: a pod is
    # planned only on nodes with room for them); None: quota only, no node fit.
    driver: str | None = None


DeviceClassMappings = Mapping[str, DeviceClassMapping]


class UncountedClaim(ValueError):
    """A claim whose devices cannot be counted before allocation, or that no mapping names."""


def parse_mappings(text: str) -> dict[str, DeviceClassMapping]:
    """``deviceclass=resource[:count][@driver]``, comma-separated (a flag, or the chart's value)."""
    out: dict[str, DeviceClassMapping] = {}
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        device_class, eq, rest = term.partition("=")
        rest, at, driver = rest.partition("@")
        resource, colon, count_text = rest.partition(":")
        device_class, resource, driver = device_class.strip(), resource.strip(), driver.strip()
        if not eq or not device_class or not resource or (at and not driver):
            raise ValueError(f"{term!r} is not deviceclass=resource[:count][@driver]")
        count = 1
        if colon:
            if not count_text.strip().isdigit() or int(count_text) < 1:
                raise ValueError(f"{term!r}: the count per device must be a whole number of at least 1")
            count = int(count_text)
        if device_class in out:
            raise ValueError(f"device class {device_class} is mapped twice")
        out[device_class] = DeviceClassMapping(resource, count, driver or None)
    return out


def format_mappings(mappings: DeviceClassMappings) -> str:
    """The flag's text of ``mappings`` (parse_mappings' inverse)."""
    return ",".join(f"{name}={m.resource}:{m.count}" + (f"@{m.driver}" if m.driver else "")
                    for name, m in sorted(mappings.items()))


def template_devices(template: Mapping[str, Any], where: str) -> dict[str, int]:
    """DeviceClass -> how many devices a ResourceClaimTemplate's claim asks for."""
    spec = (template.get("spec") or {}) if isinstance(template, Mapping) else {}
    return claim_devices({"spec": spec.get("spec") if isinstance(spec, Mapping) else None}, where, "spec.spec")


def claim_devices(claim: Mapping[str, Any], where: str, path: str = "spec") -> dict[str, int]:
    """DeviceClass -> how many devices a ResourceClaim asks for (``path``: where its claim
    spec is, as the message names it)."""
    spec = claim.get("spec") if isinstance(claim, Mapping) else None
    spec = spec if isinstance(spec, Mapping) else {}
    devices = spec.get("devices")
    requests = (devices.get("requests") if isinstance(devices, Mapping) else None) or []
    if not isinstance(requests, list):
        raise UncountedClaim(f"{where}: {path}.devices.requests is not a list")
    out: dict[str, int] = {}
    for index, request in enumerate(requests):
        at = f"{where}: {path}.devices.requests[{index}]"
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


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The claims one role's pods name: templates (each pod gets its own claim made from
    one) and ResourceClaims named directly (one claim, shared by every pod naming it)."""

    templates: tuple[str, ...] = ()
    claims: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.templates or self.claims)


def template_claims(template: object, where: str) -> PodClaims:
    """The names a pod template's spec's ``resourceClaims`` give, none when they cannot be read
    (for a comparison: whoever reads the job or pod itself says what is wrong with them)."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    try:
        return pod_claims(spec if isinstance(spec, Mapping) else {}, where)
    except UncountedClaim:
        return PodClaims()


def pod_claims(pod_spec: Mapping[str, Any], where: str) -> PodClaims:
    """The names a pod spec's ``resourceClaims`` give (tenant input: a malformed list is refused)."""
    claims = pod_spec.get("resourceClaims") if isinstance(pod_spec, Mapping) else None
    if claims is None:
        return PodClaims()
    if not isinstance(claims, list):
        raise UncountedClaim(f"{where}: spec.resourceClaims is not a list")
    templates: list[str] = []
    named: list[str] = []
    for index, claim in enumerate(claims):
        template = claim.get("resourceClaimTemplateName") if isinstance(claim, Mapping) else None
        name = claim.get("resourceClaimName") if isinstance(claim, Mapping) else None
        if isinstance(template, str) and template and not name:
            templates.append(template)
        elif isinstance(name, str) and name and not template:
            named.append(name)
        else:
            raise UncountedClaim(f"{where}: spec.resourceClaims[{index}] names neither exactly one "
                                 "resourceClaimTemplateName nor one resourceClaimName")
    return PodClaims(tuple(templates), tuple(named))


@dataclass(frozen=True, slots=True)
class ClaimCharges:
    """What a job's claims charge: per pod of each role (templates), once for the job
    (claims named directly), which device classes each quota resource came from (for
    messages), and the templates and claims not found (the job waits for them)."""

    per_pod: Mapping[str, ResourceList]
    shared: ResourceList
    classes: Mapping[str, tuple[str, ...]]
    missing: tuple[str, ...]


def job_claim_charges(roles: Mapping[str, PodClaims], templates: Mapping[str, Mapping[str, Any]],
                      claims: Mapping[str, Mapping[str, Any]], mappings: DeviceClassMappings,
                      where: str) -> ClaimCharges:
    """A job's charges for its roles' claims (``templates``, ``claims``: its namespace's, by
    name). A ResourceClaim named directly is charged once for the job however many pods
    name it (they share its devices); a template, once per pod. Raises UncountedClaim for
    what no mapping names or cannot be counted before allocation."""
    per_pod: dict[str, ResourceList] = {}
    shared: ResourceList = {}
    classes: dict[str, set[str]] = {}
    missing: list[str] = []

    def charge(devices: Mapping[str, int], into: ResourceList, at: str) -> None:
        for device_class, count in devices.items():
            mapping = mappings.get(device_class)
            if mapping is None:
                raise UncountedClaim(f"{at}: device class {device_class} is mapped to no quota resource "
                                     "(deviceClassMappings)")
            into[mapping.resource] = into.get(mapping.resource, 0) + count * mapping.count * MILLI
            classes.setdefault(mapping.resource, set()).add(device_class)

    seen_claims: set[str] = set()
    for role, names in roles.items():
        out: ResourceList = {}
        for name in names.templates:
            template = templates.get(name)
            if template is None:
                missing.append(f"ResourceClaimTemplate {name}")
                continue
            at = f"{where}: ResourceClaimTemplate {name}"
            charge(template_devices(template, at), out, at)
        per_pod[role] = out
        for name in names.claims:
            if name in seen_claims:
                continue
            seen_claims.add(name)
            claim = claims.get(name)
            if claim is None:
                missing.append(f"ResourceClaim {name}")
                continue
            at = f"{where}: ResourceClaim {name}"
            charge(claim_devices(claim, at), shared, at)
    return ClaimCharges(per_pod, shared, {r: tuple(sorted(cs)) for r, cs in classes.items()},
                        tuple(dict.fromkeys(missing)))


def missing_reason(names: tuple[str, ...]) -> str:
    """Why a job whose pods use ResourceClaimTemplates or ResourceClaims not there waits:
    what they ask for cannot be charged, and the API server would not start its pods."""
    which = names[0] if len(names) == 1 else ", ".join(names)
    return (f"its pods use {which}, which {'does' if len(names) == 1 else 'do'} not exist (what they ask for "
            "cannot be charged); it is queued once created")
