"""Properties of the engine over random quota trees and random job streams (hypothesis).

Every example builds a valid quota tree of 2 or 3 levels over several resources
(lending or not, weights or none), gives each leaf a Queue (policy, Queue priority,
priority preemption on or off), then plays a stream of steps (arrivals, completions,
send-backs, time passing) and checks after every cycle what must always hold. Usage
is recomputed from the admissions the engine reported, not read from the engine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from math import gcd
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import strategies as st

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine import Engine
from koordqueue.engine import tree as tree_module
from koordqueue.engine.fit import first_misfit
from koordqueue.engine.model import CycleResult, EngineConfig, QueueInfo, QuotaInfo, ResourceList, UnitInfo
from koordqueue.engine.quotanode import Hold, QuotaNode
from koordqueue.engine.tree import QuotaTree
from koordqueue.engine.validation import validate_quotas
from koordqueue.engine.waterfill import Level, fill_level, water_fill

from .builders import CPU, GPU, MEM, G, queue_of

RESOURCES = (GPU, CPU, MEM)
MAX_CYCLES_AT_ONCE = 10  # cycles at one instant before the engine must have settled
PROPERTY_SETTINGS = settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@dataclass
class World:
    """A random tree, the leaves' Queues and the engine's settings."""

    resources: tuple[str, ...]
    quotas: list[QuotaInfo]
    queues: dict[str, QueueInfo]  # leaf name -> its Queue
    capacity: ResourceList | None
    config: EngineConfig

    @property
    def leaves(self) -> list[QuotaInfo]:
        return [q for q in self.quotas if not q.is_parent]

    def by_name(self, name: str) -> QuotaInfo:
        return next(q for q in self.quotas if q.name == name)

    def path(self, name: str) -> list[QuotaInfo]:
        out = [self.by_name(name)]
        while out[-1].parent is not None:
            out.append(self.by_name(out[-1].parent))
        return out


def amounts(draw: st.DrawFn, resources: tuple[str, ...], low: ResourceList, high: int) -> ResourceList:
    return {r: draw(st.integers(low.get(r, 0), max(low.get(r, 0), high))) * G for r in resources}


@st.composite
def worlds(draw: st.DrawFn, name_every_resource: bool = False, protect: bool = True) -> World:
    resources = tuple(draw(st.lists(st.sampled_from(RESOURCES), min_size=2, max_size=3, unique=True)))
    quotas: list[QuotaInfo] = []

    def make(name: str, parent: str | None, depth: int, budget: ResourceList, allowed: tuple[str, ...]) -> ResourceList:
        """Add a quota whose min fits ``budget`` (what is left of its parent's min), naming
        only resources its parent's max names (``allowed``), as Koordinator wants."""
        named = allowed if name_every_resource else tuple(
            draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=len(allowed), unique=True))
        )
        minimum = {r: draw(st.integers(0, budget.get(r, 0) // G)) * G for r in named if r in budget or parent is None}
        if parent is None:
            minimum = {r: draw(st.integers(0, 12)) * G for r in named}
        maximum = {r: minimum.get(r, 0) + draw(st.integers(1, 12)) * G for r in named}
        is_parent = depth < 3 and draw(st.booleans()) if depth > 1 else draw(st.booleans())
        weight = draw(st.none() | st.fixed_dictionaries({r: st.integers(0, 4).map(lambda w: w * G) for r in named}))
        quotas.append(
            QuotaInfo(
                name=name,
                namespace="default",
                min=minimum,
                max=maximum,
                parent=parent,
                is_parent=is_parent,
                shared_weight=weight,
                allow_lent=draw(st.booleans()),
                policy=draw(st.sampled_from(list(QueuePolicy))),
                priority_threshold=draw(st.none() | st.integers(1, 5)),
            )
        )
        if is_parent:
            left = dict(minimum)
            for i in range(draw(st.integers(1, 3))):
                taken = make(f"{name}-{i}", name, depth + 1, left, named)
                for r, amount in taken.items():
                    left[r] = left.get(r, 0) - amount
        return minimum

    for i in range(draw(st.integers(1, 3))):
        make(f"q{i}", None, 1, {}, resources)
    assert not validate_quotas({q.name: q for q in quotas}), "the generator makes valid trees"
    roots = [q for q in quotas if q.parent is None]
    capacity = None
    if draw(st.booleans()):
        # At least the roots' mins, so that every min can be honoured.
        capacity = {r: sum(q.min.get(r, 0) for q in roots) + draw(st.integers(0, 20)) * G for r in resources}
    queues = {
        q.name: queue_of(q, priority=draw(st.integers(0, 2)), preemption=draw(st.booleans()),
                         hold_room_after=draw(st.sampled_from((0.0, 30.0, 600.0))))
        for q in quotas
        if not q.is_parent
    }
    config = EngineConfig(
        protect_seconds=draw(st.sampled_from((0.0, 0.0, 10.0, 60.0))) if protect else 0.0,
        reclaim=draw(st.sampled_from((True, True, False))) if protect else True,
        cluster_capacity=capacity,
    )
    return World(resources, quotas, queues, capacity, config)


# A step: ("arrive", leaf index, request in whole units per resource, priority,
# preemptible, how many such units), ("finish", which admitted unit), ("send-back",
# which admitted unit), ("wait", seconds), ("edit", which quota, what: its max grows,
# its min moves, its shared weight moves, it lends or stops lending; an edit that
# would make a quota unusable is not made).
arrival = st.tuples(
    st.just("arrive"),
    st.integers(0, 20),
    st.lists(st.integers(0, 4), min_size=3, max_size=3),
    st.integers(0, 6),
    st.booleans(),
    st.integers(1, 4),
)
steps = st.lists(
    st.one_of(
        arrival,
        arrival,
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("send-back"), st.integers(0, 50)),
        st.tuples(st.just("wait"), st.sampled_from((0.0, 1.0, 5.0, 30.0, 70.0))),
        st.tuples(st.just("edit"), st.integers(0, 30), st.sampled_from(("max", "min", "weight", "lend")),
                  st.integers(0, 3)),
    ),
    min_size=4,
    max_size=30,
)


@dataclass
class Run:
    """A world played step by step, with what the engine decided."""

    world: World
    engine: Engine = field(init=False)
    units: dict[str, UnitInfo] = field(default_factory=dict)
    leaf_of: dict[str, str] = field(default_factory=dict)  # unit key -> its quota
    admitted: dict[str, str] = field(default_factory=dict)  # unit key -> quota holding it
    log: list[object] = field(default_factory=list)
    now: float = 0.0
    serial: int = 0

    def __post_init__(self) -> None:
        self.world = replace(self.world, quotas=list(self.world.quotas))  # edits are this run's own
        self.engine = Engine(self.world.config)
        for q in self.world.quotas:
            self.engine.set_quota(q)
        for q in self.world.queues.values():
            self.engine.set_queue(q)

    def play(self, step: tuple, checks: list) -> None:  # type: ignore[type-arg]
        kind = step[0]
        if kind == "arrive":
            leaves = self.world.leaves
            leaf = leaves[step[1] % len(leaves)]
            request = {r: step[2][i] * G for i, r in enumerate(self.world.resources) if step[2][i]}
            for _ in range(step[5]):
                self.serial += 1
                info = UnitInfo("default", f"u{self.serial}", step[3], self.now, request,
                                quota_name=leaf.name, preemptible=step[4])
                self.units[info.key] = info
                self.leaf_of[info.key] = leaf.name
                self.engine.set_unit(info)
        elif kind in ("finish", "send-back") and self.admitted:
            key = sorted(self.admitted)[step[1] % len(self.admitted)]
            del self.admitted[key]
            if kind == "finish":
                del self.units[key]
                self.engine.remove_unit(key)
            else:
                self.engine.requeue(key, self.now, "pods did not start")
        elif kind == "wait":
            self.now += step[1]
        elif kind == "edit":
            self.edit(step[1], step[2], step[3])
        for _ in range(MAX_CYCLES_AT_ONCE):
            result = self.cycle(checks)
            if result.next_wakeup is None or result.next_wakeup > self.now:
                return
            event("work left for the same instant")
        raise AssertionError(f"still work to do at t={self.now} after {MAX_CYCLES_AT_ONCE} cycles")

    def edit(self, which: int, what: str, by: int) -> None:
        """Edit a quota's amounts, as an administrator would (quotas stay usable)."""
        quotas = self.world.quotas
        index = which % len(quotas)
        quota = quotas[index]
        if what == "max":  # it only grows: usage over a shrunk max is no admission's fault
            edited = replace(quota, max={r: v + by * G for r, v in quota.max.items()})
        elif what == "min":
            edited = replace(quota, min={r: min(quota.max[r], max(0, v + (by - 1) * G)) for r, v in quota.min.items()})
        elif what == "weight":
            edited = replace(quota, shared_weight={r: (by + 1) * G for r in quota.max} if by else None)
        else:
            edited = replace(quota, allow_lent=not quota.allow_lent)
        candidate = {q.name: q for q in quotas} | {edited.name: edited}
        capacity = self.world.capacity
        if validate_quotas(candidate) or capacity is not None and any(
                sum(q.min.get(r, 0) for q in candidate.values() if q.parent is None) > total
                for r, total in capacity.items()):
            event("an edit that would make a quota unusable, or its mins more than the cluster")
            return
        if overtaken(list(candidate.values()), capacity, self.usage()) is not None:
            # It would keep a min that others use now: the administrator's overcommitment,
            # not an admission's (the limits are checked against admissions).
            event("an edit that would keep a min others use now")
            return
        quotas[index] = edited
        self.engine.set_quota(edited)
        event("an edit taken in place" if not self.engine._ledger.rebuild_needed else "an edit that rebuilds")

    def cycle(self, checks: list) -> CycleResult:  # type: ignore[type-arg]
        before = {key: self.engine.standing(key) for key in self.units if key not in self.admitted}
        result = self.engine.schedule(self.now)
        both = {a.unit for a in result.admitted} & {p.unit for p in result.preempted}
        assert not both, f"admitted and preempted in the same cycle: {both}"
        for p in result.preempted:
            assert self.admitted.pop(p.unit) == p.quota
        for a in result.admitted:
            assert a.unit not in self.admitted
            assert a.quota == self.leaf_of[a.unit]
            self.admitted[a.unit] = a.quota
        self.log.append((self.now, [(a.unit, a.quota) for a in result.admitted],
                         [(p.unit, p.reason, p.requeue_at) for p in result.preempted],
                         sorted(result.messages.items()), result.next_wakeup))
        for check in checks:
            check(self, result, before)
        return result

    def quiesce(self, checks: list) -> None:  # type: ignore[type-arg]
        """Let time pass until only a change of inputs could change anything."""
        for _ in range(200):
            result = self.cycle(checks)
            if result.next_wakeup is None:
                return
            self.now = max(self.now, result.next_wakeup)
        raise AssertionError("the engine keeps asking to be woken up")

    def usage(self, preemptible: bool | None = None) -> dict[str, ResourceList]:
        """Admitted requests per quota, its subtree included, from the admissions alone
        (``preemptible`` False: of non-preemptible units only)."""
        out: dict[str, ResourceList] = {q.name: {} for q in self.world.quotas}
        for key, leaf in self.admitted.items():
            if preemptible is not None and self.units[key].preemptible != preemptible:
                continue
            for q in self.world.path(leaf):
                for r, amount in self.units[key].request.items():
                    out[q.name][r] = out[q.name].get(r, 0) + amount
        return out


def overtaken(quotas: list[QuotaInfo], capacity: ResourceList | None,
              usage: dict[str, ResourceList]) -> str | None:
    """Where the children of a quota (or of the cluster) take more than its max (or the
    capacity): what they use, or the min of one that does not lend if it uses less."""
    groups: dict[str | None, list[QuotaInfo]] = {}
    for q in quotas:
        groups.setdefault(q.parent, []).append(q)
    by_name = {q.name: q for q in quotas}
    for parent_name, kids in groups.items():
        limit = capacity if parent_name is None else by_name[parent_name].max
        if limit is None:
            continue
        for r, cap in limit.items():
            taken = sum(
                max(usage[k.name].get(r, 0), 0 if k.allow_lent else k.min.get(r, 0)) for k in kids
            )
            if taken > cap:
                return f"children of {parent_name or 'the cluster'} take {taken} of {r}, limit {cap}"
    return None


def check_limits(run: Run, result: CycleResult, before: dict) -> None:  # type: ignore[type-arg]
    """No quota above its max; the cluster total never exceeded; mins of quotas that do
    not lend kept out of their siblings' reach."""
    usage = run.usage()
    world = run.world
    for q in world.quotas:
        for r, cap in q.max.items():
            assert usage[q.name].get(r, 0) <= cap, f"{q.name} uses {usage[q.name].get(r, 0)} of {r}, max {cap}"
    problem = overtaken(world.quotas, world.capacity, usage)
    assert problem is None, problem
    engine_used = {name: status.used for name, status in run.engine.quota_status().items()}
    assert engine_used == {name: {r: v for r, v in u.items() if v} for name, u in usage.items()}


def check_non_preemptible(run: Run, result: CycleResult, before: dict) -> None:  # type: ignore[type-arg]
    """A quota (or a quota above it) that took a non-preemptible unit this cycle has its
    non-preemptible usage within its min, per resource it limits (a min edited below
    what they used before is no admission's fault: only quotas admitted into are checked)."""
    world = run.world
    usage = run.usage(preemptible=False)
    touched = {q.name for a in result.admitted if not run.units[a.unit].preemptible for q in world.path(a.quota)}
    for q in world.quotas:
        if q.name in touched:
            event("a non-preemptible admission")
            for r in q.max:
                used, floor = usage[q.name].get(r, 0), q.min.get(r, 0)
                assert used <= floor, f"non-preemptible units use {used} of {r} in {q.name}, min {floor}"


def check_runtime(run: Run, result: CycleResult, before: dict) -> None:  # type: ignore[type-arg]
    """Runtimes within demand and max, never more than the parent's share; and the
    engine's incremental figures equal a computation from scratch."""
    world = run.world
    status = run.engine.quota_status()
    for q in world.quotas:
        s = status[q.name]
        for r, share in s.runtime.items():
            assert share <= s.demand.get(r, 0), f"{q.name}: runtime {share} of {r} above demand {s.demand}"
            assert share <= q.max[r]
        kids = [k for k in world.quotas if k.parent == q.name]
        for r, total in s.runtime.items():
            assert sum(status[k.name].runtime.get(r, 0) for k in kids) <= total
    if world.capacity is not None:
        for r, total in world.capacity.items():
            assert sum(status[q.name].runtime.get(r, 0) for q in world.quotas if q.parent is None) <= total
    # The same units loaded one by one, and loaded at once (as a rebuild does).
    fresh, loaded = QuotaTree(world.quotas, world.capacity), QuotaTree(world.quotas, world.capacity)
    loaded.defer()
    for key, info in run.units.items():
        for tree in (fresh, loaded):
            node = tree.nodes[run.leaf_of[key]]
            if key in run.admitted:
                tree.charge(node, info.request, 1)
                if not info.preemptible:
                    tree.pin(node, info.request, 1)
            else:
                tree.add_pending(node, info.request, 1)
    loaded.settle()
    fresh.refresh()
    loaded.refresh()
    for name, node in fresh.nodes.items():
        assert (status[name].demand, status[name].runtime) == (node.demand, node.runtime), name
        assert _nonzero(run.engine._ledger.tree.nodes[name].pinned) == _nonzero(node.pinned), name
        assert node.demand == demand_by_definition(node), name
    for node, other in zip([fresh.root, *fresh.nodes.values()], [loaded.root, *loaded.nodes.values()], strict=True):
        figures = ("used", "pending", "want", "demand", "runtime", "lent_reserve", "pinned")
        assert [_nonzero(getattr(node, f)) for f in figures] == [_nonzero(getattr(other, f)) for f in figures], node


def _nonzero(figures: ResourceList) -> ResourceList:
    return {name: amount for name, amount in figures.items() if amount}


def demand_by_definition(node: QuotaNode) -> ResourceList:
    """Per resource the quota limits: used plus pending (a parent: its children's
    demands, or the usage and requests of a child that does not limit it), capped at
    max; raised to min when it does not lend. Worked out from scratch, as the tree keeps
    it as things change."""
    demand: ResourceList = {}
    for name, cap in node.limit.items():
        if node.children:
            total = sum(
                demand_by_definition(child)[name] if name in child.limit
                else child.used.get(name, 0) + child.pending.get(name, 0)
                for child in node.children
            )
        else:
            total = node.used.get(name, 0) + node.pending.get(name, 0)
        demand[name] = min(total, cap)
    if not node.lends:
        for name, floor in node.min.items():
            demand[name] = max(demand.get(name, 0), floor)
    return demand


def _order(info: UnitInfo) -> tuple[int, float, str, str]:
    return (-info.priority, info.created, info.namespace, info.name)


def check_policies(run: Run, result: CycleResult, before: dict) -> None:  # type: ignore[type-arg]
    """Block: nothing behind a waiting unit of the queue is admitted. Intelligent: no
    low-band unit while a high-band one waits, and Block within the high band."""
    engine = run.engine
    waiting: dict[str, list[UnitInfo]] = {}
    for key, info in run.units.items():
        standing = engine.standing(key)
        if key not in run.admitted and standing is not None and standing.position is not None:
            assert standing.queue is not None
            waiting.setdefault(standing.queue, []).append(info)
    for admission in result.admitted:
        queue = next(q for q in run.world.queues.values() if q.key == admission.queue)
        if queue.policy is QueuePolicy.PRIORITY:
            continue
        info = run.units[admission.unit]
        threshold = queue.priority_threshold or run.world.by_name(queue.quota or "").priority_threshold or 4
        for other in waiting.get(admission.queue, []):
            if never_fits(run, other):
                event("a unit that can never fit passed over")
                continue  # passed over: nothing that ends makes room for it
            if queue.policy is QueuePolicy.BLOCK:
                assert _order(other) > _order(info), f"{info.key} admitted while {other.key} waits ahead (Block)"
            elif other.priority >= threshold:
                assert info.priority >= threshold, f"low-band {info.key} admitted while {other.key} waits"
                assert _order(other) > _order(info), f"{info.key} admitted while {other.key} waits ahead"


def never_fits(run: Run, info: UnitInfo) -> bool:
    """Whether ``info`` asks more than a limit on its quota's path (a max, the cluster, or
    for a non-preemptible unit a min) by itself, as the engine's figures stand."""
    leaf = run.engine._ledger.tree.nodes[run.leaf_of[info.key]]
    for node in leaf.path:
        for r, asked in info.request.items():
            if r in node.limit and asked > node.limit[r]:
                return True
            if not info.preemptible and not node.is_root and (r in node.limit or r in node.min_limit) \
                    and asked > node.min_limit.get(r, 0):
                return True
    return False


WAITING_TEXTS = ("waiting for quota ", "waiting for cluster capacity: ", "can never fit quota ", "blocked behind ",
                 "waiting while high-priority ")


def check_messages(run: Run, result: CycleResult, before: dict) -> None:  # type: ignore[type-arg]
    """Every unit left waiting has a reason in words; once the engine has settled, a
    queued unit's reason is a limit it runs into or a unit that blocks it (a unit that
    fits and is not admitted would be capacity left idle)."""
    settled = result.next_wakeup is None or result.next_wakeup > run.now
    for key in run.units:
        if key in run.admitted:
            continue
        standing = run.engine.standing(key)
        assert standing is not None and standing.message, key
        if settled and standing.position is not None:
            assert standing.message.startswith(WAITING_TEXTS), f"{key} waits: {standing.message}"
            if not standing.message.startswith(("blocked behind ", "waiting while high-priority ")):
                # Not held back by its queue's policy: it must not fit (else the engine
                # left capacity idle, e.g. by not waking its queue when room appeared).
                info = run.units[key]
                leaf = run.engine._ledger.tree.nodes[run.leaf_of[key]]
                misfit = first_misfit(leaf, info.request, info.priority, preemptible=info.preemptible)
                assert misfit is not None, f"{key} fits but waits"
                if misfit.hold is not None:
                    check_held_room(run, info, misfit.hold)


def check_held_room(run: Run, info: UnitInfo, hold: Hold) -> None:
    """Room is held against a unit only for a unit of higher priority, or of its own
    priority (from another quota) that has waited past its Queue's bound."""
    assert hold.priority >= info.priority, f"{info.key} kept out for {hold.holder} of lower priority"
    event("room held against a unit of lower priority" if hold.priority > info.priority else
          "room held against a unit of the same priority")
    if hold.priority == info.priority:
        holder = run.engine.unit(hold.holder)
        assert holder is not None and run.leaf_of[hold.holder] != run.leaf_of[info.key]
        since = holder.created if holder.requeue_at is None else max(holder.created, holder.requeue_at)
        bound = run.world.queues[run.leaf_of[hold.holder]].hold_room_after
        assert run.now >= since + bound, f"{info.key} kept out for {hold.holder}, which waited {run.now - since} s"


ALL_CHECKS = [check_limits, check_non_preemptible, check_runtime, check_policies, check_messages]


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(world=worlds(), stream=steps)
def test_limits_runtime_and_policies_hold_after_every_cycle(world: World, stream: list) -> None:  # type: ignore[type-arg]
    run = Run(world)
    for step in stream:
        run.play(step, ALL_CHECKS)
    run.quiesce(ALL_CHECKS)
    target(float(sum(len(preempted) for _, _, preempted, _, _ in run.log)), label="preemptions")
    for _, admitted, preempted, messages, _ in run.log:
        event(f"admissions in a cycle: {min(len(admitted), 3)}+")
        if preempted:
            event("preemption")
        if any("blocked" in text or "while high-priority" in text for _, text in messages):
            event("a queue blocked")


@st.composite
def contended_pools(draw: st.DrawFn) -> World:
    """One parent of a few GPUs over 2-3 quotas without min, which all borrow: where room
    is held for big jobs against small ones of other quotas."""
    size = draw(st.integers(4, 12))
    quotas = [QuotaInfo("pool", "default", {GPU: 0}, {GPU: size * G}, is_parent=True)]
    quotas += [QuotaInfo(f"pool-{i}", "default", {GPU: 0}, {GPU: size * G}, parent="pool",
                         policy=draw(st.sampled_from((QueuePolicy.PRIORITY, QueuePolicy.PRIORITY, QueuePolicy.BLOCK))))
               for i in range(draw(st.integers(2, 3)))]
    queues = {q.name: queue_of(q, hold_room_after=draw(st.sampled_from((0.0, 0.0, 30.0, 600.0))))
              for q in quotas if not q.is_parent}
    return World((GPU, CPU, MEM), quotas, queues, None, EngineConfig(reclaim=False))


held_arrival = st.tuples(st.just("arrive"), st.integers(0, 2), st.tuples(st.integers(1, 8), st.just(0), st.just(0)),
                         st.integers(0, 1), st.booleans(), st.integers(1, 3))
held_room_steps = st.lists(
    st.one_of(
        held_arrival,
        held_arrival,
        held_arrival,
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("send-back"), st.integers(0, 50)),
        st.tuples(st.just("wait"), st.sampled_from((1.0, 40.0, 700.0))),
    ),
    min_size=8,
    max_size=30,
)


@settings(PROPERTY_SETTINGS, max_examples=150)
@given(world=contended_pools(), stream=held_room_steps)
def test_room_is_held_only_as_the_rule_says(world: World, stream: list) -> None:  # type: ignore[type-arg]
    """check_messages asks of every settled waiting unit kept out by held room that the
    rule allows it (check_held_room); and nothing that fits waits."""
    run = Run(world)
    for step in stream:
        run.play(step, ALL_CHECKS)
    run.quiesce(ALL_CHECKS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), stream=steps)
