"""bench/versus_kueue.py's third runner and its table: the floor (bench/floor.py) resumes Jobs by
a plain per-quota counter, first come first served, and frees a Job's CPU when it ends; the
headline's ratios are computed within a pair, then averaged (never a ratio of means)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
versus = pytest.importorskip("versus_kueue")
floor = pytest.importorskip("floor")


def job(name: str, cpu: str, *, leaf: str = "leaf-0-0", parent: str = "parent-0", suspended: bool = True,
        done: str = "") -> dict[str, Any]:
    return {"metadata": {"namespace": leaf, "name": name, "annotations": {floor.QUOTA: leaf, floor.PARENT: parent}},
            "spec": {"suspend": suspended, "parallelism": 1,
                     "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}]}}},
            "status": {"conditions": [{"type": done, "status": "True"}] if done else []}}


class Client:
    def __init__(self) -> None:
        self.resumed: list[str] = []

    async def patch(self, resource: Any, name: str, body: Any, *, namespace: str) -> dict[str, Any]:
        assert body == {"spec": {"suspend": False}}
        self.resumed.append(name)
        return {}


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_the_floor_resumes_in_arrival_order_within_leaf_and_parent_and_frees_on_completion() -> None:
    client = Client()
    f = floor.Floor(client, leaf_cpu=120_000, parent_cpu=120_000)
    for name, cpu in (("a", "100"), ("b", "30"), ("c", "20")):
        f.seen(floor.project(job(name, cpu)))
    f.seen(floor.project(job("other-leaf", "10", leaf="leaf-0-1")))  # its parent is full (100 + 20)
    await settle()
    assert client.resumed == ["a", "c"]  # b (30) does not fit beside a; c, later, does: greedy FIFO
    assert f.used == {"leaf-0-0": 120_000, "parent-0": 120_000}
    f.seen(floor.project(job("a", "100", suspended=False)))  # its own resume seen: nothing changes
    f.seen(floor.project(job("a", "100", suspended=False, done="Complete")))
    await settle()
    assert client.resumed == ["a", "c", "b", "other-leaf"]
    assert f.used == {"leaf-0-0": 50_000, "leaf-0-1": 10_000, "parent-0": 60_000}
    f.seen(floor.project(job("a", "100", suspended=False, done="Complete")))  # seen again: freed once
    assert f.used["parent-0"] == 60_000


def test_the_floor_leaves_jobs_without_its_annotation_or_with_an_unreadable_request_alone() -> None:
    plain = job("x", "1")
    del plain["metadata"]["annotations"]
    assert floor.project(plain) is None
    assert floor.project(job("y", "lots")) is None


def test_the_floor_holds_a_jobs_quota_from_its_resume_until_it_ends() -> None:
    runner = versus.Floor(Path("/nonexistent"))
    assert runner.holder(job("j", "1")) == ("leaf-0-0/j", False)
    assert runner.holder(job("j", "1", suspended=False)) == ("leaf-0-0/j", True)
    assert runner.holder(job("j", "1", suspended=False, done="Failed")) == ("leaf-0-0/j", False)


def test_ratios_are_computed_within_each_pair_then_averaged() -> None:
    def run(wall: float, small: float) -> dict[str, Any]:
        return {"wall_s": wall, "mean_admission_s": {"small": small, "medium": 1.0, "large": 1.0}}

    pairs = [{"ours": run(50, 1), "kueue": run(100, 4), "floor": run(40, 2)},
             {"ours": run(90, 2), "kueue": run(100, 4), "floor": run(60, 2)}]
    r = versus.pair_ratios(pairs)
    assert r["wall"]["ours/kueue"]["pairs"] == [0.5, 0.9]
    assert r["wall"]["ours/kueue"]["mean"] == pytest.approx(0.7)  # (the ratio of means would be 0.7 too)
    assert (r["wall"]["ours/floor"]["min"], r["wall"]["ours/floor"]["max"]) == (1.25, 1.5)
    assert r["small: mean to admission"]["kueue/floor"]["mean"] == pytest.approx(2.0)
    assert r["small: mean to admission"]["ours/floor"]["pairs"] == [0.5, 1.0]
    assert "ours/kueue_default" not in r["wall"]  # not run: no ratio


def test_kueue_tuned_runs_its_job_reconciler_with_ours_workers_and_client_rate() -> None:
    tuned, shipped = versus.Kueue(Path("/nonexistent")), versus.KueueDefault(Path("/nonexistent"))
    assert tuned.concurrency == {"Job.batch": versus.OURS_JOB_WORKERS} and versus.OURS_JOB_WORKERS == 16
    assert (tuned.qps, tuned.burst) == (versus.CLIENT_QPS, versus.CLIENT_BURST)
    assert shipped.concurrency == {} and (shipped.qps, shipped.burst) == (50, 100)
    pytorch = versus.Kueue(Path("/nonexistent"), job_type=versus.JOB_TYPES["PyTorchJob"])
    assert pytorch.concurrency == {"PyTorchJob.kubeflow.org": 16}


def test_the_table_shows_each_runner_and_the_ratios_within_pairs() -> None:
    def run(system: str, pair: int, wall: float) -> dict[str, Any]:
        w = versus.World(client=None, records=[], system=versus.SYSTEMS[system](Path("/nonexistent")))
        f = versus.figures(w, end=wall, divisor=50)
        f.update(system=system, pair=pair, job_kind="Job", wall_s=wall, controller_cpu_s=1.0, apiserver_cpu_s=2.0,
                 etcd_cpu_s=1.0, controller_cpu_ms_per_job=10.0, requests_per_job=3.0, controller_peak_rss=2**20,
                 ready_s=1.0, requests_by_kind={"patch jobs": 1}, pod_hops_mean_s={},
                 load_average_before="1 1 1", load_average_after="2 2 2")
        return f

    runs = [run("ours", 0, 50), run("floor", 0, 40), run("floor", 1, 60), run("ours", 1, 90)]
    result = {"ours": versus.mean_run([runs[0], runs[3]]), "floor": versus.mean_run([runs[1], runs[2]]),
              "ratios": versus.pair_ratios([{"ours": runs[0], "floor": runs[1]}, {"ours": runs[3], "floor": runs[2]}]),
              "runs": runs}
    text = versus.render(result)
    assert "70.0 s [50.0-90.0]" in text  # ours' wall: mean [min-max] across pairs
    assert "1.38 [1.25-1.50]" in text  # ours/floor, each pair's own ratio
    assert "kueue" not in text.split("ratios, each within a pair")[1].splitlines()[1]  # only what ran
