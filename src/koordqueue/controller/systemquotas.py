"""What Koordinator's system and default quotas use, which koord-scheduler takes off the
cluster total before its quota tree shares it (Koordinator v1.8.0, GroupQuotaManager:
the root's total is the nodes' allocatable less the used of koordinator-system-quota and
koordinator-default-quota, kept so as their pods come and go). Beside it (Koordinator
mode) our root total is the same, or we would admit what koord-scheduler then refuses.

As koord-scheduler counts them: a quota's used is the requests of its pods bound to a
node and not ended (deleting ones included), of the resources its max names only (its
ElasticQuota's spec.max; koord-scheduler's default, cpu and memory, when there is none).
A pod is charged to the quota its label quota.scheduling.koordinator.sh/name names, else
to the ElasticQuota named after its namespace in that namespace, else to one whose
namespaces annotation lists it, else (or when the quota named is not there) to the
default quota. Quotas of ours that are no ElasticQuota (an ElasticQuotaTree's) count as
there: their pods are charged to them, not to the default quota.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.quantity import QuantityError, ResourceList, parse_resource_list
from koordqueue.api.safeyaml import load_json_annotation
from koordqueue.controller.pods import PodView

OUTSIDE = (c.KOORDINATOR_SYSTEM_QUOTA, c.KOORDINATOR_DEFAULT_QUOTA)
DEFAULT_MAX = frozenset({"cpu", "memory"})  # koord-scheduler's own max of both when no ElasticQuota says
Key = tuple[str, str]  # a pod's namespace and quota label ("" when it has none)
Request = tuple[tuple[str, int], ...]  # a pod's, as PodView keeps it


class Charging:
    """Koordinator's rules from the ElasticQuotas there are: the quota a pod is charged to."""

    def __init__(self, quotas: Iterable[Mapping[str, Any]], ours: Iterable[str] = ()) -> None:
        self.ours = frozenset(ours)
        self.names: set[str] = set(OUTSIDE)  # koord-scheduler knows these two whether or not they are there
        self.own_namespace: set[str] = set()  # namespaces holding an ElasticQuota of their own name
        self.listed: dict[str, str] = {}  # namespace -> the quota whose namespaces annotation lists it
        self.counted: dict[str, frozenset[str]] = dict.fromkeys(OUTSIDE, DEFAULT_MAX)
        for obj in sorted(quotas, key=_name):
            meta = obj.get("metadata") or {}
            name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
            self.names.add(name)
            if name == namespace:
                self.own_namespace.add(namespace)
            for listed in _namespaces(meta):
                self.listed.setdefault(listed, name)
            if name in OUTSIDE:
                try:
                    self.counted[name] = frozenset(parse_resource_list((obj.get("spec") or {}).get("max")))
                except QuantityError:
                    pass  # (koord-manager's webhook lets no such quota in)

    def quota(self, namespace: str, label: str) -> str:
        if label:
            return label if label in self.names or label in self.ours else c.KOORDINATOR_DEFAULT_QUOTA
        if namespace in self.own_namespace:
            return namespace
        return self.listed.get(namespace, c.KOORDINATOR_DEFAULT_QUOTA)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Charging) and (
            self.ours, self.names, self.own_namespace, self.listed, self.counted) == (
            other.ours, other.names, other.own_namespace, other.listed, other.counted)

    __hash__ = None  # type: ignore[assignment]


class SystemQuotaUsage:
    """The bound pods' requests by namespace and quota label, and of them what the system
    and default quotas use (``used``), kept as pods change and read again when the rules do."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[Key, Request]] = {}  # pod key -> its key and request, while it takes room
        self._sums: dict[Key, ResourceList] = {}
        self._charging = Charging(())
        self._charged: dict[Key, frozenset[str] | None] = {}  # key -> what its pods' system or default quota counts
        self.used: ResourceList = {}

    def put(self, pod: PodView) -> bool:
        """Take the pod as it is now; whether ``used`` changed."""
        old = self._pods.pop(pod.key, None)
        if not (pod.takes_room and pod.request):
            return old is not None and bool(self._take(old, -1))
        taken = ((pod.namespace, pod.quota), pod.request)
        self._pods[pod.key] = taken
        before = self._take(old, -1) if old is not None else ()
        return self._take(taken, 1) != before

    def remove(self, pod: PodView) -> bool:
        old = self._pods.pop(pod.key, None)
        return old is not None and bool(self._take(old, -1))

    def set_rules(self, charging: Charging) -> bool:
        """The quotas changed: every pod charged again; whether ``used`` changed."""
        if charging == self._charging:
            return False
        self._charging = charging
        self._charged.clear()
        used: ResourceList = {}
        for key, amounts in self._sums.items():
            _add(used, self._counted(key, tuple(amounts.items())), 1)
        changed = used != self.used
        self.used = used
        return changed

    def _take(self, taken: tuple[Key, Request], sign: int) -> Request:
        """Add (or take away) a pod's request; what of it the system or default quota uses."""
        key, request = taken
        sums = self._sums.get(key)
        if sums is None:
            sums = self._sums[key] = {}
        _add(sums, request, sign)
        if not sums:
            del self._sums[key]
        counted = self._counted(key, request)
        if counted:
            _add(self.used, counted, sign)
        return counted

    def _counted(self, key: Key, amounts: Request) -> Request:
        """What of ``amounts`` (of pods of ``key``) the system or default quota uses."""
        try:
            names = self._charged[key]
        except KeyError:
            quota = self._charging.quota(*key)
            names = self._charged[key] = self._charging.counted[quota] if quota in OUTSIDE else None
        if names is None:
            return ()
        return tuple((name, amount) for name, amount in amounts if name in names and amount)


def charging_inputs(obj: Mapping[str, Any]) -> tuple[object, ...]:
    """What of an ElasticQuota the rules read: a change elsewhere charges no pod anew."""
    namespace, name = _name(obj)
    spec = obj.get("spec") or {}
    return namespace, name, tuple(_namespaces(obj.get("metadata") or {})), \
        repr(spec.get("max")) if name in OUTSIDE else None


def shared_total(capacity: ResourceList | None, outside: ResourceList) -> ResourceList | None:
    """The cluster total the quota tree shares beside koord-scheduler: ``capacity`` less what
    its system and default quotas use (never below nothing)."""
    if capacity is None:
        return None
    return {name: max(0, amount - outside.get(name, 0)) for name, amount in capacity.items()}


def _add(totals: ResourceList, amounts: Request, sign: int) -> None:
    for name, amount in amounts:
        total = totals.get(name, 0) + sign * amount
        if total:
            totals[name] = total
        else:
            totals.pop(name, None)


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _namespaces(meta: Mapping[str, Any]) -> list[str]:
    """The namespaces an ElasticQuota's annotation lists (none when it is not a JSON list)."""
    try:
        value = load_json_annotation(((meta.get("annotations") or {}).get(c.ANNOTATION_QUOTA_NAMESPACES)) or "[]")
    except ValueError:
        return []
    return [n for n in value if isinstance(n, str)] if isinstance(value, list) else []
