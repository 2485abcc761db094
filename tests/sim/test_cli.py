"""``koord-queue simulate`` as a user runs it: the JSON contract of ARCHITECTURE.md,
the readable summary, and every example trace with what it is meant to show."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from koordqueue.cli import main

EXAMPLES = Path(__file__).parents[2] / "examples" / "traces"
JOB_KEYS = ["kind", "namespace", "name", "quota", "queue", "priority", "submitted", "admitted", "finished",
            "phase", "preemptions", "attempts", "message"]
QUOTA_KEYS = ["min", "max", "peak_used", "runtime_at_end"]
PHASES = {"Enqueued", "Reserved", "Dequeued", "Running", "Succeed", "Failed", "TimeoutBackoff", "Preempted"}


def simulate_json(trace: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["simulate", "--json", str(trace)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def simulate_text(trace: Path) -> str:
    result = CliRunner().invoke(main, ["simulate", str(trace)])
    assert result.exit_code == 0, result.output
    return result.stdout


def jobs_by_name(output: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {job["name"]: job for job in output["jobs"] if job["name"]}


@pytest.mark.parametrize("trace", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_prints_the_json_contract(trace: Path) -> None:
    output = simulate_json(trace)
    assert list(output) == ["jobs", "quotas", "end"]
    assert isinstance(output["end"], float) and output["end"] > 0
    assert output["jobs"]
    for job in output["jobs"]:
        assert list(job) == JOB_KEYS
        for key in ("submitted", "admitted", "finished"):
            assert job[key] is None or isinstance(job[key], float)
        if job["admitted"] is not None:
            assert job["submitted"] <= job["admitted"] <= output["end"]
        if job["finished"] is not None:
            assert job["admitted"] is not None and job["admitted"] <= job["finished"] <= output["end"]
            assert job["phase"] == "Succeed"
        assert job["phase"] is None or job["phase"] in PHASES
        assert isinstance(job["preemptions"], int) and isinstance(job["attempts"], int)
        assert job["attempts"] >= job["preemptions"]
        if job["phase"] not in ("Succeed", "Running", "Dequeued"):
            assert job["message"], f"{job['name']} waits without a reason"
    for quota in output["quotas"].values():
        assert list(quota) == QUOTA_KEYS
        for key in QUOTA_KEYS:
            assert all(isinstance(v, str) for v in quota[key].values())
        for resource, peak in quota["peak_used"].items():
            assert _whole(peak) <= _whole(quota["max"][resource]), "a quota went above its max"


def _whole(quantity: str) -> float:
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "m": 0.001}
    for suffix, factor in suffixes.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity)


def test_the_worked_example_settles_at_5_20_35_40() -> None:
    output = simulate_json(EXAMPLES / "worked-example.yaml")
    quotas = output["quotas"]
    assert [quotas[f"team-{t}"]["runtime_at_end"]["nvidia.com/gpu"] for t in "abcd"] == ["5", "20", "35", "40"]
    running: dict[str, int] = {}
    for job in output["jobs"]:
        if job["phase"] == "Running":
            running[job["quota"]] = running.get(job["quota"], 0) + 5
    assert running == {"team-a": 5, "team-b": 20, "team-c": 35, "team-d": 40}
    assert sum(job["preemptions"] for job in output["jobs"]) > 0  # reached by reclaim
    assert quotas["gpu-pool"]["peak_used"] == {"nvidia.com/gpu": "100"}
    assert output["end"] == 1200.0


def test_block_holds_the_line_and_priority_lets_small_jobs_pass() -> None:
    output = simulate_json(EXAMPLES / "block-vs-priority.yaml")
    jobs = {(job["namespace"], job["name"]): job for job in output["jobs"]}
    block_big, priority_big = jobs[("block-team", "big")], jobs[("priority-team", "big")]
    assert block_big["admitted"] == 100.0  # as soon as the first job ends
    assert all(
        job["admitted"] >= block_big["admitted"]
        for (ns, name), job in jobs.items()
        if ns == "block-team" and name.startswith("small")
    )
    assert priority_big["admitted"] > block_big["admitted"]
    passed = [job for (ns, name), job in jobs.items()
              if ns == "priority-team" and name.startswith("small") and job["admitted"] < priority_big["admitted"]]
    assert len(passed) >= 4
    assert all(job["phase"] == "Succeed" for job in output["jobs"])


def test_borrowed_gpus_are_reclaimed_for_their_owner() -> None:
    output = simulate_json(EXAMPLES / "borrow-and-reclaim.yaml")
    jobs = jobs_by_name(output)
    assert all(jobs[f"a-{i}"]["admitted"] == (0.0 if i <= 4 else 10.0) for i in range(1, 9))
    assert all(jobs[f"b-{i}"]["admitted"] == 600.0 for i in range(1, 5))  # at once, by reclaim
    assert sum(jobs[f"a-{i}"]["preemptions"] for i in range(1, 9)) == 4
    assert output["quotas"]["team-a"]["peak_used"]["nvidia.com/gpu"] == "16"
    assert all(job["phase"] == "Succeed" for job in output["jobs"])


def test_the_seed_setup_admits_the_high_priority_job_before_waiting_seed_jobs() -> None:
    output = simulate_json(EXAMPLES / "seed-team-a.yaml")
    jobs = jobs_by_name(output)
    high = jobs["high-priority-training"]
    assert high["priority"] == 1000 and high["quota"] == "pytorch-team-a"
    waiting_before = [job for job in output["jobs"]
                      if job["name"] != high["name"] and job["submitted"] < high["submitted"]
                      and job["admitted"] > high["submitted"]]
    assert waiting_before and all(job["admitted"] >= high["admitted"] for job in waiting_before)
    assert output["quotas"]["pytorch-team-a"]["peak_used"]["nvidia.com/gpu"] == "8"
    assert all(job["phase"] == "Succeed" for job in output["jobs"])


def test_bad_input_leaves_each_bad_object_with_a_message_and_the_rest_runs() -> None:
    result = CliRunner().invoke(main, ["simulate", "--json", str(EXAMPLES / "bad-input.yaml")])
    assert result.exit_code == 0
    output = json.loads(result.stdout)
    jobs = jobs_by_name(output)
    assert [jobs[f"ok-{i}"]["phase"] for i in (1, 2, 3)] == ["Succeed"] * 3
    assert "'4 cores' is not a number" in jobs["bad-quantity"]["message"]
    assert jobs["unknown-kind"]["message"] == (
        "rejected: unknown kind 'SparkJob': not an object or a job kind the simulator knows"
    )
    assert "replicas must be between 0 and 2147483647, got -1" in jobs["negative-replicas"]["message"]
    assert jobs["in-bad-quota"]["message"] == "quota upside-down is not usable: min of cpu (32) is more than its max (8)"
    unnamed = [job["message"] for job in output["jobs"] if not job["name"]]
    assert any("must be a mapping with at, runtime, manifest" in m for m in unnamed)
    assert any("manifest must be a mapping" in m for m in unnamed)
    warnings = result.stderr
    assert "ElasticQuota upside-down: min of cpu (32) is more than its max (8); not used" in warnings
    assert "unknown kind 'Widget'" in warnings
    assert "count must be a whole number >= 0, got -1" in warnings
    assert "needs exactly one of apply or delete" in warnings


def test_the_summary_shows_waits_utilisation_and_preemptions() -> None:
    text = simulate_text(EXAMPLES / "borrow-and-reclaim.yaml")
    lines = text.splitlines()
    assert lines[0] == "Simulated 3300 s: 12 jobs, 12 finished, 0 not finished, 4 preemptions."
    header = next(line for line in lines if line.startswith("quota"))
    assert header.split() == ["quota", "jobs", "admitted", "wait", "p50", "p90", "max", "preempted", "mean",
                              "used", "/", "min"]
    team_a = next(line for line in lines if line.startswith("team-a"))
    assert team_a.split()[:7] == ["team-a", "8", "8", "0.0", "0.0", "0.0", "4"]
    assert team_a.endswith("cpu 127%, memory 127%, nvidia.com/gpu 127%")
    assert any(line.startswith("Cluster utilisation (admitted / capacity, time average): ") for line in lines)


def test_the_summary_shows_wait_percentiles() -> None:
    text = simulate_text(EXAMPLES / "seed-team-a.yaml")
    row = next(line for line in text.splitlines() if line.startswith("pytorch-team-a")).split()
    # Waits 0, 0, 0, 0, 300 (the high-priority job), 510, 510, 510, 1020: nearest rank.
    assert row[1:3] == ["9", "9"]
    assert row[3:6] == ["300.0", "1020.0", "1020.0"]


def test_the_installed_command_runs_in_a_process(tmp_path: Path) -> None:
    """The console script itself, as a user types it."""
    command = [str(Path(sys.executable).parent / "koord-queue"), "simulate", "--json",
               str(EXAMPLES / "block-vs-priority.yaml")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["end"] == 320.0


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("- just\n- a list\n", "must be a YAML mapping"),
        ("nodes: [\n", "is not valid YAML"),
    ],
)
def test_an_unusable_trace_file_is_an_error_not_a_crash(tmp_path: Path, content: str, error: str) -> None:
    path = tmp_path / "trace.yaml"
    path.write_text(content)
    result = CliRunner().invoke(main, ["simulate", str(path)])
    assert result.exit_code == 2
    assert error in result.stderr


def test_a_missing_trace_file_is_an_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["simulate", str(tmp_path / "nowhere.yaml")])
    assert result.exit_code == 2
    assert "cannot read trace" in result.stderr


def test_the_same_trace_prints_the_same_bytes() -> None:
    runs = [CliRunner().invoke(main, ["simulate", "--json", str(EXAMPLES / "worked-example.yaml")]).stdout
            for _ in range(2)]
    assert runs[0] == runs[1]
