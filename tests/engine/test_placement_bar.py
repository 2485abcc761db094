"""Within a scan, a unit whose least did not fit its own quota's max (and no preemption
could help) stops the scan from checking later units that ask at least as much of that
resource: they are told its reason and dropped with their groups (``Engine._raise_bar``).
Only the work changes: every cycle admits and preempts exactly what an engine that checks
each of them admits and preempts."""

from __future__ import annotations

import random

import pytest

from koordqueue.api.constants import LABEL_TOPOLOGY_RACK, QueuePolicy
from koordqueue.engine import Engine
from koordqueue.engine.model import TopologyRequest, UnitInfo

from .builders import CPU, GPU, engine_with, gang, node, parent, pod_set, queue_of, quota, unit, with_nodes


def _engines(rng: random.Random) -> tuple[Engine, Engine, list[str]]:
    names = ["team-a", "team-b", "team-c"]
    quotas = [parent("org", {GPU: 48, CPU: 480}, {GPU: 48, CPU: 480})]
    for name in names:  # the first one neither blocks nor preempts: it skips units by the bar
        policy = rng.choice((QueuePolicy.PRIORITY, QueuePolicy.INTELLIGENT, QueuePolicy.BLOCK)) \
            if name != names[0] else QueuePolicy.PRIORITY
        top = rng.choice((8, 16, 24))
        quotas.append(quota(name, {GPU: 8, CPU: 80}, {GPU: top, CPU: 10 * top}, parent="org", policy=policy,
                            threshold=10 if policy == QueuePolicy.INTELLIGENT else None))
    nodes = [node(f"n{r}-{i}", labels={LABEL_TOPOLOGY_RACK: f"r{r}"}) for r in range(2) for i in range(3)]
    preempting = [q for q in quotas[2:] if rng.random() < 0.4]
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


@pytest.mark.parametrize("seed", range(12))
def test_a_scan_that_skips_units_asking_more_decides_as_one_that_checks_them(seed: int) -> None:
    rng = random.Random(seed)
    fast, slow, names = _engines(random.Random(seed))
    slow._raise_bar = lambda *args: None  # type: ignore[method-assign]  # checks every unit
    skipped = [0]
    below = fast._below_bar

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        dropped = below(*args, **kwargs)
        skipped[0] += dropped
        return dropped

    fast._below_bar = counting  # type: ignore[method-assign]
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
    assert skipped[0] > 0  # the bar was raised and units were skipped by it
