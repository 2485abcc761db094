"""Which jobs are part of another job we queue, and so are not queued themselves.

KubeRay makes a RayCluster and a submitter Job for each RayJob, each controlled by it (an
ownerReference): the RayJob is queued for them, once. An ownerReference is written by
whoever creates the object, though, tenants included: a Job naming a PyTorchJob that does
not exist as its controller was let run unqueued. So a claimed owner is trusted only when
it is of a kind that makes jobs of this kind (``JobAdapter.parent_kinds``), of a kind we
queue, and exists with that uid; any other claim is ignored and the job queued as any (as
Kueue suspends a child whose parent has no admitted Workload). A real owner is named by
anyone who reads it, though: a Job naming a running RayJob as its controller ran 8 GPUs past
a quota of 4. So the owner must also make that very job: it bears the name the owner gives
it (``JobAdapter.children``: KubeRay's cluster is named in the RayJob's status, which only
KubeRay writes), and asks no more than the owner lets it (the cluster no more than the
RayJob, the submitter no more than KubeRay's default submitter). ``ParentOf`` looks owners
up: the controller in its informers, the webhook from the API server."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from koordqueue.api.meta import InvalidObject
from koordqueue.api.quantity import QuantityError, ResourceList
from koordqueue.jobs.base import Job, JobAdapter


@dataclass(frozen=True)
class Parent:
    """A job we queue, as a job it may have made sees it: its uid, and per kind the name of
    the job it makes and the most that job may ask (None: as much as the parent asks)."""

    uid: str
    children: Mapping[str, tuple[str, ResourceList | None]]
    asks: ResourceList


ParentOf = Callable[[str, str, str], Parent | None]
"""(kind, namespace, name) -> that job when we queue its kind and it exists, else None."""


@dataclass(frozen=True)
class Owner:
    """A controller ownerReference naming a kind that makes jobs of the job's kind."""

    kind: str
    namespace: str
    name: str
    uid: str


def claimed_owner(adapter: JobAdapter, job: Job) -> Owner | None:
    """The job's controller, when it names one of ``adapter.parent_kinds`` (never raises)."""
    from koordqueue.jobs import ADAPTERS  # (the registry imports the adapters, which import this)

    if not adapter.parent_kinds:
        return None
    meta = job.get("metadata")
    owners = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for owner in owners if isinstance(owners, list) else ():
        if not isinstance(owner, Mapping) or owner.get("controller") is not True:
            continue
        named = ADAPTERS.get((owner.get("apiVersion"), owner.get("kind")))  # type: ignore[arg-type]
        name, uid = owner.get("name"), owner.get("uid")
        if named is not None and named.kind in adapter.parent_kinds and isinstance(name, str) and name \
                and isinstance(uid, str) and uid:
            assert isinstance(meta, Mapping)
            return Owner(named.kind, str(meta.get("namespace") or "default"), name, uid)
    return None


def queued(adapter: JobAdapter, job: Job, parent_of: ParentOf) -> bool:
    """Whether we queue ``job`` (never raises): not when a job we queue, there with the uid
    its ownerReference names, made it for itself: under the name it gives it, asking no more
    than it lets it."""
    owner = claimed_owner(adapter, job)
    if owner is None:
        return True
    parent = parent_of(owner.kind, owner.namespace, owner.name)
    if parent is None or parent.uid != owner.uid:
        return True
    made = parent.children.get(adapter.kind)
    meta = job.get("metadata")
    if made is None or not isinstance(meta, Mapping) or meta.get("name") != made[0]:
        return True
    most = parent.asks if made[1] is None else made[1]
    try:
        asks = adapter.demand(job)
    except (InvalidObject, QuantityError):
        return True  # (queued, it is told what is wrong with it)
    return any(amount > most.get(name, 0) for name, amount in asks.items() if amount)


def parent_from(adapter: JobAdapter, job: Job) -> Parent | None:
    """A job of ours as its children see it (None when it cannot be read: it makes none)."""
    meta = job.get("metadata")
    try:
        return Parent(str((meta.get("uid") if isinstance(meta, Mapping) else "") or ""), adapter.children(job),
                      adapter.demand(job))
    except (InvalidObject, QuantityError):
        return None


def no_parents(kind: str, namespace: str, name: str) -> None:
    """A ParentOf that finds no job: every job is queued."""
    return None
