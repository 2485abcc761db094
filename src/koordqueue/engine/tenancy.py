"""Which quota and which queue a unit uses, under the multi-tenant rules.

A job in namespace N may use quota Q only when Q lives in N or Q's namespaces
annotation lists N, whichever way it names Q: directly (label), through a Queue
(annotation), or not at all (the namespace rules). A Queue is looked up in the system
namespace first, then in the job's own; a Queue is never a way around a quota.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from koordqueue.api.constants import ANNOTATION_QUEUE, LABEL_QUOTA_NAME, SYSTEM_NAMESPACE
from koordqueue.engine.model import QueueInfo, QuotaInfo, UnitInfo, auto_queue_for


@dataclass(frozen=True, slots=True)
class Directory:
    """Lookup tables for resolving units; rebuilt when quotas or queues change."""

    quotas: Mapping[str, QuotaInfo]
    queues: Mapping[str, QueueInfo]
    invalid: Mapping[str, str]  # quota name -> why it is not used
    living_in: Mapping[str, tuple[str, ...]]  # namespace -> leaf quotas living there
    listing: Mapping[str, tuple[str, ...]]  # namespace -> leaf quotas whose annotation lists it
    # quota -> its own Queue in the system namespace, marked as Koord-Queue marks the Queues it
    # makes for a tree's quotas (annotation koord-queue/quota-fullname): where its units go
    own_queues: Mapping[str, QueueInfo] = field(default_factory=dict)
    # Parent quotas with flavors (flavors.py): a job may be charged to them.
    flavored: frozenset[str] = frozenset()

    def takes_jobs(self, quota: QuotaInfo) -> bool:
        """A quota jobs may name: one that is no parent, or a parent with flavors."""
        return not quota.is_parent or quota.name in self.flavored


@dataclass(frozen=True, slots=True)
class Resolved:
    queue: QueueInfo
    quota: QuotaInfo


def build_directory(
    quotas: Mapping[str, QuotaInfo], queues: Mapping[str, QueueInfo], invalid: Mapping[str, str]
) -> Directory:
    living: dict[str, list[str]] = {}
    listing: dict[str, list[str]] = {}
    flavored = frozenset(q.parent for q in quotas.values()
                         if q.node_selector and not q.is_parent and q.parent is not None and q.name not in invalid
                         and q.parent in quotas and quotas[q.parent].is_parent)
    for quota in quotas.values():
        # A job of the namespace goes to a parent with flavors, not to one of its flavors.
        if (quota.is_parent and quota.name not in flavored) or (quota.node_selector and quota.parent in flavored):
            continue
        living.setdefault(quota.namespace, []).append(quota.name)
        for namespace in quota.namespaces:
            if namespace != quota.namespace:
                listing.setdefault(namespace, []).append(quota.name)
    own: dict[str, QueueInfo] = {}
    for key in sorted(queues):  # of two marked alike (for a moment), the same one each time
        queue = queues[key]
        if queue.namespace == SYSTEM_NAMESPACE and queue.quota_path and queue.quota is not None and \
                queue.quota_path.rsplit("/", 1)[-1] == queue.quota:
            own.setdefault(queue.quota, queue)
    return Directory(
        own_queues=own,
        quotas=quotas,
        queues=queues,
        invalid=invalid,
        flavored=flavored,
        living_in={ns: tuple(sorted(names)) for ns, names in living.items()},
        # Of several quotas listing a namespace, those refused (one listing it already, as
        # koord-manager refuses the second) are no candidates; a lone one is, to say why not.
        listing={ns: tuple(sorted([n for n in names if n not in invalid] or names)) for ns, names in listing.items()},
    )


def bound(quota: QuotaInfo, namespace: str) -> bool:
    """Whether jobs of ``namespace`` may use ``quota``."""
    return quota.namespace == namespace or namespace in quota.namespaces


def resolve(unit: UnitInfo, directory: Directory) -> Resolved | str:
    """The unit's queue and quota, or why it cannot be queued (a message for people)."""
    if unit.invalid:
        return f"the job cannot be queued: {unit.invalid}"
    queue: QueueInfo | None = None
    if unit.queue_name:
        queue = _named_queue(unit, directory)
        if queue is None:
            return f"queue {unit.queue_name} not found in namespace {SYSTEM_NAMESPACE} or {unit.namespace}"
        if queue.quota is None:
            return f"queue {queue.key} is bound to no quota, so it admits nothing"
        if unit.quota_name and unit.quota_name != queue.quota:
            return (
                f"the job names quota {unit.quota_name} but its queue {queue.key} "
                f"is bound to quota {queue.quota}"
            )
        name = queue.quota
    elif unit.quota_name:
        name = unit.quota_name
    else:
        found, why = _by_namespace(unit.namespace, directory)
        if found is None:
            return why
        name = found
    quota = directory.quotas.get(name)
    if quota is None:
        return f"quota {name} not found"
    if name in directory.invalid:
        return f"quota {name} is not usable: {directory.invalid[name]}"
    if not directory.takes_jobs(quota):
        return f"quota {name} is a parent quota; a job must use one of the quotas below it"
    if not bound(quota, unit.namespace):
        return f"quota {name} is not bound to namespace {unit.namespace} (it belongs to namespace {quota.namespace})"
    if queue is None:
        queue = directory.own_queues.get(name) or directory.queues.get(f"{SYSTEM_NAMESPACE}/{name}") or \
            auto_queue_for(quota)
        if queue.quota != name:
            return f"queue {queue.key}, the queue of quota {name}, is bound to quota {queue.quota} instead"
    return Resolved(queue, quota)


def named_quota(unit: UnitInfo, directory: Directory) -> str | None:
    """The leaf quota the unit asks for (through its Queue, its label or its namespace),
    usable or not, if it may use it: where a unit found holding quota counts when that
    quota has become unusable (``resolve`` says why it cannot be queued there)."""
    if unit.invalid:
        return None
    if unit.queue_name:
        queue = _named_queue(unit, directory)
        name = queue.quota if queue is not None else None
    else:
        name = unit.quota_name or _by_namespace(unit.namespace, directory)[0]
    quota = directory.quotas.get(name) if name is not None else None
    if quota is None or not directory.takes_jobs(quota) or not bound(quota, unit.namespace):
        return None
    return quota.name


def _named_queue(unit: UnitInfo, directory: Directory) -> QueueInfo | None:
    """The Queue the unit names: in the system namespace first, then in its own."""
    return directory.queues.get(f"{SYSTEM_NAMESPACE}/{unit.queue_name}") or directory.queues.get(
        f"{unit.namespace}/{unit.queue_name}"
    )


def _by_namespace(namespace: str, directory: Directory) -> tuple[str | None, str]:
    """The quota a job that names none uses, or None and why there is none."""
    own = directory.quotas.get(namespace)
    if own is not None and directory.takes_jobs(own) and bound(own, namespace):
        return own.name, ""
    for candidates, where in (
        (directory.living_in.get(namespace, ()), "live in"),
        (directory.listing.get(namespace, ()), "list"),
    ):
        if len(candidates) == 1:
            return candidates[0], ""
        if candidates:
            return None, (
                f"namespace {namespace} could use several quotas ({', '.join(candidates)} {where} it); "
                f"name one with the label {LABEL_QUOTA_NAME}"
            )
    return None, (
        f"no quota for namespace {namespace}: name one with the label {LABEL_QUOTA_NAME} "
        f"or a queue with the annotation {ANNOTATION_QUEUE}"
    )
