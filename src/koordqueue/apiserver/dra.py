"""resource.k8s.io/v1 (DRA) on the embedded API server: the basics of kube-apiserver's
validation of ResourceClaims and ResourceClaimTemplates (requests named once, exactly one of
``exactly``/``firstAvailable``, a device class named, a count of at least 1 for ExactCount,
their defaults), and their specs immutable, as kube's are: a claim made from a template is
not updated afterwards, so a tenant changes what a template asks for only by deleting it and
creating another of the same name. ResourceSlices: a driver and a pool, and exactly one of
nodeName, nodeSelector, allNodes, perDeviceNodeSelection. No allocation: there is no
kube-scheduler here."""

from __future__ import annotations

from typing import Any

from koordqueue.api import constants as c
from koordqueue.apiserver.validation import LABEL, go_quote, name_problems

CLAIM_KEY = f"{c.DRA_GROUP}/{c.RESOURCE_CLAIM_PLURAL}"
TEMPLATE_KEY = f"{c.DRA_GROUP}/{c.RESOURCE_CLAIM_TEMPLATE_PLURAL}"
SLICE_KEY = f"{c.DRA_GROUP}/{c.RESOURCE_SLICE_PLURAL}"
DEVICE_CLASS_KEY = f"{c.DRA_GROUP}/{c.DEVICE_CLASS_PLURAL}"
_EXACT_COUNT, _ALL = "ExactCount", "All"

Causes = list[tuple[str, str]]


def create_causes(key: str, obj: dict[str, Any]) -> Causes:
    """What kube-apiserver would refuse in a new DRA object (its defaults set first)."""
    if key == CLAIM_KEY:
        return _claim_spec(obj.get("spec"), "spec")
    if key == TEMPLATE_KEY:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [("spec", "Required value")]
        return _claim_spec(spec.get("spec"), "spec.spec")
    if key == SLICE_KEY:
        return _slice(obj.get("spec"))
    return []


def update_causes(key: str, obj: dict[str, Any], old: dict[str, Any]) -> Causes:
    """A claim's or template's spec is immutable (kube's ValidateResourceClaim(Template)Update)."""
    if key in (CLAIM_KEY, TEMPLATE_KEY):
        create_causes(key, obj)  # (defaults, as on create)
        if obj.get("spec") != old.get("spec"):
            return [("spec", "Invalid value: field is immutable")]
        return []
    return create_causes(key, obj)


def _claim_spec(spec: Any, at: str) -> Causes:
    if spec is None:
        return []
    if not isinstance(spec, dict):
        return [(at, "Invalid value: must be an object")]
    devices = spec.get("devices")
    if devices is None:
        return []
    if not isinstance(devices, dict):
        return [(f"{at}.devices", "Invalid value: must be an object")]
    requests = devices.get("requests") or []
    if not isinstance(requests, list):
        return [(f"{at}.devices.requests", "Invalid value: must be a list")]
    causes: Causes = []
    names: set[str] = set()
    for index, request in enumerate(requests):
        where = f"{at}.devices.requests[{index}]"
        if not isinstance(request, dict):
            causes.append((where, "Invalid value: must be an object"))
            continue
        name = request.get("name")
        if not isinstance(name, str) or name_problems(name, LABEL):
            text = name if isinstance(name, str) else ""
            causes += [(f"{where}.name", f"Invalid value: {go_quote(text)}: {problem}")
                       for problem in name_problems(text, LABEL)]
        elif name in names:
            causes.append((f"{where}.name", f'Duplicate value: "{name}"'))
        names.add(name if isinstance(name, str) else "")
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if (exactly is None) == (first is None):
            causes.append((where, "Required value: exactly one of `exactly` or `firstAvailable` is required"))
            continue
        for sub_index, sub in enumerate([exactly] if exactly is not None else first if isinstance(first, list) else []):
            causes += _device_request(sub, f"{where}.exactly" if exactly is not None
                                      else f"{where}.firstAvailable[{sub_index}]")
    return causes


def _device_request(request: Any, where: str) -> Causes:
    if not isinstance(request, dict):
        return [(where, "Invalid value: must be an object")]
    causes: Causes = []
    if not isinstance(request.get("deviceClassName"), str) or not request["deviceClassName"]:
        causes.append((f"{where}.deviceClassName", "Required value"))
    mode = request.setdefault("allocationMode", _EXACT_COUNT)
    if mode not in (_EXACT_COUNT, _ALL):
        causes.append((f"{where}.allocationMode", f'Unsupported value: "{mode}": supported values: "All", "ExactCount"'))
    if request.get("count") == 0:
        del request["count"]  # (omitempty: 0 is not set, and defaulted)
    if mode == _EXACT_COUNT:
        count = request.setdefault("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            causes.append((f"{where}.count", f"Invalid value: {count!r}: must be greater than zero"))
    elif "count" in request:
        causes.append((f"{where}.count", f"Invalid value: {request['count']!r}: must not be specified when "
                                         "allocationMode is 'All'"))
    return causes


def _slice(spec: Any) -> Causes:
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    causes: Causes = []
    if not isinstance(spec.get("driver"), str) or not spec["driver"]:
        causes.append(("spec.driver", "Required value"))
    pool = spec.get("pool")
    if not isinstance(pool, dict) or not pool.get("name"):
        causes.append(("spec.pool.name", "Required value"))
    elif not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] < 1:
        causes.append(("spec.pool.resourceSliceCount", "Invalid value: must be greater than zero"))
    where = [key for key in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(key)]
    if len(where) != 1:
        causes.append(("spec", "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                               "`perDeviceNodeSelection` is required"))
    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        causes.append(("spec.devices", "Invalid value: must be a list"))
    else:
        seen: set[str] = set()
        for index, device in enumerate(devices):
            name = device.get("name") if isinstance(device, dict) else None
            if not isinstance(name, str) or not name:
                causes.append((f"spec.devices[{index}].name", "Required value"))
            elif name in seen:
                causes.append((f"spec.devices[{index}].name", f'Duplicate value: "{name}"'))
            else:
                seen.add(name)
    return causes
