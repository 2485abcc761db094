"""Our views of the cluster: one informer per kind of object, each keeping a small projection
(views.py), and the lookups the parts share (a unit's job, what the engine is told a unit
asks for, how many of a job's pods run)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.quantity import QuantityError, parse_resource_list
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.dra import Claims
from koordqueue.controller.orphans import BARE_OFF, is_bare, orphan_reason
from koordqueue.controller.pods import PodIndex, PodView, pod_view
from koordqueue.controller.records import Records
from koordqueue.controller.resources import (
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    QUOTA_TREES,
    QUOTAS,
    UNITS,
)
from koordqueue.controller.scope import namespace_selected
from koordqueue.controller.views import (
    JOB_PLURALS,
    ORPHAN,
    JobView,
    Object,
    UnitView,
    adapter_of_kind,
    bare_unit_info,
    job_children,
    job_view,
    orphan_info,
    priority_classes_changed,
    unit_info,
    unit_view,
    with_priority_classes,
)
from koordqueue.engine.model import UnitInfo
from koordqueue.jobs import kind_named
from koordqueue.jobs.parents import Parent, queued
from koordqueue.jobs.placement import node_info
from koordqueue.kube.api import KubeAPI
from koordqueue.kube.client import Resource
from koordqueue.kube.errors import KubeError, NotFound
from koordqueue.kube.informer import Informer, trim

log = logging.getLogger(__name__)


def job_resource(kind: str, api_version: str | None = None) -> Resource:
    """The kind's resource in ``api_version`` (by default its own)."""
    return Resource.of(api_version or adapter_of_kind(kind).api_version, JOB_PLURALS[kind])


