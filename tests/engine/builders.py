"""Small builders for engine tests: quotas, queues and units in whole units.

Amounts are written in whole units (``gpu=4`` is 4 GPUs, ``cpu=8`` is 8 cores); a bare
int means GPUs, the resource most tests are about.
"""

from __future__ import annotations

from dataclasses import replace

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine import Engine
from koordqueue.engine.model import (
    EngineConfig,
    NodeInfo,
    PodSetInfo,
    QueueInfo,
    QuotaInfo,
    ResourceList,
    Taint,
    UnitInfo,
    auto_queue_for,
)

G = 1000  # one whole unit in milli-units
GPU = "nvidia.com/gpu"
CPU = "cpu"
MEM = "memory"
NAMES = {"gpu": GPU, "cpu": CPU, "mem": MEM}

Amounts = int | dict[str, int]


def res(amounts: Amounts) -> ResourceList:
    """``4`` -> 4 GPUs; ``{"cpu": 8, "gpu": 1}`` -> 8 cores and 1 GPU (milli-units)."""
    if isinstance(amounts, int):
        return {GPU: amounts * G}
    return {NAMES.get(name, name): amount * G for name, amount in amounts.items()}


def quota(
    name: str,
    min_: Amounts,
    max_: Amounts,
    parent: str | None = None,
    weight: Amounts | None = None,
    policy: QueuePolicy = QueuePolicy.PRIORITY,
    lend: bool = True,
    is_parent: bool = False,
    ns: str = "default",
    namespaces: tuple[str, ...] = (),
    threshold: int | None = None,
) -> QuotaInfo:
    return QuotaInfo(
        name=name,
        namespace=ns,
        min=res(min_),
        max=res(max_),
        parent=parent,
        shared_weight=None if weight is None else res(weight),
        policy=policy,
        allow_lent=lend,
        is_parent=is_parent,
        namespaces=frozenset(namespaces),
        priority_threshold=threshold,
    )


def parent(name: str, min_: Amounts, max_: Amounts, **kwargs: object) -> QuotaInfo:
    return quota(name, min_, max_, is_parent=True, **kwargs)  # type: ignore[arg-type]


def unit(
    name: str,
    request: Amounts,
    quota_name: str | None = None,
    priority: int = 0,
    created: float = 0.0,
    ns: str = "default",
    queue: str | None = None,
    preemptible: bool = True,
) -> UnitInfo:
    return UnitInfo(
        namespace=ns,
        name=name,
        priority=priority,
        created=created,
        request=res(request),
        queue_name=queue,
        quota_name=quota_name,
        preemptible=preemptible,
    )


def queue_of(q: QuotaInfo, **changes: object) -> QueueInfo:
    """The quota's own Queue, with some settings changed (priority, preemption...)."""
    return replace(auto_queue_for(q), **changes)  # type: ignore[arg-type]


def engine_with(*quotas: QuotaInfo, capacity: Amounts | None = None, **config: object) -> Engine:
    """An engine with these quotas and their own Queues; ``config`` sets EngineConfig fields."""
    engine = Engine(EngineConfig(cluster_capacity=None if capacity is None else res(capacity), **config))  # type: ignore[arg-type]
    for q in quotas:
        engine.set_quota(q)
        if not q.is_parent:
            engine.set_queue(auto_queue_for(q))
    return engine


def used(engine: Engine, resource: str = GPU) -> dict[str, int]:
    """Whole units of ``resource`` admitted per quota (its subtree for a parent)."""
    return {name: s.used.get(resource, 0) // G for name, s in engine.quota_status().items()}


def runtime(engine: Engine, resource: str = GPU) -> dict[str, int]:
    return {name: s.runtime.get(resource, 0) // G for name, s in engine.quota_status().items()}


def keys(items: list) -> list[str]:  # type: ignore[type-arg]
    """The unit keys of admissions or preemptions, in order."""
    return [item.unit for item in items]


def settle(engine: Engine, now: float, limit: int = 50) -> list[str]:
    """Run cycles at ``now`` until the engine has nothing left to do at this time;
    return every unit admitted meanwhile."""
    admitted: list[str] = []
    for _ in range(limit):
        result = engine.schedule(now)
        admitted += keys(result.admitted)
        if result.next_wakeup is None or result.next_wakeup > now:
            return admitted
    raise AssertionError(f"the engine still has work at t={now} after {limit} cycles")


def node(name: str, gpus: int = 8, cpu: int = 96, labels: dict[str, str] | None = None,
         taints: tuple[Taint, ...] = (), unschedulable: bool = False) -> NodeInfo:
    """A node with ``gpus`` GPUs and ``cpu`` cores (and its hostname label)."""
    return NodeInfo(name, {GPU: gpus * G, CPU: cpu * G}, {"kubernetes.io/hostname": name, **(labels or {})},
                    taints, unschedulable)


def pod_set(name: str = "worker", count: int = 1, gpus: int = 8, cpu: int = 8, **fields: object) -> PodSetInfo:
    """``count`` pods of ``gpus`` GPUs and ``cpu`` cores each; ``fields`` sets the rest
    (min_count, node_selector, tolerations, topology...)."""
    return PodSetInfo(name, count, {GPU: gpus * G, CPU: cpu * G}, **fields)  # type: ignore[arg-type]


def gang(name: str, *pod_sets: PodSetInfo, quota_name: str | None = None, priority: int = 0,
         created: float = 0.0, ns: str = "default") -> UnitInfo:
    """A unit whose request is the sum of its pod sets."""
    request: ResourceList = {}
    for ps in pod_sets:
        for resource, amount in ps.request.items():
            request[resource] = request.get(resource, 0) + ps.count * amount
    return UnitInfo(ns, name, priority, created, request, quota_name=quota_name, pod_sets=pod_sets)


def with_nodes(engine: Engine, *nodes: NodeInfo) -> Engine:
    for n in nodes:
        engine.set_node(n)
    return engine
