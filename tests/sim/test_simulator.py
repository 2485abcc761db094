"""The simulator's own behaviour: nodes and gangs, trace events, the end of a run, bad
entries, and the loop that asks the engine at the right moments."""

from __future__ import annotations

from typing import Any

from koordqueue.api.constants import Phase
from koordqueue.engine.model import EngineConfig
from koordqueue.sim.report import render_json, result_json

from .builders import GPU, by_name, elastic_quota, job, pytorch_job, run

TEAM = elastic_quota("team", {GPU: "0"}, {GPU: "8"})


def gpus(n: int) -> dict[str, str]:
    return {GPU: str(n)}


def test_without_nodes_admission_is_the_start() -> None:
    result = run({"objects": [TEAM], "jobs": [
        job(0, pytorch_job("first", "team", gpus(4), workers=1), runtime=100),
        job(5, pytorch_job("second", "team", gpus(4)), runtime=10),
    ]})
    jobs = by_name(result)
    assert (jobs["first"].admitted, jobs["first"].finished) == (0.0, 100.0)
    assert (jobs["second"].submitted, jobs["second"].admitted, jobs["second"].finished) == (5.0, 100.0, 110.0)
    assert result.end == 110.0


NO_NODE_FIT = {"koord-queue/node-fit": "false"}


def without_node_fit(quota: dict[str, Any]) -> dict[str, Any]:
    """The quota admitting on quota alone: its jobs' pods wait on the nodes, as in Koord-Queue."""
    quota["metadata"]["annotations"].update(NO_NODE_FIT)
    return quota


class TestNodes:
    NODES = [{"name": "gpu", "count": 2, "allocatable": {GPU: "4", "cpu": "32"}}]

    def test_a_job_is_admitted_when_all_its_pods_fit(self) -> None:
        result = run({"nodes": self.NODES, "objects": [TEAM], "jobs": [
            job(0, pytorch_job("a", "team", gpus(3)), runtime=100),
            job(0, pytorch_job("b", "team", gpus(3)), runtime=200),
            job(1, pytorch_job("c", "team", gpus(2)), runtime=10),  # 1 GPU free on each node
        ]})
        c = by_name(result)["c"]
        assert c.admitted == 100.0  # the quota has room, but no node has 2 free GPUs before a ends
        assert c.finished == 110.0

    def test_on_quota_alone_an_admitted_job_starts_when_all_its_pods_fit(self) -> None:
        result = run({"nodes": self.NODES, "objects": [without_node_fit(elastic_quota("team", {GPU: "0"}, {GPU: "8"}))],
                      "jobs": [
                          job(0, pytorch_job("a", "team", gpus(3)), runtime=100),
                          job(0, pytorch_job("b", "team", gpus(3)), runtime=200),
                          job(1, pytorch_job("c", "team", gpus(2)), runtime=10),
                      ]})
        c = by_name(result)["c"]
        assert c.admitted == 1.0  # the quota and the cluster total have room
        assert c.finished == 110.0  # but it starts when a leaves node 0, at 100

    def test_a_gang_that_fits_no_nodes_waits_and_says_why(self) -> None:
        nodes = [{"name": "big", "count": 1, "allocatable": {GPU: "4"}},
                 {"name": "small", "count": 1, "allocatable": {GPU: "2"}}]
        result = run({"nodes": nodes, "objects": [TEAM], "until": 50, "jobs": [
            job(0, pytorch_job("gang", "team", gpus(3), workers=1), runtime=10),  # 3 + 3 on 4 + 2
        ]})
        gang = by_name(result)["gang"]
        assert gang.phase is Phase.ENQUEUED and gang.admitted is None
        # The master takes 3 of big's 4 GPUs: what is left for the worker.
        assert gang.message == ("quota team has room, but no node has 3 free nvidia.com/gpu "
                                "(the most free on one node: 2, on small-0)")

    def test_on_quota_alone_a_gang_is_placed_whole_or_not_at_all(self) -> None:
        nodes = [{"name": "big", "count": 1, "allocatable": {GPU: "4"}},
                 {"name": "small", "count": 1, "allocatable": {GPU: "2"}}]
        result = run({"nodes": nodes, "objects": [without_node_fit(elastic_quota("team", {GPU: "0"}, {GPU: "8"}))],
                      "until": 50, "jobs": [job(0, pytorch_job("gang", "team", gpus(3), workers=1), runtime=10)]})
        gang = by_name(result)["gang"]
        assert gang.phase is Phase.DEQUEUED and gang.finished is None
        assert gang.message == "admitted, but its 2 pods do not fit on the 2 node(s) all at once, even empty (first-fit)"

    def test_a_pod_too_big_for_any_node_says_so(self) -> None:
        result = run({"nodes": self.NODES, "objects": [elastic_quota("team", {GPU: "0"}, {GPU: "8"})],
                      "until": 10, "jobs": [job(0, pytorch_job("huge", "team", gpus(6)), runtime=10)]})
        assert by_name(result)["huge"].message == (
            "quota team has room, but no node has 6 free nvidia.com/gpu (the most free on one node: 4, on gpu-0); "
            "nor would any, empty"
        )

    def test_on_quota_alone_a_pod_too_big_for_any_node_says_so(self) -> None:
        result = run({"nodes": self.NODES, "objects": [without_node_fit(elastic_quota("team", {GPU: "0"}, {GPU: "8"}))],
                      "until": 10, "jobs": [job(0, pytorch_job("huge", "team", gpus(6)), runtime=10)]})
        assert by_name(result)["huge"].message == (
            "admitted, but a pod asking {'nvidia.com/gpu': '6'} fits on none of the 2 node(s), even empty: "
            "it can never start"
        )

    def test_the_cluster_total_is_the_nodes_allocatable(self) -> None:
        result = run({"nodes": self.NODES, "objects": [elastic_quota("team", {GPU: "0"}, {GPU: "100"})],
                      "jobs": [job(0, pytorch_job(f"j{i}", "team", gpus(2)), runtime=10) for i in range(5)]})
        assert result.capacity == {GPU: 8000, "cpu": 64000}
        assert sorted(r.admitted for r in result.jobs) == [0.0, 0.0, 0.0, 0.0, 10.0]