class Informers:
    def __init__(self, client: KubeAPI, config: ControllerConfig, records: Records) -> None:
        self.records = records  # (each job's fingerprint)
        self.priority_classes: dict[str, int] = {}
        self.pc_version = 0  # moves when PriorityClasses change: jobs' next views are made afresh
        self.pc = Informer(client, PRIORITY_CLASSES, project=_priority_value)
        self.node = Informer(client, NODES, project=node_info)
        # Namespaces' labels: whose jobs are queued (controller/scope.py).
        self.namespace = Informer(client, NAMESPACES, project=_labels)
        self.namespace_selector = config.namespace_selector
        self.system_namespace = config.system_namespace
        self.bare_units = config.bare_queue_units  # units no job of ours stands behind are queued
        self.quota = Informer(client, QUOTAS, project=_without_status)
        self.tree = Informer(client, QUOTA_TREES, project=_without_status)
        self.trees_served = True  # whether the API server serves ElasticQuotaTrees (start() finds out)
        self.queue = Informer(client, QUEUES, project=_without_status)
        self.unit = Informer(client, UNITS, project=unit_view)
        self.pod = Informer(client, PODS, project=pod_view)
        self.jobs: dict[str, Informer[JobView]] = {
            kind: Informer(client, job_resource(kind), project=self._project_job)
            for kind in sorted(config.job_kinds)
        }
        self.claims = Claims(client, config.dra_mappings)  # DRA: read only with mappings (controller/dra.py)
        self.pods = PodIndex()  # the pods of jobs, by their job's label
        # (label, namespace, value) a job's pods carry -> the jobs ("kind/namespace/name"): a
        # pod names its Ray cluster, not its RayJob, so pods are led to jobs by this, not by name.
        self._jobs_by_pods: dict[tuple[str, str, str], set[str]] = {}
        for kind, inf in self.jobs.items():
            inf.on_add(functools.partial(self._index_pods, kind, None))
            inf.on_update(functools.partial(self._index_pods, kind))
            inf.on_delete(functools.partial(self._unindex_pods, kind))
        self._client = client

    def all(self) -> list[Informer[Any]]:
        trees = [self.tree] if self.trees_served else []
        return [self.pc, self.namespace, self.node, *self.claims.informers(), self.quota, *trees, self.queue,
                self.unit, self.pod, *self.jobs.values()]

    async def start(self, quotas_listed: Callable[[], Awaitable[None]] | None = None) -> None:
        """Every list, until all have synced. `quotas_listed` runs as soon as the quotas, trees
        and Queues are listed, while the rest (the jobs, tens of pages at scale) still list: a
        first start writes its 1,000 Queues meanwhile instead of after (issue 36: the Queue
        writes came after the lists, all before the first cycle)."""
        # Priority classes and namespaces first for the jobs: their projections read them. The
        # quota side reads neither and starts at once.
        for first in (self.pc, self.namespace, self.quota, self.queue):
            first.start()
        await asyncio.gather(self._find_trees_served(), self._find_job_versions())
        quota_side = [self.quota, *([self.tree] if self.trees_served else []), self.queue]
        if self.trees_served:
            self.tree.start()

        async def then() -> None:
            for inf in quota_side:
                await inf.wait_synced()
            if quotas_listed is not None:
                await quotas_listed()

        side = asyncio.ensure_future(then())
        try:
            for first in (self.pc, self.namespace):
                await first.wait_synced()
            # Then all but the kinds a job we queue makes for itself (jobs/parents.py): their
            # jobs are projected once their owners are known, else each would look forged.
            children = [inf for kind, inf in self.jobs.items() if adapter_of_kind(kind).parent_kinds]
            rest = [inf for inf in self.all()[2:] if inf not in children and inf not in quota_side]
            for group in (rest, children):
                for inf in group:
                    inf.start()
                for inf in group:
                    await inf.wait_synced()
            await side
        finally:
            if not side.done():
                side.cancel()
                await asyncio.gather(side, return_exceptions=True)

    async def _find_trees_served(self) -> None:
        """ElasticQuotaTrees are read only where their CRD is installed: `helm upgrade` does not
        add a chart's new CRDs, and an informer of a resource not served would never sync
        (the controller would never start)."""
        try:
            await self._client.list(QUOTA_TREES, limit=1)
        except NotFound:
            self.trees_served = False
            log.warning("%s is not served (its CRD is not installed): quota trees are not read; "
                        "install %s.%s to use them", c.ELASTIC_QUOTA_TREE_KIND, c.ELASTIC_QUOTA_TREE_PLURAL,
                        c.QUOTA_GROUP)
        except KubeError:
            pass  # the informer retries like the others

    async def _find_job_versions(self) -> None:
        """A kind read in more than one version is read (and written) in the first of them the
        API server serves: the mpi-operator's MPIJob CRD serves v1alpha1 alone, and an informer
        of a version not served would never sync (the controller would never start)."""
        for kind, informer in self.jobs.items():
            versions = kind_named(kind).api_versions
            for api_version in versions if len(versions) > 1 else ():
                try:
                    await self._client.list(job_resource(kind, api_version), limit=1)
                except NotFound:
                    continue
                except KubeError:
                    break  # its own version, whose informer retries like the others
                if api_version != versions[0]:
                    log.warning("%s is not served in %s: read and written in %s", kind, versions[0], api_version)
                informer.resource = job_resource(kind, api_version)
                break

    def job_resource(self, kind: str) -> Resource:
        """Where the kind's jobs are read and written (the version served: _find_job_versions)."""
        return self.jobs[kind].resource

    def _project_job(self, obj: Object) -> JobView | None:
        """The job's view (None: not kept, a job we do not queue, as a RayJob's RayCluster); when
        only its suspension or status changed (our resume, the operator's conditions), the last
        view with those refreshed: reading pod templates again costs 50 times more."""
        kind = str(obj.get("kind") or "")
        adapter = adapter_of_kind(kind)
        meta = obj.get("metadata") or {}
        if not self.namespace_queued(str(meta.get("namespace") or "default")) \
                or not queued(adapter, obj, self.parent_of):
            return None
        item = f"{kind}/{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        fingerprint = _job_fingerprint(obj, self.pc_version)
        old = self._own_view(item)
        record = self.records.job(item)
        if old is not None and old.invalid is None and record is not None and record.fingerprint == fingerprint:
            try:
                return replace(old, suspended=adapter.is_suspended(obj), state=adapter.status(obj),
                               finishes_once_resumed=adapter.finishes_once_resumed(obj),
                               deleting=bool(meta.get("deletionTimestamp")),
                               enqueued=bool((meta.get("annotations") or {}).get(c.ANNOTATION_JOB_HAS_ENQUEUED)),
                               suspend_annotated=(meta.get("annotations") or {}).get(c.ANNOTATION_SUSPEND) == c.TRUE,
                               # a RayJob's pods are found by its status (its Ray cluster's name)
                               pods=next(iter(adapter.pod_selector(obj).items()), None),
                               children=job_children(adapter, obj))  # (KubeRay names its cluster in status)
            except InvalidObject:
                pass
        self.records.job_to_write(item).fingerprint = fingerprint
        return job_view(obj, adapter, self.priority_classes)

    def namespace_queued(self, namespace: str) -> bool:
        """Whether jobs of ``namespace`` are queued (a namespace not seen yet: by its name alone).
        A namespace's labels are read as its jobs change: a label put on later takes effect
        for each of its jobs at the job's next change."""
        return namespace_selected(self.namespace_selector, namespace, self.namespace.get(namespace))

    def parent_of(self, kind: str, namespace: str, name: str) -> Parent | None:
        """The job we queue there (jobs/parents.py), as our informer has it."""
        informer = self.jobs.get(kind)
        job = informer.get(f"{namespace}/{name}") if informer is not None else None
        if job is None:
            return None
        try:
            asks = parse_resource_list((job.unit_spec or {}).get("resource"))
        except QuantityError:
            asks = {}
        return Parent(job.uid, {k: (n, most) for k, n, most in job.children}, asks)

    def _own_view(self, item: str) -> JobView | None:
        """The job's view as its informer keeps it (not charged for its claims)."""
        kind, _, key = item.partition("/")
        informer = self.jobs.get(kind)
        return informer.get(key) if informer is not None else None

    def job_view(self, item: str) -> JobView | None:
        """Our view of the job ``kind/namespace/name``, if we have one, as of the PriorityClasses
        there are now, charged for its claims as the templates and claims are now (dra.py)."""
        job = self._own_view(item)
        if job is not None and job.priority_classes and priority_classes_changed(job, self.priority_classes):
            job = with_priority_classes(job, self.priority_classes)
        return self.claims.charged(job) if job is not None else None

    def job_of(self, unit: UnitView) -> JobView | None:
        """The job that stands behind the unit (None for a bare unit, even one whose consumerRef
        names a job of ours: that job has a unit of its own)."""
        return None if is_bare(unit, self.jobs) else self.job_view(unit.job_key)

    def bare(self, unit: UnitView) -> bool:
        """Whether the unit is queued on its own, as its object says (orphans.is_bare), bare
        units being on (--bare-queue-units)."""
        return self.bare_units and is_bare(unit, self.jobs)

    def queue_exists(self, name: str, namespace: str) -> bool:
        return self.queue.get(f"{self.system_namespace}/{name}") is not None or \
            self.queue.get(f"{namespace}/{name}") is not None

    def job_ended(self, item: str) -> bool:
        """Whether our latest view of the job says it succeeded or failed."""
        job = self.job_view(item)
        return job is not None and job.state.ended

    def orphan_reason(self, unit: UnitView) -> str | None:
        """Why the unit stands for no job and waits (None: a job's unit, or a bare one queued on its own)."""
        if self.bare(unit):
            return None
        reason = orphan_reason(unit, self.jobs)
        return f"{reason}; {BARE_OFF}" if reason is not None and is_bare(unit, self.jobs) else reason

    def unit_info(self, unit: UnitView) -> UnitInfo:
        """The engine's view of a unit: what its job asks for (see views.unit_info), or why it
        stands for no job."""
        if self.bare(unit):
            return bare_unit_info(unit, self.queue_exists)
        orphan = self.orphan_reason(unit)
        job = self.job_of(unit)
        if orphan is not None or job is None:
            return orphan_info(unit, orphan or ORPHAN)
        return unit_info(unit, job)

    def _index_pods(self, kind: str, old: JobView | None, new: JobView | None) -> None:
        """Keep ``_jobs_by_pods`` as the job's view says (before any other handler reads it)."""
        was, now = _pods_key(old), _pods_key(new)
        if was == now:
            return
        if was is not None and old is not None:
            jobs = self._jobs_by_pods.get(was)
            if jobs is not None:
                jobs.discard(f"{kind}/{old.key}")
                if not jobs:
                    del self._jobs_by_pods[was]
        if now is not None and new is not None:
            self._jobs_by_pods.setdefault(now, set()).add(f"{kind}/{new.key}")

    def _unindex_pods(self, kind: str, old: JobView) -> None:
        self._index_pods(kind, old, None)

    def jobs_of_pod(self, pod: PodView) -> list[tuple[str, JobView]]:
        """The jobs whose pods carry the pod's job label: ("kind/namespace/name", view) each."""
        found = []
        for item in sorted(self._jobs_by_pods.get(pod.job, ())):
            kind, _, key = item.partition("/")
            job = self.jobs[kind].get(key)
            if job is not None:
                found.append((item, job))
        return found

    def pods_key(self, job: JobView) -> tuple[str, str, str]:
        """How the job's pods are found in the pod index: (the label naming the job, namespace, its value)."""
        label = job.pods[0] if job.pods else c.LABEL_JOB_NAME
        value = job.pods[1] if job.pods else job.name
        return (label, job.namespace, value)

    def pod_count(self, job: JobView) -> Any:
        return self.pods.count(*self.pods_key(job))


