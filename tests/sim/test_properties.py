"""Properties of whole simulations over random traces (hypothesis): quotas, optional
nodes, a stream of PyTorchJobs. Usage is what the simulator itself booked, not what
the engine says."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import strategies as st

from koordqueue.api.quantity import parse_resource_list
from koordqueue.engine.model import EngineConfig
from koordqueue.sim.nodes import NodePool
from koordqueue.sim.report import render_json
from koordqueue.sim.trace import NodeGroup

from .builders import GPU, elastic_quota, job, pytorch_job, run

CPU = "cpu"
RESOURCES = (GPU, CPU)


@st.composite
def traces(draw: st.DrawFn) -> dict[str, Any]:
    """A valid tree of quotas, nodes or none, and jobs that each fit in an empty cluster."""
    quotas: list[dict[str, Any]] = []
    limits: dict[str, dict[str, int]] = {}  # quota -> max, whole units
    mins: dict[str, dict[str, int]] = {}
    lends: dict[str, bool] = {}
    parent_of: dict[str, str | None] = {}
    leaves: list[str] = []

    def add(name: str, parent: str | None, budget: dict[str, int] | None, is_parent: bool) -> None:
        named = [GPU, CPU] if draw(st.booleans()) else [GPU]
        if parent is not None:  # a child's max names only resources of its parent's (Koordinator's rule)
            named = [r for r in named if r in limits[parent]]
        low = {r: draw(st.integers(0, budget.get(r, 0) if budget is not None else 8)) for r in named
               if budget is None or r in budget}
        high = {r: low.get(r, 0) + draw(st.integers(1, 8)) for r in named}
        lend = draw(st.booleans())
        weight = draw(st.none() | st.integers(1, 4))
        quotas.append(elastic_quota(
            name, {r: str(v) for r, v in low.items()}, {r: str(v) for r, v in high.items()},
            parent=parent, is_parent=is_parent, lend=lend,
            policy=draw(st.sampled_from(("Priority", "Block", "Intelligent"))),
            weight=None if weight is None else f'{{"{named[0]}": "{weight}"}}',
        ))
        limits[name], mins[name], lends[name], parent_of[name] = high, low, lend, parent
        if not is_parent:
            leaves.append(name)

    for p in range(draw(st.integers(0, 2))):
        add(f"p{p}", None, None, True)
        left = dict(mins[f"p{p}"])
        for c in range(draw(st.integers(1, 3))):
            add(f"p{p}-{c}", f"p{p}", left, False)
            for r, v in mins[f"p{p}-{c}"].items():
                left[r] -= v
    if not leaves or draw(st.booleans()):
        add("solo", None, None, False)

    nodes: list[dict[str, Any]] = []
    capacity: dict[str, int] | None = None
    if draw(st.booleans()):
        for i in range(draw(st.integers(1, 2))):
            allocatable = {GPU: draw(st.integers(2, 8)), CPU: draw(st.integers(8, 32))}
            count = draw(st.integers(1, 3))
            nodes.append({"name": f"n{i}", "count": count,
                          "allocatable": {r: str(v) for r, v in allocatable.items()}})
            capacity = capacity or {GPU: 0, CPU: 0}
            for r, v in allocatable.items():
                capacity[r] += v * count
    biggest_node = {r: max((int(n["allocatable"][r]) for n in nodes), default=10**6) for r in RESOURCES}
    groups = [NodeGroup(n["name"], n["count"], parse_resource_list(n["allocatable"])) for n in nodes]

    def room_alone(leaf: str) -> dict[str, int]:
        """What a job of ``leaf`` can get when nothing else runs: every max on its path,
        less the mins that non-lending siblings keep, and the cluster total."""
        room = {r: 10**6 for r in RESOURCES}
        child: str | None = None
        current: str | None = leaf
        while True:
            siblings = [q for q, p in parent_of.items() if p == current] if child is not None else []
            kept = {r: sum(mins[s].get(r, 0) for s in siblings if s != child and not lends[s]) for r in RESOURCES}
            cap = limits[current] if current is not None else capacity
            if cap is not None:
                for r, v in cap.items():
                    room[r] = min(room[r], v - kept[r])
            if current is None:
                return room
            child, current = current, parent_of[current]

    jobs = []
    for i in range(draw(st.integers(1, 12))):
        leaf = draw(st.sampled_from(leaves))
        room = room_alone(leaf)
        workers = draw(st.integers(0, 2))
        pods = workers + 1
        most = {r: max(0, min(room[r] // pods, biggest_node[r], 3)) for r in RESOURCES}
        pod = {r: draw(st.integers(min(1, most[r]), most[r])) for r in RESOURCES}
        if any(pod[r] * pods > room[r] for r in RESOURCES):
            continue
        if groups and NodePool(groups).place([("pod", parse_resource_list(pod))] * pods) is None:
            continue  # its pods do not fit on the empty nodes all at once
        manifest = pytorch_job(f"j{i}", leaf, {r: str(v) for r, v in pod.items()}, workers=workers,
                               priority=draw(st.integers(0, 5)))
        jobs.append(job(draw(st.integers(0, 120)) / 2, manifest, runtime=draw(st.integers(1, 40))))
    document: dict[str, Any] = {"objects": quotas, "jobs": jobs}
    if nodes:
        document["nodes"] = nodes
    return document


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=traces(), protect=st.sampled_from((0.0, 5.0, 60.0)))
def test_every_job_ends_no_quota_goes_over_its_max_and_runs_repeat(document: dict[str, Any], protect: float) -> None:
    config = EngineConfig(protect_seconds=protect)
    result = run(document, config)
    maxima = {q["metadata"]["name"]: parse_resource_list(q["spec"]["max"]) for q in document["objects"]}
    for name, usage in result.usage.quotas.items():
        for resource, peak in usage.peak.items():
            if resource in maxima[name]:
                assert peak <= maxima[name][resource], f"{name} peaked at {peak} {resource}"
    unfinished = [(r.name, r.phase, r.message) for r in result.jobs if r.finished is None]
    assert not unfinished, f"jobs that fit in an empty cluster never ended: {unfinished}"
    assert not result.warnings
    preemptions = sum(r.preemptions for r in result.jobs)
    target(float(preemptions), label="preemptions")
    if preemptions:
        event("preemption")
    if "nodes" in document:
        event("nodes")
    assert render_json(run(document, config)) == render_json(result)
