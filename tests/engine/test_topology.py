"""Topology domains and admission in part.

A pod set that asks for a topology level (Kueue's podset-required-topology or
podset-preferred-topology) has all its pods placed in one domain of it: required, never
split; preferred, the tightest domain that holds them, else the level above, else
anywhere. An elastic pod set (minCount below count) is admitted with as many pods as fit,
down to its minCount, when all of them do not.
"""

from __future__ import annotations

import pytest

from koordqueue.api.constants import LABEL_TOPOLOGY_BLOCK, LABEL_TOPOLOGY_RACK, LABEL_TOPOLOGY_ZONE
from koordqueue.engine.model import Placement, PodSetInfo, TopologyRequest

from .builders import GPU, G, engine_with, gang, node, pod_set, quota, settle, used, with_nodes

ZONE, BLOCK, RACK = LABEL_TOPOLOGY_ZONE, LABEL_TOPOLOGY_BLOCK, LABEL_TOPOLOGY_RACK


def cluster(free: dict[str, int]) -> list:  # type: ignore[type-arg]
    """Two zones of two racks of two 8-GPU nodes: ``free`` says how many GPUs are free on
    some nodes (named zone-rack-index, like a-r1-0)."""
    nodes = []
    for zone in ("a", "b"):
        for rack in ("r1", "r2"):
            for i in range(2):
                name = f"{zone}-{rack}-{i}"
                nodes.append(node(name, labels={ZONE: zone, BLOCK: f"{zone}-block", RACK: rack}))
    return nodes


def engine_on(free: dict[str, int], **config: object):  # type: ignore[no-untyped-def]
    engine = with_nodes(engine_with(quota("team", 0, 1000), **config), *cluster(free))
    for name, gpus in free.items():
        engine.set_node_usage(name, {GPU: (8 - gpus) * G})
    return engine


def admitted_placement(engine, name: str) -> Placement:  # type: ignore[no-untyped-def]
    result = engine.schedule(0.0)
    (admission,) = [a for a in result.admitted if a.unit == f"default/{name}"]
    assert admission.placement is not None
    return admission.placement


def nodes_of(placement: Placement) -> set[str]:
    return {node for _, node, _ in placement.nodes}


def racks(placement: Placement) -> set[str]:
    return {n.rsplit("-", 1)[0] for n in nodes_of(placement)}


def test_required_rack_takes_the_rack_that_holds_them_all() -> None:
    # Rack a-r1 has room for one 8-GPU pod, a-r2 for two, b's racks for none.
    engine = engine_on({"a-r1-0": 8, "a-r1-1": 0, "a-r2-0": 8, "a-r2-1": 8,
                        "b-r1-0": 0, "b-r1-1": 0, "b-r2-0": 0, "b-r2-1": 0})
    engine.set_unit(gang("job", pod_set("worker", 2, topology=TopologyRequest(RACK, True)), quota_name="team"))
    placement = admitted_placement(engine, "job")
    assert racks(placement) == {"a-r2"}
    assert placement.domains == (("worker", RACK, ((ZONE, "a"), (BLOCK, "a-block"), (RACK, "r2"))),)


def test_required_rack_is_never_split() -> None:
    # Three pods fit on the nodes (one per rack), but no rack holds two.
    engine = engine_on({"a-r1-0": 8, "a-r1-1": 0, "a-r2-0": 8, "a-r2-1": 0,
                        "b-r1-0": 8, "b-r1-1": 0, "b-r2-0": 0, "b-r2-1": 0})
    engine.set_unit(gang("job", pod_set("worker", 2, topology=TopologyRequest(RACK, True)), quota_name="team"))
    assert settle(engine, 0.0) == []
    assert engine.standing("default/job").message == (
        "quota team has room, but no rack (topology.koord-queue.io/rack) has room for all its 2 worker pods "
        "(the most in one: 1, in r1)")


def test_required_takes_the_tightest_rack() -> None:
    # Pods of 4 GPUs: a-r1 has room for 4, a-r2 for 1, b-r2 for 3. The job of 2 goes to
    # b-r2, the rack that holds it with the least room to spare (not the first by name).
    engine = engine_on({"a-r1-0": 8, "a-r1-1": 8, "a-r2-0": 0, "a-r2-1": 4,
                        "b-r1-0": 0, "b-r1-1": 0, "b-r2-0": 8, "b-r2-1": 4})
    engine.set_unit(gang("job", pod_set("worker", 2, gpus=4, topology=TopologyRequest(RACK, True)),
                         quota_name="team"))
    assert racks(admitted_placement(engine, "job")) == {"b-r2"}


def test_preferred_rack_falls_back_to_the_block_then_anywhere() -> None:
    free = {name: 8 for name in ("a-r1-0", "a-r1-1", "a-r2-0", "a-r2-1", "b-r1-0", "b-r1-1", "b-r2-0", "b-r2-1")}
    engine = engine_on(free)
    # 3 pods of 8 GPUs: no rack (2 nodes) holds them; zone a's block does.
    engine.set_unit(gang("three", pod_set("worker", 3, topology=TopologyRequest(RACK, False)), quota_name="team"))
    placement = admitted_placement(engine, "three")
    assert {n.split("-")[0] for n in nodes_of(placement)} == {"a"}
    assert placement.domains == (("worker", BLOCK, ((ZONE, "a"), (BLOCK, "a-block"))),)
    # 6 more: no block holds them (b has 4 free nodes, a 1): anywhere, with no domain.
    engine.set_unit(gang("six", pod_set("worker", 5, topology=TopologyRequest(RACK, False)), quota_name="team"))
    placement = admitted_placement(engine, "six")
    assert placement.domains == ()
    assert len(nodes_of(placement)) == 5