def test_the_same_inputs_give_the_same_decisions(world: World, stream: list) -> None:  # type: ignore[type-arg]
    logs = []
    for _ in range(2):
        run = Run(world)
        for step in stream:
            run.play(step, [])
        run.quiesce([])
        logs.append(run.log)
    assert logs[0] == logs[1]


@pytest.mark.slow
@settings(PROPERTY_SETTINGS, max_examples=150)
@given(world=worlds(name_every_resource=True, protect=False), stream=steps)
def test_min_is_honoured_after_reclaim(world: World, stream: list) -> None:  # type: ignore[type-arg]
    """With nobody protected, a quota whose whole demand is within its min gets it all,
    taking back by reclaim what others borrowed."""
    min_is_honoured(world, [(*step[:4], True, step[5]) if step[0] == "arrive" else step for step in stream])


@settings(PROPERTY_SETTINGS, max_examples=150)
@given(world=worlds(name_every_resource=True, protect=False), stream=steps)
def test_min_is_honoured_beside_non_preemptible_units(world: World, stream: list) -> None:  # type: ignore[type-arg]
    """The same with units that may not be preempted (issue 29, item 4): they are held to
    their own quota's min, so they never keep another quota's min from it. (Mins are not
    edited here: a min shrunk below what non-preemptible units use now is the
    administrator's overcommitment.)"""
    min_is_honoured(world, [step for step in stream if step[:3:2] != ("edit", "min")])