class TestEvents:
    def test_a_bigger_max_lets_waiting_jobs_in_at_once(self) -> None:
        result = run({"objects": [TEAM], "jobs": [
            job(0, pytorch_job("a", "team", gpus(8)), runtime=100),
            job(0, pytorch_job("b", "team", gpus(8)), runtime=100),
        ], "events": [{"at": 30, "apply": elastic_quota("team", {GPU: "0"}, {GPU: "16"})}]})
        assert by_name(result)["b"].admitted == 30.0

    def test_deleting_a_running_job_frees_its_quota(self) -> None:
        result = run({"objects": [TEAM], "jobs": [
            job(0, pytorch_job("a", "team", gpus(8))),  # runs forever
            job(0, pytorch_job("b", "team", gpus(8)), runtime=10),
        ], "events": [{"at": 40, "delete": {"kind": "PyTorchJob", "namespace": "team", "name": "a"}}]})
        jobs = by_name(result)
        assert jobs["a"].deleted == 40.0 and jobs["a"].message == "deleted at 40 s while Running"
        assert (jobs["b"].admitted, jobs["b"].finished) == (40.0, 50.0)

    def test_a_job_applied_by_an_event_runs_for_its_runtime(self) -> None:
        result = run({"objects": [TEAM], "events": [
            {"at": 5, "apply": pytorch_job("late", "team", gpus(1)), "runtime": 7},
        ]})
        assert (by_name(result)["late"].submitted, by_name(result)["late"].finished) == (5.0, 12.0)

    def test_raising_a_waiting_jobs_priority_moves_it_ahead(self) -> None:
        result = run({"objects": [TEAM], "jobs": [
            job(0, pytorch_job("running", "team", gpus(8)), runtime=100),
            job(1, pytorch_job("first", "team", gpus(8), priority=1), runtime=10),
            job(2, pytorch_job("second", "team", gpus(8), priority=1), runtime=10),
        ], "events": [{"at": 50, "apply": pytorch_job("second", "team", gpus(8), priority=9)}]})
        jobs = by_name(result)
        assert jobs["second"].priority == 9
        assert (jobs["second"].admitted, jobs["first"].admitted) == (100.0, 110.0)
        assert jobs["second"].submitted == 2.0  # an update, not a new job

    def test_deleting_a_quota_leaves_its_jobs_waiting_with_the_reason(self) -> None:
        result = run({"objects": [TEAM], "until": 100, "jobs": [
            job(0, pytorch_job("a", "team", gpus(8)), runtime=50),
            job(0, pytorch_job("b", "team", gpus(8)), runtime=50),
        ], "events": [{"at": 10, "delete": {"kind": "ElasticQuota", "name": "team"}}]})
        b = by_name(result)["b"]
        assert b.admitted is None
        assert b.message == (
            "no quota for namespace team: name one with the label quota.scheduling.koordinator.sh/name "
            "or a queue with the annotation scheduling.x-k8s.io/queue"
        )


