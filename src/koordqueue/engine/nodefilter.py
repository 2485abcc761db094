"""Which nodes may take a pod set's pods: kube-scheduler's node filters, read in one place.

NodeUnschedulable, TaintToleration and NodeAffinity, in kube-scheduler's order, for the
engine's placement (placement.py) and the simulated cluster's scheduler alike, so that what
the engine plans is what the simulated kubelet binds. Pure functions of the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from koordqueue.api.constants import TAINT_NO_EXECUTE, TAINT_NO_SCHEDULE, TAINT_UNSCHEDULABLE
from koordqueue.engine.model import NodeInfo, PodSetInfo, Requirement, Taint, Toleration

UNSCHEDULABLE = Taint(TAINT_UNSCHEDULABLE, "", TAINT_NO_SCHEDULE)
BLOCKING_EFFECTS = (TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE)
Rule = Literal["unschedulable", "taint", "nodeSelector", "node affinity"]  # a Refusal's


def rules_key(ps: PodSetInfo) -> object:
    """What the nodes a pod set may go to depend on: pod sets with equal keys go to the same nodes."""
    return (ps.node_selector, ps.affinity, ps.tolerations)


@dataclass(frozen=True, slots=True)
class Refusal:
    """The first rule by which a node may not take a pod set's pods (``node_refusal``)."""

    rule: Rule
    taint: Taint | None = None  # rule "taint": the first of the node's taints the pods do not tolerate
    label: tuple[str, str] | None = None  # rule "nodeSelector": the label the node lacks

    @property
    def reason(self) -> str:
        """In short, as the engine's waiting messages count it (messages.py words it)."""
        if self.taint is not None:
            value = f"={self.taint.value}" if self.taint.value else ""
            return f"taint {self.taint.key}{value}:{self.taint.effect}"
        if self.label is not None:
            return f"nodeSelector {self.label[0]}={self.label[1]}"
        return self.rule


def node_refusal(node: NodeInfo, ps: PodSetInfo) -> Refusal | None:
    """The first rule by which ``node`` may not take pods of ``ps`` (None: it may), the one
    place these rules are read, for the engine and the simulated scheduler alike. The order
    is kube-scheduler's filters': NodeUnschedulable (a cordoned node takes only pods that
    tolerate its ``node.kubernetes.io/unschedulable`` taint), TaintToleration (NoSchedule
    and NoExecute taints; PreferNoSchedule does not block), NodeAffinity (nodeSelector, then
    required node affinity: any one term, all of it)."""
    if node.unschedulable and not _tolerated(UNSCHEDULABLE, ps.tolerations):
        return Refusal("unschedulable")
    for taint in node.taints:
        if taint.effect in BLOCKING_EFFECTS and not _tolerated(taint, ps.tolerations):
            return Refusal("taint", taint=taint)
    labels = node.labels
    for key, value in ps.node_selector:
        if labels.get(key) != value:
            return Refusal("nodeSelector", label=(key, value))
    if ps.affinity and not any(_term_matches(term, node) for term in ps.affinity):
        return Refusal("node affinity")
    return None


def _tolerated(taint: Taint, tolerations: tuple[Toleration, ...]) -> bool:
    """Whether any of a pod's tolerations tolerates ``taint``."""
    return any(t.tolerates(taint) for t in tolerations)


def _term_matches(term: tuple[Requirement, ...], node: NodeInfo) -> bool:
    """A node selector term: all its requirements (an empty term matches no node)."""
    return bool(term) and all(_requirement_matches(r, node) for r in term)


def _requirement_matches(req: Requirement, node: NodeInfo) -> bool:
    """One matchExpressions entry on the node's labels, or matchFields on its name
    (``metadata.name``); Gt and Lt compare integers."""
    if req.field:
        value: str | None = node.name if req.key == "metadata.name" else None
    else:
        value = node.labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        try:
            have, bound = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False