def min_is_honoured(world: World, stream: list) -> None:  # type: ignore[type-arg]
    run = Run(world)
    for step in stream:
        run.play(step, ALL_CHECKS)  # checked here too: this test preempts much more
    run.quiesce(ALL_CHECKS)
    preemptions = sum(len(preempted) for _, _, preempted, _, _ in run.log)
    target(float(preemptions), label="preemptions")
    if preemptions:
        event("preemption")
    usage = run.usage()
    within_min = 0
    for leaf in world.leaves:
        pending = [k for k in run.units if run.leaf_of[k] == leaf.name and k not in run.admitted]
        demand = dict(usage[leaf.name])
        for key in pending:
            for r, amount in run.units[key].request.items():
                demand[r] = demand.get(r, 0) + amount
        within = all(amount <= leaf.min.get(r, 0) for r, amount in demand.items())
        if within and any(demand.values()):
            within_min += 1
            event("a quota asks no more than its min")
        if pending and within:
            messages = {k: run.engine.standing(k).message for k in pending}  # type: ignore[union-attr]
            raise AssertionError(f"{leaf.name} asks {demand}, within its min {leaf.min}, yet waits: {messages}")
    target(float(within_min * min(preemptions, 1)), label="quotas within their min after a preemption")


@settings(max_examples=200, deadline=None)
@given(
    total=st.none() | st.integers(0, 60),
    children=st.lists(
        st.tuples(st.integers(0, 15), st.integers(0, 30), st.integers(0, 5)), min_size=1, max_size=6
    ),
    whole=st.booleans(),
)
def test_water_fill_shares(total: int | None, children: list[tuple[int, int, int]], whole: bool) -> None:
    """Shares never exceed demand or the total; guarantees first; nothing left idle that
    a weighted child wants; whole units stay whole."""
    scale = G if whole else 7  # 7: amounts that are not whole units
    mins = [m * scale for m, _, _ in children]
    demands = [d * scale for _, d, _ in children]
    weights = [w * G for _, _, w in children]
    limit = None if total is None else total * scale
    shares = water_fill(limit, mins, demands, weights)
    guaranteed = [min(d, m) for d, m in zip(demands, mins, strict=True)]
    assert all(0 <= s <= d for s, d in zip(shares, demands, strict=True))
    if limit is None or sum(demands) <= limit:
        assert shares == demands
        return
    assert sum(shares) <= limit
    if sum(guaranteed) <= limit:
        assert all(s >= g for s, g in zip(shares, guaranteed, strict=True))
        if any(w > 0 and s < d for s, d, w in zip(shares, demands, weights, strict=True)):
            assert sum(shares) == limit, "capacity left idle while a weighted child wants more"
        # Beyond their guarantees, a child kept below its demand got, per unit of
        # weight, no less than any other child (give or take one unit of rounding).
        extra = [s - g for s, g in zip(shares, guaranteed, strict=True)]
        step = G if whole else 1
        short = [i for i, (s, d, w) in enumerate(zip(shares, demands, weights, strict=True)) if w and s < d]
        for i in short:
            for j, w in enumerate(weights):
                if w and j != i:
                    assert extra[j] * weights[i] <= (extra[i] + step) * w + step * weights[i], (i, j, shares)
        assert all(extra[i] == 0 for i, w in enumerate(weights) if w == 0)
    else:
        assert sum(shares) == limit
    if whole and limit is not None:
        assert all(s % G == 0 for s in shares)


