"""Two ways a cycle does less work, and decides the same:

- within a scan, a unit whose least did not fit its own quota's max (and no preemption
  could help) stops the scan from checking later units that ask at least as much of that
  resource: they are told its reason and dropped with their groups (``Cycle.raise_bar``);
- a queue woken by room on the nodes is scanned only if one of the placement checks it
  waits on passes at its turn (``waits.nodes_left``).

Every cycle admits and preempts exactly what an engine that checks each unit, and scans
every queue the nodes wake, admits and preempts."""

from __future__ import annotations

import random

import pytest

from koordqueue.api.constants import LABEL_TOPOLOGY_RACK, QueuePolicy
from koordqueue.engine import Engine, waits
from koordqueue.engine.cycle import Cycle
from koordqueue.engine.ledger import Ledger
from koordqueue.engine.model import TopologyRequest, UnitInfo

from .builders import CPU, GPU, G, engine_with, gang, node, parent, pod_set, queue_of, quota, unit, with_nodes

_ORIGINALS = (Cycle.raise_bar, Cycle.below_bar, waits.nodes_left)


def _engines(rng: random.Random, flat: bool) -> tuple[Engine, Engine, list[str]]:
    """Three quotas under one parent as big as the nodes, or (``flat``) side by side with
    more room than the nodes have: then the nodes are what units wait for."""
    names = ["team-a", "team-b", "team-c"]
    quotas = [] if flat else [parent("org", {GPU: 48, CPU: 480}, {GPU: 48, CPU: 480})]
    for name in names:  # the first one neither blocks nor preempts: it skips units by the bar
        policy = rng.choice((QueuePolicy.PRIORITY, QueuePolicy.INTELLIGENT, QueuePolicy.BLOCK)) \
            if name != names[0] else QueuePolicy.PRIORITY
        top = rng.choice((16, 24, 32) if flat else (8, 16, 24))
        quotas.append(quota(name, {GPU: 8, CPU: 80}, {GPU: top, CPU: 10 * top}, parent=None if flat else "org",
                            policy=policy, threshold=10 if policy == QueuePolicy.INTELLIGENT else None))
    nodes = [node(f"n{r}-{i}", labels={LABEL_TOPOLOGY_RACK: f"r{r}"}) for r in range(2) for i in range(3)]
    preempting = [q for q in quotas[-2:] if rng.random() < 0.4]
    engines = []
    for _ in range(2):
        engine = with_nodes(engine_with(*quotas, topology_levels=(LABEL_TOPOLOGY_RACK,)), *nodes)
        for q in preempting:
            engine.set_queue(queue_of(q, preemption=True))
        engines.append(engine)
    return engines[0], engines[1], names


def _unit(rng: random.Random, serial: int, names: list[str], now: float) -> UnitInfo:
    quota_name = rng.choice(names)
    priority = rng.choice((0, 0, 10, 20))
    if rng.random() < 0.15:
        return unit(f"u{serial}", {GPU: rng.choice((1, 2, 4, 8))}, quota_name, priority, now)
    gpus = rng.choice((1, 2, 4, 8))
    workers = rng.randint(0, 5)
    topology = TopologyRequest(LABEL_TOPOLOGY_RACK, rng.random() < 0.5) if rng.random() < 0.3 else None
    sets = [pod_set("master", 1, gpus=gpus, cpu=gpus, topology=topology)]
    if workers:
        least = rng.randint(0, workers - 1) if rng.random() < 0.4 else None
        sets.append(pod_set("worker", workers, gpus=gpus, cpu=gpus, min_count=least, topology=topology))
    return gang(f"u{serial}", *sets, quota_name=quota_name, priority=priority, created=now)


