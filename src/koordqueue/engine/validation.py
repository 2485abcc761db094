"""Which ElasticQuotas can be used, and why the others cannot.

A bad quota is left out of the tree with a reason for people (a Warning event, the
units that name it); nothing else stops. The rules are koord-manager's (Koordinator
v1.8.0's ElasticQuota webhook, at its default feature gates), so that a tree we use is
one koord-manager accepts; docs/quota-model.md and tests/engine/test_koordinator_rules.py
set them side by side:

- its own lists: no negative amount; every resource of min is in max; min <= max;
- its parent (label ``quota.scheduling.koordinator.sh/parent``) must exist, be usable
  itself and be marked ``is-parent: "true"`` (a quota that takes jobs is never also a
  parent, as in Koordinator), and the parents must not form a cycle; a ``tree-id``
  label, when set, is its parent's;
- below a parent quota (not the root): a child's max names only resources the parent's
  max names, and its min only resources the parent's min names (koord-manager at its
  default gates wants the same resources in both maxes: a child naming fewer, which the
  parent then limits alone, is accepted here, as it is there with the gate
  ElasticQuotaEnableUpdateResourceKey);
- the children's mins must add up to at most the parent's min, per resource;
- a namespace is listed (annotation ``quota.scheduling.koordinator.sh/namespaces``) by
  one ElasticQuota only.

koord-manager refuses whichever object comes second; we see all of them at once, so the
quotas are taken top-down from the root, each parent's children oldest first (their
creationTimestamp, then their name), and one that breaks a rule against those taken
before it is refused: the outcome depends on the objects alone, never on the order in
which they arrived, and a quota created later can never take an older one's place (a
tenant's new quota named ``aaa`` listing another team's namespace, or asking for min its
parent has given out, is the one refused), as koord-manager would have refused it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from koordqueue.api.constants import ANNOTATION_QUOTA_NAMESPACES, KOORDINATOR_QUOTAS, LABEL_QUOTA_TREE_ID
from koordqueue.api.quantity import format_quantity
from koordqueue.engine.model import QuotaInfo


def validate_quotas(quotas: Mapping[str, QuotaInfo]) -> dict[str, str]:
    """Quota name -> reason it is not used, for every quota that is not usable."""
    first: dict[str, str] = {}
    for quota in quotas.values():
        problem = own_problem(quota)
        if problem is not None:
            first[quota.name] = problem
    _mark_parent_problems(quotas, first)
    children: dict[str | None, list[QuotaInfo]] = {}
    for quota in quotas.values():
        if quota.name not in first:
            children.setdefault(quota.parent, []).append(quota)
    for group in children.values():
        group.sort(key=age)
    # A namespace is bound to the oldest quota listing it, wherever each stands in the tree;
    # one that turns out refused for another reason binds none, and the walk is done again
    # without it (each round sets aside one more quota: it ends).
    set_aside: set[str] = set()
    while True:
        reasons = dict(first)
        bound = _namespace_owners(quotas, first.keys() | set_aside)
        # Top-down from the root: a parent is settled before its children are looked at.
        level = _accept_children(None, children.get(None, []), reasons, bound)
        while level:
            following: list[QuotaInfo] = []
            for parent in level:
                following += _accept_children(parent, children.get(parent.name, []), reasons, bound)
            level = following
        # Whatever was not reached hangs below a quota that is not used.
        for quota in quotas.values():
            if quota.name not in reasons and not _reached(quota, quotas, reasons):
                reasons[quota.name] = f"its parent quota {quota.parent} is not used"
        refused_owners = {owner for owner in bound.values() if owner in reasons} - set_aside
        if not refused_owners:
            return reasons
        set_aside |= refused_owners


def age(quota: QuotaInfo) -> tuple[bool, str, str]:
    """Oldest first, then by name: the order in which conflicting quotas are taken. One not
    stored yet (no creationTimestamp: a manifest checked before it is applied) is the newest."""
    return not quota.created, quota.created, quota.name


def own_problem(quota: QuotaInfo) -> str | None:
    """What is wrong with a quota's own resource lists, if anything."""
    for field, resources in (("min", quota.min), ("max", quota.max), ("shared weight", quota.shared_weight)):
        for name, amount in sorted((resources or {}).items()):
            if amount < 0:
                return f"{field} of {name} is negative ({format_quantity(amount)})"
    for name, amount in sorted(quota.min.items()):
        if name not in quota.max:
            return f"min names {name}, which max does not"
        if amount > quota.max[name]:
            return (
                f"min of {name} ({format_quantity(amount)}) is more than its max "
                f"({format_quantity(quota.max[name])})"
            )
    return None