def test_jobs_running_at_the_end_stay_running() -> None:
    result = run({"objects": [TEAM], "until": 60, "jobs": [
        job(0, pytorch_job("long", "team", gpus(4)), runtime=100),
        job(0, pytorch_job("forever", "team", gpus(4))),
        job(70, pytorch_job("too-late", "team", gpus(1)), runtime=1),
    ]})
    jobs = by_name(result)
    assert result.end == 60.0
    assert jobs["long"].phase is Phase.RUNNING and jobs["forever"].phase is Phase.RUNNING
    assert "too-late" not in jobs  # never submitted
    assert result_json(result)["end"] == 60.0


def test_a_preempted_job_starts_again_from_zero() -> None:
    pool = elastic_quota("pool", {GPU: "8"}, {GPU: "8"}, is_parent=True)
    a = elastic_quota("a", {GPU: "4"}, {GPU: "8"}, parent="pool")
    b = elastic_quota("b", {GPU: "4"}, {GPU: "8"}, parent="pool")
    result = run({"objects": [pool, a, b], "jobs": [
        job(0, pytorch_job("b-1", "b", gpus(4)), runtime=100),
        job(0, pytorch_job("b-2", "b", gpus(4)), runtime=100),
        job(70, pytorch_job("a-1", "a", gpus(4)), runtime=100),
    ]})
    jobs = by_name(result)
    victim = jobs["b-2"]
    assert jobs["a-1"].admitted == 70.0
    assert victim.preemptions == 1 and victim.attempts == 2
    assert victim.admitted == 0.0  # the first admission
    # Back in when b-1 ends at 100 (b is then within its share), it runs its 100 s again
    # (it had run 70 s when it was preempted).
    assert victim.finished == 100.0 + 100.0
    assert result.usage.quotas["pool"].peak == {GPU: 8000}


def test_a_wakeup_within_a_time_quantum_is_kept() -> None:
    """A protect time shorter than the clock's quantum: the reclaim happens one quantum
    later (the simulator once spun on such a wakeup, then ignored it)."""
    pool = elastic_quota("pool", {GPU: "8"}, {GPU: "8"}, is_parent=True)
    a = elastic_quota("a", {GPU: "4"}, {GPU: "8"}, parent="pool")
    b = elastic_quota("b", {GPU: "4"}, {GPU: "8"}, parent="pool")
    b_first = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",
               "metadata": {"name": "b", "namespace": "koord-queue"}, "spec": {"priority": 2000}}
    result = run({"objects": [pool, a, b, b_first], "jobs": [
        job(0, pytorch_job("b-1", "b", gpus(8)), runtime=100),
        job(0, pytorch_job("a-1", "a", gpus(4)), runtime=100),
    ]}, EngineConfig(protect_seconds=4e-7))
    jobs = by_name(result)
    assert jobs["b-1"].preemptions == 1
    assert jobs["a-1"].admitted == 1e-6


