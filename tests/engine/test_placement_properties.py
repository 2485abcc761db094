"""Properties of placement over random clusters and random gangs (hypothesis).

Random nodes (sizes, zones and racks, taints, cordons), two quotas, and a stream of
steps: jobs of one or two pod sets arrive (selectors, tolerations, topology required or
preferred, elastic or not), admitted jobs' pods bind where they were planned (or on
another node that takes them, as a real scheduler may), jobs end. After every cycle:
no node holds more than its allocatable; every pod is planned on a node it may use;
pods that asked for a required domain are in one; an admitted job has all its pods (or,
elastic, at least its minCount); and no waiting job of a Priority queue could have been
admitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koordqueue.api.constants import LABEL_TOPOLOGY_RACK, LABEL_TOPOLOGY_ZONE
from koordqueue.engine import Engine
from koordqueue.engine.fit import first_misfit
from koordqueue.engine.model import (
    EngineConfig,
    NodeInfo,
    Placement,
    PodSetInfo,
    Taint,
    Toleration,
    TopologyRequest,
    UnitInfo,
    auto_queue_for,
)
from koordqueue.engine.nodefilter import node_refusal
from koordqueue.engine.placement import Unplaced

from .builders import CPU, GPU, G, quota

ZONE, RACK = LABEL_TOPOLOGY_ZONE, LABEL_TOPOLOGY_RACK
LEVELS = (ZONE, RACK, "kubernetes.io/hostname")
DEDICATED = Taint("dedicated", "x", "NoSchedule")


@st.composite
def nodes(draw: st.DrawFn) -> list[NodeInfo]:
    out = []
    for i in range(draw(st.integers(1, 8))):
        labels = {"kubernetes.io/hostname": f"n{i}", ZONE: draw(st.sampled_from("ab")),
                  RACK: draw(st.sampled_from(["r1", "r2"]))}
        if draw(st.booleans()):
            labels["accelerator"] = draw(st.sampled_from(["a100", "h100"]))
        taints = (DEDICATED,) if draw(st.integers(0, 4)) == 0 else ()
        out.append(NodeInfo(f"n{i}", {GPU: draw(st.sampled_from([4, 8])) * G, CPU: 32 * G, "pods": 8000},
                            labels, taints, unschedulable=draw(st.integers(0, 9)) == 0))
    return out


@st.composite
def pod_sets(draw: st.DrawFn) -> tuple[PodSetInfo, ...]:
    topology = draw(st.one_of(st.none(), st.builds(TopologyRequest, st.sampled_from([ZONE, RACK]), st.booleans())))
    out = []
    for name in ("master", "worker")[: draw(st.integers(1, 2))]:
        count = draw(st.integers(1, 4))
        elastic = name == "worker" and count > 1 and draw(st.booleans())
        out.append(PodSetInfo(
            name, count, {GPU: draw(st.sampled_from([0, 1, 2, 4, 8])) * G, CPU: draw(st.integers(1, 16)) * G},
            min_count=draw(st.integers(1, count - 1)) if elastic else None,
            node_selector=(("accelerator", draw(st.sampled_from(["a100", "h100"]))),)
            if draw(st.integers(0, 3)) == 0 else (),
            tolerations=(Toleration("dedicated", operator="Exists"),) if draw(st.booleans()) else (),
            topology=topology if draw(st.integers(0, 3)) else None,
        ))
    return tuple(out)


Step = tuple[str, object]
steps = st.lists(st.one_of(
    st.tuples(st.just("arrive"), st.tuples(pod_sets(), st.sampled_from(["q1", "q2"]), st.integers(0, 3))),
    st.tuples(st.just("bind"), st.booleans()),  # True: on another node than planned, where it fits
    st.tuples(st.just("end"), st.integers(0, 99)),
), min_size=1, max_size=25)


@dataclass
class Cluster:
    """What the test knows, from the admissions the engine reported."""

    nodes: dict[str, NodeInfo]
    units: dict[str, UnitInfo] = field(default_factory=dict)
    placed: dict[str, Placement] = field(default_factory=dict)  # admitted units
    bound: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)

    def request(self, key: str, pod_set: str) -> dict[str, int]:
        return next(ps.request for ps in self.units[key].pod_sets if ps.name == pod_set)

    def usage(self) -> dict[str, dict[str, int]]:
        used: dict[str, dict[str, int]] = {name: {} for name in self.nodes}
        for key, pods in self.bound.items():
            for (pod_set, node), n in pods.items():
                for r, a in {**self.request(key, pod_set), "pods": 1000}.items():
                    used[node][r] = used[node].get(r, 0) + n * a
        return used


def check(engine: Engine, cluster: Cluster) -> None:
    taken = cluster.usage()
    for key, placement in cluster.placed.items():
        unit = cluster.units[key]
        bound = cluster.bound.get(key, {})
        for ps in unit.pod_sets:
            planned = [(node, n) for s, node, n in placement.nodes if s == ps.name]
            count = placement.count_of(ps.name, ps.count)
            assert sum(n for _, n in planned) == count, (key, ps.name, placement)
            assert count == ps.count or (ps.min_count is not None and ps.min_count <= count < ps.count)
            for node, _ in planned:
                assert node_refusal(cluster.nodes[node], ps) is None, (key, ps, node)
            if ps.topology is not None and ps.topology.required:
                domains = {(cluster.nodes[node].labels.get(ZONE), cluster.nodes[node].labels.get(RACK))
                           if ps.topology.level == RACK else cluster.nodes[node].labels.get(ZONE)
                           for node, _ in planned}
                assert len(domains) == 1, (key, ps, planned)
            # the planned pods not bound yet take room where planned (as the engine assumes)
            unbound = count - sum(n for (s, _), n in bound.items() if s == ps.name)
            for node, n in planned:
                here = min(max(n - bound.get((ps.name, node), 0), 0), unbound)
                unbound -= here
                for r, a in {**ps.request, "pods": 1000}.items():
                    taken[node][r] = taken[node].get(r, 0) + here * a
    for name, info in cluster.nodes.items():
        for r, amount in taken[name].items():
            assert amount <= info.allocatable.get(r, 0), (name, r, taken[name], info.allocatable)
    # Nothing that could go was left waiting (both queues are Priority, the quotas have no parent).
    for key, info in cluster.units.items():
        if key in cluster.placed:
            continue
        leaf = engine._ledger.tree.nodes[info.quota_name or ""]
        if first_misfit(leaf, info.request, info.priority) is None:
            assert isinstance(engine._ledger.room.place(info.pod_sets), Unplaced), key
        for ps in info.pod_sets:
            if ps.elastic and ps.min_count is not None:
                request = dict(info.request)
                for r, a in ps.request.items():
                    request[r] -= (ps.count - ps.min_count) * a
                if first_misfit(leaf, request, info.priority) is None:
                    assert isinstance(engine._ledger.room.place(info.pod_sets, {ps.name: ps.min_count}), Unplaced), key


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), steps)
def test_placement_keeps_every_node_within_its_allocatable(node_list: list[NodeInfo], plan: list[Step]) -> None:
    engine = Engine(EngineConfig(topology_levels=LEVELS))
    for q in (quota("q1", 0, {"gpu": 24, "cpu": 200}), quota("q2", 0, {"gpu": 48, "cpu": 200})):
        engine.set_quota(q)
        engine.set_queue(auto_queue_for(q))
    cluster = Cluster({n.name: n for n in node_list})
    for n in node_list:
        engine.set_node(n)
    now = 0.0
    for serial, (kind, arg) in enumerate(plan):
        now += 1.0
        if kind == "arrive":
            sets, quota_name, priority = arg  # type: ignore[misc]
            request: dict[str, int] = {}
            for ps in sets:
                for r, a in ps.request.items():
                    request[r] = request.get(r, 0) + ps.count * a
            unit = UnitInfo("default", f"job{serial}", priority, now, request, quota_name=quota_name, pod_sets=sets)
            cluster.units[unit.key] = unit
            engine.set_unit(unit)
        elif kind == "bind":
            for key, placement in cluster.placed.items():
                if key in cluster.bound:
                    continue
                pods: dict[tuple[str, str], int] = {}
                for pod_set, node, n in placement.nodes:
                    pods[(pod_set, node)] = pods.get((pod_set, node), 0) + n
                if arg:  # the first pod somewhere else, where it fits now
                    (pod_set, node), _ = next(iter(pods.items()))
                    ps = next(p for p in cluster.units[key].pod_sets if p.name == pod_set)
                    for other in sorted(cluster.nodes):
                        free = engine.node_free(other)
                        if other != node and node_refusal(cluster.nodes[other], ps) is None and all(
                                free.get(r, 0) >= a for r, a in {**ps.request, "pods": 1000}.items()):
                            pods[(pod_set, node)] -= 1
                            pods[(pod_set, other)] = pods.get((pod_set, other), 0) + 1
                            break
                cluster.bound[key] = pods
                engine.set_unit_pods(key, pods)
                for name, used in cluster.usage().items():
                    engine.set_node_usage(name, used)
                break
        elif kind == "end" and cluster.placed:
            key = sorted(cluster.placed)[int(arg) % len(cluster.placed)]  # type: ignore[call-overload]
            del cluster.placed[key], cluster.units[key]
            cluster.bound.pop(key, None)
            engine.remove_unit(key)
            for name, used in cluster.usage().items():
                engine.set_node_usage(name, used)
        for _ in range(10):
            result = engine.schedule(now)
            assert not result.preempted
            for admission in result.admitted:
                assert admission.placement is not None
                cluster.placed[admission.unit] = admission.placement
            if result.next_wakeup is None or result.next_wakeup > now:
                break
        check(engine, cluster)