def _compare(seed: int, other_pods: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Run both engines on the same random inputs, comparing every cycle's decisions;
    return how many units the bar skipped and how many node wakes scanned nothing.
    ``other_pods``: pods that are not units' come and go on the nodes, and the quotas are
    side by side (``_engines``)."""
    rng = random.Random(seed)
    fast, slow, names = _engines(random.Random(seed), flat=other_pods)
    ledger = slow._ledger
    raise_bar, below, nodes_left = _ORIGINALS  # (not those a previous seed patched in)

    def no_bar(cycle: Cycle, *args):  # type: ignore[no-untyped-def]
        """The slow engine checks every unit."""
        return None if cycle.ledger is ledger else raise_bar(cycle, *args)

    def wake_and_scan(everyone: bool = False) -> None:
        """Every queue with a failed check that room grown may let pass is scanned."""
        ledger.room_grew = False
        still = {}
        for key in sorted(ledger.node_waiters):
            checks = ledger.node_waiters[key]
            if key not in ledger.qs:
                continue
            if everyone or any(ledger.room.failing(check) is None for check in checks):
                ledger.touch(ledger.qs[key])
            else:
                still[key] = checks
        ledger.node_waiters = still

    monkeypatch.setattr(ledger, "wake_nodes", wake_and_scan)
    skipped, asleep = [0], [0]

    def counting(cycle: Cycle, *args, **kwargs):  # type: ignore[no-untyped-def]
        dropped = below(cycle, *args, **kwargs)
        if cycle.ledger is fast._ledger:
            skipped[0] += dropped
        return dropped

    def counting_left(on: Ledger, state):  # type: ignore[no-untyped-def]
        woken = bool(state.node_woken)
        left = nodes_left(on, state)
        if on is fast._ledger:
            asleep[0] += woken and not left
        return left

    monkeypatch.setattr(Cycle, "raise_bar", no_bar)
    monkeypatch.setattr(Cycle, "below_bar", counting)
    monkeypatch.setattr(waits, "nodes_left", counting_left)
    nodes = sorted(fast._ledger.room.names) if fast._ledger.room.names else []
    running: list[str] = []
    serial = 0
    for step in range(30):
        now = float(step)
        for _ in range(rng.randint(1, 6) if step else 40):
            serial += 1
            info = _unit(rng, serial, names, now)
            fast.set_unit(info)
            slow.set_unit(info)
        results = [fast.schedule(now), slow.schedule(now)]
        decided = [([(a.unit, a.placement) for a in r.admitted], [(p.unit, p.by) for p in r.preempted])
                   for r in results]
        assert decided[0] == decided[1], f"seed {seed} step {step}"
        nodes = nodes or sorted(fast._ledger.room.names)
        gone = {p.unit for p in results[0].preempted}
        running = [key for key in running if key not in gone]
        for key in gone:
            for engine in (fast, slow):
                engine.set_unit_pods(key, {})
        for admission in results[0].admitted:
            running.append(admission.unit)
            if admission.placement is not None:
                pods: dict[tuple[str, str], int] = {}
                for pod_set_name, where, count in admission.placement.nodes:
                    pods[pod_set_name, where] = pods.get((pod_set_name, where), 0) + count
                for engine in (fast, slow):
                    engine.set_unit_pods(admission.unit, pods)
        for _ in range(min(len(running), rng.randint(0, 3))):
            key = running.pop(rng.randrange(len(running)))
            for engine in (fast, slow):
                engine.remove_unit(key)
        if other_pods:
            for name in rng.sample(nodes, 2):
                used = {GPU: rng.choice((0, 0, 1, 2, 4)) * G, CPU: G}
                for engine in (fast, slow):
                    engine.set_node_usage(name, used)
    return skipped[0], asleep[0]


@pytest.mark.parametrize("seed", range(12))
def test_a_scan_that_skips_units_asking_more_decides_as_one_that_checks_them(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    skipped, _ = _compare(seed, other_pods=False, monkeypatch=monkeypatch)
    assert skipped > 0  # the bar was raised and units were skipped by it


def test_queues_the_nodes_wake_for_nothing_sleep_on_and_decide_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    asleep = [_compare(seed, other_pods=True, monkeypatch=monkeypatch)[1] for seed in range(100, 124)]
    assert sum(asleep) > 0  # some woken queues were not scanned
