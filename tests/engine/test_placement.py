"""Node fit at admission: a unit is admitted only when all its pods fit on the nodes now
(gang), on the room left by bound pods and by admitted units whose pods are not bound
yet; its pods go only where their nodeSelector, required node affinity and tolerations
allow; and the reason it waits names the fact."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from koordqueue.api.constants import LABEL_TOPOLOGY_RACK, QueuePolicy
from koordqueue.engine.model import (
    NodeInfo,
    Placement,
    PodSetInfo,
    Requirement,
    Taint,
    Toleration,
    TopologyRequest,
    UnitInfo,
    auto_queue_for,
)
from koordqueue.engine.nodefilter import Refusal, node_refusal
from koordqueue.engine.placement import NodeRoom

from .builders import CPU, GPU, G, engine_with, gang, node, pod_set, quota, settle, unit, used, with_nodes

DEDICATED = Taint("dedicated", "infer", "NoSchedule")


def busy(gpus: int) -> dict[str, int]:
    """What bound pods asking ``gpus`` GPUs take on a node."""
    return {GPU: gpus * G}


def message(engine, key: str) -> str:  # type: ignore[no-untyped-def]
    standing = engine.standing(key)
    assert standing is not None
    return standing.message


# name -> (nodes, GPUs used on them by bound pods, the unit's pod sets, its message)
WAITING = {
    "no node has the GPUs of one pod": (
        [node(f"gpu-{i}") for i in range(4)],
        {"gpu-0": 8, "gpu-1": 8, "gpu-2": 8, "gpu-3": 2},
        [pod_set("worker", 1, gpus=8)],
        "quota pytorch-team-a has room, but no node has 8 free nvidia.com/gpu (the most free on one node: 6, "
        "on gpu-3)",
    ),
    "the gang does not fit at once": (
        [node(f"gpu-{i}") for i in range(2)],
        {"gpu-0": 4},
        [pod_set("worker", 4, gpus=4, cpu=4)],
        "quota pytorch-team-a has room, but the nodes have room for 3 of its 4 worker pods "
        "(4 cpu, 4 nvidia.com/gpu each) now",
    ),
    "a pod bigger than any node": (
        [node(f"gpu-{i}") for i in range(2)],
        {},
        [pod_set("worker", 1, gpus=16)],
        "quota pytorch-team-a has room, but no node has 16 free nvidia.com/gpu (the most free on one node: 8, "
        "on gpu-0); nor would any, empty",
    ),
    "a resource no node has": (
        [node("gpu-0")],
        {},
        [PodSetInfo("worker", 1, {"example.com/fpga": 1 * G})],
        "quota pytorch-team-a has room, but no node has example.com/fpga, which its worker pod ask for (1 each)",
    ),
    "a taint not tolerated": (
        [node("gpu-0", taints=(DEDICATED,)), node("gpu-1", taints=(DEDICATED,))],
        {},
        [pod_set("worker", 1)],
        "quota pytorch-team-a has room, but no node may take its worker pod: 2 with taint "
        "dedicated=infer:NoSchedule not tolerated",
    ),
    "a NoExecute taint not tolerated": (
        [node("gpu-0", taints=(Taint("gpu", "", "NoExecute"),))],
        {},
        [pod_set("worker", 1, tolerations=(Toleration("gpu", effect="NoSchedule"),))],
        "quota pytorch-team-a has room, but no node may take its worker pod: 1 with taint gpu:NoExecute "
        "not tolerated",
    ),
    "a selector no node matches": (
        [node("gpu-0", labels={"accelerator": "a100"}), node("gpu-1", labels={"accelerator": "a100"}),
         node("cpu-0", gpus=0, taints=(Taint("cpu-only"),))],
        {},
        [pod_set("worker", 2, node_selector=(("accelerator", "h100"),))],
        "quota pytorch-team-a has room, but no node may take its 2 worker pods: 2 without label "
        "accelerator=h100 (nodeSelector), 1 with taint cpu-only:NoSchedule not tolerated",
    ),
    "unschedulable nodes": (
        [node("gpu-0", unschedulable=True), node("gpu-1", unschedulable=True)],
        {},
        [pod_set("worker", 1)],
        "quota pytorch-team-a has room, but no node may take its worker pod: 2 unschedulable",
    ),
    "required node affinity": (
        [node("gpu-0", labels={"pool": "a"}), node("gpu-1", labels={"pool": "b"})],
        {},
        [pod_set("worker", 1, affinity=((Requirement("pool", "In", ("c", "d")),),
                                        (Requirement("pool", "DoesNotExist"),)))],
        "quota pytorch-team-a has room, but no node may take its worker pod: 2 outside its required node affinity",
    ),
}


@pytest.mark.parametrize("case", WAITING)
def test_a_unit_that_fits_its_quota_but_not_the_nodes_waits_and_says_why(case: str) -> None:
    nodes, usage, pod_sets, expected = WAITING[case]
    engine = with_nodes(engine_with(quota("pytorch-team-a", 0, 100)), *nodes)
    for name, gpus in usage.items():
        engine.set_node_usage(name, busy(gpus))
    engine.set_unit(gang("job", *pod_sets, quota_name="pytorch-team-a"))
    assert settle(engine, 0.0) == []
    assert message(engine, "default/job") == expected
    assert engine.quota_status()["pytorch-team-a"].used == {}


# name -> (nodes, the unit's pod sets): each is admitted
ADMITTED = {
    "a toleration of the taint": (
        [node("gpu-0", taints=(DEDICATED,))], [pod_set(tolerations=(Toleration("dedicated", value="infer"),))]),
    "a toleration of every taint": ([node("gpu-0", taints=(DEDICATED,))], [pod_set(tolerations=(
        Toleration(operator="Exists"),))]),
    "Exists on the key": ([node("gpu-0", taints=(DEDICATED,))], [pod_set(tolerations=(
        Toleration("dedicated", operator="Exists", effect="NoSchedule"),))]),
    "PreferNoSchedule keeps nobody out": ([node("gpu-0", taints=(Taint("soft", "", "PreferNoSchedule"),))],
                                          [pod_set()]),
    "a selector some node matches": (
        [node("gpu-0", labels={"accelerator": "a100"}), node("gpu-1", labels={"accelerator": "h100"})],
        [pod_set(node_selector=(("accelerator", "h100"),))]),
    "required affinity by name": (
        [node("gpu-0"), node("gpu-1")], [pod_set(affinity=((Requirement("metadata.name", "In", ("gpu-1",),
                                                                      field=True),),))]),
    "Gt on a label": ([node("gpu-0", labels={"generation": "3"}), node("gpu-1", labels={"generation": "5"})],
                      [pod_set(affinity=((Requirement("generation", "Gt", ("4",)),),))]),
    "a gang across nodes": ([node(f"gpu-{i}") for i in range(3)], [pod_set("master", 1, gpus=0, cpu=4),
                                                                    pod_set("worker", 3, gpus=8)]),
}


@pytest.mark.parametrize("case", ADMITTED)
def test_a_unit_whose_pods_may_go_somewhere_is_admitted(case: str) -> None:
    nodes, pod_sets = ADMITTED[case]
    engine = with_nodes(engine_with(quota("team", 0, 100)), *nodes)
    engine.set_unit(gang("job", *pod_sets, quota_name="team"))
    assert settle(engine, 0.0) == ["default/job"]


def test_the_placement_names_the_nodes_that_may_take_the_pods() -> None:
    engine = with_nodes(engine_with(quota("team", 0, 100)), node("gpu-0", labels={"accelerator": "a100"}),
                        node("gpu-1", labels={"accelerator": "h100"}), node("gpu-2", labels={"accelerator": "h100"}))
    engine.set_unit(gang("job", pod_set("worker", 2, gpus=4, node_selector=(("accelerator", "h100"),)),
                         quota_name="team"))
    result = engine.schedule(0.0)
    (admission,) = result.admitted
    assert admission.placement is not None
    # Both on one node: the tightest that takes them all (few nodes, big holes kept).
    assert admission.placement.nodes == (("worker", "gpu-1", 2),)


def test_admitted_units_whose_pods_are_not_bound_yet_take_their_room() -> None:
    engine = with_nodes(engine_with(quota("team", 0, 100)), node("gpu-0"))
    engine.set_unit(gang("first", pod_set(), quota_name="team", created=1))
    engine.set_unit(gang("second", pod_set(), quota_name="team", created=2))
    assert settle(engine, 0.0) == ["default/first"]
    assert "no node has 8 free nvidia.com/gpu" in message(engine, "default/second")
    # Its pod binds: the room it takes is counted once, as a bound pod now.
    engine.set_node_usage("gpu-0", {GPU: 8 * G, CPU: 8 * G, "pods": 1000})
    engine.set_unit_pods("default/first", {("worker", "gpu-0"): 1})
    assert engine.node_free("gpu-0")[GPU] == 0
    assert settle(engine, 1.0) == []
    # It ends: its pod goes, the second fits.
    engine.remove_unit("default/first")
    engine.set_node_usage("gpu-0", {})
    assert settle(engine, 2.0) == ["default/second"]


def test_a_pod_bound_elsewhere_than_planned_moves_the_room_it_takes() -> None:
    engine = with_nodes(engine_with(quota("team", 0, 100)), node("gpu-0"), node("gpu-1"))
    engine.set_unit(gang("job", pod_set(gpus=8), quota_name="team"))
    (admission,) = engine.schedule(0.0).admitted
    assert admission.placement is not None
    (_, planned, _), = admission.placement.nodes
    other = "gpu-1" if planned == "gpu-0" else "gpu-0"
    engine.set_node_usage(other, {GPU: 8 * G, CPU: 8 * G})  # the scheduler chose the other node
    engine.set_unit_pods("default/job", {("worker", other): 1})
    assert engine.node_free(planned)[GPU] == 8 * G
    assert engine.node_free(other)[GPU] == 0


def test_a_unit_waiting_for_nodes_is_admitted_when_a_node_comes() -> None:
    engine = with_nodes(engine_with(quota("team", 0, 100)), node("gpu-0", gpus=4))
    engine.set_unit(gang("job", pod_set(gpus=8), quota_name="team"))
    assert settle(engine, 0.0) == []
    engine.set_node(node("gpu-1"))
    assert settle(engine, 1.0) == ["default/job"]


def test_a_selector_no_node_matches_is_never_admitted() -> None:
    engine = with_nodes(engine_with(quota("team", 0, 100)), node("gpu-0"), node("gpu-1"))
    engine.set_unit(gang("picky", pod_set(node_selector=(("accelerator", "h100"),)), quota_name="team"))
    for t in range(5):
        engine.set_unit(gang(f"other-{t}", pod_set(gpus=1), quota_name="team", created=t))
        settle(engine, float(t))
        engine.remove_unit(f"default/other-{t}")
    assert settle(engine, 10.0) == []
    assert "without label accelerator=h100 (nodeSelector)" in message(engine, "default/picky")


def test_node_fit_can_be_turned_off_per_quota_and_per_queue() -> None:
    off = replace(quota("off", 0, 100), node_fit=False)
    on = quota("on", 0, 100)
    engine = with_nodes(engine_with(off, on), node("gpu-0", gpus=4))
    engine.set_unit(gang("by-quota", pod_set(gpus=8), quota_name="off"))
    engine.set_unit(gang("by-nodes", pod_set(gpus=8), quota_name="on"))
    assert settle(engine, 0.0) == ["default/by-quota"]
    # The Queue's setting wins over its quota's.
    engine.set_queue(replace(auto_queue_for(on), node_fit=False))
    assert settle(engine, 1.0) == ["default/by-nodes"]


def test_an_admission_on_quota_alone_names_no_nodes() -> None:
    """With node fit off, the engine only guesses where the pods will go (to count the room
    they take): the admission does not pass that guess off as a placement to pin."""
    engine = with_nodes(engine_with(replace(quota("off", 0, 100), node_fit=False)), node("gpu-0", gpus=4))
    engine.set_unit(gang("job", pod_set("master", 1, gpus=3), pod_set("worker", 1, gpus=3), quota_name="off"))
    (admission,) = engine.schedule(0.0).admitted
    assert admission.placement is None


def test_without_nodes_or_pod_sets_quota_alone_decides() -> None:
    engine = engine_with(quota("team", 0, 100))
    engine.set_unit(gang("job", pod_set(gpus=64), quota_name="team"))
    assert settle(engine, 0.0) == ["default/job"]
    engine = with_nodes(engine_with(quota("team", 0, 100)), node("gpu-0"))
    engine.set_unit(unit("plain", 64, "team"))
    assert settle(engine, 0.0) == ["default/plain"]


def test_block_stops_at_a_unit_the_nodes_cannot_take_now() -> None:
    """(One the nodes could never take, even empty, is passed over: test_never_fit.py.)"""
    engine = with_nodes(engine_with(quota("team", 0, 100, policy=QueuePolicy.BLOCK)), node("gpu-0"))
    engine.set_node_usage("gpu-0", busy(4))  # bound pods of no unit take half of it
    engine.set_unit(gang("big", pod_set(gpus=8), quota_name="team", created=1))
    engine.set_unit(gang("small", pod_set(gpus=1), quota_name="team", created=2))
    assert settle(engine, 0.0) == []
    assert message(engine, "default/small").startswith("blocked behind default/big")


def test_priority_passes_over_a_unit_the_nodes_cannot_take() -> None:
    engine = with_nodes(engine_with(quota("team", 0, 100)), node("gpu-0"))
    engine.set_unit(gang("big", pod_set(gpus=16), quota_name="team", created=1))
    engine.set_unit(gang("small", pod_set(gpus=1), quota_name="team", created=2))
    assert settle(engine, 0.0) == ["default/small"]


def test_a_preemptor_is_admitted_only_where_its_victims_pods_make_room() -> None:
    # Two quotas under one node of 8 GPUs; b borrows all of it; a reclaims its min.
    a = quota("a", 8, 8)
    b = quota("b", 0, 8)
    engine = with_nodes(engine_with(a, b, capacity=8, protect_seconds=0), node("gpu-0"))
    engine.set_unit(gang("borrower", pod_set(gpus=8), quota_name="b"))
    assert settle(engine, 0.0) == ["default/borrower"]
    engine.set_node_usage("gpu-0", {GPU: 8 * G, CPU: 8 * G})
    engine.set_unit_pods("default/borrower", {("worker", "gpu-0"): 1})
    engine.set_unit(gang("owner", pod_set(gpus=8), quota_name="a", created=1))
    result = engine.schedule(10.0)
    assert [p.unit for p in result.preempted] == ["default/borrower"]
    assert [a.unit for a in result.admitted] == ["default/owner"]
    assert used(engine) == {"a": 8, "b": 0}


def test_no_preemption_when_the_victims_room_is_not_where_the_pods_can_go() -> None:
    a = quota("a", 8, 8)
    b = quota("b", 0, 8)
    engine = with_nodes(engine_with(a, b, capacity=16, protect_seconds=0),
                        node("gpu-0"), node("gpu-1", labels={"accelerator": "h100"}))
    engine.set_unit(gang("borrower", pod_set(gpus=8), quota_name="b"))
    engine.set_unit(gang("filler", pod_set(gpus=8, node_selector=(("accelerator", "h100"),)), quota_name="a",
                         created=0.5))
    assert sorted(settle(engine, 0.0)) == ["default/borrower", "default/filler"]
    # a wants 8 more: the borrower's node is not one its pods may use.
    engine.set_unit(gang("owner", pod_set(gpus=8, node_selector=(("accelerator", "h100"),)), quota_name="a",
                         created=1))
    engine.set_quota(replace(a, min={GPU: 16 * G}, max={GPU: 16 * G}))
    result = engine.schedule(10.0)
    assert result.preempted == [] and result.admitted == []


def test_units_alike_but_for_their_pods_wait_apart() -> None:
    """Units with the same request but other pod rules are not one stream: the one that
    fits goes ahead of one that does not, though they look alike to the quota."""
    engine = with_nodes(engine_with(quota("team", 0, 100)), node("gpu-0", labels={"accelerator": "a100"}))
    engine.set_unit(gang("h100", pod_set(node_selector=(("accelerator", "h100"),)), quota_name="team", created=1))
    engine.set_unit(gang("a100", pod_set(node_selector=(("accelerator", "a100"),)), quota_name="team", created=2))
    assert settle(engine, 0.0) == ["default/a100"]


def test_a_unit_found_holding_quota_takes_room_where_its_pods_fit() -> None:
    """After a restart, an admitted unit whose pods are not bound yet takes room somewhere."""
    engine = with_nodes(engine_with(quota("team", 0, 100)), node("gpu-0"))
    held = gang("held", pod_set(gpus=8), quota_name="team")
    engine.set_unit(UnitInfo(**{**{f: getattr(held, f) for f in held.__slots__},  # type: ignore[attr-defined]
                                "admitted_quota": "team", "admitted_at": 0.0}))
    engine.set_unit(gang("new", pod_set(gpus=8), quota_name="team", created=1))
    assert settle(engine, 1.0) == []
    assert engine.node_free("gpu-0")[GPU] == 0


def test_node_info_of_a_cordoned_node_tolerated() -> None:
    engine = with_nodes(engine_with(quota("team", 0, 100)), NodeInfo("gpu-0", {GPU: 8 * G}, unschedulable=True))
    engine.set_unit(gang("job", PodSetInfo("worker", 1, {GPU: 8 * G}, tolerations=(
        Toleration("node.kubernetes.io/unschedulable", operator="Exists"),)), quota_name="team"))
    assert settle(engine, 0.0) == ["default/job"]


def test_node_refusal_checks_the_cordon_first_then_taints_then_affinity() -> None:
    """kube-scheduler's filter order (NodeUnschedulable, TaintToleration, NodeAffinity): a node
    is counted under the first it fails, here and in the simulated scheduler's messages."""
    taint = Taint("gpu", "true", "NoSchedule")
    ps = PodSetInfo("worker", 1, {GPU: G}, node_selector=(("rack", "a"),))
    cordoned = NodeInfo("n", {GPU: 8 * G}, taints=(taint,), unschedulable=True)
    assert node_refusal(cordoned, ps) == Refusal("unschedulable")
    tainted = replace(cordoned, unschedulable=False)
    assert node_refusal(tainted, ps) == Refusal("taint", taint=taint)
    assert node_refusal(tainted, replace(ps, tolerations=(Toleration("gpu", operator="Exists"),))) == Refusal(
        "nodeSelector", label=("rack", "a"))
    assert node_refusal(replace(tainted, taints=(Taint("gpu", "true", "PreferNoSchedule"),),
                                labels={"rack": "a"}), ps) is None