class TestWakeTime:
    """When the simulator runs the engine's next cycle, from what the engine asked."""

    def simulator(self):  # type: ignore[no-untyped-def]
        from koordqueue.sim.simulator import Simulator
        from koordqueue.sim.trace import Trace

        sim = Simulator(Trace())
        sim.now = 10.0
        return sim

    def test_nothing_asked(self) -> None:
        assert self.simulator()._wake_time(None, 1) is None

    def test_a_later_time(self) -> None:
        assert self.simulator()._wake_time(12.5, 1) == 12.5

    def test_within_a_quantum_is_the_next_quantum(self) -> None:
        assert self.simulator()._wake_time(10.0000004, 1) == 10.000001

    def test_work_left_now_is_done_now_but_not_forever(self) -> None:
        from koordqueue.sim.simulator import MAX_CYCLES_PER_INSTANT

        sim = self.simulator()
        assert sim._wake_time(10.0, 1) == 10.0
        assert sim._wake_time(10.0, MAX_CYCLES_PER_INSTANT) is None
        assert sim.warnings == [
            f"the engine still had work at t=10 s after {MAX_CYCLES_PER_INSTANT} cycles; it waits for the next event"
        ]


def test_a_trace_with_unknown_keys_warns_and_runs() -> None:
    result = run({"objects": [TEAM], "queues": [], "jobs": [job(0, pytorch_job("a", "team", gpus(1)), runtime=1)]})
    assert result.warnings == ["unknown top-level key 'queues' ignored (known: nodes, topology, deviceClassMappings, objects, jobs, events, until)"]
    assert by_name(result)["a"].finished == 1.0


def test_bad_times_are_reported_on_the_entry() -> None:
    result = run({"objects": [TEAM], "jobs": [
        job(-5, pytorch_job("before-time", "team", gpus(1)), runtime=1),
        {"at": 0, "runtime": "long", "manifest": pytorch_job("odd-runtime", "team", gpus(1))},
    ], "until": "tomorrow"})
    messages = {record.name: record.message for record in result.jobs}
    assert messages["before-time"] == "not submitted: jobs[0].at must be a number of seconds >= 0, got -5"
    assert messages["odd-runtime"] == "not submitted: jobs[1].runtime must be a number of seconds >= 0, got 'long'"
    assert "until must be a number of seconds >= 0, got 'tomorrow'; simulating until nothing more happens" in (
        result.warnings
    )


def test_the_same_job_twice_is_one_job() -> None:
    result = run({"objects": [TEAM], "jobs": [
        job(0, pytorch_job("twice", "team", gpus(1)), runtime=10),
        job(20, pytorch_job("twice", "team", gpus(1)), runtime=10),
    ]})
    assert [r.name for r in result.jobs] == ["twice"]
    assert result.warnings == ["jobs[1]: PyTorchJob team/twice already finished; applying it again changes nothing"]


def test_json_is_a_pure_function_of_the_result() -> None:
    document = {"objects": [TEAM], "jobs": [job(i, pytorch_job(f"j{i}", "team", gpus(3)), runtime=7) for i in range(6)]}
    assert render_json(run(document)) == render_json(run(document))


def test_the_json_is_written_as_json_dumps_writes_it() -> None:
    """Written a job at a time, it is still byte for byte what json.dumps with an indent made."""
    import json

    from koordqueue.sim.report import json_chunks
    from koordqueue.sim.simulator import SimResult

    result = run({"objects": [TEAM], "until": 300, "jobs": [
        job(0, pytorch_job("été-✓", "team", gpus(4)), runtime=100.123456789),
        job(0.1 + 0.2, pytorch_job("second", "team", gpus(8)), runtime=1e-5),
        job(7, {"kind": "Mystery", "metadata": {"name": 'quo"te\\'}}),
        job(9, pytorch_job("forever", "team", gpus(2))),
        job(1e-5, pytorch_job("early", "team", gpus(1)), runtime=2e-5),  # times json writes as 1e-05
    ]})
    expected = json.dumps(result_json(result), indent=2, ensure_ascii=False)
    assert "1e-05" in expected
    assert render_json(result) == "".join(json_chunks(result)) == expected
    empty = SimResult([], {}, {}, result.usage, 0.0, [], None, None)
    assert render_json(empty) == json.dumps(result_json(empty), indent=2, ensure_ascii=False)