def _pods_key(job: JobView | None) -> tuple[str, str, str] | None:
    """Where a job's pods are indexed (PodView.job), when known."""
    return (job.pods[0], job.namespace, job.pods[1]) if job is not None and job.pods is not None else None


# A job's annotations its unit is not made from: we write them at each suspension and resume.
_UNREAD_ANNOTATIONS = frozenset({c.ANNOTATION_SUSPEND, c.ANNOTATION_JOB_HAS_ENQUEUED,
                                 c.ANNOTATION_JOB_ENQUEUE_TIMESTAMP, c.ANNOTATION_JOB_DEQUEUE_TIMESTAMP})


def _job_fingerprint(obj: Object, pc_version: int) -> int:
    """A hash of what a job's unit is made from: all but its suspension and status."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if isinstance(spec, dict) and ("suspend" in spec or isinstance(spec.get("runPolicy"), dict)):
        spec = {k: v for k, v in spec.items() if k != "suspend"}
        if isinstance(spec.get("runPolicy"), dict):
            spec["runPolicy"] = {k: v for k, v in spec["runPolicy"].items() if k != "suspend"}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and not _UNREAD_ANNOTATIONS.isdisjoint(annotations):
        annotations = {k: v for k, v in annotations.items() if k not in _UNREAD_ANNOTATIONS}
    try:
        return hash(orjson.dumps([meta.get("uid"), meta.get("creationTimestamp"), meta.get("labels"), annotations,
                                  spec, pc_version], option=orjson.OPT_SORT_KEYS))
    except TypeError:
        return id(obj)  # not JSON as we know it: never equal to another


def _without_status(obj: Object) -> Object:
    """Quotas, quota trees and Queues as cached: their status is ours, written from the engine, never read."""
    obj = trim(obj)
    obj.pop("status", None)
    return obj


def _labels(obj: Object) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _priority_value(obj: Object) -> int | None:
    value = obj.get("value")
    return value if isinstance(value, int) else None
