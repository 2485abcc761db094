"""Which jobs are part of another job we queue, and so are not queued themselves.

KubeRay makes a RayCluster and a submitter Job for each RayJob, each controlled by it (an
ownerReference): the RayJob is queued for them, once. An ownerReference is written by
whoever creates the object, though, tenants included: a Job naming a PyTorchJob that does
not exist as its controller was let run unqueued. So a claimed owner is trusted only when
it is of a kind that makes jobs of this kind (``JobAdapter.parent_kinds``), of a kind we
queue, and exists with that uid; any other claim is ignored and the job queued as any (as
Kueue suspends a child whose parent has no admitted Workload). ``ParentUid`` looks owners
up: the controller in its informers, the webhook from the API server."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from koordqueue.jobs.base import Job, JobAdapter

ParentUid = Callable[[str, str, str], str | None]
"""(kind, namespace, name) -> the uid of that job when we queue its kind and it exists, else None."""


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


def queued(adapter: JobAdapter, job: Job, parent_uid: ParentUid) -> bool:
    """Whether we queue ``job`` (never raises): not when a job we queue, there with the uid
    its ownerReference names, made it for itself."""
    owner = claimed_owner(adapter, job)
    return owner is None or parent_uid(owner.kind, owner.namespace, owner.name) != owner.uid


def no_parents(kind: str, namespace: str, name: str) -> None:
    """A ParentUid that finds no job: every job is queued."""
    return None
