"""The simulator on the trace's nodes: the engine's placement decisions (node fit, taints,
selectors, topology domains, admission in part), traced as users write them."""

from __future__ import annotations

from typing import Any

from koordqueue.api.constants import (
    ANNOTATION_PREFERRED_TOPOLOGY,
    ANNOTATION_REQUIRED_TOPOLOGY,
    LABEL_TOPOLOGY_RACK,
    LABEL_TOPOLOGY_ZONE,
    Phase,
)
from koordqueue.sim.simulator import Simulator
from koordqueue.sim.trace import parse_trace

from .builders import GPU, by_name, elastic_quota, job, pytorch_job, run

TEAM = elastic_quota("team", {GPU: "0"}, {GPU: "64"})
ZONE, RACK = LABEL_TOPOLOGY_ZONE, LABEL_TOPOLOGY_RACK


def gpus(n: int) -> dict[str, str]:
    return {GPU: str(n)}


def templates(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [spec["template"] for spec in manifest["spec"]["pytorchReplicaSpecs"].values()]


def with_pod_rules(manifest: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """Every role's pod template with these spec fields (nodeSelector, tolerations...)."""
    for template in templates(manifest):
        template["spec"].update(spec)
    return manifest


def with_topology(manifest: dict[str, Any], level: str, required: bool) -> dict[str, Any]:
    annotation = ANNOTATION_REQUIRED_TOPOLOGY if required else ANNOTATION_PREFERRED_TOPOLOGY
    for template in templates(manifest):
        template.setdefault("metadata", {}).setdefault("annotations", {})[annotation] = level
    return manifest


def racks(zones: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Node groups named zone-rack, each of ``n`` 8-GPU nodes."""
    return [{"name": f"{zone}-{rack}", "count": n, "allocatable": gpus(8), "labels": {ZONE: zone, RACK: rack}}
            for zone, inside in zones.items() for rack, n in inside.items()]


def domains(record: Any) -> set[str]:
    return {domain for _, _, domain in record.domains}


def watched(document: dict[str, Any]) -> Simulator:
    """A run whose admissions and releases are kept (what the HTML report draws)."""
    simulator = Simulator(parse_trace(document), keep_holdings=True)
    simulator.run()
    return simulator


def bound_nodes(simulator: Simulator, name: str) -> list[str]:
    """The nodes a running job's pods are bound to, one per pod."""
    (record,) = [r for r in simulator.jobs if r.name == name]
    assert simulator.nodes is not None and record.pods is not None
    return sorted(simulator.nodes.nodes[index].name for index, _, _ in record.pods)


def groups(nodes: list[str]) -> set[str]:
    return {name.rsplit("-", 1)[0] for name in nodes}


def test_the_trace_gives_nodes_labels_and_taints() -> None:
    trace = parse_trace({"topology": [ZONE, RACK], "nodes": [
        {"name": "gpu", "count": 1, "allocatable": gpus(8), "labels": {ZONE: "a"},
         "taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}], "unschedulable": True},
        {"name": "bad", "count": 1, "allocatable": gpus(8), "taints": [{"key": "x", "effect": "Sometimes"}]},
        {"name": "worse", "count": 1, "allocatable": gpus(8), "labels": {"rank": 3}},
    ]})
    (group,) = trace.nodes
    assert (group.labels, [t.key for t in group.taints], group.unschedulable) == (((ZONE, "a"),), ["dedicated"], True)
    assert trace.topology == (ZONE, RACK)
    assert trace.warnings == [
        "nodes[1] (bad): a taint's effect must be one of NoSchedule, PreferNoSchedule, NoExecute, got 'Sometimes'; "
        "ignored",
        "nodes[2] (worse): labels must be a mapping of strings (quote numbers); ignored",
    ]


def test_a_taint_keeps_out_the_pods_that_do_not_tolerate_it() -> None:
    nodes = [{"name": "infer", "count": 1, "allocatable": gpus(8),
              "taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}]
    tolerating = with_pod_rules(pytorch_job("tolerating", "team", gpus(8)), tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}])
    result = run({"nodes": nodes, "objects": [TEAM], "until": 100, "jobs": [
        job(0, pytorch_job("plain", "team", gpus(8)), runtime=10),
        job(0, tolerating, runtime=10),
    ]})
    jobs = by_name(result)
    assert jobs["plain"].admitted is None and jobs["plain"].phase is Phase.ENQUEUED
    assert jobs["plain"].message == ("quota team has room, but no node may take its master pod: 1 with taint "
                                     "dedicated=infer:NoSchedule not tolerated")
    assert (jobs["tolerating"].admitted, jobs["tolerating"].finished) == (0.0, 10.0)


def test_a_selector_no_node_matches_waits_with_a_message_and_is_never_admitted() -> None:
    nodes = [{"name": "a100", "count": 2, "allocatable": gpus(8), "labels": {"accelerator": "a100"}}]
    result = run({"nodes": nodes, "objects": [TEAM], "until": 1000, "jobs": [
        job(0, with_pod_rules(pytorch_job("picky", "team", gpus(1)), nodeSelector={"accelerator": "h100"}),
            runtime=10),
        job(0, with_pod_rules(pytorch_job("fine", "team", gpus(1)), nodeSelector={"accelerator": "a100"}),
            runtime=10),
    ]})
    jobs = by_name(result)
    assert jobs["picky"].admitted is None and jobs["picky"].attempts == 0
    assert jobs["picky"].message == ("quota team has room, but no node may take its master pod: 2 without label "
                                     "accelerator=h100 (nodeSelector)")
    assert jobs["fine"].finished == 10.0


def test_a_required_rack_is_never_split() -> None:
    # Rack a-r1 has room for 3 of 4 pods; b-r2, for 4: the job waits for no other rack, and
    # goes to b-r2 although a-r1 comes first.
    nodes = racks({"a": {"r1": 3}, "b": {"r2": 4}})
    wide = with_topology(pytorch_job("wide", "team", gpus(8), workers=3), RACK, required=True)
    simulator = watched({"nodes": nodes, "topology": [ZONE, RACK], "objects": [TEAM], "until": 5,
                         "jobs": [job(0, wide, runtime=10)]})
    (record,) = simulator.jobs
    assert record.admitted == 0.0 and domains(record) == {"b/r2"}
    assert bound_nodes(simulator, "wide") == ["b-r2-0", "b-r2-1", "b-r2-2", "b-r2-3"]


def test_a_required_rack_none_holds_waits_and_says_which_came_closest() -> None:
    nodes = racks({"a": {"r1": 3, "r2": 2}})
    wide = with_topology(pytorch_job("wide", "team", gpus(8), workers=3), RACK, required=True)
    result = run({"nodes": nodes, "topology": [ZONE, RACK], "objects": [TEAM], "until": 50,
                  "jobs": [job(0, wide, runtime=10)]})
    record = by_name(result)["wide"]
    assert record.admitted is None
    assert record.message == ("quota team has room, but no rack (topology.koord-queue.io/rack) has room for all its "
                              "4 pods (the most in one: 3, in r1)")


def test_a_preferred_rack_takes_the_tightest_then_falls_back_to_the_zone() -> None:
    nodes = racks({"a": {"r1": 2, "r2": 4}, "b": {"r1": 3, "r2": 3}})
    jobs = [
        # 2 pods: rack a-r1 holds exactly them (the tightest), not a-r2.
        job(0, with_topology(pytorch_job("two", "team", gpus(8), workers=1), RACK, required=False), runtime=100),
        # 6 pods: no rack holds them; zone b (3 + 3) does, zone a has 4 left.
        job(1, with_topology(pytorch_job("six", "team", gpus(8), workers=5), RACK, required=False), runtime=100),
    ]
    simulator = watched({"nodes": nodes, "topology": [ZONE, RACK], "objects": [TEAM], "until": 5, "jobs": jobs})
    two, six = (next(r for r in simulator.jobs if r.name == name) for name in ("two", "six"))
    assert two.admitted == 0.0 and domains(two) == {"a/r1"} and groups(bound_nodes(simulator, "two")) == {"a-r1"}
    assert six.admitted == 1.0 and domains(six) == {"b"}
    assert groups(bound_nodes(simulator, "six")) == {"b-r1", "b-r2"}


def elastic(name: str, namespace: str, workers: int, least: int) -> dict[str, Any]:
    manifest = pytorch_job(name, namespace, gpus(8), workers=workers)
    manifest["spec"]["elasticPolicy"] = {"minReplicas": least, "maxReplicas": workers}
    return manifest


def test_an_elastic_job_is_admitted_with_the_workers_that_fit_and_whole_after_a_preemption() -> None:
    # 4 nodes of 8 GPUs under pool (32); b's min is 24, a's 8. At 0, b's "short" holds 8 GPUs
    # for 10 s, so a's elastic "flex" (1 + 3 pods, min 1 worker) is admitted with 2 workers
    # (24 GPUs, 16 of them borrowed). b's "back", at 20, reclaims its min once flex's 60 s of
    # protection are over: flex is preempted at 60, and admitted whole (32 GPUs) when back
    # ends, at 110.
    pool = elastic_quota("pool", {GPU: "32"}, {GPU: "32"}, is_parent=True)
    a = elastic_quota("a", {GPU: "8"}, {GPU: "32"}, parent="pool")
    b = elastic_quota("b", {GPU: "24"}, {GPU: "32"}, parent="pool")
    simulator = watched({"nodes": [{"name": "gpu", "count": 4, "allocatable": gpus(8)}],
                         "objects": [pool, a, b], "jobs": [
                             job(0, pytorch_job("short", "b", gpus(8)), runtime=10),
                             job(0, elastic("flex", "a", 3, 1), runtime=100),
                             job(20, pytorch_job("back", "b", gpus(8), workers=2), runtime=50),
                         ]})
    held = [(h.time, h.sign, (h.held or h.record.request)[GPU] // 1000)
            for h in simulator.holdings or () if h.record.name == "flex"]
    assert held == [(0.0, 1, 24), (60.0, -1, 24), (110.0, 1, 32), (210.0, -1, 32)]
    (flex,) = [r for r in simulator.jobs if r.name == "flex"]
    assert flex.preemptions == 1 and flex.finished == 210.0


def test_an_elastic_job_below_its_min_waits_for_its_min() -> None:
    # Its master and 2 workers (its min) ask 24 GPUs, which the quota and the cluster have,
    # but only 2 nodes take a pod of 8.
    nodes = [{"name": "big", "count": 2, "allocatable": gpus(8)}, {"name": "small", "count": 2, "allocatable": gpus(4)}]
    result = run({"nodes": nodes, "objects": [TEAM], "until": 50,
                  "jobs": [job(0, elastic("flex", "team", 4, 2), runtime=10)]})
    record = by_name(result)["flex"]
    assert record.admitted is None
    assert record.message == ("quota team has room, but the nodes have room for 1 of its 2 worker pods "
                              "(8 nvidia.com/gpu each) now")
