"""DRA in the controller: the ResourceClaimTemplates, ResourceClaims and ResourceSlices it
reads (only with --device-class-mappings given), and a job's view charged for the claims its
pods use (api/dra.py). The job's own view (views.py) records which templates and claims its
roles name; the charge is added each time the view is read (Informers.job_view), so that a
template created after its job, or changed, is seen at once (UnitSync re-reads those jobs)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from koordqueue.api.dra import (
    MILLI,
    ClaimCharges,
    DeviceClassMappings,
    PodClaims,
    UncountedClaim,
    job_claim_charges,
)
from koordqueue.api.meta import InvalidObject
from koordqueue.api.quantity import ResourceList, add, format_resource_list, parse_resource_list
from koordqueue.controller.resources import RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES
from koordqueue.controller.views import JobView, Object
from koordqueue.jobs.podrequest import pod_request
from koordqueue.kube.api import KubeAPI
from koordqueue.kube.informer import Informer


class _InNamespace(Mapping[str, Mapping[str, Any]]):
    """An informer's objects of one namespace, by name (what job_claim_charges reads)."""

    def __init__(self, informer: Informer[Object], namespace: str) -> None:
        self.informer, self.namespace = informer, namespace

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        found = self.informer.get(f"{self.namespace}/{name}")
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        prefix = f"{self.namespace}/"
        return (key[len(prefix):] for key, _ in self.informer.items() if key.startswith(prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass(frozen=True, slots=True)
class GroupCharge:
    """A pod group's unit spec as charged; else the templates or claims it waits for, or why
    its claims cannot be charged (tenant input: the unit is held, saying so)."""

    spec: dict[str, Any]
    missing: tuple[str, ...] = ()
    invalid: str | None = None


class Claims:
    """The DRA objects the controller reads, and the mapping it charges them through."""

    def __init__(self, client: KubeAPI, mappings: DeviceClassMappings) -> None:
        self.mappings = mappings
        self.template = Informer(client, RESOURCE_CLAIM_TEMPLATES, project=_spec_only)
        self.claim = Informer(client, RESOURCE_CLAIMS, project=_claim)
        self.slice = Informer(client, RESOURCE_SLICES, project=_slice)
        self._devices: dict[str, ResourceList] | None = None  # node_devices, until a slice or claim changes
        self._held: dict[str, ResourceList] | None = None  # node_held, likewise
        for informer in (self.claim, self.slice):  # (first: before the handlers that read node_devices)
            informer.on_add(self._stale)
            informer.on_update(self._stale)
            informer.on_delete(self._stale)

    def _stale(self, *_: object) -> None:
        self._devices = self._held = None

    def informers(self) -> list[Informer[Any]]:
        return [self.template, self.claim, self.slice] if self.mappings else []

    def charged(self, job: JobView) -> JobView:
        """``job``'s view with its claims charged (see charged_view)."""
        if not self.mappings or not job.pod_claims or job.unit_spec is None:
            return job
        return charged_view(job, _InNamespace(self.template, job.namespace), _InNamespace(self.claim, job.namespace),
                            self.mappings)

    def charged_group(self, unit_spec: Mapping[str, Any], role: str, claims: PodClaims, namespace: str,
                      where: str) -> GroupCharge:
        """A gated pod group's unit spec (controller/podgroups.py) charged for the claims of its
        pods (role ``role``), counted as a job's are (job_claim_charges); its podSet's pods ask
        only for the placed resources, what its node fit reads."""
        if not self.mappings or not claims:
            return GroupCharge(dict(unit_spec))
        try:
            charges = job_claim_charges({role: claims}, _InNamespace(self.template, namespace),
                                        _InNamespace(self.claim, namespace), self.mappings, where)
        except UncountedClaim as e:
            return GroupCharge(dict(unit_spec), invalid=str(e))
        if charges.missing:
            return GroupCharge(dict(unit_spec), missing=charges.missing)
        try:  # its demand: spec.resource once set (bare_unit_info), so its pods' own requests too
            own: ResourceList = {}
            for entry in unit_spec.get("podSet") or []:
                request = pod_request(entry.get("template"), where)
                own = add(own, {r: a * int(entry.get("count") or 0) for r, a in request.items()})
        except InvalidObject:
            return GroupCharge(dict(unit_spec))  # unreadable: its unit says so (bare_unit_info)
        return GroupCharge(charged_spec({**unit_spec, "resource": format_resource_list(own)}, charges,
                                        placed_resources(self.mappings)))

    def per_pod(self, role: str, claims: PodClaims, namespace: str, where: str) -> ClaimCharges:
        """What one pod of a gated group (role ``role``) is charged for ``claims``, as charged_group
        charges its unit's: so a later pod of the group is held to what its unit was charged per
        pod. Raises UncountedClaim."""
        return job_claim_charges({role: claims}, _InNamespace(self.template, namespace),
                                 _InNamespace(self.claim, namespace), self.mappings, where)

    def node_devices(self) -> dict[str, ResourceList]:
        """Node -> the quota resources its ResourceSlices' devices add to its allocatable, for
        the device classes whose mapping names their driver (placement). Kept until a slice
        or claim changes (read on every node change), as node_held."""
        if self._devices is None:
            self._devices = published_devices(self.mappings, self.slice.items())
        return self._devices

    def node_held(self) -> dict[str, ResourceList]:
        """Node -> the quota resources of the devices allocated claims hold there: room used
        that their pods' requests do not name (added to the node's usage)."""
        if self._held is None:
            self._held = held_devices(self.mappings, self.slice.items(), self.claim.items())
        return self._held


def charged_view(job: JobView, templates: Mapping[str, Mapping[str, Any]], claims: Mapping[str, Mapping[str, Any]],
                 mappings: DeviceClassMappings) -> JobView:
    """``job``'s view with what its claims charge added: per pod of a role for its templates,
    once for the job for a ResourceClaim its pods name (they share its devices). A template or
    claim not there yet: it waits, saying which (``claims_missing``); what no mapping names or
    cannot be counted before allocation: it is unusable, saying why (tenant input)."""
    where = f"{job.kind} {job.key}"
    try:
        charges = job_claim_charges(dict(job.pod_claims), templates, claims, mappings, where)
    except UncountedClaim as e:
        return replace(job, unit_spec=None, invalid=str(e))
    spec = charged_spec(job.unit_spec or {}, charges)
    placed = placed_resources(mappings)
    pod_sets = tuple(
        replace(ps, request=add(ps.request, {r: a for r, a in charges.per_pod.get(ps.name, {}).items() if r in placed}))
        for ps in job.pod_sets)
    return replace(job, unit_spec=spec, pod_sets=pod_sets, claims_missing=charges.missing,
                   device_classes=tuple(sorted(charges.classes.items())))


def placed_resources(mappings: DeviceClassMappings) -> frozenset[str]:
    """The quota resources placement fits on nodes (their class's driver publishes ResourceSlices)."""
    return frozenset(m.resource for m in mappings.values() if m.driver)


def charged_spec(unit_spec: Mapping[str, Any], charges: ClaimCharges,
                 in_template: frozenset[str] | None = None) -> dict[str, Any]:
    """A QueueUnit spec (its ``resource`` and each ``podSet`` entry's first container) with
    ``charges`` added: per pod of each entry, and the shared claims once. ``in_template``:
    the resources added to the pods' requests (None: all), for a unit whose podSet is what
    its node fit reads (a pod group's)."""
    spec = dict(unit_spec)
    total = parse_resource_list(spec.get("resource") or {})
    sets = []
    for entry in spec.get("podSet") or []:
        per_pod = charges.per_pod.get(entry["name"], {})
        count = int(entry.get("count") or 0)
        total = add(total, {name: amount * count for name, amount in per_pod.items()})
        shown = {r: a for r, a in per_pod.items() if in_template is None or r in in_template}
        containers = list(entry["template"]["spec"].get("containers") or [])
        if shown and containers:
            container = containers[0]
            requests = add(parse_resource_list((container.get("resources") or {}).get("requests") or {}), shown)
            containers[0] = {**container, "resources": {**(container.get("resources") or {}),
                                                        "requests": format_resource_list(requests)}}
            entry = {**entry, "template": {**entry["template"],
                                           "spec": {**entry["template"]["spec"], "containers": containers}}}
        sets.append(entry)
    total = add(total, charges.shared)
    spec.update(resource=format_resource_list(total), podSet=sets)
    return spec


def with_device_classes(message: str, job: JobView | None) -> str:
    """A waiting message naming, beside each quota resource a claim charged, its device
    classes: "example.com/gpu (device class gpu.example.com) asks 2"."""
    if job is None:
        return message
    for resource, classes in job.device_classes:
        label = f"{resource} (device class{'es' if len(classes) > 1 else ''} {', '.join(classes)})"
        message = message.replace(f": {resource} asks", f": {label} asks")
    return message


def _spec_only(obj: Object) -> Object:
    """A template or claim as charged: its spec and where it is (a claim's status, its
    allocation, is not read)."""
    meta = obj.get("metadata") or {}
    return {"namespace": str(meta.get("namespace") or ""), "name": str(meta.get("name") or ""),
            "spec": obj.get("spec")}


def _by_driver(mappings: DeviceClassMappings) -> dict[str, list[tuple[str, int]]]:
    by_driver: dict[str, list[tuple[str, int]]] = {}
    for mapping in mappings.values():
        if mapping.driver:
            by_driver.setdefault(mapping.driver, []).append((mapping.resource, mapping.count))
    return by_driver


def published_devices(mappings: DeviceClassMappings,
                      slices: Iterable[tuple[str, tuple[str, str, int, str]]]) -> dict[str, ResourceList]:
    """Node -> the quota resources of the devices its slices publish (drivers a mapping names)."""
    by_driver = _by_driver(mappings)
    out: dict[str, ResourceList] = {}
    for _, (node, driver, devices, _pool) in slices:
        for resource, count in by_driver.get(driver, ()):
            room = out.setdefault(node, {})
            room[resource] = room.get(resource, 0) + devices * count * MILLI
    return out


def held_devices(mappings: DeviceClassMappings, slices: Iterable[tuple[str, tuple[str, str, int, str]]],
                 claims: Iterable[tuple[str, Object]]) -> dict[str, ResourceList]:
    """Node -> the quota resources of the devices claims' allocations hold there (found by
    driver and pool; each device once): used room, as bound pods' requests are."""
    by_driver = _by_driver(mappings)
    pools = {(driver, pool): node for _, (node, driver, _n, pool) in slices if node and pool}
    out: dict[str, ResourceList] = {}
    for driver, pool, _device in {device for _, claim in claims for device in claim.get("allocated") or ()}:
        node = pools.get((driver, pool))
        if node is None:
            continue
        for resource, count in by_driver.get(driver, ()):
            used = out.setdefault(node, {})
            used[resource] = used.get(resource, 0) + count * MILLI
    return out


def _claim(obj: Object) -> Object:
    """A claim as charged (_spec_only) and, for placement, the devices its allocation holds:
    (driver, pool, device) of each result."""
    found = ((obj.get("status") or {}).get("allocation") or {}) if isinstance(obj.get("status"), Mapping) else {}
    devices = found.get("devices") if isinstance(found, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    allocated = tuple((str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
                      for r in results or () if isinstance(r, Mapping)) if isinstance(results, list) else ()
    return {**_spec_only(obj), "allocated": allocated}


def _slice(obj: Object) -> tuple[str, str, int, str]:
    """A ResourceSlice as placement reads it: (node, driver, devices, pool). A slice for no
    single node (nodeSelector, allNodes) counts for none: its devices are placed by kube-scheduler."""
    found = obj.get("spec")
    spec: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    node, driver, devices = spec.get("nodeName"), spec.get("driver"), spec.get("devices")
    pool = spec.get("pool")
    name = pool.get("name") if isinstance(pool, Mapping) else None
    return (node if isinstance(node, str) else "", driver if isinstance(driver, str) else "",
            len(devices) if isinstance(devices, list) else 0, name if isinstance(name, str) else "")
