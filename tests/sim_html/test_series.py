"""The series the HTML report plots, checked against the simulator's own accounts."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordqueue.api.quantity import format_quantity
from koordqueue.sim.htmlreport import ALL_FREE, MOST_ON_ONE, Run, amount_ticks, domain_rows, simulate_run
from koordqueue.sim.report import render_json
from koordqueue.sim.simulator import simulate
from koordqueue.sim.tracefile import load_trace

TRACES = sorted((Path(__file__).parents[2] / "examples" / "traces").glob("*.yaml"))
TRACE_DIR = TRACES[0].parent


def value_at(points: list[list[float]], time: float) -> float:
    """A step series' value at ``time``: that of its last point at or before it."""
    return [value for at, value in points if at <= time][-1]


@pytest.fixture(scope="module", params=TRACES, ids=lambda path: path.stem)
def watched(request: pytest.FixtureRequest) -> tuple[Path, Run]:
    """One watched run per trace for the module (the tests only read it): the four-week trace
    takes seconds a run."""
    return request.param, simulate_run(str(request.param))


def test_watching_the_run_changes_nothing(watched: tuple[Path, Run]) -> None:
    path, run = watched
    assert render_json(run.result) == render_json(simulate(load_trace(str(path), stream=False)))


def test_usage_peaks_and_averages_are_the_usage_books(watched: tuple[Path, Run]) -> None:
    _, run = watched
    book = run.result.usage.quotas
    assert book, "the trace admits nothing: the comparison would be empty"
    for quota, usage in book.items():
        for resource, points in run.usage[quota].items():
            assert points[0][0] == 0 and points[-1][0] == run.result.end
            assert [at for at, _ in points] == sorted({at for at, _ in points})  # one point per instant
            assert max(value for _, value in points) == usage.peak.get(resource, 0), (quota, resource)
            area = sum(value * (points[i + 1][0] - at) for i, (at, value) in enumerate(points[:-1]))
            assert area == pytest.approx(usage.area.get(resource, 0.0), rel=1e-9, abs=1e-6), (quota, resource)


def test_queue_length_is_the_jobs_between_submission_and_admission() -> None:
    """Without preemptions a job waits from its submission to its admission, and no longer."""
    run = simulate_run(str(TRACE_DIR / "block-vs-priority.yaml"))
    jobs = run.result.jobs
    assert all(job.preemptions == 0 for job in jobs) and len(jobs) == 20
    for queue, points in run.queue_length.items():
        mine = [job for job in jobs if queue in ("all queues", job.queue)]
        for at, value in points:
            waiting = sum(1 for job in mine if job.submitted is not None and job.submitted <= at
                          and (job.admitted is None or job.admitted > at))
            assert value == waiting, (queue, at)
    assert max(value for _, value in run.queue_length["all queues"]) > 0


def test_preempted_jobs_wait_again_until_they_are_readmitted() -> None:
    """borrow-and-reclaim: team-b reclaims 8 GPUs at t=600 by preempting 4 of team-a's 2-GPU jobs;
    they wait until team-b's jobs end (900 s later) and then run again."""
    run = simulate_run(str(TRACE_DIR / "borrow-and-reclaim.yaml"))
    team_a = run.queue_length["koord-queue/team-a"]
    preempted = [job for job in run.result.jobs if job.preemptions]
    assert len(preempted) == 4
    assert value_at(team_a, 599) == 0
    assert value_at(team_a, 1000) == 4
    assert value_at(team_a, 1600) == 0
    gpus = run.usage["team-a"]["nvidia.com/gpu"]
    assert value_at(gpus, 599) == 16_000 and value_at(gpus, 1000) == 8_000 and value_at(gpus, 1600) == 16_000


def test_the_room_on_the_nodes_is_the_capacity_less_what_admitted_jobs_hold() -> None:
    """placement: every admitted job has its pods bound at once where the engine placed
    them, so the GPUs free on all nodes are the cluster's 64 less what the quota's jobs
    hold (the usage book); the most free on one node is the most of the nodes' own lines."""
    run = simulate_run(str(TRACE_DIR / "placement.yaml"))
    assert run.node_resource == "nvidia.com/gpu"
    held = run.usage["research"]["nvidia.com/gpu"]
    nodes = {name: points for name, points in run.node_room.items() if name not in (ALL_FREE, MOST_ON_ONE)}
    assert len(nodes) == 8
    times = sorted({at for points in run.node_room.values() for at, _ in points} | {at for at, _ in held})
    for at in times:
        assert value_at(run.node_room[ALL_FREE], at) == 64_000 - value_at(held, at), at
        assert value_at(run.node_room[MOST_ON_ONE], at) == max(value_at(p, at) for p in nodes.values()), at
    assert value_at(run.node_room[ALL_FREE], 100) == 0 and value_at(run.node_room[ALL_FREE], 2000) == 64_000
    assert domain_rows(run.result.jobs) == [
        {"job": "research/ring", "quota": "research", "domains": [
            "master: topology.koord-queue.io/rack=a/r1", "worker: topology.koord-queue.io/rack=a/r1"], "admitted": []},
        {"job": "research/wide", "quota": "research", "domains": [
            "master: topology.kubernetes.io/zone=a", "worker: topology.kubernetes.io/zone=a"], "admitted": []},
        {"job": "research/flex", "quota": "research", "domains": [], "admitted": ["worker 1 of 5"]},
    ]


@pytest.mark.parametrize(("peak", "binary", "labels"), [
    (64_000, False, ["0", "20", "40", "60", "80"]),
    (16_000, False, ["0", "5", "10", "15", "20"]),
    (3_500, False, ["0", "1", "2", "3", "4"]),
    (256 * 2**30 * 1000, True, ["0", "64Gi", "128Gi", "192Gi", "256Gi"]),
    (100 * 2**30 * 1000, True, ["0", "32Gi", "64Gi", "96Gi", "128Gi"]),
])
def test_axis_ticks_are_round_in_the_units_people_write(peak: int, binary: bool, labels: list[str]) -> None:
    top, ticks = amount_ticks(peak, binary)
    assert [format_quantity(int(tick)) for tick in ticks] == labels and top == ticks[-1] >= peak