def test_jobs_of_one_manifest_but_their_names_are_each_their_own() -> None:
    """A job's unit is reused for a later job whose manifest differs only in its name
    (simulator.py ``_unit``): the name, the creation and the priority classes still count."""
    def classed(name: str) -> dict[str, Any]:
        manifest = pytorch_job(name, "team", gpus(1))
        manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["priorityClassName"] = "high"
        return manifest

    too_long = "x" * 254
    high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 7}
    result = run({"objects": [TEAM], "jobs": [
        job(0, classed("a"), runtime=10),
        job(1, classed("b"), runtime=10),
        job(2, classed(too_long), runtime=10),
        job(6, classed("c"), runtime=10),
    ], "events": [{"at": 5, "apply": high}]})
    jobs = by_name(result)
    assert [(jobs[n].priority, jobs[n].submitted, jobs[n].unit_key) for n in "abc"] == \
        [(0, 0.0, "team/a-py-qu"), (0, 1.0, "team/b-py-qu"), (7, 6.0, "team/c-py-qu")]
    assert jobs[too_long].unit_key is None
    assert jobs[too_long].message is not None and "260 characters, more than 253" in jobs[too_long].message


def test_a_jobs_shape_is_its_manifest_less_its_name_types_and_order_included() -> None:
    """``Simulator._shape`` keys jobs by marshal's bytes of the manifest (less its name):
    equal where ``repr`` is equal, and apart where it is apart (1, 1.0, True, "1"; key
    order); what marshal does not take (a date from YAML) is keyed by ``repr``."""
    import datetime
    import itertools

    from koordqueue.jobs import adapter_for
    from koordqueue.sim.simulator import Simulator
    from koordqueue.sim.trace import Trace

    simulator = Simulator(Trace())
    adapter = adapter_for("kubeflow.org/v1", "PyTorchJob")
    assert adapter is not None

    def variant(name: str, value: object, first: str = "a") -> dict[str, Any]:
        manifest = pytorch_job(name, "team", gpus(1))
        labels = {first: value, "b" if first == "a" else "a": 0}
        manifest["metadata"]["labels"] = labels
        return manifest

    values: list[object] = [1, 1.0, True, "1", None, [1], {"x": 1}, 2**70, -0.0, 0.0]
    manifests = [variant(f"job-{i}", value, first) for i, (value, first) in enumerate(itertools.product(values, "ab"))]
    for one, other in itertools.combinations_with_replacement(manifests, 2):
        alike = simulator._shape(one, adapter) == simulator._shape(other, adapter)
        renamed = [{**m, "metadata": {**m["metadata"], "name": ""}} for m in (one, other)]
        assert alike == (repr(renamed[0]) == repr(renamed[1]))
    assert [m["metadata"]["name"] for m in manifests] == [f"job-{i}" for i in range(len(manifests))]
    dated = variant("d", datetime.date(2026, 1, 1))
    shape = simulator._shape(dated, adapter)
    assert shape is not None and isinstance(shape[1], str)
    assert shape == simulator._shape(variant("e", datetime.date(2026, 1, 1)), adapter)
    assert shape != simulator._shape(variant("f", datetime.date(2026, 1, 2)), adapter)


def test_a_time_rounded_to_the_quantum_by_division_is_the_rounded_product() -> None:
    """``_at`` divides whole microseconds below 2**50 of them; the product rounded to 6
    places (what it did before, and still does above) gives the same floats."""
    import random

    from koordqueue.sim.simulator import _EXACT_QUANTA, TIME_QUANTUM, _at

    def product(seconds: float) -> float:
        return round(round(seconds / TIME_QUANTUM) * TIME_QUANTUM, 6)

    rng = random.Random(5)
    values = [0.0, -0.0, 0.1 + 0.2, 0.3, 1e-7, 4.9999999e-7, 5e-7, 1.0000005, 123.4565, 86400.000001, 1e9, 1.2e9]
    values += [rng.uniform(0, 10 ** rng.randint(0, 9)) for _ in range(20000)]
    values += [round(rng.uniform(0, 1e5), rng.randint(0, 7)) for _ in range(20000)]
    top = _EXACT_QUANTA * TIME_QUANTUM
    values += [top * (1 - rng.random() * 1e-6) for _ in range(2000)] + [top * 1.5, -top * 0.99]
    for seconds in values:
        assert repr(_at(seconds)) == repr(product(seconds)), seconds