def test_property_worlds_are_varied() -> None:
    """The generator reaches 3 levels, non-lending quotas and all three policies."""
    seen: set[str] = set()

    @settings(max_examples=100, deadline=None, database=None)
    @given(world=worlds())
    def look(world: World) -> None:
        depth = max(len(world.path(q.name)) for q in world.quotas)
        seen.add(f"depth{depth}")
        seen.update(str(q.policy) for q in world.leaves)
        seen.update("no-lend" for q in world.quotas if not q.allow_lent)
        seen.update("capacity" for _ in [world.capacity] if world.capacity is not None)

    look()
    assert {"depth3", "Block", "Intelligent", "Priority", "no-lend", "capacity"} <= seen



_GROUP = st.tuples(
    st.none() | st.integers(-2, 60),  # the parent's total, in steps (None: unbounded)
    st.lists(st.tuples(st.integers(0, 15), st.integers(0, 30), st.integers(0, 5)), min_size=1, max_size=7),
    st.sampled_from([G, 7, 16 * 1024**3 * 1000, 2**58]),  # whole units, odd milli-units, memory, huge
    st.sampled_from([G, 1, 3 * G, 2**60]),  # the weights' scale
)


@settings(max_examples=80, deadline=None)
@given(groups=st.lists(_GROUP, min_size=1, max_size=40), data=st.data())
def test_fill_level_is_water_fill_of_each(groups: list, data: st.DataObject) -> None:  # type: ignore[type-arg]
    """The vectorised pass gives every group the shares the loop gives, to the milli-unit:
    contended or not, whole or not, short of the mins, with figures too big for 64-bit
    products (which it leaves to the loop), over all groups or some in any order."""
    totals, columns, expected = [], [], []
    for total, children, scale, weight_scale in groups:
        mins = [m * scale for m, _, _ in children]
        demands = [d * scale for _, d, _ in children]
        weights = [w * weight_scale for _, _, w in children]
        totals.append(None if total is None else total * scale)
        columns.append((mins, weights, demands))
        expected.append(water_fill(totals[-1], mins, demands, weights))
    level = Level(columns)
    chosen = data.draw(st.none() | st.lists(st.integers(0, len(groups) - 1), unique=True, min_size=1))
    order = range(len(groups)) if chosen is None else chosen
    flat, exact = fill_level(level, [totals[i] for i in order], chosen)
    start = 0
    for i, done in zip(order, exact, strict=True):
        mins, weights, demands = columns[i]
        shares = flat[start:start + len(mins)]
        start += len(shares)
        total = totals[i]
        common = gcd(*weights) or 1
        big = sum(demands) * (sum(weights) // common + 1) >= 2**62 or (total or 0) >= 2**62
        short = total is not None and sum(demands) > total and sum(map(min, demands, mins)) > total
        assert done == (not big and not short), (i, groups[i])  # the loop gets those, and only those
        if done:
            assert shares == expected[i], (i, groups[i])
        else:
            event("a group left to the loop")
    assert start == len(flat)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_tree_splits_alike_by_columns_and_by_loop(seed: int) -> None:
    """A tree wide enough for columns (40 middle quotas, 3 resources: 120 groups at a
    depth) ends every refresh with the runtimes of a tree that only loops, through
    random changes of usage and requests and edits of quotas, few or many at a time."""
    rng = random.Random(seed)
    infos = []
    for t in range(2):
        infos.append(QuotaInfo(f"t{t}", "default", {"cpu": 40 * G, GPU: 20 * G, MEM: 80 * G},
                               {"cpu": 120 * G, GPU: 60 * G, MEM: 240 * G}, is_parent=True))
        for m in range(20):
            low = {"cpu": rng.randint(0, 3) * G, GPU: rng.randint(0, 2) * G, MEM: rng.randint(0, 4) * G}
            infos.append(QuotaInfo(f"t{t}-m{m}", "default", low, {k: v * 3 + G for k, v in low.items()},
                                   parent=f"t{t}", is_parent=True, allow_lent=rng.random() > 0.2,
                                   shared_weight={k: rng.randint(0, 3) * G for k in low}))
            for leaf in range(3):
                infos.append(QuotaInfo(f"t{t}-m{m}-l{leaf}", "default", {"cpu": G, GPU: 0, MEM: G},
                                       {"cpu": 4 * G, GPU: 2 * G, MEM: 4 * G}, parent=f"t{t}-m{m}",
                                       allow_lent=rng.random() > 0.2))
    capacity = {"cpu": rng.randint(60, 300) * G, GPU: rng.randint(10, 150) * G, MEM: rng.randint(60, 600) * G}
    by_columns = QuotaTree(infos, capacity)
    with patch.object(tree_module, "LEVEL_GROUPS", 10**9):
        by_loop = QuotaTree(infos, capacity)  # keeps no columns, so it always loops
    assert by_columns._levels and not by_loop._levels
    leaves = [i.name for i in infos if i.name.count("-") == 2]
    for _ in range(6):
        for _ in range(rng.choice((1, 5, 60))):
            name = rng.choice(leaves)
            request = {"cpu": rng.randint(0, 4) * G + rng.choice((0, 1, 500)), GPU: rng.randint(0, 2) * G,
                       MEM: rng.randint(0, 4) * G}
            admitted = rng.random() < 0.5
            for tree in (by_columns, by_loop):
                if admitted:
                    tree.charge(tree.nodes[name], request, 1)
                else:
                    tree.add_pending(tree.nodes[name], request, 1)
        for _ in range(rng.choice((0, 1, 40))):  # edits taken in place, mostly in the columns' groups
            info = by_columns.nodes[rng.choice(leaves) if rng.random() < 0.8 else f"t{rng.randrange(2)}-m{rng.randrange(20)}"].info
            assert info is not None
            low = {k: rng.randint(0, 3) * G for k in info.min}
            edited = replace(info, min=low, max={k: v + rng.randint(1, 3) * G for k, v in low.items()},
                             shared_weight={k: rng.randint(0, 5) * G for k in low}, allow_lent=rng.random() > 0.5)
            for tree in (by_columns, by_loop):
                tree.update(edited)
        changed = by_columns.refresh()
        assert {n.name for n in changed} == {n.name for n in by_loop.refresh()}
        for name, node in by_columns.nodes.items():
            assert node.runtime == by_loop.nodes[name].runtime, name
            assert node.demand == demand_by_definition(node), name