@pytest.mark.parametrize("seed", range(6))
def test_counts_kept_between_checks_place_as_a_room_built_afresh(seed: int) -> None:
    """The room keeps, per pod shape, how many fit on each node between checks, and
    updates only the nodes whose room changed: after random usage, plans, bindings and
    releases, every check places as a room built from the same inputs at once."""
    rng = random.Random(seed)
    nodes = [node(f"n{i}", labels={LABEL_TOPOLOGY_RACK: f"r{i // 4}"}, taints=(DEDICATED,) if i % 7 == 0 else ())
             for i in range(24)]
    shapes = [pod_set("worker", count, gpus=gpus, cpu=gpus, **extra)  # type: ignore[arg-type]
              for count in (1, 3, 6) for gpus in (1, 2, 4, 8)
              for extra in ({}, {"topology": TopologyRequest(LABEL_TOPOLOGY_RACK, True)},
                            {"topology": TopologyRequest(LABEL_TOPOLOGY_RACK, False)})]
    calls: list[tuple[str, tuple[object, ...]]] = []

    def room_from(history: list[tuple[str, tuple[object, ...]]]) -> NodeRoom:
        room = NodeRoom((LABEL_TOPOLOGY_RACK, "kubernetes.io/hostname"))
        for info in nodes:
            room.set_node(info)
        for name, args in history:
            getattr(room, name)(*args)
        return room

    kept = room_from([])
    held: list[str] = []
    for step in range(120):
        choice = rng.random()
        if choice < 0.3:
            name = rng.choice(nodes).name
            call: tuple[str, tuple[object, ...]] = ("set_usage", (name, busy(rng.randint(0, 8))))
        elif choice < 0.6 or not held:
            ps = rng.choice(shapes)
            found = kept.place((ps,))
            if not isinstance(found, Placement):
                continue
            unit_key = f"u{step}"
            kept.track(unit_key, (ps,))
            calls.append(("track", (unit_key, (ps,))))
            call = ("hold", (unit_key, found.nodes))
            held.append(unit_key)
        elif choice < 0.8:
            unit_key = rng.choice(held)
            plan = kept.plan_of(unit_key)
            call = ("set_pods", (unit_key, {(s, n): c for s, n, c in plan[: rng.randint(0, len(plan))]}))
        else:
            unit_key = held.pop(rng.randrange(len(held)))
            call = ("release", (unit_key,)) if rng.random() < 0.5 else ("forget", (unit_key,))
        getattr(kept, call[0])(*call[1])
        calls.append(call)
        fresh = room_from(calls)
        for ps in rng.sample(shapes, 6):
            mine, theirs = kept.place((ps,)), fresh.place((ps,))
            assert isinstance(mine, Placement) == isinstance(theirs, Placement), (step, ps)
            if isinstance(mine, Placement):
                assert mine == theirs, (step, ps)
