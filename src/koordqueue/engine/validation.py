"""Which ElasticQuotas can be used, and why the others cannot.

A bad quota is left out of the tree with a reason for people (a Warning event, the
units that name it); nothing else stops. The rules:

- its own lists: no negative amount; every resource of min is in max; min <= max;
- its parent (label ``quota.scheduling.koordinator.sh/parent``) must exist, be usable
  itself and be marked ``is-parent: "true"`` (a quota that takes jobs is never also a
  parent, as in Koordinator), and the parents must not form a cycle;
- the children's mins must add up to at most the parent's min, per resource. When
  they do not, children are accepted in name order while the sum fits and the rest
  are refused, so that the outcome depends on the objects alone, never on the order in
  which they arrived.
"""

from __future__ import annotations

from collections.abc import Mapping

from koordqueue.api.quantity import format_quantity
from koordqueue.engine.model import QuotaInfo


def validate_quotas(quotas: Mapping[str, QuotaInfo]) -> dict[str, str]:
    """Quota name -> reason it is not used, for every quota that is not usable."""
    reasons: dict[str, str] = {}
    for quota in quotas.values():
        problem = own_problem(quota)
        if problem is not None:
            reasons[quota.name] = problem
    _mark_parent_problems(quotas, reasons)
    children: dict[str | None, list[QuotaInfo]] = {}
    for quota in quotas.values():
        if quota.name not in reasons:
            children.setdefault(quota.parent, []).append(quota)
    for group in children.values():
        group.sort(key=lambda q: q.name)
    # Top-down from the root: a parent is settled before its children are looked at.
    level = children.get(None, [])
    while level:
        following: list[QuotaInfo] = []
        for parent in level:
            for child in _accept_children(parent, children.get(parent.name, []), reasons):
                following.append(child)
        level = following
    # Whatever was not reached hangs below a quota that is not used.
    for quota in quotas.values():
        if quota.name not in reasons and not _reached(quota, quotas, reasons):
            reasons[quota.name] = f"its parent quota {quota.parent} is not used"
    return reasons


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
    """Missing parents, parents that are not marked as such, and cycles."""
    for quota in sorted(quotas.values(), key=lambda q: q.name):
        if quota.parent is None or quota.name in reasons:
            continue
        parent = quotas.get(quota.parent)
        if parent is None:
            reasons[quota.name] = f"its parent quota {quota.parent} does not exist"
        elif not parent.is_parent:
            reasons[quota.name] = (
                f'its parent quota {quota.parent} is not marked as a parent (label is-parent: "true")'
            )
    for quota in quotas.values():
        cycle = _cycle_from(quota, quotas)
        if cycle is not None:
            reasons[quota.name] = f"its parents form a cycle: {' -> '.join([*cycle, cycle[0]])}"


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
    parent: QuotaInfo, children: list[QuotaInfo], reasons: dict[str, str]
) -> list[QuotaInfo]:
    """The children whose mins fit in the parent's min, in name order; refuse the others."""
    if parent.name in reasons:
        return []
    accepted: list[QuotaInfo] = []
    total: dict[str, int] = {}
    for child in children:
        over = next(
            (
                name
                for name, amount in sorted(child.min.items())
                if total.get(name, 0) + amount > parent.min.get(name, 0)
            ),
            None,
        )
        if over is not None:
            asked = total.get(over, 0) + child.min[over]
            reasons[child.name] = (
                f"the mins of the children of {parent.name} would add up to {format_quantity(asked)} "
                f"of {over}, more than its min ({format_quantity(parent.min.get(over, 0))})"
            )
            continue
        for name, amount in child.min.items():
            total[name] = total.get(name, 0) + amount
        accepted.append(child)
    return accepted


def _reached(quota: QuotaInfo, quotas: Mapping[str, QuotaInfo], reasons: Mapping[str, str]) -> bool:
    """Whether every ancestor of ``quota`` is usable (so the walk from the root found it)."""
    current = quota
    while current.parent is not None:
        if current.parent in reasons or current.parent not in quotas:
            return False
        current = quotas[current.parent]
    return True
