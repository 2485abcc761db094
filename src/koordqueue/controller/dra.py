"""DRA in the controller: the ResourceClaimTemplates, ResourceClaims and ResourceSlices it
reads (only with --device-class-mappings given), and a job's view charged for the claims its
pods use (api/dra.py). The job's own view (views.py) records which templates and claims its
roles name; the charge is added each time the view is read (Informers.job_view), so that a
template created after its job, or changed, is seen at once (UnitSync re-reads those jobs)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from koordqueue.api.dra import DeviceClassMappings, UncountedClaim, job_claim_charges
from koordqueue.api.quantity import ResourceList, add, format_resource_list, parse_resource_list
from koordqueue.controller.resources import RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES
from koordqueue.controller.views import JobView, Object
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


class Claims:
    """The DRA objects the controller reads, and the mapping it charges them through."""

    def __init__(self, client: KubeAPI, mappings: DeviceClassMappings) -> None:
        self.mappings = mappings
        self.template = Informer(client, RESOURCE_CLAIM_TEMPLATES, project=_spec_only)
        self.claim = Informer(client, RESOURCE_CLAIMS, project=_spec_only)
        self.slice = Informer(client, RESOURCE_SLICES, project=_slice)

    def informers(self) -> list[Informer[Any]]:
        return [self.template, self.claim, self.slice] if self.mappings else []

    def charged(self, job: JobView) -> JobView:
        """``job``'s view with its claims charged (see charged_view)."""
        if not self.mappings or not job.pod_claims or job.unit_spec is None:
            return job
        return charged_view(job, _InNamespace(self.template, job.namespace), _InNamespace(self.claim, job.namespace),
                            self.mappings)

    def node_devices(self) -> dict[str, ResourceList]:
        """Node -> the quota resources its ResourceSlices' devices add to its allocatable, for
        the device classes whose mapping names their driver (placement)."""
        by_driver: dict[str, list[tuple[str, int]]] = {}
        for mapping in self.mappings.values():
            if mapping.driver:
                by_driver.setdefault(mapping.driver, []).append((mapping.resource, mapping.count))
        out: dict[str, ResourceList] = {}
        for _, (node, driver, devices) in self.slice.items():
            for resource, count in by_driver.get(driver, ()):
                room = out.setdefault(node, {})
                room[resource] = room.get(resource, 0) + devices * count * 1000
        return out


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
    spec = dict(job.unit_spec or {})
    total = parse_resource_list(spec.get("resource") or {})
    sets = []
    for entry in spec.get("podSet") or []:
        per_pod = charges.per_pod.get(entry["name"], {})
        count = int(entry.get("count") or 0)
        total = add(total, {name: amount * count for name, amount in per_pod.items()})
        if per_pod:
            container = entry["template"]["spec"]["containers"][0]
            requests = add(parse_resource_list(container["resources"]["requests"]), per_pod)
            entry = {**entry, "template": {"spec": {"containers": [
                {**container, "resources": {"requests": format_resource_list(requests)}}]}}}
        sets.append(entry)
    total = add(total, charges.shared)
    spec.update(resource=format_resource_list(total), podSet=sets)
    placed = {m.resource for m in mappings.values() if m.driver}  # node fit for these only (ResourceSlices)
    pod_sets = tuple(
        replace(ps, request=add(ps.request, {r: a for r, a in charges.per_pod.get(ps.name, {}).items() if r in placed}))
        for ps in job.pod_sets)
    return replace(job, unit_spec=spec, pod_sets=pod_sets, claims_missing=charges.missing,
                   device_classes=tuple(sorted(charges.classes.items())))


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


def _slice(obj: Object) -> tuple[str, str, int]:
    """A ResourceSlice as placement reads it: (node, driver, devices). A slice for no single
    node (nodeSelector, allNodes) counts for none: its devices are placed by kube-scheduler."""
    found = obj.get("spec")
    spec: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    node, driver, devices = spec.get("nodeName"), spec.get("driver"), spec.get("devices")
    return (node if isinstance(node, str) else "", driver if isinstance(driver, str) else "",
            len(devices) if isinstance(devices, list) else 0)
