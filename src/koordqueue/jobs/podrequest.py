"""What one pod asks for, computed as the kube-scheduler does.

Containers run together, so their requests add up; init containers run one at a time
before them, so the pod needs the larger of the two; sidecars (init containers with
``restartPolicy: Always``) keep running, so they add to both. A resource with a limit
but no request requests its limit. Pod-level ``spec.resources`` (PodLevelResources, on since
1.34) replace the containers' sum for what they name (cpu, memory, hugepages-*): kube-scheduler
reserves them. ``spec.overhead`` (the RuntimeClass's) comes on top. A container asking for a share of a
GPU in Koordinator's resources is counted as koord-manager's pod webhook rewrites it before
koord-scheduler charges it (``as_koord_manager_writes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordqueue.api.constants import (
    CPU,
    HUGEPAGES_PREFIX,
    KOORD_GPU,
    KOORD_GPU_CORE,
    KOORD_GPU_MEMORY_RATIO,
    KOORD_GPU_SHARE_RESOURCES,
    KOORD_GPU_SHARED,
    MEMORY,
)
from koordqueue.api.meta import InvalidObject, section
from koordqueue.api.quantity import (
    QuantityError,
    ResourceList,
    add,
    format_quantity,
    maximum,
    parse_resource_list,
)

_ALWAYS = "Always"


def pod_request(template: object, where: str) -> ResourceList:
    """The request of one pod made from ``template`` (a PodTemplateSpec), in milli-units."""
    if not isinstance(template, Mapping):
        raise InvalidObject(f"{where}: template is missing or not a mapping")
    spec = section(template, "spec", f"{where}: template", required=True)
    containers = _containers(spec, "containers", where)
    if not containers:
        raise InvalidObject(f"{where}: template.spec.containers is empty; a pod needs at least one container")
    total: ResourceList = {}
    for index, container in enumerate(containers):
        total = add(total, as_koord_manager_writes(_container_request(container, f"{where}: containers[{index}]")))
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for index, container in enumerate(_containers(spec, "initContainers", where)):
        request = _container_request(container, f"{where}: initContainers[{index}]")
        if container.get("restartPolicy") == _ALWAYS:
            sidecars = add(sidecars, request)
            init_peak = maximum(init_peak, sidecars)
        else:
            init_peak = maximum(init_peak, add(request, sidecars))
    total = _with_pod_level(maximum(add(total, sidecars), init_peak), spec, where)
    return add(total, _resources(spec.get("overhead"), f"{where}: template.spec.overhead"))


def _with_pod_level(containers: ResourceList, spec: Mapping[str, Any], where: str) -> ResourceList:
    """The containers' request with the pod-level one over it, as kube-scheduler's PodRequests
    (component-helpers) reads a pod that kube-apiserver 1.37 defaulted (DefaultPodLevelResources):
    a pod-level request replaces the containers' for its resource; a pod-level limit without a
    request is the request of a hugepage, and of cpu or memory the containers do not ask for.
    Other names, or a request below the containers', kube-apiserver refuses: the job could never run."""
    at = f"{where}: template.spec.resources"
    resources = section(spec, "resources", f"{where}: template.spec")
    requests = _resources(resources.get("requests"), f"{at}.requests")
    limits = _resources(resources.get("limits"), f"{at}.limits")
    for part, amounts in (("requests", requests), ("limits", limits)):
        for name in amounts:
            if not _pod_level(name):
                raise InvalidObject(f"{at}.{part}: {name}: not supported at pod level (only {CPU}, {MEMORY} "
                                    f"and {HUGEPAGES_PREFIX}*); kube-apiserver refuses such pods")
    out = dict(containers)
    for name, limit in limits.items():
        if name not in requests and (name not in containers or name.startswith(HUGEPAGES_PREFIX)):
            out[name] = limit
    for name, request in requests.items():
        if request < containers.get(name, 0):
            raise InvalidObject(f"{at}.requests: {name}: {format_quantity(request)} is less than its containers "
                                f"ask ({format_quantity(containers[name])}); kube-apiserver refuses such pods")
        out[name] = request
    return out


def _pod_level(name: str) -> bool:
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def as_koord_manager_writes(request: ResourceList) -> ResourceList:
    """A container's request as koord-manager's pod webhook (v1.8.0, DeviceResourceSpec: its
    containers only, not init containers) leaves it, which is what koord-scheduler's
    ElasticQuota plugin charges: ``koordinator.sh/gpu: N`` (percent of a GPU) becomes
    ``gpu-core: N`` and ``gpu-memory-ratio: N``; ``gpu.shared`` (the GPUs shared), when not
    asked, is 1, or the memory ratio / 100 when that is a multiple of 100 above 100 (a ratio
    absent, the same of gpu-core, which the webhook reads from the ratio: 0)."""
    if not any(name in request for name in KOORD_GPU_SHARE_RESOURCES):
        return request
    out = dict(request)
    gpu = out.pop(KOORD_GPU, None)
    if gpu is not None:
        out[KOORD_GPU_CORE] = out[KOORD_GPU_MEMORY_RATIO] = gpu
    if KOORD_GPU_SHARED not in out:
        shared = 1
        ratio, core = out.get(KOORD_GPU_MEMORY_RATIO), out.get(KOORD_GPU_CORE)
        asked = ratio if ratio is not None else core
        if asked is not None and asked // 1000 > 100 and (asked // 1000) % 100 == 0:
            shared = (asked // 1000) // 100 if ratio is not None else 0
        out[KOORD_GPU_SHARED] = shared * 1000
    return out


def _containers(spec: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise InvalidObject(f"{where}: template.spec.{key} must be a list of containers")
    return value


def _container_request(container: Mapping[str, Any], where: str) -> ResourceList:
    name = container.get("name")
    if isinstance(name, str) and name:
        where = f"{where} ({name})"
    resources = section(container, "resources", where)
    limits = _resources(resources.get("limits"), f"{where}: resources.limits")
    requests = _resources(resources.get("requests"), f"{where}: resources.requests")
    for part, amounts in (("limits", limits), ("requests", requests)):
        for name, amount in amounts.items():
            if _extended(name) and amount % 1000:
                raise InvalidObject(
                    f"{where}: resources.{part}: {name}: {amount / 1000:g} is not a whole number "
                    "(extended resources such as GPUs are counted in whole units)")
    return {**limits, **requests}


def _extended(name: str) -> bool:
    """An extended resource (``nvidia.com/gpu``): a domain of its own, not kubernetes.io's.
    The API server refuses pods asking for a fraction of one, so such a job could never run."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _resources(value: object, where: str) -> ResourceList:
    try:
        return parse_resource_list(value)
    except QuantityError as err:
        raise InvalidObject(f"{where}: {err}") from None