def test_preferred_takes_the_tightest_rack_that_holds_them() -> None:
    engine = engine_on({"a-r1-0": 8, "a-r1-1": 8, "a-r2-0": 8, "a-r2-1": 0,
                        "b-r1-0": 8, "b-r1-1": 8, "b-r2-0": 8, "b-r2-1": 8})
    engine.set_unit(gang("one", pod_set("worker", 1, topology=TopologyRequest(RACK, False)), quota_name="team"))
    assert racks(admitted_placement(engine, "one")) == {"a-r2"}


def test_pod_sets_asking_for_one_level_share_one_domain() -> None:
    engine = engine_on({"a-r1-0": 2, "a-r1-1": 0, "a-r2-0": 8, "a-r2-1": 8,
                        "b-r1-0": 0, "b-r1-1": 0, "b-r2-0": 0, "b-r2-1": 0})
    rack = TopologyRequest(RACK, True)
    engine.set_unit(gang("job", pod_set("master", 1, gpus=2, topology=rack),
                         pod_set("worker", 2, gpus=6, topology=rack), quota_name="team"))
    placement = admitted_placement(engine, "job")
    assert racks(placement) == {"a-r2"}  # a-r1 has room for the master alone
    assert {d[0] for d in placement.domains} == {"master", "worker"}


def test_a_level_no_node_has_waits() -> None:
    engine = engine_on({})
    engine.set_unit(gang("job", pod_set("worker", 1, topology=TopologyRequest("example.com/pod", True)),
                         quota_name="team"))
    assert settle(engine, 0.0) == []
    assert "no pod (example.com/pod) has room for all its worker pod" in engine.standing("default/job").message


def test_a_domain_taken_by_an_admitted_unit_is_not_given_twice() -> None:
    engine = engine_on({})
    rack = TopologyRequest(RACK, True)
    for i in range(5):
        engine.set_unit(gang(f"job{i}", pod_set("worker", 2, topology=rack), quota_name="team", created=i))
    admitted = settle(engine, 0.0)
    assert len(admitted) == 4  # four racks of two nodes
    assert "no rack" in engine.standing("default/job4").message


# --- admission in part ------------------------------------------------------------------

def elastic(count: int = 4, min_count: int = 2, gpus: int = 8) -> PodSetInfo:
    return pod_set("worker", count, gpus=gpus, cpu=0, min_count=min_count)


MASTER = pod_set("master", 1, gpus=0, cpu=1)


@pytest.mark.parametrize(("quota_gpus", "nodes", "workers"), [
    (24, 8, 3),  # the quota has room for 3 of 4
    (100, 2, 2),  # the nodes, for 2
    (100, 8, 4),  # everything fits: all of them
])
def test_an_elastic_pod_set_is_admitted_with_as_many_pods_as_fit(quota_gpus: int, nodes: int,
                                                                   workers: int) -> None:
    engine = with_nodes(engine_with(quota("team", 0, {"gpu": quota_gpus, "cpu": 100})),
                        *[node(f"gpu-{i}") for i in range(nodes)])
    engine.set_unit(gang("job", MASTER, elastic(), quota_name="team"))
    (admission,) = engine.schedule(0.0).admitted
    assert admission.placement is not None
    assert admission.placement.count_of("worker", 4) == workers
    assert sum(n for s, _, n in admission.placement.nodes if s == "worker") == workers
    assert used(engine) == {"team": 8 * workers}


def test_below_its_min_count_an_elastic_unit_waits() -> None:
    engine = with_nodes(engine_with(quota("team", 0, {"gpu": 100, "cpu": 100})), node("gpu-0"))
    engine.set_unit(gang("job", MASTER, elastic(min_count=2), quota_name="team"))
    assert settle(engine, 0.0) == []
    assert "the nodes have room for 1 of its 4 worker pods" in engine.standing("default/job").message


def test_in_part_without_nodes_follows_the_quota() -> None:
    engine = engine_with(quota("team", 0, {"gpu": 20, "cpu": 100}))
    engine.set_unit(gang("job", MASTER, elastic(), quota_name="team"))
    (admission,) = engine.schedule(0.0).admitted
    assert admission.placement is not None and admission.placement.count_of("worker", 4) == 2
    assert used(engine) == {"team": 16}


def test_sent_back_an_elastic_unit_is_admitted_again_whole_when_it_fits() -> None:
    engine = with_nodes(engine_with(quota("team", 0, {"gpu": 100, "cpu": 100}), backoff_base=1.0,
                                    backoff_jitter=0.0), node("gpu-0"), node("gpu-1"))
    engine.set_unit(gang("job", MASTER, elastic(), quota_name="team"))
    (admission,) = engine.schedule(0.0).admitted
    assert admission.placement is not None and admission.placement.count_of("worker", 4) == 2
    requeue_at = engine.requeue("default/job", 1.0, "timed out")
    assert engine.unit("default/job").placement is None
    assert used(engine) == {"team": 0}
    engine.set_node(node("gpu-2"))
    engine.set_node(node("gpu-3"))
    (admission,) = engine.schedule(requeue_at).admitted
    assert admission.placement is not None and admission.placement.count_of("worker", 4) == 4
    assert used(engine) == {"team": 32}


def test_a_unit_held_in_part_after_a_restart_holds_its_part() -> None:
    engine = with_nodes(engine_with(quota("team", 0, {"gpu": 100, "cpu": 100})), node("gpu-0"), node("gpu-1"))
    job = gang("job", MASTER, elastic(), quota_name="team")
    job.admitted_quota, job.admitted_at = "team", 0.0
    job.placement = Placement(counts=(("worker", 2),))
    engine.set_unit(job)
    assert used(engine) == {"team": 16}
    assert engine.node_free("gpu-0")[GPU] + engine.node_free("gpu-1")[GPU] == 0
