"""Fairness over weeks: fair sharing by usage history, and budgets (docs/fairness.md).

Fair sharing by history changes one input of the runtime-quota split and nothing else:
the shared weight of each child of a parent that shares by history becomes

    w' = w / (u + U0),  u = H / (C tau)

where H is the child's decayed usage of the resource (history.py), tau = half-life / ln 2
and C the parent's limit of it (the cluster's capacity at the root): u is the share of the
parent the child used, time-weighted, 1 for a child that used all of it for ever; U0 keeps
a child without history from an infinite weight. The weights are scaled so that the
largest among siblings is ``SCALE`` (a split depends on their ratios only). Mins are
handed out first as always (waterfill.py), so min stays guaranteed; reclaim (a borrower
is a quota past its runtime) and the order of the borrowers' turns (how far a quota is
into its runtime) follow from the same runtime. Scores move once a minute at most.

Budgets hold a job back, in its turn, when admitting it would take a quota of its path
past a budget within the window (``budget_wait``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from koordqueue.api.constants import DEFAULT_EXPECTED_RUNTIME_SECONDS
from koordqueue.api.fairness import Budget
from koordqueue.engine.history import LN2, MINUTE, UsageHistory
from koordqueue.engine.messages import _duration, _q
from koordqueue.engine.model import EngineConfig, QuotaInfo, ResourceList, UnitInfo
from koordqueue.engine.quotanode import ROOT, QuotaNode
from koordqueue.engine.tree import QuotaTree

SCALE = 1000  # the largest effective weight among siblings
U0 = 0.1  # a child with no history weighs as one that used 10 % of its parent


class Fairness:
    """The engine's usage history and the effective weights it gives; inert (no work at
    all) when no parent shares by history and no quota has a budget."""

    def __init__(self) -> None:
        self.history = UsageHistory()
        self.parents: dict[str, float] = {}  # parents sharing by history (ROOT: the cluster) -> half-life
        self.budgeted: dict[str, tuple[Budget, ...]] = {}
        self.weights: dict[str, ResourceList] = {}  # quota -> its effective shared weight
        self.minute: int | None = None
        self.planned = False

    @property
    def active(self) -> bool:
        return bool(self.parents or self.budgeted)

    def plan(self, quotas: Mapping[str, QuotaInfo], config: EngineConfig) -> None:
        """Which parents share by history and which quotas have budgets; what is tracked."""
        self.planned = True
        parents: dict[str, float] = {}
        if not config.koordinator:  # beside koord-scheduler its own rule must hold exactly
            if config.fair_sharing:
                parents[ROOT] = config.usage_half_life
            for quota in quotas.values():
                on = quota.fair_sharing if quota.fair_sharing is not None else config.fair_sharing
                if quota.is_parent and on:
                    parents[quota.name] = quota.usage_half_life or config.usage_half_life
                elif quota.is_parent and not on:
                    parents.pop(quota.name, None)
        self.parents = parents
        self.budgeted = {name: quota.budgets for name, quota in quotas.items() if quota.budgets}
        history = self.history
        wanted: list[str] = []
        for name, quota in quotas.items():
            parent = quota.parent if quota.parent is not None else ROOT
            half_life = parents.get(parent)
            budgets = quota.budgets
            if half_life is None and not budgets:
                continue
            history.want(name, half_life or quota.usage_half_life or config.usage_half_life,
                         {b.resource: b.window for b in budgets})
            wanted.append(name)
        history.keep_only(wanted)
        self.weights = {name: w for name, w in self.weights.items() if name in history.tracks}
        self.minute = None  # score again at the next cycle

    def effective(self, info: QuotaInfo) -> QuotaInfo:
        """``info`` with its effective shared weight (as given to the quota tree)."""
        weight = self.weights.get(info.name)
        return info if weight is None else replace(info, shared_weight=weight)

    def advance(self, now: float) -> None:
        self.history.advance(now)

    def snapshot(self, tree: QuotaTree) -> None:
        """What each tracked quota holds now (its subtree, as the tree counts it)."""
        nodes = tree.nodes
        history = self.history
        for name in history.tracks:
            node = nodes.get(name)
            history.set_rates(name, node.used if node is not None else {})

    def rescore(self, now: float, tree: QuotaTree, quotas: Mapping[str, QuotaInfo]) -> list[str]:
        """Work out the effective weights again (once a minute at most); returns the quotas
        whose weight moved."""
        minute = math.floor(now / MINUTE)
        if minute == self.minute or not self.parents:
            return []
        self.minute = minute
        moved: list[str] = []
        for parent_name, half_life in self.parents.items():
            parent = tree.nodes.get(parent_name)
            if parent is None:
                continue
            # The quotas' own weights, never the tree's copy: that carries the effective
            # weight given last time, and dividing it again would compound (a child that
            # used a little more would end at a weight of 1 against 1000).
            kids = [quotas[kid.name] for kid in parent.children if kid.name in quotas]
            for name, weight in _weights(self.history, parent, kids, half_life).items():
                if self.weights.get(name) != weight:
                    self.weights[name] = weight
                    if name in quotas:
                        moved.append(name)
        return moved


def _weights(history: UsageHistory, parent: QuotaNode, kids: list[QuotaInfo], half_life: float
             ) -> dict[str, ResourceList]:
    tau = half_life / LN2
    bases = {kid.name: kid.shared_weight if kid.shared_weight is not None else kid.max for kid in kids}
    resources = sorted({resource for base in bases.values() for resource in base})
    out: dict[str, ResourceList] = {name: {} for name in bases}
    for resource in resources:
        capacity = parent.limit.get(resource, 0)
        scores: dict[str, float] = {}
        for name, base in bases.items():
            weight = base.get(resource)
            if weight is None:
                continue
            used = history.decayed(name).get(resource, 0.0)
            share = used / (capacity * tau) if capacity > 0 else 0.0
            scores[name] = weight / (share + U0)
        top = max(scores.values(), default=0.0)
        for name, score in scores.items():
            out[name][resource] = 0 if score <= 0 or top <= 0 else max(1, round(SCALE * score / top))
    return out


def budget_wait(fair: Fairness, leaf: QuotaNode, info: UnitInfo, now: float) -> tuple[str, float | None] | None:
    """Why ``info`` may not be admitted into ``leaf`` now for a budget of a quota on its
    path, and when to look again (None: never, alone); None when no budget holds it back.

    The job counts as its request for its expected runtime (else the forecast's default,
    an hour); what the quota holds now counts as held as long (an estimate on the
    safe side: those jobs may end sooner, and old use ages out meanwhile)."""
    budgeted = fair.budgeted
    for node in leaf.path:
        budgets = budgeted.get(node.name)
        if not budgets or node.info is None:
            continue
        for budget in budgets:
            resource = budget.resource
            ask = info.request.get(resource, 0)
            if ask <= 0:
                continue
            held = node.used.get(resource, 0)
            if budget.exempt_min and held + ask <= node.min.get(resource, 0):
                continue
            runtime = min(info.expected_runtime or DEFAULT_EXPECTED_RUNTIME_SECONDS, budget.window)
            used = fair.history.in_window(node.name, resource)
            adds = (ask + held) * runtime
            excess = used + adds - budget.amount
            if excess <= 0:
                continue
            head = (f"waits for the budget of quota {node.name} ({budget.describe()}): it used "
                    f"{_hours(used)} {resource}-hours in the last {_duration(budget.window)}, holds {_q(held)} "
                    f"now, and this job adds {_q(ask)} for {_duration(round(runtime))}")
            if adds > budget.amount:
                return head + "; more than the whole budget, so it is admitted only once the quota holds less", None
            when = fair.history.freed_at(node.name, resource, excess, now)
            when = max(when, now + MINUTE)
            return head + f"; the budget frees up in about {_duration(_round_minute(when - now))}", when
    return None


def _hours(amount: float) -> str:
    return f"{amount / 1000 / 3600:.1f}"


def _round_minute(seconds: float) -> float:
    return max(MINUTE, math.ceil(seconds / MINUTE) * MINUTE)
