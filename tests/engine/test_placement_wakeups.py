"""When room grows on the nodes, which units waiting for nodes are looked at again: a
failed placement check is kept until room that could make it pass grows (a node that
takes one of its pods, as many pods' room as it lacked), and a queue waiting for nodes
is woken then, not at every node whose room grew; and never left asleep when the nodes
have room for its pods."""

from __future__ import annotations

import random

import pytest

from koordqueue.api.constants import LABEL_TOPOLOGY_RACK
from koordqueue.engine import Engine
from koordqueue.engine.cycle import Cycle
from koordqueue.engine.model import TopologyRequest

from .builders import CPU, GPU, G, engine_with, gang, node, pod_set, quota, unit, with_nodes


def checks(engine: Engine) -> list[int]:
    """Count the placement checks the engine makes from now on."""
    counted = [0]
    room = engine._ledger.room
    place = room._place

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        counted[0] += 1
        return place(*args, **kwargs)

    room._place = counting  # type: ignore[method-assign]
    return counted


def scans(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the queue scans the engine starts from now on."""
    counted = [0]
    start = Cycle.start_scan

    def counting(cycle: Cycle, *args, **kwargs):  # type: ignore[no-untyped-def]
        counted[0] += cycle.ledger is engine._ledger
        return start(cycle, *args, **kwargs)

    monkeypatch.setattr(Cycle, "start_scan", counting)
    return counted


def full(gpus: int = 8) -> dict[str, int]:
    return {GPU: gpus * G, CPU: gpus * G}


def waiting_engine(*units_gpus: tuple[str, int, int]) -> Engine:
    """Two nodes of 8 GPUs, both full; units (name, pods, GPUs per pod) waiting for them."""
    engine = with_nodes(engine_with(quota("team-a", {GPU: 100}, {GPU: 100})), node("gpu-0"), node("gpu-1"))
    engine.set_node_usage("gpu-0", full())
    engine.set_node_usage("gpu-1", full())
    for name, pods, gpus in units_gpus:
        engine.set_unit(gang(name, pod_set("worker", pods, gpus=gpus, cpu=gpus), quota_name="team-a"))
    assert engine.schedule(0.0).admitted == []
    return engine


def test_room_too_small_for_one_pod_wakes_no_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = waiting_engine(("big", 1, 8))
    counted, scanned = checks(engine), scans(engine, monkeypatch)
    engine.set_node_usage("gpu-0", full(6))  # 2 GPUs free: not one of its pods
    result = engine.schedule(1.0)
    assert result.admitted == [] and counted[0] == 0 and scanned[0] == 0
    engine.set_node_usage("gpu-0", {})  # the whole node: its pod fits
    assert [a.unit for a in engine.schedule(2.0).admitted] == ["default/big"]
    assert counted[0] == 1


def test_a_gang_waits_until_room_for_as_many_pods_as_it_lacked_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = waiting_engine(("pair", 2, 8))
    counted, scanned = checks(engine), scans(engine, monkeypatch)
    engine.set_node_usage("gpu-0", {})  # room for one of its two pods
    assert engine.schedule(1.0).admitted == [] and counted[0] == 0 and scanned[0] == 0
    engine.set_node_usage("gpu-1", {})  # and the other
    assert [a.unit for a in engine.schedule(2.0).admitted] == ["default/pair"]


def test_room_that_fits_wakes_only_the_units_it_could_take() -> None:
    engine = waiting_engine(("small", 1, 2), ("big", 1, 8))
    engine.set_node_usage("gpu-0", full(6))
    assert [a.unit for a in engine.schedule(1.0).admitted] == ["default/small"]
    counted = checks(engine)
    engine.set_node_usage("gpu-1", full(4))  # 4 GPUs: nothing of "big" fits, it is not checked again
    assert engine.schedule(2.0).admitted == [] and counted[0] == 0


def test_a_quota_change_does_not_check_again_what_the_nodes_cannot_take() -> None:
    engine = waiting_engine(("big", 1, 8))
    counted = checks(engine)
    engine.set_unit(unit("other", {GPU: 1}, "team-a"))  # the queue is scanned again, for a unit with no pods
    engine.schedule(1.0)
    assert counted[0] == 0
    assert "no node has 8 free" in (engine.standing("default/big").message or "")  # type: ignore[union-attr]


def _fresh(nodes: list, usage: dict[str, dict[str, int]], units: list) -> set[str]:  # type: ignore[type-arg]
    """What an engine that never saw the earlier room admits now."""
    engine = with_nodes(engine_with(quota("team-a", {GPU: 1000}, {GPU: 1000})), *nodes)
    for name, used in usage.items():
        engine.set_node_usage(name, used)
    for info in units:
        engine.set_unit(info)
    return {a.unit for a in engine.schedule(0.0).admitted}


@pytest.mark.parametrize("seed", range(6))
def test_never_asleep_when_the_nodes_have_room(seed: int) -> None:
    """Room comes and goes at random; every cycle the engine admits exactly what an engine
    that knows only the room of now admits."""
    rng = random.Random(seed)
    nodes = [node(f"n{r}-{i}", labels={LABEL_TOPOLOGY_RACK: f"r{r}"}) for r in range(2) for i in range(3)]
    engine = with_nodes(engine_with(quota("team-a", {GPU: 1000}, {GPU: 1000}), topology_levels=(LABEL_TOPOLOGY_RACK,)),
                        *nodes)
    other = {n.name: rng.randint(0, 8) for n in nodes}  # GPUs of pods that are not units'
    mine: dict[str, int] = {n.name: 0 for n in nodes}  # GPUs of admitted units' pods

    def usage() -> dict[str, dict[str, int]]:
        return {name: full(other[name] + mine[name]) for name in other}

    for name, used in usage().items():
        engine.set_node_usage(name, used)
    pending = {}
    for i in range(12):
        gpus = rng.choice((1, 2, 4, 8))
        topology = TopologyRequest(LABEL_TOPOLOGY_RACK, True) if rng.random() < 0.4 else None
        info = gang(f"u{i}", pod_set("worker", rng.randint(1, 4), gpus=gpus, cpu=gpus, topology=topology),
                    quota_name="team-a", created=float(i))
        pending[info.key] = info
        engine.set_unit(info)
    for step in range(40):
        expected = _fresh(nodes, usage(), list(pending.values()))
        result = engine.schedule(float(step))
        assert {a.unit for a in result.admitted} == expected, f"step {step}"
        for admission in result.admitted:
            assert admission.placement is not None
            info = pending.pop(admission.unit)
            pods: dict[tuple[str, str], int] = {}
            for pod_set_name, where, count in admission.placement.nodes:
                mine[where] += count * info.pod_sets[0].request[GPU] // G
                pods[pod_set_name, where] = count
            engine.set_unit_pods(admission.unit, pods)
        for name in rng.sample(sorted(other), 2):  # other pods come and go
            other[name] = rng.randint(0, 8 - mine[name])
        for name, used in usage().items():
            engine.set_node_usage(name, used)
