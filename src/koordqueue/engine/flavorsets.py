"""A quota's flavors as data (flavors.py admits into them): which leaf quotas are flavors
of which parent, in which order, which of them a unit's pods agree with, and the words of
why a unit of a flavored quota waits. Below the ledger, which counts a waiting unit's
request at its first agreeing flavor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from koordqueue.engine.model import PodSetInfo, QuotaInfo, Requirement, Toleration, UnitInfo
from koordqueue.engine.quotanode import QuotaNode
from koordqueue.engine.tree import QuotaTree

Selector = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Flavor:
    node: QuotaNode
    selector: Selector
    tolerations: tuple[Toleration, ...] = ()  # added to the pods admitted into it


@dataclass(frozen=True, slots=True)
class Flavoring:
    """The flavors a queue's units may be admitted into, in order, and its fungibility."""

    parent: QuotaNode
    flavors: tuple[Flavor, ...]
    borrow_first: bool = True  # whenCanBorrow=Borrow
    preempt_first: bool = False  # whenCanPreempt=Preempt

    def agreeing(self, pod_sets: Sequence[PodSetInfo]) -> tuple[Flavor, ...]:
        if unpinnable(pod_sets):  # its pods would run on any model, charged to the flavor's
            return ()
        return tuple(f for f in self.flavors if agrees(f.selector, pod_sets))


def unpinnable(pod_sets: Sequence[PodSetInfo]) -> str | None:
    """Why the pods cannot be pinned to a flavor's nodes (None: they can)."""
    return next((ps.unpinnable for ps in pod_sets if ps.unpinnable), None)


def build(tree: QuotaTree, quotas: Mapping[str, QuotaInfo]) -> tuple[dict[QuotaNode, Flavoring], dict[str, str]]:
    """The flavorings of the usable tree (by the quota a unit is charged to: a parent with
    flavors, or a flavor), and, per parent, what is wrong with its flavor order."""
    out: dict[QuotaNode, Flavoring] = {}
    problems: dict[str, str] = {}
    for node in tree.nodes.values():
        info = node.info
        assert info is not None
        if not node.children and info.node_selector:
            out[node] = Flavoring(node, (flavor_of(node, info),))
        kids = {kid.name: kid for kid in node.children
                if not kid.children and kid.info is not None and kid.info.node_selector}
        if not kids:
            continue
        unknown = [name for name in info.flavor_order if name not in kids]
        if unknown:
            problems[node.name] = (f"flavor order names {', '.join(unknown)}, which {'is' if len(unknown) == 1 else 'are'}"
                                   f" no flavor of it (its flavors: {', '.join(sorted(kids))}); ignored")
        order = [name for name in info.flavor_order if name in kids]
        order += sorted(name for name in kids if name not in order)
        flavors = []
        for name in order:
            kid_info = kids[name].info
            assert kid_info is not None
            flavors.append(flavor_of(kids[name], kid_info))
        out[node] = Flavoring(node, tuple(flavors), info.borrow_first, info.preempt_first)
    return out, problems


def flavor_of(node: QuotaNode, info: QuotaInfo) -> Flavor:
    tolerations = tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in info.tolerations)
    return Flavor(node, info.node_selector, tolerations)


def agrees(selector: Selector, pod_sets: Sequence[PodSetInfo]) -> bool:
    """Whether pods that select a model themselves (nodeSelector, required node affinity
    on a key of ``selector``) may run on the flavor's nodes."""
    wanted = dict(selector)
    for ps in pod_sets:
        for key, value in ps.node_selector:
            if key in wanted and wanted[key] != value:
                return False
        if ps.affinity and not any(_term_agrees(term, wanted) for term in ps.affinity):
            return False
    return True


def _term_agrees(term: Sequence[Requirement], wanted: Mapping[str, str]) -> bool:
    """Whether a required node affinity term lets pods on nodes labelled ``wanted``."""
    for req in term:
        if req.field or req.key not in wanted:
            continue
        value = wanted[req.key]
        if (req.operator == "In" and value not in req.values) or (req.operator == "NotIn" and value in req.values) \
                or req.operator == "DoesNotExist":
            return False
    return True


def pinned(pod_sets: Sequence[PodSetInfo], flavor: Flavor) -> tuple[PodSetInfo, ...]:
    """The pod sets with the flavor's selector added to their nodeSelector, and its
    tolerations to theirs (as the admission writes them into the pod templates)."""
    out = []
    for ps in pod_sets:
        merged = dict(ps.node_selector)
        merged.update(flavor.selector)
        tolerations = ps.tolerations + tuple(t for t in flavor.tolerations if t not in ps.tolerations)
        out.append(replace(ps, node_selector=tuple(sorted(merged.items())), tolerations=tolerations))
    return tuple(out)


DISAGREES = "its pods select other nodes"  # a flavor a unit's own node selection rules out


def selects(selector: Selector) -> str:
    return ",".join(f"{k}={v}" for k, v in selector)


def wait_text(flavoring: Flavoring, info: UnitInfo, candidates: Sequence[Flavor],
              refused: Sequence[tuple[Flavor, str]]) -> str:
    """Why a unit of a flavored quota waits: which flavors it may use, what each refused."""
    parent = flavoring.parent
    why = unpinnable(info.pod_sets)
    if why:
        return f"not admitted into quota {parent.name}, whose pods are held to flavors' nodes: {why}"
    if len(flavoring.flavors) == 1 and flavoring.flavors[0].node is parent:
        return refused[0][1] if refused else f"waiting for quota {parent.name}"
    if not candidates:
        offered = "; ".join(f"{f.node.name} ({selects(f.selector)})" for f in flavoring.flavors)
        return (f"no flavor of quota {parent.name} agrees with the nodes its pods select; its flavors: {offered}")
    said = "; ".join(f"{f.node.name} ({selects(f.selector)}): {why}" for f, why in refused)
    if len(candidates) < len(flavoring.flavors):
        names = ", ".join(f.node.name for f in candidates)
        return (f"waiting for flavor{'s' if len(candidates) > 1 else ''} {names} of quota {parent.name} "
                f"(its pods select {'it' if len(candidates) == 1 else 'them'}; the other flavors disagree): {said}")
    return f"waiting for a flavor of quota {parent.name}, tried in order: {said}"


def home(flavoring: Flavoring, info: UnitInfo) -> QuotaNode | str:
    """Where a waiting unit's request counts (its first agreeing flavor), or why it has none."""
    candidates = flavoring.agreeing(info.pod_sets)
    if candidates:
        return candidates[0].node
    return wait_text(flavoring, info, (), ())


