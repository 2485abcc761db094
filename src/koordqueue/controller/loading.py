"""Loading an engine from the objects' status: what a restarted controller does, and what
`koord-queue status` and `explain` do (a Snapshot: the cluster read once) to see the queue
as the controller sees it, with the settings it published (loader.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from koordqueue.api import constants as c
from koordqueue.api.dra import DeviceClassMappings, parse_mappings
from koordqueue.api.meta import InvalidObject
from koordqueue.api.objects import is_koordinators_own, parse_queue
from koordqueue.api.quantity import QuantityError, parse_resource_list
from koordqueue.api.quotatree import choose_tree, parse_quota_tree
from koordqueue.controller.dra import charged_view
from koordqueue.controller.orphans import is_bare, orphan_reason
from koordqueue.controller.pods import pod_view
from koordqueue.controller.resources import (
    CONFIG_MAPS,
    DEPLOYMENTS,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    QUOTA_TREES,
    QUOTAS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    UNITS,
)
from koordqueue.controller.systemquotas import Charging, SystemQuotaUsage, shared_total
from koordqueue.controller.unitsync import load_unit
from koordqueue.controller.views import (
    JOB_PLURALS,
    JobView,
    UnitView,
    adapter_of_kind,
    bare_unit_info,
    job_view,
    unit_info,
    unit_view,
)
from koordqueue.engine import Engine, messages
from koordqueue.engine.model import QuotaInfo, ResourceList
from koordqueue.jobs import kind_named
from koordqueue.jobs.parents import Parent, parent_from, queued
from koordqueue.kube.client import KubeClient, Object, Resource
from koordqueue.kube.errors import KubeError, NotFound
from koordqueue.kube.informer import key_of
from koordqueue.loader import Settings

BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"  # pods taking room on a node


def quota_age(obj: Object) -> tuple[str, str]:
    """Oldest first (creationTimestamp is RFC 3339 in UTC: text order is time order), then
    by namespace: of ElasticQuotas that share a name, the first is used."""
    meta = obj.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("namespace") or "")


@dataclass
class Snapshot:
    engine: Engine
    settings: Settings = field(default_factory=Settings)
    settings_source: str = ""  # where the settings come from, in words
    quotas: dict[str, QuotaInfo] = field(default_factory=dict)
    units: dict[str, UnitView] = field(default_factory=dict)
    queue_quotas: dict[str, str | None] = field(default_factory=dict)  # queue key -> bound quota
    capacity: ResourceList | None = None
    problems: list[str] = field(default_factory=list)  # objects that could not be read
    priority_classes: dict[str, int] = field(default_factory=dict)  # name -> value
    # unit key -> its job's annotation koord-queue/expected-runtime and max-exec-time (the forecast's)
    job_runtimes: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)
    # DRA: DeviceClass -> quota resource (the controller's --device-class-mappings), and the
    # ResourceClaimTemplates and ResourceClaims by namespace then name, to charge jobs' claims
    # as the controller does (controller/dra.py)
    mappings: DeviceClassMappings = field(default_factory=dict)
    claim_templates: dict[str, dict[str, Object]] = field(default_factory=dict)
    claims: dict[str, dict[str, Object]] = field(default_factory=dict)
    charger: Callable[[JobView], JobView] | None = None  # the leader's (its informers'), for its dry runs

    def charged(self, job: JobView) -> JobView:
        """``job``'s view charged for its pods' claims, as the controller charges it."""
        if self.charger is not None:
            return self.charger(job)
        if not self.mappings or not job.pod_claims or job.unit_spec is None:
            return job
        return charged_view(job, self.claim_templates.get(job.namespace, {}), self.claims.get(job.namespace, {}),
                            self.mappings)


async def controller_mappings(client: KubeClient, namespace: str) -> tuple[DeviceClassMappings, str | None]:
    """The --device-class-mappings of the controller's Deployment in ``namespace`` (the chart's
    deviceClassMappings), and what stopped reading them, if anything."""
    flag = "--device-class-mappings="
    try:
        deployments = (await client.list_all(DEPLOYMENTS, namespace=namespace)).items
    except KubeError as e:
        return {}, f"Deployments in {namespace} not listed ({e}): claims are charged nothing"
    for dep in deployments:
        for container in ((((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
                          or []):
            for arg in container.get("args") or []:
                if isinstance(arg, str) and arg.startswith(flag):
                    try:
                        return parse_mappings(arg[len(flag):]), None
                    except ValueError as e:
                        return {}, f"Deployment {key_of(dep)}: {flag[:-1]}: {e}"
    return {}, None


async def load_claims(client: KubeClient, snap: Snapshot) -> None:
    """The ResourceClaimTemplates and ResourceClaims, when there are mappings to charge them through."""
    for resource, into in ((RESOURCE_CLAIM_TEMPLATES, snap.claim_templates), (RESOURCE_CLAIMS, snap.claims)):
        try:
            items = (await client.list_all(resource)).items
        except KubeError as e:
            snap.problems.append(f"{resource.plural} not listed ({e}): claims are charged as not found")
            continue
        for obj in items:
            meta = obj.get("metadata") or {}
            into.setdefault(str(meta.get("namespace") or ""), {})[str(meta.get("name") or "")] = obj


async def read_settings(client: KubeClient, namespace: str) -> tuple[Settings, str, list[str]]:
    """The settings the controller published in ``namespace`` (loader.py), where they come
    from in words, and what in them could not be read; the defaults when there are none."""
    where = f"ConfigMap {namespace}/{c.SETTINGS_CONFIG_MAP}"
    try:
        obj = await client.get(CONFIG_MAPS, c.SETTINGS_CONFIG_MAP, namespace=namespace)
    except NotFound:
        return Settings(), (f"the defaults: the controller's settings are not published ({where} not found; "
                            "is the controller running in that namespace?)"), []
    except KubeError as e:
        return Settings(), f"the defaults: {where} could not be read ({e})", []
    settings, problems = Settings.from_data(obj.get("data") or {})
    return settings, f"the controller's, from {where}", [f"{where}: {p}" for p in problems]


async def take_snapshot(client: KubeClient, namespace: str = c.SYSTEM_NAMESPACE,
                        mappings: DeviceClassMappings | None = None) -> Snapshot:
    """Read the controller's settings (in ``namespace``), quotas, queues, units and nodes
    and load them into a fresh engine as the controller does. ``mappings``: the DRA device
    class mappings to charge claims through (None: the controller Deployment's flag)."""
    settings, source, problems = await read_settings(client, namespace)
    snap = Snapshot(Engine(settings.engine_config()), settings, source, problems=problems)
    if mappings is None:
        mappings, problem = await controller_mappings(client, namespace)
        if problem is not None:
            snap.problems.append(problem)
    snap.mappings = mappings
    if mappings:
        await load_claims(client, snap)
    allocatables: list[ResourceList] = []
    for node in (await client.list_all(NODES)).items:
        try:
            allocatables.append(parse_resource_list((node.get("status") or {}).get("allocatable") or {}))
        except QuantityError as e:
            snap.problems.append(f"node {node['metadata'].get('name')}: {e}")
    nodes_total = settings.capacity(allocatables)
    snap.capacity = nodes_total
    snap.engine.set_cluster_capacity(snap.capacity)
    try:
        trees = (await client.list_all(QUOTA_TREES)).items
    except NotFound:  # the CRD is not installed: no tree
        trees = []
    quota_objs = (await client.list_all(QUOTAS)).items
    if not load_tree(snap, trees):
        load_elastic_quotas(snap, quota_objs)
    # As the controller's: auto mode is on once Koordinator's own quotas are there, and then
    # the quotas share the nodes less what its system and default quotas use.
    snap.engine.set_koordinator(settings.beside_koordinator(any(is_koordinators_own(o) for o in quota_objs)))
    if snap.engine.koordinator:
        usage = SystemQuotaUsage()
        usage.set_rules(Charging(quota_objs, snap.quotas))
        try:
            pods = (await client.list_all(PODS, field_selector=BOUND_PODS)).items
        except KubeError as e:
            pods = []
            snap.problems.append(f"pods not listed ({e}): the quotas are taken to share the nodes whole, not less "
                                 "what Koordinator's system and default quotas use")
        for pod in pods:
            view = pod_view(pod)
            if view is not None:
                usage.put(view)
        snap.capacity = shared_total(nodes_total, usage.used)
        snap.engine.set_cluster_capacity(snap.capacity)
    for obj in (await client.list_all(QUEUES)).items:
        try:
            queue = parse_queue(obj, list(snap.quotas), {c.SYSTEM_NAMESPACE, namespace}).queue
            snap.engine.set_queue(queue)
            snap.queue_quotas[queue.key] = queue.quota
        except InvalidObject as e:
            snap.problems.append(str(e))
    priority_classes = {key_of(pc): pc["value"] for pc in (await client.list_all(PRIORITY_CLASSES)).items
                        if isinstance(pc.get("value"), int)}
    snap.priority_classes = priority_classes
    listed: dict[str, list[Object]] = {}  # by kind (a kind not served here: no job of it)
    for kind in sorted(settings.job_kinds & set(JOB_PLURALS)):
        listed[kind] = []
        for api_version in kind_named(kind).api_versions:  # the first served, as the informers read it
            try:
                listed[kind] = (await client.list_all(Resource.of(api_version, JOB_PLURALS[kind]))).items
                break
            except NotFound:
                continue
    by_key = {(kind, key_of(o)): o for kind, objs in listed.items() for o in objs}

    def parent_of(kind: str, namespace: str, name: str) -> Parent | None:
        found = by_key.get((kind, f"{namespace}/{name}"))
        return parent_from(adapter_of_kind(kind), found) if found is not None else None

    jobs: dict[str, dict[str, JobView]] = {  # by kind, as the informers key them
        kind: {key_of(o): snap.charged(job_view(o, adapter_of_kind(kind), priority_classes)) for o in objs
               if queued(adapter_of_kind(kind), o, parent_of)} for kind, objs in listed.items()}
    now = time.time()
    for obj in (await client.list_all(UNITS)).items:
        unit = unit_view(obj)
        snap.units[unit.key] = unit
        if is_bare(unit, jobs):  # queued on its own, as the controller does by default (--bare-queue-units)
            load_unit(snap.engine, unit, bare_unit_info(unit, lambda name, ns: bool(
                {f"{namespace}/{name}", f"{ns}/{name}"} & snap.queue_quotas.keys())), now)
            continue
        orphan = orphan_reason(unit, jobs)
        if orphan is not None:  # as the controller does: it waits, holding nothing
            load_unit(snap.engine, unit, None, now, orphan=orphan)
            continue
        job = jobs[unit.consumer_kind][f"{unit.namespace}/{unit.consumer_name}"]
        snap.job_runtimes[unit.key] = (job.expected_runtime, job.max_execution_seconds)
        load_unit(snap.engine, unit, unit_info(unit, job), now)
    return snap


def load_tree(snap: Snapshot, trees: list[Object]) -> bool:
    """Load the quotas of the ElasticQuotaTree in use, as the controller does (quotasync.py);
    False when there is none (the ElasticQuotas hold the quotas)."""
    tree, refused = choose_tree(trees)
    for obj, why in refused:
        meta = obj.get("metadata") or {}
        snap.problems.append(f"{c.ELASTIC_QUOTA_TREE_KIND} {meta.get('namespace')}/{meta.get('name')}: {why}")
    if tree is None:
        return False
    try:
        parsed = parse_quota_tree(tree, snap.settings.quota)
    except InvalidObject as e:
        snap.problems.append(str(e))
        return True
    snap.problems += parsed.problems
    for quota in parsed.quotas.values():
        snap.quotas[quota.name] = quota
        snap.engine.set_quota(quota)
    return True


def load_elastic_quotas(snap: Snapshot, objs: list[Object]) -> None:
    used: dict[str, Object] = {}  # quota name -> the object used under it
    for obj in sorted(objs, key=quota_age):
        if is_koordinators_own(obj):
            continue
        meta = obj.get("metadata") or {}
        first = used.setdefault(str(meta.get("name", "")), obj)
        if first is not obj:
            snap.problems.append(
                f"ElasticQuota {meta.get('namespace')}/{meta.get('name')}: the name is taken by the ElasticQuota "
                f"in namespace {(first.get('metadata') or {}).get('namespace')} (quota names are cluster-wide)")
            continue
        try:
            quota = snap.settings.quota(obj).quota
        except (InvalidObject, QuantityError) as e:
            snap.problems.append(str(e))
            continue
        snap.quotas[quota.name] = quota
        snap.engine.set_quota(quota)


def look_now(snap: Snapshot, now: float) -> dict[str, str]:
    """Run on the snapshot the cycle the controller would run now, for its views to know
    what only a cycle works out (who blocks a queue, which room is held for whom), then
    undo its decisions: the objects say who holds quota, and so must the views. Returns,
    for each unit the cycle admitted, why it still waits: only for the controller's next
    cycle (it admits it then, preempting the same victims)."""
    result = snap.engine.schedule(now)
    victims: dict[str, list[str]] = {}
    for preemption in result.preempted:
        victims.setdefault(preemption.preemptor, []).append(preemption.unit)
        unit, info = snap.units.get(preemption.unit), snap.engine.unit(preemption.unit)
        if unit is not None and info is not None:
            load_unit(snap.engine, unit, info, now)  # it holds its quota again, as its object says
    for admission in result.admitted:
        snap.engine.revert_admission(admission.unit)
    return {a.unit: messages.next_cycle(victims.get(a.unit, [])) for a in result.admitted}