def _mark_parent_problems(quotas: Mapping[str, QuotaInfo], reasons: dict[str, str]) -> None:
    """Missing parents, parents that are not marked as such, other trees, and cycles."""
    for quota in sorted(quotas.values(), key=lambda q: q.name):
        if quota.parent is None or quota.name in reasons:
            continue
        parent = quotas.get(quota.parent)
        if parent is None and quota.parent in KOORDINATOR_QUOTAS:
            reasons[quota.name] = f"its parent quota {quota.parent} is Koordinator's own, which has no children"
        elif parent is None:
            reasons[quota.name] = f"its parent quota {quota.parent} does not exist"
        elif not parent.is_parent:
            reasons[quota.name] = (
                f'its parent quota {quota.parent} is not marked as a parent (label is-parent: "true")'
            )
        elif quota.tree_id and quota.tree_id != _tree_id(parent, quotas):
            reasons[quota.name] = (
                f"its label {LABEL_QUOTA_TREE_ID} ({quota.tree_id}) is not its parent quota {quota.parent}'s "
                f"({_tree_id(parent, quotas) or 'none'}): a child is in its parent's tree"
            )
    for quota in quotas.values():
        cycle = _cycle_from(quota, quotas)
        if cycle is not None:
            reasons[quota.name] = f"its parents form a cycle: {' -> '.join([*cycle, cycle[0]])}"


def _tree_id(quota: QuotaInfo, quotas: Mapping[str, QuotaInfo]) -> str:
    """Its tree-id label, else the one it takes from its parents (as koord-manager fills it in)."""
    seen = {quota.name}
    while not quota.tree_id and quota.parent is not None and quota.parent in quotas and quota.parent not in seen:
        quota = quotas[quota.parent]
        seen.add(quota.name)
    return quota.tree_id


def _cycle_from(quota: QuotaInfo, quotas: Mapping[str, QuotaInfo]) -> list[str] | None:
    """The cycle that ``quota`` is part of (starting at it), or None."""
    seen: list[str] = [quota.name]
    current = quota
    while current.parent is not None and current.parent in quotas:
        if current.parent == quota.name:
            return seen
        if current.parent in seen:
            return None  # a cycle further up, which does not contain ``quota``
        current = quotas[current.parent]
        seen.append(current.name)
    return None


def _accept_children(
    parent: QuotaInfo | None, children: list[QuotaInfo], reasons: dict[str, str], bound: Mapping[str, str]
) -> list[QuotaInfo]:
    """The children (of the root when ``parent`` is None) that keep the rules against their
    parent and the siblings taken before them, oldest first; refuse the others."""
    if parent is not None and parent.name in reasons:
        return []
    accepted: list[QuotaInfo] = []
    total: dict[str, int] = {}
    for child in children:
        problem = None if parent is None else _against_parent(child, parent, total)
        problem = problem or _namespace_taken(child, bound)
        if problem is not None:
            reasons[child.name] = problem
            continue
        for name, amount in child.min.items():
            total[name] = total.get(name, 0) + amount
        accepted.append(child)
    return accepted


def _against_parent(child: QuotaInfo, parent: QuotaInfo, total: Mapping[str, int]) -> str | None:
    """What keeps ``child`` from its parent quota: the resources it names, or its min."""
    extra = sorted(set(child.max) - set(parent.max))
    if extra:
        return f"its max names {_names(extra)}, which the max of its parent quota {parent.name} does not"
    extra = sorted(set(child.min) - set(parent.min))
    if extra:
        return f"its min names {_names(extra)}, which the min of its parent quota {parent.name} does not"
    for name, amount in sorted(child.min.items()):
        asked = total.get(name, 0) + amount
        if asked > parent.min[name]:
            return (
                f"the mins of the children of {parent.name} would add up to {format_quantity(asked)} "
                f"of {name}, more than its min ({format_quantity(parent.min[name])})"
            )
    return None


def _namespace_owners(quotas: Mapping[str, QuotaInfo], refused: Collection[str]) -> dict[str, str]:
    """Namespace -> the oldest quota listing it (annotation ``namespaces``) of those not refused
    for their own lists or parents. ElasticQuotas only: an ElasticQuotaTree's nodes share
    namespaces as Koord-Queue's do."""
    owners: dict[str, str] = {}
    for quota in sorted(quotas.values(), key=age):
        if quota.namespace and quota.name not in refused:
            for namespace in quota.namespaces:
                owners.setdefault(namespace, quota.name)
    return owners


def _namespace_taken(child: QuotaInfo, bound: Mapping[str, str]) -> str | None:
    """A namespace ``child`` lists that an older quota lists already."""
    if not child.namespace:
        return None
    for namespace in sorted(child.namespaces):
        if bound.get(namespace, child.name) != child.name:
            return (
                f"namespace {namespace} is already bound to quota {bound[namespace]} "
                f"(annotation {ANNOTATION_QUOTA_NAMESPACES}): a namespace is bound to one quota"
            )
    return None


def _names(resources: Iterable[str]) -> str:
    return ", ".join(sorted(resources)) or "nothing"


def _reached(quota: QuotaInfo, quotas: Mapping[str, QuotaInfo], reasons: Mapping[str, str]) -> bool:
    """Whether every ancestor of ``quota`` is usable (so the walk from the root found it)."""
    current = quota
    while current.parent is not None:
        if current.parent in reasons or current.parent not in quotas:
            return False
        current = quotas[current.parent]
    return True
