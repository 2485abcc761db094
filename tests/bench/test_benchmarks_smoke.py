"""The benchmarks in small, as CI smoke tests: each runs end to end (real processes), its
output is complete, and the invariants hold (no quota over its max, every job finished,
every admission seen). Speed is not checked here: the figures are for bench/, by hand, and
every time limit below only ends a run that hangs (a loaded CI machine runs these several
times slower than a quiet one)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).parents[2] / "bench"
pytestmark = pytest.mark.timeout(900)


def run(script: str, *args: str, timeout: float = 840) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(BENCH / script), *args, "--json"], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{script} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    figures: dict[str, Any] = json.loads(done.stdout)
    return figures


def number(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def test_kueue_baseline_in_small_runs_every_job_within_the_quotas() -> None:
    f = run("kueue_baseline.py", "--divisor", "50")
    assert f["jobs"] == 30 * (7 + 2 + 1) and f["unfinished"] == 0
    assert f["quotas_over_max"] == [] and f["released_more_than_once"] == []
    assert max(f["peak_used_cpu"].values()) <= 120
    assert f["runner_write_errors"] == []
    for key in ("wall_seconds", "mean_usage_percent", "work_share_percent"):
        assert number(f[key]) and f[key] > 0, key
    for name in ("small", "medium", "large"):
        wait = f["classes"][name]
        assert wait["jobs"] > 0 and number(wait["mean_wait"]) and number(wait["p90_wait"]), name
    controller = f["controller"]
    assert controller["cpu_seconds"] > 0 and controller["peak_rss"] > 0 and controller["cycles"] > 0
    # Counted by the server under the controller's own identity: every job got a unit and was released.
    requests = controller["api_requests_by_kind"]
    assert requests["create queueunits"] == f["jobs"] and requests["patch pytorchjobs"] >= f["jobs"]
    assert controller["api_requests"] == sum(requests.values())
    assert f["apiserver"]["cpu_seconds"] > 0 and f["bench_process"]["cpu_seconds"] > 0
    sim = f["simulator"]
    assert sim["jobs"] == f["jobs"] and sim["unfinished"] == 0 and sim["quotas_over_max"] == []


@pytest.mark.slow
def test_scale_in_small_admits_one_wave_within_the_quotas_and_a_restart_writes_no_unit() -> None:
    f = run("scale.py", "--jobs", "2000", "--timeout", "600")
    assert f["quotas"] == 1000 and f["leaves"] == 900
    assert "PRELOADED" not in f and "SQLite" in f["preloaded"]  # the output says the jobs were preloaded
    wave = f["wave"]
    assert wave["admitted"] == wave["expected"] == 2000 and wave["quotas_over_max"] == []
    assert wave["cycles"] > 0 and number(wave["cycle_p50_ms"]) and number(wave["cycle_p99_ms"])
    for start in ("first_start", "restart"):
        assert number(f[start]["ready_seconds"]) and f[start]["rss_when_ready"] > 0
    # A restart finds every unit as it left it: it rewrites none.
    assert not any("queueunits" in kind for kind in f["restart"]["writes_while_syncing"])
    assert f["controller"]["peak_rss"] > 0


def test_sim_speed_in_small_runs_both_programs_on_every_trace_alike() -> None:
    f = run("sim_speed.py", "--small", "--rounds", "1")
    assert set(f["traces"]) == {f"{fmt}, {layout}" for fmt in ("yaml", "json")
                                for layout in ("in time order", "leaf after leaf")}
    for trace in f["traces"].values():
        assert trace["admitted"] == {"ours": 1500, "greedy": 1500}
        for program in ("ours", "greedy"):
            (figures,) = trace["runs"][program]
            assert all(number(figures[key]) and figures[key] > 0 for key in ("wall", "cpu", "rss_mib"))
        assert all(number(ratio) and ratio > 0 for ratio in trace["ratio_ours_to_greedy"].values())


def test_sim_scale_in_small_finishes_every_job_of_the_generated_trace() -> None:
    f = run("sim_scale.py", "--jobs", "2000")
    assert f["quotas"] == 1000 and f["jobs"] == 2000 and f["trace_bytes"] > 0
    assert f["output"]["jobs"] == f["output"]["succeeded"] == 2000 and f["output"]["never_admitted"] == 0
    assert number(f["wall_seconds"]) and number(f["cpu_seconds"]) and f["peak_rss_mib"] > 0


def test_placement_in_small_places_within_the_nodes_in_both_modes() -> None:
    f = run("placement.py", "--jobs", "400", "--racks", "1", "--cycles", "20", "--rounds", "1")
    assert f["nodes"] == 100 and f["jobs"] == 400
    modes = {r["mode"]: r for r in f["rounds"]}
    assert set(modes) == {"on", "off"}
    for figures in modes.values():
        assert figures["first_admitted"] > 0 and figures["steady_admitted"] > 0
        for key in ("first_cycle_ms", "cycle_p50_ms", "cycle_p99_ms", "admissions_per_second"):
            assert number(figures[key]) and figures[key] > 0, key
        assert figures["nodes_over_allocatable"] == figures["pods_where_forbidden"] == []
        assert figures["required_racks_split"] == []


def test_gated_workloads_in_small_admits_every_pod_and_every_job() -> None:
    out = run("gated_workloads.py", "--n", "3", "--r", "2", "--rounds", "1", timeout=300)
    assert [r["admitted"] for r in out["deployments"]] == [12] and [r["admitted"] for r in out["jobs"]] == [3]
    assert all(r["requests"] > 0 and r["cpu_seconds"] > 0 for r in out["deployments"] + out["jobs"])
    assert set(out["summary"]) == {"requests_per_admitted_unit", "requests_per_pod", "cpu_ms_per_pod"}
